#!/usr/bin/env bash
# Installs the Python packages tern's interop tests use (the gguf reference reader/writer and numpy). Idempotent;
# the tests that need them skip with a message when they are missing, so this is best-effort.
set -euo pipefail
if python3 -c 'import gguf, numpy' 2>/dev/null; then exit 0; fi
echo "install-pydeps: pip installing gguf numpy"
python3 -m pip install --quiet gguf numpy || echo "install-pydeps: pip install failed; Python interop tests will skip"
