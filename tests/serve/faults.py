#!/usr/bin/env python3
"""Fault tests of `tern serve` (loopback, bundled model; run by tests/shell/serve_faults.sh):

  expert-read BASE_REF BASE_FAULT   an expert read that fails (--fault-expert-read on the second server, which
                                    streams experts) fails the request it served with a clear error, and the server
                                    goes on: /health is ok and later requests equal the fault-free server's answers.
  drain BASE PID                    SIGTERM while a request streams: /health and new requests get 503, the running
                                    request is answered in full, and the server exits (status checked by the script).
  drain-cut BASE PID GRACE          SIGTERM with a request that cannot finish within GRACE seconds: it is cut
                                    (cancelled) when the grace period ends and the server exits soon after.
"""
import http.client
import json
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request

failures = 0


def check(name, cond, detail=""):
    global failures
    if cond:
        print(f"ok: {name}")
    else:
        failures += 1
        print(f"FAIL: {name} {detail}")


def post(base, path, body, timeout=120):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read().decode()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode()), dict(e.headers)


def get(base, path):
    try:
        with urllib.request.urlopen(base + path, timeout=10) as r:
            return r.status, json.loads(r.read().decode())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode())


def stream(base, body, on_first=None):
    """Streams a completion; returns (text, finish_reason, error message or None, chunk count)."""
    host, port = base.replace("http://", "").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    conn.request("POST", "/v1/completions", json.dumps(dict(body, stream=True)), {"Content-Type": "application/json"})
    r = conn.getresponse()
    text, finish, error, n = "", None, None, 0
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        j = json.loads(line[6:])
        if "error" in j:
            error = j["error"]["message"]
            continue
        n += 1
        if n == 1 and on_first:
            on_first()
        for c in j["choices"]:
            text += c["text"]
            finish = c["finish_reason"] or finish
    conn.close()
    return text, finish, error, n


PROMPTS = ["In the beginning", "The river", "Once upon a time", "A small house", "The king said", "Rain fell"]


def completion(base, prompt, n=24):
    st, j, _ = post(base, "/v1/completions", {"prompt": prompt, "max_tokens": n, "temperature": 0})
    if st != 200:
        return None, f"HTTP {st}: {j}"
    if "error" in j:  # the status was sent before the request failed
        return None, j["error"]["message"]
    return j["choices"][0]["text"], None


def expert_read(ref, fault):
    want = {p: completion(ref, p)[0] for p in PROMPTS}
    failed_at = None
    for i in range(60):  # until the injected read failure hits one request (plain and streamed alternate)
        p = PROMPTS[i % len(PROMPTS)]
        if i % 2:
            text, finish, err, _ = stream(fault, {"prompt": p, "max_tokens": 24, "temperature": 0})
        else:
            text, err = completion(fault, p)
        if err is not None:
            failed_at = i
            check("the request served by the failed read fails with a clear error",
                  "injected by --fault-expert-read" in err and "reading expert" in err, err)
            break
        check(f"request {i} before the fault == fault-free server", text == want[p], f"{text!r} vs {want[p]!r}")
    check("the injected read failure was hit", failed_at is not None)
    st, h = get(fault, "/health")
    check("/health is ok after the failure", st == 200 and h.get("status") == "ok", str(h))
    for p in PROMPTS:  # every expert read after the fault succeeds
        text, err = completion(fault, p)
        check(f"after the failure: {p!r} == fault-free server", err is None and text == want[p], f"{text!r} {err}")
    text, finish, err, _ = stream(fault, {"prompt": PROMPTS[0], "max_tokens": 24, "temperature": 0})
    check("after the failure: streaming == fault-free server", err is None and text == want[PROMPTS[0]])


def drain(base, pid):
    result = {}
    # The bundled model writes thousands of tokens a second: a long answer keeps the request running while the
    # checks below are made (the server runs with -c 16384).
    body = {"prompt": "In the beginning", "max_tokens": 6000, "ignore_eos": True, "temperature": 0}

    def on_first():
        os.kill(pid, signal.SIGTERM)
        time.sleep(0.2)
        try:
            result["health"] = get(base, "/health")
            result["new"] = post(base, "/v1/completions", {"prompt": "Hi", "max_tokens": 4})
            result["messages"] = post(base, "/v1/messages", {"model": "tern-tiny-q35moe", "max_tokens": 4,
                                                             "messages": [{"role": "user", "content": "Hi"}]})
        except OSError as e:  # the server went away before the running request ended
            result["oserror"] = str(e)

    t0 = time.time()
    text, finish, err, n = stream(base, body, on_first)
    check("the running request is answered in full after SIGTERM", err is None and finish == "length" and n >= 1000,
          f"finish {finish} err {err} chunks {n}")
    check("the server listened until the running request ended", "oserror" not in result, result.get("oserror", ""))
    st, h = result.get("health", (None, None))
    check("/health says 503 shutting down while draining", st == 503 and h.get("status") == "shutting down", str(h))
    st, j, headers = result.get("new", (None, {}, {}))
    check("a new request gets 503 server_shutting_down", st == 503 and j.get("error", {}).get("code") ==
          "server_shutting_down", f"{st} {j}")
    st, j, _ = result.get("messages", (None, {}, {}))
    check("... and in Anthropic's shape on /v1/messages", st == 503 and j.get("error", {}).get("type") == "overloaded_error",
          f"{st} {j}")
    print(f"drain: the streamed request took {time.time() - t0:.1f}s")


def drain_cut(base, pid, grace):
    body = {"prompt": "In the beginning", "max_tokens": 15000, "ignore_eos": True, "temperature": 0}  # -c 16384
    t_sig = []

    def on_first():
        os.kill(pid, signal.SIGTERM)
        t_sig.append(time.time())

    text, finish, err, n = stream(base, body, on_first)
    if not t_sig:
        check("drain-cut: the request streamed", False, f"err {err}")
        return
    took = time.time() - t_sig[0]
    check(f"a request longer than the grace period is cut after ~{grace}s", grace - 0.3 <= took <= grace + 10
          and finish != "length", f"took {took:.1f}s finish {finish} chunks {n}")


mode = sys.argv[1]
if mode == "expert-read":
    expert_read(sys.argv[2], sys.argv[3])
elif mode == "drain":
    drain(sys.argv[2], int(sys.argv[3]))
elif mode == "drain-cut":
    drain_cut(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
else:
    sys.exit(f"unknown mode {mode}")
print(f"faults {mode}: {failures} failure(s)")
sys.exit(1 if failures else 0)
