#!/usr/bin/env bash
# build.sh [BUILD_DIR] [extra cmake args...]: configure and build tern (Release by default) with Ninja.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}; shift || true
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$dir" -j "$(nproc)"
