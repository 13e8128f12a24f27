#!/usr/bin/env bash
# `tern` under mpiexec on this machine (oversubscribed, loopback): the same output as one process for greedy and
# seeded sampling with 2 and 3 ranks, with experts streamed (--expert-cache); and the job's faults end it with a message naming the rank, never a hang
# (each launch runs under `timeout`): a rank whose model file differs, a rank that cannot open its file, commands
# and flags that do not run across ranks yet, a rank killed mid-run.
# `tern chat` across ranks gives one process's answers.
# usage: mpi_cli.sh TERN_BINARY FIXTURES_DIR MPIEXEC
set -u
tern=$1 fixtures=$2 mpiexec=$3
bundled=$(dirname "$0")/../../models/tern-tiny-q35moe.gguf
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
mpi() { timeout 120 "$mpiexec" --allow-run-as-root --oversubscribe "$@"; }

# 1. Same text as one process: greedy, and sampled with a seed (every rank draws from the same logits).
for mode in "--temp 0" "--temp 0.8 --seed 7"; do
  # shellcheck disable=SC2086
  "$tern" run -m "$bundled" -p "The old lighthouse keeper" -n 40 $mode -t 1 -q >"$work/one" 2>"$work/err1" ||
    { echo "FAIL one process ($mode):"; cat "$work/err1"; fails=$((fails + 1)); }
  for np in 2 3; do
    # shellcheck disable=SC2086
    if ! mpi -np $np "$tern" run -m "$bundled" -p "The old lighthouse keeper" -n 40 $mode -t 1 -q >"$work/many" 2>"$work/err"; then
      echo "FAIL $np ranks ($mode): exit status $?"; cat "$work/err"; fails=$((fails + 1))
    elif ! cmp -s "$work/one" "$work/many"; then
      echo "FAIL $np ranks ($mode): output differs from one process"; diff "$work/one" "$work/many" | head; fails=$((fails + 1))
    else
      echo "ok   $np ranks ($mode): the same $(wc -c <"$work/one") bytes as one process"
    fi
  done
done

# 1a. Streaming experts across ranks (--expert-cache: each rank reads its rows of the chosen experts from the file):
# the same text as one process.
"$tern" run -m "$bundled" -p "The old lighthouse keeper" -n 40 --temp 0 -t 1 -q >"$work/one" 2>"$work/err1"
for np in 2 3; do
  if ! mpi -np $np "$tern" run -m "$bundled" -p "The old lighthouse keeper" -n 40 --temp 0 -t 1 -q --expert-cache 2 \
      >"$work/many" 2>"$work/err"; then
    echo "FAIL streamed experts, $np ranks: exit status $?"; tail -5 "$work/err"; fails=$((fails + 1))
  elif ! cmp -s "$work/one" "$work/many"; then
    echo "FAIL streamed experts, $np ranks: output differs from one process"; fails=$((fails + 1))
  else
    echo "ok   streamed experts (--expert-cache 2), $np ranks: the same $(wc -c <"$work/one") bytes as one process"
  fi
done

# 1a'. --partial-sums: the out projections and downs by columns, each block's output summed over ranks. Not one
# process's bits (sums in a new order), so the text is not compared; the job runs, says so once, and writes text.
for np in 2 3; do
  if ! mpi -np $np "$tern" run -m "$bundled" -p "The old lighthouse keeper" -n 24 --temp 0 -t 1 --partial-sums \
      >"$work/many" 2>"$work/err"; then
    echo "FAIL --partial-sums, $np ranks: exit status $?"; tail -5 "$work/err"; fails=$((fails + 1))
  elif ! grep -q "by columns and summed" "$work/err" || [ ! -s "$work/many" ]; then
    echo "FAIL --partial-sums, $np ranks: no text, or no log line saying the split"; tail -5 "$work/err"; fails=$((fails + 1))
  else
    echo "ok   --partial-sums, $np ranks: $(grep -m1 -o 'across.*summed[^;]*' "$work/err")"
  fi
done

# 1b. Chat: rank 0 reads the messages (mpirun gives stdin to rank 0) and every rank runs the turns: the same
# answers as one process (colour codes stripped: under mpirun rank 0's stdout is a terminal), greedy and sampled.
chat_in=$'Hello! Who are you?\nTell me a story about a cat.\n/reset\nWhat is 2 + 2?\n/exit\n'
for mode in "--temp 0" "--temp 0.8 --seed 11"; do
  # shellcheck disable=SC2086
  "$tern" chat -m "$bundled" -n 32 --show-thinking $mode -t 1 <<<"$chat_in" 2>"$work/err1" | sed 's/\x1b\[[0-9]*m//g' >"$work/one"
  for np in 2 3; do
    # shellcheck disable=SC2086
    if ! mpi -np $np "$tern" chat -m "$bundled" -n 32 --show-thinking $mode -t 1 <<<"$chat_in" >"$work/raw" 2>"$work/err"; then
      echo "FAIL chat, $np ranks ($mode): exit status $?"; tail -5 "$work/err"; fails=$((fails + 1))
    elif ! sed 's/\x1b\[[0-9]*m//g' "$work/raw" | cmp -s "$work/one" -; then
      echo "FAIL chat, $np ranks ($mode): answers differ from one process"; sed 's/\x1b\[[0-9]*m//g' "$work/raw" | diff "$work/one" - | head
      fails=$((fails + 1))
    elif [ "$(grep -c '^\[prompt:' "$work/err")" -ne 3 ] || [ ! -s "$work/one" ]; then
      echo "FAIL chat, $np ranks ($mode): expected 3 answers' status lines from rank 0 alone"; grep '^\[' "$work/err"
      fails=$((fails + 1))
    else
      echo "ok   chat, $np ranks ($mode): 3 answers, the same $(wc -c <"$work/one") bytes as one process"
    fi
  done
done

# 2. Faults. expect NAME PATTERN CMD...: the job fails (not a timeout) and stderr matches PATTERN.
expect() {
  local name=$1 pat=$2
  shift 2
  "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  if [ $rc -eq 0 ] || [ $rc -eq 124 ] || ! grep -Eq "$pat" "$work/err"; then
    echo "FAIL $name: exit status $rc (124: hung), stderr:"; head -20 "$work/err"; fails=$((fails + 1))
  else
    echo "ok   $name: $(grep -Em1 "$pat" "$work/err")"
  fi
}
a=$fixtures/models/q35-ratio.f16.gguf b=$fixtures/models/q35-ratio.q4_0.gguf
expect "different model files" "rank 1's model file is not rank 0's" \
  mpi -np 1 "$tern" logits -m "$a" --tokens 1,2,3 -o "$work/l" -t 1 : -np 1 "$tern" logits -m "$b" --tokens 1,2,3 -o "$work/l" -t 1
expect "a rank cannot open its file" "rank 1 of 2: .*$work/missing.gguf" \
  mpi -np 1 "$tern" logits -m "$a" --tokens 1,2,3 -o "$work/l" -t 1 : -np 1 "$tern" logits -m "$work/missing.gguf" --tokens 1,2,3 -o "$work/l" -t 1
expect "a command that does not run across ranks" "tern tokenize does not run across ranks yet" \
  mpi -np 2 "$tern" tokenize -m "$bundled" -p "hello"

# 3. A rank that dies mid-run (SIGKILL on rank 1 during a long generation): the job ends, and says which rank.
mpi -np 2 "$tern" run -m "$bundled" -p "Once" -n -1 -c 65536 --ignore-eos --temp 0 -t 1 >"$work/out" 2>"$work/err" &
job=$!
victim=""
for _ in $(seq 100); do  # rank 1: the tern process whose environment says so
  for p in $(pgrep -f "$tern run -m $bundled" || true); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then victim=$p; fi
  done
  [ -n "$victim" ] && break
  sleep 0.1
done
sleep 1  # generating by now (65536 tokens: tens of seconds)
if [ -z "$victim" ]; then
  echo "FAIL rank dies: rank 1 not found"; fails=$((fails + 1)); kill "$job" 2>/dev/null
else
  kill -9 "$victim"
  wait "$job"
  rc=$?
  if [ $rc -eq 0 ] || [ $rc -eq 124 ] || ! grep -Eq "rank 1 .*(signal 9|Killed)" "$work/err"; then
    echo "FAIL rank dies: exit status $rc (124: hung), stderr:"; head -20 "$work/err"; fails=$((fails + 1))
  else
    echo "ok   a rank that dies ends the job: $(grep -Em1 "rank 1 .*(signal 9|Killed)" "$work/err" | sed 's/^ *//')"
  fi
fi

[ $fails -eq 0 ] && echo "all passed" || { echo "$fails failed"; exit 1; }
