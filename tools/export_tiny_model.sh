#!/usr/bin/env bash
# Convert the trained tiny model (transformers checkpoint in WORK/hf, made by tools/train_tiny_model.py) to GGUF
# with llama.cpp's own converter, taken from the llama-cpp-python source distribution on PyPI (not committed here).
#
# usage: tools/export_tiny_model.sh [HF_DIR] [OUT_GGUF] [OUTTYPE]
#   HF_DIR    default out/tiny/hf
#   OUT_GGUF  default models/tern-tiny-q35moe.gguf
#   OUTTYPE   f16 (default), q8_0, f32, bf16
# env: LCP_DIR  where the sdist is downloaded/unpacked (default /tmp/lcp)
#
# The multi-token-prediction block (mtp.* tensors, config mtp_num_hidden_layers) is kept when the checkpoint has one;
# a checkpoint without it is converted with --no-mtp.
# Our tokenizer is new, so the converter's hash table of known pre-tokenizers cannot name it; it uses the Qwen3.5
# split regex, so the wrapper below answers "qwen35" when (and only when) the converter's own lookup fails.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
hf_dir="${1:-$repo/out/tiny/hf}"
out="${2:-$repo/models/tern-tiny-q35moe.gguf}"
outtype="${3:-f16}"
lcp_dir="${LCP_DIR:-/tmp/lcp}"

[[ -f "$hf_dir/config.json" ]] || { echo "export: no config.json in $hf_dir (train first)" >&2; exit 1; }
conv_dir="$(ls -d "$lcp_dir"/llama_cpp_python-*/vendor/llama.cpp 2>/dev/null | sort -V | tail -1 || true)"
if [[ -z "$conv_dir" ]]; then
  mkdir -p "$lcp_dir"
  pip download --no-deps --no-binary :all: llama-cpp-python -d "$lcp_dir"
  tar -xzf "$(ls "$lcp_dir"/llama_cpp_python-*.tar.gz | sort -V | tail -1)" -C "$lcp_dir"
  conv_dir="$(ls -d "$lcp_dir"/llama_cpp_python-*/vendor/llama.cpp | sort -V | tail -1)"
fi
[[ -f "$conv_dir/convert_hf_to_gguf.py" ]] || { echo "export: no convert_hf_to_gguf.py in $conv_dir" >&2; exit 1; }
echo "export: converter $conv_dir"

mtp_flag=--no-mtp
if python -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1])).get("mtp_num_hidden_layers", 0) > 0 else 1)' \
    "$hf_dir/config.json"; then
  mtp_flag=
  echo "export: keeping the MTP block"
fi
CONV_DIR="$conv_dir" OMP_NUM_THREADS=1 python - "$hf_dir" --outfile "$out" --outtype "$outtype" $mtp_flag <<'EOF'
import os, runpy, sys
conv = os.environ["CONV_DIR"]
sys.path.insert(0, conv)
sys.path.insert(1, os.path.join(conv, "gguf-py"))
import conversion.base as base

original = base.TextModel.get_vocab_base_pre

def get_vocab_base_pre(self, tokenizer):
    try:
        return original(self, tokenizer)
    except NotImplementedError:
        print("export: unknown pre-tokenizer hash; this tokenizer uses the Qwen3.5 regex -> 'qwen35'")
        return "qwen35"

base.TextModel.get_vocab_base_pre = get_vocab_base_pre
sys.argv = [os.path.join(conv, "convert_hf_to_gguf.py")] + sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
EOF
ls -l "$out"
