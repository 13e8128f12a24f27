#!/usr/bin/env python3
"""Decode speed of tern split across N nodes (docs/DISTRIBUTED.md): a cost model built from what tern does per
token (src/models/qwen35moe/weights.cpp Model::distribute) and communication costs measured with tern_comm_bench.

Per layer, every rank: its share of the mixer's weights (attention or DeltaNet heads: 1/N when the heads share out,
else the whole block), then two gathers (the heads' outputs, the out projection's rows); the router (replicated);
then the FFN:
  rows (the default): 1/N of the rows of each of the token's top-k experts and of the shared expert, a gather of
    the SwiGLU rows and one of the output columns (balanced: every rank reads the same bytes);
  expert parallel (--expert-parallel): its whole experts (contiguous ranges of 1/N of them; at batch 1 the slowest
    rank is the one holding most of the token's top-k, found by sampling uniform routings) plus the shared expert
    on rank il % N, and one sum over ranks (an allgather of n_embd floats).
Per token: 1/N of the LM head rows and the sampling step's candidates (each rank's top 40, not the logits). Ranks wait for each other at every collective, so a
layer costs its slowest rank.

Compute time = bytes read / (node bandwidth x efficiency); a collective on N ranks of m bytes per rank costs
ceil(log2 N) x alpha + (N - 1) x m / beta (recursive doubling for the small messages of decode).

usage: python3 tools/dist_model.py [--bw GBPS] [--eff E] [--nodes 1,2,4,8,16] [--expert-parallel]
"""
from __future__ import annotations

import argparse
import math
import random

# Geometries. 35B-A3B: shared/spec/qwen35moe.md section 1. 2.4T-A95B: 92 layers (23 attention), 512 experts top-10,
# hidden 8192, 16:1 attention q:kv heads, 8:1 DeltaNet value:key heads (shared/seeds/002); the widths below are
# assumed (head 256, 64 q / 4 kv heads; 16 key / 128 value heads of 128; expert and shared FFN 2048), which give
# 2.41T parameters and 92.6B active per token, matching the name.
MODELS = {
    "Qwen3.5-35B-A3B": dict(layers=40, attn_every=4, embd=2048, vocab=248320, q_heads=16, kv_heads=2, head=256,
                            k_heads=16, v_heads=32, dk=128, dv=128, experts=256, top_k=8, ff=512, shared_ff=512),
    "2.4T-A95B shape": dict(layers=92, attn_every=4, embd=8192, vocab=248320, q_heads=64, kv_heads=4, head=256,
                            k_heads=16, v_heads=128, dk=128, dv=128, experts=512, top_k=10, ff=2048, shared_ff=2048),
}
BYTES_PER_PARAM = 0.6  # Q4_K_M: a 35B file of about 21 GB

# Communication per network (alpha: seconds per collective step; beta: bytes per second each way). The loopback
# and TCP figures are tern_comm_bench on this machine (docs/DISTRIBUTED.md); the TCP stack's latency floor (about
# 10-12 us for a 1 KB allgather between two ranks over TCP on loopback) is kept for the Ethernet settings, plus a
# few microseconds of wire and switch.
NETWORKS = {
    "10 GbE (TCP)": dict(alpha=15e-6, beta=1.17e9),
    "100 GbE (TCP)": dict(alpha=12e-6, beta=11.7e9),
    "100 GbE (RDMA-class latency)": dict(alpha=3e-6, beta=11.7e9),
}


def share(n_key: int, per: int, n: int) -> bool:
    """Whether a grouped-head block splits over n ranks (head_share in weights.cpp)."""
    return n_key >= n or (n % n_key == 0 and per % (n // n_key) == 0)


def allgather(m_bytes: float, n: int, net: dict) -> float:
    if n == 1:
        return 0.0
    return math.ceil(math.log2(n)) * net["alpha"] + (n - 1) * m_bytes / net["beta"]


def expected_max_experts(experts: int, top_k: int, n: int, trials: int = 4000, seed: int = 1) -> float:
    """Mean over uniform top-k routings of the largest count of chosen experts any rank holds (contiguous ranges)."""
    if n == 1:
        return float(top_k)
    rng = random.Random(seed)
    bounds = [experts * r // n for r in range(n + 1)]
    owner = [0] * experts
    for r in range(n):
        for e in range(bounds[r], bounds[r + 1]):
            owner[e] = r
    total = 0
    for _ in range(trials):
        counts = [0] * n
        for e in rng.sample(range(experts), top_k):
            counts[owner[e]] += 1
        total += max(counts)
    return total / trials


SAMPLE_TOP_K = 40


def token_time(g: dict, n: int, net: dict, bw: float, eff: float, whole_experts: bool = False,
               partial_sums: bool = False) -> tuple[float, float, dict]:
    """Seconds per decode token on n nodes: (total, of which communication, parameter counts)."""
    D, B = g["embd"], BYTES_PER_PARAM
    speed = bw * eff
    q_dim, kv_dim = g["q_heads"] * g["head"], g["kv_heads"] * g["head"]
    attn = D * 2 * q_dim + 2 * D * kv_dim + q_dim * D
    key_dim, value_dim = g["k_heads"] * g["dk"], g["v_heads"] * g["dv"]
    dn = D * (2 * key_dim + value_dim) + D * value_dim + 2 * D * g["v_heads"] + value_dim * D
    expert = 3 * D * g["ff"]
    shared = 3 * D * g["shared_ff"] + D
    router = D * g["experts"]
    head = g["vocab"] * D
    n_attn = g["layers"] // g["attn_every"]
    n_dn = g["layers"] - n_attn
    attn_split = share(g["kv_heads"], g["q_heads"] // g["kv_heads"], n)
    dn_split = share(g["k_heads"], g["v_heads"] // g["k_heads"], n)
    emax = expected_max_experts(g["experts"], g["top_k"], n) if whole_experts else g["top_k"] / n
    # Per-layer FFN time on the slowest rank. Rows: 1/n of every chosen expert and of the shared expert. Expert
    # parallel: its experts plus, on one rank in n, the shared expert (taken as on the busiest rank for n <= 2, half
    # of it beyond: an estimate between the bounds).
    def ffn_time():
        experts_t = emax * expert * B / speed
        shared_t = shared * B / speed
        if not whole_experts:
            return experts_t + shared_t / n
        return experts_t + (shared_t if n <= 2 else shared_t / 2)
    def ffn_comm():
        if whole_experts or partial_sums:  # one sum over ranks (an allgather of n_embd floats, added in rank order)
            return allgather(D * 4, n, net)
        rows = g["top_k"] + 1  # SwiGLU rows of the token's experts and the shared expert
        return allgather(rows * g["ff"] * 4 / n, n, net) + allgather(D * 4 / n, n, net)
    comm = 0.0
    t = 0.0
    for kind, count, params, split, width in (("attn", n_attn, attn, attn_split, q_dim), ("dn", n_dn, dn, dn_split, value_dim)):
        mix = params * B / speed / (n if split else 1)
        if partial_sums:  # each rank's heads times its columns of the out projection, summed over ranks
            c_mix = allgather(D * 4, n, net) if split else 0.0
        else:
            c_mix = (allgather(width * 4 / n, n, net) + allgather(D * 4 / n, n, net)) if split else 0.0
        c_ffn = ffn_comm()
        t += count * (mix + router * B / speed + ffn_time())
        comm += count * (c_mix + c_ffn)
    t += head * B / speed / n
    # The sampling step: each rank's best top_k (40, the default) candidates of its vocabulary rows, 8 bytes each
    # (runtime::Sampler on a LogitsRow); greedy sends one. The logits rows themselves stay on their ranks.
    comm += allgather(SAMPLE_TOP_K * 8, n, net)
    active = n_attn * attn + n_dn * dn + g["layers"] * (g["top_k"] * expert + shared + router) + head
    total = n_attn * attn + n_dn * dn + g["layers"] * (g["experts"] * expert + shared + router) + 2 * head
    return t + comm, comm, dict(active=active, total=total, emax=emax, attn_split=attn_split, dn_split=dn_split)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bw", type=float, default=400.0, help="node memory read bandwidth, GB/s (default 400)")
    ap.add_argument("--eff", type=float, default=0.66, help="fraction of it tern reaches in decode (default 0.66, measured)")
    ap.add_argument("--nodes", default="1,2,4,8,16")
    ap.add_argument("--expert-parallel", action="store_true", help="whole experts per rank instead of rows")
    ap.add_argument("--partial-sums", action="store_true",
                    help="tern --partial-sums: out projections and expert downs by columns, one sum over ranks per "
                         "block (2 collectives a layer instead of 4; sums in a new order, so not bit-exact)")
    ap.add_argument("--alpha-us", type=float, default=0, help="override every network's latency per step (us)")
    args = ap.parse_args()
    if args.alpha_us > 0:
        for net in NETWORKS.values():
            net["alpha"] = args.alpha_us * 1e-6
    nodes = [int(x) for x in args.nodes.split(",")]
    bw = args.bw * 1e9
    for name, g in MODELS.items():
        _, _, info = token_time(g, 1, NETWORKS["100 GbE (TCP)"], bw, args.eff, args.expert_parallel, args.partial_sums)
        print(f"\n### {name}: {info['total'] / 1e9:.0f}B parameters, {info['active'] / 1e9:.1f}B active per token "
              f"({info['active'] * BYTES_PER_PARAM / 1e9:.1f} GB at {BYTES_PER_PARAM} bytes each)\n")
        print("| network | " + " | ".join(f"{n} node{'s' if n > 1 else ''}" for n in nodes) + " |")
        print("|---|" + "---:|" * len(nodes))
        for net_name, net in NETWORKS.items():
            t1, _, _ = token_time(g, 1, net, bw, args.eff, args.expert_parallel, args.partial_sums)
            cells = []
            for n in nodes:
                t, c, inf = token_time(g, n, net, bw, args.eff, args.expert_parallel, args.partial_sums)
                cells.append(f"{1 / t:.1f} tok/s, x{t1 / t:.2f} (comm {1e3 * c:.1f} ms)")
            print(f"| {net_name} | " + " | ".join(cells) + " |")
        notes = []
        for n in nodes[1:]:
            _, _, inf = token_time(g, n, NETWORKS["100 GbE (TCP)"], bw, args.eff, args.expert_parallel, args.partial_sums)
            notes.append(f"{n}: slowest rank reads {inf['emax']:.2f} of {g['top_k']} experts"
                         f"{'' if inf['attn_split'] else ', attention whole'}{'' if inf['dn_split'] else ', DeltaNet whole'}")
        print("\n" + "; ".join(notes))


if __name__ == "__main__":
    main()
