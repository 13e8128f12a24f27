#!/usr/bin/env bash
# `tern convert --type q4_k_m|q5_k_m|q6_k` against llama.cpp's own quantizer: for the committed checkpoints
# (tests/fixtures/hf), every tensor must get the type llama.cpp's mix gives it and byte-identical data.
# The llama.cpp side is recorded by tools/record_llamacpp_kquants.py (tests/fixtures/convert/llamacpp_kquants.json).
# Needs python3 with the gguf package (scripts/install-pydeps.sh installs it).
# usage: convert_kquant_mix.sh TERN_BINARY FIXTURES_DIR
set -euo pipefail
TERN=$1
FIX=$2
python3 -c 'import gguf' 2>/dev/null || { echo "FAIL: python3 cannot import gguf (run scripts/install-pydeps.sh)"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for preset in q35-ratio odd; do
  for mix in q4_k_m q5_k_m q6_k; do
    "$TERN" convert "$FIX/hf/$preset" -o "$tmp/$preset.$mix.gguf" --type "$mix" $([ "$preset" = odd ] && echo --no-mtp) >/dev/null 2>"$tmp/err" ||
      { echo "FAIL: tern convert $preset --type $mix"; cat "$tmp/err"; exit 1; }
  done
done
python3 - "$tmp" "$FIX/convert/llamacpp_kquants.json" <<'PY'
import hashlib, json, sys
import gguf
tmp, ref_path = sys.argv[1], sys.argv[2]
ref = json.load(open(ref_path))
fails = 0
for preset, mixes in ref["presets"].items():
    for mix, tensors in mixes.items():
        r = gguf.GGUFReader(f"{tmp}/{preset}.{mix}.gguf")
        got = {t.name: [t.tensor_type.name, hashlib.sha256(bytes(t.data)).hexdigest()] for t in r.tensors}
        bad_type = [n for n in tensors if n not in got or got[n][0] != tensors[n][0]]
        bad_data = [n for n in tensors if n in got and got[n][0] == tensors[n][0] and got[n][1] != tensors[n][1]]
        extra = sorted(set(got) - set(tensors))
        ok = not (bad_type or bad_data or extra)
        fails += not ok
        types = {}
        for t, _ in tensors.values():
            types[t] = types.get(t, 0) + 1
        print(f"{'ok' if ok else 'FAIL'}: {preset} {mix}: {len(tensors)} tensors {types}", end="")
        if not ok:
            print(f"; type differs: {[(n, tensors[n][0], got.get(n, ['missing'])[0]) for n in bad_type[:5]]}"
                  f"; data differs: {bad_data[:5]}; only in tern: {extra[:5]}", end="")
        print()
print(f"{fails} failed")
sys.exit(1 if fails else 0)
PY
