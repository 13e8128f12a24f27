#!/usr/bin/env python3
"""Dense Qwen3.5 (GGUF arch `qwen35`) and Qwen3-Next (`qwen3next`) fixtures, derived from the committed q35-ratio F16 model, until transformers'
own Qwen3_5ForCausalLM fixtures exist (issue 15):

  q35-dense.f16.gguf  arch qwen35: q35-ratio's trunk (embeddings, attention, DeltaNet, norms, head) with a dense
                      SwiGLU FFN per layer whose gate/up/down are one of that layer's routed experts (expert
                      il % n_expert), width feed_forward_length = expert_feed_forward_length.
  q35-dense.q8_0.gguf   llama.cpp's quantizer (llama-quantize from bench/llama_tools.sh's
                      build, or --quantize) on the F16 file.
  q35-moe1.f16.gguf   arch qwen35moe with the same weights as one routed expert, top-1, no shared expert: softmax
                      over one router logit is 1, so it must compute exactly what q35-dense computes (the
                      tern test checks it; llama.cpp's qwen35 and qwen35moe graphs agree the same way).
  q35-next.f16.gguf   arch qwen3next: q35-ratio's weights in Qwen3-Next's layout (value heads in grouped order,
                      HF's, instead of the tiled order a qwen35moe GGUF holds; beta and alpha fused per key head into
                      ssm_ba), so it computes what q35-ratio computes (the tern test checks it).
  q35-next.q8_0.gguf  llama-quantize on it; likewise .q4_0 and .q4_k_m for both presets.
  <preset>/ref_llamacpp_<type>.json + bins   llama.cpp's teacher-forced logits (llama-cpp-python) on the quantized
                      files for q35-ratio's reference prompts (quantized qwen35/qwen3next agreement), in
                      tools/fixturelib/refs.py's layout. Q8_0 keeps every prompt; Q4_0 and Q4_K_M keep the lengths
                      1, 5, 64 and 300 (the 63/65 chunk-boundary prompts are covered by Q8_0 and q35-ratio: ~60 MB
                      fixture budget).

usage: python tools/make_dense_fixture.py [--quantize PATH/llama-quantize] [--types q8_0,q4_0,q4_k_m]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import gguf

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixturelib import llamacpp, refs  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "fixtures" / "models"
SRC = MODELS / "q35-ratio.f16.gguf"  # exactly the reference weights (f16-representable), half the bytes of F32
DEFAULT_QUANTIZE = Path.home() / ".cache/tern/llama.cpp-0.3.36/build/bin/llama-quantize"


def field_value(f: gguf.ReaderField):
    t = f.types[0]
    if t == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode()
    if t == gguf.GGUFValueType.ARRAY:
        sub = f.types[1]
        if sub == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode() for i in f.data]
        return [f.parts[i].tolist()[0] for i in f.data]
    return f.parts[f.data[0]].tolist()[0]


def copy_field(w: gguf.GGUFWriter, key: str, f: gguf.ReaderField) -> None:
    t = f.types[0]
    v = field_value(f)
    if t == gguf.GGUFValueType.ARRAY:
        w.add_key_value(key, v, t, sub_type=f.types[1])
    else:
        w.add_key_value(key, v, t)


def finish(w: gguf.GGUFWriter, dst: Path) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{dst}: {dst.stat().st_size} bytes")


def derive(dense: bool, dst: Path) -> None:
    r = gguf.GGUFReader(SRC)
    src_arch = "qwen35moe"
    arch = "qwen35" if dense else "qwen35moe"
    fields = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
    n_expert = field_value(fields[f"{src_arch}.expert_count"])
    n_ff = field_value(fields[f"{src_arch}.expert_feed_forward_length"])
    w = gguf.GGUFWriter(dst, arch)
    drop = {"general.architecture", f"{src_arch}.expert_count", f"{src_arch}.expert_used_count",
            f"{src_arch}.expert_shared_feed_forward_length", f"{src_arch}.expert_feed_forward_length"}
    for k, f in fields.items():
        if k in drop:
            continue
        copy_field(w, k.replace(f"{src_arch}.", f"{arch}.", 1), f)
    if dense:
        w.add_uint32(f"{arch}.feed_forward_length", n_ff)
    else:
        w.add_uint32(f"{arch}.expert_count", 1)
        w.add_uint32(f"{arch}.expert_used_count", 1)
        w.add_uint32(f"{arch}.expert_feed_forward_length", n_ff)
    for t in r.tensors:
        name = t.name
        data = np.asarray(t.data)
        if "_shexp" in name:
            continue
        if name.startswith("blk."):
            il = int(name.split(".")[1])
            e = il % n_expert
            if name.endswith("ffn_gate_inp.weight"):
                if dense:
                    continue
                data = data[e:e + 1]  # [1, n_embd]: one router row
            elif "_exps." in name:
                data = data[e]
                if dense:
                    name = name.replace("_exps.", ".")
                else:
                    data = data[None]
        assert t.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16), name
        w.add_tensor(name, np.ascontiguousarray(data))
    finish(w, dst)


def derive_next(dst: Path) -> None:
    r = gguf.GGUFReader(SRC)
    src_arch, arch = "qwen35moe", "qwen3next"
    fields = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
    hk = field_value(fields[f"{src_arch}.ssm.group_count"])
    hv = field_value(fields[f"{src_arch}.ssm.time_step_rank"])
    dk = field_value(fields[f"{src_arch}.ssm.state_size"])
    dv = field_value(fields[f"{src_arch}.ssm.inner_size"]) // hv
    rep = hv // hk
    # grouped value head p (key head p // rep) is the qwen35moe GGUF's tiled head (p % rep) * hk + p // rep
    tiled = [(p % rep) * hk + p // rep for p in range(hv)]
    heads = lambda a, axis: np.concatenate([np.take(a, range(t * dv, (t + 1) * dv), axis=axis) for t in tiled], axis=axis)
    w = gguf.GGUFWriter(dst, arch)
    for k, f in fields.items():
        if k != "general.architecture":
            copy_field(w, k.replace(f"{src_arch}.", f"{arch}.", 1), f)
    tensors = {t.name: np.asarray(t.data) for t in r.tensors}
    for name, data in tensors.items():
        if name.endswith("ssm_alpha.weight"):
            continue
        if name.endswith("attn_qkv.weight") or name.endswith("ssm_conv1d.weight"):  # rows: q | k | v channels
            data = np.concatenate([data[:2 * hk * dk], heads(data[2 * hk * dk:], 0)], axis=0)
        elif name.endswith("attn_gate.weight"):
            data = heads(data, 0)
        elif name.endswith("ssm_out.weight"):
            data = heads(data, 1)
        elif name.endswith("ssm_dt.bias") or name.endswith("ssm_a"):
            data = data[tiled]
        elif name.endswith("ssm_beta.weight"):
            beta, alpha = data[tiled], tensors[name.replace("ssm_beta", "ssm_alpha")][tiled]
            data = np.concatenate([np.concatenate([beta[g * rep:(g + 1) * rep], alpha[g * rep:(g + 1) * rep]])
                                   for g in range(hk)])
            name = name.replace("ssm_beta", "ssm_ba")
        w.add_tensor(name, np.ascontiguousarray(data))
    finish(w, dst)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quantize", type=Path, default=DEFAULT_QUANTIZE, help="llama.cpp's llama-quantize")
    ap.add_argument("--types", default="q8_0,q4_0,q4_k_m", help="quantized files (and llama.cpp references) to write")
    a = ap.parse_args()
    ftypes = {"q8_0": "Q8_0", "q4_0": "Q4_0", "q4_k_m": "Q4_K_M"}
    wanted = [t for t in a.types.split(",") if t]
    for t in wanted:
        if t not in ftypes:
            sys.exit(f"--types: unknown type {t!r} (known: {', '.join(ftypes)})")
    dense_f16 = MODELS / "q35-dense.f16.gguf"
    derive(True, dense_f16)
    derive(False, MODELS / "q35-moe1.f16.gguf")
    derive_next(MODELS / "q35-next.f16.gguf")
    types = []  # F16 is covered against transformers and llama.cpp by next-tiny / dense-tiny (tools/make_fixtures.py)
    for t, ftype in ((t, ftypes[t]) for t in wanted):
        for preset in ("q35-dense", "q35-next"):
            dst = MODELS / f"{preset}.{t}.gguf"
            subprocess.run([str(a.quantize), str(MODELS / f"{preset}.f16.gguf"), str(dst), ftype], check=True,
                           capture_output=True)
            print(f"{dst}: {dst.stat().st_size} bytes")
        types.append(t)
    version = llamacpp.available()
    if version is None:
        sys.exit("llama-cpp-python does not import: no llama.cpp references written")
    prompts = json.loads((MODELS / "q35-ratio" / "ref_hf.json").read_text())["prompts"]
    for preset, t in [(p, t) for p in ("q35-dense", "q35-next") for t in types]:
        pdir = MODELS / preset
        pdir.mkdir(exist_ok=True)
        for f in list(pdir.glob(f"llamacpp_{t}_*.bin")) + list(pdir.glob(f"ref_llamacpp_{t}.json")):
            f.unlink()
        gg = MODELS / f"{preset}.{t}.gguf"
        keep = [p for p in prompts if t == "q8_0" or len(p["tokens"]) in (1, 5, 64, 300)]
        entries = [refs.prompt_entry(pdir, f"llamacpp_{t}", p["name"], p["tokens"], llamacpp.teacher_forced(gg, p["tokens"]))
                   for p in keep]
        header = {"preset": preset, "gguf": gg.name, "gguf_sha256": refs.sha256(gg), "type": t,
                  "versions": {"llama_cpp_python": version, "gguf": getattr(gguf, "__version__", "?")},
                  "how": "llama-cpp-python Llama(logits_all=True, n_threads=2), one eval() of the whole prompt "
                         "in a fresh context; model derived by tools/make_dense_fixture.py"}
        refs.write_ref(pdir, f"llamacpp_{t}", header, entries, None)
        print(f"  {preset} ref_llamacpp_{t}.json")


if __name__ == "__main__":
    main()
