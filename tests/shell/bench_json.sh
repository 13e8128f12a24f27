#!/usr/bin/env bash
# `tern bench --json` contract (outside checks rely on it): stdout is one JSON array with one object per test,
# named as llama-bench names them (ppN, tgN; `ppN @ dD`, `tgN @ dD` at a depth), each with test, n_prompt, n_gen,
# n_depth, threads, tok_s_mean, tok_s_stddev. Checks the shape only, never a speed. Also: --profile prints its
# table, and bad -d / --profile flags fail with one error line.
# usage: bench_json.sh TERN_BINARY FIXTURES_DIR
set -euo pipefail
TERN=$1
FIX=$2
MODEL="$FIX/models/q35-ratio.f16.gguf"
check() {  # check JSON WANT_PYTHON_DICT
  python3 - "$1" "$2" <<'PY'
import ast, json, math, sys
rows = json.loads(sys.argv[1])
want = ast.literal_eval(sys.argv[2])  # test -> (n_prompt, n_gen, n_depth)
assert isinstance(rows, list) and len(rows) == len(want), f"expected a JSON array of {len(want)} tests, got {rows!r}"
for r in rows:
    for k in ("test", "n_prompt", "n_gen", "n_depth", "threads", "tok_s_mean", "tok_s_stddev"):
        assert k in r, f"missing key {k} in {r}"
    assert r["test"] in want, f"unexpected test name {r['test']}"
    assert (r["n_prompt"], r["n_gen"], r["n_depth"]) == want.pop(r["test"]), f"wrong sizes in {r}"
    assert r["threads"] == 1, r
    assert r["tok_s_mean"] > 0 and math.isfinite(r["tok_s_mean"]) and r["tok_s_stddev"] >= 0, r
assert not want, f"missing tests {sorted(want)}"
PY
}
out=$("$TERN" bench -m "$MODEL" -p 16 -n 4 -r 2 -t 1 --json 2>/dev/null)
check "$out" "{'pp16': (16, 0, 0), 'tg4': (0, 4, 0)}"
echo "ok: bench --json has pp16 and tg4 with the contract keys"
out=$("$TERN" bench -m "$MODEL" -p 16 -n 4 -d 0,8 -r 1 -t 1 --json 2>/dev/null)
check "$out" "{'pp16': (16, 0, 0), 'tg4': (0, 4, 0), 'pp16 @ d8': (16, 0, 8), 'tg4 @ d8': (0, 4, 8)}"
echo "ok: bench -d 0,8 adds 'pp16 @ d8' and 'tg4 @ d8' with n_depth"

prof=$("$TERN" bench -m "$MODEL" -p 0 -n 4 -r 1 -t 1 --profile --mem-bw 10 2>/dev/null)
for op in embed moe.router moe.experts moe.shared deltanet.core attn.core lm_head other token; do
  grep -q "^| $op " <<<"$prof" || { echo "FAIL: --profile table has no row '$op'"; echo "$prof"; exit 1; }
done
echo "ok: bench --profile prints the op table"

for bad in "-d -1" "-d 0,x" "--profile --json" "--profile -n 0" "--mem-bw -3"; do
  set +e
  err=$("$TERN" bench -m "$MODEL" -p 4 -n 2 -r 1 -t 1 $bad 2>&1 >/dev/null)
  rc=$?
  set -e
  [ "$rc" = 1 ] || { echo "FAIL: bench $bad exited $rc, expected 1"; exit 1; }
  [ "$(grep -c . <<<"$err")" = 1 ] || { echo "FAIL: bench $bad printed more than one error line: $err"; exit 1; }
done
echo "ok: bad bench flags fail with one error line"
