#!/usr/bin/env python3
"""Record llama.cpp's speculative-decoding acceptance with the MTP block of a GGUF (default: the bundled model) as
a test fixture (default tests/fixtures/spec/tern-tiny-acceptance.json), for tests/shell/spec_acceptance.sh.

llama.cpp's own llama-server (bench/build_llamacpp.sh) runs with `--spec-type draft-mtp --spec-draft-n-max 1
--spec-draft-p-min 0`: one drafted token every step, greedy (temperature 0). Each prompt (the held-out lines
bench/spec_bundled.py uses) is completed to --n tokens (or an end token); the fixture keeps, per prompt, the text,
the tokens generated and llama.cpp's draft_n / draft_n_accepted, plus the model's sha256, so a retrained model cannot
pass against stale figures.

usage: python3 tools/record_spec_acceptance.py [-m MODEL] [--prompts 16] [-n 128] [--json OUT]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from e2e import find_llama  # noqa: E402
from spec_bundled import LlamaServer, prompts  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default=os.path.join(ROOT, "models", "tern-tiny-q35moe.gguf"))
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--prompt-words", type=int, default=8)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("--llama-bin", default="")
    ap.add_argument("--json", default=os.path.join(ROOT, "tests", "fixtures", "spec", "tern-tiny-acceptance.json"))
    args = ap.parse_args()
    args.out = os.path.join(ROOT, "out", "spec-record")
    os.makedirs(args.out, exist_ok=True)
    args.llama_server = find_llama(args, ("llama-server",))["llama-server"]
    ps = prompts(os.path.join(ROOT, "models", "tern-tiny-heldout.txt"), args.prompts, args.prompt_words)
    flags = ["--spec-type", "draft-mtp", "--spec-draft-n-max", "1", "--spec-draft-p-min", "0"]
    srv = LlamaServer(args, "record", flags)
    rows = []
    try:
        for p in ps:
            r = srv.complete(p, args.n, 0.0, 0)
            rows.append({"prompt": p, "text": r["text"], "tokens": r["tokens"], "drafted": r["drafted"],
                         "accepted": r["accepted"]})
    finally:
        srv.close()
    drafted = sum(r["drafted"] for r in rows)
    accepted = sum(r["accepted"] for r in rows)
    with open(args.model, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    out = {"model": os.path.relpath(args.model, ROOT), "model_sha256": sha, "n_predict": args.n,
           "temperature": 0, "llama_server_flags": flags, "llama_cpp": "llama-cpp-python 0.3.36 vendor/llama.cpp",
           "drafted": drafted, "accepted": accepted, "acceptance": accepted / drafted if drafted else None,
           "prompts": rows}
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)
    print(f"llama.cpp draft-mtp k=1: {accepted}/{drafted} accepted ({100 * accepted / max(1, drafted):.1f}%) over "
          f"{len(rows)} prompts -> {os.path.relpath(args.json, ROOT)}")


if __name__ == "__main__":
    main()
