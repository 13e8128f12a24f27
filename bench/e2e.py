#!/usr/bin/env python3
"""End-to-end CPU benchmark of tern against llama.cpp's own llama-bench (issues 7 and 14) in one command.

1. Generates random-weight qwen35moe GGUFs at Qwen3.5-35B-A3B's real widths (tools/make_bench_model.py: vocab
   248320, untied output) with 4 and 8 layers (3 DeltaNet : 1 attention): Q8_0 written by gguf-py, then Q4_0 and
   Q4_K_M made from it by llama.cpp's llama-quantize. Files already in --out are reused. --small: 32 experts and a
   4096-token vocabulary instead (a smoke run; its numbers say nothing about the real model).
2. Measures the memory read bandwidth (build/tern_membw) and the int8 / fp32 compute peak (build/tern_peak).
3. Per model and test (pp512, tg128, tg128 @ d4096), runs `tern bench --json` and then `llama-bench -o json` on the
   same file with the same threads, alternating test by test; each does one warm-up (tern bench: one full run of
   the test; llama-bench: its own) and -r timed repetitions. /proc/loadavg is read right before each run.
4. Prints and writes (OUT/results.json, OUT/results.md): tok/s of both, tern/llama.cpp, decode as a fraction of the
   bandwidth roofline, prefill as a fraction of the int8 compute roofline (formulas in the output), and the
   per-layer decode cost (8-layer minus 4-layer, per layer) against its bandwidth floor.

The llama.cpp tools come from bench/build_llamacpp.sh (run here when --llama-bin is not given; cached after the
first build). Needs a Release build (bash scripts/build.sh build) for build/tern, build/tern_membw, build/tern_peak.
Not a test: no assertions on speed.

--arch glm-dsa (issue 17): random-weight GLM-5 files at GLM-5's published widths instead (tools/make_bench_model.py
--arch glm-dsa: vocab 154880, untied output, N layers = 3 leading dense + N-3 MoE; default 4 layers, Q8_0 and
Q4_K_M). Decode's bytes per token then count the MLA latent cache rows the attention reads (top-k of them at most:
the indexer's selection) and the indexer keys every token's indexer reads (all of them); see the notes printed
with the table.

usage: python3 bench/e2e.py [-t 2] [-r 3] [--types q4_0,q8_0,q4_k_m] [--layers 4,8] [--out out/bench] [--small]
                            [--arch qwen35moe|glm-dsa]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
TYPES = ("q4_0", "q8_0", "q4_k_m")
QUANTIZE_NAME = {"q4_0": "Q4_0", "q4_k_m": "Q4_K_M"}
VOCAB = 248320
SMALL_VOCAB, SMALL_EXPERTS = 4096, 32
KV_BYTES = 2  # f16: the KV cache type of both engines by default (tern --kv-type, llama-bench -ctk/-ctv)
LLAMA_TOOLS = ("llama-bench", "llama-quantize")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def loadavg():
    """/proc/loadavg's 1, 5 and 15 minute averages and running/total tasks, as one string."""
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:4])


def busy_cores(seconds=3.0):
    """CPUs' worth of non-idle time over `seconds` (/proc/stat): what other processes use right now, unlike the
    1-minute load average, which still carries the previous benchmark run's own threads for a minute or two."""
    def snap():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]  # total, idle + iowait
    t0, i0 = snap()
    time.sleep(seconds)
    t1, i1 = snap()
    return (os.cpu_count() or 1) * (1 - (i1 - i0) / max(1, t1 - t0))


def wait_quiet(args):
    """With --quiet-below X: waits (polling every 30 s) until other processes use under X CPUs; returns the busy
    CPUs measured last. Without it: measures once and returns that."""
    while True:
        b = busy_cores()
        if args.quiet_below is None or b < args.quiet_below:
            return b
        log(f"  waiting: {b:.2f} CPUs busy with other work (load {loadavg()}), above --quiet-below "
            f"{args.quiet_below}; polling every 30 s")
        time.sleep(30)


def model_path(args, n_layer, qtype):
    if args.arch == "glm-dsa":
        return os.path.join(args.out, f"glm5-real-{n_layer}l.{qtype}.gguf")
    return os.path.join(args.out, f"q35-{'small' if args.small else 'real'}-{n_layer}l.{qtype}.gguf")


def find_llama(args, names=LLAMA_TOOLS):
    """name -> path of the llama.cpp tools `names` (checked executable): from --llama-bin, else from
    bench/build_llamacpp.sh (builds once). Also used by bench/spec_bundled.py and tools/record_spec_acceptance.py."""
    if args.llama_bin:
        tools = {t: os.path.join(args.llama_bin, t) for t in names}
    else:
        r = subprocess.run(["bash", os.path.join(ROOT, "bench", "build_llamacpp.sh")], stdout=subprocess.PIPE,
                           text=True)
        if r.returncode != 0:
            sys.exit("error: bench/build_llamacpp.sh failed")
        tools = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
    for t in names:
        if not os.access(tools.get(t, ""), os.X_OK):
            sys.exit(f"error: {t} not found ({tools.get(t)}); build it: bash bench/build_llamacpp.sh")
    info = os.path.join(os.path.dirname(os.path.dirname(tools[names[0]])), "..", "build-info.txt")
    tools["build_info"] = open(info).read().strip() if os.path.exists(info) else ""
    return tools


def ensure_models(args, types, quantize_exe):
    """Writes the missing GGUFs (to a temporary name first, so an interrupted run never leaves a file that looks
    finished)."""
    os.makedirs(args.out, exist_ok=True)
    for n_layer in args.layers:
        base = model_path(args, n_layer, "q8_0")
        if not os.path.exists(base):
            log(f"generating {base} (random weights, gguf-py)")
            tmp = base + ".part"
            cmd = [sys.executable, os.path.join(ROOT, "tools", "make_bench_model.py"), tmp, "--layers", str(n_layer),
                   "--vocab", str(SMALL_VOCAB if args.small else VOCAB), "--type", "q8_0"]
            if args.arch == "glm-dsa":  # GLM-5's vocabulary (154880) is the tool's default for the arch
                cmd = cmd[:5] + ["--arch", "glm-dsa"]
            if args.small:
                cmd += ["--experts", str(SMALL_EXPERTS)]
            subprocess.run(cmd, check=True)
            os.replace(tmp, base)
        for qtype in types:
            path = model_path(args, n_layer, qtype)
            if qtype == "q8_0" or os.path.exists(path):
                continue
            log(f"quantizing {path} with llama-quantize")
            tmp = path + ".part"
            t0 = time.time()
            # --allow-requantize: the source is Q8_0 (random weights: requantization error does not matter here)
            r = subprocess.run([quantize_exe, "--allow-requantize", base, tmp, QUANTIZE_NAME[qtype],
                                str(args.threads)], capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"error: llama-quantize {base} -> {path} failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
            os.replace(tmp, path)
            log(f"  done in {time.time() - t0:.0f} s")


def run_json(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    try:
        return json.loads(r.stdout)
    except json.JSONDecodeError:
        sys.exit(f"error: {' '.join(cmd)} printed no JSON:\n{r.stdout[-2000:]}")


def geometry(path, tern_exe):
    """What the rooflines need, from `tern info --json` (weight bytes per decode token) and the GGUF's tensors
    and keys (gguf-py): state bytes, KV row bytes and weight MACs per token."""
    import gguf

    info = run_json([tern_exe, "info", path, "--json"])
    r = gguf.GGUFReader(path)
    arch = info["architecture"]

    def key(name):
        f = r.fields.get(f"{arch}.{name}")
        if f is None:
            sys.exit(f"error: {path}: key {arch}.{name} missing")
        return int(f.parts[f.data[0]][0])

    names = {t.name for t in r.tensors}
    n_layer = info["n_layer"]
    if arch == "glm-dsa":
        n_used, n_expert = key("expert_used_count"), key("expert_count")
        body = head = 0
        for t in r.tensors:
            if t.name.startswith("blk.") and len(t.shape) >= 2:
                body += int(t.n_elements) * (n_used / n_expert if "_exps." in t.name else 1)
            elif t.name == "output.weight":
                head = int(t.n_elements)
        # every layer of GLM-5 runs its own indexer (no indexer.types key, or all true); GLM-5.2 shared layers
        # (false) reuse a full layer's top-k and store no indexer keys
        f = r.fields.get(f"{arch}.attention.indexer.types")
        full = [bool(f.parts[i][0]) for i in f.data] if f is not None else [True] * n_layer
        return {"arch": arch, "n_layer": n_layer, "n_attn": n_layer, "n_deltanet": 0, "n_indexer": sum(full),
                "weight_bytes_per_token": info["bytes_per_token"], "file_bytes": info["file_bytes"],
                "recurrent_state_bytes": 0, "conv_state_bytes": 0,
                "kv_row_bytes": (key("attention.kv_lora_rank") + key("rope.dimension_count")) * KV_BYTES,
                "idx_row_bytes": key("attention.indexer.key_length") * KV_BYTES,
                "top_k": key("attention.indexer.top_k"), "macs_body": body, "macs_head": head}
    n_attn = sum(f"blk.{i}.attn_q.weight" in names for i in range(n_layer))
    n_delta = sum(f"blk.{i}.ssm_a" in names for i in range(n_layer))
    n_used, n_expert = key("expert_used_count"), key("expert_count")
    body = head = 0
    for t in r.tensors:
        if t.name.startswith("blk.") and len(t.shape) >= 2:  # weight matrices (and the conv kernel), not norms
            body += int(t.n_elements) * (n_used / n_expert if "_exps." in t.name else 1)
        elif t.name == "output.weight" or (t.name == "token_embd.weight" and "output.weight" not in names):
            head = int(t.n_elements)
    state_layer = conv_layer = kv_row = 0
    if n_delta:
        head_k, inner, v_heads, kernel = (key("ssm.state_size"), key("ssm.inner_size"), key("ssm.time_step_rank"),
                                          key("ssm.conv_kernel"))
        conv_dim = 2 * key("ssm.group_count") * head_k + inner
        state_layer = v_heads * head_k * (inner // v_heads) * 4  # [n_v_heads, head_k, head_v] f32
        conv_layer = (kernel - 1) * conv_dim * 4                  # [conv_dim, kernel - 1] f32
    if n_attn:
        kv_row = key("attention.head_count_kv") * (key("attention.key_length") + key("attention.value_length")) \
            * KV_BYTES
    return {"n_layer": n_layer, "n_attn": n_attn, "n_deltanet": n_delta, "weight_bytes_per_token":
            info["bytes_per_token"], "file_bytes": info["file_bytes"], "recurrent_state_bytes": state_layer,
            "conv_state_bytes": conv_layer, "kv_row_bytes": kv_row, "macs_body": body, "macs_head": head}


def decode_bytes(g, n_gen, depth):
    """Bytes one decode token reads and writes: weights + DeltaNet state (read and written) + KV rows (the mean
    context of the n_gen tokens read, one row written). glm-dsa: per layer the latent rows attention reads (at most
    top_k: the indexer's selection) and the indexer keys (every row), averaged over the n_gen tokens, one row of
    each written; `kv_dense` is what attention over every latent row would read instead."""
    if g.get("arch") == "glm-dsa":
        ctxs = [depth + i + 1 for i in range(n_gen)]  # rows a token at this step attends over (itself included)
        lat = sum(min(c, g["top_k"]) for c in ctxs) / n_gen
        mean_ctx = sum(ctxs) / n_gen
        kv = g["n_attn"] * g["kv_row_bytes"] * (lat + 1) + g["n_indexer"] * g["idx_row_bytes"] * (mean_ctx + 1)
        kv_dense = g["n_attn"] * g["kv_row_bytes"] * (mean_ctx + 1)
        return {"weights": g["weight_bytes_per_token"], "state": 0, "kv": kv, "kv_dense": kv_dense,
                "total": g["weight_bytes_per_token"] + kv}
    state = 2 * g["n_deltanet"] * (g["recurrent_state_bytes"] + g["conv_state_bytes"])
    kv = g["n_attn"] * g["kv_row_bytes"] * (depth + (n_gen + 1) / 2 + 1)
    return {"weights": g["weight_bytes_per_token"], "state": state, "kv": kv,
            "total": g["weight_bytes_per_token"] + state + kv}


def prefill_macs(g, n_prompt):
    """Weight MACs per prompt token: every layer's matrices (routed experts at n_used/n_expert), the LM head once
    per prompt (logits of the last token only)."""
    return g["macs_body"] + g["macs_head"] / n_prompt


def tern_bench(args, path, n_prompt, n_gen, depth, threads=None):
    rows = run_json([args.tern, "bench", "-m", path, "-t", str(threads or args.threads), "-r", str(args.reps), "-p",
                     str(n_prompt), "-n", str(n_gen), "-d", str(depth), "--json"] +
                    (["--isa", args.isa] if args.isa else []))
    if len(rows) != 1:
        sys.exit(f"error: tern bench: expected one test, got {rows}")
    return {"tok_s": rows[0]["tok_s_mean"], "sd": rows[0]["tok_s_stddev"], "test": rows[0]["test"]}


def llama_bench(args, exe, path, n_prompt, n_gen, depth):
    rows = run_json([exe, "-m", path, "-t", str(args.threads), "-r", str(args.reps), "-p", str(n_prompt), "-n",
                     str(n_gen), "-d", str(depth), "-o", "json"])
    if len(rows) != 1:
        sys.exit(f"error: llama-bench: expected one test, got {len(rows)}")
    x = rows[0]
    if (x["n_prompt"], x["n_gen"], x["n_depth"], x["n_threads"]) != (n_prompt, n_gen, depth, args.threads):
        sys.exit(f"error: llama-bench ran another test than asked: {x}")
    return {"tok_s": x["avg_ts"], "sd": x["stddev_ts"], "samples": x.get("samples_ts"),
            "config": {k: x.get(k) for k in ("build_commit", "cpu_info", "backends", "n_batch", "n_ubatch", "type_k",
                                             "type_v", "flash_attn", "repack", "load_mode")}}


def tests(args):
    """(kind, n_prompt, n_gen, depth, name) in llama-bench's naming; --tests picks pp, tg and/or tgd."""
    every = {"pp": ("pp", args.n_prompt, 0, 0, f"pp{args.n_prompt}"), "tg": ("tg", 0, args.n_gen, 0, f"tg{args.n_gen}"),
             "tgd": ("tg", 0, args.n_gen, args.depth, f"tg{args.n_gen} @ d{args.depth}")}
    return [every[k] for k in every if k in args.tests]


def probe_bw(args, threads=None):
    """The memory read bandwidth now (tern_membw, best of 5): the host's bandwidth moves by 30% over a day on a
    shared VM, so each decode test is judged against probes taken right before and after it, not one at the start."""
    return run_json([args.membw, "-t", str(threads or args.threads), "-r", "5", "--json"])["read_gbs_best"]


def run_model(args, path, llama, bw_gbs, int8_gmacs):
    g = geometry(path, args.tern)
    res = {"model": os.path.basename(path), **g, "tests": {}}
    for kind, n_prompt, n_gen, depth, name in tests(args):
        busy_tern = wait_quiet(args)
        load_tern = loadavg()
        bw_before = probe_bw(args) if kind == "tg" else None
        t = tern_bench(args, path, n_prompt, n_gen, depth)
        bw_after = probe_bw(args) if kind == "tg" else None
        if t["test"] != name:
            sys.exit(f"error: tern bench named the test {t['test']!r}, expected {name!r}")
        busy_llama = wait_quiet(args)
        load_llama = loadavg()
        lb = llama_bench(args, llama["llama-bench"], path, n_prompt, n_gen, depth)
        res.setdefault("llama_bench_config", lb.pop("config"))
        row = {"tern": t["tok_s"], "tern_sd": t["sd"], "llama": lb["tok_s"], "llama_sd": lb["sd"],
               "llama_samples": lb["samples"], "ratio": t["tok_s"] / lb["tok_s"], "load_tern": load_tern,
               "load_llama": load_llama, "busy_tern": busy_tern, "busy_llama": busy_llama}
        if kind == "tg":
            # The roofline of this test: the better of the probes either side of tern's run (the start-of-run
            # figure bw_gbs stays in the header; llama.cpp's run follows tern's, its share of the same window).
            b = decode_bytes(g, n_gen, depth)
            bw_row = max(bw_before, bw_after)
            row.update(roof="bandwidth", bytes_per_token=b, bw_gbs=bw_row, bw_before=bw_before, bw_after=bw_after,
                       roof_tok_s=bw_row * 1e9 / b["total"])
        else:
            macs = prefill_macs(g, n_prompt)
            row.update(roof="int8", macs_per_token=macs, roof_tok_s=int8_gmacs * 1e9 / macs)
        row.update(tern_roof=row["tern"] / row["roof_tok_s"], llama_roof=row["llama"] / row["roof_tok_s"])
        res["tests"][name] = row
        log(f"  {res['model']:28s} {name:15s} tern {row['tern']:8.2f} ± {row['tern_sd']:.2f}   llama.cpp "
            f"{row['llama']:8.2f} ± {row['llama_sd']:.2f}   ratio {row['ratio']:.2f}   load {load_tern.split()[0]} "
            f"/ {load_llama.split()[0]}   busy CPUs before {busy_tern:.2f} / {busy_llama:.2f}")
    return res


def scaling(args, path, llama, bw, bw1):
    """tern at 1 thread against args.threads (prefill and decode), and decode with one busy process beside each
    engine (a pure-Python spin loop: one core's worth of competing work)."""
    row = {"model": os.path.basename(path), "bw_ratio": bw / bw1}
    for kind, n_prompt, n_gen in (("pp", args.n_prompt, 0), ("tg", 0, args.n_gen)):
        one = tern_bench(args, path, n_prompt, n_gen, 0, threads=1)["tok_s"]
        if kind == "tg":  # the bandwidth ratio from probes beside these two runs, not the start-of-run pair
            bw1_now = probe_bw(args, threads=1)
        full = tern_bench(args, path, n_prompt, n_gen, 0)["tok_s"]
        if kind == "tg":
            row["bw_ratio"] = probe_bw(args) / bw1_now
        row[kind] = {"t1": one, "tN": full, "ratio": full / one}
    quiet = {"tern": row["tg"]["tN"], "llama": llama_bench(args, llama["llama-bench"], path, 0, args.n_gen, 0)["tok_s"]}
    busy = {}
    for eng in ("tern", "llama"):
        spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            time.sleep(1)
            busy[eng] = (tern_bench(args, path, 0, args.n_gen, 0)["tok_s"] if eng == "tern" else
                         llama_bench(args, llama["llama-bench"], path, 0, args.n_gen, 0)["tok_s"])
        finally:
            spin.kill()
            spin.wait()
    row["busy"] = {eng: {"quiet": quiet[eng], "busy": busy[eng], "ratio": busy[eng] / quiet[eng]} for eng in quiet}
    log(f"  {row['model']:28s} scaling: pp x{row['pp']['ratio']:.2f}, tg x{row['tg']['ratio']:.2f} (bandwidth "
        f"x{row['bw_ratio']:.2f}); tg beside a busy process: tern {100 * row['busy']['tern']['ratio']:.0f}%, "
        f"llama.cpp {100 * row['busy']['llama']['ratio']:.0f}% of quiet")
    return row


def per_layer(results, layers, name, bw_gbs):
    """(hi-layer minus lo-layer) time per token, per layer, against the bandwidth floor of the bytes it adds."""
    lo, hi = min(layers), max(layers)
    out = {}
    if lo == hi:
        return out
    for qtype in sorted({r["model"].split(".")[1] for r in results}):
        a = next((r for r in results if r["n_layer"] == lo and r["model"].endswith(f".{qtype}.gguf")), None)
        b = next((r for r in results if r["n_layer"] == hi and r["model"].endswith(f".{qtype}.gguf")), None)
        if not a or not b or name not in a["tests"]:
            continue
        dl = hi - lo
        bytes_layer = (b["tests"][name]["bytes_per_token"]["total"] - a["tests"][name]["bytes_per_token"]["total"]) / dl
        # the mean of the two tests' own probes (each test's roofline bandwidth), else the start-of-run figure
        bw = (a["tests"][name].get("bw_gbs", bw_gbs) + b["tests"][name].get("bw_gbs", bw_gbs)) / 2
        floor_ms = bytes_layer / (bw * 1e9) * 1e3
        row = {"bytes_per_layer": bytes_layer, "floor_ms": floor_ms, "bw_gbs": bw}
        for eng in ("tern", "llama"):
            ms = (1 / b["tests"][name][eng] - 1 / a["tests"][name][eng]) / dl * 1e3
            row[f"{eng}_ms"] = ms
            row[f"{eng}_vs_floor"] = ms / floor_ms
        out[qtype] = row
    return out


def markdown(meta, results, layer_rows, args):
    peak = meta["peak"]
    lines = [
        f"{meta['date']}, {meta['host']}: {meta['cpu']} ({meta['cpu_flags']}, {os.cpu_count()} CPUs); tern "
        f"{meta['tern_commit']}; llama.cpp: {meta['llama_cpp_build']}.", "",
        f"Memory read bandwidth **{meta['bandwidth_gbs']:.2f} GB/s** (tern_membw, {args.threads} threads, best of "
        f"{meta['membw']['runs']}); int8 peak **{peak['int8_gmacs']:.1f} GMAC/s** ({peak['int8_kernel']}, "
        f"{args.threads} threads; {peak['int8_gmacs_1t']:.1f} with 1), fp32 FMA peak {peak['fp32_gflops']:.1f} "
        f"GFLOP/s ({peak['fp32_kernel']}; tern_peak, best of {peak['runs']}). {args.threads} threads for both "
        f"engines, {args.reps} repetition{'s' if args.reps != 1 else ''} after one warm-up each, tern and "
        "llama-bench alternating test by test. "
        f"Load average (1/5/15 min, running/total tasks) {meta['loadavg_start']} at the start, "
        f"{meta['loadavg_end']} at the end; the load column is the 1-minute load right before each engine's run."
        + (" **--small models (32 experts, 4096-token vocabulary): a smoke run, not the real model.**"
           if args.small else ""), "",
        "Decode rooflines use the bandwidth probed right before and after tern's run of that test (the better of "
        "the two, both in brackets; the host's bandwidth moves through the day), the figure above only where a "
        "test has none.", "",
        "| model | test | load tern / llama.cpp (busy CPUs before) | tern tok/s | llama.cpp tok/s | tern/llama.cpp | roofline | "
        "roof tok/s | tern of roof | llama.cpp of roof |",
        "|---|---|---|---:|---:|---:|---|---:|---:|---:|"]
    for r in results:
        for _, _, _, _, name in tests(args):
            t = r["tests"].get(name)
            if not t:
                continue
            probes = (f" ({min(t['bw_before'], t['bw_after']):.1f}-{max(t['bw_before'], t['bw_after']):.1f})"
                      if t.get("bw_before") else "")
            roof = (f"{t['bytes_per_token']['total'] / 1e6:.0f} MB/tok at {t.get('bw_gbs', meta['bandwidth_gbs']):.1f}{probes} GB/s"
                    if t["roof"] == "bandwidth" else
                    f"{t['macs_per_token'] / 1e9:.3f} GMAC/tok at {peak['int8_gmacs']:.0f} GMAC/s")
            lines.append(f"| {r['model'].removesuffix('.gguf')} | {name} | {t['load_tern'].split()[0]} / "
                         f"{t['load_llama'].split()[0]} ({t.get('busy_tern', 0):.2f} / {t.get('busy_llama', 0):.2f}) | {t['tern']:.2f} ± {t['tern_sd']:.2f} | {t['llama']:.2f} ± "
                         f"{t['llama_sd']:.2f} | {t['ratio']:.2f} | {roof} | {t['roof_tok_s']:.1f} | "
                         f"{100 * t['tern_roof']:.0f}% | {100 * t['llama_roof']:.0f}% |")
    if args.arch == "glm-dsa":
        lines += ["", "- Decode roofline: bytes per token = weights (`tern info --json` bytes_per_token: every tensor "
                  "of the layers once, routed experts x n_expert_used / n_expert, one token_embd row, the LM head "
                  "whole) + the MLA latent cache rows attention reads (layers x (kv_lora + rope) x "
                  f"{KV_BYTES} B x min(context, index_topk), averaged over the n_gen tokens, + 1 row written) + the "
                  f"indexer keys every token's indexer scores (layers x index_head_dim x {KV_BYTES} B x context, + "
                  "1 written); roof tok/s = bandwidth / bytes per token. Attention's and the indexer's arithmetic "
                  "(64 heads x (576 + 512) MACs per latent row read, 32 x 128 per indexer key) is not in the "
                  "roofline: at depth 4096 it is ~0.64 GMAC per token over 4 layers with top-2048 (0.57 attention + "
                  "0.07 indexer), against ~1.16 for attention over all 4160 rows and ~2.7 GMAC of weights.",
                  "- Prefill roofline: MACs per prompt token = body + head / n_prompt, body = the weight elements of "
                  "every layer's matrices (routed experts x n_expert_used / n_expert; attn_k_b / attn_v_b and the "
                  "indexer's projections included; token_embd is a lookup, not counted), head = the LM head's "
                  "elements (logits of the last prompt token only); attention and indexer scores are not counted; "
                  "roof tok/s = int8 peak / MACs per token."]
        return "\n".join(lines) + "\n"
    lines += ["", "- Decode roofline: bytes per token = weights (`tern info --json` bytes_per_token: every tensor of "
              "the layers once, routed experts x n_expert_used / n_expert, one token_embd row, the LM head whole) + "
              "DeltaNet state read and written (2 x DeltaNet layers x (recurrent [n_v_heads, head_k, head_v] f32 + "
              "conv [conv_dim, kernel - 1] f32)) + KV cache (attention layers x n_head_kv x (key + value length) x "
              f"{KV_BYTES} B x (depth + (n_gen + 1) / 2 rows read + 1 written)); roof tok/s = bandwidth / bytes "
              "per token.",
              f"- Prefill roofline: MACs per prompt token = body + head / n_prompt, body = the weight elements of "
              "every layer's matrices (routed experts x n_expert_used / n_expert; the conv kernel included; "
              "token_embd is a lookup, not counted), head = the LM head's elements (logits of the last prompt token "
              "only); attention scores and the DeltaNet recurrence (fp32, context-dependent) are not counted; "
              "roof tok/s = int8 peak / MACs per token."]
    for name, rows in layer_rows.items():
        if not rows:
            continue
        lines += ["", f"Per-layer decode cost ({name}; ({max(args.layers)}-layer − {min(args.layers)}-layer time "
                  f"per token) / {max(args.layers) - min(args.layers)}) against its bandwidth floor (the bytes one "
                  "more layer adds per token / bandwidth):", "",
                  "| type | MB/layer | bandwidth | floor ms | tern ms | tern / floor | llama.cpp ms | llama.cpp / floor |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for qtype, x in rows.items():
            lines.append(f"| {qtype} | {x['bytes_per_layer'] / 1e6:.1f} | {x.get('bw_gbs', 0):.1f} GB/s | {x['floor_ms']:.3f} | {x['tern_ms']:.3f} | "
                         f"{x['tern_vs_floor']:.2f} | {x['llama_ms']:.3f} | {x['llama_vs_floor']:.2f} |")
    for x in meta.get("scaling", []):
        if x is meta["scaling"][0]:
            lines += ["", f"Thread scaling (tern, 1 vs {args.threads} threads; the bandwidth speed-up from probes "
                      f"beside the two decode runs; at the start {meta['bandwidth_gbs_1t']:.2f} vs "
                      f"{meta['bandwidth_gbs']:.2f} GB/s) and decode beside one busy "
                      "process (a spin loop started before the run; same threads):", "",
                      f"| model | pp{args.n_prompt} 1t | {args.threads}t | speed-up | tg{args.n_gen} 1t | "
                      f"{args.threads}t | speed-up | bandwidth speed-up | tern busy / quiet | llama.cpp busy / quiet |",
                      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        b = x["busy"]
        lines.append(f"| {x['model'].removesuffix('.gguf')} | {x['pp']['t1']:.2f} | {x['pp']['tN']:.2f} | "
                     f"{x['pp']['ratio']:.2f} | {x['tg']['t1']:.2f} | {x['tg']['tN']:.2f} | {x['tg']['ratio']:.2f} | "
                     f"{x['bw_ratio']:.2f} | {b['tern']['busy']:.2f} / {b['tern']['quiet']:.2f} = "
                     f"{100 * b['tern']['ratio']:.0f}% | {b['llama']['busy']:.2f} / {b['llama']['quiet']:.2f} = "
                     f"{100 * b['llama']['ratio']:.0f}% |")
    return "\n".join(lines) + "\n"


def write_results(args, meta, results):
    """Writes OUT/results.json and OUT/results.md for the models measured so far; returns the markdown."""
    meta = dict(meta, loadavg_end=loadavg(), seconds=round(time.time() - meta["t_start"]))
    layer_rows = {name: per_layer(results, args.layers, name, meta["bandwidth_gbs"])
                  for kind, _, _, _, name in tests(args) if kind == "tg"}
    md = markdown(meta, results, layer_rows, args)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"meta": meta, "models": results, "per_layer": layer_rows}, f, indent=1)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(md)
    return md


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")),
                        platform.machine())
    except OSError:
        return platform.machine()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--arch", choices=("qwen35moe", "glm-dsa"), default="qwen35moe",
                    help="which real-width model family to generate and measure")
    ap.add_argument("-t", "--threads", type=int, default=2, help="threads for both engines")
    ap.add_argument("-r", "--reps", type=int, default=3, help="timed repetitions of each test (after one warm-up)")
    ap.add_argument("--types", help=f"comma-separated, from {','.join(TYPES)} (default: all; glm-dsa: q8_0,q4_k_m)")
    ap.add_argument("--layers", help="comma-separated layer counts (qwen35moe: multiples of 4, default 4,8; "
                    "glm-dsa: >= 4, the first 3 dense, default 4)")
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "bench"), help="GGUFs and results (reused)")
    ap.add_argument("--small", action="store_true",
                    help=f"{SMALL_EXPERTS} experts and a {SMALL_VOCAB}-token vocabulary (a smoke run)")
    ap.add_argument("--tern", default=os.path.join(ROOT, "build", "tern"), help="the tern binary")
    ap.add_argument("--membw", default=os.path.join(ROOT, "build", "tern_membw"), help="the bandwidth probe")
    ap.add_argument("--peak", default=os.path.join(ROOT, "build", "tern_peak"),
                    help="the compute-peak probe")
    ap.add_argument("--llama-bin", help="folder with llama-bench and llama-quantize (none: bench/build_llamacpp.sh "
                    "builds them once into its cache and says where)")
    ap.add_argument("-p", "--n-prompt", type=int, default=512, help="prompt tokens of the prefill test")
    ap.add_argument("-n", "--n-gen", type=int, default=128, help="generated tokens of the decode tests")
    ap.add_argument("-d", "--depth", type=int, default=4096, help="prompt tokens before the second decode test")
    ap.add_argument("--quiet-below", type=float, help="before every run wait (polling every 30 s) until other "
                    "processes use fewer than this many CPUs (/proc/stat over 3 s); the busy CPUs measured are "
                    "recorded either way")
    ap.add_argument("--generate-only", action="store_true", help="write the GGUFs and stop")
    ap.add_argument("--isa", choices=("avx2", "avx512"),
                    help="tern's kernels (tern bench --isa) and the int8 peak the prefill roofline uses; pair with "
                         "--llama-bin from `bash bench/build_llamacpp.sh --isa avx2` to compare the AVX2 code paths "
                         "of both engines on an AVX-512 CPU (default: each engine's best)")
    ap.add_argument("--tests", default="pp,tg,tgd",
                    help="which tests: pp (prefill), tg (decode), tgd (decode at depth -d)")
    ap.add_argument("--no-scaling", action="store_true",
                    help="skip the 1-thread and busy-neighbour runs (done on the largest model of each type)")
    args = ap.parse_args()
    glm = args.arch == "glm-dsa"
    if args.types is None:
        args.types = "q8_0,q4_k_m" if glm else ",".join(TYPES)
    if args.layers is None:
        args.layers = "4" if glm else "4,8"
    if glm and args.small:
        ap.error("--small is for qwen35moe only")
    args.tests = [t for t in args.tests.split(",") if t]
    if not args.tests or any(t not in ("pp", "tg", "tgd") for t in args.tests):
        ap.error("--tests: comma-separated, from pp,tg,tgd")
    types = [t for t in args.types.split(",") if t]
    bad = [t for t in types if t not in TYPES]
    if bad or not types:
        ap.error(f"--types: unknown {bad}; choose from {','.join(TYPES)}")
    try:
        args.layers = sorted({int(x) for x in args.layers.split(",") if x})
    except ValueError:
        ap.error("--layers takes comma-separated integers")
    if glm and (not args.layers or any(n < 4 for n in args.layers)):
        ap.error("--layers: >= 4 for glm-dsa (3 leading dense layers, then MoE)")
    if not glm and (not args.layers or any(n < 1 or n % 4 for n in args.layers)):
        ap.error("--layers: positive multiples of 4 (the 3:1 DeltaNet:attention pattern)")
    if args.threads < 1 or args.reps < 1 or args.n_prompt < 1 or args.n_gen < 1 or args.depth < 1:
        ap.error("-t, -r, -p, -n and -d must be >= 1")
    for exe in ([] if args.generate_only else [args.tern, args.membw, args.peak]):
        if not os.access(exe, os.X_OK):
            sys.exit(f"error: {exe} not found; build first: bash scripts/build.sh build")
    try:
        import gguf  # noqa: F401
    except ImportError:
        sys.exit("error: the gguf Python package is needed (python3 -m pip install gguf numpy)")

    need_llama = not args.generate_only or any(t != "q8_0" for t in types)
    llama = find_llama(args) if need_llama else {}
    ensure_models(args, types, llama.get("llama-quantize"))
    if args.generate_only:
        return
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": platform.node(), "cpu": cpu_model(), "threads": args.threads, "reps": args.reps,
            "small": args.small, "arch": args.arch, "loadavg_start": loadavg(), "t_start": time.time(),
            "llama_cpp_build": llama["build_info"].replace("\n", "; "), "llama_bench": llama["llama-bench"],
            "tern_commit": subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                                          text=True).stdout.strip(),
            "command": " ".join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])}
    meta["busy_before_probes"] = wait_quiet(args)
    bw = run_json([args.membw, "-t", str(args.threads), "--json"])
    meta.update(membw=bw, bandwidth_gbs=bw["read_gbs_best"])
    log(f"memory read bandwidth: {bw['read_gbs_best']:.2f} GB/s best ({bw['read_gbs_median']:.2f} median), "
        f"{args.threads} threads")
    peak = run_json([args.peak, "-t", str(args.threads), "--json"])
    if args.isa:  # the roofline of the kernels asked for: that ISA's int8 probe, not the CPU's best
        want = "int8_avx2" if args.isa == "avx2" else "int8_avx512vnni"
        k = next((k for k in peak["kernels"] if k["kernel"] == want and k["measured"]), None)
        if k is None:
            sys.exit(f"error: tern_peak did not measure {want} on this CPU")
        peak.update(int8_gmacs=k["all_threads"], int8_gmacs_1t=k["one_thread"], int8_kernel=want)
    meta.update(peak=peak, cpu_flags=peak["cpu"], isa=args.isa or "best")
    log(f"compute peak: int8 {peak['int8_gmacs']:.1f} GMAC/s ({peak['int8_kernel']}), fp32 "
        f"{peak['fp32_gflops']:.1f} GFLOP/s ({peak['fp32_kernel']}), {args.threads} threads")
    if not args.no_scaling and args.threads > 1:
        bw1 = run_json([args.membw, "-t", "1", "--json"])
        meta.update(bandwidth_gbs_1t=bw1["read_gbs_best"], scaling=[])
    results = []
    for qtype in types:
        for n_layer in args.layers:
            results.append(run_model(args, model_path(args, n_layer, qtype), llama, meta["bandwidth_gbs"],
                                     peak["int8_gmacs"]))
            md = write_results(args, meta, results)
        if "scaling" in meta:
            meta["scaling"].append(scaling(args, model_path(args, max(args.layers), qtype), llama,
                                           meta["bandwidth_gbs"], meta["bandwidth_gbs_1t"]))
            md = write_results(args, meta, results)
    print(md)
    log(f"wrote {os.path.join(args.out, 'results.json')} and results.md ({round(time.time() - meta['t_start'])} s)")


if __name__ == "__main__":
    main()
