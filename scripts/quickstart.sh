#!/usr/bin/env bash
# quickstart.sh: installs dependencies, builds tern and runs its main job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh build
./build/tern sysinfo
