#!/usr/bin/env bash
# chat_archs.sh TERN FIXTURES_DIR: `tern chat` (stdin, not a terminal) on each architecture's fixture (qwen35moe,
# dense qwen35, qwen3next): two turns through the file's chat template, each ends with its speed line, the second
# turn feeds only its own tokens (the first turn stays in the sequence), and /exit leaves with status 0.
set -u
TERN=$1
FIX=$2
fails=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails+1)); fi; }
for f in q35-ratio.q8_0 dense-tiny.f16 next-tiny.f16; do
  out=$(printf 'Hello there\nAnd then?\n/exit\n' | timeout 120 "$TERN" chat -m "$FIX/models/$f.gguf" -n 12 --temp 0 -t 1 2>&1)
  rc=$?
  news=$(printf '%s\n' "$out" | grep -o "prompt: [0-9]* new tokens" | grep -o "[0-9]*")
  first=$(printf '%s\n' "$news" | sed -n 1p)
  second=$(printf '%s\n' "$news" | sed -n 2p)
  check "$f: chat exits 0 after /exit" '[ $rc -eq 0 ]'
  check "$f: two turns answered" '[ "$(printf "%s\n" "$news" | grep -c .)" -eq 2 ]'
  check "$f: the second turn feeds only its own tokens ($second new, first $first)" \
    '[ -n "$second" ] && [ -n "$first" ] && [ "$second" -lt $((first + 12)) ]'
  [ $fails -eq 0 ] || printf '%s\n' "$out" | tail -5
done
echo "$fails failed"
[ $fails -eq 0 ]
