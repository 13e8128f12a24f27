#!/usr/bin/env python3
"""Writes a random-weight qwen35moe GGUF at Qwen3.5-35B-A3B's real layer widths (n_embd 2048, 256 experts top-8 of
width 512 plus a shared expert, 16 query / 2 KV heads of 256, DeltaNet 16 key / 32 value heads of 128, untied
output) with N layers (3 DeltaNet : 1 attention). The tokenizer and chat template are the bundled tern-tiny
model's (4096 tokens); --vocab pads the vocabulary with unused `[PADi]` tokens, as llama.cpp's converter pads real
Qwen vocabularies (Qwen3.5's is 248320). Not committed (about 0.5-0.9 GB per layer). Used by bench/e2e.py (which
requantizes the Q8_0 file with llama.cpp's quantizer) and tests/serve/bench_batching.py's model.

--experts N keeps every width but routes top-8 among N experts (bench/e2e.py --small: files small enough for a
smoke run).

usage: make_bench_model.py OUT.gguf [--layers 4] [--vocab 4096] [--experts 256] [--type q8_0|q4_0-experts] [--seed 7]
                           [--mtp]
"""
import argparse
import os
import sys
from dataclasses import replace

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixturelib import qwen35moe_gguf as qg  # noqa: E402

TINY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "tern-tiny-q35moe.gguf")
TYPES = ("q8_0", "q4_0-experts")  # every matrix Q8_0 | routed experts Q4_0, other matrices Q8_0


def field_value(f):
    t = f.types[0]
    if t == gguf.GGUFValueType.ARRAY:
        sub = f.types[-1]
        if sub == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8", "surrogateescape") for i in f.data], t, sub
        return [f.parts[i][0].item() for i in f.data], t, sub
    if t == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8"), t, None
    return f.parts[f.data[0]][0].item(), t, None


def tokenizer_writer(n_vocab):
    """Copies tern-tiny's tokenizer keys, padding tokens and token types to n_vocab; returns the vocab callback."""
    r = gguf.GGUFReader(TINY)
    n_tiny = len(r.fields["tokenizer.ggml.tokens"].data)
    if n_vocab < n_tiny:
        sys.exit(f"error: --vocab {n_vocab} is below the tokenizer's {n_tiny} tokens")

    def vocab(w):
        for key, f in r.fields.items():
            if not key.startswith("tokenizer."):
                continue
            val, t, sub = field_value(f)
            if key == "tokenizer.ggml.tokens":
                val = val + [f"[PAD{i}]" for i in range(n_tiny, n_vocab)]
            elif key == "tokenizer.ggml.token_type":
                val = val + [int(gguf.TokenType.UNUSED)] * (n_vocab - n_tiny)
            elif key == "tokenizer.ggml.scores":
                val = val + [0.0] * (n_vocab - n_tiny)
            w.add_key_value(key, val, t, sub_type=sub)
        return n_vocab

    return vocab


def random_blocks(rng, shape, qtype, std):
    """Random Q8_0 / Q4_0 blocks written directly (uniform quants, one scale; std about `std`): ~50x faster than
    drawing floats and quantizing them with gguf-py, which matters at ~1e10 weights. Speed, not realism."""
    rows, n = int(np.prod(shape[:-1])), shape[-1]
    nb = n // 32
    if qtype == Q.Q8_0:  # f16 d, 32 x int8
        out = np.empty((rows, nb, 34), np.uint8)
        out[..., 2:] = rng.integers(-127, 128, size=(rows, nb, 32), dtype=np.int8).view(np.uint8)
        d = std / (127 / np.sqrt(3))
    else:  # Q4_0: f16 d, 16 bytes of nibbles (value - 8)
        out = np.empty((rows, nb, 18), np.uint8)
        out[..., 2:] = rng.integers(0, 256, size=(rows, nb, 16), dtype=np.uint8)
        d = std / 4.6
    out[..., :2] = np.frombuffer(np.float16(d).tobytes(), np.uint8)
    return out.reshape(*shape[:-1], nb * out.shape[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=4, help="layers (a multiple of 4 keeps the 3:1 pattern)")
    ap.add_argument("--vocab", type=int, default=4096, help="vocabulary size (>= 4096)")
    ap.add_argument("--experts", type=int, default=256, help="routed experts per layer (top-8 of them); >= 8")
    ap.add_argument("--type", choices=TYPES, default="q8_0")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--mtp", action="store_true", help="add one MTP (nextn) block after the trunk, as llama.cpp's "
                    "converter writes Qwen3.5's (speculative decoding's draft; random, so no useful acceptance)")
    a = ap.parse_args()
    if a.layers < 1:
        sys.exit("error: --layers must be >= 1")
    if a.experts < qg.REAL_WIDTHS.n_used:
        sys.exit(f"error: --experts must be >= {qg.REAL_WIDTHS.n_used} (the experts each token uses)")
    rng = np.random.default_rng(a.seed)
    g = replace(qg.REAL_WIDTHS.with_layers(a.layers), n_expert=a.experts, n_mtp=1 if a.mtp else 0)

    def qtype(name, shape):
        if len(shape) == 1 or name.endswith(("ssm_conv1d.weight", "ffn_gate_inp.weight")):
            return Q.F32
        if a.type == "q4_0-experts" and "_exps." in name:
            return Q.Q4_0
        return Q.Q8_0

    def init(name, shape):
        if name.endswith(("norm.weight",)):
            return np.ones(shape, np.float32)
        scale = {"token_embd.weight": 1.0, "ssm_conv1d.weight": 0.5, "ssm_dt.bias": 0.5, "ssm_a": 1.0,
                 "ffn_gate_inp.weight": 0.1}.get(name.split(".", 2)[-1] if name.startswith("blk.") else name, 0.02)
        q = qtype(name, shape)
        if q in (Q.Q8_0, Q.Q4_0):
            return random_blocks(rng, shape, q, scale)
        x = rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)
        return -np.abs(x) if name.endswith("ssm_a") else x

    qg.write(a.out, g, f"bench-q35moe-real-width-{a.layers}l", tokenizer_writer(a.vocab), init, qtype,
             progress=True)
    print(f"wrote {a.out} ({os.path.getsize(a.out) / 1e9:.2f} GB)")


if __name__ == "__main__":
    main()
