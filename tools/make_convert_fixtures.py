#!/usr/bin/env python3
"""Fixtures for `tern convert` tests (tests/convert/): small Hugging Face checkpoints and the GGUFs llama.cpp's
own converter makes from exactly those files.

Inputs: the tiny random-weight Qwen3.5-MoE checkpoints made by tools/make_fixtures.py (fixtures helper;
default /tmp/tern-fixtures/<preset>/hf) and its llama.cpp runner (fixturelib/convert.py + convert_shim.py, which
runs convert_hf_to_gguf.py unchanged except that the BPE pre-tokenizer name is forced to "qwen2").

Outputs:
  tests/fixtures/hf/q35-ratio/   BF16 safetensors, text-only names (model.layers.*), per-expert keys
  tests/fixtures/hf/odd/         BF16 safetensors in the multimodal layout: model.language_model.* prefix,
                                 fused mlp.experts.gate_up_proj / down_proj, plus model.visual.* and mtp.*
                                 tensors that both converters must skip
  tests/fixtures/hf/q24t-shape-first8/the 2.4T shape (512 experts top-10, 16:1 attention heads, 8:1 DeltaNet value:key
                                 heads) cut to its first 8 layers (the converter treats every layer alike; 92 layers
                                 would not fit the repo), BF16, in the multimodal fused layout like odd
  tests/fixtures/hf/dense-tiny/  dense Qwen3.5 (Qwen3_5ForCausalLM, GGUF qwen35), BF16, text-only names
  tests/fixtures/hf/next-tiny/   Qwen3-Next (Qwen3NextForCausalLM, GGUF qwen3next), BF16, per-expert keys
  tests/fixtures/convert/<name>.<type>.gguf   llama.cpp conversions (--no-mtp) of the committed checkpoints

BF16 keeps the committed checkpoints small; llama.cpp widens BF16 to F32 before its transforms, as tern does.

usage: python tools/make_convert_fixtures.py [--src /tmp/tern-fixtures] [--fixturelib DIR] [--lcp-sdist PATH]
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parent.parent
PLAN = {  # committed name -> (source preset, llama.cpp output types to commit, layers kept or None, multimodal layout)
    "q35-ratio": ("q35-ratio", ["bf16", "q8_0"], None, False),
    "odd": ("odd", ["f32", "f16"], None, True),
    "q24t-shape-first8": ("q24t-shape", ["bf16"], 8, True),
    "dense-tiny": ("dense-tiny", ["bf16"], None, False),  # dense Qwen3.5 (qwen35), text-only names
    "next-tiny": ("next-tiny", ["bf16"], None, False),    # Qwen3-Next (qwen3next): fused in_proj_qkvz / in_proj_ba
}
# Names are chosen so gguf-py's directory-name heuristic derives no general.basename / finetune from them
# (provenance keys tern does not write; "q24t-shape-8l" would give basename "q24t-shape", finetune "8l").
SIDE_FILES = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"]


def keep_layers(sd: dict[str, torch.Tensor], cfg: dict, n: int) -> dict[str, torch.Tensor]:
    """The first n layers of a checkpoint (config and tensors)."""
    cfg["num_hidden_layers"] = n
    cfg["layer_types"] = cfg["layer_types"][:n]
    out = {}
    for k, v in sd.items():
        if k.startswith("model.layers.") and int(k.split(".")[2]) >= n:
            continue
        out[k] = v
    return out


def to_multimodal_layout(sd: dict[str, torch.Tensor], n_expert: int, n_layer: int) -> dict[str, torch.Tensor]:
    """Renames model.* -> model.language_model.*, fuses per-expert keys, adds tensors to be skipped."""
    out: dict[str, torch.Tensor] = {}
    for il in range(n_layer):
        p = f"model.layers.{il}.mlp.experts."
        gate = [sd.pop(f"{p}{e}.gate_proj.weight") for e in range(n_expert)]
        up = [sd.pop(f"{p}{e}.up_proj.weight") for e in range(n_expert)]
        down = [sd.pop(f"{p}{e}.down_proj.weight") for e in range(n_expert)]
        # HF Qwen3_5MoeExperts: gate_up_proj [E, 2F, H] (gate rows first), down_proj [E, H, F]
        out[f"model.language_model.layers.{il}.mlp.experts.gate_up_proj"] = torch.cat(
            [torch.stack(gate), torch.stack(up)], dim=1).contiguous()
        out[f"model.language_model.layers.{il}.mlp.experts.down_proj"] = torch.stack(down).contiguous()
    for k, v in sd.items():
        out[k.replace("model.", "model.language_model.", 1) if k.startswith("model.") else k] = v
    g = torch.Generator().manual_seed(7)
    # Tensors a text converter skips (llama.cpp: --no-mtp and the "visual." filter; tern: by default).
    out["model.visual.patch_embed.proj.weight"] = torch.randn(8, 3, 2, 4, 4, generator=g).to(torch.bfloat16)
    out["model.visual.blocks.0.attn.qkv.weight"] = torch.randn(24, 8, generator=g).to(torch.bfloat16)
    out["mtp.fc.weight"] = torch.randn(4, 8, generator=g).to(torch.bfloat16)
    out["mtp.layers.0.input_layernorm.weight"] = torch.randn(4, generator=g).to(torch.bfloat16)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", default="/tmp/tern-fixtures", help="make_fixtures.py work dir (<preset>/hf)")
    ap.add_argument("--fixturelib", default=str(ROOT / "tools"),
                    help="directory holding fixturelib/ (tools/ of the fixtures helper)")
    ap.add_argument("--lcp-sdist", default=None, help="llama-cpp-python sdist (.tar.gz or unpacked dir)")
    ap.add_argument("--work", default="/tmp/tern-convert-fixtures")
    ap.add_argument("--only", default=None, help="comma-separated names from PLAN (default: all)")
    a = ap.parse_args()
    sys.path.insert(0, a.fixturelib)
    from fixturelib import convert as lcp  # noqa: E402

    lcpp = lcp.locate_llama_cpp_src(a.lcp_sdist, Path(a.src))
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    out_gguf = ROOT / "tests/fixtures/convert"
    out_gguf.mkdir(parents=True, exist_ok=True)
    for name, (preset, types, layers, multimodal) in PLAN.items():
        if a.only and name not in a.only.split(","):
            continue
        src = Path(a.src) / preset / "hf"
        dst = ROOT / "tests/fixtures/hf" / name
        if dst.exists():
            shutil.rmtree(dst)
        dst.mkdir(parents=True)
        for f in SIDE_FILES:
            shutil.copy(src / f, dst / f)
        cfg = json.loads((src / "config.json").read_text())
        sd = {k: v.to(torch.bfloat16) for k, v in load_file(str(src / "model.safetensors")).items()}
        if layers:
            sd = keep_layers(sd, cfg, layers)
            (dst / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        if multimodal:
            sd = to_multimodal_layout(sd, cfg["num_experts"], cfg["num_hidden_layers"])
        save_file(sd, str(dst / "model.safetensors"), metadata={"format": "pt"})
        for t in types:
            gg = out_gguf / f"{name}.{t}.gguf"
            lcp.convert(lcpp, dst, t, gg, work / f"{name}.{t}.log")
            print(f"{gg.relative_to(ROOT)}: {gg.stat().st_size} bytes")


if __name__ == "__main__":
    main()
