#!/usr/bin/env bash
# bench/run_e2e.sh [bench/e2e.py options]: the end-to-end benchmark against llama.cpp from a fresh clone, in one
# command: Debian packages, a Release build (build/tern, build/tern_membw), the Python packages the generator and
# the llama.cpp peer need (gguf, numpy, llama-cpp-python 0.3.36 built from source for this CPU: ~50 min on 2 cores,
# once), then python3 bench/e2e.py with the given options (e.g. -t 2 -r 2 --types q4_0,q8_0,q4_k_m --layers 4,8).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh build
python3 -c 'import gguf, numpy' 2>/dev/null || python3 -m pip install --quiet gguf numpy
if ! python3 -c 'import llama_cpp' 2>/dev/null; then
  echo "run_e2e: building llama-cpp-python 0.3.36 from source (the llama.cpp peer; takes a while, once)"
  CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
    python3 -m pip install --no-cache-dir llama-cpp-python==0.3.36
fi
exec python3 bench/e2e.py "$@"
