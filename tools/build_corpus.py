#!/usr/bin/env python3
"""Assemble the English training corpus for tern's bundled tiny model from offline Debian packages.

Every source is a Debian package (installed with apt-get; nothing is fetched from elsewhere):

  source         package(s)                   license (see /usr/share/doc/<pkg>/copyright)
  kjv            bible-kjv-text + bible-kjv   King James Version text: public domain (1611); packaging GPL-2+
  fortunes       fortunes, fortunes-min       BSD-3-Clause (Regents of the University of California); quotations
  devil          dict-devil                   "The Devil's Dictionary", Ambrose Bierce (1911): public domain
  wordnet        wordnet-base                 WordNet 3.0 license (permissive, BSD-like; notice kept in card)

Outputs (in --out, default out/tiny/corpus):
  train.txt, eval.txt   plain-text documents separated by a line holding only <|endoftext|>
  chat_train.jsonl, chat_eval.jsonl   {"messages": [...]} question/answer pairs made from the same sources
  sources.json          per-source document and byte counts
About 3% of documents (chosen by a CRC32 hash of the document, so the split is stable) are held out for eval.

Usage: python tools/build_corpus.py [--out DIR] [--install]
"""
import argparse
import gzip
import json
import os
import random
import re
import subprocess
import sys
import zlib

PACKAGES = ["bible-kjv", "bible-kjv-text", "fortunes", "fortunes-min", "dict-devil", "wordnet-base"]
DOC_SEP = "<|endoftext|>"
EVAL_PERCENT = 3
# Fortune files that are pictures, non-English, or mostly code rather than prose.
FORTUNE_SKIP = {"ascii-art", "translate-me", "perl", "linux", "linuxcookie", "debian", "knghtbrd"}


def is_eval(text):
    return zlib.crc32(text.encode("utf-8")) % 100 < EVAL_PERCENT


def clean(text):
    text = text.replace("\t", "    ")
    text = re.sub(r"[ ]+\n", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


def kjv_documents():
    """One document per chapter: verses joined as flowing paragraphs, one verse per line."""
    raw = subprocess.run(["bible", "gen1:1-rev22:21"], capture_output=True, text=True, check=True).stdout
    docs, title, verses = [], None, []
    for line in raw.splitlines():
        if not line.strip():
            continue
        m = re.match(r"^\s+(\d+) (.*)$", line)
        if m:
            verses.append(m.group(2))
        elif line.startswith(" ") and verses:
            verses[-1] += " " + line.strip()  # continuation of a wrapped verse (indented)
        elif re.match(r"^[1-3]?\s?[A-Z][A-Za-z ]+ \d+$", line.strip()):
            if title and verses:
                docs.append(title + "\n\n" + "\n".join(verses))
            title, verses = line.strip(), []
        elif verses:
            verses[-1] += " " + line.strip()  # continuation line without indent
    if title and verses:
        docs.append(title + "\n\n" + "\n".join(verses))
    return docs


def fortune_documents():
    root = "/usr/share/games/fortunes"
    docs = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if "." in name or name in FORTUNE_SKIP or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for item in f.read().split("\n%\n"):
                item = clean(item.strip("%"))
                if 20 <= len(item) <= 4000 and "\ufffd" not in item:
                    docs.append(item)
    return docs


def devil_documents():
    """Entries start with an upper-case headword followed by a comma or period ("ABNORMAL, adj.")."""
    with gzip.open("/usr/share/dictd/devil.dict.dz", "rt", encoding="utf-8", errors="replace") as f:
        text = f.read()
    parts = re.split(r"\n\n(?=[A-Z][A-Z' -]+[,.])", text)
    docs = [clean(p) for p in parts]
    return [d for d in docs if len(d) >= 30 and not d.startswith("00-database")]


def wordnet_entries():
    """(lemma, part of speech, gloss, [examples]) for every synset in WordNet 3.0."""
    pos_names = {"noun": "noun", "verb": "verb", "adj": "adjective", "adv": "adverb"}
    out = []
    for pos, pos_name in pos_names.items():
        with open(f"/usr/share/wordnet/data.{pos}", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("  ") or " | " not in line:
                    continue  # license header lines start with two spaces
                head, gloss = line.split(" | ", 1)
                gloss = gloss.strip()
                fields = head.split()
                lemma = fields[4].replace("_", " ")
                lemma = re.sub(r"\(.*\)$", "", lemma)
                examples = re.findall(r'"([^"]+)"', gloss)
                definition = gloss.split(";")[0].split('"')[0].strip(" ;")
                out.append((lemma, pos_name, definition, [e.strip() for e in examples]))
    return out


def sentence(s):
    s = s.strip()
    if not s:
        return s
    s = s[0].upper() + s[1:]
    return s if s[-1] in ".!?" else s + "."


def wordnet_documents(entries, rng):
    """Example sentences grouped 12 to a paragraph: short, plain, everyday English."""
    sents = [sentence(e) for _, _, _, exs in entries for e in exs if len(e.split()) >= 4]
    rng.shuffle(sents)
    return [" ".join(sents[i:i + 12]) for i in range(0, len(sents), 12)]


def chat_examples(entries, kjv, fortunes, devil, rng):
    chats = []
    for lemma, pos, definition, exs in entries:
        if len(definition) < 10 or rng.random() > 0.12:
            continue
        answer = f'"{lemma}" is a {pos} that means {definition}.'
        if exs:
            answer += f' For example: "{sentence(exs[0])}"'
        q = rng.choice([f'What does "{lemma}" mean?', f"Define the word {lemma}.",
                        f'What is the meaning of "{lemma}"?'])
        chats.append([{"role": "user", "content": q}, {"role": "assistant", "content": answer}])
    for doc in kjv:
        verses = doc.split("\n\n", 1)[1].split("\n")
        i = rng.randrange(len(verses))
        chats.append([{"role": "user", "content": f"Quote a verse from {doc.split(chr(10))[0]}."},
                      {"role": "assistant", "content": verses[i]}])
    for doc in fortunes:
        if len(doc) < 400 and rng.random() < 0.5:
            q = rng.choice(["Tell me a saying.", "Give me a fortune.", "Say something wise.",
                            "Tell me something funny."])
            msgs = [{"role": "user", "content": q}, {"role": "assistant", "content": doc}]
            if rng.random() < 0.3:
                msgs.insert(0, {"role": "system", "content": "You are a helpful assistant."})
            chats.append(msgs)
    for doc in devil:
        m = re.match(r"^([A-Z][A-Z' -]+)[,.]", doc)
        if m:
            word = m.group(1).strip().lower()
            chats.append([{"role": "user", "content": f"What would a cynic say {word} means?"},
                          {"role": "assistant", "content": doc}])
    rng.shuffle(chats)
    return chats


def write_docs(path, docs):
    with open(path, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(d + "\n" + DOC_SEP + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="out/tiny/corpus")
    ap.add_argument("--install", action="store_true", help="apt-get install the source packages first")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    if args.install:
        subprocess.run(["apt-get", "install", "-y", "-qq", *PACKAGES], check=True)
    rng = random.Random(args.seed)
    os.makedirs(args.out, exist_ok=True)

    entries = wordnet_entries()
    sources = {"kjv": kjv_documents(), "fortunes": fortune_documents(), "devil": devil_documents()}
    sources["wordnet"] = wordnet_documents(entries, rng)
    stats, train, held = {}, [], []
    for name, docs in sources.items():
        tr = [d for d in docs if not is_eval(d)]
        ev = [d for d in docs if is_eval(d)]
        train += tr
        held += ev
        stats[name] = {"docs": len(docs), "bytes": sum(len(d.encode()) for d in docs), "eval_docs": len(ev)}
    rng.shuffle(train)
    write_docs(os.path.join(args.out, "train.txt"), train)
    write_docs(os.path.join(args.out, "eval.txt"), held)

    chats = chat_examples(entries, sources["kjv"], sources["fortunes"], sources["devil"], rng)
    ctr = [c for c in chats if not is_eval(json.dumps(c))]
    cev = [c for c in chats if is_eval(json.dumps(c))]
    for name, items in (("chat_train.jsonl", ctr), ("chat_eval.jsonl", cev)):
        with open(os.path.join(args.out, name), "w", encoding="utf-8") as f:
            for c in items:
                f.write(json.dumps({"messages": c}, ensure_ascii=False) + "\n")
    stats["chat"] = {"docs": len(chats), "bytes": sum(len(json.dumps(c)) for c in chats), "eval_docs": len(cev)}
    with open(os.path.join(args.out, "sources.json"), "w") as f:
        json.dump(stats, f, indent=2)
    json.dump(stats, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
