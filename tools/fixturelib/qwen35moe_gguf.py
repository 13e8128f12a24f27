"""One writer for random-weight qwen35moe GGUFs, shared by the toy fixtures (tools/make_test_ggufs.py) and the
real-width benchmark models (tools/make_bench_model.py, bench/e2e.py). Tensor names, shapes and order follow
llama.cpp's qwen35moe loader. Tensors are declared first and then generated, quantized and written one at a time,
so a multi-GB model never sits in memory whole. Not a converter: weights are random.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

ARCH = "qwen35moe"


@dataclass(frozen=True)
class Geometry:
    n_layer: int
    interval: int      # every interval-th layer is full attention, the others Gated DeltaNet (3:1 at 4)
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_rot: int
    n_expert: int
    n_used: int
    n_ff_exp: int
    n_ff_shexp: int
    ssm_inner: int     # DeltaNet value width: n_v_heads * head_v_dim
    ssm_state: int     # DeltaNet head dim (key = value)
    ssm_groups: int    # DeltaNet key heads
    ssm_rank: int      # DeltaNet value heads
    conv: int
    n_ctx: int
    rope_sections: tuple[int, ...] | None = None  # MRoPE sections (pairs); llama.cpp requires them, tern ignores
    n_mtp: int = 0     # multi-token-prediction blocks after the trunk (llama.cpp's nextn layout)

    def with_layers(self, n_layer: int) -> "Geometry":
        return replace(self, n_layer=n_layer)

    def is_attention(self, i: int) -> bool:
        return (i + 1) % self.interval == 0


# Qwen3.5-35B-A3B's layer widths (its config.json); the layer count is the caller's.
REAL_WIDTHS = Geometry(n_layer=4, interval=4, n_embd=2048, n_head=16, n_head_kv=2, head_dim=256, n_rot=64,
                       n_expert=256, n_used=8, n_ff_exp=512, n_ff_shexp=512, ssm_inner=4096, ssm_state=128,
                       ssm_groups=16, ssm_rank=32, conv=4, n_ctx=4096,
                       rope_sections=(11, 11, 10, 0))


def tensor_plan(g: Geometry, n_vocab: int, tied: bool = False) -> list[tuple[str, tuple[int, ...]]]:
    """(name, numpy shape: last axis fastest) of every tensor, in file order."""
    p = [("token_embd.weight", (n_vocab, g.n_embd)), ("output_norm.weight", (g.n_embd,))]
    if not tied:
        p.append(("output.weight", (n_vocab, g.n_embd)))
    qkv = 2 * g.ssm_groups * g.ssm_state + g.ssm_inner
    for i in range(g.n_layer + g.n_mtp):
        b = f"blk.{i}."
        mtp = i >= g.n_layer  # an MTP block: a full-attention MoE layer plus its nextn tensors
        p += [(b + "attn_norm.weight", (g.n_embd,)), (b + "post_attention_norm.weight", (g.n_embd,))]
        if mtp or g.is_attention(i):  # q is double width: query + output gate
            p += [(b + "attn_q.weight", (2 * g.n_head * g.head_dim, g.n_embd)),
                  (b + "attn_k.weight", (g.n_head_kv * g.head_dim, g.n_embd)),
                  (b + "attn_v.weight", (g.n_head_kv * g.head_dim, g.n_embd)),
                  (b + "attn_output.weight", (g.n_embd, g.n_head * g.head_dim)),
                  (b + "attn_q_norm.weight", (g.head_dim,)), (b + "attn_k_norm.weight", (g.head_dim,))]
        else:
            p += [(b + "attn_qkv.weight", (qkv, g.n_embd)), (b + "attn_gate.weight", (g.ssm_inner, g.n_embd)),
                  (b + "ssm_conv1d.weight", (qkv, g.conv)), (b + "ssm_dt.bias", (g.ssm_rank,)),
                  (b + "ssm_a", (g.ssm_rank,)), (b + "ssm_beta.weight", (g.ssm_rank, g.n_embd)),
                  (b + "ssm_alpha.weight", (g.ssm_rank, g.n_embd)), (b + "ssm_norm.weight", (g.ssm_state,)),
                  (b + "ssm_out.weight", (g.n_embd, g.ssm_inner))]
        p += [(b + "ffn_gate_inp.weight", (g.n_expert, g.n_embd)),
              (b + "ffn_gate_exps.weight", (g.n_expert, g.n_ff_exp, g.n_embd)),
              (b + "ffn_up_exps.weight", (g.n_expert, g.n_ff_exp, g.n_embd)),
              (b + "ffn_down_exps.weight", (g.n_expert, g.n_embd, g.n_ff_exp)),
              (b + "ffn_gate_inp_shexp.weight", (g.n_embd,)),
              (b + "ffn_gate_shexp.weight", (g.n_ff_shexp, g.n_embd)),
              (b + "ffn_up_shexp.weight", (g.n_ff_shexp, g.n_embd)),
              (b + "ffn_down_shexp.weight", (g.n_embd, g.n_ff_shexp))]
        if mtp:
            p += [(b + "nextn.eh_proj.weight", (g.n_embd, 2 * g.n_embd)), (b + "nextn.enorm.weight", (g.n_embd,)),
                  (b + "nextn.hnorm.weight", (g.n_embd,)), (b + "nextn.shared_head_norm.weight", (g.n_embd,))]
    return p


def add_hparams(w: gguf.GGUFWriter, g: Geometry, name: str) -> None:
    w.add_name(name)
    w.add_block_count(g.n_layer + g.n_mtp)
    if g.n_mtp:
        w.add_uint32(f"{ARCH}.nextn_predict_layers", g.n_mtp)
    w.add_context_length(g.n_ctx)
    w.add_embedding_length(g.n_embd)
    w.add_head_count(g.n_head)
    w.add_head_count_kv(g.n_head_kv)
    w.add_key_length(g.head_dim)
    w.add_value_length(g.head_dim)
    w.add_expert_count(g.n_expert)
    w.add_expert_used_count(g.n_used)
    w.add_expert_feed_forward_length(g.n_ff_exp)
    w.add_expert_shared_feed_forward_length(g.n_ff_shexp)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000000.0)
    w.add_rope_dimension_count(g.n_rot)
    if g.rope_sections is not None:
        w.add_rope_dimension_sections(list(g.rope_sections))
    w.add_uint32(f"{ARCH}.full_attention_interval", g.interval)
    w.add_ssm_conv_kernel(g.conv)
    w.add_ssm_state_size(g.ssm_state)
    w.add_ssm_group_count(g.ssm_groups)
    w.add_ssm_time_step_rank(g.ssm_rank)
    w.add_ssm_inner_size(g.ssm_inner)


def encode(arr: np.ndarray, qtype: Q) -> np.ndarray:
    """arr stored as qtype: f32/f16 arrays, or the quantized bytes (shape [..., row_bytes])."""
    if qtype == Q.F32:
        return arr.astype(np.float32)
    if qtype == Q.F16:
        return arr.astype(np.float16)
    return gguf.quants.quantize(arr, qtype)


def write(path: str, g: Geometry, name: str, vocab: Callable[[gguf.GGUFWriter], int],
          init: Callable[[str, tuple[int, ...]], np.ndarray], qtype: Callable[[str, tuple[int, ...]], Q],
          tied: bool = False, progress: bool = False) -> None:
    """Writes the model. vocab(w) adds the tokenizer keys and returns n_vocab; init(name, shape) draws a tensor
    (called in file order, so a seeded generator gives the same file every time), either as floats or already
    encoded (uint8, the byte shape of its type); qtype(name, shape) its type."""
    w = gguf.GGUFWriter(path, ARCH)
    add_hparams(w, g, name)
    n_vocab = vocab(w)
    plan = [(n, s, qtype(n, s)) for n, s in tensor_plan(g, n_vocab, tied)]
    for n, s, q in plan:
        if q in (Q.F32, Q.F16):
            dt = np.float32 if q == Q.F32 else np.float16
            w.add_tensor_info(n, s, np.dtype(dt), int(np.prod(s)) * np.dtype(dt).itemsize)
        else:
            bshape = gguf.quants.quant_shape_to_byte_shape(s, q)
            w.add_tensor_info(n, bshape, np.dtype(np.uint8), int(np.prod(bshape)), raw_dtype=q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for n, s, q in plan:
        if progress and n.endswith("attn_norm.weight"):
            print(f"  {path}: layer {n.split('.')[1]}", flush=True)
        arr = init(n, s)
        if arr.dtype == np.uint8:  # already encoded by the caller (bytes of type q)
            if arr.shape != tuple(gguf.quants.quant_shape_to_byte_shape(s, q)):
                raise ValueError(f"{n}: encoded shape {arr.shape} does not match {q.name} {s}")
            w.write_tensor_data(arr)
        else:
            w.write_tensor_data(encode(arr, q))
    w.close()
