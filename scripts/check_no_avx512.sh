#!/usr/bin/env bash
# check_no_avx512.sh [BUILD_DIR]: runs the kernel tests on an emulated AVX2-only CPU (qemu-user, -cpu Haswell) to
# show what a host without AVX-512 sees: avx512_native skipped, avx512_simde passing. Any AVX-512 instruction in
# the SIMDe twin would stop it with SIGILL (QEMU's TCG has no AVX-512). Needs qemu-user (not in install-deps.sh:
# only worth it on a host that has AVX-512, where the native tests already run). Slow (~1 min): not part of ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
command -v qemu-x86_64 >/dev/null || { echo "check_no_avx512: qemu-x86_64 not found (apt-get install qemu-user)" >&2; exit 2; }
OMP_WAIT_POLICY=passive qemu-x86_64 -cpu Haswell "$dir/tests/test_quant" --gtest_filter='*KernelTest*:*SimdeTwin*' \
  --gtest_brief=1 2> >(grep -v "TCG doesn't support" >&2)
