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
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$TERN" serve -m "$MODEL" --port "$PORT" -c 4096 -t 1 2>"$tmp/server.log" &
pid=$!
cleanup() { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
python3 - "$PORT" <<'PY' || { echo "FAIL: server did not come up"; cat "$tmp/server.log"; exit 1; }
import sys, time, urllib.request
for _ in range(300):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=1).read()
        sys.exit(0)
    except Exception:
        time.sleep(0.1)
sys.exit(1)
PY
python3 "$TESTS/serve/web_page_test.py" "$CHROME" "http://127.0.0.1:$PORT" "$tmp/profile"
rc=$?
if [ $rc -ne 0 ]; then echo "--- server log"; tail -20 "$tmp/server.log"; fi
exit $rc
