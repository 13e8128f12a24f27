#!/usr/bin/env python3
"""Generate the committed (de)quantization test vectors in tests/fixtures/quant/.

For every tensor type tern converts, this writes:
  <type>.q.bin    ggml's reference quantization of input.f32.bin (all rows, concatenated)
  <type>.dq.bin   the float32 dequantization of <type>.q.bin
  <type>.rq.bin   random block bytes (finite random fp16/f32 scale fields) for dequantization coverage
  <type>.rdq.bin  their float32 dequantization
and index.json describing the rows and where each expectation came from.

Sources (independent of tern):
  dequantization: gguf.quants.dequantize (the `gguf` package); Q8_1 and Q8_K, which gguf lacks, come from
    ggml's own to_float / dequantize_row_q8_K (via llama-cpp-python's bundled libggml) or, failing that, from the one-line numpy
    formula qs * d.
  quantization: gguf.quants.quantize where gguf implements it (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0),
    cross-checked against ggml when available; otherwise ggml_quantize_chunk(type, ..., imatrix=NULL) from the
    libggml bundled with llama-cpp-python (Q8_1 and Q8_K: ggml's exported quantize_row_q8_1_ref / quantize_row_q8_K_ref). A type whose
    quantization cannot be produced independently gets no .q.bin and index.json says so.

Usage: python3 tools/gen_quant_vectors.py [--out tests/fixtures/quant] [--seed 1234]
         [--libggml path/to/libggml-base.so --libggml-label "what it was built from"]
"""
import argparse
import ctypes
import glob
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import quants as gq

# name -> (ggml type id, block size, bytes per block, byte offsets of fp16 scale fields, offset of an f32 scale)
TYPES = {
    "f32": (T.F32, 1, 4, [], None),
    "f16": (T.F16, 1, 2, [], None),
    "bf16": (T.BF16, 1, 2, [], None),
    "q4_0": (T.Q4_0, 32, 18, [0], None),
    "q4_1": (T.Q4_1, 32, 20, [0, 2], None),
    "q5_0": (T.Q5_0, 32, 22, [0], None),
    "q5_1": (T.Q5_1, 32, 24, [0, 2], None),
    "q8_0": (T.Q8_0, 32, 34, [0], None),
    "q8_1": (T.Q8_1, 32, 36, [0, 2], None),
    "q2_K": (T.Q2_K, 256, 84, [80, 82], None),
    "q3_K": (T.Q3_K, 256, 110, [108], None),
    "q4_K": (T.Q4_K, 256, 144, [0, 2], None),
    "q5_K": (T.Q5_K, 256, 176, [0, 2], None),
    "q6_K": (T.Q6_K, 256, 210, [208], None),
    "q8_K": (T.Q8_K, 256, 292, [], 0),
    "iq4_nl": (T.IQ4_NL, 32, 18, [0], None),
    "iq4_xs": (T.IQ4_XS, 256, 136, [0], None),
}
GGUF_QUANTIZE = {"f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0"}


def make_rows(rng):
    """Input rows (float32), each a multiple of 256 elements, with a description."""
    rows = []
    rows.append(("gaussian", rng.standard_normal(512)))
    rows.append(("gaussian, long (many blocks exercise rarely-winning search steps)", rng.standard_normal(3072)))
    rows.append(("uniform [-1,1] * 0.02 (weight-like)", rng.uniform(-1, 1, 512) * 0.02))
    z = rng.standard_normal(512)
    z[:256] = 0.0                     # a whole zero super-block
    z[256:288] = 0.0                  # a zero 32-block inside a non-zero super-block
    z[300:310] = 0.0
    rows.append(("zeros: super-block, 32-block and scattered", z))
    rows.append(("constant 0.37", np.full(256, 0.37)))
    rows.append(("constant -2.5", np.full(256, -2.5)))
    big = rng.standard_normal(256) * 1e4
    big[128:] = rng.standard_normal(128) * 1e-6  # tiny half: scales underflow fp16
    rows.append(("large (1e4) then tiny (1e-6) magnitudes", big))
    rows.append(("all negative", -np.abs(rng.standard_normal(256))))
    t = rng.standard_t(2, 512)        # heavy tails: a few outliers per block
    rows.append(("student-t(2) heavy tails", t))
    mixed = rng.standard_normal(256) * np.repeat(10.0 ** rng.uniform(-3, 1, 16), 16)
    rows.append(("per-16 varying scales", mixed))
    return [(d, np.asarray(r, dtype=np.float32)) for d, r in rows]


class Ggml:
    """ctypes access to the libggml bundled with llama-cpp-python (None attributes if unavailable)."""

    class Traits(ctypes.Structure):
        _fields_ = [("type_name", ctypes.c_char_p), ("blck_size", ctypes.c_int64),
                    ("blck_size_interleave", ctypes.c_int64), ("type_size", ctypes.c_size_t),
                    ("is_quantized", ctypes.c_bool), ("to_float", ctypes.c_void_p),
                    ("from_float_ref", ctypes.c_void_p)]

    def __init__(self, libpath=None, label=None):
        self.lib = None
        self.version = None
        if libpath:  # an explicitly given libggml-base.so (e.g. built from llama-cpp-python's vendored sources)
            self.lib = ctypes.CDLL(libpath, mode=ctypes.RTLD_GLOBAL)
            self.version = label or libpath
        else:
            try:
                import llama_cpp
                from importlib.metadata import version
                self.version = "llama-cpp-python " + version("llama-cpp-python")
                libdir = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
                cands = sorted(glob.glob(os.path.join(libdir, "libggml-base.so*"))) + \
                    sorted(glob.glob(os.path.join(libdir, "libggml.so*")))
                for c in cands:
                    try:
                        lib = ctypes.CDLL(c, mode=ctypes.RTLD_GLOBAL)
                        lib.ggml_quantize_chunk  # noqa: B018 (probe)
                        self.lib = lib
                        break
                    except (OSError, AttributeError):
                        continue
            except ImportError:
                return
        if self.lib is None:
            return
        L = self.lib
        L.ggml_quantize_chunk.restype = ctypes.c_size_t
        L.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                          ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
        L.ggml_get_type_traits.restype = ctypes.POINTER(Ggml.Traits)
        L.ggml_get_type_traits.argtypes = [ctypes.c_int]

    def traits(self, t, block, size):
        tr = self.lib.ggml_get_type_traits(int(t)).contents
        assert tr.blck_size == block and tr.type_size == size, f"ggml traits mismatch for {t}: {tr.type_name}"
        return tr

    def quantize(self, name, x):
        t, block, size, _, _ = TYPES[name]
        out = np.zeros(x.size // block * size, dtype=np.uint8)
        xp = np.ascontiguousarray(x, dtype=np.float32)
        if name in ("q8_1", "q8_K"):   # not accepted by ggml_quantize_chunk: the exported reference row quantizer
            fn = getattr(self.lib, f"quantize_row_{name}_ref")
            fn.restype = None
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
            fn(xp.ctypes.data, out.ctypes.data, x.size)
        else:
            n = self.lib.ggml_quantize_chunk(int(t), xp.ctypes.data, out.ctypes.data, 0, 1, x.size, None)
            assert n == out.size
        return out

    def dequantize(self, name, q, n):
        t, block, size, _, _ = TYPES[name]
        tr = self.traits(t, block, size)
        out = np.zeros(n, dtype=np.float32)
        if tr.to_float:
            fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(tr.to_float)
        elif hasattr(self.lib, f"dequantize_row_{name}"):  # q8_K: exported, but not a type trait
            fn = getattr(self.lib, f"dequantize_row_{name}")
            fn.restype = None
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        else:
            return None
        qc = np.ascontiguousarray(q)
        fn(qc.ctypes.data, out.ctypes.data, n)
        return out


def numpy_dequant_q8(name, q):
    """Independent formula for the two 8-bit types gguf lacks: y = qs * d (float32 product)."""
    if name == "q8_1":
        b = q.reshape(-1, 36)
        d = b[:, 0:2].copy().view(np.float16).astype(np.float32)
        qs = b[:, 4:].copy().view(np.int8).astype(np.float32)
    else:
        b = q.reshape(-1, 292)
        d = b[:, 0:4].copy().view(np.float32)
        qs = b[:, 4:260].copy().view(np.int8).astype(np.float32)
    return (qs * d).astype(np.float32).reshape(-1)


def dequantize(name, q, n, ggml):
    """Expected floats for quantized bytes q of n elements, and the name of their source."""
    t = TYPES[name][0]
    if name in ("q8_1", "q8_K"):
        ref = numpy_dequant_q8(name, q)
        if ggml.lib is not None:
            g = ggml.dequantize(name, q, n)
            if g is not None:
                assert g.tobytes() == ref.tobytes(), f"{name}: ggml to_float != qs*d"
                fn = "dequantize_row_q8_K" if name == "q8_K" else "to_float"
                return g, f"ggml {fn} ({ggml.version}), equal to numpy qs*d"
        return ref, "numpy qs*d (float32)"
    y = np.asarray(gq.dequantize(q, t), dtype=np.float32).reshape(-1)
    assert y.size == n
    from importlib.metadata import version
    src = f"gguf {version('gguf')} gguf.quants.dequantize"
    if ggml.lib is not None:
        g = ggml.dequantize(name, q, n)
        if g is not None and g.tobytes() != y.tobytes():
            bad = np.flatnonzero(g.view(np.uint32) != y.view(np.uint32))
            print(f"WARNING {name}: gguf and ggml dequantize differ at {bad.size} elements", file=sys.stderr)
            src += f" (differs from ggml to_float at {bad.size} elements)"
        elif g is not None:
            src += ", equal to ggml to_float"
    return y, src


def quantize(name, x, ggml):
    """Reference bytes for x, and their source (None if no independent quantizer is available)."""
    t = TYPES[name][0]
    if name in GGUF_QUANTIZE:
        q = np.asarray(gq.quantize(x, t)).view(np.uint8).reshape(-1)
        from importlib.metadata import version
        src = f"gguf {version('gguf')} gguf.quants.quantize"
        if ggml.lib is not None:
            g = ggml.quantize(name, x)
            assert g.tobytes() == q.tobytes(), f"{name}: gguf and ggml quantization differ"
            src += f", equal to ggml_quantize_chunk ({ggml.version})"
        return q, src
    if ggml.lib is None:
        return None, None
    how = f"quantize_row_{name}_ref" if name in ("q8_1", "q8_K") else "ggml_quantize_chunk, imatrix=NULL"
    return ggml.quantize(name, x), f"ggml {how} ({ggml.version})"


def random_blocks(name, rng, nblocks):
    """Random block bytes with finite scale fields, covering every code value."""
    _, block, size, f16_offs, f32_off = TYPES[name]
    if block == 1:
        if name == "f32":
            return rng.standard_normal(256).astype(np.float32).view(np.uint8)
        bits = rng.integers(0, 1 << 16, 256, dtype=np.uint32).astype(np.uint16)
        if name == "f16":   # keep finite: clear an all-ones exponent
            bits[(bits & 0x7C00) == 0x7C00] &= 0xBFFF
        else:
            bits[(bits & 0x7F80) == 0x7F80] &= 0xBFFF
        return bits.view(np.uint8)
    b = rng.integers(0, 256, (nblocks, size), dtype=np.uint16).astype(np.uint8)
    for off in f16_offs:
        scale = (rng.uniform(1e-3, 1.0, nblocks) * rng.choice([-1, 1], nblocks)).astype(np.float16)
        b[:, off:off + 2] = scale.view(np.uint8).reshape(nblocks, 2)
    if f32_off is not None:
        b[:, f32_off:f32_off + 4] = rng.uniform(-1, 1, nblocks).astype(np.float32).view(np.uint8).reshape(nblocks, 4)
    return b.reshape(-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "quant"))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--libggml", help="path to a libggml-base.so to use instead of llama-cpp-python's")
    ap.add_argument("--libggml-label", help="provenance recorded in index.json for --libggml")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    ggml = Ggml(args.libggml, args.libggml_label)
    print("ggml:", ggml.version if ggml.lib is not None else "not available", file=sys.stderr)

    rows = make_rows(rng)
    x = np.concatenate([r for _, r in rows])
    x.tofile(os.path.join(args.out, "input.f32.bin"))
    index = {"generator": "tools/gen_quant_vectors.py", "seed": args.seed, "input": "input.f32.bin",
             "rows": [{"desc": d, "n": int(r.size)} for d, r in rows], "types": {}}

    for name, (t, block, size, _, _) in TYPES.items():
        entry = {"ggml_type": int(t), "block_size": block, "type_size": size}
        parts, src = [], None
        for _, r in rows:
            q, src = quantize(name, r, ggml)
            if q is None:
                break
            parts.append(q)
        if src is not None:
            q = np.concatenate(parts)
            q.tofile(os.path.join(args.out, f"{name}.q.bin"))
            y, dsrc = dequantize(name, q, x.size, ggml)
            y.tofile(os.path.join(args.out, f"{name}.dq.bin"))
            entry.update(quant="%s.q.bin" % name, quant_source=src, dequant="%s.dq.bin" % name, dequant_source=dsrc)
        else:
            entry["quant_source"] = "unavailable: no independent quantizer on this machine (install llama-cpp-python)"
        nrand = 512 // block if block > 1 else 256
        rq = random_blocks(name, rng, max(1, 512 // block))
        n_el = nrand * block if block > 1 else 256
        ry, rsrc = dequantize(name, rq, n_el, ggml)
        rq.tofile(os.path.join(args.out, f"{name}.rq.bin"))
        ry.tofile(os.path.join(args.out, f"{name}.rdq.bin"))
        entry.update(random_quant=f"{name}.rq.bin", random_n=n_el, random_dequant=f"{name}.rdq.bin",
                     random_dequant_source=rsrc)
        index["types"][name] = entry
        print(f"{name:7s} quant: {entry['quant_source']}", file=sys.stderr)

    with open(os.path.join(args.out, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
