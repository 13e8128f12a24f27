#!/usr/bin/env bash
# bench/distributed.sh: what a split forward costs on this machine (docs/DISTRIBUTED.md).
#  1. tern_comm_bench: the collectives' cost per message size, 2 and 3 ranks, over shared memory (Open MPI's
#     default on one machine) and over TCP on the loopback of a private network namespace, with and without a tbf
#     rate limit of 10 and 100 Gbit/s (this kernel has no netem, so no added delay: latency is the TCP stack's).
#  2. tern bench decode and prefill on MODEL: one process at 1 and 2 threads, 2 ranks x 1 thread (rows split,
#     --expert-parallel and --partial-sums), 3 ranks x 1 thread (oversubscribed), and 2 ranks over TCP (free, 10 and
#     100 Gbit/s; gathers and --partial-sums), with
#     --profile's comm.* rows (time in collectives per token, waiting for the slowest rank included).
# Needs root (ip netns, tc). The namespace is created and removed here. Run on a quiet machine.
# usage: bash bench/distributed.sh MODEL.gguf [BUILD_DIR]
set -euo pipefail
model=$1 build=${2:-build}
tern=$build/tern comm=$build/tern_comm_bench
mpi=(mpirun --allow-run-as-root --oversubscribe)
tcp=(--mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
ns=tern-bench-$$
cleanup() { ip netns del "$ns" 2>/dev/null || true; }
trap cleanup EXIT
ip netns add "$ns"
ip netns exec "$ns" ip link set lo up
inns() { ip netns exec "$ns" "$@"; }
rate() {  # rate LIMIT|none
  inns tc qdisc del dev lo root 2>/dev/null || true
  [ "$1" = none ] || inns tc qdisc add dev lo root tbf rate "$1" burst 256kb latency 10ms
}
echo "# bench/distributed.sh $model ($(date -u +%FT%TZ), load: $(cut -d' ' -f1-3 /proc/loadavg))"
echo; echo "## collectives (tern_comm_bench, median us per call)"
for np in 2 3; do echo; echo "### shared memory, $np ranks"; "${mpi[@]}" -np $np "$comm" -r 400 | tail -n +2; done
for r in none 10gbit 100gbit; do
  rate $r
  echo; echo "### TCP loopback, 2 ranks, rate limit: $r"; inns "${mpi[@]}" "${tcp[@]}" -np 2 "$comm" -r 200 | tail -n +2
done
rate none
run() {  # run LABEL "TERN FLAGS" LAUNCHER...: tg and pp tok/s and the profile's comm rows
  local label=$1 flags=$2; shift 2
  local out tg pp prof
  # shellcheck disable=SC2086
  out=$("$@" "$tern" bench -m "$model" $flags -p 64 -n 64 -r 3 2>&1) || { echo "| $label | failed | | |"; return; }
  tg=$(grep -E "\| +tg64" <<<"$out" | awk -F'|' '{print $5}' | xargs)
  pp=$(grep -E "\| +pp64" <<<"$out" | awk -F'|' '{print $5}' | xargs)
  # shellcheck disable=SC2086
  prof=$("$@" "$tern" bench -m "$model" $flags -p 0 -n 32 -r 1 --profile 2>&1 | grep -E "^\| comm" |
         awk -F'|' '{gsub(/ /, "", $2); gsub(/ /, "", $4); printf "%s %s; ", $2, $4}' || true)
  echo "| $label | $tg | $pp | ${prof:--} |"
}
echo; echo "## decode (tg64) and prefill (pp64), tok/s; comm: ms per decode token in collectives"
echo; echo "| setup | tg64 | pp64 | comm per token (ms) |"; echo "|---|---:|---:|---|"
run "one process, -t 1" "-t 1" env
run "one process, -t 2" "-t 2" env
run "2 ranks x -t 1, shared memory" "-t 1" "${mpi[@]}" -np 2
run "2 ranks x -t 1, shared memory, --expert-parallel" "-t 1 --expert-parallel" "${mpi[@]}" -np 2
run "2 ranks x -t 1, shared memory, --partial-sums" "-t 1 --partial-sums" "${mpi[@]}" -np 2
run "3 ranks x -t 1 (oversubscribed), shared memory" "-t 1" "${mpi[@]}" -np 3
for r in none 10gbit 100gbit; do
  rate $r
  run "2 ranks x -t 1, TCP loopback, limit $r" "-t 1" inns "${mpi[@]}" "${tcp[@]}" -np 2
  run "2 ranks x -t 1, TCP loopback, limit $r, --partial-sums" "-t 1 --partial-sums" inns "${mpi[@]}" "${tcp[@]}" -np 2
done
