#!/usr/bin/env python3
"""Line up two tensor dumps by name and report the first tensor that differs beyond tolerance.

A dump is a directory of float .npy files named like llama.cpp's graph tensors: `<name>-<layer>.npy`
(`attn_norm-3.npy`, `linear_attn_out-0.npy`, `ffn_moe_out-3.npy`) or `<name>.npy` for model-level tensors
(`inp_embd`, `result_norm`, `result_output`). tern writes them with `--dump-tensors DIR`;
tools/first_divergence.py writes transformers' (forward hooks) and llama.cpp's (eval callback) under the same
names and calls this module to compare them.

Tensors are visited in forward order (layer by layer, and within a layer in the order the ops run), so the
first reported mismatch is where two implementations start to diverge. Two tensors are compared when they hold
the same number of elements, in C order (shapes may differ: [T, H, D] against [T*H, D]); a tensor present in
only one dump is listed, not compared. The error is NMSE = sum((a-b)^2) / sum(a^2) with A as the reference, and
max|a-b|. The core is standard-library Python (its own .npy reader); numpy, when importable, only makes it faster.

usage: compare_dumps.py A B [--nmse 1e-5] [--tol OP=NMSE ...] [--skip PATTERN ...] [--all] [--no-curve] [--json FILE]
exit status: 0 every common tensor within tolerance, 1 a divergence, 2 nothing to compare.
"""
import argparse
import ast
import fnmatch
import json
import math
import os
import re
import struct
import sys
from array import array

try:
    import numpy as np
except ImportError:  # the comparison core does not need it
    np = None

# Order of named intermediates inside one layer (the order the forwards compute them). One list for every
# architecture: a family uses a subset (qwen35moe: DeltaNet or gated attention, then the MoE; glm-dsa: MLA, then a
# dense FFN or the MoE).
OP_ORDER = [
    "attn_norm",
    # Gated DeltaNet (qwen35 / qwen35moe / qwen3next)
    "linear_attn_qkv_mixed", "z", "beta_sigmoid", "gate", "conv_output_silu", "attn_linear_core", "final_output",
    "linear_attn_out",
    # gated attention (qwen)
    "Qcur_normed", "Kcur_normed", "attn_pregate", "attn_gated",
    # MLA + indexer (glm-dsa)
    "q", "kv_latent", "indexer_k", "kqv_out",
    "attn_output",
    "attn_residual", "attn_post_norm", "ffn_inp", "ffn_norm",
    "ffn_moe_logits", "ffn_moe_out", "ffn_shexp", "ffn_swiglu", "ffn_out", "l_out",
    # multi-token-prediction block (its own layer index, after the trunk)
    "mtp_enorm", "mtp_hnorm", "mtp_eh_proj",
]
MODEL_BEFORE = ["inp_embd"]
MODEL_AFTER = ["result_norm", "result_output"]
OK, OVER, SHAPE, NONFINITE = "ok", "over", "shape", "nonfinite"


def split_name(name):
    """'attn_norm-3' -> ('attn_norm', 3); 'result_output' -> ('result_output', None)."""
    m = re.fullmatch(r"(.+)-(\d+)", name)
    return (m.group(1), int(m.group(2))) if m else (name, None)


def sort_key(name):
    op, layer = split_name(name)
    if layer is not None:
        idx = OP_ORDER.index(op) if op in OP_ORDER else len(OP_ORDER)
        return (1, layer, idx, op)
    if name in MODEL_BEFORE:
        return (0, 0, MODEL_BEFORE.index(name), name)
    idx = MODEL_AFTER.index(name) if name in MODEL_AFTER else len(MODEL_AFTER)
    return (2, 0, idx, name)


# ---- .npy without numpy (format 1.0-3.0, little-endian float16/32/64, C order) ----

_NPY_TYPES = {"<f4": ("f", 4), "<f8": ("d", 8), "<f2": ("e", 2)}


def read_npy(path):
    """(shape, values): values is a flat array.array('f' or 'd') (float16 is widened to 'f')."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY":
        raise ValueError(f"{path}: not a .npy file")
    major = data[6]
    if major == 1:
        hlen, hstart = struct.unpack("<H", data[8:10])[0], 10
    elif major in (2, 3):
        hlen, hstart = struct.unpack("<I", data[8:12])[0], 12
    else:
        raise ValueError(f"{path}: .npy version {major} is not supported")
    header = ast.literal_eval(data[hstart:hstart + hlen].decode("latin1"))
    descr, shape = header["descr"], tuple(header["shape"])
    if header.get("fortran_order"):
        raise ValueError(f"{path}: Fortran-order .npy is not supported")
    if descr not in _NPY_TYPES:
        raise ValueError(f"{path}: dtype {descr} is not supported (float16/32/64 little-endian)")
    code, size = _NPY_TYPES[descr]
    n = 1
    for d in shape:
        n *= d
    body = data[hstart + hlen:]
    if len(body) < n * size:
        raise ValueError(f"{path}: {len(body)} data bytes, shape {shape} needs {n * size}")
    body = body[:n * size]
    if code == "e":
        values = array("f", struct.unpack(f"<{n}e", body))
    else:
        values = array(code)
        values.frombytes(body)
        if sys.byteorder == "big":
            values.byteswap()
    return shape, values


def write_npy(path, shape, values):
    """Writes a float32 C-order .npy (format 1.0) from a flat sequence of numbers."""
    values = array("f", values)
    n = 1
    for d in shape:
        n *= d
    if len(values) != n:
        raise ValueError(f"{path}: {len(values)} values for shape {tuple(shape)}")
    if sys.byteorder == "big":
        values.byteswap()
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': %r, }" % (tuple(int(d) for d in shape),)
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        f.write(values.tobytes())


def load(path, use_numpy):
    if use_numpy:
        a = np.load(path)
        return tuple(a.shape), np.asarray(a, dtype=np.float64).reshape(-1)
    return read_npy(path)


def tensor_stats(a, b):
    """Error of b against reference a (flat sequences of equal length): dict with nmse, max_abs, worst (flat index
    of the largest |a-b|), a_val, b_val, nonfinite (count of positions where either is NaN/Inf, excluded from the
    sums)."""
    if np is not None and isinstance(a, np.ndarray):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        fin = np.isfinite(a) & np.isfinite(b)
        nonfinite = int(a.size - np.count_nonzero(fin))
        d = np.where(fin, a - b, 0.0)
        num, den = float(np.sum(d * d)), float(np.sum(np.where(fin, a * a, 0.0)))
        worst = int(np.argmax(np.abs(d))) if d.size else 0
        if nonfinite:
            worst = int(np.argmin(fin))
        av, bv = (float(a[worst]), float(b[worst])) if a.size else (0.0, 0.0)
        max_abs = float(np.max(np.abs(d))) if d.size else 0.0
    else:
        num = den = max_abs = 0.0
        worst, nonfinite, first_bad = 0, 0, -1
        isfinite = math.isfinite
        for i, (x, y) in enumerate(zip(a, b)):
            if not (isfinite(x) and isfinite(y)):
                nonfinite += 1
                if first_bad < 0:
                    first_bad = i
                continue
            d = x - y
            num += d * d
            den += x * x
            if abs(d) > max_abs:
                max_abs, worst = abs(d), i
        if first_bad >= 0:
            worst = first_bad
        av, bv = (float(a[worst]), float(b[worst])) if len(a) else (0.0, 0.0)
    nmse = num / den if den > 0 else (0.0 if num == 0 else math.inf)
    return {"nmse": nmse, "max_abs": max_abs, "worst": worst, "a_val": av, "b_val": bv, "nonfinite": nonfinite}


def unravel(index, shape):
    out = []
    for d in reversed(shape):
        out.append(index % d if d else 0)
        index = index // d if d else 0
    return tuple(reversed(out))


def load_dir(d):
    return {f[:-4]: os.path.join(d, f) for f in os.listdir(d) if f.endswith(".npy")}


def tolerance_for(name, nmse_tol, tols):
    """Per-tensor tolerance: an exact name, then its op name, then a glob pattern in tols; else nmse_tol."""
    op, _ = split_name(name)
    if name in tols:
        return tols[name]
    if op in tols:
        return tols[op]
    for pat, v in tols.items():
        if fnmatch.fnmatchcase(name, pat):
            return v
    return nmse_tol


def skipped(name, patterns):
    op, _ = split_name(name)
    return any(fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(op, p) for p in patterns)


def compare_dirs(a_dir, b_dir, nmse_tol=1e-5, tols=None, skip=(), use_numpy=None, stop_at_first=False):
    """Compares every tensor name the two dumps share, in forward order. Returns a dict: records (one per compared
    tensor: name, op, layer, status ok/over/shape/nonfinite, nmse, max_abs, tol, worst (index into B's shape),
    a_val, b_val, shape_a, shape_b), only_a, only_b, skipped (names)."""
    tols = tols or {}
    use_numpy = (np is not None) if use_numpy is None else use_numpy
    A, B = load_dir(a_dir), load_dir(b_dir)
    names = sorted(set(A) & set(B), key=sort_key)
    report = {"records": [], "skipped": [n for n in names if skipped(n, skip)],
              "only_a": sorted(set(A) - set(B), key=sort_key), "only_b": sorted(set(B) - set(A), key=sort_key)}
    for name in names:
        if skipped(name, skip):
            continue
        op, layer = split_name(name)
        sa, va = load(A[name], use_numpy)
        sb, vb = load(B[name], use_numpy)
        tol = tolerance_for(name, nmse_tol, tols)
        rec = {"name": name, "op": op, "layer": layer, "tol": tol, "shape_a": list(sa), "shape_b": list(sb)}
        if len(va) != len(vb):
            rec.update(status=SHAPE, nmse=math.inf, max_abs=math.inf, worst=None, a_val=None, b_val=None)
        else:
            st = tensor_stats(va, vb)
            status = NONFINITE if st["nonfinite"] else (OVER if st["nmse"] > tol else OK)
            rec.update(status=status, nmse=st["nmse"], max_abs=st["max_abs"], worst=list(unravel(st["worst"], sb)),
                       a_val=st["a_val"], b_val=st["b_val"], nonfinite=st["nonfinite"])
        report["records"].append(rec)
        if stop_at_first and rec["status"] != OK:
            break
    return report


def first_divergence(report):
    return next((r for r in report["records"] if r["status"] != OK), None)


def layer_curve(records):
    """(layers, ops, table): table[layer][op] -> record, ops in forward order; layer-level tensors only."""
    table, ops = {}, []
    for r in records:
        if r["layer"] is None:
            continue
        table.setdefault(r["layer"], {})[r["op"]] = r
        if r["op"] not in ops:
            ops.append(r["op"])
    ops.sort(key=lambda o: (OP_ORDER.index(o) if o in OP_ORDER else len(OP_ORDER), o))
    return sorted(table), ops, table


def fmt_record(r, a_label="A", b_label="B"):
    if r["status"] == SHAPE:
        return f"{r['name']}: {r['shape_a']} vs {r['shape_b']}: element counts differ, cannot compare"
    extra = f", {r['nonfinite']} non-finite" if r.get("nonfinite") else ""
    return (f"{r['name']}: nmse {r['nmse']:.3e} (tol {r['tol']:.0e}) max|diff| {r['max_abs']:.3e} at "
            f"{tuple(r['worst'])} ({a_label} {r['a_val']:.6g} vs {b_label} {r['b_val']:.6g}){extra}")


def _log10_cell(v, bad):
    if v == 0:
        s = "."
    elif math.isinf(v) or math.isnan(v):
        s = "inf"
    else:
        s = str(int(math.floor(math.log10(v) + 0.5)))
    return s + ("!" if bad else "")


def format_curve(report, metric="nmse"):
    """The error over layers: l_out's NMSE and max|diff| per layer with a bar, then every op's log10 error per
    layer as a matrix (rows: layers; columns: ops, lettered, with a legend)."""
    layers, ops, table = layer_curve(report["records"])
    lines = []
    model = [r for r in report["records"] if r["layer"] is None]
    if model:
        cells = [f"{r['name']} {'shape!' if r['status'] == SHAPE else format(r['nmse'], '.2e')}"
                 f"{'!' if r['status'] != OK else ''}" for r in model]
        lines.append("model-level NMSE: " + ", ".join(cells))
    if not layers:
        return lines
    if "l_out" in ops:
        lines.append("l_out per layer (NMSE, max|diff|; bar: log10 NMSE from -16; '!' over tolerance)")
        for L in layers:
            r = table[L].get("l_out")
            if r is None:
                continue
            if r["status"] == SHAPE:
                lines.append(f"  {L:4d}  shape mismatch {r['shape_a']} vs {r['shape_b']}")
                continue
            n = r["nmse"]
            bar = 0 if n == 0 else max(0, min(40, int(round((math.log10(n) + 16) * 2.5)))) if math.isfinite(n) else 40
            mark = "!" if r["status"] != OK else " "
            lines.append(f"  {L:4d}  {n:9.2e} {r['max_abs']:9.2e} {mark} {'#' * bar}")
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    ops = ops[:len(letters)]
    what = "NMSE" if metric == "nmse" else "max|diff|"
    lines.append(f"log10 {what} per op ('.' bit-identical, '!' over tolerance, blank: not in both dumps)")
    w = 5
    lines.append("  layer " + "".join(f"{letters[i]:>{w}}" for i in range(len(ops))))
    for L in layers:
        cells = []
        for op in ops:
            r = table[L].get(op)
            if r is None:
                cells.append("")
            elif r["status"] == SHAPE:
                cells.append("shp!")
            else:
                cells.append(_log10_cell(r[metric], r["status"] != OK))
        lines.append(f"  {L:5d} " + "".join(f"{c:>{w}}" for c in cells))
    legend = [f"{letters[i]} {op}" for i, op in enumerate(ops)]
    for i in range(0, len(legend), 6):
        lines.append("  " + "  ".join(legend[i:i + 6]))
    return lines


def format_report(report, a_label="A", b_label="B", show_all=False, curve=True, metric="nmse"):
    """The report as lines: every tensor (show_all) or the first divergence with the tensor before it, the curve,
    the names only one side has, and a verdict."""
    recs = report["records"]
    lines = []
    first = first_divergence(report)
    if show_all:
        for r in recs:
            lines.append(fmt_record(r, a_label, b_label) + ("  <-- first divergence" if r is first else ""))
    if curve:
        lines += format_curve(report, metric)
    for side, label in (("only_a", a_label), ("only_b", b_label)):
        names = report[side]
        if names:
            lines.append(f"only in {label} ({len(names)}): {', '.join(names[:12])}{' ...' if len(names) > 12 else ''}")
    if report["skipped"]:
        sk = report["skipped"]
        lines.append(f"skipped ({len(sk)}): {', '.join(sk[:12])}{' ...' if len(sk) > 12 else ''}")
    if not recs:
        lines.append("no tensor names in common")
    elif first is None:
        lines.append(f"no divergence: all {len(recs)} compared tensors within tolerance")
    else:
        i = recs.index(first)
        prev = next((r for r in reversed(recs[:i]) if r["status"] == OK), None)
        lines.append("first divergence: " + fmt_record(first, a_label, b_label))
        if prev is not None:
            lines.append(f"  last tensor within tolerance before it: {prev['name']} (nmse {prev['nmse']:.3e})")
        n_bad = sum(1 for r in recs if r["status"] != OK)
        lines.append(f"  {n_bad} of {len(recs)} compared tensors over tolerance")
    return lines


def parse_tols(items):
    out = {}
    for it in items or []:
        k, sep, v = it.partition("=")
        if not sep:
            raise SystemExit(f"--tol {it}: expected NAME=NMSE (an op, a tensor name or a glob)")
        out[k] = float(v)
    return out


def exit_code(report):
    if not report["records"]:
        return 2
    return 1 if first_divergence(report) else 0


def add_compare_args(ap):
    ap.add_argument("--nmse", type=float, default=1e-5,
                    help="NMSE above which a tensor diverges (default 1e-5: the contract's per-layer hidden-state and "
                         "logit tolerance for a whole model against transformers in fp32)")
    ap.add_argument("--tol", action="append", metavar="NAME=NMSE",
                    help="tolerance for one op (attn_norm), tensor (l_out-3) or glob (ffn_moe_*); repeatable")
    ap.add_argument("--skip", action="append", default=[], metavar="PATTERN",
                    help="leave out ops / tensor names matching PATTERN (glob); repeatable")
    ap.add_argument("--all", action="store_true", help="print every compared tensor, not just the first divergence")
    ap.add_argument("--no-curve", action="store_true", help="leave out the per-layer error curve")
    ap.add_argument("--curve-metric", choices=["nmse", "max_abs"], default="nmse",
                    help="what the per-op matrix shows (default nmse)")
    ap.add_argument("--json", metavar="FILE", help="write every record (and the names only one side has) as JSON")
    ap.add_argument("--pure-python", action="store_true",
                    help="compare without numpy even when it imports (what the tests run; slow on big dumps)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="reference dump directory (the NMSE denominator)")
    ap.add_argument("b", help="dump directory to check")
    add_compare_args(ap)
    args = ap.parse_args(argv)
    report = compare_dirs(args.a, args.b, args.nmse, parse_tols(args.tol), args.skip,
                          use_numpy=False if args.pure_python else None)
    print("\n".join(format_report(report, "A", "B", args.all, not args.no_curve, args.curve_metric)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=str)
    return exit_code(report)


if __name__ == "__main__":
    sys.exit(main())
