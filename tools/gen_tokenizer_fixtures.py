#!/usr/bin/env python3
"""Generate tokenizer fixtures for tests/text/test_tokenizer.cpp (reference: HF `tokenizers`).

Outputs (tests/fixtures/text/):
  small_bpe/tokenizer.json, small_bpe/tokenizer_config.json  small byte-level BPE trained here with HF tokenizers,
      Qwen3.5 split regex, NFC, ChatML specials (special) and <think>/</think> (added, not special).
  small_glm4/tokenizer.json  the same vocab with the GLM-4 split regex, no normalizer, ignore_merges=true.
  qwen2_vocab.txt  compact export of llama.cpp's vocab-only models/ggml-vocab-qwen35.gguf (the real Qwen2 vocab,
      151,936 tokens, 151,387 merges) read with the `gguf` package: "tokens N" then "text<TAB>type" lines, then
      "merges M" then "left right" lines, then "key value" lines for the special ids.
  corpus.json  the corpus, NFC forms where they differ, and HF encodings for every vocab/pre-type/parse_special.

The real-vocab reference is HF tokenizers run on a tokenizer.json rebuilt from the GGUF's tokens + merges; as a
check of that rebuild, llama.cpp's own pairs (ggml-vocab-qwen35.gguf.inp/.out) are compared and mismatches printed.
Usage: tools/gen_tokenizer_fixtures.py --gguf-dir DIR  (DIR holds ggml-vocab-qwen35.gguf[.inp/.out], e.g.
vendor/llama.cpp/models from `pip download --no-deps --no-binary :all: llama-cpp-python`).
"""
import argparse
import json
import os
import random
import unicodedata

import gguf
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

QWEN35_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
            r"|\s*[\r\n]+|\s+(?!\S)|\s+")
GLM4_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED_PLAIN = ["<think>", "</think>"]


# ---------------------------------------------------------------------------------------------- corpus
SEEDS = [
    "Hello world", " Hello world", "Hello World!", "Hello, world!", "  leading spaces", "trailing spaces   ",
    "a   b", "a \t b", "tab\tseparated\tvalues", "line1\nline2", "line1\r\nline2\r\n", "\n\n\n", "\r\n\r\n",
    " \n \n ", "\t\n\t", "   \n", "x\u00a0y", "x\u3000y", "x\u2028y", "x\u0085y", "x\u200by", "x\u180ey",
    "x\u000by\u000cz", "\u001c\u001d\u001e\u001f", "end.\n", "...", "!!!???", "a.b.c", "(x)", "[y]", "{z}",
    "The quick brown fox jumps over the lazy dog.", "THE QUICK BROWN FOX", "Ünïcödé façade naïve café résumé",
    "Straße Maß größer", "Æsir Œuvre ØRE", "Dziękuję bardzo, łódź", "Čeština šťastný žluťoučký kůň",
    "Привет, мир! Как дела?", "Съешь же ещё этих мягких французских булок", "Ελληνικά: Γειά σου Κόσμε",
    "مرحبا بالعالم", "السَّلَامُ عَلَيْكُمْ", "שלום עולם", "בְּרֵאשִׁית בָּרָא", "नमस्ते दुनिया", "हिन्दी भाषा में लिखा",
    "สวัสดีชาวโลก", "ภาษาไทยไม่มีช่องว่าง", "你好，世界！", "我爱北京天安门。", "日本語のテキスト、カタカナ、ひらがな",
    "한국어 텍스트 안녕하세요", "ᄒᆞᆫ글 옛한글", "Tiếng Việt có dấu", "Vieết Nam", "ქართული ენა", "Հայերեն",
    "አማርኛ", "தமிழ் மொழி", "ಕನ್ನಡ", "বাংলা", "ગુજરાતી", "ਪੰਜਾਬੀ", "മലയാളം", "తెలుగు", "සිංහල", "ລາວ", "ខ្មែរ",
    "မြန်မာ", "ᠮᠣᠩᠭᠣᠯ", "ꦗꦮ", "𐌰𐌱𐌲 gothic", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math", "𝟘𝟙𝟚 math digits", "½ ¾ ⅞ Ⅷ ⅻ ① ⑳ ²³",
    "٠١٢٣٤٥٦٧٨٩", "०१२३४५", "१२३ रुपये", "๑๒๓", "一二三 四五六", "0123456789", "12345678901234567890",
    "3.14159265358979", "1,000,000", "-42", "+7 (495) 123-45-67", "2024-01-31T12:34:56Z", "0xDEADBEEF", "1e-9",
    "v1.2.3", "192.168.0.1", "$100.00", "€50", "¥1000", "100%", "#hashtag", "@mention", "a+b=c", "x^2 + y^2 = z^2",
    "😀", "😀😃😄", "👍🏽", "👍🏿 👋🏻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🧑🏽‍💻", "❤️", "🇺🇸🇯🇵", "🦙.cpp", " this is 🦙.cpp",
    "e\u0301", "a\u0300\u0301\u0302", "\u0301 leading mark", "n\u0303o", "A\u030a", "1\u0301", " \u0301", "\u0301",
    "ﬁ ligature", "Å Å Å", "한글", "\u1112\u1161\u11ab", "ｆｕｌｌｗｉｄｔｈ", "Ｈｅｌｌｏ１２３", "ℌ℮ℓℓø", "™ © ®",
    "I'm", "you're", "they've", "we'll", "he'd", "it's", "don't", "I'M", "YOU'RE", "THEY'VE", "WE'LL", "HE'D",
    "IT'S", "DON'T", "It'S", "yOu'Re", "'s", "'S", "'ll", "'LL", "'Ll", "'lL", "''s", "' s", "x'sy", "x'Sy",
    "l'amour", "rock'n'roll", "'twas", "o'clock", "the cat's toy", "THE CAT'S", "'ſ", "x'ſ", "'K", "ä'd",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>user\nHi<|im_end|>\n",
    "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start", "im_start|>", "<|im_", "<|im_start|", "|im_start|>", "<<|im_start|>>", "<|im_start|><|im_end|>",
    "<|IM_START|>", "< |im_start| >", "<|im_start|>\u0301", "x<|endoftext|>y", "<|endoftext|><|endoftext|>",
    "<think>", "</think>", "<think>\nreasoning\n</think>\n\nanswer", "<thin", "<think", "think>", "<<think>>",
    "<tool_call>", "<|fim_prefix|>", "[PAD151646]", "[PAD151646", "<|unknown_special|>",
    "int main() { return 0; }", "def f(x):\n    return x ** 2\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
    "if x != y && z >= 3:", "std::vector<int> v{1, 2, 3};", "SELECT * FROM users WHERE id = 1;",
    "<div class=\"a\">text</div>", "{\"key\": \"value\", \"n\": [1, 2.5, null]}", "    indented\n        more",
    "https://example.com/path?query=1&b=two#frag", "http://localhost:8080/", "mailto:user@example.org",
    "C:\\Windows\\System32", "/usr/local/bin/python3", "~/.config/tern/config.toml", "$(echo ${HOME})",
    "```python\nprint('hi')\n```", "// comment\n/* block */", "#include <stdio.h>", "a->b->c", "x => x * 2",
    "camelCaseIdentifier", "snake_case_identifier", "SCREAMING_SNAKE", "kebab-case-id", "__dunder__",
    "   ", "\t", "\t\t\t", "\n", " ", "  ", "", "a", "Z", "?", "'", "\"", "\\", "\u00ad", "soft\u00adhyphen",
    "zero\u200dwidth\u200cjoiners", "\ufeffBOM", "RTL \u202eoverride", "\ufffd replacement", "\u0000nul", "bell\u0007",
]

WORDS = {
    "latin": "the of and to in is that for it as was with be by on not he this are or his from at which".split(),
    "latin_acc": "café naïve façade coöperate élève Ångström über Straße señor ação crème brûlée jalapeño".split(),
    "cyrillic": "и в не на я быть он с что а по это она этот к но они мы как из у который то за свой".split(),
    "greek": "και το να του η της με που την από δεν στο για τα είναι θα".split(),
    "arabic": "في من على إلى أن هذا التي الذي مع كان عن كل".split(),
    "hebrew": "של את על לא זה עם הוא גם כי אני".split(),
    "devanagari": "के है में की और से को एक पर यह भी".split(),
    "thai": "ที่ และ ใน การ เป็น ของ มี ได้ ไม่ ว่า".split(),
    "cjk": "的 一 是 不 了 人 我 在 有 他 这 中 大 来 上 国 个 到 说 们 日本 東京 漢字".split(),
    "hangul": "이 그 저 것 수 등 들 및 안녕 하세요 한국 사람".split(),
    "emoji": "😀 😂 🥰 👍 👍🏻 👍🏾 👨‍💻 👩‍🔬 👨‍👩‍👧 🏳️‍🌈 ❤️ 🔥 ✨ 🎉 🇩🇪 🇫🇷".split(),
    "code": "def return if else for while {} () [] ; :: -> => == != <= >= += && || // /* */ #include".split(),
    "digits": "0 1 7 42 123 2024 99999 3.14 1e10 0x1F 1,234 ½ ² ٣ ७".split(),
    "contractions": "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D I'm can't won't It's".split(),
    "specials": ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<|im_", "|>", "<|"],
}
SEPARATORS = [" ", " ", " ", "", "  ", "\n", "\t", "\r\n", ", ", ". ", "\n\n", "   "]


def build_corpus(llama_inputs):
    rng = random.Random(20240531)
    corpus = list(SEEDS) + list(llama_inputs)
    for s in list(SEEDS):  # case and decomposition variants
        corpus.append(s.upper())
        nfd = unicodedata.normalize("NFD", s)
        if nfd != s:
            corpus.append(nfd)
    cats = list(WORDS)
    for n in range(1200):  # random mixtures, 1 to 3 categories each
        picks = rng.sample(cats, rng.randint(1, 3))
        parts = []
        for _ in range(rng.randint(1, 14)):
            parts.append(rng.choice(WORDS[rng.choice(picks)]))
            parts.append(rng.choice(SEPARATORS))
        s = "".join(parts)
        if rng.random() < 0.2:
            s = unicodedata.normalize("NFD", s)
        corpus.append(s)
    for n in range(150):  # digit runs and whitespace runs
        corpus.append("".join(rng.choice("0123456789") for _ in range(rng.randint(1, 40))))
        corpus.append("x" + "".join(rng.choice(" \t\n\r") for _ in range(rng.randint(1, 12))) + "y")
        corpus.append("".join(chr(rng.randint(0x20, 0x7e)) for _ in range(rng.randint(1, 30))))
    for n in range(200):  # random code points from many blocks (letters, marks, symbols, supplementary planes)
        lo, hi = rng.choice([(0x20, 0x24f), (0x300, 0x36f), (0x370, 0x52f), (0x590, 0x6ff), (0x900, 0xdff),
                             (0xe00, 0xeff), (0x1100, 0x11ff), (0x2000, 0x2bff), (0x3000, 0x30ff),
                             (0x4e00, 0x4fff), (0xac00, 0xad00), (0xff00, 0xffef), (0x1f300, 0x1faff)])
        chars = [chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 12))]
        s = "".join(c for c in chars if unicodedata.category(c) not in ("Cs", "Cn", "Co"))
        corpus.append(s)
    corpus.append("a" * 500)
    corpus.append(" " * 300)
    corpus.append("\n" * 100 + "x")
    corpus.append("9" * 300)
    corpus.append("ab" * 400)
    corpus.append("😀" * 100)
    # HF's NFC (Rust unicode-normalization) and Python's/utf8proc's can disagree on characters whose Unicode data
    # changed between versions (e.g. U+0EBA LAO SIGN PALI VIRAMA, ccc 9); such strings test Unicode tables, not the
    # tokenizer, so they are dropped (and listed).
    hf_nfc = normalizers.NFC()
    seen, out = set(), []
    for s in corpus:
        if hf_nfc.normalize_str(s) != unicodedata.normalize("NFC", s):
            print(f"dropped (HF and Python NFC disagree): {s!r}")
            continue
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


# ---------------------------------------------------------------------------------------------- tokenizers
def pre_tokenizer(regex):
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])


def train_small(corpus):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizer(QWEN35_RE)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=SPECIALS)
    tok.train_from_iterator(corpus * 3, trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED_PLAIN])
    return tok


def small_config():
    return {"add_bos_token": False, "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
            "model_max_length": 32768}


def glm4_variant(small_json):
    j = json.loads(small_json)
    j["normalizer"] = None
    j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = GLM4_RE
    j["model"]["ignore_merges"] = True
    return Tokenizer.from_str(json.dumps(j)), j


def read_gguf_vocab(path):
    f = gguf.GGUFReader(path).fields
    get = lambda k: f[k].contents() if k in f else None
    return {"tokens": get("tokenizer.ggml.tokens"), "types": get("tokenizer.ggml.token_type"),
            "merges": get("tokenizer.ggml.merges"), "pre": get("tokenizer.ggml.pre"),
            "eos": get("tokenizer.ggml.eos_token_id"), "pad": get("tokenizer.ggml.padding_token_id"),
            "bos": get("tokenizer.ggml.bos_token_id")}


def hf_from_gguf(v, regex):
    """Rebuild an HF tokenizer from GGUF tokens+merges: CONTROL -> special added token, USER_DEFINED -> added."""
    n_normal = sum(1 for t in v["types"] if t == 1)
    vocab = {t: i for i, t in enumerate(v["tokens"]) if v["types"][i] == 1}
    assert all(v["types"][i] == 1 for i in range(n_normal)), "normal tokens are expected to come first"
    merges = [tuple(m.split(" ")) for m in v["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizer(regex)
    tok.decoder = decoders.ByteLevel()
    added = []
    for i in range(n_normal, len(v["tokens"])):
        assert v["types"][i] in (3, 4), (i, v["types"][i])
        added.append(AddedToken(v["tokens"][i], special=v["types"][i] == 3, normalized=False))
    tok.add_tokens(added)
    for i in range(n_normal, len(v["tokens"])):
        assert tok.token_to_id(v["tokens"][i]) == i, i
    return tok


def encode_all(tok, corpus, parse_special):
    tok.encode_special_tokens = not parse_special
    out = [tok.encode(s, add_special_tokens=False).ids for s in corpus]
    tok.encode_special_tokens = False
    return out


def ids_str(ids):
    return " ".join(map(str, ids))


def write_vocab_export(v, path):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("tern-vocab-export 1\n")
        f.write(f"pre {v['pre']}\n")
        for key in ("bos", "eos", "pad"):
            if v[key] is not None:
                f.write(f"{key} {v[key]}\n")
        f.write(f"tokens {len(v['tokens'])}\n")
        for t, ty in zip(v["tokens"], v["types"]):
            assert "\n" not in t and "\t" not in t and "\r" not in t
            f.write(f"{t}\t{ty}\n")
        f.write(f"merges {len(v['merges'])}\n")
        for m in v["merges"]:
            assert "\n" not in m and "\r" not in m
            f.write(m + "\n")


def read_llama_pairs(gguf_dir, name):
    inp = open(os.path.join(gguf_dir, name + ".inp"), encoding="utf-8").read().split("\n__ggml_vocab_test__\n")
    out = open(os.path.join(gguf_dir, name + ".out"), encoding="utf-8").read().split("\n")
    if inp and inp[-1] == "":
        inp = inp[:-1]
    return inp, [[int(x) for x in line.split()] for line in out[:len(inp)]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf-dir", required=True)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "text"))
    a = ap.parse_args()
    os.makedirs(os.path.join(a.out, "small_bpe"), exist_ok=True)
    os.makedirs(os.path.join(a.out, "small_glm4"), exist_ok=True)

    llama_inp, llama_out = read_llama_pairs(a.gguf_dir, "ggml-vocab-qwen35.gguf")
    corpus = build_corpus(llama_inp)
    print(f"corpus: {len(corpus)} strings")

    small = train_small(corpus)
    small_json = small.to_str(pretty=False)
    with open(os.path.join(a.out, "small_bpe", "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(small_json)
    with open(os.path.join(a.out, "small_bpe", "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(small_config(), f, indent=1)
    glm4, glm4_json = glm4_variant(small_json)
    with open(os.path.join(a.out, "small_glm4", "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(glm4_json, f, ensure_ascii=False, separators=(",", ":"))

    v = read_gguf_vocab(os.path.join(a.gguf_dir, "ggml-vocab-qwen35.gguf"))
    write_vocab_export(v, os.path.join(a.out, "qwen2_vocab.txt"))
    q35 = hf_from_gguf(v, QWEN35_RE)
    q2 = hf_from_gguf(v, QWEN2_RE)

    # Cross-check the rebuilt tokenizer against llama.cpp's own test pairs (llama.cpp applies no NFC).
    bad = 0
    for s, want in zip(llama_inp, llama_out):
        got = q35.encode(s, add_special_tokens=False).ids
        if got != want:
            bad += 1
            print(f"llama.cpp pair differs (NFC changes it: {unicodedata.normalize('NFC', s) != s}): {s[:40]!r}")
    print(f"llama.cpp pairs: {len(llama_inp) - bad}/{len(llama_inp)} equal")

    results = {}
    for name, tok in (("small_bpe", small), ("small_glm4", glm4), ("qwen35", q35), ("qwen2", q2)):
        on = encode_all(tok, corpus, True)
        off = encode_all(tok, corpus, False)
        results[name] = {"special": [ids_str(x) for x in on],
                         "nospecial_diff": {str(i): ids_str(off[i]) for i in range(len(corpus)) if off[i] != on[i]}}
        print(f"{name}: {sum(map(len, on))} ids, {len(results[name]['nospecial_diff'])} differ without specials")
    nfc = {str(i): unicodedata.normalize("NFC", s) for i, s in enumerate(corpus)
           if unicodedata.normalize("NFC", s) != s}
    doc = {"about": "generated by tools/gen_tokenizer_fixtures.py; ids from HF tokenizers "
                    + __import__("tokenizers").__version__ + "; nospecial_diff lists only strings whose ids differ "
                    "when special tokens are not parsed (encode_special_tokens=True)",
           "corpus": corpus, "nfc": nfc, "results": results}
    with open(os.path.join(a.out, "corpus.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))


if __name__ == "__main__":
    main()
