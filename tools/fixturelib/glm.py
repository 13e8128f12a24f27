"""GLM-5 family fixtures (HF `glm_moe_dsa`, GGUF `glm-dsa`): tiny random-weight models made by transformers' own
GlmMoeDsaForCausalLM, a GLM-style BPE tokenizer, fp32 references with DSA-indexer instrumentation, and llama.cpp's
converter run with the GLM pre-tokenizer name. Used by tools/make_glm_fixtures.py.

Every weight is drawn from one seeded generator in parameter-name order and rounded to an f16-representable value,
so the F32 and F16 GGUFs llama.cpp writes (and the F16 safetensors committed) hold exactly the reference weights."""
from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from . import tokenizer as qwen_bpe

# --------------------------------------------------------------------------------------------------- tokenizer

# llama.cpp's LLAMA_VOCAB_PRE_TYPE_CHATGLM4 split (pre names "glm4"/"chatglm-bpe"): digits grouped 1-3
GLM_SPLIT = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# GLM-4.5 / GLM-5 added-token order (minus the image/video/audio/code tokens), appended after the BPE vocabulary;
# (text, special): role/control tokens are special, the reasoning/tool markup tokens are plain added tokens
GLM_SPECIALS = [("<|endoftext|>", True), ("[MASK]", True), ("[gMASK]", True), ("[sMASK]", True), ("<sop>", True),
                ("<eop>", True), ("<|system|>", True), ("<|user|>", True), ("<|assistant|>", True),
                ("<|observation|>", True), ("<think>", False), ("</think>", False), ("<tool_call>", False),
                ("</tool_call>", False), ("<tool_response>", False), ("</tool_response>", False),
                ("<arg_key>", False), ("</arg_key>", False), ("<arg_value>", False), ("</arg_value>", False)]
N_SPECIALS = len(GLM_SPECIALS)
# A short GLM-5-style template (NOT GLM-5's real chat_template.jinja): [gMASK]<sop>, role tokens without newlines,
# empty </think> marker on history, <think> opened by the generation prompt.
CHAT_TEMPLATE = (
    "[gMASK]<sop>{% for m in messages %}{% if m['role'] == 'system' %}<|system|>{{ m['content'] }}"
    "{% elif m['role'] == 'user' %}<|user|>{{ m['content'] }}"
    "{% elif m['role'] == 'assistant' %}<|assistant|></think>{{ m['content'] }}"
    "{% elif m['role'] == 'tool' %}<|observation|><tool_response>{{ m['content'] }}</tool_response>{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|><think>{% endif %}")


def train_tokenizer(n_tokenizer: int) -> Tokenizer:
    """256 byte tokens + merges + the GLM added tokens = n_tokenizer ids (added tokens last, in GLM's order)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(GLM_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=n_tokenizer - N_SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(qwen_bpe.corpus(), trainer)
    if tok.get_vocab_size() != n_tokenizer - N_SPECIALS:
        raise RuntimeError(f"BPE training gave {tok.get_vocab_size()} tokens, wanted {n_tokenizer - N_SPECIALS}")
    for s, special in GLM_SPECIALS:  # one at a time: ids in list order
        if special:
            tok.add_special_tokens([AddedToken(s, special=True, normalized=False)])
        else:
            tok.add_tokens([AddedToken(s, special=False, normalized=False)])
    return tok


def special_id(n_tokenizer: int, text: str) -> int:
    return n_tokenizer - N_SPECIALS + [s for s, _ in GLM_SPECIALS].index(text)


def save_tokenizer(tok: Tokenizer, out: Path, model_max_length: int) -> None:
    """tokenizer.json + tokenizer_config.json (PreTrainedTokenizerFast, GLM's eos/pad, no bos)."""
    tok.save(str(out / "tokenizer.json"))
    n = tok.get_vocab_size()
    decoder = {str(n - N_SPECIALS + i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                                         "single_word": False, "special": sp}
               for i, (s, sp) in enumerate(GLM_SPECIALS)}
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": model_max_length,
           "added_tokens_decoder": decoder, "bos_token": None, "eos_token": "<|endoftext|>",
           "pad_token": "<|endoftext|>", "unk_token": None, "clean_up_tokenization_spaces": False,
           "do_lower_case": False, "remove_space": False, "padding_side": "left", "chat_template": CHAT_TEMPLATE}
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")


# ------------------------------------------------------------------------------------------------------ presets

@dataclass
class GlmPreset:
    name: str
    seed: int
    init_gain: float      # std of every projection is init_gain / sqrt(fan_in)
    logit_gain: float     # std of lm_head is logit_gain / sqrt(hidden)
    router_gain: float    # router std router_gain / sqrt(hidden): decisive routing
    bias_std: float       # e_score_correction_bias ~ N(0, bias_std^2) (selection only)
    n_tokenizer: int      # trained BPE vocabulary incl. the GLM added tokens; ids up to vocab_size-1 are padding
    hf_config: dict
    gguf_types: list[str]                                  # convert_hf_to_gguf.py outputs, committed
    quant_types: list[str] = field(default_factory=list)   # llama_model_quantize from the F32 file, committed
    work_only: list[str] = field(default_factory=list)     # made for references, left in WORK (not committed)
    mtp: bool = False          # add random NextN/MTP tensors as model.layers.<n_layer>.* (HF ignores them)
    drop_indexer_types: bool = False  # strip indexer_types from config.json (GLM-5/5.1 configs have none)
    n_greedy: int = 30
    greedy_prompts: tuple[str, ...] = ("len5", "len40")


def _common(**kw) -> dict:
    base = dict(
        vocab_size=296, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
        num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1, n_routed_experts=8,
        num_experts_per_tok=2, routed_scaling_factor=2.5, norm_topk_prob=True, n_group=1, topk_group=1,
        q_lora_rank=16, kv_lora_rank=24, qk_nope_head_dim=12, qk_rope_head_dim=8, v_head_dim=32,
        index_n_heads=8, index_head_dim=64, index_topk=16, first_k_dense_replace=1,
        hidden_act="silu", rms_norm_eps=1e-5, max_position_embeddings=4096, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, attention_bias=False)
    base.update(kw)
    return base


GLM_PRESETS: dict[str, GlmPreset] = {
    # GLM-5 / 5.1: every layer runs its own indexer; 1 dense + 2 MoE layers + a NextN/MTP block (layer 3)
    "glm5-toy": GlmPreset(
        name="glm5-toy", seed=5001, init_gain=0.7, logit_gain=4.0, router_gain=3.0, bias_std=0.08,
        n_tokenizer=288, hf_config=_common(num_hidden_layers=3, num_nextn_predict_layers=1),
        gguf_types=["f16"], quant_types=["q8_0", "q4_k_m"], work_only=["f32"], mtp=True,
        drop_indexer_types=True),
    # GLM-5.2 layout: "full"/"shared" indexer layers from index_topk_freq 3 / index_skip_topk_offset 1 ->
    # F S S F S (two runs of shared layers, each reusing a different full layer's top-k); GLM-5's 3 leading dense
    # layers (MoE on a full and a shared layer); no MTP block
    "glm52-toy": GlmPreset(
        name="glm52-toy", seed=5201, init_gain=0.7, logit_gain=4.0, router_gain=3.0, bias_std=0.08,
        n_tokenizer=288, hf_config=_common(num_hidden_layers=5, index_topk_freq=3, index_skip_topk_offset=1,
                                           first_k_dense_replace=3, num_nextn_predict_layers=0),
        gguf_types=["f16"], work_only=["f32"]),
}


def prompt_lengths(p: GlmPreset) -> list[int]:
    k = p.hf_config["index_topk"]
    return [1, 5, k, k + 1, 40, 120]


def first_stored_row(n: int, source: str) -> int:
    """transformers: every row up to 65 tokens, the last 8 of longer prompts (refs.first_stored_row);
    llama.cpp: the last 4 rows of every prompt (its argmax still covers every position)."""
    if source == "hf":
        return 0 if n <= 65 else n - 8
    return max(0, n - 4)


# ------------------------------------------------------------------------------------------------------- model

def make_config(p: GlmPreset, n_layers: int | None = None):
    from transformers import GlmMoeDsaConfig
    kw = dict(p.hf_config)
    if n_layers is not None:
        kw["num_hidden_layers"] = n_layers
    n = p.n_tokenizer
    eos = [special_id(n, "<|endoftext|>"), special_id(n, "<|user|>"), special_id(n, "<|observation|>")]
    cfg = GlmMoeDsaConfig(**kw, bos_token_id=None, eos_token_id=eos, pad_token_id=eos[0], dtype="float32")
    cfg.architectures = ["GlmMoeDsaForCausalLM"]
    return cfg


def _init(name: str, shape: torch.Size, p: GlmPreset, hidden: int, g: torch.Generator) -> torch.Tensor:
    def randn(std: float) -> torch.Tensor:
        return torch.randn(shape, generator=g) * std

    if name.endswith("embed_tokens.weight"):
        return randn(1.0)
    if name == "lm_head.weight":
        return randn(p.logit_gain / math.sqrt(hidden))
    if name.endswith("indexer.k_norm.bias"):      # LayerNorm bias
        return randn(0.1)
    if name.endswith("norm.weight"):              # Llama-style RMSNorm / LayerNorm weights: used as is
        return 1.0 + randn(0.1)
    if name.endswith("mlp.gate.weight"):          # router [n_expert, hidden]
        return randn(p.router_gain / math.sqrt(hidden))
    if name.endswith("e_score_correction_bias"):
        return randn(p.bias_std)
    if len(shape) >= 2:                           # projections [.., out, in]; experts [E, out, in]
        return randn(p.init_gain / math.sqrt(shape[-1]))
    raise ValueError(f"no initialisation rule for {name} {tuple(shape)}")


def _f16(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float32).to(torch.float16).to(torch.float32)


def build_model(p: GlmPreset, n_layers: int | None = None):
    """fp32 GlmMoeDsaForCausalLM with every parameter and the e_score_correction_bias buffers drawn in name order."""
    from transformers import GlmMoeDsaForCausalLM
    torch.manual_seed(p.seed)
    cfg = make_config(p, n_layers)
    model = GlmMoeDsaForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(p.seed)
    hidden = cfg.hidden_size
    tensors = dict(model.named_parameters())
    tensors.update({n: b for n, b in model.named_buffers() if n.endswith("e_score_correction_bias")})
    with torch.no_grad():
        for name in sorted(tensors):
            tensors[name].copy_(_f16(_init(name, tensors[name].shape, p, hidden, g)))
    return model


# Kept in fp32 in the committed safetensors, as transformers keeps them when it loads/saves a half-precision model
# (GlmMoeDsaPreTrainedModel._keep_in_fp32_modules(_strict)); the values are still f16-representable.
FP32_KEYS = ("mlp.gate.weight", "mlp.gate.e_score_correction_bias", "indexer.weights_proj.weight")


def save_checkpoint(p: GlmPreset, out: Path) -> dict:
    """config.json, generation_config.json, model.safetensors (F16; router, bias and indexer.weights_proj F32;
    per-expert keys as transformers saves them; plus model.layers.<L>.* NextN/MTP tensors when p.mtp),
    tokenizer.json, tokenizer_config.json. Returns a summary of what was written."""
    from safetensors.torch import load_file, save_file
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    n_layer = p.hf_config["num_hidden_layers"]
    # With an MTP block the weights come from an (n_layer + 1)-layer model: its last layer is the NextN block's
    # decoder layer (a genuine GLM-5 layer: MLA + full indexer + MoE); the trunk is the first n_layer layers.
    src_model = build_model(p, n_layer + 1 if p.mtp else None)
    with tempfile.TemporaryDirectory() as tmp:
        src_model.save_pretrained(tmp, safe_serialization=True)  # per-expert keys (transformers' save mapping)
        sd = load_file(str(Path(tmp) / "model.safetensors"))
    extra = {}
    if p.mtp:
        g = torch.Generator().manual_seed(p.seed + 1)
        h = p.hf_config["hidden_size"]
        pre = f"model.layers.{n_layer}."
        extra = {pre + "eh_proj.weight": _f16(torch.randn(h, 2 * h, generator=g) * p.init_gain / math.sqrt(2 * h)),
                 pre + "enorm.weight": _f16(1.0 + 0.1 * torch.randn(h, generator=g)),
                 pre + "hnorm.weight": _f16(1.0 + 0.1 * torch.randn(h, generator=g)),
                 pre + "shared_head.norm.weight": _f16(1.0 + 0.1 * torch.randn(h, generator=g))}
        sd.update(extra)
    sd = {k: (v.to(torch.float32) if k.endswith(FP32_KEYS) else v.to(torch.float16)).contiguous()
          for k, v in sorted(sd.items())}
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    # config: the n_layer-layer trunk (the MTP layer is outside num_hidden_layers, as in GLM-5's checkpoints)
    cfg = make_config(p)
    cfg.dtype = "float16"
    cfg.save_pretrained(str(out))
    from transformers import GenerationConfig
    GenerationConfig(eos_token_id=cfg.eos_token_id, pad_token_id=cfg.pad_token_id).save_pretrained(str(out))
    cj = json.loads((out / "config.json").read_text())
    if p.drop_indexer_types:  # GLM-5/5.1 configs carry no indexer_types: every layer full by default
        cj.pop("indexer_types", None)
    (out / "config.json").write_text(json.dumps(cj, indent=2, sort_keys=True) + "\n")
    tok = train_tokenizer(p.n_tokenizer)
    save_tokenizer(tok, out, p.hf_config["max_position_embeddings"])
    # The reloaded checkpoint must hold exactly the trunk just built (the references come from the reload).
    back = load_model(out)
    want = dict(src_model.named_parameters())
    want.update({n: b for n, b in src_model.named_buffers() if n.endswith("e_score_correction_bias")})
    got = dict(back.named_parameters())
    got.update({n: b for n, b in back.named_buffers() if n.endswith("e_score_correction_bias")})
    for name, t in got.items():
        if not torch.equal(t, want[name]):
            raise RuntimeError(f"{out}: {name} differs after save/load")
    if back.config.indexer_types != make_config(p).indexer_types:
        raise RuntimeError(f"{out}: indexer_types {back.config.indexer_types} after reload")
    return {"tensors": len(sd), "params": int(sum(v.numel() for v in sd.values())),
            "mtp_tensors": len([k for k in sd if p.mtp and k.startswith(f"model.layers.{n_layer}.")]),
            "indexer_types": back.config.indexer_types, "mlp_layer_types": back.config.mlp_layer_types}


def load_model(hf_dir: Path):
    import logging

    from transformers import GlmMoeDsaForCausalLM
    from transformers.utils import logging as tlog
    lvl = tlog.get_verbosity()
    tlog.set_verbosity(logging.ERROR)  # the MTP layer's keys are "unexpected" (transformers ignores layer 78 only)
    try:
        m = GlmMoeDsaForCausalLM.from_pretrained(str(hf_dir), dtype=torch.float32, attn_implementation="eager",
                                                 experts_implementation="eager").eval()
    finally:
        tlog.set_verbosity(lvl)
    return m


# ------------------------------------------------------------------------------------------- instrumentation

def indexer_scores(mod, hidden_states, q_resid, position_embeddings, attention_mask) -> torch.Tensor:
    """GlmMoeDsaIndexer.forward's scores (modeling_glm_moe_dsa.py, lines 211-239) without a cache: [B, S, T]."""
    from transformers.models.glm_moe_dsa.modeling_glm_moe_dsa import apply_rotary_pos_emb_interleave
    b, s, _ = hidden_states.shape
    cos, sin = position_embeddings
    q = mod.wq_b(q_resid).view(b, s, mod.n_heads, mod.head_dim)
    q_rot, q_pass = torch.split(q, [mod.qk_rope_head_dim, mod.head_dim - mod.qk_rope_head_dim], dim=-1)
    k = mod.k_norm(mod.wk(hidden_states)).unsqueeze(2)
    k_rot, k_pass = torch.split(k, [mod.qk_rope_head_dim, mod.head_dim - mod.qk_rope_head_dim], dim=-1)
    q_rot, k_rot = apply_rotary_pos_emb_interleave(q_rot, k_rot, cos, sin, unsqueeze_dim=2)
    q = torch.cat([q_rot, q_pass], dim=-1)
    k = torch.cat([k_rot, k_pass], dim=-1).squeeze(2)
    scores = F.relu(torch.matmul(q.float(), k.transpose(-1, -2).float().unsqueeze(1)) * mod.softmax_scale)
    w = mod.weights_proj(hidden_states.to(mod.weights_proj.weight.dtype)).float() * (mod.n_heads ** -0.5)
    idx = torch.matmul(w.unsqueeze(-2), scores).squeeze(-2)
    if attention_mask.dtype == torch.bool:
        return idx.masked_fill(~attention_mask, float("-inf"))
    return idx + attention_mask


@contextmanager
def probe(model):
    """Records, per forward: every full layer's indexer scores (visible keys only) and returned top-k, and every
    MoE router's selection scores (sigmoid + bias) and top-k, keyed by layer index."""
    rec = {"indexer": {}, "router": {}}
    handles = []
    for i, layer in enumerate(model.model.layers):
        ix = layer.self_attn.indexer
        if ix is not None:
            def ih(mod, args, kwargs, out, i=i):
                hs, qr, pe, am = args[:4]
                sc = indexer_scores(mod, hs, qr, pe, am)[0]
                rec["indexer"][i] = {"scores": sc.detach().clone(), "topk": out[0].detach().clone()}
            handles.append(ix.register_forward_hook(ih, with_kwargs=True))
        gate = getattr(layer.mlp, "gate", None)
        if gate is not None and hasattr(gate, "e_score_correction_bias"):
            def rh(mod, args, out, i=i):
                x = args[0].reshape(-1, mod.hidden_dim)
                s = F.linear(x.float(), mod.weight.float()).sigmoid()
                rec["router"][i] = {"scores": s.detach().clone(), "choice": (s + mod.e_score_correction_bias).detach(),
                                    "topk": out[2].detach().clone(), "top_k": mod.top_k}
            handles.append(gate.register_forward_hook(rh))
    try:
        yield rec
    finally:
        for h in handles:
            h.remove()


def indexer_cut_gaps(rec: dict, k: int) -> dict:
    """Per full layer: the smallest relative gap between the k-th and (k+1)-th visible score over the rows that
    have more than k visible keys (gap / max |visible score| of that row), and a check that the recomputed scores
    select what the model selected."""
    out = {}
    for li, r in rec["indexer"].items():
        sc, tk = r["scores"], r["topk"]
        n = sc.shape[0]
        worst = math.inf
        for t in range(n):
            vis = sc[t, : t + 1]
            if t + 1 > k:
                srt = torch.sort(vis, descending=True).values
                scale = float(vis.abs().max())
                gap = float(srt[k - 1] - srt[k]) / scale if scale > 0 else 0.0
                worst = min(worst, gap)
                sel = set(int(x) for x in tk[t].tolist())
                mine = set(int(x) for x in torch.topk(vis, k).indices.tolist())
                if sel != mine and gap > 1e-6:
                    raise RuntimeError(f"layer {li} row {t}: recomputed indexer top-k differs from the model's")
        out[li] = worst
    return out


def router_cut_gap(rec: dict) -> float:
    """Smallest gap (absolute, sigmoid units) between the top_k-th and (top_k+1)-th selection score of any token
    in any MoE layer."""
    worst = math.inf
    for r in rec["router"].values():
        srt = torch.sort(r["choice"], dim=-1, descending=True).values
        worst = min(worst, float((srt[:, r["top_k"] - 1] - srt[:, r["top_k"]]).min()))
    return worst


def bias_changes_routing(rec: dict) -> float:
    """Fraction of (token, MoE layer) whose selected expert set differs when the correction bias is dropped."""
    changed = total = 0
    for r in rec["router"].values():
        a = torch.topk(r["choice"], r["top_k"], dim=-1).indices.sort(dim=-1).values
        b = torch.topk(r["scores"], r["top_k"], dim=-1).indices.sort(dim=-1).values
        changed += int((a != b).any(dim=-1).sum())
        total += a.shape[0]
    return changed / max(total, 1)


@torch.no_grad()
def teacher_forced(model, tokens: list[int]) -> tuple[np.ndarray, dict]:
    with probe(model) as rec:
        out = model(input_ids=torch.tensor([tokens]), use_cache=False)
    return out.logits[0].float().numpy(), rec


@torch.no_grad()
def greedy(model, prompt: list[int], n_new: int) -> list[int]:
    """Prefill then single-token decode with transformers' DynamicCache (MLA latents + indexer key cache)."""
    out = model(input_ids=torch.tensor([prompt]), use_cache=True)
    cache, toks = out.past_key_values, []
    for _ in range(n_new):
        t = int(out.logits[0, -1].argmax())
        toks.append(t)
        out = model(input_ids=torch.tensor([[t]]), past_key_values=cache, use_cache=True)
        cache = out.past_key_values
    return toks


@contextmanager
def topk_raised(model, k: int):
    """Every indexer selects min(k, keys): with k >= the prompt length DSA is plain causal attention."""
    saved = []
    for layer in model.model.layers:
        ix = layer.self_attn.indexer
        if ix is not None:
            saved.append((ix, ix.index_topk))
            ix.index_topk = k
    try:
        yield
    finally:
        for ix, v in saved:
            ix.index_topk = v


def prompt(p: GlmPreset, n: int, attempt: int) -> list[int]:
    """n random ordinary (non-added) token ids; each (preset, length, attempt) is its own seeded draw."""
    rng = np.random.default_rng([p.seed, n, attempt])
    return [int(t) for t in rng.integers(0, p.n_tokenizer - N_SPECIALS, n)]


def min_top2_gap(logits: np.ndarray) -> float:
    top2 = np.sort(logits, axis=1)[:, -2:]
    return float((top2[:, 1] - top2[:, 0]).min())


# ----------------------------------------------------------------------------------------------- llama.cpp

_SHIM = (
    "import runpy, sys\n"
    "from pathlib import Path\n"
    "lcpp = Path(sys.argv[1]).resolve()\n"
    "sys.path.insert(0, str(lcpp)); sys.path.insert(1, str(lcpp / 'gguf-py'))\n"
    "from conversion.base import TextModel\n"
    "TextModel.get_vocab_base_pre = lambda self, tokenizer: 'glm4'\n"
    "sys.argv = [str(lcpp / 'convert_hf_to_gguf.py')] + sys.argv[2:]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n")


def convert(lcpp: Path, hf_dir: Path, outtype: str, out: Path, log: Path) -> None:
    """llama.cpp's convert_hf_to_gguf.py, unchanged except that the BPE pre-tokenizer name is forced to "glm4"
    (what the converter's hash table gives GLM-4.5/4.7 tokenizers; a freshly trained tokenizer matches no hash).
    MTP kept (no --no-mtp): a checkpoint with model.layers.<n_layer>.* gets blk.<n_layer>.nextn.*."""
    out.parent.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-c", _SHIM, str(lcpp), str(hf_dir), "--outtype", outtype, "--outfile", str(out)]
    with open(log, "w") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        raise RuntimeError(f"convert_hf_to_gguf.py failed for {hf_dir} -> {outtype}; see {log}")


def gguf_summary(path: Path) -> dict:
    """The glm-dsa keys and tensor types of a GGUF (gguf-py)."""
    import gguf
    r = gguf.GGUFReader(str(path))
    kv = {}
    for f in r.fields.values():
        if not f.name.startswith("glm-dsa.") and f.name not in ("tokenizer.ggml.pre", "tokenizer.ggml.bos_token_id",
                                                                 "tokenizer.ggml.eos_token_id",
                                                                 "tokenizer.ggml.eot_token_id",
                                                                 "tokenizer.ggml.eom_token_id",
                                                                 "tokenizer.ggml.unknown_token_id",
                                                                 "tokenizer.ggml.padding_token_id"):
            continue
        v = f.contents()
        kv[f.name] = [x.item() if hasattr(x, "item") else x for x in v] if isinstance(v, list) else \
            (v.item() if hasattr(v, "item") else v)
    types: dict[str, int] = {}
    for t in r.tensors:
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    names = [t.name for t in r.tensors]
    return {"kv": kv, "tensor_types": types, "n_tensors": len(names),
            "nextn_tensors": sorted(n for n in names if ".nextn." in n)}


DRIVER_SRC = Path(__file__).resolve().parent / "llamacpp_logits.cpp"
DEFAULT_LLAMA_BUILD = Path.home() / ".cache/tern/llama.cpp-0.3.36"  # bench/build_llamacpp.sh's static build


def build_driver(llama_dir: Path, work: Path) -> Path:
    """Compiles llamacpp_logits.cpp against llama.cpp's static libraries (LLAMA_DIR/src, LLAMA_DIR/build)."""
    exe = work / "llamacpp_logits"
    if exe.exists() and exe.stat().st_mtime > DRIVER_SRC.stat().st_mtime:
        return exe
    b = llama_dir / "build"
    libs = [b / "src/libllama.a", b / "ggml/src/libggml.a", b / "ggml/src/libggml-cpu.a",
            b / "ggml/src/libggml-base.a"]
    cmd = ["g++", "-O2", "-std=c++17", f"-I{llama_dir / 'src/include'}", f"-I{llama_dir / 'src/ggml/include'}",
           str(DRIVER_SRC), *map(str, libs), "-fopenmp", "-lpthread", "-ldl", "-lm", "-o", str(exe)]
    work.mkdir(parents=True, exist_ok=True)
    subprocess.run(cmd, check=True)
    return exe


def llamacpp_backend(llama_dir: Path | None, work: Path) -> tuple[str, Path | None]:
    """("llama-cpp-python <version>", None) when llama_cpp imports, else ("static driver", compiled exe)."""
    from . import llamacpp
    v = llamacpp.available()
    if v is not None:
        return f"llama-cpp-python {v}", None
    return "llamacpp_logits.cpp", build_driver(llama_dir or DEFAULT_LLAMA_BUILD, work)


def llamacpp_teacher_forced(gguf: Path, prompts: list[list[int]], exe: Path | None, n_vocab: int,
                            threads: int = 2, kv_f32: bool = False) -> list[np.ndarray]:
    """llama.cpp's [n, n_vocab] logits per prompt: llama-cpp-python (fixturelib/llamacpp.py) when exe is None,
    else the static driver with the same context settings (kv_f32: an F32 KV cache, driver only, diagnostics)."""
    if exe is None:
        from . import llamacpp
        return [llamacpp.teacher_forced(gguf, t, n_threads=threads) for t in prompts]
    with tempfile.TemporaryDirectory() as tmp:
        pf, of = Path(tmp) / "prompts.txt", Path(tmp) / "out.f32"
        pf.write_text("".join(",".join(map(str, t)) + "\n" for t in prompts))
        cmd = [str(exe), str(gguf), str(pf), str(of), str(threads)] + (["f32"] if kv_f32 else [])
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"llamacpp_logits {gguf.name} failed ({r.returncode}): {r.stderr[-2000:]}")
        flat = np.fromfile(of, dtype="<f4")
    out, off = [], 0
    for t in prompts:
        out.append(flat[off: off + len(t) * n_vocab].reshape(len(t), n_vocab).copy())
        off += len(t) * n_vocab
    if off != flat.size:
        raise RuntimeError(f"llamacpp_logits {gguf.name}: {flat.size} values, expected {off}")
    return out


def quantize(src: Path, dst: Path, qtype: str, llama_dir: Path | None, nthread: int = 2) -> str:
    """llama.cpp's llama-quantize (the static build's binary) from an F32 file; llama-cpp-python's
    llama_model_quantize (fixturelib/convert.py) when the binary is missing. Returns which ran."""
    exe = (llama_dir or DEFAULT_LLAMA_BUILD) / "build/bin/llama-quantize"
    if exe.exists():
        r = subprocess.run([str(exe), str(src), str(dst), qtype.upper(), str(nthread)], capture_output=True,
                           text=True)
        if r.returncode != 0:
            raise RuntimeError(f"llama-quantize {src.name} -> {qtype} failed: {r.stderr[-2000:]}")
        fallback = [ln.strip() for ln in (r.stdout + r.stderr).splitlines() if "fallback" in ln]
        return "llama-quantize" + (f" ({fallback[-1]})" if fallback else "")
    from . import convert as lconv
    lconv.quantize(src, dst, qtype, nthread)
    return "llama_model_quantize (llama-cpp-python)"
