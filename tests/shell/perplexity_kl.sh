#!/usr/bin/env bash
# tern perplexity --kl-base-out / --kl-base on the bundled model: a run against its own base has KL exactly 0 and
# the same top token everywhere; an F16 KV cache against an F32 one differs by rounding only (KL > 0, tiny, top
# tokens agree); a base that does not fit the run (other -c, other --chunks, other text, not a base) is refused
# with a message saying what differs.
set -u
TERN=$1
FIX=$2
M=$FIX/../../models/tern-tiny-q35moe.gguf
TEXT=$FIX/../../models/tern-tiny-heldout.txt
fails=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails+1)); fi; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ppl() { "$TERN" perplexity -m "$M" -t 1 "$@"; }

ppl -f "$TEXT" -c 128 --chunks 3 --kv-type f32 --kl-base-out "$tmp/base.gguf" >"$tmp/base.out" 2>"$tmp/base.err"
check "--kl-base-out writes the base" '[ -s "$tmp/base.gguf" ]'

ppl -f "$TEXT" -c 128 --chunks 3 --kv-type f32 --kl-base "$tmp/base.gguf" >"$tmp/self.out" 2>"$tmp/self.err"
cat "$tmp/self.out" | tail -7
check "the same run against its own base: KL exactly 0" 'grep -q "^Mean KLD: 0.000000e+00" "$tmp/self.out" && grep -q "^Maximum KLD: 0.000000e+00" "$tmp/self.out"'
check "the same run: the same top token everywhere" 'grep -q "^Same top token: 100.000%" "$tmp/self.out"'
check "KL over 3 chunks x 63 positions" 'grep -q "over 189 positions" "$tmp/self.out"'
check "both perplexities equal the run's own figure" \
  'final=$(sed -n "s/^Final estimate: PPL = \([0-9.]*\).*/\1/p" "$tmp/self.out");
   grep -q "^PPL base: $final, PPL: $final," "$tmp/self.out"'

ppl -f "$TEXT" -c 128 --chunks 3 --kv-type f16 --kl-base "$tmp/base.gguf" >"$tmp/f16.out" 2>"$tmp/f16.err"
tail -7 "$tmp/f16.out"
check "F16 KV vs F32 KV: KL above 0 and below 1e-4 (rounding only)" \
  'python3 -c "import re,sys; m=float(re.search(r\"^Mean KLD: (\S+)\", open(sys.argv[1]).read(), re.M).group(1)); sys.exit(0 if 0 < m < 1e-4 else 1)" "$tmp/f16.out"'
check "F16 KV vs F32 KV: top tokens agree at >= 99% of positions" \
  'python3 -c "import re,sys; m=float(re.search(r\"^Same top token: (\S+)%\", open(sys.argv[1]).read(), re.M).group(1)); sys.exit(0 if m >= 99 else 1)" "$tmp/f16.out"'

refused() {  # name, expected message, args...
  local name=$1 want=$2; shift 2
  ppl "$@" >"$tmp/r.out" 2>"$tmp/r.err"; local rc=$?
  check "refused: $name" '[ $rc -ne 0 ] && grep -qF -- "$want" "$tmp/r.err"'
  [ $rc -ne 0 ] && grep -qF -- "$want" "$tmp/r.err" || cat "$tmp/r.err"
}
refused "another -c" "made with -c 128" -f "$TEXT" -c 64 --chunks 3 --kl-base "$tmp/base.gguf"
refused "another --chunks" "it holds 3 chunks, this run evaluates 2" -f "$TEXT" -c 128 --chunks 2 --kl-base "$tmp/base.gguf"
tac "$TEXT" >"$tmp/other.txt"
refused "another text" "chunk 1 differs from this run's at token" -f "$tmp/other.txt" -c 128 --chunks 3 --kl-base "$tmp/base.gguf"
refused "a model file as the base" "not a KL base file" -f "$TEXT" -c 128 --chunks 3 --kl-base "$M"
refused "a missing base" "$tmp/none.gguf" -f "$TEXT" -c 128 --chunks 3 --kl-base "$tmp/none.gguf"
refused "--kl-base with --kl-base-out" "excludes" -f "$TEXT" -c 128 --kl-base "$tmp/base.gguf" --kl-base-out "$tmp/x.gguf"

[ $fails -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "all perplexity KL checks passed"
