#!/usr/bin/env bash
# `tern serve` under mpiexec (2 and 3 ranks, oversubscribed, loopback): rank 0 serves HTTP and leads, the other
# ranks follow its scheduler. The same requests (tests/dist/serve_client.py: batched, sampled, constrained, log-
# probabilities, a prefix-cache hit, a client that drops its stream) get one process's answers byte for byte; idle
# followers do not spin; SIGTERM to rank 0 drains and ends every rank with status 0.
# usage: mpi_serve.sh TERN_BINARY MPIEXEC
set -u
tern=$1 mpiexec=$2
here=$(dirname "$0")
bundled=$here/../../models/tern-tiny-q35moe.gguf
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$work"; }
trap cleanup EXIT
fails=0
# A prefix cache of 1 MiB: entries are evicted (every rank must evict the same ones, though their shares' sizes differ).
flags=(-m "$bundled" --port 0 -t 1 --parallel 4 --cache-mib 1)
metric() {  # metric PORT NAME
  python3 -c "import sys, urllib.request
for l in urllib.request.urlopen('http://127.0.0.1:$1/metrics').read().decode().splitlines():
    if l.startswith('$2 '): print(l.split()[1])"
}
port_of() {  # port_of LOG: waits for the server's "serving ... on http://HOST:PORT" line
  for _ in $(seq 600); do
    local p
    p=$(grep -oE 'serving .* on http://[^ ]+:[0-9]+' "$1" 2>/dev/null | grep -oE '[0-9]+$' | head -1)
    [ -n "$p" ] && { echo "$p"; return 0; }
    sleep 0.1
  done
  return 1
}

"$tern" serve "${flags[@]}" >"$work/one.log" 2>&1 &
pids+=($!)
one_port=$(port_of "$work/one.log") || { echo "FAIL one process: no port"; cat "$work/one.log"; exit 1; }
python3 "$here/serve_client.py" "$one_port" >"$work/want" || { echo "FAIL one process: client failed"; exit 1; }
kill -TERM "${pids[0]}"

for np in 2 3; do
  log=$work/np$np.log
  timeout 300 "$mpiexec" --allow-run-as-root --oversubscribe -np $np "$tern" serve "${flags[@]}" >"$log" 2>&1 &
  job=$!
  pids+=($job)
  port=$(port_of "$log") || { echo "FAIL $np ranks: no port"; tail -20 "$log"; fails=$((fails + 1)); continue; }
  if ! python3 "$here/serve_client.py" "$port" >"$work/got"; then
    echo "FAIL $np ranks: client failed"; tail -20 "$log"; fails=$((fails + 1))
  elif ! cmp -s "$work/want" "$work/got"; then
    echo "FAIL $np ranks: answers differ from one process"; diff "$work/want" "$work/got" | head -6; fails=$((fails + 1))
  else
    echo "ok   $np ranks: $(wc -l <"$work/got") answers, the same $(wc -c <"$work/got") bytes as one process"
  fi
  for m in tern_requests_cancelled_total tern_prefix_cache_hits_total tern_prefix_cache_evictions_total; do
    v=$(metric "$port" $m)
    if [ "${v:-0}" -lt 1 ]; then echo "FAIL $np ranks: $m is ${v:-missing} (the test means to exercise it)"; fails=$((fails + 1))
    else echo "ok   $np ranks: $m $v"; fi
  done
  # Idle followers sleep between polls: their CPU time over 2 idle seconds stays small.
  ranks=()
  for p in $(pgrep -f "$tern serve" || true); do
    r=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    [ -n "$r" ] && ranks[$r]=$p
  done
  ticks() { local t=0; for r in $(seq 1 $((np - 1))); do t=$((t + $(awk '{print $14 + $15}' "/proc/${ranks[$r]}/stat"))); done; echo $t; }
  t0=$(ticks); sleep 2; t1=$(ticks)
  hz=$(getconf CLK_TCK)
  if [ $((t1 - t0)) -gt $((hz * (np - 1) / 4)) ]; then
    echo "FAIL $np ranks: idle followers used $((t1 - t0)) ticks of CPU in 2 s (spinning)"; fails=$((fails + 1))
  else
    echo "ok   $np ranks: idle followers used $((t1 - t0)) ticks of CPU in 2 s"
  fi
  kill -TERM "${ranks[0]}"
  wait "$job"
  rc=$?
  if [ $rc -ne 0 ]; then echo "FAIL $np ranks: SIGTERM to rank 0: exit status $rc"; tail -8 "$log"; fails=$((fails + 1))
  else echo "ok   $np ranks: SIGTERM to rank 0 drained and ended every rank (status 0)"; fi
done

[ $fails -eq 0 ] && echo "all passed" || { echo "$fails failed"; exit 1; }
