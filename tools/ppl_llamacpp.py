#!/usr/bin/env python3
"""llama.cpp's perplexity on a text file, through llama-cpp-python, computed exactly as `tern perplexity` and
llama.cpp's perplexity tool do: tokenize the whole file once (BOS first when the vocabulary asks for it), cut it
into chunks of n_ctx tokens, evaluate each chunk from an empty state (first token replaced by BOS when the
vocabulary adds one), and score the tokens of the second half of each chunk.

It also checks that llama.cpp and tern tokenize the file identically (tern's ids from `tern tokenize`), since a
perplexity comparison over different token streams would mean nothing.

usage: python tools/ppl_llamacpp.py -m MODEL.gguf -f TEXT [-c 256] [--tern build/tern] [-t 2] [--json OUT]
                                   [--llama-perplexity PATH]

--llama-perplexity PATH runs llama.cpp's own perplexity tool (bench/build_llamacpp.sh builds it) instead of the
Python bindings, for machines without llama-cpp-python: same chunking and scoring; the token count it reports
(chunks x n_ctx) is checked against `tern tokenize`'s, and the mean NLL is log(PPL).

--json OUT merges the result into OUT under "llamacpp" (with the model's sha256, the text file and the token
count), the fixture tests/shell/perplexity.sh compares `tern perplexity` against; the "transformers" entry of the
same file comes from `tools/train_tiny_model.py eval --ppl-json OUT`.
"""
import argparse
import hashlib
import json
import math
import os
import subprocess
import sys

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-f", "--file", required=True)
    ap.add_argument("-c", "--ctx", type=int, default=512)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--tern", default="build/tern", help="tern binary, for the tokenization check ('' to skip)")
    ap.add_argument("--json", default="", help="merge the result into this JSON fixture")
    ap.add_argument("--llama-perplexity", default="", help="llama.cpp's perplexity binary instead of the bindings")
    a = ap.parse_args()
    if a.llama_perplexity:
        return run_tool(a)

    from llama_cpp import Llama
    import llama_cpp

    text = open(a.file, encoding="utf-8").read()
    llm = Llama(model_path=a.model, n_ctx=a.ctx, n_batch=a.ctx, n_ubatch=a.ctx, logits_all=True,
                n_threads=a.threads, verbose=False)
    add_bos = bool(llm._model.add_bos_token())
    bos = llm.token_bos()
    tokens = llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=False)
    if a.tern:
        out = subprocess.run([a.tern, "tokenize", "-m", a.model, "-p", text], capture_output=True, text=True,
                             check=True).stdout.split()
        tern_ids = [int(x) for x in out]
        if add_bos:
            tern_ids = [bos] + tern_ids
        if tern_ids != list(tokens):
            first = next((i for i, (x, y) in enumerate(zip(tern_ids, tokens)) if x != y), min(len(tern_ids), len(tokens)))
            print(f"tokenization differs from tern's at token {first} ({len(tern_ids)} vs {len(tokens)} tokens)")
            return 1
        print(f"tokenization: identical to tern's ({len(tokens)} tokens)")
    n_ctx = a.ctx
    n_chunk = len(tokens) // n_ctx
    if n_chunk < 2:
        print(f"{a.file}: {len(tokens)} tokens; need at least 2 * n_ctx")
        return 1
    first = n_ctx // 2
    nll = nll2 = 0.0
    count = 0
    for ch in range(n_chunk):
        chunk = list(tokens[ch * n_ctx:(ch + 1) * n_ctx])
        if add_bos:
            chunk[0] = bos
        llm.reset()
        llm.eval(chunk)
        logits = np.asarray(llm.scores[:n_ctx], dtype=np.float64)
        for j in range(first, n_ctx - 1):
            row = logits[j]
            mx = row.max()
            lp = row[chunk[j + 1]] - mx - math.log(np.exp(row - mx).sum())
            nll -= lp
            nll2 += lp * lp
            count += 1
        print(f"[{ch + 1}]{math.exp(nll / count):.4f},", end="", flush=True)
    mean = nll / count
    var = nll2 / count - mean * mean
    ppl = math.exp(mean)
    err = ppl * math.sqrt(max(var, 0.0) / max(count - 1, 1))
    print(f"\nFinal estimate: PPL = {ppl:.4f} +/- {err:.5f}  (llama.cpp {llama_cpp.__version__}, {n_chunk} chunks of "
          f"{n_ctx}, mean NLL {mean:.4f} nats/token)")
    if a.json:
        merge_fixture(a.json, a.model, a.file, n_ctx, len(tokens), "llamacpp",
                      {"ppl": ppl, "mean_nll": mean, "n_scored": count, "version": llama_cpp.__version__})
    return 0


def run_tool(a):
    """The same figure from llama.cpp's llama-perplexity binary (no BOS for vocabularies that do not add one)."""
    import re
    p = subprocess.run([a.llama_perplexity, "-m", a.model, "-f", a.file, "-c", str(a.ctx), "-b", str(a.ctx),
                        "-t", str(a.threads)], capture_output=True, text=True)
    out = p.stdout + p.stderr
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", out)
    c = re.search(r"calculating perplexity over (\d+) chunks, n_ctx=(\d+)", out)
    if p.returncode != 0 or not m or not c:
        print(out[-3000:])
        print("llama-perplexity failed or printed no final estimate")
        return 1
    n_chunk, n_ctx = int(c.group(1)), int(c.group(2))
    if n_ctx != a.ctx:
        print(f"llama-perplexity used n_ctx {n_ctx}, asked {a.ctx}")
        return 1
    n_tokens = None
    if a.tern:
        text = open(a.file, encoding="utf-8").read()
        n_tokens = len(subprocess.run([a.tern, "tokenize", "-m", a.model, "-p", text], capture_output=True,
                                      text=True, check=True).stdout.split())
        if n_tokens // n_ctx != n_chunk:
            print(f"tern tokenizes into {n_tokens} tokens ({n_tokens // n_ctx} chunks); llama.cpp made {n_chunk}")
            return 1
    ppl = float(m.group(1))
    count = n_chunk * (n_ctx - 1 - n_ctx // 2)
    print(f"Final estimate: PPL = {ppl:.4f} +/- {m.group(2)}  (llama.cpp's llama-perplexity, {n_chunk} chunks of "
          f"{n_ctx}, mean NLL {math.log(ppl):.4f} nats/token)")
    if a.json:
        if n_tokens is None:
            print("--json needs the token count from --tern")
            return 1
        merge_fixture(a.json, a.model, a.file, n_ctx, n_tokens, "llamacpp",
                      {"ppl": ppl, "mean_nll": math.log(ppl), "n_scored": count,
                       "version": "0.3.36 (llama-perplexity, vendor/llama.cpp)"})
    return 0


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def merge_fixture(out, model, text, n_ctx, n_tokens, key, result):
    """Adds result under key; the model hash, text and chunking must match what the file already holds."""
    fix = json.load(open(out)) if os.path.exists(out) else {}
    head = {"model": os.path.basename(model), "model_sha256": sha256(model), "text": os.path.basename(text),
            "n_ctx": n_ctx, "n_tokens": n_tokens}
    if any(fix.get(k) != v for k, v in head.items()):
        fix = {}  # recorded for another model, text or chunking: start over
    fix.update(head)
    fix[key] = result
    with open(out, "w") as f:
        json.dump(fix, f, indent=2)
        f.write("\n")
    print(f"{key} -> {out}")


if __name__ == "__main__":
    sys.exit(main())
