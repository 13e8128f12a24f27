#!/usr/bin/env python3
"""End-to-end CPU benchmark of tern against llama.cpp (issue 7) in one command.

1. Generates random-weight qwen35moe GGUFs at Qwen3.5-35B-A3B's real widths (tools/make_bench_model.py: vocab
   248320, untied output) with 4 and 8 layers (3 DeltaNet : 1 attention): Q8_0 written by gguf-py, then Q4_0 and
   Q4_K_M made from it by llama.cpp's quantizer (llama-cpp-python). Files already in --out are reused.
2. Measures the memory read bandwidth (build/tern_membw: best of several multi-threaded streaming reads).
3. Per model and test (pp512, tg128, tg128 @ d512), runs tern (`tern bench --json`) and then llama.cpp (its C API
   through llama-cpp-python, in this process, timed like llama-bench) with the same thread count: each engine
   gets one warm-up and --reps timed repetitions, tern and llama.cpp alternating test by test.
4. Prints and writes (OUT/results.json, OUT/results.md): tok/s of both, tern/llama.cpp, the weight bytes one
   decode token reads (`tern info --json` bytes_per_token), decode as a fraction of the roofline
   (bytes per token / bandwidth), and the per-layer decode cost (8-layer minus 4-layer, per layer) against its
   bandwidth floor.

usage: python3 bench/e2e.py [-t 2] [-r 2] [--types q4_0,q8_0,q4_k_m] [--layers 4,8] [--out out/bench]
Needs a Release build (scripts/build.sh build) for build/tern and build/tern_membw. Not a test: no assertions on
speed.
"""
from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
TYPES = ("q4_0", "q8_0", "q4_k_m")
VOCAB = 248320


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def model_path(out, n_layer, qtype):
    return os.path.join(out, f"q35-real-{n_layer}l.{qtype}.gguf")


def ensure_models(out, layers, types, threads):
    """Writes the missing GGUFs (to a temporary name first, so an interrupted run never leaves a file that looks
    finished)."""
    os.makedirs(out, exist_ok=True)
    for n_layer in layers:
        base = model_path(out, n_layer, "q8_0")
        if not os.path.exists(base):
            log(f"generating {base} (random weights, gguf-py)")
            tmp = base + ".part"
            subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make_bench_model.py"), tmp, "--layers",
                            str(n_layer), "--vocab", str(VOCAB), "--type", "q8_0"], check=True)
            os.replace(tmp, base)
        for qtype in types:
            path = model_path(out, n_layer, qtype)
            if os.path.exists(path):
                continue
            log(f"quantizing {path} with llama.cpp's quantizer")
            quantize(base, path, qtype, threads)


def quantize(src, dst, qtype, threads):
    import llama_cpp as L

    ftype = {"q4_0": L.LLAMA_FTYPE_MOSTLY_Q4_0, "q4_k_m": L.LLAMA_FTYPE_MOSTLY_Q4_K_M}[qtype]
    p = L.llama_model_quantize_default_params()
    p.ftype = ftype
    p.nthread = threads
    p.allow_requantize = True  # the source is Q8_0 (random weights: requantization error does not matter here)
    tmp = dst + ".part"
    rc = L.llama_model_quantize(src.encode(), tmp.encode(), ctypes.byref(p))
    if rc != 0:
        sys.exit(f"error: llama_model_quantize {src} -> {dst} failed ({rc})")
    os.replace(tmp, dst)


def membw(exe, threads):
    out = subprocess.run([exe, "-t", str(threads), "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def tern_info(tern, path):
    return json.loads(subprocess.run([tern, "info", path, "--json"], check=True, capture_output=True,
                                     text=True).stdout)


def tern_bench(tern, path, threads, reps, n_prompt, n_gen, depth):
    cmd = [tern, "bench", "-m", path, "-t", str(threads), "-r", str(reps), "-p", str(n_prompt), "-n", str(n_gen),
           "-d", str(depth), "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed:\n{r.stderr}")
    rows = json.loads(r.stdout)
    if len(rows) != 1:
        sys.exit(f"error: {' '.join(cmd)}: expected one test, got {rows}")
    return rows[0]


class LlamaCpp:
    """llama.cpp through its C API (llama-cpp-python's ctypes bindings), timed the way llama-bench times: pp = one
    llama_decode of the whole prompt, tg = one llama_decode per token, a depth = a prompt decoded first, untimed;
    llama_synchronize before the clock stops; the memory (KV cache and recurrent state) cleared before each run."""

    def __init__(self, path, threads, n_ctx, mmap_only=False):
        import llama_cpp as L

        self.L = L
        L.llama_backend_init()
        self._log_cb = L.llama_log_callback(lambda level, text, user: None)  # keep a reference: C holds it
        L.llama_log_set(self._log_cb, ctypes.c_void_p())
        mp = L.llama_model_default_params()
        if mmap_only:  # weights stay in the page cache (no repacked copies), so a memory limit can reclaim them
            mp.load_mode = L.LLAMA_LOAD_MODE_MMAP
            mp.use_extra_bufts = False
        self.model = L.llama_model_load_from_file(path.encode(), mp)
        if not self.model:
            sys.exit(f"error: llama.cpp cannot load {path}")
        cp = L.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = 512
        cp.n_ubatch = 512
        cp.n_threads = threads
        cp.n_threads_batch = threads
        cp.no_perf = True
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            sys.exit(f"error: llama.cpp cannot create a context for {path}")
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        self.rng = random.Random(1234)

    def close(self):
        self.L.llama_free(self.ctx)
        self.L.llama_model_free(self.model)

    def _decode(self, tokens):
        arr = (self.L.llama_token * len(tokens))(*tokens)
        rc = self.L.llama_decode(self.ctx, self.L.llama_batch_get_one(arr, len(tokens)))
        if rc != 0:
            sys.exit(f"error: llama_decode returned {rc}")

    def _tokens(self, n):
        return [self.rng.randrange(self.n_vocab) for _ in range(n)]

    def _start(self, depth):
        self.L.llama_memory_clear(self.L.llama_get_memory(self.ctx), True)
        for i in range(0, depth, 512):
            self._decode(self._tokens(min(512, depth - i)))
        self.L.llama_synchronize(self.ctx)

    def pp(self, n, depth=0):
        self._start(depth)
        toks = self._tokens(n)
        t0 = time.perf_counter()
        for i in range(0, n, 512):
            self._decode(toks[i:i + 512])
        self.L.llama_synchronize(self.ctx)
        return n / (time.perf_counter() - t0)

    def tg(self, n, depth=0):
        self._start(depth)
        toks = self._tokens(n)
        t0 = time.perf_counter()
        for t in toks:
            self._decode([t])
        self.L.llama_synchronize(self.ctx)
        return n / (time.perf_counter() - t0)


def mean_sd(v):
    return statistics.fmean(v), (statistics.stdev(v) if len(v) > 1 else 0.0)


def run_model(args, path, bw_gbs):
    info = tern_info(args.tern, path)
    bpt = info["bytes_per_token"]
    tests = [("pp", args.n_prompt, 0, f"pp{args.n_prompt}"), ("tg", args.n_gen, 0, f"tg{args.n_gen}"),
             ("tg", args.n_gen, args.depth, f"tg{args.n_gen} @ d{args.depth}")]
    llama = LlamaCpp(path, args.threads, args.depth + max(args.n_prompt, args.n_gen) + 16)
    res = {"model": os.path.basename(path), "n_layer": info["n_layer"], "bytes_per_token": bpt,
           "file_bytes": info["file_bytes"], "tests": {}}
    try:
        for kind, n, depth, name in tests:
            t = tern_bench(args.tern, path, args.threads, args.reps, n if kind == "pp" else 0,
                           n if kind == "tg" else 0, depth)
            if t["test"] != name:
                sys.exit(f"error: tern bench named the test {t['test']!r}, expected {name!r}")
            fn = llama.pp if kind == "pp" else llama.tg
            fn(n, depth)  # warm-up, as tern bench does one
            lv = [fn(n, depth) for _ in range(args.reps)]
            lm, ls = mean_sd(lv)
            row = {"tern": t["tok_s_mean"], "tern_sd": t["tok_s_stddev"], "llama": lm, "llama_sd": ls,
                   "ratio": t["tok_s_mean"] / lm}
            if kind == "tg":
                roof = bw_gbs * 1e9 / bpt
                row.update(roofline_tok_s=roof, tern_roofline=t["tok_s_mean"] / roof, llama_roofline=lm / roof)
            res["tests"][name] = row
            log(f"  {res['model']:28s} {name:14s} tern {row['tern']:8.2f} ± {row['tern_sd']:.2f}   "
                f"llama.cpp {lm:8.2f} ± {ls:.2f}   ratio {row['ratio']:.2f}")
    finally:
        llama.close()
    return res


def per_layer(results, layers, name, bw_gbs):
    """(8-layer minus 4-layer) time per token, per layer, against the bandwidth floor of the bytes it adds."""
    lo, hi = min(layers), max(layers)
    out = {}
    if lo == hi:
        return out
    for qtype in {r["model"].split(".")[1] for r in results}:
        a = next((r for r in results if r["n_layer"] == lo and r["model"].endswith(f".{qtype}.gguf")), None)
        b = next((r for r in results if r["n_layer"] == hi and r["model"].endswith(f".{qtype}.gguf")), None)
        if not a or not b or name not in a["tests"]:
            continue
        dl = hi - lo
        bytes_layer = (b["bytes_per_token"] - a["bytes_per_token"]) / dl
        floor_ms = bytes_layer / (bw_gbs * 1e9) * 1e3
        row = {"bytes_per_layer": bytes_layer, "floor_ms": floor_ms}
        for eng in ("tern", "llama"):
            ms = (1 / b["tests"][name][eng] - 1 / a["tests"][name][eng]) / dl * 1e3
            row[f"{eng}_ms"] = ms
            row[f"{eng}_vs_floor"] = ms / floor_ms
        out[qtype] = row
    return out


def markdown(meta, results, layer_rows, args):
    tg, tgd, pp = f"tg{args.n_gen}", f"tg{args.n_gen} @ d{args.depth}", f"pp{args.n_prompt}"
    lines = [f"Memory read bandwidth: **{meta['bandwidth_gbs']:.2f} GB/s** (tern_membw, {args.threads} threads, best "
             f"of {meta['membw']['runs']}); {args.threads} threads for both engines; {args.reps} repetitions after "
             f"one warm-up; load average {meta['loadavg_start']} at the start, {meta['loadavg_end']} at the end.", "",
             "| model | MB/token | test | tern tok/s | llama.cpp tok/s | tern/llama.cpp | tern roofline | "
             "llama.cpp roofline |", "|---|---:|---|---:|---:|---:|---:|---:|"]
    for r in results:
        for name in (tg, tgd, pp):
            t = r["tests"][name]
            roof = (f"{100 * t['tern_roofline']:.0f}%", f"{100 * t['llama_roofline']:.0f}%") if "roofline_tok_s" in t \
                else ("", "")
            lines.append(f"| {r['model'].removesuffix('.gguf')} | {r['bytes_per_token'] / 1e6:.0f} | {name} | "
                         f"{t['tern']:.2f} ± {t['tern_sd']:.2f} | {t['llama']:.2f} ± {t['llama_sd']:.2f} | "
                         f"{t['ratio']:.2f} | {roof[0]} | {roof[1]} |")
    lines += ["", f"Per-layer decode cost ({tg}; ({max(args.layers)}-layer − {min(args.layers)}-layer time per "
              f"token) / {max(args.layers) - min(args.layers)}) against its bandwidth floor (the bytes one more "
              "layer adds per token / bandwidth):", "",
              "| type | MB/layer | floor ms | tern ms | tern / floor | llama.cpp ms | llama.cpp / floor |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for qtype in sorted(layer_rows):
        x = layer_rows[qtype]
        lines.append(f"| {qtype} | {x['bytes_per_layer'] / 1e6:.1f} | {x['floor_ms']:.3f} | {x['tern_ms']:.3f} | "
                     f"{x['tern_vs_floor']:.2f} | {x['llama_ms']:.3f} | {x['llama_vs_floor']:.2f} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-t", "--threads", type=int, default=2, help="threads for both engines")
    ap.add_argument("-r", "--reps", type=int, default=2, help="timed repetitions of each test (after one warm-up)")
    ap.add_argument("--types", default=",".join(TYPES), help=f"comma-separated, from {','.join(TYPES)}")
    ap.add_argument("--layers", default="4,8", help="comma-separated layer counts (multiples of 4)")
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "bench"), help="GGUFs and results (reused)")
    ap.add_argument("--tern", default=os.path.join(ROOT, "build", "tern"))
    ap.add_argument("--membw", default=os.path.join(ROOT, "build", "tern_membw"))
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("-d", "--depth", type=int, default=512, help="prompt tokens before the second decode test")
    ap.add_argument("--generate-only", action="store_true", help="write the GGUFs and stop")
    args = ap.parse_args()
    types = [t for t in args.types.split(",") if t]
    bad = [t for t in types if t not in TYPES]
    if bad or not types:
        ap.error(f"--types: unknown {bad}; choose from {','.join(TYPES)}")
    try:
        args.layers = sorted({int(x) for x in args.layers.split(",") if x})
    except ValueError:
        ap.error("--layers takes comma-separated integers")
    if not args.layers or any(n < 1 or n % 4 for n in args.layers):
        ap.error("--layers: positive multiples of 4 (the 3:1 DeltaNet:attention pattern)")
    if args.threads < 1 or args.reps < 1 or args.n_prompt < 1 or args.n_gen < 1 or args.depth < 1:
        ap.error("-t, -r, -p, -n and -d must be >= 1")
    for exe in ([] if args.generate_only else [args.tern, args.membw]):
        if not os.access(exe, os.X_OK):
            sys.exit(f"error: {exe} not found; build first: bash scripts/build.sh build")
    try:
        import llama_cpp
    except ImportError:
        sys.exit("error: llama-cpp-python is needed (pip install llama-cpp-python)")

    ensure_models(args.out, args.layers, [t for t in types if t != "q8_0"], args.threads)
    if args.generate_only:
        return
    loadavg_start = " ".join(f"{x:.1f}" for x in os.getloadavg())
    bw = membw(args.membw, args.threads)
    bw_gbs = bw["read_gbs_best"]
    log(f"memory read bandwidth: {bw_gbs:.2f} GB/s best ({bw['read_gbs_median']:.2f} median), {args.threads} threads")
    t_start = time.time()
    results = []
    for qtype in types:
        for n_layer in args.layers:
            results.append(run_model(args, model_path(args.out, n_layer, qtype), bw_gbs))
            md = write_results(args, results, bw, loadavg_start, t_start, llama_cpp.__version__)
    print(md)
    log(f"wrote {os.path.join(args.out, 'results.json')} and results.md ({round(time.time() - t_start)} s)")


def write_results(args, results, bw, loadavg_start, t_start, llama_version):
    """Writes OUT/results.json and OUT/results.md for the models measured so far; returns the markdown."""
    bw_gbs = bw["read_gbs_best"]
    layer_rows = {name: per_layer(results, args.layers, name, bw_gbs)
                  for name in (f"tg{args.n_gen}", f"tg{args.n_gen} @ d{args.depth}")}
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "host": platform.node(),
            "cpu": platform.processor() or platform.machine(), "threads": args.threads, "reps": args.reps,
            "bandwidth_gbs": bw_gbs, "membw": bw, "llama_cpp_python": llama_version,
            "loadavg_start": loadavg_start, "loadavg_end": " ".join(f"{x:.1f}" for x in os.getloadavg()),
            "seconds": round(time.time() - t_start), "command": " ".join([os.path.relpath(sys.argv[0], ROOT)] +
                                                                         sys.argv[1:])}
    md = markdown(meta, results, layer_rows[f"tg{args.n_gen}"], args)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"meta": meta, "models": results, "per_layer": layer_rows}, f, indent=1)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(md)
    return md


if __name__ == "__main__":
    main()
