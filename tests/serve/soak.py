#!/usr/bin/env python3
"""Soak test of a running `tern serve` (loopback; run by tests/shell/serve_soak.sh): CLIENTS threads send requests
for SECONDS, mixing greedy requests whose answers are checked (chat, completions and Anthropic messages, plain and
streamed, some read slowly) with hostile ones: streams cancelled after a few chunks, connections dropped
mid-request or mid-stream, bodies announced over the 32 MiB limit, invalid JSON. Every checked answer must equal
the answer to the same request sent alone before the load (zero lost or mixed-up answers), every hostile request
must get its error (or none, when the client leaves), and afterwards the server's RSS must be flat after warm-up and
its open file descriptors back where they started.

usage: soak.py BASE_URL SERVER_PID MODEL_ID CLIENTS SECONDS [SEED]
"""
import http.client
import json
import random
import socket
import sys
import threading
import time

BASE, PID, MODEL = sys.argv[1], int(sys.argv[2]), sys.argv[3]
CLIENTS, SECONDS = int(sys.argv[4]), float(sys.argv[5])
SEED = int(sys.argv[6]) if len(sys.argv) > 6 else 1
HOST, PORT = BASE.replace("http://", "").split(":")
PORT = int(PORT)


def rss_bytes():
    with open(f"/proc/{PID}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def open_fds():
    import os
    return len(os.listdir(f"/proc/{PID}/fd"))


# --- the requests whose answers are checked: (path, body) and how to read the answer's text
PROMPTS = ["In the beginning", "The river", "Once upon a time there was", "A small house by the sea", "Tell me a fortune."]


def requests_for(prompt, n):
    chat = {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": n, "temperature": 0,
            "chat_template_kwargs": {"enable_thinking": False}}
    comp = {"model": MODEL, "prompt": prompt, "max_tokens": n, "temperature": 0}
    msg = {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": n, "temperature": 0,
           "thinking": {"type": "disabled"}}
    return [("/v1/chat/completions", chat), ("/v1/completions", comp), ("/v1/messages", msg)]


CHECKED = [r for i, p in enumerate(PROMPTS) for r in requests_for(p, 8 + 12 * (i % 3))]


def answer_text(path, j):
    if path == "/v1/messages":
        return "".join(b.get("text", "") for b in j["content"]) + "|" + j["stop_reason"]
    c = j["choices"][0]
    return (c["message"]["content"] if "message" in c else c["text"]) + "|" + c["finish_reason"]


def stream_text(path, events):
    """The answer text of a streamed request from its parsed data payloads, in answer_text's form."""
    if path == "/v1/messages":
        text = "".join(e["delta"].get("text", "") for e in events if e.get("type") == "content_block_delta")
        stop = [e["delta"]["stop_reason"] for e in events if e.get("type") == "message_delta"]
        return text + "|" + (stop[-1] if stop else "?")
    text, finish = "", "?"
    for e in events:
        for c in e.get("choices", []):
            text += (c.get("delta", {}).get("content") or "") if "delta" in c else c.get("text", "")
            finish = c.get("finish_reason") or finish
    return text + "|" + finish


def send(path, body, stream=False, slow=0.0, stop_after=None, timeout=300):
    """One request on its own connection: (status, text or error body). stop_after: close after that many chunks."""
    conn = http.client.HTTPConnection(HOST, PORT, timeout=timeout)
    try:
        conn.request("POST", path, json.dumps(dict(body, stream=stream)), {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200 or not stream:
            data = r.read().decode()
            j = json.loads(data)
            if r.status != 200 or "error" in j:
                return r.status, j
            return 200, answer_text(path, j)
        events = []
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            events.append(json.loads(line[6:]))
            if "error" in events[-1] or events[-1].get("type") == "error":
                return 500, events[-1]
            if stop_after is not None and len(events) >= stop_after:
                return 0, None  # the client leaves
            if slow:
                time.sleep(slow)
        return 200, stream_text(path, events)
    finally:
        conn.close()


def raw_socket(payload, read=True):
    """Sends raw bytes, then reads the status line (or closes at once when read is False)."""
    s = socket.create_connection((HOST, PORT), timeout=60)
    try:
        s.sendall(payload)
        if not read:
            return None
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        return int(data.split(b" ")[1]) if data.startswith(b"HTTP/1.1 ") else None
    finally:
        s.close()


def post_head(path, length):
    return (f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


lock = threading.Lock()
counts, problems = {}, []


def note(kind, problem=None):
    with lock:
        counts[kind] = counts.get(kind, 0) + 1
        if problem:
            problems.append(f"{kind}: {problem}")


def client(k, want, deadline):
    rng = random.Random(SEED * 1000 + k)
    while time.time() < deadline:
        x = rng.random()
        i = rng.randrange(len(CHECKED))
        path, body = CHECKED[i]
        try:
            if x < 0.45:  # checked, plain or streamed
                stream = rng.random() < 0.5
                st, got = send(path, body, stream=stream)
                kind = "checked-stream" if stream else "checked"
                note(kind, None if st == 200 and got == want[i] else f"{path} {body.get('prompt', '')!r}: {st} {got!r} "
                     f"!= {want[i]!r}")
            elif x < 0.55:  # slow reader
                st, got = send(path, body, stream=True, slow=0.02)
                note("slow-reader", None if st == 200 and got == want[i] else f"{st} {got!r} != {want[i]!r}")
            elif x < 0.70:  # cancel after a few chunks
                st, _ = send(path, dict(body, max_tokens=400, ignore_eos=True), stream=True,
                             stop_after=rng.randrange(1, 4))
                note("cancel", None if st == 0 else f"status {st}")
            elif x < 0.78:  # drop the connection mid-request (half a body) or right after sending it
                data = json.dumps(body).encode()
                if rng.random() < 0.5:
                    raw_socket(post_head(path, len(data)) + data[: len(data) // 2], read=False)
                    note("drop-mid-body")
                else:
                    raw_socket(post_head(path, len(data)) + data, read=False)
                    note("drop-after-send")
            elif x < 0.86:  # a body announced over the limit
                st = raw_socket(post_head(path, 40 << 20) + b'{"x": 1')
                note("oversize", None if st == 413 else f"status {st}")
            else:  # invalid JSON
                conn = http.client.HTTPConnection(HOST, PORT, timeout=60)
                conn.request("POST", path, b'{"messages": [', {"Content-Type": "application/json"})
                r = conn.getresponse()
                r.read()
                conn.close()
                note("invalid-json", None if r.status == 400 else f"status {r.status}")
        except Exception as e:  # noqa: BLE001
            note("exception", f"{type(e).__name__}: {e}")


def main():
    fd0 = open_fds()
    want = []
    for path, body in CHECKED:  # each alone, before the load
        st, got = send(path, body)
        if st != 200:
            sys.exit(f"FAIL: the reference request {path} failed: {st} {got}")
        want.append(got)
    print(f"soak: {len(CHECKED)} reference answers; {CLIENTS} clients for {SECONDS:.0f}s; RSS {rss_bytes() >> 20} MiB, "
          f"{fd0} fds")
    t0 = time.time()
    deadline = t0 + SECONDS
    threads = [threading.Thread(target=client, args=(k, want, deadline)) for k in range(CLIENTS)]
    for t in threads:
        t.start()
    samples = []
    while any(t.is_alive() for t in threads):
        time.sleep(1)
        samples.append((time.time() - t0, rss_bytes(), open_fds()))
    for t in threads:
        t.join()
    time.sleep(2)  # connections of cancelled streams are noticed within a second
    fd1, rss_end = open_fds(), rss_bytes()
    warm = [r for (t, r, _) in samples if t >= 0.25 * SECONDS]
    rss_warm = warm[0] if warm else rss_end
    peak_fds = max((f for (_, _, f) in samples), default=fd1)
    total = sum(counts.values())
    print(f"soak: {total} requests: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print(f"soak: RSS after warm-up {rss_warm / 2**20:.1f} MiB, peak {max(r for (_, r, _) in samples) / 2**20:.1f} MiB, "
          f"end {rss_end / 2**20:.1f} MiB; fds {fd0} before, {peak_fds} at most, {fd1} after")
    failures = 0

    def check(name, cond, detail=""):
        nonlocal failures
        print(("ok: " if cond else "FAIL: ") + name + ("" if cond else " " + detail))
        failures += 0 if cond else 1

    check("zero lost or mixed-up answers, every hostile request refused as it should be", not problems,
          f"{len(problems)} problems, first: {problems[:5]}")
    check("every kind of request was made", all(counts.get(k, 0) > 0 for k in
          ["checked", "checked-stream", "slow-reader", "cancel", "oversize", "invalid-json"]), str(counts))
    # Flat: the end within 10% + 32 MiB of the figure after warm-up (allocator slack; the prefix cache is full by
    # then: the checked requests are a fixed set).
    check("RSS flat after warm-up", rss_end <= rss_warm * 1.10 + (32 << 20),
          f"{rss_warm >> 20} -> {rss_end >> 20} MiB")
    check("no file-descriptor growth", fd1 <= fd0 + 2, f"{fd0} -> {fd1}")
    return failures


if __name__ == "__main__":
    sys.exit(1 if main() else 0)
