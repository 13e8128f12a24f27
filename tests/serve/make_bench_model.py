#!/usr/bin/env python3
"""Writes a random-weight qwen35moe GGUF at Qwen3.5-35B-A3B's real layer widths (n_embd 2048, 256 experts top-8 of
width 512 plus a shared expert, 16 query / 2 KV heads of 256, DeltaNet 32 x 128 value heads) but only N_LAYER layers
(3 DeltaNet : 1 attention), for bench_batching.py. Experts Q4_0, other matrices Q8_0; the tokenizer and chat
template are copied from the bundled tern-tiny model (vocabulary 4096). Not committed (about 0.5 GB per layer).

usage: make_bench_model.py OUT.gguf [N_LAYER=4]
"""
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

OUT = sys.argv[1]
N_LAYER = int(sys.argv[2]) if len(sys.argv) > 2 else 4
TINY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "tern-tiny-q35moe.gguf")
ARCH = "qwen35moe"
RNG = np.random.default_rng(7)

n_embd, n_head, n_head_kv, head_dim = 2048, 16, 2, 256
n_expert, n_used, n_ff_exp, n_ff_shexp = 256, 8, 512, 512
ssm_inner, ssm_state, ssm_groups, ssm_rank, conv, interval = 4096, 128, 16, 32, 4, 4


def rand(*shape, scale=0.02):
    return RNG.standard_normal(shape, dtype=np.float32) * scale


def add(w, name, arr, qtype):
    if qtype == Q.F32:
        w.add_tensor(name, arr.astype(np.float32))
    else:
        w.add_tensor(name, gguf.quants.quantize(arr, qtype), raw_dtype=qtype)


def copy_tokenizer(w):
    r = gguf.GGUFReader(TINY)
    for key, f in r.fields.items():
        if not key.startswith("tokenizer."):
            continue
        t = f.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            sub = f.types[-1]
            if sub == gguf.GGUFValueType.STRING:
                val = [bytes(f.parts[i]).decode("utf-8", "surrogateescape") for i in f.data]
            else:
                val = [f.parts[i][0].item() for i in f.data]
            w.add_key_value(key, val, t, sub_type=sub)
        elif t == gguf.GGUFValueType.STRING:
            w.add_key_value(key, bytes(f.parts[f.data[0]]).decode("utf-8"), t)
        else:
            w.add_key_value(key, f.parts[f.data[0]][0].item(), t)
    return len(r.fields["tokenizer.ggml.tokens"].data)


w = gguf.GGUFWriter(OUT, ARCH)
w.add_name(f"bench-q35moe-real-width-{N_LAYER}l")
w.add_block_count(N_LAYER)
w.add_context_length(4096)
w.add_embedding_length(n_embd)
w.add_head_count(n_head)
w.add_head_count_kv(n_head_kv)
w.add_key_length(head_dim)
w.add_value_length(head_dim)
w.add_expert_count(n_expert)
w.add_expert_used_count(n_used)
w.add_expert_feed_forward_length(n_ff_exp)
w.add_expert_shared_feed_forward_length(n_ff_shexp)
w.add_layer_norm_rms_eps(1e-6)
w.add_rope_freq_base(10000000.0)
w.add_rope_dimension_count(64)
w.add_uint32(f"{ARCH}.full_attention_interval", interval)
w.add_ssm_conv_kernel(conv)
w.add_ssm_state_size(ssm_state)
w.add_ssm_group_count(ssm_groups)
w.add_ssm_time_step_rank(ssm_rank)
w.add_ssm_inner_size(ssm_inner)
n_vocab = copy_tokenizer(w)
add(w, "token_embd.weight", rand(n_vocab, n_embd, scale=1.0), Q.Q8_0)
add(w, "output_norm.weight", np.ones(n_embd, np.float32), Q.F32)
add(w, "output.weight", rand(n_vocab, n_embd), Q.Q8_0)
for i in range(N_LAYER):
    b = f"blk.{i}."
    print(f"layer {i}", flush=True)
    add(w, b + "attn_norm.weight", np.ones(n_embd, np.float32), Q.F32)
    add(w, b + "post_attention_norm.weight", np.ones(n_embd, np.float32), Q.F32)
    if (i + 1) % interval == 0:
        add(w, b + "attn_q.weight", rand(2 * n_head * head_dim, n_embd), Q.Q8_0)
        add(w, b + "attn_k.weight", rand(n_head_kv * head_dim, n_embd), Q.Q8_0)
        add(w, b + "attn_v.weight", rand(n_head_kv * head_dim, n_embd), Q.Q8_0)
        add(w, b + "attn_output.weight", rand(n_embd, n_head * head_dim), Q.Q8_0)
        add(w, b + "attn_q_norm.weight", np.ones(head_dim, np.float32), Q.F32)
        add(w, b + "attn_k_norm.weight", np.ones(head_dim, np.float32), Q.F32)
    else:
        qkv = 2 * ssm_groups * ssm_state + ssm_inner
        add(w, b + "attn_qkv.weight", rand(qkv, n_embd), Q.Q8_0)
        add(w, b + "attn_gate.weight", rand(ssm_inner, n_embd), Q.Q8_0)
        add(w, b + "ssm_conv1d.weight", rand(qkv, conv, scale=0.5), Q.F32)
        add(w, b + "ssm_dt.bias", rand(ssm_rank, scale=0.5), Q.F32)
        add(w, b + "ssm_a", -np.abs(rand(ssm_rank, scale=1.0)), Q.F32)
        add(w, b + "ssm_beta.weight", rand(ssm_rank, n_embd), Q.Q8_0)
        add(w, b + "ssm_alpha.weight", rand(ssm_rank, n_embd), Q.Q8_0)
        add(w, b + "ssm_norm.weight", np.ones(ssm_state, np.float32), Q.F32)
        add(w, b + "ssm_out.weight", rand(n_embd, ssm_inner), Q.Q8_0)
    add(w, b + "ffn_gate_inp.weight", rand(n_expert, n_embd, scale=0.1), Q.F32)
    for name, shape in (("gate", (n_expert, n_ff_exp, n_embd)), ("up", (n_expert, n_ff_exp, n_embd)),
                        ("down", (n_expert, n_embd, n_ff_exp))):
        add(w, b + f"ffn_{name}_exps.weight", rand(*shape), Q.Q4_0)
    add(w, b + "ffn_gate_inp_shexp.weight", rand(n_embd), Q.F32)
    add(w, b + "ffn_gate_shexp.weight", rand(n_ff_shexp, n_embd), Q.Q8_0)
    add(w, b + "ffn_up_shexp.weight", rand(n_ff_shexp, n_embd), Q.Q8_0)
    add(w, b + "ffn_down_shexp.weight", rand(n_embd, n_ff_shexp), Q.Q8_0)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print(f"wrote {OUT}")
