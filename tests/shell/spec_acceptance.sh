#!/usr/bin/env bash
# Speculative decoding on the bundled model (trained with its MTP block) against llama.cpp's `--spec-type draft-mtp`
# on the same file, as recorded in tests/fixtures/spec/tern-tiny-acceptance.json by tools/record_spec_acceptance.py
# (llama-server, one drafted token every step, draft p-min 0, temperature 0). tern runs each recorded prompt with
# `--draft 1 --draft-fixed --draft-min-p 0 --temp 0 --stats`.
# Checks: tern's drafted greedy text equals its own text with --no-spec on every prompt (drafting is exact); it
# equals llama.cpp's on at least 14 of the 16 prompts (same F16 file, both greedy, but 128-token continuations part
# at near-ties: at the recording of 2026-12-05 two prompts part where the top two logits are 0.065 apart and
# transformers' float32 forward picks tern's token); and tern's acceptance over all prompts is within 2 points of
# llama.cpp's (the issue's bar: both run the published MTP definition on the same weights; llama.cpp's MTP cache also
# holds a row (x_0, zeros) at position 0 that tern's does not, and its activations round differently, so a draft
# near a tie can go either way).
set -u
TERN=$1
FIX=$2
REPO=$FIX/../..
M=$REPO/models/tern-tiny-q35moe.gguf
REF=$FIX/spec/tern-tiny-acceptance.json
fails=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails+1)); fi; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

want_sha=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["model_sha256"])' "$REF")
have_sha=$(sha256sum "$M" | cut -d' ' -f1)
check "the fixture was recorded for this models/tern-tiny-q35moe.gguf (else rerun tools/record_spec_acceptance.py)" \
  '[ "$want_sha" = "$have_sha" ]'

python3 - "$REF" "$TERN" "$M" "$tmp" >"$tmp/cmp" <<'PY'
import json, re, subprocess, sys
ref, tern, model, tmp = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3], sys.argv[4]
drafted = accepted = 0
same = exact = 0
for i, row in enumerate(ref["prompts"]):
    base = [tern, "run", "-m", model, "-p", row["prompt"], "-n", str(ref["n_predict"]), "--temp", "0", "-t", "1"]
    p = subprocess.run(base + ["--draft", "1", "--draft-fixed", "--draft-min-p", "0", "--stats"],
                       capture_output=True, text=True)
    q = subprocess.run(base + ["--no-spec"], capture_output=True, text=True)
    if p.returncode != 0 or q.returncode != 0:
        print(f"run {i} failed: {p.stderr[-300:]} {q.stderr[-300:]}")
        continue
    exact += p.stdout == q.stdout
    text = p.stdout[:-1] if p.stdout.endswith("\n") else p.stdout
    m = re.search(r"speculative decoding: (\d+) steps, (\d+) drafted, (\d+) accepted", p.stderr)
    if not m:
        print(f"run {i}: no speculative decoding line")
        continue
    d, a = int(m.group(2)), int(m.group(3))
    drafted += d
    accepted += a
    eq = text == row["text"]
    same += eq
    print(f"prompt {i}: tern {a}/{d}, llama.cpp {row['accepted']}/{row['drafted']}, "
          f"text vs llama.cpp {'same' if eq else 'differs'}, vs --no-spec {'same' if p.stdout == q.stdout else 'DIFFERS'}")
t = accepted / drafted if drafted else float("nan")
l = ref["acceptance"]
print(f"texts {same} {len(ref['prompts'])}")
print(f"exact {exact} {len(ref['prompts'])}")
print(f"acceptance tern {t:.4f} llama.cpp {l:.4f} diff {abs(t - l) * 100:.2f} points "
      f"{'ok' if abs(t - l) <= 0.02 else 'FAIL'}")
PY
cat "$tmp/cmp"
check "drafting leaves tern's greedy text unchanged on every prompt" 'awk "/^exact/ {exit !(\$2 == \$3)}" "$tmp/cmp"'
check "tern's greedy text equals llama.cpp's on at least 14 of 16 prompts" 'awk "/^texts/ {exit !(\$2 >= 14)}" "$tmp/cmp"'
check "tern's acceptance is within 2 points of llama.cpp's" 'grep -q "^acceptance .* ok$" "$tmp/cmp"'

[ $fails -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "all speculative-decoding acceptance checks passed"
