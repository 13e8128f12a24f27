#!/usr/bin/env bash
# serve_faults.sh TERN FIXTURES_DIR: fault tests of `tern serve` on loopback with the bundled model
# (tests/serve/faults.py): a failing expert read (--fault-expert-read, experts streamed through a 2-slot cache)
# fails the request it served and the server goes on with answers equal to a fault-free server's; SIGTERM drains
# (running requests finish, new ones get 503, exit status 0); a request longer than --shutdown-grace is cut.
set -u
TERN=$1
FIX=$2
TESTS=$(cd "$(dirname "$0")/.." && pwd)
MODEL=$FIX/../../models/tern-tiny-q35moe.gguf
tmp=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$tmp"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# serve NAME ARGS...: starts a server (--parallel $PAR, default 2), waits for /health; sets port and spid.
serve() {
  local name=$1; shift
  port=$(free_port)
  "$TERN" serve -m "$MODEL" -t 1 -c 16384 --parallel "${PAR:-2}" --host 127.0.0.1 --port "$port" "$@" 2>"$tmp/$name.log" &
  spid=$!
  pids+=("$spid")
  for _ in $(seq 300); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "FAIL: server $name did not come up"; cat "$tmp/$name.log"; exit 1
}
rc=0
# wait_exit PID NAME [SECONDS]: the server's exit status, or 124 (and a kill) when it has not exited within SECONDS
# (default 40) after SIGTERM.
wait_exit() {
  local secs=${3:-40}
  for _ in $(seq $((secs * 10))); do kill -0 "$1" 2>/dev/null || { wait "$1"; return $?; }; sleep 0.1; done
  echo "FAIL: server $2 still running $secs s after SIGTERM"; kill -9 "$1"; wait "$1"; return 124
}

# The reference server drains with a grace period far above what its drained request needs at any build's speed
# (the drain check is that the running request ends in full, not how fast: under ASan on a Zen 3 VM its 6000
# tokens took longer than the default 30 s and were cut). The cut itself is tested below with --shutdown-grace 1.
serve ref --shutdown-grace 600; ref_port=$port; ref_pid=$spid
serve fault --expert-cache 2 --fault-expert-read 1000; fault_port=$port
python3 "$TESTS/serve/faults.py" expert-read "http://127.0.0.1:$ref_port" "http://127.0.0.1:$fault_port" || rc=1
grep -q "injected by --fault-expert-read" "$tmp/fault.log" && echo "ok: the failure is logged" \
  || { echo "FAIL: the failure is not in the server log"; rc=1; }

# Drain: the reference server gets SIGTERM while it streams.
python3 "$TESTS/serve/faults.py" drain "http://127.0.0.1:$ref_port" "$ref_pid" || rc=1
wait_exit "$ref_pid" ref 600; st=$?
if [ $st -eq 0 ]; then echo "ok: exit status 0 after draining"; else echo "FAIL: exit status $st after draining"; rc=1; fi

# A request longer than the grace period is cut when it ends.
serve cut --shutdown-grace 1; cut_pid=$spid
python3 "$TESTS/serve/faults.py" drain-cut "http://127.0.0.1:$port" "$cut_pid" 1 || rc=1
wait_exit "$cut_pid" cut; st=$?
if [ $st -eq 0 ]; then echo "ok: exit status 0 after the grace period"; else echo "FAIL: exit status $st after the grace period"; rc=1; fi
grep -q "grace period over: cancelling 1" "$tmp/cut.log" && echo "ok: the cut is logged" || { echo "FAIL: the cut is not logged"; rc=1; }

# --parallel auto: the number the log gives is the number the scheduler runs (/metrics), and a budget bounds it.
PAR=auto serve auto --mem-budget 200M --cache-mib 16; auto_pid=$spid
k_log=$(sed -n 's/.*--parallel auto: \([0-9]*\) sequence.*/\1/p' "$tmp/auto.log")
k_metrics=$(curl -s "http://127.0.0.1:$port/metrics" | sed -n 's/^tern_sequences_max \([0-9]*\).*/\1/p')
if [ -n "$k_log" ] && [ "$k_log" = "$k_metrics" ] && [ "$k_log" -ge 1 ] && [ "$k_log" -lt 64 ]; then
  echo "ok: --parallel auto --mem-budget 200M: $k_log sequences, logged and run"
else echo "FAIL: --parallel auto: log '$k_log', metrics '$k_metrics'"; rc=1; fi
kill -TERM "$auto_pid"; wait_exit "$auto_pid" auto >/dev/null || rc=1
"$TERN" serve -m "$MODEL" --parallel 0 --port 0 2>"$tmp/bad.log" && rc=1
grep -q "parallel must be an integer >= 1 or auto (got '0')" "$tmp/bad.log" && echo "ok: --parallel 0 refused" \
  || { echo "FAIL: --parallel 0"; cat "$tmp/bad.log"; rc=1; }

if [ $rc -ne 0 ]; then for f in "$tmp"/*.log; do echo "--- $f"; tail -20 "$f"; done; fi
exit $rc
