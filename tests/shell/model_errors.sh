#!/usr/bin/env bash
# Model files tern refuses at load, each with a clear message naming the file and the tensor, exit status 1:
# the fused q|k|v|z DeltaNet in-projection (`ssm_in`) of early qwen3next conversions in a file of another
# architecture (qwen3next files with it load: tests/models Qwen3Next.LegacyFusedInProjectionGivesTheSameLogits).
# The files come from make_synthetic_model (built next to the tests).
# usage: model_errors.sh TERN_BINARY FIXTURES_DIR
set -u
tern=$1
GEN=$(dirname "$tern")/tests/make_synthetic_model
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0

"$GEN" "$work/ok.gguf" layers=2 experts=4 used=2 vocab=64 >/dev/null || { echo "FAIL: generator"; exit 1; }
"$GEN" "$work/legacy.gguf" layers=2 experts=4 used=2 vocab=64 legacy_ssm_in=1 >/dev/null || { echo "FAIL: generator"; exit 1; }

# The same geometry without the legacy tensor loads and runs (so the refusal below is about ssm_in alone).
if ! "$tern" run -m "$work/ok.gguf" --tokens 1,2,3 -n 2 --temp 0 --print-ids >"$work/out" 2>"$work/err"; then
  echo "FAIL control: the synthetic model does not run:"; cat "$work/err"; fails=$((fails + 1))
else
  echo "ok   control model runs"
fi

"$tern" run -m "$work/legacy.gguf" --tokens 1,2,3 -n 2 --temp 0 --print-ids >"$work/out" 2>"$work/err"
rc=$?
if [ $rc -ne 1 ] || ! grep -q "blk.0.ssm_in.weight" "$work/err" || ! grep -q "fused q|k|v|z in-projection is read only in a qwen3next file" "$work/err" ||
   ! grep -q "legacy.gguf" "$work/err"; then
  echo "FAIL legacy ssm_in: rc=$rc, stderr:"; cat "$work/err"; fails=$((fails + 1))
else
  echo "ok   ssm_in outside qwen3next refused: $(grep -m1 ssm_in "$work/err")"
fi
[ $fails -eq 0 ]
