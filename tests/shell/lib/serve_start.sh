# Sourced by tests/shell/serve_*.sh: start_server ARGS... runs `$TERN serve ARGS --host 127.0.0.1 --port $PORT`
# on a free port in the background (log in $tmp/server.log), removes it and $tmp on exit, and waits up to 30 s
# for /health. Needs TERN and tmp set by the caller; sets PORT and pid.
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start_server() {
  "$TERN" serve "$@" --host 127.0.0.1 --port "$PORT" 2>"$tmp/server.log" &
  pid=$!
  trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
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
}
