"""A small byte-level BPE tokenizer in Qwen2's layout (Qwen2 pre-tokenizer regex + byte-level alphabet,
<|endoftext|> <|im_start|> <|im_end|> as the last three ids), trained with `tokenizers` on a generated corpus,
so that llama.cpp's converter and tern's tokenizer both accept it. Deterministic for a given vocabulary size."""
from __future__ import annotations

import json
import random
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

# Qwen2's pre-tokenizer split (tokenizer.json of the Qwen2/Qwen3 family)
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                 "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                 "{% endif %}")

_WORDS = ("the a of to and in that it is was for on are with as be at by this have from or one had not but what "
          "all were when we there can an your which their said if do will each about how up out them then she "
          "many some so these would other into has more her two like him see time could no make than first been "
          "its who now people my made over did down only way find use may water long little very after words "
          "called just where most know river stone engine kernel tensor layer expert token window garden").split()


def corpus(seed: int = 1234, n_lines: int = 400) -> list[str]:
    """Pseudo-English lines with digits, punctuation and newlines: enough pairs for a few hundred merges."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n_lines):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 14))]
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), str(rng.randint(0, 9999)))
        line = " ".join(words)
        line = line[0].upper() + line[1:] + rng.choice([".", ".", "?", "!", ",", ":"])
        lines.append(line + ("\n" if rng.random() < 0.5 else ""))
    return lines


def train(n_tokenizer: int) -> Tokenizer:
    """256 byte tokens + (n_tokenizer - 259) merges + the 3 specials = n_tokenizer ids."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=n_tokenizer - len(SPECIALS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(corpus(), trainer)
    if tok.get_vocab_size() != n_tokenizer - len(SPECIALS):
        raise RuntimeError(f"BPE training gave {tok.get_vocab_size()} tokens, wanted {n_tokenizer - len(SPECIALS)}")
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    return tok


def save(tok: Tokenizer, out: Path, model_max_length: int) -> None:
    """tokenizer.json + a Qwen2Tokenizer tokenizer_config.json (what Qwen checkpoints ship)."""
    tok.save(str(out / "tokenizer.json"))
    n = tok.get_vocab_size()
    decoder = {str(n - len(SPECIALS) + i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                                            "single_word": False, "special": True} for i, s in enumerate(SPECIALS)}
    cfg = {"tokenizer_class": "Qwen2Tokenizer", "model_max_length": model_max_length, "add_prefix_space": False,
           "added_tokens_decoder": decoder, "bos_token": None, "eos_token": "<|im_end|>",
           "pad_token": "<|endoftext|>", "unk_token": None, "errors": "replace",
           "clean_up_tokenization_spaces": False, "split_special_tokens": False, "chat_template": CHAT_TEMPLATE}
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
