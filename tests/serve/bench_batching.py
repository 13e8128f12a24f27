#!/usr/bin/env python3
"""Aggregate decode throughput of a running OpenAI-compatible server at several concurrency levels (a benchmark,
not a test: ctest does not run it). For each level N, N streaming clients each ask for the same number of tokens
(ignore_eos, greedy, short distinct prompts); aggregate tok/s = all generated tokens / wall time from the first
request to the last token. Works against `tern serve` and llama-server alike (ignore_eos is a llama.cpp field).

usage: bench_batching.py BASE_URL [--levels 1,4,8,16] [--tokens 128] [--rounds 2]
"""
import argparse
import concurrent.futures
import json
import time
import urllib.request


def stream(base, prompt, n_tokens):
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": n_tokens, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    t_first, n = None, 0
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            j = json.loads(line[6:])
            if j.get("usage"):
                n = j["usage"]["completion_tokens"]
            elif j["choices"] and j["choices"][0]["delta"].get("content") and t_first is None:
                t_first = time.time()
    return n, t_first


def metric(base, name):
    """A tern /metrics counter (None on servers without it)."""
    try:
        for line in urllib.request.urlopen(base + "/metrics", timeout=10).read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    except Exception:  # noqa: BLE001
        return None
    return None


def level(base, n_clients, n_tokens):
    busy0 = metric(base, "tern_forward_seconds_total")
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(n_clients) as ex:
        res = list(ex.map(lambda i: stream(base, f"Tell me about the number {i}.", n_tokens), range(n_clients)))
    wall = time.time() - t0
    tokens = sum(n for n, _ in res)
    ttft = sorted(t - t0 for _, t in res if t)
    busy1 = metric(base, "tern_forward_seconds_total")
    busy = busy1 - busy0 if busy0 is not None and busy1 is not None else float("nan")
    return tokens / wall, tokens, wall, ttft[len(ttft) // 2] if ttft else float("nan"), busy


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("--levels", default="1,4,8,16")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    level(a.base, 1, 8)  # warm-up
    print("| concurrent | aggregate tok/s | per-stream tok/s | x single | median TTFT s | forward busy s / wall s |")
    print("|---|---|---|---|---|---|")
    single = None
    for n in [int(x) for x in a.levels.split(",")]:
        best = max((level(a.base, n, a.tokens) for _ in range(a.rounds)), key=lambda r: r[0])
        single = single or best[0]
        print(f"| {n} | {best[0]:.1f} | {best[0] / n:.1f} | {best[0] / single:.2f} | {best[3]:.2f} | "
              f"{best[4]:.1f} / {best[2]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
