#!/usr/bin/env python3
"""Expert streaming under a memory limit (issue 8): tern --mem-budget against llama.cpp (mmap) on the same GGUF.

For budgets that hold 100%, 50% and 25% of the model's routed-expert bytes (on top of what `tern plan` says the
dense weights, state, buffers and program need), with a cold page cache (the file's pages dropped with
posix_fadvise) and a warm one, it measures decode tok/s (tg after an empty prompt) of
  - tern with --mem-budget B, and
  - llama.cpp (its C API via llama-cpp-python, mmap'd weights, as llama-bench times it),
each run inside a cgroup-v1 memory cgroup limited to the same B when the machine allows one (otherwise the
table says "no kernel limit"). tern's expert-cache hit rate and bytes read per token come from its --stats.
Also the fully resident speed (tern, no budget, warm), the reference for the goal "at 50% of expert bytes,
decode >= 50% of fully resident and ahead of llama.cpp under the same limit".

usage: python3 bench/streaming.py [--model out/bench/q35-real-4l.q4_0.gguf] [-t 2] [-n 32]
The default model is the 4-layer Q4_0 real-width file of bench/e2e.py (run `python3 bench/e2e.py --generate-only
--types q4_0 --layers 4` first). Writes OUT/streaming.json and OUT/streaming.md. No assertions on speed.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CGROUP_ROOT = "/sys/fs/cgroup/memory"


def log(msg):
    print(f"[streaming] {msg}", file=sys.stderr, flush=True)


def drop_file_cache(path):
    """Evicts the file's clean pages from the page cache (a cold start for both engines)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def warm_file_cache(path):
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


class Cgroup:
    """A cgroup-v1 memory cgroup limited to `limit` bytes; processes join it from preexec_fn."""

    def __init__(self, name, limit):
        self.path = os.path.join(CGROUP_ROOT, name)
        os.makedirs(self.path, exist_ok=True)
        with open(os.path.join(self.path, "memory.limit_in_bytes"), "w") as f:
            f.write(str(limit))
        swap = os.path.join(self.path, "memory.memsw.limit_in_bytes")
        if os.path.exists(swap):
            try:
                with open(swap, "w") as f:
                    f.write(str(limit))
            except OSError:
                pass

    def join(self):
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    def peak(self):
        with open(os.path.join(self.path, "memory.max_usage_in_bytes")) as f:
            return int(f.read())

    def remove(self):
        try:
            os.rmdir(self.path)
        except OSError:
            pass

    @staticmethod
    def available():
        try:
            probe = Cgroup(f"tern-probe-{os.getpid()}", 1 << 40)
            probe.remove()
            return True
        except OSError:
            return False


def run(cmd, cgroup=None):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=cgroup.join if cgroup else None)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return r, time.perf_counter() - t0


def tern_plan(tern, model, budget):
    cmd = [tern, "plan", "-m", model, "-c", "256", "--json"] + (["--mem-budget", str(budget)] if budget else [])
    r = subprocess.run(cmd, capture_output=True, text=True)
    if not r.stdout:
        sys.exit(f"error: {' '.join(cmd)}: {r.stderr}")
    return json.loads(r.stdout)


def tern_decode(args, budget, cgroup):
    cmd = [args.tern, "bench", "-m", args.model, "-c", "256", "-p", "0", "-n", str(args.n_gen), "-r", "1",
           "-t", str(args.threads), "--json", "--stats"] + (["--mem-budget", str(budget)] if budget else [])
    r, _ = run(cmd, cgroup)
    row = json.loads(r.stdout)[0]
    out = {"tok_s": row["tok_s_mean"]}
    m = re.search(r"expert cache: (\d+) of (\d+) experts per layer, (\d+) hits, (\d+) misses", r.stderr)
    if m:
        hits, misses = int(m.group(3)), int(m.group(4))
        out["slots"] = int(m.group(1))
        out["hit_rate"] = hits / max(1, hits + misses)
    m = re.search(r"expert cache: .* ([0-9.]+) (MiB|GiB|KiB) read", r.stderr)
    if m:
        scale = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[m.group(2)]
        out["read_bytes_per_token"] = float(m.group(1)) * scale / (2 * args.n_gen)  # warm-up + 1 timed run
    m = re.search(r"memory: resident .* now, ([0-9.]+) (MiB|GiB) peak", r.stderr)
    if m:
        out["peak_rss"] = float(m.group(1)) * (1 << 30 if m.group(2) == "GiB" else 1 << 20)
    return out


def llama_decode(args, cgroup):
    """llama.cpp in a child process (so the cgroup holds only it), timed by bench/llama_cpp_py.py's LlamaCpp, with
    its weights memory-mapped and not repacked: by default its CPU backend copies Q4_0 weights into repacked anonymous
    buffers, which a memory limit below the model size kills (exit -9), while mapped pages can be dropped and
    re-read."""
    code = ("import sys, json; sys.path.insert(0, sys.argv[1]); from llama_cpp_py import LlamaCpp; "
            "l = LlamaCpp(sys.argv[2], int(sys.argv[3]), 256, mmap_only=True); l.tg(8); "
            "print(json.dumps({'tok_s': l.tg(int(sys.argv[4]))})); l.close()")
    cmd = [sys.executable, "-c", code, os.path.join(ROOT, "bench"), args.model, str(args.threads), str(args.n_gen)]
    r, _ = run(cmd, cgroup)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "out", "bench", "q35-real-4l.q4_0.gguf"))
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-n", "--n-gen", type=int, default=32, help="decode tokens per timed run")
    ap.add_argument("--tern", default=os.path.join(ROOT, "build", "tern"))
    ap.add_argument("--fractions", default="1.0,0.5,0.25", help="expert-byte fractions the budgets hold")
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "bench"))
    args = ap.parse_args()
    if not os.path.exists(args.model):
        sys.exit(f"error: {args.model} not found (python3 bench/e2e.py --generate-only --types q4_0 --layers 4)")
    os.makedirs(args.out, exist_ok=True)

    free = tern_plan(args.tern, args.model, 0)
    fixed = free["dense"] + free["state"] + free["buffers"] + free["runtime"]
    experts = free["experts"]
    use_cgroup = Cgroup.available()
    log(f"model {args.model}: dense+state+buffers+program {fixed / 2**30:.2f} GiB, experts {experts / 2**30:.2f} GiB; "
        f"kernel memory limit: {'cgroup v1' if use_cgroup else 'none available'}")

    rows = []
    warm_file_cache(args.model)
    resident = tern_decode(args, 0, None)
    log(f"fully resident (no budget, warm): {resident['tok_s']:.2f} tok/s")
    for frac in [float(x) for x in args.fractions.split(",")]:
        budget = int(fixed + frac * experts) + (16 << 20)  # 16 MiB over the plan's fixed part: rounding room
        plan = tern_plan(args.tern, args.model, budget)
        for cache in ("cold", "warm"):
            row = {"fraction": frac, "budget": budget, "cache": cache, "slots": plan["expert_slots"],
                   "n_expert": plan["n_expert"]}
            for engine in ("tern", "llama.cpp"):
                cg = Cgroup(f"tern-bench-{os.getpid()}", budget) if use_cgroup else None
                if cache == "cold":
                    drop_file_cache(args.model)
                else:
                    warm_file_cache(args.model)
                try:
                    res = tern_decode(args, budget, cg) if engine == "tern" else llama_decode(args, cg)
                    if cg:
                        res["cgroup_peak"] = cg.peak()
                except RuntimeError as e:
                    first = str(e).splitlines()[0]
                    res = {"error": "killed (out of memory)" if "failed (-9)" in first else first[-120:]}
                finally:
                    if cg:
                        cg.remove()
                row[engine] = res
                log(f"{frac:.0%} of experts, {cache}: {engine} {res}")
            rows.append(row)

    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "model": os.path.basename(args.model), "threads": args.threads,
            "n_gen": args.n_gen, "fixed_bytes": fixed, "expert_bytes": experts, "cgroup": use_cgroup,
            "resident_tok_s": resident["tok_s"]}
    with open(os.path.join(args.out, "streaming.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    md = [f"Model `{meta['model']}`, {args.threads} threads, tg{args.n_gen}; fully resident tern (no budget, warm): "
          f"**{resident['tok_s']:.2f} tok/s**. Memory limit: "
          f"{'cgroup v1 memory.limit_in_bytes = the budget, for both engines' if use_cgroup else 'none (no cgroup)'}.",
          "",
          "| experts held | budget | cache | tern slots | tern tok/s | vs resident | hit rate | read/token | tern peak RSS "
          "| llama.cpp tok/s | tern/llama.cpp |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        t, l = r["tern"], r["llama.cpp"]
        ts, ls = t.get("tok_s"), l.get("tok_s")
        md.append("| {:.0%} | {:.2f} GiB | {} | {} / {} | {} | {} | {} | {} | {} | {} | {} |".format(
            r["fraction"], r["budget"] / 2**30, r["cache"], r["slots"] or r["n_expert"], r["n_expert"],
            f"{ts:.2f}" if ts else t.get("error", "-"),
            f"{ts / resident['tok_s']:.0%}" if ts else "-",
            f"{t['hit_rate']:.0%}" if "hit_rate" in t else "- (mapped)",
            f"{t['read_bytes_per_token'] / 2**20:.1f} MiB" if "read_bytes_per_token" in t else "-",
            f"{t['peak_rss'] / 2**30:.2f} GiB" if "peak_rss" in t else "-",
            f"{ls:.2f}" if ls else l.get("error", "-"),
            f"{ts / ls:.2f}x" if ts and ls else "-"))
    text = "\n".join(md) + "\n"
    with open(os.path.join(args.out, "streaming.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
