"""Runs llama.cpp's convert_hf_to_gguf.py unchanged, except that the BPE pre-tokenizer name is forced to "qwen2":
the converter identifies pre-tokenizers by hashing a known tokenizer's output, which a freshly trained fixture
tokenizer (with Qwen2's split regex) cannot match.

usage: python convert_shim.py LLAMA_CPP_DIR convert_hf_to_gguf.py-arguments...
"""
import runpy
import sys
from pathlib import Path

lcpp = Path(sys.argv[1]).resolve()
sys.path.insert(0, str(lcpp))
sys.path.insert(1, str(lcpp / "gguf-py"))
from conversion.base import TextModel  # noqa: E402  (llama.cpp's module, from the sdist)

TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
sys.argv = [str(lcpp / "convert_hf_to_gguf.py")] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
