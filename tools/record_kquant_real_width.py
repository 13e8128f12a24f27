#!/usr/bin/env python3
"""Records the tensor types llama.cpp's quantizer chooses for the K-quant mixes at Qwen3.5-35B-A3B's real widths,
so tests/convert/test_quant_mix.cpp can check tern's mix rules (convert/quant_mix) against them in CI.

At the toy widths of the committed checkpoints most tensors take llama.cpp's `ncols % 256` fallbacks, so the
per-layer rules (use_more_bits layers, attn_v / ffn_down upgrades, output.weight) are only exercised at real
widths. Type choice depends on names, file order, the row length (ne[0]), the layer count and hparams, never on
data, so this writes a 40-layer BF16 GGUF of zeros in exactly the layout llama.cpp's converter gives qwen35moe
(the tensor order and metadata of tests/fixtures/convert/q35-ratio.bf16.gguf, repeated per layer), at the
35B-A3B's widths (hidden 2048, 16 q / 2 kv heads of 256, DeltaNet 16 key / 32 value heads of 128, expert and
shared ff 512), except two sizes that no rule reads: 4 experts instead of 256 (llama.cpp only special-cases
n_expert == 8) and a 2048-token vocabulary (its row length stays 2048). Then llama_model_quantize (via
llama-cpp-python) makes Q4_K_M, Q5_K_M and Q6_K from it; the per-tensor types go to
tests/fixtures/convert/llamacpp_kquants_real_width.json.

usage: python3 tools/record_kquant_real_width.py [--work /tmp/tern-kquant-real]   (~4 GB on disk, a few minutes)
"""
from __future__ import annotations

import argparse
import ctypes
import json
from pathlib import Path

import gguf
import llama_cpp
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "tests/fixtures/convert/q35-ratio.bf16.gguf"
OUT = ROOT / "tests/fixtures/convert/llamacpp_kquants_real_width.json"
MIXES = {"q4_k_m": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M, "q5_k_m": llama_cpp.LLAMA_FTYPE_MOSTLY_Q5_K_M,
         "q6_k": llama_cpp.LLAMA_FTYPE_MOSTLY_Q6_K}

N_LAYER, INTERVAL, N_EMBD, N_VOCAB = 40, 4, 2048, 2048
N_HEAD, N_HEAD_KV, HEAD_DIM = 16, 2, 256
K_HEADS, V_HEADS, HEAD_K, HEAD_V, CONV = 16, 32, 128, 128, 4
N_EXPERT, N_USED, FF, FF_SH = 4, 2, 512, 512
CONV_DIM = 2 * K_HEADS * HEAD_K + V_HEADS * HEAD_V

# GGUF ne (fastest first) of every tensor kind at the real widths.
SHAPES = {
    "output.weight": [N_EMBD, N_VOCAB], "token_embd.weight": [N_EMBD, N_VOCAB], "output_norm.weight": [N_EMBD],
    "attn_norm.weight": [N_EMBD], "post_attention_norm.weight": [N_EMBD],
    "ssm_a": [V_HEADS], "ssm_dt.bias": [V_HEADS], "ssm_conv1d.weight": [CONV, CONV_DIM],
    "ssm_alpha.weight": [N_EMBD, V_HEADS], "ssm_beta.weight": [N_EMBD, V_HEADS],
    "attn_qkv.weight": [N_EMBD, CONV_DIM], "attn_gate.weight": [N_EMBD, V_HEADS * HEAD_V],
    "ssm_norm.weight": [HEAD_V], "ssm_out.weight": [V_HEADS * HEAD_V, N_EMBD],
    "ffn_down_exps.weight": [FF, N_EMBD, N_EXPERT], "ffn_gate_exps.weight": [N_EMBD, FF, N_EXPERT],
    "ffn_up_exps.weight": [N_EMBD, FF, N_EXPERT], "ffn_gate_inp.weight": [N_EMBD, N_EXPERT],
    "ffn_down_shexp.weight": [FF_SH, N_EMBD], "ffn_gate_shexp.weight": [N_EMBD, FF_SH],
    "ffn_up_shexp.weight": [N_EMBD, FF_SH], "ffn_gate_inp_shexp.weight": [N_EMBD, 1],
    "attn_k_norm.weight": [HEAD_DIM], "attn_q_norm.weight": [HEAD_DIM],
    "attn_k.weight": [N_EMBD, N_HEAD_KV * HEAD_DIM], "attn_v.weight": [N_EMBD, N_HEAD_KV * HEAD_DIM],
    "attn_q.weight": [N_EMBD, 2 * N_HEAD * HEAD_DIM], "attn_output.weight": [N_HEAD * HEAD_DIM, N_EMBD],
}
GEOMETRY = {
    "block_count": N_LAYER, "embedding_length": N_EMBD, "attention.head_count": N_HEAD,
    "attention.head_count_kv": N_HEAD_KV, "attention.key_length": HEAD_DIM, "attention.value_length": HEAD_DIM,
    "expert_count": N_EXPERT, "expert_used_count": N_USED, "expert_feed_forward_length": FF,
    "expert_shared_feed_forward_length": FF_SH, "ssm.conv_kernel": CONV, "ssm.state_size": HEAD_K,
    "ssm.group_count": K_HEADS, "ssm.time_step_rank": V_HEADS, "ssm.inner_size": V_HEADS * HEAD_V,
    "rope.dimension_count": HEAD_DIM // 4, "full_attention_interval": INTERVAL,
}


def field_value(f):
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        return [f.contents(i) for i in range(len(f.data))], f.types[1]
    return f.contents(), None


def write_base(path: Path) -> None:
    t = gguf.GGUFReader(TEMPLATE)
    w = gguf.GGUFWriter(str(path), "qwen35moe")
    for name, f in t.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        key = name.removeprefix("qwen35moe.")
        if key in GEOMETRY and name.startswith("qwen35moe."):
            w.add_uint32(name, GEOMETRY[key])
        elif name == "qwen35moe.attention.recurrent_layers":
            w.add_array(name, [bool((i + 1) % INTERVAL) for i in range(N_LAYER)])
        elif name == "tokenizer.ggml.tokens":
            w.add_array(name, [f"t{i}" for i in range(N_VOCAB)])
        elif name == "tokenizer.ggml.token_type":
            w.add_array(name, [1] * N_VOCAB)
        elif name in ("tokenizer.ggml.merges",):
            w.add_array(name, [])
        elif name.startswith("tokenizer.ggml.") and name.endswith("_token_id"):
            w.add_uint32(name, 0)
        else:
            value, sub = field_value(f)
            w.add_key_value(name, value, f.types[0], sub_type=sub)
    # Per-layer order: the template's layer 0 (DeltaNet) and layer 3 (attention), in file order.
    order = {"deltanet": [], "attention": []}
    head, tail = [], []
    for tt in t.tensors:
        if tt.name.startswith("blk.0."):
            order["deltanet"].append((tt.name[6:], tt.tensor_type))
        elif tt.name.startswith("blk.3."):
            order["attention"].append((tt.name[6:], tt.tensor_type))
        elif not tt.name.startswith("blk."):
            (head if not tail and tt.name != "output_norm.weight" else tail).append((tt.name, tt.tensor_type))
    tensors = list(head)
    for il in range(N_LAYER):
        kind = "attention" if (il + 1) % INTERVAL == 0 else "deltanet"
        tensors += [(f"blk.{il}.{n}", ty) for n, ty in order[kind]]
    tensors += tail
    for name, ty in tensors:
        ne = SHAPES[name.split(".", 2)[2] if name.startswith("blk.") else name]
        shape = list(reversed(ne))
        if ty == gguf.GGMLQuantizationType.F32:
            w.add_tensor(name, np.zeros(shape, dtype=np.float32))
        else:  # BF16: raw uint16 zeros, byte shape -> element shape
            w.add_tensor(name, np.zeros(shape, dtype=np.uint16), raw_dtype=gguf.GGMLQuantizationType.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default="/tmp/tern-kquant-real")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    base = work / "real-width.bf16.gguf"
    if not base.exists():
        write_base(base)
    out = {"llama_cpp_python": llama_cpp.__version__, "n_expert": N_EXPERT, "n_layer": N_LAYER, "mixes": {}}
    # ne as the quantizer's input has them (its output drops trailing 1s); types in its processing order.
    base_ne = {t.name: [int(x) for x in t.shape] for t in gguf.GGUFReader(base).tensors}
    for mix, ftype in MIXES.items():
        dst = work / f"real-width.{mix}.gguf"
        p = llama_cpp.llama_model_quantize_default_params()
        p.ftype = ftype
        p.nthread = 2
        rc = llama_cpp.llama_model_quantize(str(base).encode(), str(dst).encode(), ctypes.byref(p))
        if rc != 0:
            raise SystemExit(f"llama_model_quantize {mix}: {rc}")
        r = gguf.GGUFReader(dst)
        out["mixes"][mix] = [[t.name, base_ne[t.name], t.tensor_type.name] for t in r.tensors]
        dst.unlink()
        print(f"{mix}: {len(r.tensors)} tensors")
    OUT.write_text(json.dumps(out, indent=0) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
