#!/usr/bin/env bash
# bench/kv_speed.sh MODEL [DEPTH] [REPS]: decode (tg) and prefill (pp) speed with each KV cache type at a depth, tern
# (`tern bench`, quantized caches with their default rotation, sink and window) and llama.cpp (llama-bench, flash
# attention on, as its quantized V cache needs) on the same file and threads, one after the other. Run it on a
# quiet machine (uptime's load is printed first). Environment: TERN (default build/tern), THREADS (default 2),
# LLAMA_BIN (default: bench/build_llamacpp.sh's bin; none: skip llama.cpp).
set -euo pipefail
model=${1:?usage: bench/kv_speed.sh MODEL [DEPTH] [REPS]}
depth=${2:-8192}
reps=${3:-3}
here=$(cd "$(dirname "$0")" && pwd)
tern=${TERN:-$here/../build/tern}
threads=${THREADS:-2}
echo "load: $(uptime | sed 's/.*load average: //')"
ctx=$((depth + 1024))
for t in f16 q8_0 q4_0; do
  "$tern" bench -m "$model" -c $ctx -t "$threads" -p 512 -n 64 -d "$depth" -r "$reps" --no-spec --kv-type $t 2>/dev/null |
    sed -n "s/^|/| tern $t |/p" | grep -E "pp|tg"
done
llama_bin=${LLAMA_BIN:-}
[[ -z $llama_bin ]] && llama_bin=$(bash "$here/build_llamacpp.sh" 2>/dev/null | sed -n 's/^bin=//p')
[[ $llama_bin == none || ! -x $llama_bin/llama-bench ]] && exit 0
for t in f16 q8_0 q4_0; do
  "$llama_bin/llama-bench" -m "$model" -t "$threads" -p 512 -n 64 -d "$depth" -r "$reps" -fa 1 -ctk $t -ctv $t -o md \
    2>/dev/null | sed -n "s/^|/| llama.cpp $t |/p" | grep -E "pp|tg"
done
