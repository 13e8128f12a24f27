#!/usr/bin/env bash
# Installs every Debian package tern's build, tests, fuzzing and benchmarks need. Idempotent.
set -euo pipefail
PKGS=(build-essential cmake ninja-build pkg-config git
      nlohmann-json3-dev libcli11-dev libcpp-httplib-dev libgtest-dev libgmock-dev libbenchmark-dev
      libpcre2-dev libutf8proc-dev libedit-dev libomp-dev clang libclang-rt-14-dev python3 tmux
      libopenmpi-dev openmpi-bin  # tern under mpirun (src/dist) and its MPI tests
      libsimde-dev  # the AVX-512 kernels' SIMDe twins, tested on hosts without AVX-512 (tern_add_avx512_sources)
      chromium)  # chromium: headless browser test of tern serve's web page (tests/shell/serve_web.sh)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi
