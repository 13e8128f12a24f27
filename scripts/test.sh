#!/usr/bin/env bash
# test.sh: installs dependencies, builds tern and runs the whole test suite: the Release build, then the
# AddressSanitizer + UBSan build, then each libFuzzer target for a short fixed time (FUZZ_SECONDS, default 25 s each).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/install-pydeps.sh
jobs=$(nproc)

echo "== release build and tests"
bash scripts/build.sh build
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== sanitizer build (ASan + UBSan) and tests"
# -O1 -g1 (line tables, what a report's stack needs): at -O2 -g this build took 23 of CI's 54 minutes; at -O1 -g1
# 11, and its tests ran no slower (474 s against 481 s).
bash scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTERN_SANITIZE=ON -DTERN_BENCH=OFF \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" -LE slow

if [ -d fuzz ] && ls fuzz/*.cpp >/dev/null 2>&1; then
  echo "== fuzzing (libFuzzer, fixed time per target)"
  bash scripts/fuzz.sh "${FUZZ_SECONDS:-25}"  # 8 targets x 25 s
fi
