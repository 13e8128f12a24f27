#!/usr/bin/env bash
# CLI contracts that outside checks rely on (issue: forward, text): exact stdout of `run --print-ids`,
# `logits` file layout, `tokenize`/`detokenize`, and one-line errors with exit status 1 for bad input.
set -u
TERN=$1
FIX=$2
M=$FIX/models/q35-ratio.f16.gguf
fails=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails+1)); fi; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# run --tokens --print-ids: N ids separated by single spaces on one line, nothing else on stdout.
"$TERN" run -m "$M" --tokens 1,2,3 -n 7 --temp 0 --print-ids -t 1 >"$tmp/ids" 2>"$tmp/err"
check "run --print-ids exit 0" '[ $? -eq 0 ]'
check "run --print-ids prints 7 ids on one line" 'grep -Eq "^[0-9]+( [0-9]+){6}$" "$tmp/ids" && [ $(wc -l <"$tmp/ids") -eq 1 ]'
"$TERN" run -m "$M" --tokens 1,2,3 -n 7 --temp 0 --print-ids -t 2 >"$tmp/ids2" 2>/dev/null
check "run --print-ids same ids with 2 threads" 'cmp -s "$tmp/ids" "$tmp/ids2"'

# logits: n_tokens rows of n_vocab float32.
"$TERN" logits -m "$M" --tokens 5,6,7,8 -o "$tmp/l.bin" -c 64 >"$tmp/out" 2>/dev/null
check "logits exit 0 and nothing on stdout" '[ $? -eq 0 ] && [ ! -s "$tmp/out" ]'
nv=$("$TERN" info "$M" --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["n_vocab"])')
check "logits file is 4 x n_vocab floats" '[ "$(stat -c %s "$tmp/l.bin")" -eq $((4 * nv * 4)) ]'

# tokenize / detokenize round trip.
ids=$("$TERN" tokenize -m "$M" -p "Hello world, hello tern." 2>/dev/null)
check "tokenize prints ids on one line" 'echo "$ids" | grep -Eq "^[0-9]+( [0-9]+)*$"'
txt=$("$TERN" detokenize -m "$M" --tokens "$(echo "$ids" | tr " " ",")" 2>/dev/null)
check "detokenize(tokenize(x)) == x" '[ "$txt" = "Hello world, hello tern." ]'

# Without -m, run uses the model bundled in models/ and says so exactly once.
"$TERN" run -p "Once upon a time" -n 8 --temp 0 -c 256 >"$tmp/b" 2>"$tmp/be"; rc=$?
check "run without -m uses the bundled model, said once" '[ $rc -eq 0 ] && [ -s "$tmp/b" ] && [ $(grep -c "using the bundled model" "$tmp/be") -eq 1 ]'

# A file with an MTP block: info and plan show it; run drafts by default (logged once) and prints the same ids as
# --no-spec; --draft on a file without one is a warning, not a silent no-op.
MTP=$FIX/models/q35-mtp.bf16.gguf
check "info shows the MTP block" '"$TERN" info "$MTP" 2>/dev/null | grep -q "^mtp: .*1 block(s) from blk.4"'
check "plan shows the MTP block's memory" '"$TERN" plan -m "$MTP" 2>/dev/null | grep -q "of which MTP"'
"$TERN" run -m "$MTP" --tokens 5,9,13 -n 12 --temp 0 --print-ids -c 64 >"$tmp/s1" 2>"$tmp/s1e"
"$TERN" run -m "$MTP" --tokens 5,9,13 -n 12 --temp 0 --print-ids -c 64 --no-spec >"$tmp/s0" 2>/dev/null
check "run drafts by default, said once" '[ $(grep -c "speculative decoding: the MTP block drafts" "$tmp/s1e") -eq 1 ]'
check "run with drafting prints the ids of --no-spec" '[ -s "$tmp/s0" ] && cmp -s "$tmp/s0" "$tmp/s1"'
"$TERN" run -m "$M" --tokens 5,9,13 -n 2 --temp 0 --print-ids -c 64 --draft 2 >/dev/null 2>"$tmp/w"
check "--draft without an MTP block warns" 'grep -q "has no MTP block tern drafts with" "$tmp/w"'

# --isa: the kernels' instruction set chosen by the user, logged once; the scalar twins run everywhere.
for isa in ref avx2; do
  if [ $isa = avx2 ] && ! grep -qw avx2 /proc/cpuinfo; then continue; fi
  "$TERN" run -m "$M" --tokens 1,2,3 -n 7 --temp 0 --print-ids -t 1 --isa $isa >"$tmp/isa" 2>"$tmp/isae"
  check "run --isa $isa prints 7 ids, says so once" 'grep -Eq "^[0-9]+( [0-9]+){6}$" "$tmp/isa" && [ $(grep -c "kernels use $isa as --isa asks" "$tmp/isae") -eq 1 ]'
done

# Bad input: exit 1 and exactly one error line ("tern: error: ..."), the last line on stderr (info lines about
# what was loaded may precede it).
bad() {
  "$TERN" "$@" >/dev/null 2>"$tmp/e"; rc=$?
  check "error exit 1: $*" '[ $rc -eq 1 ] && [ $(grep -c "^tern: error:" "$tmp/e") -eq 1 ] && tail -n 1 "$tmp/e" | grep -q "^tern: error:"'
}
bad run -m "$MTP" --tokens 1,2 --print-ids -n 2 --draft -2
bad run -m "$MTP" --tokens 1,2 --print-ids -n 2 --draft-min-p 1.5
bad run -m "$M" --tokens 1,x,3 --print-ids
bad run -m "$M" --tokens 1,2 -n 100 -c 16 --print-ids
bad run -m "$M" --tokens 999999 -n 1 --print-ids
bad run -m "$M" -p "" -n 1
bad run -m "$M" --bogus-flag
bad run -m "$M" -p "hi" -t -3
bad run -m "$M" --tokens 1,2 -n 1 --print-ids --isa sse4
grep -qw avx512_vnni /proc/cpuinfo || bad run -m "$M" --tokens 1,2 -n 1 --print-ids --isa avx512
bad logits -m "$M" --tokens 1,2 -o /nonexistent/dir/x.bin
bad run -m "$FIX/nonexistent.gguf" -p hi
bad tokenize -m "$M"
bad run --chat -p hi --chat-template-kwargs "[1]" -c 256
bad run -m "$M" -p "$(printf 'a long prompt %.0s' $(seq 1 40))" -n 4 -c 16
# chat --tools: a tool whose "type" is an object (nlohmann's value() would throw), one whose name is empty, one whose
# parameters are not a schema object: one error line naming the tool and the field.
printf '[{"type": {"name": "x"}, "function": {"name": "f"}}]' >"$tmp/tools_type.json"
printf '[{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": ""}}]' >"$tmp/tools_name.json"
printf '[{"type": "function", "function": {"name": "f", "parameters": [1]}}]' >"$tmp/tools_params.json"
for t in type name params; do bad chat -m "$M" -c 256 --tools "$tmp/tools_$t.json" </dev/null; done
"$TERN" chat -m "$M" -c 256 --tools "$tmp/tools_name.json" </dev/null >/dev/null 2>"$tmp/e"
check "chat --tools names the tool and field" 'grep -q "\[1\]\.function\.name: expected a non-empty string" "$tmp/e"'
# --partial-sums / --expert-parallel in one process: nothing to split, said once.
"$TERN" run -m "$M" --tokens 1,2,3 -n 7 --temp 0 --print-ids -t 1 --partial-sums >"$tmp/ps" 2>"$tmp/pse"
check "run --partial-sums in one process: the same ids, said once" 'cmp -s "$tmp/ids" "$tmp/ps" && [ $(grep -c "partial-sums: one process, nothing is split" "$tmp/pse") -eq 1 ]'

echo "$fails failed"
[ $fails -eq 0 ]
