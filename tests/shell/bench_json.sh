#!/usr/bin/env bash
# `tern bench --json` contract (outside checks rely on it): stdout is one JSON array with one object per test,
# named as llama-bench names them (ppN, tgN), each with test, n_prompt, n_gen, threads, tok_s_mean, tok_s_stddev.
# Checks the shape only, never a speed.
# usage: bench_json.sh TERN_BINARY FIXTURES_DIR
set -euo pipefail
TERN=$1
FIX=$2
out=$("$TERN" bench -m "$FIX/models/q35-ratio.f32.gguf" -p 16 -n 4 -r 2 -t 1 --json 2>/dev/null)
python3 - "$out" <<'PY'
import json, math, sys
rows = json.loads(sys.argv[1])
assert isinstance(rows, list) and len(rows) == 2, f"expected a JSON array of 2 tests, got {rows!r}"
want = {"pp16": (16, 0), "tg4": (0, 4)}
for r in rows:
    for k in ("test", "n_prompt", "n_gen", "threads", "tok_s_mean", "tok_s_stddev"):
        assert k in r, f"missing key {k} in {r}"
    assert r["test"] in want, f"unexpected test name {r['test']}"
    assert (r["n_prompt"], r["n_gen"]) == want.pop(r["test"]), f"wrong sizes in {r}"
    assert r["threads"] == 1, r
    assert r["tok_s_mean"] > 0 and math.isfinite(r["tok_s_mean"]) and r["tok_s_stddev"] >= 0, r
assert not want, f"missing tests {sorted(want)}"
print("ok: bench --json has pp16 and tg4 with the contract keys")
PY
