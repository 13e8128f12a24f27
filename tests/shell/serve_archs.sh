#!/usr/bin/env bash
# serve_archs.sh TERN FIXTURES_DIR: `tern serve` on each architecture's fixture (qwen35moe, dense qwen35,
# qwen3next; Q8_0, repacked): a greedy /v1/completions answer equals what `tern run` generates from the same prompt
# ids (turned into text by the server's own /detokenize), a chat completion runs through the file's chat template,
# and /v1/models names the model.
set -u
TERN=$1
FIX=$2
fails=0
for name in q35-ratio q35-dense q35-next; do
  MODEL=$FIX/models/$name.q8_0.gguf
  tmp=$(mktemp -d)
  (
    . "$(dirname "$0")/lib/serve_start.sh"
    start_server -m "$MODEL" -c 256 --parallel 2 -t 1
    python3 - "$PORT" "$TERN" "$MODEL" "$name" <<'PY'
import json, subprocess, sys, urllib.request
port, tern, model, name = sys.argv[1:5]
def post(path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=60))
prompt = "The small bird"
pids = post("/tokenize", {"content": prompt})["tokens"]
run = subprocess.run([tern, "run", "-m", model, "--tokens", ",".join(map(str, pids)), "--print-ids", "-n", "16",
                      "--temp", "0", "-t", "1"], capture_output=True, text=True)
ids = [int(x) for x in run.stdout.split()]
want = post("/detokenize", {"tokens": ids})["content"]
got = post("/v1/completions", {"prompt": prompt, "max_tokens": 16, "temperature": 0})["choices"][0]["text"]
models = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10))["data"]
# The chat path (the GGUF's chat template, then the same forward): a greedy reply of max_tokens tokens.
chat = post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8,
                                     "temperature": 0, "chat_template_kwargs": {"enable_thinking": False}})
chat_ok = 1 <= chat["usage"]["completion_tokens"] <= 8 and chat["usage"]["prompt_tokens"] > 3
print(("ok" if chat_ok else "FAIL") + f": {name}: a chat completion through the model's template ({chat['usage']})")
ok = run.returncode == 0 and len(ids) == 16 and got == want
print(("ok" if ok else "FAIL") + f": {name}: served greedy completion equals tern run's ({len(ids)} tokens)")
if not ok:
    print(f"  served {got!r}\n  run    {want!r}\n  {run.stderr[-300:]}")
print(("ok" if models and models[0]["id"] else "FAIL") + f": {name}: /v1/models lists {models[0]['id'] if models else None!r}")
sys.exit(0 if ok and models and chat_ok else 1)
PY
  ) || fails=$((fails+1))
done
echo "$fails failed"
[ $fails -eq 0 ]
