#!/usr/bin/env python3
"""Speculative decoding with the MTP block on one GGUF (default: the bundled model), tern against llama.cpp
(issue 16): acceptance and decode speed, with and without drafting, in one command.

Prompts: --prompts lines of models/tern-tiny-heldout.txt (held-out text the model never trained on), evenly spaced,
each cut to its first --prompt-words words. For each temperature (--temps, default 0 and 0.7) and each prompt, in
this order and --reps times over:

  tern --no-spec          tern run -p PROMPT -n N --temp T --seed S --no-spec
  tern k=1                ... --draft 1 --draft-fixed --draft-min-p 0 --stats   (one drafted token every step)
  tern adaptive           ... --stats                          (the default: up to 3 drafted tokens, adaptive)
  llama.cpp               llama-server, POST /completion {prompt, n_predict N, temperature T, seed S}
  llama.cpp k=1           llama-server --spec-type draft-mtp --spec-draft-n-max 1 --spec-draft-p-min 0, same request
  llama.cpp draft-mtp     llama-server --spec-type draft-mtp (its defaults: up to 3 drafted tokens, chained through
                          the one MTP block as tern does), same request

Speeds are each engine's own generation timing (tern's "generation: ... tok/s" line; llama-server's
timings.predicted_per_second), summed as total tokens / total seconds over prompts and repetitions. Acceptance =
accepted / drafted tokens, summed the same way (tern's --stats line; llama-server's timings.draft_n and
draft_n_accepted). At temperature 0 both engines accept a drafted token when it equals the model's greedy token;
at T > 0 both accept it when the token they sample equals it (tern's rule, the speculative-sampling rule for a
deterministic draft: accepted with probability p(draft)), so k=1 acceptances are comparable at both temperatures,
as expectations (the engines' random generators differ, so their samples do). Same threads (-t) for both; generation stops at --n tokens or an
end token in both (the same end token at T = 0: both run the same file greedily).

The llama.cpp tools come from bench/build_llamacpp.sh (cached). Needs build/tern (bash scripts/build.sh build).
Not a test: no assertions.

usage: python3 bench/spec_bundled.py [-m MODEL] [-t 1] [-n 128] [--prompts 8] [--reps 2] [--temps 0,0.7]
                                     [--out out/bench/spec]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from e2e import find_llama, log

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
GEN_RE = re.compile(r"generation: (\d+) tokens in ([0-9.]+) s \(([0-9.]+) tok/s\)")
SPEC_RE = re.compile(r"speculative decoding: (\d+) steps, (\d+) drafted, (\d+) accepted")


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def prompts(path, n, words):
    lines = [ln.strip() for ln in open(path, encoding="utf-8") if len(ln.split()) >= words + 4]
    step = max(1, len(lines) // n)
    return [" ".join(lines[i * step].split()[:words]) for i in range(n)]


def tern_run(args, prompt, temp, seed, extra):
    cmd = [args.tern, "run", "-m", args.model, "-p", prompt, "-n", str(args.n), "--temp", str(temp), "--seed",
           str(seed), "-t", str(args.threads)] + extra
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    m = GEN_RE.search(p.stderr)
    if not m:
        sys.exit(f"no generation line from: {' '.join(cmd)}\n{p.stderr}")
    n_tok = int(m.group(1))
    secs = n_tok / float(m.group(3)) if float(m.group(3)) > 0 else float(m.group(2))
    s = SPEC_RE.search(p.stderr)
    text = p.stdout[:-1] if p.stdout.endswith("\n") else p.stdout  # tern run ends its output with a newline
    out = {"tokens": n_tok, "seconds": secs, "text": text}
    if s:
        out.update(steps=int(s.group(1)), drafted=int(s.group(2)), accepted=int(s.group(3)))
    return out


class LlamaServer:
    def __init__(self, args, name, extra):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        cmd = [args.llama_server, "-m", args.model, "-t", str(args.threads), "-tb",
               str(args.threads), "-c", "4096", "-np", "1", "--port", str(self.port), "--host", "127.0.0.1",
               "--no-webui"]
        cmd += extra
        self.cmd = cmd
        self.log = open(os.path.join(args.out, f"llama-server-{name}.log"), "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"llama-server exited ({self.proc.returncode}); see {self.log.name}: {' '.join(cmd)}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        sys.exit(f"llama-server did not become healthy: {' '.join(cmd)}")

    def complete(self, prompt, n, temp, seed):
        body = json.dumps({"prompt": prompt, "n_predict": n, "temperature": temp, "seed": seed,
                           "cache_prompt": False, "top_k": 0, "top_p": 1.0, "min_p": 0.0}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/completion", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            res = json.load(r)
        t = res["timings"]
        return {"tokens": t["predicted_n"], "seconds": t["predicted_ms"] / 1000.0, "text": res["content"],
                "drafted": t.get("draft_n", 0), "accepted": t.get("draft_n_accepted", 0)}

    def close(self):
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def add(acc, r):
    for k in ("tokens", "seconds", "drafted", "accepted", "steps"):
        acc[k] = acc.get(k, 0) + r.get(k, 0)
    acc["runs"] = acc.get("runs", 0) + 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default=os.path.join(ROOT, "models", "tern-tiny-q35moe.gguf"))
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--prompt-words", type=int, default=8)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--temps", default="0,0.7")
    ap.add_argument("--tern", default=os.path.join(ROOT, "build", "tern"))
    ap.add_argument("--llama-bin", default="", help="folder with llama-server (default: bench/build_llamacpp.sh)")
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "bench", "spec"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    args.llama_server = find_llama(args, ("llama-server",))["llama-server"]
    ps = prompts(os.path.join(ROOT, "models", "tern-tiny-heldout.txt"), args.prompts, args.prompt_words)
    temps = [float(x) for x in args.temps.split(",")]
    configs = ["tern --no-spec", "tern k=1", "tern adaptive", "llama.cpp", "llama.cpp k=1", "llama.cpp draft-mtp"]
    acc = {(c, t): {} for c in configs for t in temps}
    greedy_same = {c: True for c in configs[1:]}
    loads = [loadavg()]
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    servers = {"llama.cpp": LlamaServer(args, "plain", []),
               "llama.cpp k=1": LlamaServer(args, "k1", ["--spec-type", "draft-mtp", "--spec-draft-n-max", "1",
                                                         "--spec-draft-p-min", "0"]),
               "llama.cpp draft-mtp": LlamaServer(args, "mtp", ["--spec-type", "draft-mtp"])}
    try:
        for rep in range(args.reps):
            for t in temps:
                for i, p in enumerate(ps):
                    seed = 1000 + i
                    base = tern_run(args, p, t, seed, ["--no-spec"])
                    add(acc[("tern --no-spec", t)], base)
                    for name, extra in (("tern k=1", ["--draft", "1", "--draft-fixed", "--draft-min-p", "0", "--stats"]),
                                        ("tern adaptive", ["--stats"])):
                        r = tern_run(args, p, t, seed, extra)
                        add(acc[(name, t)], r)
                        if t == 0 and r["text"] != base["text"]:
                            greedy_same[name] = False
                    for name, srv in servers.items():
                        r = srv.complete(p, args.n, t, seed)
                        add(acc[(name, t)], r)
                        if t == 0 and r["text"] != base["text"]:
                            greedy_same[name] = False
                    loads.append(loadavg())
                log(f"rep {rep + 1}/{args.reps} T={t}: done (load {loads[-1]:.2f})")
    finally:
        for s in servers.values():
            s.close()
    rows = []
    for t in temps:
        off = acc[("tern --no-spec", t)]
        lc = acc[("llama.cpp", t)]
        for c in configs:
            a = acc[(c, t)]
            tps = a["tokens"] / a["seconds"]
            rows.append({
                "temp": t, "config": c, "tokens": a["tokens"], "tok_s": tps,
                "vs_tern_off": tps / (off["tokens"] / off["seconds"]),
                "vs_llamacpp_off": tps / (lc["tokens"] / lc["seconds"]),
                "drafted": a.get("drafted", 0), "accepted": a.get("accepted", 0),
                "acceptance": a["accepted"] / a["drafted"] if a.get("drafted") else None,
                "tokens_per_step": a["tokens"] / a["steps"] if a.get("steps") else None})
    meta = {"started": started, "model": os.path.relpath(args.model, ROOT), "threads": args.threads, "n": args.n,
            "prompts": ps, "reps": args.reps, "load_min": min(loads), "load_max": max(loads),
            "greedy_output_equal_to_tern_no_spec": greedy_same,
            "tern_commit": subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                                          text=True).stdout.strip(),
            "llama_server": servers["llama.cpp draft-mtp"].cmd}
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=2)
    lines = [f"{meta['model']}, {args.threads} thread(s), {len(ps)} prompts x {args.reps} reps, up to {args.n} "
             f"tokens each, load average {meta['load_min']:.2f}-{meta['load_max']:.2f}, tern {meta['tern_commit']}",
             "", "| T | engine | tok/s | vs tern --no-spec | vs llama.cpp (no spec) | acceptance | tokens/step |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        acc_s = f"{100 * r['acceptance']:.1f}% ({r['accepted']}/{r['drafted']})" if r["acceptance"] is not None else "-"
        tps_s = f"{r['tokens_per_step']:.2f}" if r["tokens_per_step"] else "-"
        lines.append(f"| {r['temp']:g} | {r['config']} | {r['tok_s']:.0f} | {r['vs_tern_off']:.2f}x | "
                     f"{r['vs_llamacpp_off']:.2f}x | {acc_s} | {tps_s} |")
    lines += ["", "greedy (T = 0) output equal to tern --no-spec: " +
              ", ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in greedy_same.items())]
    md = "\n".join(lines)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
