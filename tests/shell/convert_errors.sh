#!/usr/bin/env bash
# `tern convert` error contract: bad input, a full disk and an unwritable output each give a clear message
# naming the problem, exit status 1, and leave no output or temporary file behind.
# usage: convert_errors.sh TERN_BINARY FIXTURES_DIR
set -u
tern=$1
fx=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0

# expect_fail NAME PATTERN CMD...: CMD exits 1 and its stderr contains PATTERN.
expect_fail() {
  local name=$1 pat=$2
  shift 2
  "$@" >"$work/stdout" 2>"$work/err"
  local rc=$?
  if [ $rc -ne 1 ] || ! grep -q -- "$pat" "$work/err"; then
    echo "FAIL $name: rc=$rc, stderr:"; cat "$work/err"; fails=$((fails + 1))
  else
    echo "ok   $name"
  fi
}
no_leftovers() {
  if ls "$1" 2>/dev/null | grep -q 'tmp-'; then echo "FAIL $2: temporary file left: $(ls "$1")"; fails=$((fails + 1)); fi
  if [ -e "$3" ]; then echo "FAIL $2: partial output $3 exists"; fails=$((fails + 1)); fi
}

expect_fail missing-dir "config.json: cannot open" "$tern" convert "$work/nope" --no-mtp -o "$work/x.gguf"

mkdir "$work/badtype" && cp "$fx"/hf/odd/* "$work/badtype/"
sed -i 's/"model_type": "qwen3_5_moe_text"/"model_type": "llama"/' "$work/badtype/config.json"
expect_fail model-type "supported: qwen3_5_moe, qwen3_5_moe_text" "$tern" convert "$work/badtype" --no-mtp -o "$work/x.gguf"

mkdir "$work/noweights" && cp "$fx"/hf/odd/*.json "$work/noweights/"
expect_fail missing-weights "no model.safetensors" "$tern" convert "$work/noweights" --no-mtp -o "$work/x.gguf"

mkdir "$work/shape" && cp "$fx"/hf/odd/* "$work/shape/"
sed -i 's/"moe_intermediate_size": 20/"moe_intermediate_size": 24/' "$work/shape/config.json"
expect_fail shape-mismatch "expected \[7, 48, 24\] from config.json" "$tern" convert "$work/shape" --no-mtp -o "$work/x.gguf"

mkdir "$work/trunc" && cp "$fx"/hf/odd/* "$work/trunc/"
truncate -s -100 "$work/trunc/model.safetensors"
expect_fail truncated-weights "is past the data section" "$tern" convert "$work/trunc" --no-mtp -o "$work/x.gguf"

# The fixture's stand-in mtp.* tensors have wrong shapes: kept by default, they are refused by name.
expect_fail mtp-shape "mtp.fc.weight': shape \\[4, 8\\]" "$tern" convert "$fx/hf/odd" -o "$work/x.gguf" --dry-run

expect_fail bad-type "supported: f32, f16, bf16, q8_0" "$tern" convert "$fx/hf/odd" --no-mtp -o "$work/x.gguf" --type q3_k_xl

mkdir "$work/out"
expect_fail full-disk "write failed" bash -c "ulimit -f 64; exec \"$tern\" convert \"$fx/hf/odd\" --no-mtp -o \"$work/out/full.gguf\" --type f32"
no_leftovers "$work/out" full-disk "$work/out/full.gguf"

expect_fail unwritable-dir "cannot create a temporary file" "$tern" convert "$fx/hf/odd" --no-mtp -o "$work/missing/dir/x.gguf"

# A good run for contrast: exit 0, output present, no temporary file.
if "$tern" convert "$fx/hf/odd" --no-mtp -o "$work/out/good.gguf" --type f16 2>"$work/err" && [ -s "$work/out/good.gguf" ]; then
  echo "ok   good-run"
else
  echo "FAIL good-run"; cat "$work/err"; fails=$((fails + 1))
fi
ls "$work/out" | grep -q 'tmp-' && { echo "FAIL good-run left a temporary file"; fails=$((fails + 1)); }

exit $((fails > 0))
