#!/usr/bin/env bash
# fuzz.sh [SECONDS] [TARGET...]: builds the libFuzzer targets with clang and runs each (or the named ones: gguf,
# safetensors, chat_output, tokenizer, jinja, api, json_schema, hf_files) for SECONDS on its corpus (kept between
# runs in $FUZZ_BUILD/corpus/<target>) plus its seeds fuzz/seeds/<target>/, with the dictionary fuzz/<target>.dict if
# there is one. A finding is written as crash-*/timeout-*/oom-* in the current directory and fails the script.
# FUZZ_BUILD: the build directory (default build-fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
build=${FUZZ_BUILD:-build-fuzz}
if [ $# -gt 0 ]; then names=("$@"); else names=(); for src in fuzz/fuzz_*.cpp; do names+=("$(basename "$src" .cpp)"); done; fi
names=("${names[@]/#/fuzz_}"); names=("${names[@]/#fuzz_fuzz_/fuzz_}")
# Only the named targets are built (not the tern executable, which no target needs); -gline-tables-only: a
# finding's stack trace needs file:line, not full debug info. Together: 455 s -> 323 s of build on 2 cores
# (the CI run of b0741cf).
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DTERN_FUZZ=ON -DTERN_TESTS=OFF -DTERN_BENCH=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -gline-tables-only -DNDEBUG" >/dev/null
cmake --build "$build" -j "$(nproc)" --target "${names[@]}"
status=0
for name in "${names[@]}"; do
  bin=$build/fuzz/$name
  [ -x "$bin" ] || { echo "fuzz: no target $name in $build/fuzz" >&2; exit 2; }
  corpus=$build/corpus/$name
  mkdir -p "$corpus"
  seeds=fuzz/seeds/${name#fuzz_}
  dict=fuzz/${name#fuzz_}.dict
  echo "fuzz: $name for ${secs}s"
  # -timeout: one input taking longer is a finding (a hang); -rss_limit_mb: so is more memory than this.
  "$bin" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=5 -print_final_stats=1 \
    $( [ -f "$dict" ] && echo "-dict=$dict" ) "$corpus" $( [ -d "$seeds" ] && echo "$seeds" ) \
    >"$build/$name.log" 2>&1 || status=1
  tail -n 15 "$build/$name.log"
  echo "fuzz: $name corpus: $(find "$corpus" -type f | wc -l) inputs, $(du -sb "$corpus" | cut -f1) bytes"
done
exit $status
