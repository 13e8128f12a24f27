#!/usr/bin/env bash
# serve_web.sh TERN FIXTURES_DIR: the web chat page in headless Chromium (Debian's `chromium`, from
# scripts/install-deps.sh), driven over the DevTools protocol by tests/serve/web_page_test.py: a message sent from
# the page streams the API's greedy answer, and the stop button stops a long answer (the server cancels it).
set -u
TERN=$1
FIX=$2
TESTS=$(cd "$(dirname "$0")/.." && pwd)
MODEL=$FIX/../../models/tern-tiny-q35moe.gguf
CHROME=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROME" ]; then echo "FAIL: chromium not found (run scripts/install-deps.sh)"; exit 1; fi
tmp=$(mktemp -d)
. "$(dirname "$0")/lib/serve_start.sh"
start_server -m "$MODEL" -c 65536 --parallel 2 -t 1
python3 "$TESTS/serve/web_page_test.py" "$CHROME" "http://127.0.0.1:$PORT" "$tmp/profile"
rc=$?
if [ $rc -ne 0 ]; then echo "--- server log"; tail -20 "$tmp/server.log"; fi
exit $rc
