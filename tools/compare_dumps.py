#!/usr/bin/env python3
"""Line up two tensor dumps by name and report the first tensor that differs beyond tolerance.

A dump is a directory of float32 .npy files named like llama.cpp's graph tensors: `<name>-<layer>.npy`
(`attn_norm-3.npy`, `linear_attn_out-0.npy`, `ffn_moe_out-3.npy`) or `<name>.npy` for model-level tensors
(`inp_embd`, `result_norm`, `result_output`). tern writes them with `--dump-tensors DIR`; tools/make_fixtures.py
writes transformers' (forward hooks) and llama.cpp's (eval callback) under the same names.

Tensors are visited in forward order (layer by layer, and within a layer in the order the ops run), so the
first reported mismatch is where two implementations start to diverge. Shapes are compared after squeezing
size-1 dimensions; a tensor present in only one dump is listed, not compared.

usage: compare_dumps.py A B [--rtol 1e-3] [--nmse 1e-5] [--all]
"""
import argparse
import os
import re
import sys

import numpy as np

# Order of named intermediates inside one layer (the order the forward computes them).
OP_ORDER = [
    "attn_norm", "linear_attn_qkv_mixed", "z", "beta_sigmoid", "gate", "conv_output_silu", "attn_linear_core",
    "final_output", "linear_attn_out", "Qcur_normed", "Kcur_normed", "attn_pregate", "attn_gated", "attn_output",
    "attn_residual", "attn_post_norm", "ffn_moe_logits", "ffn_moe_out", "ffn_shexp", "ffn_out", "l_out",
]
MODEL_BEFORE = ["inp_embd"]
MODEL_AFTER = ["result_norm", "result_output"]


def sort_key(name):
    m = re.fullmatch(r"(.+)-(\d+)", name)
    if m:
        op, layer = m.group(1), int(m.group(2))
        idx = OP_ORDER.index(op) if op in OP_ORDER else len(OP_ORDER)
        return (1, layer, idx, op)
    if name in MODEL_BEFORE:
        return (0, 0, MODEL_BEFORE.index(name), name)
    idx = MODEL_AFTER.index(name) if name in MODEL_AFTER else len(MODEL_AFTER)
    return (2, 0, idx, name)


def load_dir(d):
    out = {}
    for f in os.listdir(d):
        if f.endswith(".npy"):
            out[f[:-4]] = os.path.join(d, f)
    return out


def compare(a, b):
    """Returns (nmse, max_abs, worst_index, a_val, b_val) or None if shapes cannot be lined up."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.size != b.size:
        return None
    a = a.reshape(-1)
    b = b.reshape(-1)
    diff = a - b
    denom = float(np.sum(a * a)) or 1.0
    nmse = float(np.sum(diff * diff)) / denom
    worst = int(np.argmax(np.abs(diff)))
    return nmse, float(abs(diff[worst])), worst, float(a[worst]), float(b[worst])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--nmse", type=float, default=1e-5, help="normalised MSE above which tensors differ")
    ap.add_argument("--all", action="store_true", help="print every tensor, not just the first mismatch")
    args = ap.parse_args()
    A, B = load_dir(args.a), load_dir(args.b)
    common = sorted(set(A) & set(B), key=sort_key)
    only_a = sorted(set(A) - set(B), key=sort_key)
    only_b = sorted(set(B) - set(A), key=sort_key)
    if not common:
        print("no tensor names in common")
        return 2
    first_bad = None
    for name in common:
        ta, tb = np.load(A[name]), np.load(B[name])
        r = compare(ta, tb)
        if r is None:
            print(f"{name}: shape {ta.shape} vs {tb.shape}: cannot compare")
            if first_bad is None:
                first_bad = name
            continue
        nmse, max_abs, worst, va, vb = r
        bad = nmse > args.nmse
        if args.all or (bad and first_bad is None):
            idx = np.unravel_index(worst, ta.shape) if ta.size == tb.size else worst
            print(f"{name}: nmse {nmse:.3e} max|diff| {max_abs:.3e} at {tuple(int(i) for i in np.atleast_1d(idx))}"
                  f" ({va:.6g} vs {vb:.6g}){'  <-- first divergence' if bad and first_bad is None else ''}")
        if bad and first_bad is None:
            first_bad = name
            if not args.all:
                break
    if only_a:
        print(f"only in {args.a}: {', '.join(only_a[:10])}{' ...' if len(only_a) > 10 else ''}")
    if only_b:
        print(f"only in {args.b}: {', '.join(only_b[:10])}{' ...' if len(only_b) > 10 else ''}")
    if first_bad is None:
        print(f"all {len(common)} common tensors agree (nmse <= {args.nmse:g})")
        return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
