#!/usr/bin/env python3
"""Writes a copy of a GGUF with a draft vocabulary for speculative decoding: metadata key `tern.draft_vocab`, the
ids of the N tokens most frequent in a corpus (tokenized by the file's own tokenizer, through `tern tokenize`),
plus every control token. tern's MTP draft head then computes only those rows of the LM head (a draft step reads
N rows instead of n_vocab; tokens outside the set are never drafted, verification is unchanged). A metadata key
rather than a tensor: llama.cpp refuses files with tensors it does not know, and ignores unknown keys, so the file
still loads there.

usage: add_draft_vocab.py IN.gguf OUT.gguf --corpus FILE [--size 32768] [--tern build/tern]
       add_draft_vocab.py IN.gguf OUT.gguf --first N      (ids 0..N-1: for cost measurements on random models)
"""
import argparse
import collections
import os
import subprocess
import sys

import numpy as np
import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_bench_model import field_value  # noqa: E402

KEY = "tern.draft_vocab"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def corpus_counts(tern: str, model: str, path: str) -> collections.Counter:
    text = open(path, encoding="utf-8", errors="replace").read()
    counts = collections.Counter()
    chunk = 60000  # one argument stays under the kernel's 128 KiB limit
    i = 0
    while i < len(text):
        j = min(len(text), i + chunk)
        if j < len(text):  # cut at a newline (or space) so a word is not split
            k = max(text.rfind("\n", i, j), text.rfind(" ", i, j))
            j = k + 1 if k > i else j
        out = subprocess.run([tern, "tokenize", "-m", model, "-p", text[i:j]], check=True, capture_output=True,
                             text=True).stdout
        counts.update(int(t) for t in out.split())
        i = j
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inp")
    ap.add_argument("out")
    ap.add_argument("--corpus", help="text file whose token frequencies choose the set")
    ap.add_argument("--size", type=int, default=32768, help="tokens in the set (control tokens included)")
    ap.add_argument("--first", type=int, help="use ids 0..N-1 instead of a corpus")
    ap.add_argument("--tern", default=os.path.join(ROOT, "build", "tern"))
    a = ap.parse_args()
    r = gguf.GGUFReader(a.inp)
    if KEY in r.fields:
        sys.exit(f"error: {a.inp} already has {KEY}")
    n_vocab = len(r.fields["tokenizer.ggml.tokens"].data)
    if a.first is not None:
        if not 0 < a.first <= n_vocab:
            sys.exit(f"error: --first must be in 1..{n_vocab}")
        ids = list(range(a.first))
    else:
        if not a.corpus:
            sys.exit("error: give --corpus FILE (or --first N)")
        types = field_value(r.fields["tokenizer.ggml.token_type"])[0]
        control = [i for i, t in enumerate(types) if t == int(gguf.TokenType.CONTROL)]
        counts = corpus_counts(a.tern, a.inp, a.corpus)
        ranked = [t for t, _ in counts.most_common() if 0 <= t < n_vocab and t not in set(control)]
        ids = sorted(set(control) | set(ranked[: max(0, a.size - len(control))]))
        covered = sum(counts[t] for t in ids) / max(1, sum(counts.values()))
        print(f"{len(ids)} tokens ({len(control)} control) cover {100 * covered:.2f}% of the corpus's "
              f"{sum(counts.values())} tokens")
    arch = field_value(r.fields["general.architecture"])[0]
    w = gguf.GGUFWriter(a.out, arch)
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        val, t, sub = field_value(f)
        w.add_key_value(key, val, t, sub_type=sub)
    w.add_array(KEY, [int(i) for i in ids])
    for t in r.tensors:
        w.add_tensor_info(t.name, t.data.shape, t.data.dtype, int(t.n_bytes), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for t in r.tensors:
        w.write_tensor_data(np.asarray(t.data))
    w.close()
    print(f"wrote {a.out}: {KEY} = {len(ids)} of {n_vocab} tokens")


if __name__ == "__main__":
    main()
