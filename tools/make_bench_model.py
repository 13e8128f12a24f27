#!/usr/bin/env python3
"""Writes a random-weight qwen35moe GGUF at Qwen3.5-35B-A3B's real layer widths (n_embd 2048, 256 experts top-8 of
width 512 plus a shared expert, 16 query / 2 KV heads of 256, DeltaNet 16 key / 32 value heads of 128, untied
output) with N layers (3 DeltaNet : 1 attention). The tokenizer and chat template are the bundled tern-tiny
model's (4096 tokens); --vocab pads the vocabulary with unused `[PADi]` tokens, as llama.cpp's converter pads real
Qwen vocabularies (Qwen3.5's is 248320). Not committed (about 0.5-0.9 GB per layer). Used by bench/e2e.py (which
requantizes the Q8_0 file with llama.cpp's quantizer) and tests/serve/bench_batching.py's model.

--experts N keeps every width but routes top-8 among N experts (bench/e2e.py --small: files small enough for a
smoke run).

--arch glm-dsa writes a random-weight GLM-5 (GGUF `glm-dsa`) at GLM-5's published widths instead (hidden 6144, MLA
with 64 heads, q_lora 2048, kv_lora 512, nope 192 / rope 64 / v 256, DSA indexer 32 heads x 128 top-2048, 256
experts of 2048 top-8 + 1 shared, dense ff 12288, vocabulary 154880, untied output, rope theta 1e6, sigmoid routing
with exp_probs_b, expert_weights_scale 2.5, norm true): the first min(3, N-1) layers dense (GLM-5's first 3 are),
the rest MoE, no MTP block. Keys, tensor names, shapes and F32 tensors as llama.cpp's converter writes a GLM-5
checkpoint (conversion/glm.py GlmMoeDsaModel with --no-mtp: MLA kv_b split into attn_k_b / attn_v_b, indexer.*,
ffn_gate_inp and indexer.proj F32); the tokenizer is the glm5-toy fixture's (GLM BPE, pre `glm4`) padded with
unused `[PADi]` tokens to --vocab (default 154880). One MoE layer is 9.7 G parameters (~10.3 GB at Q8_0).

usage: make_bench_model.py OUT.gguf [--layers 4] [--vocab 4096] [--experts 256] [--type q8_0|q4_0-experts] [--seed 7]
                           [--mtp] [--arch qwen35moe|glm-dsa]
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
GLM_TOY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "models",
                       "glm5-toy.f16.gguf")
GLM_VOCAB = 154880
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


def tokenizer_writer(n_vocab, source=TINY):
    """Copies the tokenizer keys of `source` (tern-tiny's by default), padding tokens and token types to n_vocab;
    returns the vocab callback."""
    r = gguf.GGUFReader(source)
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


class RandomQ8Tensor:
    """A Q8_0 tensor GGUFWriter.write_tensor_data can write (it calls .nbytes and .tofile): drawn and written in
    chunks of leading rows, so a 3.2 G-element expert tensor never sits in memory whole."""

    def __init__(self, rng, shape, std, chunk_elems=1 << 26):
        self.rng, self.shape, self.std = rng, shape, std
        self.rows, self.n = int(np.prod(shape[:-1])), shape[-1]
        self.nbytes = self.rows * (self.n // 32) * 34
        self.chunk_rows = max(1, chunk_elems // self.n)

    def tofile(self, f):
        for r0 in range(0, self.rows, self.chunk_rows):
            r1 = min(self.rows, r0 + self.chunk_rows)
            random_blocks(self.rng, (r1 - r0, self.n), Q.Q8_0, self.std).tofile(f)


def glm_tensor_plan(n_layer, n_dense, n_vocab, W):
    """(name, numpy shape (outermost first), type) in llama.cpp's naming; numpy shapes are the reverse of the GGUF
    (ggml) shapes the converter prints."""
    E, H, QL, KL = W["n_embd"], W["n_head"], W["q_lora"], W["kv_lora"]
    NOPE, ROPE, V = W["nope"], W["rope"], W["v"]
    IH, ID, FF, NE, FE = W["idx_heads"], W["idx_dim"], W["ff"], W["n_expert"], W["ff_exp"]
    plan = [("token_embd.weight", (n_vocab, E), Q.Q8_0)]
    for i in range(n_layer):
        b = f"blk.{i}."
        plan += [(b + "attn_norm.weight", (E,), Q.F32),
                 (b + "attn_q_a.weight", (QL, E), Q.Q8_0),
                 (b + "attn_q_a_norm.weight", (QL,), Q.F32),
                 (b + "attn_q_b.weight", (H * (NOPE + ROPE), QL), Q.Q8_0),
                 (b + "attn_kv_a_mqa.weight", (KL + ROPE, E), Q.Q8_0),
                 (b + "attn_kv_a_norm.weight", (KL,), Q.F32),
                 (b + "attn_k_b.weight", (H, KL, NOPE), Q.Q8_0),
                 (b + "attn_v_b.weight", (H, V, KL), Q.Q8_0),
                 (b + "attn_output.weight", (E, H * V), Q.Q8_0),
                 (b + "indexer.attn_q_b.weight", (IH * ID, QL), Q.Q8_0),
                 (b + "indexer.attn_k.weight", (ID, E), Q.Q8_0),
                 (b + "indexer.k_norm.weight", (ID,), Q.F32),
                 (b + "indexer.k_norm.bias", (ID,), Q.F32),
                 (b + "indexer.proj.weight", (IH, E), Q.F32),
                 (b + "ffn_norm.weight", (E,), Q.F32)]
        if i < n_dense:
            plan += [(b + "ffn_gate.weight", (FF, E), Q.Q8_0), (b + "ffn_up.weight", (FF, E), Q.Q8_0),
                     (b + "ffn_down.weight", (E, FF), Q.Q8_0)]
        else:
            plan += [(b + "ffn_gate_inp.weight", (NE, E), Q.F32),
                     (b + "exp_probs_b.bias", (NE,), Q.F32),
                     (b + "ffn_gate_exps.weight", (NE, FE, E), Q.Q8_0),
                     (b + "ffn_up_exps.weight", (NE, FE, E), Q.Q8_0),
                     (b + "ffn_down_exps.weight", (NE, E, FE), Q.Q8_0),
                     (b + "ffn_gate_shexp.weight", (FE, E), Q.Q8_0),
                     (b + "ffn_up_shexp.weight", (FE, E), Q.Q8_0),
                     (b + "ffn_down_shexp.weight", (E, FE), Q.Q8_0)]
    plan += [("output_norm.weight", (E,), Q.F32), ("output.weight", (n_vocab, E), Q.Q8_0)]
    return plan


GLM5_WIDTHS = dict(n_embd=6144, n_head=64, q_lora=2048, kv_lora=512, nope=192, rope=64, v=256, idx_heads=32,
                   idx_dim=128, idx_topk=2048, ff=12288, n_expert=256, n_used=8, ff_exp=2048, n_shared=1)


def write_glm(a, rng):
    """Writes the glm-dsa bench model (see the module docstring), keys in the order the converter writes them."""
    W = dict(GLM5_WIDTHS, n_expert=a.experts)
    n_layer = a.layers
    n_dense = min(3, max(0, n_layer - 1))
    A = "glm-dsa"
    w = gguf.GGUFWriter(a.out, A)
    w.add_type("model")
    w.add_name(f"bench-glm5-real-width-{n_layer}l")
    w.add_uint32(f"{A}.block_count", n_layer)
    w.add_uint32(f"{A}.context_length", 202752)
    w.add_uint32(f"{A}.embedding_length", W["n_embd"])
    w.add_uint32(f"{A}.feed_forward_length", W["ff"])
    w.add_uint32(f"{A}.attention.head_count", W["n_head"])
    w.add_uint32(f"{A}.attention.head_count_kv", 1)
    w.add_float32(f"{A}.rope.freq_base", 1e6)
    w.add_float32(f"{A}.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_uint32(f"{A}.expert_count", W["n_expert"])
    w.add_uint32(f"{A}.expert_used_count", W["n_used"])
    w.add_uint32(f"{A}.expert_group_count", 1)
    w.add_uint32(f"{A}.expert_group_used_count", 1)
    w.add_uint32(f"{A}.attention.key_length", W["kv_lora"] + W["rope"])
    w.add_uint32(f"{A}.attention.value_length", W["kv_lora"])
    w.add_uint32("general.file_type", int(gguf.LlamaFileType.MOSTLY_Q8_0))
    w.add_uint32(f"{A}.leading_dense_block_count", n_dense)
    w.add_uint32(f"{A}.vocab_size", a.vocab)
    w.add_uint32(f"{A}.attention.q_lora_rank", W["q_lora"])
    w.add_uint32(f"{A}.attention.kv_lora_rank", W["kv_lora"])
    w.add_uint32(f"{A}.attention.key_length_mla", W["nope"] + W["rope"])
    w.add_uint32(f"{A}.attention.value_length_mla", W["v"])
    w.add_uint32(f"{A}.expert_feed_forward_length", W["ff_exp"])
    w.add_uint32(f"{A}.expert_shared_count", W["n_shared"])
    w.add_float32(f"{A}.expert_weights_scale", 2.5)
    w.add_bool(f"{A}.expert_weights_norm", True)
    w.add_uint32(f"{A}.rope.dimension_count", W["rope"])
    w.add_uint32(f"{A}.attention.indexer.head_count", W["idx_heads"])
    w.add_uint32(f"{A}.attention.indexer.key_length", W["idx_dim"])
    w.add_uint32(f"{A}.attention.indexer.top_k", W["idx_topk"])
    w.add_array(f"{A}.attention.indexer.types", [True] * n_layer)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    tokenizer_writer(a.vocab, GLM_TOY)(w)
    plan = glm_tensor_plan(n_layer, n_dense, a.vocab, W)
    for n, s, q in plan:
        if q == Q.F32:
            w.add_tensor_info(n, s, np.dtype(np.float32), int(np.prod(s)) * 4)
        else:
            bshape = gguf.quants.quant_shape_to_byte_shape(s, q)
            w.add_tensor_info(n, bshape, np.dtype(np.uint8), int(np.prod(bshape)), raw_dtype=q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for n, s, q in plan:
        if n.endswith("attn_norm.weight"):
            print(f"  {a.out}: layer {n.split('.')[1]}", flush=True)
        if q == Q.F32:
            if n.endswith("norm.weight"):
                arr = np.ones(s, np.float32)
            elif n.endswith("k_norm.bias"):
                arr = np.zeros(s, np.float32)
            else:  # router 0.1 (decisive sigmoid scores), selection bias 0.01, indexer head weights 0.02
                std = {"ffn_gate_inp.weight": 0.1, "exp_probs_b.bias": 0.01}.get(n.split(".", 2)[-1], 0.02)
                arr = rng.standard_normal(s, dtype=np.float32) * np.float32(std)
            w.write_tensor_data(arr)
        else:
            w.write_tensor_data(RandomQ8Tensor(rng, s, 1.0 if n == "token_embd.weight" else 0.02))
    w.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=4, help="layers (a multiple of 4 keeps the 3:1 pattern)")
    ap.add_argument("--arch", choices=("qwen35moe", "glm-dsa"), default="qwen35moe")
    ap.add_argument("--vocab", type=int, help="vocabulary size (qwen35moe: >= 4096, default 4096; glm-dsa: default "
                    f"{GLM_VOCAB})")
    ap.add_argument("--experts", type=int, default=256, help="routed experts per MoE layer (top-8 of them); >= 8")
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
    if a.arch == "glm-dsa":
        if a.type != "q8_0" or a.mtp:
            sys.exit("error: --arch glm-dsa writes Q8_0 without an MTP block")
        a.vocab = a.vocab or GLM_VOCAB
        write_glm(a, rng)
        print(f"wrote {a.out} ({os.path.getsize(a.out) / 1e9:.2f} GB)")
        return
    a.vocab = a.vocab or 4096
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
