"""Random-weight transformers Qwen3.5-MoE models (transformers' own Qwen3_5MoeForCausalLM, fp32, eager attention
and the eager per-expert loop: the plainest paths, and grouped_mm refuses 1-wide experts)
and their fp32 references: teacher-forced logits and cached greedy decoding.

Every weight is drawn from one seeded generator in parameter-name order and rounded to an f16-representable
value, so the F32 and F16 GGUFs llama.cpp writes hold exactly the reference weights."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from transformers import (Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig, Qwen3_5TextConfig,
                          Qwen3NextConfig, Qwen3NextForCausalLM)

from . import tokenizer as bpe
from .presets import Preset


# transformers class name -> (model class, config class, has routed experts)
ARCHS = {
    "Qwen3_5MoeForCausalLM": (Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig, True),
    "Qwen3NextForCausalLM": (Qwen3NextForCausalLM, Qwen3NextConfig, True),
    "Qwen3_5ForCausalLM": (Qwen3_5ForCausalLM, Qwen3_5TextConfig, False),
}


def make_config(p: Preset):
    n = p.n_tokenizer
    cfg = ARCHS[p.hf_arch][1](**p.hf_config, bos_token_id=None, eos_token_id=n - 1, pad_token_id=n - 3,
                              dtype="float32")
    cfg.architectures = [p.hf_arch]
    return cfg


def _init(name: str, shape: torch.Size, p: Preset, hidden: int, g: torch.Generator) -> torch.Tensor:
    """The distribution of one parameter (by its transformers name)."""
    def randn(std: float) -> torch.Tensor:
        return torch.randn(shape, generator=g) * std

    if name.endswith("embed_tokens.weight"):
        return randn(1.0)
    if name == "lm_head.weight":
        return randn(p.logit_gain / math.sqrt(hidden))
    if name.endswith("linear_attn.norm.weight"):     # gated RMSNorm: weight used as is (ssm_norm, not folded)
        return 1.0 + randn(0.1)
    if name.endswith("norm.weight"):                 # zero-centred RMSNorms: (1 + w)
        return randn(0.1)
    if name.endswith("A_log"):                       # decay rates from slow to fast
        return torch.empty(shape).uniform_(0.05, 2.0, generator=g).log()
    if name.endswith("dt_bias"):
        return randn(0.5)
    if name.endswith("conv1d.weight"):               # [channels, 1, kernel]
        return randn(p.init_gain / math.sqrt(shape[-1]))
    if name.endswith("mlp.gate.weight"):             # router [n_expert, hidden]
        return randn(p.router_gain / math.sqrt(hidden))
    if len(shape) >= 2:                              # projections [.., out, in]; experts [E, out, in]
        return randn(p.init_gain / math.sqrt(shape[-1]))
    raise ValueError(f"no initialisation rule for {name} {tuple(shape)}")


def build_model(p: Preset):
    torch.manual_seed(p.seed)
    cfg = make_config(p)
    model = ARCHS[p.hf_arch][0](cfg).eval()
    g = torch.Generator().manual_seed(p.seed)
    hidden = cfg.hidden_size
    with torch.no_grad():
        for name, prm in sorted(model.named_parameters()):
            w = _init(name, prm.shape, p, hidden, g).to(torch.float32)
            prm.copy_(w.to(torch.float16).to(torch.float32))  # f16-representable: F16 files are exact
    return model


def load_model(hf_dir: Path, hf_arch: str = "Qwen3_5MoeForCausalLM"):
    cls, _, moe = ARCHS[hf_arch]
    extra = {"experts_implementation": "eager"} if moe else {}
    return cls.from_pretrained(str(hf_dir), dtype=torch.float32, attn_implementation="eager", **extra).eval()


def save_checkpoint(p: Preset, out: Path) -> None:
    """config.json, generation_config.json, model.safetensors, tokenizer.json, tokenizer_config.json."""
    out.mkdir(parents=True, exist_ok=True)
    model = build_model(p)
    model.save_pretrained(str(out), safe_serialization=True)
    tok = bpe.train(p.n_tokenizer)
    bpe.save(tok, out, model_max_length=p.hf_config["max_position_embeddings"])
    # The reloaded checkpoint must be exactly the model just built (the references come from the reload).
    back = load_model(out, p.hf_arch)
    want = dict(model.named_parameters())
    for name, prm in back.named_parameters():
        if not torch.equal(prm, want[name]):
            raise RuntimeError(f"{out}: {name} differs after save/load")


@torch.no_grad()
def teacher_forced(model, tokens: list[int]) -> np.ndarray:
    """[len(tokens), vocab] fp32 logits, row i after token i."""
    out = model(input_ids=torch.tensor([tokens]), use_cache=False)
    return out.logits[0].float().numpy()


@torch.no_grad()
def greedy(model, prompt: list[int], n_new: int) -> list[int]:
    """Prefill then single-token decode with transformers' cache (the recurrent DeltaNet path)."""
    out = model(input_ids=torch.tensor([prompt]), use_cache=True)
    cache, toks = out.past_key_values, []
    for _ in range(n_new):
        t = int(out.logits[0, -1].argmax())
        toks.append(t)
        out = model(input_ids=torch.tensor([[t]]), past_key_values=cache, use_cache=True)
        cache = out.past_key_values
    return toks


def prompt(p: Preset, n: int, attempt: int) -> list[int]:
    """n random ordinary (non-special) token ids; each (preset, length, attempt) is its own seeded draw."""
    rng = np.random.default_rng([p.seed, n, attempt])
    return [int(t) for t in rng.integers(0, p.n_tokenizer - len(bpe.SPECIALS), n)]


def min_top2_gap(logits: np.ndarray) -> float:
    """Smallest distance between the two largest logits of any row: how near a top-1 tie the row comes."""
    top2 = np.sort(logits, axis=1)[:, -2:]
    return float((top2[:, 1] - top2[:, 0]).min())
