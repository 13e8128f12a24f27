#!/usr/bin/env bash
# bench/run_e2e.sh [bench/e2e.py options]: the end-to-end benchmark against llama.cpp from a fresh clone, in one
# command: Debian packages, a Release build (build/tern, build/tern_membw, build/tern_peak), the Python packages the
# model generator needs (gguf, numpy), llama.cpp's own tools (llama-bench, llama-quantize, llama-server,
# llama-perplexity) built once from the llama-cpp-python 0.3.36 sources into a cache outside the repository
# (bench/build_llamacpp.sh), then python3 bench/e2e.py with the given options (e.g. -t 2 -r 3 --types q4_0,q8_0
# --layers 4,8). Run it on a quiet machine: nothing else building or benchmarking.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh build
python3 -c 'import gguf, numpy' 2>/dev/null || python3 -m pip install --quiet gguf numpy
llama_bin=$(bash bench/build_llamacpp.sh | sed -n 's/^bin=//p')
exec python3 bench/e2e.py --llama-bin "$llama_bin" "$@"
