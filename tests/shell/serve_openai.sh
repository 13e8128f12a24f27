#!/usr/bin/env bash
# serve_openai.sh TERN FIXTURES_DIR: starts `tern serve` with the bundled model on a free port (API key on) and
# runs tests/serve/openai_client.py against it with the official `openai` package (pip-installed here when
# missing): plain, streaming, completions, every error class, a client disconnect and a concurrent load test.
# Then SIGTERM must stop the server cleanly (exit status 0).
set -u
TERN=$1
FIX=$2
TESTS=$(cd "$(dirname "$0")/.." && pwd)
MODEL=$FIX/../../models/tern-tiny-q35moe.gguf
if ! python3 -c 'import openai' 2>/dev/null; then
  echo "serve_openai: pip installing openai"
  python3 -m pip install --quiet openai || { echo "FAIL: could not install the openai package"; exit 1; }
fi
tmp=$(mktemp -d)
KEY="sk-tern-test-$$"
. "$(dirname "$0")/lib/serve_start.sh"
start_server -m "$MODEL" -c 16384 --parallel 4 --batch 64 -t 1 --api-key "$KEY"
# Under AddressSanitizer freed memory sits in its quarantine, so RSS is no measure of leaks there (LeakSanitizer is).
RSS_CHECK=1
if ldd "$TERN" 2>/dev/null | grep -q libasan; then RSS_CHECK=0; echo "serve_openai: ASan build: RSS flatness not checked (LeakSanitizer checks leaks)"; fi
python3 "$TESTS/serve/openai_client.py" "http://127.0.0.1:$PORT" "$KEY" tern-tiny-q35moe "$pid" "$RSS_CHECK"
rc=$?
# A second server on the same port must fail (no silent SO_REUSEPORT sharing).
timeout 60 "$TERN" serve -m "$MODEL" --port "$PORT" -c 64 -t 1 2>"$tmp/second.log"
second=$?
if [ $second -eq 1 ] && grep -q "^tern: error: cannot listen" "$tmp/second.log"; then echo "ok: a second server on the port is refused"
else echo "FAIL: a second server on the port: exit $second"; cat "$tmp/second.log"; rc=1; fi
kill -TERM "$pid"
wait "$pid"
src=$?
if [ $src -ne 0 ]; then echo "FAIL: server exit status $src after SIGTERM"; rc=1; else echo "ok: server stopped cleanly"; fi
if [ $rc -ne 0 ]; then echo "--- server log"; tail -30 "$tmp/server.log"; fi
exit $rc
