#!/usr/bin/env bash
# bench/distributed_ab.sh: two tern builds side by side across 2 ranks (docs/DISTRIBUTED.md): decode tg64 and the
# --profile's comm.* rows over shared memory and over TCP in a private network namespace (free, 10 and 100 Gbit/s
# tbf limits), the builds alternating, two rounds. Needs root (ip netns, tc). Run on a quiet machine.
# OLD_FLAGS / NEW_FLAGS: extra tern flags of each side (one build against itself with another split, e.g.
# `build/tern build/tern "" --partial-sums`).
# usage: bash bench/distributed_ab.sh MODEL.gguf OLD_TERN NEW_TERN [OLD_FLAGS [NEW_FLAGS]]
set -euo pipefail
model=$1 old=$2 new=$3 old_flags=${4:-} new_flags=${5:-}
mpi=(mpirun --allow-run-as-root --oversubscribe)
tcp=(--mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
ns=tern-ab-$$
cleanup() { ip netns del "$ns" 2>/dev/null || true; }
trap cleanup EXIT
ip netns add "$ns"; ip netns exec "$ns" ip link set lo up
inns() { ip netns exec "$ns" "$@"; }
rate() { inns tc qdisc del dev lo root 2>/dev/null || true; [ "$1" = none ] || inns tc qdisc add dev lo root tbf rate "$1" burst 256kb latency 10ms; }
tg() { "$@" -m $model -t 1 -p 0 -n 64 -r 3 2>&1 | grep -E '\| +tg64' | awk -F'|' '{print $5}' | xargs; }
prof() { "$@" -m $model -t 1 -p 0 -n 32 -r 1 --profile 2>&1 | grep -E '^\| comm' | awk -F'|' '{gsub(/ /, "", $2); gsub(/ /, "", $4); printf "%s %s; ", $2, $4}'; }
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
for round in 1 2; do
for setup in shm tcp-none tcp-10gbit tcp-100gbit; do
  for v in old new; do
    bin=$new flags=$new_flags; [ $v = old ] && bin=$old flags=$old_flags
    case $setup in
      shm) rate none; L=("${mpi[@]}" -np 2);;
      tcp-*) rate ${setup#tcp-}; L=(inns "${mpi[@]}" "${tcp[@]}" -np 2);;
    esac
    # shellcheck disable=SC2086
    echo "| $round | $setup | $v | $(tg "${L[@]}" $bin bench $flags) | $(prof "${L[@]}" $bin bench $flags) |"
  done
done
done
rate none
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
