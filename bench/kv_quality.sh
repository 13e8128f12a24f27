#!/usr/bin/env bash
# bench/kv_quality.sh MODEL TEXT [CTX] [CHUNKS]: the quantized KV cache's quality on one model and text. Runs
# `tern perplexity` with an f16 cache as the base (--kl-base-out), then every cache setting against it (perplexity,
# its change vs f16, mean KL divergence), and llama.cpp's own llama-perplexity on the same file and text with its f16
# and q8_0 / q4_0 caches (--kl-divergence against its f16 run; flash attention on, as llama.cpp needs for a
# quantized V cache). Prints a markdown table (docs/BENCHMARKS.md, "KV cache quality"). Quality, not speed: the
# load on the machine does not change these numbers.
# Environment: TERN (default build/tern), THREADS (default 2), LLAMA_BIN (default: bench/build_llamacpp.sh's bin;
# set LLAMA_BIN=none to skip llama.cpp).
set -euo pipefail
model=${1:?usage: bench/kv_quality.sh MODEL TEXT [CTX] [CHUNKS]}
text=${2:?usage: bench/kv_quality.sh MODEL TEXT [CTX] [CHUNKS]}
ctx=${3:-1024}
chunks=${4:--1}
here=$(cd "$(dirname "$0")" && pwd)
tern=${TERN:-$here/../build/tern}
threads=${THREADS:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ppl_of() { sed -n 's/^Final estimate: PPL = \([0-9.]*\).*/\1/p' "$1" | tail -1; }
kl_of() { sed -n 's/^Mean KLD: \([0-9.e+-]*\).*/\1/p' "$1" | tail -1; }
top_of() { sed -n 's/^Same top token: \([0-9.]*\).*/\1/p' "$1" | tail -1; }

"$tern" perplexity -m "$model" -f "$text" -c "$ctx" --chunks "$chunks" -t "$threads" --kl-base-out "$tmp/base.bin" \
  >"$tmp/base.out" 2>&1 || { cat "$tmp/base.out" >&2; exit 1; }
base=$(ppl_of "$tmp/base.out")
echo "| cache | rotation | sink + window (f16) | perplexity | vs f16 | mean KL | same top token |"
echo "|---|---|---|---|---|---|---|"
echo "| tern f16 | - | - | $base | - | - | - |"
run() {  # LABEL ROT SINKWIN ARGS...
  local label=$1 rot=$2 sw=$3
  shift 3
  "$tern" perplexity -m "$model" -f "$text" -c "$ctx" --chunks "$chunks" -t "$threads" --kl-base "$tmp/base.bin" "$@" \
    >"$tmp/run.out" 2>&1 || { cat "$tmp/run.out" >&2; exit 1; }
  local p k
  p=$(ppl_of "$tmp/run.out")
  k=$(kl_of "$tmp/run.out")
  echo "| $label | $rot | $sw | $p | $(awk -v a="$p" -v b="$base" 'BEGIN{printf "%+.3f%%", (a/b-1)*100}') | $k | $(top_of "$tmp/run.out")% |"
}
for t in q8_0 q4_0; do
  run "tern $t" off "0 + 0" --kv-type $t --kv-rotate off --kv-sink 0 --kv-window 0
  run "tern $t" on "0 + 0" --kv-type $t --kv-rotate on --kv-sink 0 --kv-window 0
  run "tern $t" off "16 + 128" --kv-type $t --kv-rotate off --kv-sink 16 --kv-window 128
  run "tern $t" on "4 + 32" --kv-type $t --kv-rotate on --kv-sink 4 --kv-window 32
  run "tern $t" on "16 + 128 (default)" --kv-type $t
  run "tern $t" on "16 + 512" --kv-type $t --kv-window 512
done
run "tern K q8_0 / V q4_0" on "16 + 128" --kv-type-k q8_0 --kv-type-v q4_0

llama_bin=${LLAMA_BIN:-}
if [[ -z $llama_bin ]]; then
  llama_bin=$(bash "$here/build_llamacpp.sh" 2>/dev/null | sed -n 's/^bin=//p')
fi
[[ $llama_bin == none || ! -x $llama_bin/llama-perplexity ]] && exit 0
lp() { "$llama_bin/llama-perplexity" -m "$model" -f "$text" -c "$ctx" -t "$threads" -fa on \
  $([[ $chunks != -1 ]] && echo --chunks "$chunks") "$@"; }
lp -ctk f16 -ctv f16 --kl-divergence-base "$tmp/llama_base.bin" >"$tmp/lbase.out" 2>&1 || { cat "$tmp/lbase.out" >&2; exit 1; }
lbase=$(sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p' "$tmp/lbase.out")
echo "| llama.cpp f16 | - | - | $lbase | - | - | - |"
for t in q8_0 q4_0; do
  lp -ctk $t -ctv $t --kl-divergence-base "$tmp/llama_base.bin" --kl-divergence >"$tmp/lrun.out" 2>&1 ||
    { cat "$tmp/lrun.out" >&2; exit 1; }
  p=$(sed -n 's/^Mean PPL(Q)  *: *\([0-9.]*\).*/\1/p' "$tmp/lrun.out")
  k=$(sed -n 's/^Mean    KLD:[^0-9]*\([0-9.]*\).*/\1/p' "$tmp/lrun.out")
  top=$(sed -n 's/^Same top p:[^0-9]*\([0-9.]*\).*/\1/p' "$tmp/lrun.out")
  echo "| llama.cpp $t | (its default) | - | $p | $(awk -v a="$p" -v b="$lbase" 'BEGIN{printf "%+.3f%%", (a/b-1)*100}') | $k | $top% |"
done
