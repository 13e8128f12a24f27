#!/usr/bin/env python3
"""Records what llama.cpp's own quantizer (llama_model_quantize, through llama-cpp-python) writes for the K-quant
mixes, so tests/shell/convert_kquant_mix.sh can check `tern convert --type q4_k_m|q5_k_m|q6_k` against it in CI
without llama.cpp: per tensor, the type and the sha256 of its data.

Sources: the llama.cpp conversions committed in tests/fixtures/convert (made from the same checkpoints in
tests/fixtures/hf that tern converts). Output: tests/fixtures/convert/llamacpp_kquants.json.

usage: python tools/record_llamacpp_kquants.py
"""
import ctypes
import hashlib
import json
import tempfile
from pathlib import Path

import gguf
import llama_cpp

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {"q35-ratio": "q35-ratio.bf16.gguf", "odd": "odd.f32.gguf"}
MIXES = {"q4_k_m": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M, "q5_k_m": llama_cpp.LLAMA_FTYPE_MOSTLY_Q5_K_M,
         "q6_k": llama_cpp.LLAMA_FTYPE_MOSTLY_Q6_K}


def main() -> None:
    out = {"llama_cpp_python": llama_cpp.__version__, "presets": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for preset, src in SOURCES.items():
            out["presets"][preset] = {}
            for name, ftype in MIXES.items():
                dst = Path(tmp) / f"{preset}.{name}.gguf"
                p = llama_cpp.llama_model_quantize_default_params()
                p.ftype = ftype
                p.nthread = 1
                rc = llama_cpp.llama_model_quantize(str(ROOT / "tests/fixtures/convert" / src).encode(),
                                                    str(dst).encode(), ctypes.byref(p))
                if rc != 0:
                    raise SystemExit(f"llama_model_quantize failed for {preset} {name}: {rc}")
                r = gguf.GGUFReader(dst)
                out["presets"][preset][name] = {
                    t.name: [t.tensor_type.name, hashlib.sha256(bytes(t.data)).hexdigest()] for t in r.tensors}
                print(preset, name, len(r.tensors), "tensors")
    path = ROOT / "tests/fixtures/convert/llamacpp_kquants.json"
    path.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print("wrote", path)


if __name__ == "__main__":
    main()
