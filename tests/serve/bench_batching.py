#!/usr/bin/env python3
"""Aggregate decode throughput of OpenAI-compatible servers at several concurrency levels (a benchmark, not a test:
ctest does not run it). For each level N, N streaming clients each ask for the same number of tokens (greedy,
short distinct prompts, `ignore_eos` for tern and llama-server, `min_tokens` for llama-cpp-python's server);
aggregate tok/s = all generated tokens / wall time from the first request to the last token. "most decoding at
once" is the largest number of streams between their first and last token at one moment: N for a server that
batches, 1 for one that serves a request at a time.

Two ways to run it:
  bench_batching.py URL [--levels 1,4,8,16] [--tokens 128] [--rounds 2]
      against a server that is already running;
  bench_batching.py --tern build/tern --model M.gguf [--threads 1] [--parallel 16] [--ctx 512] [--peer] ...
      starts `tern serve` on M (then, with --peer, llama-cpp-python's `python -m llama_cpp.server` on the same file
      with the same threads and context per sequence, pip-installing its server extras when missing), runs the
      levels against each in turn, and prints one table with both.
"""
import argparse
import concurrent.futures
import importlib.util
import json
import math
import os
import socket
import subprocess
import sys
import time
import urllib.request


def stream(base, prompt, n_tokens):
    """One streaming chat request. Returns (generated tokens, time of the first token, time of the last)."""
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": n_tokens, "temperature": 0,
            "ignore_eos": True, "min_tokens": n_tokens, "stream": True, "stream_options": {"include_usage": True}}
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    t_first = t_last = None
    usage, chunks, finish = None, 0, None
    with urllib.request.urlopen(req, timeout=1800) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            j = json.loads(line[6:])
            if j.get("usage"):
                usage = j["usage"]["completion_tokens"]
            if not j.get("choices"):
                continue
            ch = j["choices"][0]
            finish = ch.get("finish_reason") or finish
            if ch.get("delta", {}).get("content"):
                chunks += 1
                t_last = time.time()
                t_first = t_first or t_last
    # Servers without stream_options (llama-cpp-python) stop at max_tokens ("length") or send one token a chunk.
    n = usage if usage is not None else (n_tokens if finish == "length" else chunks)
    return n, t_first, t_last


def metric(base, name):
    """A tern /metrics counter (None on servers without it)."""
    try:
        for line in urllib.request.urlopen(base + "/metrics", timeout=10).read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    except Exception:  # noqa: BLE001
        return None
    return None


def most_at_once(spans):
    """The largest number of [first, last] token intervals that overlap at one moment."""
    events = sorted([(a, 1) for a, b in spans] + [(b, -1) for a, b in spans], key=lambda e: (e[0], e[1]))
    best = cur = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


def level(base, n_clients, n_tokens):
    busy0 = metric(base, "tern_forward_seconds_total")
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(n_clients) as ex:
        res = list(ex.map(lambda i: stream(base, f"Tell me about the number {i}.", n_tokens), range(n_clients)))
    wall = time.time() - t0
    tokens = sum(n for n, _, _ in res)
    ttft = sorted(t - t0 for _, t, _ in res if t)
    busy1 = metric(base, "tern_forward_seconds_total")
    busy = busy1 - busy0 if busy0 is not None and busy1 is not None else float("nan")
    overlap = most_at_once([(a, b) for _, a, b in res if a and b])
    return {"tok_s": tokens / wall, "tokens": tokens, "wall": wall, "ttft": ttft[len(ttft) // 2] if ttft else float("nan"),
            "busy": busy, "at_once": overlap}


def run_levels(base, levels, n_tokens, rounds):
    level(base, 1, 8)  # warm-up
    out = {}
    for n in levels:
        out[n] = max((level(base, n, n_tokens) for _ in range(rounds)), key=lambda r: r["tok_s"])
        print(f"  {base}: {n} concurrent: {out[n]['tok_s']:.1f} tok/s, {out[n]['tokens']} tokens in "
              f"{out[n]['wall']:.1f} s, at once {out[n]['at_once']}", file=sys.stderr, flush=True)
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_up(base, proc, path, limit_s):
    deadline = time.time() + limit_s
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"bench_batching: the server exited with status {proc.returncode} before it answered {path}")
        try:
            urllib.request.urlopen(base + path, timeout=5).read()
            return
        except Exception:  # noqa: BLE001
            time.sleep(0.5)
    proc.terminate()
    sys.exit(f"bench_batching: the server did not answer {path} within {limit_s} s")


def serve(cmd, path, levels, a, log):
    """Starts a server (cmd: port -> argv), benchmarks it, stops it."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with open(log, "w") as lf:
        proc = subprocess.Popen(cmd(port), stdout=lf, stderr=subprocess.STDOUT)
        try:
            wait_up(base, proc, path, 600)
            return run_levels(base, levels, a.tokens, a.rounds)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def ensure_llama_server_extras():
    """llama-cpp-python's server needs extras its base install lacks; pip-install the missing ones."""
    import llama_cpp  # noqa: F401  (a clear ImportError when llama-cpp-python itself is missing)
    mods = {"fastapi": "fastapi", "uvicorn": "uvicorn", "sse_starlette": "sse-starlette",
            "starlette_context": "starlette-context", "pydantic_settings": "pydantic-settings"}
    missing = [pkg for mod, pkg in mods.items() if importlib.util.find_spec(mod) is None]
    if missing:
        print(f"bench_batching: pip install {' '.join(missing)}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *missing], check=True)


def with_rope_sections(model, out_dir):
    """llama.cpp's qwen35moe loader requires `qwen35moe.rope.dimension_sections` (M-RoPE), which
    make_bench_model.py does not write. Returns the model, or a copy in out_dir with the key added: the Qwen3.5
    split [11, 11, 10, 0] scaled to rope.dimension_count / 2 pairs. Text positions are the same in every section,
    so any split rotates exactly like the plain (NeoX) rope tern applies."""
    import gguf
    r = gguf.GGUFReader(model)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    key = f"{arch}.rope.dimension_sections"
    if key in r.fields:
        return model
    out = os.path.join(out_dir, os.path.basename(model).replace(".gguf", "") + "-llamacpp.gguf")
    if os.path.exists(out) and os.path.getmtime(out) >= os.path.getmtime(model):
        return out
    print(f"bench_batching: writing {out} ({key} added for llama.cpp)", file=sys.stderr, flush=True)
    pairs = int(r.fields[f"{arch}.rope.dimension_count"].parts[-1][0]) // 2
    a = round(pairs * 11 / 32)
    w = gguf.GGUFWriter(out + ".tmp", arch)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        t = f.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            sub = f.types[-1]
            if sub == gguf.GGUFValueType.STRING:
                val = [bytes(f.parts[i]).decode("utf-8", "surrogateescape") for i in f.data]
            else:
                val = [f.parts[i][0].item() for i in f.data]
            w.add_key_value(name, val, t, sub_type=sub)
        elif t == gguf.GGUFValueType.STRING:
            w.add_key_value(name, bytes(f.parts[f.data[0]]).decode("utf-8"), t)
        else:
            w.add_key_value(name, f.parts[f.data[0]][0].item(), t)
    w.add_array(key, [a, a, pairs - 2 * a, 0])
    for t in r.tensors:
        if t.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            w.add_tensor(t.name, t.data)
        else:
            w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(out + ".tmp", out)
    return out


def table(results, names, levels):
    """One markdown table; the forward-busy column for the first server when it has tern's /metrics."""
    busy = not math.isnan(results[names[0]][levels[0]]["busy"])
    head, rule = "| concurrent |", "|---|"
    for name in names:
        head += f" {name} tok/s | x single | median TTFT s | most decoding at once |"
        rule += "---|---|---|---|"
    if busy:
        head += f" {names[0]} forward busy s / wall s |"
        rule += "---|"
    print(head)
    print(rule)
    for n in levels:
        row = f"| {n} |"
        for name in names:
            r, single = results[name][n], results[name][levels[0]]["tok_s"]
            row += f" {r['tok_s']:.1f} | {r['tok_s'] / single:.2f} | {r['ttft']:.2f} | {r['at_once']} |"
        if busy:
            r = results[names[0]][n]
            row += f" {r['busy']:.1f} / {r['wall']:.1f} |"
        print(row, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base", nargs="?", help="URL of a running server")
    ap.add_argument("--levels", default="1,4,8,16")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tern", help="the tern binary: start `tern serve` on --model")
    ap.add_argument("--model", help="GGUF file for --tern / --peer")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--parallel", type=int, default=16, help="tern's --parallel")
    ap.add_argument("--ctx", type=int, default=512, help="context per sequence")
    ap.add_argument("--peer", action="store_true", help="also llama-cpp-python's server on the same file")
    ap.add_argument("--logs", default="/tmp", help="folder for the servers' logs")
    a = ap.parse_args()
    levels = [int(x) for x in a.levels.split(",")]
    if a.base:
        results = {"server": run_levels(a.base, levels, a.tokens, a.rounds)}
        table(results, ["server"], levels)
        return
    if not a.tern or not a.model:
        ap.error("give a URL, or --tern and --model")
    if not os.path.isfile(a.model):
        ap.error(f"{a.model}: no such file (tests/serve/make_bench_model.py writes the benchmark model)")
    if max(levels) > a.parallel:
        print(f"bench_batching: note: {max(levels)} clients > --parallel {a.parallel}; the rest queue",
              file=sys.stderr)
    results, names = {}, ["tern"]
    results["tern"] = serve(lambda port: [a.tern, "serve", "-m", a.model, "--port", str(port), "-c", str(a.ctx),
                                          "--parallel", str(a.parallel), "-t", str(a.threads), "--cache-mib", "0"],
                            "/health", levels, a, os.path.join(a.logs, "bench-tern-serve.log"))
    if a.peer:
        ensure_llama_server_extras()
        peer_model = with_rope_sections(a.model, os.path.dirname(os.path.abspath(a.model)))
        # One Llama object behind a lock: no slot count to set. interrupt_requests (default on) would cut a stream
        # short whenever another request arrives.
        results["llama-cpp-python server"] = serve(
            lambda port: [sys.executable, "-m", "llama_cpp.server", "--model", peer_model, "--port", str(port),
                          "--n_threads", str(a.threads), "--n_threads_batch", str(a.threads), "--n_ctx", str(a.ctx),
                          "--interrupt_requests", "False"],
            "/v1/models", levels, a, os.path.join(a.logs, "bench-llama-cpp-python-server.log"))
        names.append("llama-cpp-python server")
    table(results, names, levels)


if __name__ == "__main__":
    main()
