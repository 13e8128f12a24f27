#!/usr/bin/env bash
# first_divergence.sh TERN_BINARY FIXTURES_DIR: tools/compare_dumps.py and tools/first_divergence.py
# (tests/tools/test_first_divergence.py): synthetic dumps with one perturbed layer must be reported at that tensor
# first, identical dumps as no divergence; then the tool end to end on tern with a tern dump as the reference.
# Standard-library Python only (no numpy or torch needed).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
TERN_BINARY=$1 TERN_FIXTURES_DIR=${2:-$here/fixtures} python3 "$here/tools/test_first_divergence.py"
