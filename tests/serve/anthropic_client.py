#!/usr/bin/env python3
"""Real-client test of `tern serve`'s Anthropic Messages API with the official `anthropic` package: messages
(system, multi-turn, content blocks), thinking blocks, streaming (the event sequence the client's stream helper
accumulates, equal to the plain answer), stop_sequences, max_tokens, usage, tool_use / tool_result round trips,
count_tokens, and errors in Anthropic's shape. Answers are greedy, so the same conversation sent through
/v1/chat/completions must give the same text: the two APIs share one parser and one template path.

usage: anthropic_client.py BASE_URL API_KEY MODEL_ID   (BASE_URL without /v1)
"""
import json
import sys
import urllib.error
import urllib.request

import anthropic

BASE, KEY, MODEL = sys.argv[1], sys.argv[2], sys.argv[3]
client = anthropic.Anthropic(base_url=BASE, api_key=KEY, max_retries=0, timeout=120)
failures = 0


def check(name, cond, detail=""):
    global failures
    if cond:
        print(f"ok: {name}")
    else:
        failures += 1
        print(f"FAIL: {name} {detail}")


def raw(path, body=None, headers=None, data=None):
    h = {"Content-Type": "application/json", "x-api-key": KEY, "anthropic-version": "2023-06-01"}
    h.update(headers or {})
    req = urllib.request.Request(BASE + path, data=data if data is not None else json.dumps(body).encode(),
                                 method="POST", headers={k: v for k, v in h.items() if v is not None})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def is_anthropic_error(j, etype):
    return (isinstance(j, dict) and j.get("type") == "error" and isinstance(j.get("error"), dict)
            and j["error"].get("type") == etype and bool(j["error"].get("message")))


def expect_error(name, fn, cls, status, etype):
    try:
        fn()
    except anthropic.APIStatusError as e:
        check(f"error {status}: {name}", isinstance(e, cls) and e.status_code == status
              and is_anthropic_error(e.body, etype), f"got {type(e).__name__} {e.status_code} {e.body}")
        return
    except Exception as e:  # noqa: BLE001
        check(f"error {status}: {name}", False, f"raised {type(e).__name__}: {e}")
        return
    check(f"error {status}: {name}", False, "no error raised")


NO_THINK = {"type": "disabled"}
# The client no longer has sampling arguments (newer Anthropic models fix them); tern still reads temperature,
# top_p and top_k from the body, and greedy answers make the comparisons below exact.
GREEDY = {"temperature": 0}
USER = [{"role": "user", "content": "Tell me a fortune."}]


def create(messages=USER, max_tokens=24, **kw):
    return client.messages.create(model=MODEL, messages=messages, max_tokens=max_tokens, extra_body=GREEDY, **kw)


def openai_chat(messages, max_tokens=24, **extra):
    body = {"model": MODEL, "messages": messages, "max_tokens": max_tokens, "temperature": 0, **extra}
    st, j = raw("/v1/chat/completions", body, headers={"Authorization": f"Bearer {KEY}", "x-api-key": None})
    assert st == 200, (st, j)
    return j["choices"][0]


def texts(msg, kind):
    return "".join(getattr(b, kind) for b in msg.content if b.type == ("text" if kind == "text" else kind))


# --- a plain answer, thinking off: one text block, the same text as chat completions
m = create(thinking=NO_THINK)
check("message: shape", m.type == "message" and m.role == "assistant" and m.id.startswith("msg_") and m.model == MODEL,
      str(m))
check("message: one text block", [b.type for b in m.content] == ["text"] and len(m.content[0].text) > 0, str(m.content))
check("message: stop_reason", m.stop_reason in ("end_turn", "max_tokens") and m.stop_sequence is None, str(m.stop_reason))
check("message: usage", m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0) > 5
      and 0 < m.usage.output_tokens <= 24, str(m.usage))
oa = openai_chat(USER, chat_template_kwargs={"enable_thinking": False}, reasoning_format="auto")
check("the same conversation through /v1/chat/completions gives the same text (greedy)",
      oa["message"]["content"] == m.content[0].text, f"{oa['message']['content']!r} vs {m.content[0].text!r}")
text = m.content[0].text

# --- thinking on (the template's default here): the open think block is a thinking block, as reasoning_content is
t = create()
oat = openai_chat(USER, reasoning_format="auto")
check("thinking: a thinking block with the model's reasoning", t.content and t.content[0].type == "thinking"
      and t.content[0].thinking == oat["message"].get("reasoning_content"), str(t.content))
t2 = create(thinking={"type": "enabled", "budget_tokens": 1024})
check("thinking enabled == the template's default", t2.content == t.content)
t3 = create(thinking={"type": "adaptive"})
check("thinking adaptive == the template's default", t3.content == t.content)

# --- streaming: the client's accumulated message equals the plain one; text_stream yields the text
with client.messages.stream(model=MODEL, messages=USER, max_tokens=24, extra_body=GREEDY, thinking=NO_THINK) as s:
    streamed_text = "".join(s.text_stream)
    final = s.get_final_message()
check("streaming: text_stream == plain text", streamed_text == text, f"{streamed_text!r} vs {text!r}")
check("streaming: final message == plain", [b.model_dump() for b in final.content] == [b.model_dump() for b in m.content]
      and final.stop_reason == m.stop_reason and final.usage.output_tokens == m.usage.output_tokens, str(final))
events = [e.type for e in client.messages.create(model=MODEL, messages=USER, max_tokens=24, extra_body=GREEDY, stream=True)]
check("streaming: event order", events[0] == "message_start" and events[1] == "content_block_start"
      and events[-2:] == ["message_delta", "message_stop"] and events.count("content_block_start") ==
      events.count("content_block_stop") and "content_block_delta" in events, str(events))
with client.messages.stream(model=MODEL, messages=USER, max_tokens=24, extra_body=GREEDY) as s:
    final_t = s.get_final_message()
check("streaming: thinking block == plain", [b.model_dump() for b in final_t.content] == [b.model_dump() for b in t.content],
      str(final_t.content))

# --- stop_sequences, max_tokens, system, multi-turn
if len(text) > 8:
    stop = text[len(text) // 2:len(text) // 2 + 3]
    ms = create(thinking=NO_THINK, stop_sequences=[stop, "never-appears"])
    check("stop_sequences: cut, stop_reason stop_sequence, the sequence named",
          ms.content[0].text == text[:text.find(stop)] and ms.stop_reason == "stop_sequence" and ms.stop_sequence == stop,
          f"{ms.content!r} {ms.stop_reason} {ms.stop_sequence!r} (stop {stop!r})")
    with client.messages.stream(model=MODEL, messages=USER, max_tokens=24, extra_body=GREEDY, thinking=NO_THINK,
                                stop_sequences=[stop]) as s:
        fs = s.get_final_message()
    check("stop_sequences, streaming", fs.stop_reason == "stop_sequence" and fs.stop_sequence == stop
          and fs.content[0].text == ms.content[0].text, str(fs))
mt = create(thinking=NO_THINK, max_tokens=3)
check("max_tokens: stop_reason max_tokens", mt.stop_reason == "max_tokens" and mt.usage.output_tokens == 3, str(mt))
conv = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": [{"type": "text", "text": "Hello."}]},
        {"role": "user", "content": [{"type": "text", "text": "Tell me "}, {"type": "text", "text": "a fortune."}]}]
mc = create(conv, thinking=NO_THINK, system=[{"type": "text", "text": "Be brief."}])
oc = openai_chat([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                  {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Tell me a fortune."}],
                 chat_template_kwargs={"enable_thinking": False}, reasoning_format="auto")
check("system + multi-turn + text blocks == the same chat conversation", mc.content[0].text == oc["message"]["content"],
      f"{mc.content!r} vs {oc['message']['content']!r}")
ct = client.messages.count_tokens(model=MODEL, messages=conv, system="Be brief.", thinking=NO_THINK)
check("count_tokens == the prompt the answer used", ct.input_tokens ==
      mc.usage.input_tokens + (mc.usage.cache_read_input_tokens or 0), f"{ct} vs {mc.usage}")

# --- tools: a forced call, the same call streamed, and a tool_result round trip
weather = [{"name": "get_weather", "description": "Current weather in a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
           {"name": "get_time", "input_schema": {"type": "object", "properties": {}}}]
ask = [{"role": "user", "content": "What is the weather in Paris?"}]
plain = create(ask, thinking=NO_THINK)
withtools = create(ask, thinking=NO_THINK, tools=weather)
check("tools: the definitions are in the prompt", withtools.usage.input_tokens + (withtools.usage.cache_read_input_tokens or 0)
      > plain.usage.input_tokens + (plain.usage.cache_read_input_tokens or 0) + 20)
call = create(ask, max_tokens=40, tools=weather, tool_choice={"type": "tool", "name": "get_weather"})
uses = [b for b in call.content if b.type == "tool_use"]
check("tool_choice tool: a tool_use block of that tool", len(uses) >= 1 and uses[0].name == "get_weather"
      and isinstance(uses[0].input, dict) and uses[0].id.startswith("toolu_"), str(call.content))
check("tool_use: stop_reason tool_use", call.stop_reason in ("tool_use", "max_tokens"), str(call.stop_reason))
anyc = create(ask, max_tokens=40, tools=weather, tool_choice={"type": "any"})
check("tool_choice any: a call of one of the tools",
      any(b.type == "tool_use" and b.name in ("get_weather", "get_time") for b in anyc.content), str(anyc.content))
with client.messages.stream(model=MODEL, messages=ask, max_tokens=40, extra_body=GREEDY, tools=weather,
                            tool_choice={"type": "tool", "name": "get_weather"}) as s:
    fcall = s.get_final_message()
suses = [b for b in fcall.content if b.type == "tool_use"]
check("streaming tool_use == plain (name and input)", [(b.name, b.input) for b in suses] == [(b.name, b.input) for b in uses]
      and fcall.stop_reason == call.stop_reason, str(fcall.content))
round_trip = ask + [{"role": "assistant", "content": call.content},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id if uses else "x",
                                                  "content": "Sunny, 21 C"},
                                                 {"type": "text", "text": "Thanks!"}]}]
back = create(round_trip, max_tokens=16, tools=weather)
check("tool round trip: the call and its result go back through the template and get an answer",
      back.usage.input_tokens + (back.usage.cache_read_input_tokens or 0) >
      call.usage.input_tokens + (call.usage.cache_read_input_tokens or 0) + 5
      and back.stop_reason in ("end_turn", "max_tokens", "tool_use"), str(back))
err_result = create(ask + [{"role": "assistant", "content": call.content},
                           {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "is_error": True,
                                                         "content": [{"type": "text", "text": "no such city"}]}]}],
                    max_tokens=4, tools=weather)
check("a tool_result with is_error and block content is accepted", err_result.stop_reason is not None)

# --- errors in Anthropic's shape
expect_error("max_tokens is required",
             lambda: client.messages.create(model=MODEL, messages=USER, max_tokens=None), anthropic.BadRequestError,
             400, "invalid_request_error")
expect_error("an image block is refused", lambda: create([{"role": "user", "content": [
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]),
    anthropic.BadRequestError, 400, "invalid_request_error")
expect_error("a role other than user/assistant", lambda: create([{"role": "system", "content": "x"}]),
             anthropic.BadRequestError, 400, "invalid_request_error")
expect_error("tool_use in a user message", lambda: create([{"role": "user", "content": [
    {"type": "tool_use", "id": "a", "name": "get_time", "input": {}}]}]), anthropic.BadRequestError, 400,
    "invalid_request_error")
expect_error("tool_choice naming an unknown tool", lambda: create(ask, tools=weather, tool_choice={"type": "tool", "name": "nope"}),
             anthropic.BadRequestError, 400, "invalid_request_error")
expect_error("an unknown model", lambda: client.messages.create(model="no-such-model", messages=USER, max_tokens=4),
             anthropic.NotFoundError, 404, "not_found_error")
expect_error("a wrong API key", lambda: anthropic.Anthropic(base_url=BASE, api_key="wrong", max_retries=0).messages.create(
    model=MODEL, messages=USER, max_tokens=4), anthropic.AuthenticationError, 401, "authentication_error")
expect_error("a prompt beyond the context", lambda: create([{"role": "user", "content": "word " * 40000}], max_tokens=4),
             anthropic.BadRequestError, 400, "invalid_request_error")
st, j = raw("/v1/messages", data=b"{not json")
check("invalid JSON: 400 in Anthropic's shape", st == 400 and is_anthropic_error(j, "invalid_request_error"), str(j))
st, j = raw("/v1/messages/nope", {})
check("an unknown /v1/messages route: 404 in Anthropic's shape", st == 404 and is_anthropic_error(j, "not_found_error"), str(j))
st, j = raw("/v1/messages", {"model": MODEL, "max_tokens": 4, "messages": USER}, headers={"x-api-key": None})
check("no API key: 401 in Anthropic's shape", st == 401 and is_anthropic_error(j, "authentication_error"), str(j))

print(f"anthropic_client: {failures} failure(s)")
sys.exit(1 if failures else 0)
