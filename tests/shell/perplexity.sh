#!/usr/bin/env bash
# `tern perplexity` on the bundled model and its held-out text, against the figures recorded in
# tests/fixtures/ppl/tern-tiny-heldout.json by llama.cpp (tools/ppl_llamacpp.py --json, same GGUF, same text,
# same chunking) and by transformers (tools/train_tiny_model.py eval --ppl-json, the float32 checkpoint).
# Tolerances: llama.cpp 0.1% (the issue's bar; same F16 weights, only fp32 summation order differs);
# transformers 0.5% (it runs the float32 checkpoint; the GGUF rounds the matrices to F16, which moved the
# perplexity by 0.013% on the recorded model).
set -u
TERN=$1
FIX=$2
REPO=$FIX/../..
M=$REPO/models/tern-tiny-q35moe.gguf
TEXT=$REPO/models/tern-tiny-heldout.txt
REF=$FIX/ppl/tern-tiny-heldout.json
fails=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails+1)); fi; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

want_sha=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["model_sha256"])' "$REF")
have_sha=$(sha256sum "$M" | cut -d' ' -f1)
check "the fixture was recorded for this models/tern-tiny-q35moe.gguf (else rerun the tools named above)" \
  '[ "$want_sha" = "$have_sha" ]'

n_ctx=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["n_ctx"])' "$REF")
"$TERN" perplexity -m "$M" -f "$TEXT" -c "$n_ctx" >"$tmp/out" 2>"$tmp/err"; rc=$?
check "tern perplexity exit 0" '[ $rc -eq 0 ]'
[ $rc -eq 0 ] || cat "$tmp/err"
ppl=$(sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p' "$tmp/out")
check "tern perplexity prints a final estimate" '[ -n "$ppl" ]'
echo "tern PPL $ppl"

python3 - "$REF" "${ppl:-nan}" "$tmp/err" >"$tmp/cmp" <<'EOF'
import json, math, re, sys
ref, ppl = json.load(open(sys.argv[1])), float(sys.argv[2])
err = open(sys.argv[3]).read()
m = re.search(r"perplexity: (\d+) tokens", err)
print(f"tokens {m and m.group(1)} {ref['n_tokens']}")
for key, tol in (("llamacpp", 1e-3), ("transformers", 5e-3)):
    want = ref[key]["ppl"]
    rel = abs(ppl - want) / want if math.isfinite(ppl) else math.inf
    print(f"{key} {want:.4f} {rel:.2e} {'ok' if rel <= tol else 'FAIL'} {tol}")
EOF
cat "$tmp/cmp"
check "same token count as the reference" 'awk "/^tokens/ {exit !(\$2 == \$3)}" "$tmp/cmp"'
check "within 0.1% of llama.cpp's perplexity" 'grep -q "^llamacpp .* ok " "$tmp/cmp"'
check "within 0.5% of transformers' perplexity" 'grep -q "^transformers .* ok " "$tmp/cmp"'

[ $fails -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "all perplexity checks passed"
