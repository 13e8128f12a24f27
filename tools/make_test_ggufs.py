#!/usr/bin/env python3
"""Writes the tiny GGUF fixtures in tests/fixtures/gguf/ with the `gguf` Python package (the reference writer),
then reads each back with gguf.GGUFReader and records what the reference reader sees, plus model statistics
computed here independently, in <name>.expected.json. The C++ tests compare tern's reader and `tern info`
against those files. Random weights (fixed seed); shapes follow llama.cpp's qwen35moe and llama loaders at
toy sizes. Usage: python3 tools/make_test_ggufs.py [OUT_DIR]   (default tests/fixtures/gguf)
"""
import json
import os
import sys
import zlib

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

from fixturelib import qwen35moe_gguf as qg

RNG = np.random.default_rng(1234)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32) * 0.1


def quant(arr, qtype):
    return gguf.quants.quantize(arr, qtype)


def add(w, name, arr, qtype):
    """Adds arr (numpy order: last axis fastest) stored as qtype."""
    if qtype == Q.F32:
        w.add_tensor(name, arr.astype(np.float32))
    elif qtype == Q.F16:
        w.add_tensor(name, arr.astype(np.float16))
    else:
        w.add_tensor(name, quant(arr, qtype), raw_dtype=qtype)  # byte shape -> element shape


def add_vocab(w, n_vocab):
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"tok{i}" for i in range(n_vocab)])
    w.add_token_types([1] * n_vocab)
    w.add_token_merges(["t o", "to k"])


def make_qwen35moe(path):
    g = qg.Geometry(n_layer=4, interval=4, n_embd=32, n_head=4, n_head_kv=2, head_dim=16, n_rot=4, n_expert=4,
                    n_used=2, n_ff_exp=32, n_ff_shexp=32, ssm_inner=32, ssm_state=8, ssm_groups=2, ssm_rank=4,
                    conv=4, n_ctx=256)
    n_vocab = 64
    types = {"token_embd": Q.Q8_0, "output": Q.Q4_0, "ssm_beta": Q.F16, "ssm_alpha": Q.F16,
             "ffn_gate_shexp": Q.F16, "ffn_up_shexp": Q.F16, "ffn_down_shexp": Q.F16}

    def qtype(name, shape):
        if len(shape) == 1 or name.endswith(("ssm_conv1d.weight", "ffn_gate_inp.weight")):
            return Q.F32
        return types.get(name.split(".")[-2], Q.Q8_0)

    def vocab(w):
        add_vocab(w, n_vocab)
        return n_vocab

    qg.write(path, g, "tern-test-qwen35moe", vocab, lambda name, shape: f32(*shape), qtype)
    kinds = ["attention" if g.is_attention(i) else "recurrent" for i in range(g.n_layer)]
    return dict(architecture=qg.ARCH, n_layer=g.n_layer, n_embd=g.n_embd, n_head=g.n_head, n_head_kv=g.n_head_kv,
                n_expert=g.n_expert, n_expert_used=g.n_used, n_vocab=n_vocab, layer_kinds=kinds)


def make_llama(path):
    arch = "llama"
    n_layer, n_embd, n_head, n_ff, n_vocab = 2, 32, 4, 64, 48
    w = gguf.GGUFWriter(path, arch)
    w.add_name("tern-test-llama")
    w.add_block_count(n_layer)
    w.add_context_length(128)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_layer_norm_rms_eps(1e-5)
    add_vocab(w, n_vocab)
    add(w, "token_embd.weight", f32(n_vocab, n_embd), Q.F16)  # no output.weight: tied embeddings
    add(w, "output_norm.weight", f32(n_embd), Q.F32)
    for i in range(n_layer):
        b = f"blk.{i}."
        add(w, b + "attn_norm.weight", f32(n_embd), Q.F32)
        for t in ("attn_q", "attn_k", "attn_v", "attn_output"):
            add(w, b + t + ".weight", f32(n_embd, n_embd), Q.Q8_0)
        add(w, b + "ffn_norm.weight", f32(n_embd), Q.F32)
        add(w, b + "ffn_gate.weight", f32(n_ff, n_embd), Q.Q4_0)
        add(w, b + "ffn_up.weight", f32(n_ff, n_embd), Q.Q4_0)
        add(w, b + "ffn_down.weight", f32(n_embd, n_ff), Q.Q8_0)
    finish(w)
    return dict(architecture=arch, n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_head_kv=n_head,
                n_expert=0, n_expert_used=0, n_vocab=n_vocab, layer_kinds=[])


def make_minimal(path):
    """A ~1 KB fuzz seed touching every value type, a nested array, alignment 64 and a few tensor types."""
    w = gguf.GGUFWriter(path, "llama")
    w.add_custom_alignment(64)
    w.add_uint8("s.u8", 7)
    w.add_int8("s.i8", -7)
    w.add_uint16("s.u16", 700)
    w.add_int16("s.i16", -700)
    w.add_int32("s.i32", -70000)
    w.add_float32("s.f32", 0.5)
    w.add_bool("s.bool", True)
    w.add_uint64("s.u64", 1 << 40)
    w.add_int64("s.i64", -(1 << 40))
    w.add_float64("s.f64", 0.25)
    w.add_array("s.strs", ["a", "bc"])
    w.add_array("s.nested", [[1, 2], [3]])
    w.add_array("s.bools", [True, False])
    add(w, "a", f32(2, 32), Q.Q8_0)
    add(w, "b", f32(3), Q.F32)
    add(w, "c", f32(4), Q.F16)
    finish(w)


def finish(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def field_json(f):
    t = [int(x) for x in f.types]
    out = {"type": t[0]}
    if t[0] == gguf.GGUFValueType.ARRAY:
        out["elem_type"] = t[-1]
        out["len"] = len(f.data)
        if t[-1] == gguf.GGUFValueType.STRING:
            out["first"] = f.contents(0) if f.data else None
        else:
            out["first"] = f.contents(0).item() if hasattr(f.contents(0), "item") else f.contents(0)
    else:
        v = f.contents()
        out["value"] = v.item() if hasattr(v, "item") else v
    return out


def model_stats(r, info):
    """Parameter counts and decode bytes per token, computed independently of tern (rules in
    src/formats/model_summary.h: routed *_exps tensors scaled by n_used/n_expert, token_embd one row unless
    tied to the output, everything else whole)."""
    tied = not any(t.name == "output.weight" for t in r.tensors)
    n_params = n_active = per_token = 0
    types = {}
    for t in r.tensors:
        n = int(t.n_elements)
        nb = int(t.n_bytes)
        name = t.tensor_type.name.lower().replace("_k", "_K")  # ggml's spelling: q4_K
        types[name] = types.get(name, 0) + 1
        n_params += n
        if "_exps." in t.name and info["n_expert"]:
            n_active += n * info["n_expert_used"] // info["n_expert"]
            per_token += nb * info["n_expert_used"] // info["n_expert"]
        elif t.name == "token_embd.weight" and not tied:
            n_active += n
            per_token += nb // int(t.shape[1])
        else:
            n_active += n
            per_token += nb
    return dict(n_params=n_params, n_params_active=n_active, bytes_per_token=per_token, tensor_types=types,
                n_tensors=len(r.tensors))


def expected(path, info):
    r = gguf.GGUFReader(path)
    raw = open(path, "rb").read()
    kv = {}
    for name, f in r.fields.items():
        if name.startswith("GGUF."):
            continue
        kv[name] = field_json(f)
    tensors = []
    for t in r.tensors:
        data = raw[t.data_offset:t.data_offset + int(t.n_bytes)]
        tensors.append(dict(name=t.name, type=int(t.tensor_type), ne=[int(x) for x in t.shape],
                            n_elements=int(t.n_elements), n_bytes=int(t.n_bytes), file_offset=int(t.data_offset),
                            crc32=zlib.crc32(data)))
    out = dict(file_bytes=len(raw), version=int(r.fields["GGUF.version"].contents()),
               alignment=int(r.alignment), kv_order=list(kv.keys()), kv=kv, tensors=tensors)
    out.update(info)
    out.update(model_stats(r, info))
    return out


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests",
                                                                   "fixtures", "gguf")
    os.makedirs(out_dir, exist_ok=True)
    for name, fn in (("tiny-qwen35moe", make_qwen35moe), ("tiny-llama", make_llama)):
        path = os.path.join(out_dir, name + ".gguf")
        info = fn(path)
        with open(os.path.join(out_dir, name + ".expected.json"), "w") as f:
            json.dump(expected(path, info), f, indent=1, sort_keys=False)
            f.write("\n")
        print(f"wrote {path} ({os.path.getsize(path)} bytes)")
    # Fuzz seeds: the small fixture, a minimal file with every value type, and the qwen35moe header alone.
    seeds = os.path.join(os.path.dirname(__file__), "..", "fuzz", "seeds", "gguf")
    os.makedirs(seeds, exist_ok=True)
    make_minimal(os.path.join(seeds, "minimal.gguf"))
    with open(os.path.join(out_dir, "tiny-llama.gguf"), "rb") as f:
        open(os.path.join(seeds, "tiny-llama.gguf"), "wb").write(f.read())
    r = gguf.GGUFReader(os.path.join(out_dir, "tiny-qwen35moe.gguf"))
    with open(os.path.join(out_dir, "tiny-qwen35moe.gguf"), "rb") as f:
        open(os.path.join(seeds, "qwen35moe-head.gguf"), "wb").write(f.read()[:r.data_offset])


if __name__ == "__main__":
    main()
