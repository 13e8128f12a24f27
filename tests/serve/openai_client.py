#!/usr/bin/env python3
"""Real-client test of `tern serve` with the official `openai` package: models, chat (plain and streaming),
completions, stop strings, seeds, every error class, tokenize/detokenize, metrics, a client disconnect, and a load
test (concurrent streaming clients, zero errors, greedy outputs identical to each request run alone).

usage: openai_client.py BASE_URL API_KEY MODEL_ID SERVER_PID [RSS_CHECK=1]   (BASE_URL without /v1)
"""
import concurrent.futures
import json
import sys
import time
import urllib.error
import urllib.request

import openai
from openai import OpenAI

BASE, KEY, MODEL, PID = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
RSS_CHECK = len(sys.argv) <= 5 or sys.argv[5] != "0"
client = OpenAI(base_url=BASE + "/v1", api_key=KEY, max_retries=0, timeout=120)
failures = 0


def check(name, cond, detail=""):
    global failures
    if cond:
        print(f"ok: {name}")
    else:
        failures += 1
        print(f"FAIL: {name} {detail}")


def raw(method, path, body=None, key=KEY, data=None, content_type="application/json"):
    """Plain HTTP (for what the openai package cannot send): returns (status, parsed JSON or text)."""
    headers = {"Content-Type": content_type}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    if data is None and body is not None:
        data = json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def is_error_body(j):
    return (isinstance(j, dict) and set(j.get("error", {}).keys()) >= {"message", "type", "param", "code"}
            and isinstance(j["error"]["message"], str) and j["error"]["message"] != "")


def expect_error(name, fn, status, param=None, code=None):
    try:
        fn()
    except openai.APIStatusError as e:
        body = e.body if isinstance(e.body, dict) else {}
        # The openai package hands over the "error" object itself as e.body.
        err = body.get("error", body)
        ok = e.status_code == status and (param is None or err.get("param") == param) and \
            (code is None or err.get("code") == code) and bool(err.get("message"))
        check(f"error {status}: {name}", ok, f"got {e.status_code} {err}")
        return
    except Exception as e:  # noqa: BLE001
        check(f"error {status}: {name}", False, f"raised {type(e).__name__}: {e}")
        return
    check(f"error {status}: {name}", False, "no error raised")


def chat(content, max_tokens=24, **kw):
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": content}],
                                          max_tokens=max_tokens, temperature=0, **kw)


def stream_chat(content, max_tokens=24, **kw):
    text, chunks, usage, finish = "", 0, None, None
    s = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": content}],
                                       max_tokens=max_tokens, temperature=0, stream=True,
                                       stream_options={"include_usage": True}, **kw)
    for c in s:
        chunks += 1
        if c.usage:
            usage = c.usage
        for ch in c.choices:
            text += ch.delta.content or ""
            finish = ch.finish_reason or finish
    return text, chunks, usage, finish


t_start = time.time()

# --- basics
models = client.models.list()
check("models.list serves one model", [m.id for m in models.data] == [MODEL], str(models))
st, j = raw("GET", "/health", key=None)
check("/health is open and ok", st == 200 and j == {"status": "ok"}, str(j))

r = chat("Tell me a fortune.")
text = r.choices[0].message.content
check("chat: assistant text", r.choices[0].message.role == "assistant" and isinstance(text, str) and len(text) > 0, str(r))
check("chat: finish_reason", r.choices[0].finish_reason in ("stop", "length"), r.choices[0].finish_reason)
u = r.usage
check("chat: usage", u.prompt_tokens > 0 and 0 < u.completion_tokens <= 24 and u.total_tokens == u.prompt_tokens + u.completion_tokens, str(u))
check("chat: object and model", r.object == "chat.completion" and r.model == MODEL and r.id.startswith("chatcmpl-"))

s_text, s_chunks, s_usage, s_finish = stream_chat("Tell me a fortune.")
check("streaming chat == plain chat (greedy)", s_text == text, f"{s_text!r} vs {text!r}")
check("streaming chat: several chunks", s_chunks >= 3, str(s_chunks))
check("streaming chat: usage chunk", s_usage is not None and s_usage.completion_tokens == u.completion_tokens
      and s_usage.prompt_tokens == u.prompt_tokens, str(s_usage))
check("streaming chat: finish_reason", s_finish == r.choices[0].finish_reason, str(s_finish))

c = client.completions.create(model=MODEL, prompt="In the beginning", max_tokens=16, temperature=0)
check("completions: text", isinstance(c.choices[0].text, str) and len(c.choices[0].text) > 0 and c.object == "text_completion", str(c))
cs = "".join(x.choices[0].text for x in client.completions.create(model=MODEL, prompt="In the beginning", max_tokens=16,
                                                                   temperature=0, stream=True) if x.choices)
check("streaming completions == plain completions", cs == c.choices[0].text, f"{cs!r} vs {c.choices[0].text!r}")
st, toks = raw("POST", "/tokenize", {"content": "In the beginning"})
check("/tokenize", st == 200 and all(isinstance(t, int) for t in toks["tokens"]), str(toks))
ct = client.completions.create(model=MODEL, prompt=toks["tokens"], max_tokens=16, temperature=0)
check("completions from token ids == from text", ct.choices[0].text == c.choices[0].text)
st, big = raw("POST", "/tokenize", {"content": "and " * 5000}, content_type="application/x-www-form-urlencoded")
check("a 20 KB body sent as `curl -d` sends it (form-encoded) is read", st == 200 and len(big["tokens"]) >= 1000, str(st))
st, de = raw("POST", "/detokenize", {"tokens": toks["tokens"]})
check("/detokenize round trip", st == 200 and de.get("content") == "In the beginning", str(de))

# stop strings and seeds
if len(text) > 8:
    stop = text[len(text) // 2:len(text) // 2 + 3]
    r2 = chat("Tell me a fortune.", stop=[stop])
    check("stop string cuts the answer", r2.choices[0].message.content == text[:text.find(stop)]
          and r2.choices[0].finish_reason == "stop", f"{r2.choices[0].message.content!r} stop {stop!r}")
a = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=20,
                                   temperature=0.9, seed=7).choices[0].message.content
b = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=20,
                                   temperature=0.9, seed=7).choices[0].message.content
check("same seed, same sampled answer", a == b, f"{a!r} vs {b!r}")
r3 = client.chat.completions.create(
    model=MODEL, messages=[{"role": "system", "content": "Be brief."},
                           {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
    max_completion_tokens=5, top_p=0.9, presence_penalty=0.5, frequency_penalty=0.5,
    extra_body={"top_k": 20, "min_p": 0.1})
check("all sampling parameters accepted; max_completion_tokens honoured", r3.usage.completion_tokens <= 5, str(r3.usage))

# log-probabilities
lr = chat("Tell me a fortune.", logprobs=True, top_logprobs=3)
content = lr.choices[0].logprobs.content if lr.choices[0].logprobs else []
n_text_tokens = lr.usage.completion_tokens - (1 if lr.choices[0].finish_reason == "stop" else 0)
check("chat logprobs: one entry per generated token", len(content) == n_text_tokens, f"{len(content)} vs {n_text_tokens}")
check("chat logprobs: greedy token is its own top alternative, logprob <= 0",
      all(len(e.top_logprobs) == 3 and e.top_logprobs[0].token == e.token and e.logprob <= 0 for e in content))
check("chat logprobs: tokens spell the answer", "".join(e.token for e in content) == lr.choices[0].message.content)
check("chat logprobs do not change the answer", lr.choices[0].message.content == text)
ls = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Tell me a fortune."}],
                                    max_tokens=24, temperature=0, stream=True, logprobs=True, top_logprobs=2)
streamed = [e for ch in ls for c_ in ch.choices if c_.logprobs and c_.logprobs.content for e in c_.logprobs.content]
check("streaming chat logprobs == plain", [(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in content])
cl = client.completions.create(model=MODEL, prompt="In the beginning", max_tokens=8, temperature=0, logprobs=2)
lp = cl.choices[0].logprobs
check("completions logprobs: legacy form", lp is not None and len(lp.tokens) == 8 and len(lp.token_logprobs) == 8
      and all(len(t) == 2 for t in lp.top_logprobs) and lp.text_offset[0] == 0, str(lp))

# reasoning: with reasoning_format auto, text before </think> of the think block the template opens is
# reasoning_content (this tiny model never closes the block, so all of it); with none, the answer as generated.
ra = chat("Tell me a fortune.", extra_body={"reasoning_format": "auto"})
ra_reasoning = (ra.choices[0].message.model_extra or {}).get("reasoning_content")
check("reasoning_format auto: the open think block is reasoning_content",
      ra_reasoning == text and not ra.choices[0].message.content, f"{ra_reasoning!r} / {ra.choices[0].message.content!r}")
rs = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Tell me a fortune."}],
                                    max_tokens=24, temperature=0, stream=True, extra_body={"reasoning_format": "auto"})
rs_reasoning = "".join((c_.delta.model_extra or {}).get("reasoning_content", "") or "" for ch in rs for c_ in ch.choices)
check("reasoning_format auto, streaming: reasoning_content deltas", rs_reasoning == text, repr(rs_reasoning))
rn = chat("Tell me a fortune.", extra_body={"chat_template_kwargs": {"enable_thinking": False}, "reasoning_format": "auto"})
check("a closed think block (enable_thinking false) leaves the answer as content", bool(rn.choices[0].message.content)
      and not (rn.choices[0].message.model_extra or {}).get("reasoning_content"))

# tools: definitions reach the template; a tool-call round trip (assistant tool_calls + tool result) is accepted
weather = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                             "parameters": {"type": "object", "properties": {
                                                 "city": {"type": "string"}}, "required": ["city"]}}}]
plain = chat("What is the weather in Paris?")
wt = chat("What is the weather in Paris?", tools=weather)
check("tools: the definitions are in the prompt", wt.usage.prompt_tokens > plain.usage.prompt_tokens + 20,
      f"{wt.usage.prompt_tokens} vs {plain.usage.prompt_tokens}")
check("tools: answer is content or well-formed tool_calls", wt.choices[0].finish_reason in ("stop", "length", "tool_calls")
      and (wt.choices[0].message.content is not None or wt.choices[0].message.tool_calls))
wn = chat("What is the weather in Paris?", tools=weather, tool_choice="none")
check("tool_choice none: the model is not told about tools", wn.usage.prompt_tokens == plain.usage.prompt_tokens)
round_trip = [{"role": "user", "content": "What is the weather in Paris?"},
              {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
                  "name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
              {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 C"}]
rt = client.chat.completions.create(model=MODEL, messages=round_trip, tools=weather, max_tokens=16, temperature=0)
check("tools: a tool result is fed back through the template", rt.usage.prompt_tokens > wt.usage.prompt_tokens
      and rt.choices[0].finish_reason in ("stop", "length", "tool_calls"))
st, tj = raw("POST", "/tokenize", {"content": "<tool_response>\nSunny, 21 C\n</tool_response>"})
check("/tokenize parses the tool response markup", st == 200 and len(tj["tokens"]) > 3)
# tool_choice "required" / named: the answer is a tool call (its name constrained to the tools); a full round trip
tools2 = weather + [{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}]
req_call = chat("What is the weather in Paris?", tools=tools2, tool_choice="required", max_tokens=40)
calls = req_call.choices[0].message.tool_calls or []
check("tool_choice required: a call of one of the tools", len(calls) >= 1 and calls[0].function.name in
      ("get_weather", "get_time") and isinstance(json.loads(calls[0].function.arguments), dict)
      and calls[0].id and calls[0].type == "function", str(req_call.choices[0]))
named = chat("What is the weather in Paris?", tools=tools2, max_tokens=40,
             tool_choice={"type": "function", "function": {"name": "get_weather"}})
ncalls = named.choices[0].message.tool_calls or []
check("tool_choice named: a call of that function", len(ncalls) >= 1 and ncalls[0].function.name == "get_weather"
      and isinstance(json.loads(ncalls[0].function.arguments), dict), str(named.choices[0]))
check("tool call: finish_reason tool_calls", named.choices[0].finish_reason in ("tool_calls", "length"),
      named.choices[0].finish_reason)
sc = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "What is the weather in Paris?"}],
                                    tools=tools2, tool_choice="required", max_tokens=40, temperature=0, stream=True)
stream_calls, stream_finish = [], None
for ch in sc:
    for c_ in ch.choices:
        stream_calls += c_.delta.tool_calls or []
        stream_finish = c_.finish_reason or stream_finish
check("streaming tool call == plain", [(c_.function.name, c_.function.arguments) for c_ in stream_calls] ==
      [(c_.function.name, c_.function.arguments) for c_ in calls] and stream_finish == req_call.choices[0].finish_reason)
conv2 = [{"role": "user", "content": "What is the weather in Paris?"},
         named.choices[0].message.model_dump(exclude_none=True),
         {"role": "tool", "tool_call_id": ncalls[0].id if ncalls else "x", "content": "Sunny, 21 C"}]
back = client.chat.completions.create(model=MODEL, messages=conv2, tools=tools2, max_tokens=16, temperature=0)
check("tool round trip: the call and its result go back through the template and get an answer",
      back.choices[0].finish_reason in ("stop", "length", "tool_calls") and back.usage.prompt_tokens > named.usage.prompt_tokens)
expect_error("tool_choice naming an unknown function", lambda: chat("hi", tools=weather, tool_choice={
    "type": "function", "function": {"name": "nope"}}), 400, "tool_choice")
expect_error("tool_choice required without tools", lambda: chat("hi", tool_choice="required"), 400, "tool_choice")
expect_error("tool call arguments not JSON", lambda: client.chat.completions.create(
    model=MODEL, messages=[round_trip[0], {"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": "{oops"}}]}, round_trip[2]],
    max_tokens=4), 400, "messages[1].tool_calls[0].function.arguments")
expect_error("malformed tools", lambda: chat("hi", tools=[{"type": "function", "function": {"description": "no name"}}]),
             400, "tools[0].function.name")
expect_error("reasoning_format bogus", lambda: chat("hi", extra_body={"reasoning_format": "bogus"}), 400,
             "reasoning_format")

# response_format json_object: constrained decoding keeps the answer a JSON object (complete when it ends by itself)
jo = chat("Give me a JSON object.", max_tokens=48, response_format={"type": "json_object"})
jt = jo.choices[0].message.content
if jo.choices[0].finish_reason == "stop":
    check("json_object: a complete answer parses as an object", isinstance(json.loads(jt), dict), repr(jt))
else:
    check("json_object: a cut answer is the start of an object", jt.lstrip().startswith("{") and "\n" * 20 not in jt, repr(jt))
schema = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"enum": [1, 2, 3]}},
          "required": ["ok", "n"], "additionalProperties": False}
for seed in (1, 2):
    js = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Answer in JSON."}],
                                        max_tokens=200, temperature=1, seed=seed, response_format={
                                            "type": "json_schema", "json_schema": {"name": "answer", "schema": schema,
                                                                                   "strict": True}})
    try:
        obj = json.loads(js.choices[0].message.content)
    except ValueError:
        obj = None
    check(f"json_schema: the answer conforms (seed {seed})", js.choices[0].finish_reason == "stop" and obj is not None
          and set(obj) == {"ok", "n"} and isinstance(obj["ok"], bool) and obj["n"] in (1, 2, 3),
          repr(js.choices[0].message.content))
expect_error("json_schema with an unsupported keyword", lambda: chat("hi", response_format={
    "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {
        "a": {"type": "string", "pattern": "^x"}}}}}), 400, "response_format")

# --- every error class
st, j = raw("POST", "/v1/chat/completions", data=b'{"messages": [')
check("error 400: malformed JSON", st == 400 and is_error_body(j), f"{st} {j}")
st, j = raw("POST", "/v1/chat/completions", data=b'[1, 2]')
check("error 400: body not an object", st == 400 and is_error_body(j), f"{st} {j}")
expect_error("unknown model", lambda: client.chat.completions.create(
    model="gpt-imaginary", messages=[{"role": "user", "content": "hi"}]), 404, "model", "model_not_found")
long_prompt = "word " * 20000
expect_error("prompt over the context", lambda: chat(long_prompt), 400, "messages", "context_length_exceeded")
expect_error("max_tokens over the context", lambda: chat("hi", max_tokens=100000), 400, "max_tokens")
expect_error("completion prompt over the context", lambda: client.completions.create(
    model=MODEL, prompt=long_prompt, max_tokens=4), 400, "prompt", "context_length_exceeded")
expect_error("temperature 5", lambda: client.chat.completions.create(
    model=MODEL, messages=[{"role": "user", "content": "hi"}], temperature=5), 400, "temperature")
expect_error("top_p 0", lambda: client.chat.completions.create(
    model=MODEL, messages=[{"role": "user", "content": "hi"}], top_p=0), 400, "top_p")
expect_error("max_tokens 0", lambda: chat("hi", max_tokens=0), 400, "max_tokens")
expect_error("presence_penalty 3", lambda: chat("hi", presence_penalty=3), 400, "presence_penalty")
expect_error("temperature as a string", lambda: client.chat.completions.create(
    model=MODEL, messages=[{"role": "user", "content": "hi"}], extra_body={"temperature": "hot"}), 400, "temperature")
expect_error("stop not strings", lambda: chat("hi", extra_body={"stop": [1, 2]}), 400, "stop")
expect_error("n = 2", lambda: chat("hi", n=2), 400, "n")
expect_error("empty messages", lambda: client.chat.completions.create(model=MODEL, messages=[]), 400, "messages")
expect_error("missing messages", lambda: client.post("/chat/completions", body={"model": MODEL}, cast_to=object),
             400, "messages")
expect_error("unknown role", lambda: client.chat.completions.create(
    model=MODEL, messages=[{"role": "wizard", "content": "hi"}]), 400, "messages[0].role")
expect_error("stream_options without stream", lambda: chat("hi", stream_options={"include_usage": True}), 400,
             "stream_options")
expect_error("top_logprobs without logprobs", lambda: chat("hi", top_logprobs=2), 400, "top_logprobs")
expect_error("top_logprobs 21", lambda: chat("hi", logprobs=True, top_logprobs=21), 400, "top_logprobs")
expect_error("completions logprobs 6", lambda: client.completions.create(model=MODEL, prompt="hi", max_tokens=2,
                                                                         logprobs=6), 400, "logprobs")
expect_error("empty completion prompt", lambda: client.completions.create(model=MODEL, prompt="", max_tokens=4), 400, "prompt")
expect_error("token id out of range", lambda: client.completions.create(model=MODEL, prompt=[1, 999999], max_tokens=4),
             400, "prompt")
noauth = OpenAI(base_url=BASE + "/v1", api_key="wrong-key", max_retries=0)
expect_error("incorrect API key", lambda: noauth.models.list(), 401, None, "invalid_api_key")
st, j = raw("GET", "/v1/models", key=None)
check("error 401: missing API key", st == 401 and is_error_body(j) and j["error"]["code"] == "invalid_api_key", f"{st} {j}")
st, j = raw("GET", "/v1/nothing-here")
check("error 404: unknown route", st == 404 and is_error_body(j), f"{st} {j}")
st, j = raw("POST", "/detokenize", {"tokens": [1, -5]})
check("error 400: detokenize bad id", st == 400 and is_error_body(j), f"{st} {j}")
st, j = raw("GET", "/v1/models")
check("server healthy after the errors", st == 200 and j["data"][0]["id"] == MODEL)


def metric(name):
    _, t = raw("GET", "/metrics")
    for line in t.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


# --- a client that leaves mid-stream cancels its sequence (15000 tokens: still generating when the client leaves,
# even on a machine several times faster than the 2000 tok/s of the dev VM)
cancelled0 = metric("tern_requests_cancelled_total")
s = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Tell me everything."}],
                                   max_tokens=15000, temperature=0, stream=True, extra_body={"ignore_eos": True})
got = 0
for ch in s:
    got += 1
    if got >= 3:
        break
s.close()
deadline = time.time() + 20
while time.time() < deadline and not (metric("tern_requests_cancelled_total") > cancelled0 and metric("tern_sequences_active") == 0):
    time.sleep(0.1)
check("disconnect cancels the sequence", metric("tern_requests_cancelled_total") > cancelled0
      and metric("tern_sequences_active") == 0, f"cancelled {metric('tern_requests_cancelled_total')}")

# --- prefix cache: a follow-up chat turn resumes from the cached previous turn
conv = [{"role": "system", "content": "You answer in verses."}, {"role": "user", "content": "Who made the light?"}]
t1 = client.chat.completions.create(model=MODEL, messages=conv, max_tokens=16, temperature=0)
conv += [{"role": "assistant", "content": t1.choices[0].message.content}, {"role": "user", "content": "And the dark?"}]
t2 = client.chat.completions.create(model=MODEL, messages=conv, max_tokens=16, temperature=0)
cached = t2.usage.prompt_tokens_details.cached_tokens if t2.usage.prompt_tokens_details else 0
check("prefix cache: the second turn resumes from the first", 0 < cached < t2.usage.prompt_tokens,
      f"cached {cached} of {t2.usage.prompt_tokens}")
check("prefix cache: hits counted in /metrics", (metric("tern_prefix_cache_hits_total") or 0) >= 1)
# Without thinking the model's answer is exactly what the template shows for it, so the follow-up resumes at the
# end of that answer: the first prompt and all its answer tokens but the last (sampled, never fed; with drafting the
# scheduler steps back to there) are cached.
nothink = {"chat_template_kwargs": {"enable_thinking": False}}
conv = [{"role": "user", "content": "Who made the light?"}]
t1 = client.chat.completions.create(model=MODEL, messages=conv, max_tokens=120, temperature=0, extra_body=nothink)
conv += [{"role": "assistant", "content": t1.choices[0].message.content}, {"role": "user", "content": "And the dark?"}]
t2 = client.chat.completions.create(model=MODEL, messages=conv, max_tokens=16, temperature=0, extra_body=nothink)
cached = t2.usage.prompt_tokens_details.cached_tokens if t2.usage.prompt_tokens_details else 0
want = t1.usage.prompt_tokens + t1.usage.completion_tokens - 1
check("prefix cache: the follow-up resumes at the end of the previous answer",
      t1.choices[0].finish_reason == "stop" and cached == want, f"cached {cached}, want {want} ({t1.choices[0].finish_reason})")


def rss_kib():
    with open(f"/proc/{PID}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


# --- a disconnect storm: many clients leave mid-stream; the server stays healthy and its memory flat
def leave_early(i):
    s = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": f"Story {i}"}],
                                       max_tokens=300, temperature=0.8, seed=i, stream=True,
                                       extra_body={"ignore_eos": True})
    for k, _ in enumerate(s):
        if k >= 2:
            break
    s.close()


rss = []
for storm in range(6):
    with concurrent.futures.ThreadPoolExecutor(24) as ex:
        list(ex.map(leave_early, range(24)))
    deadline = time.time() + 30
    while time.time() < deadline and metric("tern_sequences_active") != 0:
        time.sleep(0.1)
    rss.append(rss_kib())
st, j = raw("GET", "/health", key=None)
check("disconnect storm: healthy, nothing left running", st == 200 and metric("tern_sequences_active") == 0
      and metric("tern_queue_depth") == 0)
if RSS_CHECK:
    # A leak grows with every storm; a one-off step does not (e.g. the allocator giving a new thread its own arena:
    # measured in CI with a test running beside it, +24 MiB after storm 3 of 3, and on 2026-12-07 +8.5 MiB after
    # each of storms 3 and 4 of 4; neither reproduced alone). So: flat across at least one of the later pairs of
    # six storms (glibc caps arenas at 8 per core, so the steps stop).
    check("disconnect storm: memory flat (RSS after two consecutive storms from the second on within 2 MiB)",
          min(abs(rss[k + 1] - rss[k]) for k in range(1, 5)) < 2048, str(rss))

# --- load: 32 concurrent streaming clients x 4 requests; greedy outputs identical to each request run alone
prompts = [f"Tell me about the number {i}." if i % 2 else f"Define the word {w}."
           for i, w in enumerate(["light", "water", "stone", "wind", "fire", "night", "bread", "salt"])]
lengths = [12, 20, 28, 16, 24, 32, 10, 18]
alone = {}
for p, n in zip(prompts, lengths):
    alone[p] = stream_chat(p, max_tokens=n)[0]


def client_job(i):
    out = []
    for k in range(4):
        p = prompts[(i + k) % len(prompts)]
        n = lengths[(i + k) % len(prompts)]
        out.append((p, stream_chat(p, max_tokens=n)[0]))
    return out


t0 = time.time()
steps0, gen0 = metric("tern_forward_steps_total"), metric("tern_completion_tokens_total")
errors, mismatches, done = 0, 0, 0
with concurrent.futures.ThreadPoolExecutor(32) as ex:
    futs = [ex.submit(client_job, i) for i in range(32)]
    for f in concurrent.futures.as_completed(futs):
        try:
            for p, t in f.result():
                done += 1
                if t != alone[p]:
                    mismatches += 1
                    print(f"  mismatch for {p!r}: {t!r} vs alone {alone[p]!r}")
        except Exception as e:  # noqa: BLE001
            errors += 1
            print(f"  client error: {type(e).__name__}: {e}")
check(f"load: 32 clients x 4 streaming requests, zero errors ({time.time() - t0:.1f}s)", errors == 0 and done == 128,
      f"{errors} errors, {done} done")
steps, gen = metric("tern_forward_steps_total") - steps0, metric("tern_completion_tokens_total") - gen0
check(f"load: sequences were batched ({gen / max(steps, 1):.2f} tokens per step)", gen / max(steps, 1) > 2.0)
check("load: every output identical to the request run alone", mismatches == 0, f"{mismatches} mismatches")
_, mt = raw("GET", "/metrics")
for name in ("tern_http_requests_total", "tern_prompt_tokens_total", "tern_completion_tokens_total",
             "tern_queue_depth", "tern_sequences_active", "tern_tokens_per_second", "tern_expert_cache_slots",
             "tern_expert_cache_hits_total", "tern_expert_cache_misses_total", "tern_expert_cache_read_bytes_total"):
    check(f"/metrics has {name}", f"\n{name}" in "\n" + mt, "")
check("no --mem-budget: experts mapped, no expert reads", metric("tern_expert_cache_slots") == 0
      and metric("tern_expert_cache_misses_total") == 0)
check("queue drained after the load", metric("tern_queue_depth") == 0 and metric("tern_sequences_active") == 0)

print(f"{failures} failed ({time.time() - t_start:.1f}s)")
sys.exit(1 if failures else 0)
