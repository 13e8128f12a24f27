#!/usr/bin/env bash
# serve_anthropic.sh TERN FIXTURES_DIR: starts `tern serve` with the bundled model on a free port (API key on) and
# runs tests/serve/anthropic_client.py against its Anthropic Messages API with the official `anthropic` package
# (pip-installed here when missing): messages, thinking, streaming, stop_sequences, tool_use round trips,
# count_tokens and Anthropic-shaped errors.
set -u
TERN=$1
FIX=$2
TESTS=$(cd "$(dirname "$0")/.." && pwd)
MODEL=$FIX/../../models/tern-tiny-q35moe.gguf
if ! python3 -c 'import anthropic' 2>/dev/null; then
  echo "serve_anthropic: pip installing anthropic"
  python3 -m pip install --quiet anthropic || { echo "FAIL: could not install the anthropic package"; exit 1; }
fi
tmp=$(mktemp -d)
KEY="sk-tern-test-$$"
. "$(dirname "$0")/lib/serve_start.sh"
start_server -m "$MODEL" -c 16384 --parallel 2 --batch 64 -t 1 --api-key "$KEY"
python3 "$TESTS/serve/anthropic_client.py" "http://127.0.0.1:$PORT" "$KEY" tern-tiny-q35moe
rc=$?
if [ $rc -ne 0 ]; then echo "--- server log"; tail -30 "$tmp/server.log"; fi
exit $rc
