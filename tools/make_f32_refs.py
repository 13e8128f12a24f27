#!/usr/bin/env python3
"""llama.cpp references for F32 files of the transformers-made qwen3next / qwen35 fixtures (issue 15).

The F32 GGUFs are not committed (fixture budget): next-tiny and dense-tiny hold f16-representable weights, so their
F32 file is the F16 file upcast, exactly; the C++ test (tests/models: Fixtures.F32OfTheTransformersMadeArchitectures)
writes it at test time and this script writes the same values with gguf-py, runs llama.cpp (llama-cpp-python) on it
and commits only the logits: <preset>/ref_llamacpp_f32.json + bins, prompt lengths 1, 5, 64, 300 of the preset's
ref_hf.json, in tools/fixturelib/refs.py's layout. llama.cpp's outputs depend on the tensor values alone, not on
the two writers' byte layouts; the JSON's gguf_sha256 is this script's file.

usage: python tools/make_f32_refs.py
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import gguf
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixturelib import llamacpp, refs  # noqa: E402
from make_dense_fixture import copy_field, finish  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "fixtures" / "models"
KEEP = (1, 5, 64, 300)


def upcast(src: Path, dst: Path) -> None:
    r = gguf.GGUFReader(src)
    arch = bytes(r.fields["general.architecture"].parts[r.fields["general.architecture"].data[0]]).decode()
    w = gguf.GGUFWriter(dst, arch)
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        if k == "general.file_type":
            w.add_uint32(k, 0)  # LLAMA_FTYPE_ALL_F32
            continue
        copy_field(w, k, f)
    for t in r.tensors:
        data = np.asarray(t.data)
        if t.tensor_type == gguf.GGMLQuantizationType.F16:
            data = data.astype(np.float32)
        w.add_tensor(t.name, np.ascontiguousarray(data))
    finish(w, dst)


def main() -> None:
    version = llamacpp.available()
    if version is None:
        sys.exit("llama-cpp-python does not import: no references written")
    for preset in ("next-tiny", "dense-tiny"):
        pdir = MODELS / preset
        prompts = [p for p in json.loads((pdir / "ref_hf.json").read_text())["prompts"] if len(p["tokens"]) in KEEP]
        for f in list(pdir.glob("llamacpp_f32_*.bin")) + list(pdir.glob("ref_llamacpp_f32.json")):
            f.unlink()
        with tempfile.TemporaryDirectory() as tmp:
            gg = Path(tmp) / f"{preset}.f32.gguf"
            upcast(MODELS / f"{preset}.f16.gguf", gg)
            entries = [refs.prompt_entry(pdir, "llamacpp_f32", p["name"], p["tokens"],
                                         llamacpp.teacher_forced(gg, p["tokens"])) for p in prompts]
            header = {"preset": preset, "gguf": f"{preset}.f32.gguf (not committed: {preset}.f16.gguf upcast)",
                      "gguf_sha256": refs.sha256(gg), "type": "f32",
                      "versions": {"llama_cpp_python": version, "gguf": getattr(gguf, "__version__", "?")},
                      "how": "llama-cpp-python Llama(logits_all=True, n_threads=2), one eval() of the whole prompt "
                             "in a fresh context; F32 file written by tools/make_f32_refs.py"}
            refs.write_ref(pdir, "llamacpp_f32", header, entries, None)
        print(f"  {preset} ref_llamacpp_f32.json ({len(entries)} prompts)")


if __name__ == "__main__":
    main()
