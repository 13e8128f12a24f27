#!/usr/bin/env python3
"""Requests for tests/dist/mpi_serve.sh: the same mix sent to a one-process server and to one across ranks must get
the same answers (greedy, seeded sampling with penalties, log-probabilities, a JSON-constrained chat, a continued
chat that hits the prefix cache), four at a time so they share steps (continuous batching), and a streamed request
the client drops midway (the server cancels it: every rank must take that step the same way). Standard library
only. Prints one JSON line per answer, in request order.
usage: serve_client.py PORT"""
import concurrent.futures as cf
import http.client
import json
import sys

PORT = int(sys.argv[1])


def post(path, body):
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=300)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    if r.status != 200:
        raise SystemExit(f"{path}: HTTP {r.status}: {data[:300]!r}")
    return json.loads(data)


def dropped_stream():
    """Starts a long streamed completion and closes the connection after a few events."""
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=300)
    body = {"prompt": "Tell me everything", "max_tokens": 400, "temperature": 0, "stream": True, "ignore_eos": True}
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    for _ in range(3):
        r.fp.readline()
    c.sock.close()
    return json.dumps({"dropped": True})


REQS = [
    ("/v1/completions", {"prompt": "The old lighthouse keeper", "max_tokens": 40, "temperature": 0}),
    ("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0.9, "seed": 5}),
    ("/v1/completions", {"prompt": "A list of fruits:", "max_tokens": 30, "temperature": 0.7, "seed": 9, "logprobs": 3,
                         "presence_penalty": 0.5, "frequency_penalty": 0.3}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hello! Who are you?"}], "max_tokens": 40,
                              "temperature": 0}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Give me a JSON object about a cat."}],
                              "max_tokens": 60, "temperature": 0.5, "seed": 3, "response_format": {"type": "json_object"}}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hello! Who are you?"},
                                           {"role": "assistant", "content": "I am a model."},
                                           {"role": "user", "content": "Tell me more."}], "max_tokens": 40, "temperature": 0}),
]


def one(req):
    if req is None:
        return dropped_stream()
    d = post(*req)
    c = d["choices"][0]
    # How many prompt tokens came from the prefix cache depends on what the budget held: a rank's snapshots are its
    # share of the state, so the same budget holds more of them across ranks than in one process.
    d.get("usage", {}).pop("prompt_tokens_details", None)
    return json.dumps({"text": c.get("text") or c.get("message"), "logprobs": c.get("logprobs"),
                       "finish": c.get("finish_reason"), "usage": d.get("usage")}, sort_keys=True)


with cf.ThreadPoolExecutor(4) as ex:
    out = list(ex.map(one, REQS[:3] + [None] + REQS[3:] + REQS))
for line in out:
    print(line)
