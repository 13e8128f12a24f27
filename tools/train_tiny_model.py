#!/usr/bin/env python3
"""Train tern's bundled tiny Qwen3.5-MoE model (transformers' own Qwen3_5MoeForCausalLM) on a single CPU thread.

Stages (each reads the previous one's output under --work, default out/tiny):
  tokenizer  byte-level BPE (HF tokenizers) with the Qwen3.5 split regex, NFC, the 33 Qwen3.5 added tokens after the
             ordinary ones and the chat template in models/tern-tiny-chat-template.jinja -> WORK/hf/tokenizer*.json
  data       tokenise corpus (tools/build_corpus.py) + rendered chat pairs -> WORK/{train,eval}.u16
  train      AdamW + warmup/cosine, seeded; checkpoint WORK/ckpt.pt every --ckpt-every steps (resume with --resume);
             CSV log WORK/log.csv; final HF model -> WORK/hf; loss curve -> models/tern-tiny-loss.png
  sample     greedy and sampled generations from WORK/hf -> models/samples.md (printed too)
  eval       held-out loss and perplexity of WORK/hf

The machine this was made on has 2 cores: the recorded run used `--threads 2` (the default 1 leaves a core to builds).
Example: nice -n 19 python tools/train_tiny_model.py tokenizer data train sample --steps 1200
"""
import argparse
import csv
import json
import math
import os
import random
import sys
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATE = os.path.join(REPO, "models", "tern-tiny-chat-template.jinja")
# Qwen3.5's split regex (spec/tokenizer-and-chat.md section 2.2): marks stay with letters, one digit per piece.
QWEN35_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# The 33 Qwen3.5 added tokens in id order; (text, special). Which are "special" follows the Qwen3 habit
# (think/tool tags are added but not special) since the Qwen3.5 flags are unverified.
ADDED = [(t, True) for t in (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>")] + [("<tool_call>", False), ("</tool_call>", False)] + [(t, True) for t in (
        "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>")] + [
    ("<tool_response>", False), ("</tool_response>", False), ("<think>", False), ("</think>", False)] + [
    (t, True) for t in ("<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>",
                        "<tts_text_bos_single>", "<|audio_pad|>")]
DOC_SEP = "<|endoftext|>"


def read_docs(path):
    with open(path, encoding="utf-8") as f:
        return [d.strip("\n") for d in f.read().split("\n" + DOC_SEP + "\n") if d.strip()]


def read_chats(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["messages"] for line in f]


# ----------------------------------------------------------------------------------------------- tokenizer
def stage_tokenizer(args):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from tokenizers import AddedToken
    corpus = os.path.join(args.work, "corpus")
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN35_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    n_ordinary = args.vocab - len(ADDED)
    trainer = trainers.BpeTrainer(vocab_size=n_ordinary, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])

    def texts():
        yield from read_docs(os.path.join(corpus, "train.txt"))
        for chat in read_chats(os.path.join(corpus, "chat_train.jsonl")):
            yield "\n".join(m["content"] for m in chat)
    tok.train_from_iterator(texts(), trainer=trainer)
    if tok.get_vocab_size() != n_ordinary:
        sys.exit(f"BPE produced {tok.get_vocab_size()} tokens, expected {n_ordinary}")
    tok.add_tokens([AddedToken(t, special=s, normalized=False, lstrip=False, rstrip=False, single_word=False)
                    for t, s in ADDED])
    out = os.path.join(args.work, "hf")
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    with open(TEMPLATE, encoding="utf-8") as f:
        template = f.read()
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": False, "add_prefix_space": False,
        "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
        "model_max_length": 4096, "clean_up_tokenization_spaces": False, "split_special_tokens": False,
        "errors": "replace", "chat_template": template,
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
    with open(os.path.join(out, "chat_template.jinja"), "w", encoding="utf-8") as f:
        f.write(template)
    print(f"tokenizer: {tok.get_vocab_size()} ids ({n_ordinary} BPE + {len(ADDED)} added) -> {out}")


def load_tokenizer(args):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(os.path.join(args.work, "hf"))


# ----------------------------------------------------------------------------------------------- data
def render_chat(tok, messages):
    return tok.apply_chat_template(messages, tokenize=False)


def stage_data(args):
    tok = load_tokenizer(args)
    corpus = os.path.join(args.work, "corpus")
    eot = tok.convert_tokens_to_ids(DOC_SEP)
    for split in ("train", "eval"):
        docs = read_docs(os.path.join(corpus, f"{split}.txt"))
        docs += [render_chat(tok, c) for c in read_chats(os.path.join(corpus, f"chat_{split}.jsonl"))]
        random.Random(args.seed).shuffle(docs)  # interleave prose and chat
        ids = []
        for enc in tok(docs, add_special_tokens=False)["input_ids"]:
            ids.extend(enc)
            ids.append(eot)
        arr = np.asarray(ids, dtype=np.uint16)
        arr.tofile(os.path.join(args.work, f"{split}.u16"))
        nbytes = sum(len(d.encode()) for d in docs)
        print(f"data {split}: {len(docs)} docs, {nbytes} bytes, {len(arr)} tokens ({nbytes / len(arr):.2f} B/tok)")


# ----------------------------------------------------------------------------------------------- model
def make_config(args, tok):
    from transformers.models.qwen3_5_moe import Qwen3_5MoeTextConfig
    rotary = int(args.head_dim * 0.25)  # Qwen3.5 rotates a quarter of each head
    half = rotary // 2
    # Same split proportions as the real [11, 11, 10] over 32 frequency pairs (text positions make them equal).
    sec = [math.ceil(half * 11 / 32), math.ceil(half * 11 / 32)]
    sec.append(half - sum(sec))
    cfg = Qwen3_5MoeTextConfig(
        vocab_size=args.vocab_padded, hidden_size=args.hidden, num_hidden_layers=args.layers,
        num_attention_heads=args.heads, num_key_value_heads=args.kv_heads, head_dim=args.head_dim,
        linear_num_key_heads=args.lin_k_heads, linear_num_value_heads=args.lin_v_heads,
        linear_key_head_dim=args.lin_head_dim, linear_value_head_dim=args.lin_head_dim, linear_conv_kernel_dim=4,
        num_experts=args.experts, num_experts_per_tok=args.top_k, moe_intermediate_size=args.expert_ffn,
        shared_expert_intermediate_size=args.shared_ffn, max_position_embeddings=4096, rms_norm_eps=1e-6,
        tie_word_embeddings=False, router_aux_loss_coef=args.aux_loss, output_router_logits=args.aux_loss > 0,
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": sec, "mrope_interleaved": True},
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"), pad_token_id=tok.convert_tokens_to_ids(DOC_SEP),
        bos_token_id=None, full_attention_interval=4, initializer_range=0.02)
    cfg.mtp_num_hidden_layers = 1 if args.mtp_weight > 0 else 0  # what Qwen3.5 checkpoints carry; the converter reads it
    return cfg


def make_model(args, tok):
    import torch
    from transformers.models.qwen3_5_moe import Qwen3_5MoeForCausalLM
    torch.manual_seed(args.seed)
    model = Qwen3_5MoeForCausalLM(make_config(args, tok))
    with torch.no_grad():  # the router starts at zero in transformers; small noise breaks expert symmetry
        for layer in model.model.layers:
            layer.mlp.gate.weight.normal_(0.0, 0.02)
    return model


class MtpBlock:
    """The multi-token-prediction block of Qwen3.5 / Qwen3-Next, trained with the trunk (the objective of the
    reference implementations, DeepSeek-V3's MTP as Qwen3-Next adopted it): for position t the block takes the
    trunk's final-normed hidden state h_t and the embedding of token t+1,

        x = fc(cat([pre_fc_norm_embedding(embed(x_{t+1})), pre_fc_norm_hidden(h_t)]))
        g = norm(decoder_layer(x))            # one full-attention decoder layer, causal over the MTP rows
        logits = lm_head(g)                   # the trunk's head

    and is trained with cross-entropy against token t+2. Row t sits at RoPE position t+1 (tools/fixturelib/mtp_ref.py
    has the same convention; tern's tests check tern against it). Built as torch modules so the optimiser sees them;
    saved under the checkpoint names real Qwen3.5 checkpoints use (mtp.*, per-expert keys)."""

    def __init__(self, cfg):
        import torch
        from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeDecoderLayer, Qwen3_5MoeRMSNorm
        h = cfg.hidden_size
        self.cfg = cfg
        self.mod = torch.nn.ModuleDict({
            "pre_fc_norm_embedding": Qwen3_5MoeRMSNorm(h, eps=cfg.rms_norm_eps),
            "pre_fc_norm_hidden": Qwen3_5MoeRMSNorm(h, eps=cfg.rms_norm_eps),
            "fc": torch.nn.Linear(2 * h, h, bias=False),
            "layer": Qwen3_5MoeDecoderLayer(cfg, cfg.layer_types.index("full_attention")),
            "norm": Qwen3_5MoeRMSNorm(h, eps=cfg.rms_norm_eps)})
        with torch.no_grad():
            for name, p in self.mod.named_parameters():
                if p.ndim >= 2:
                    p.normal_(0.0, cfg.initializer_range)
        self.router_logits = []
        self.mod["layer"].mlp.gate.register_forward_hook(lambda m, i, o: self.router_logits.append(o[0]))

    def forward(self, model, h, next_tokens):
        """h [B, n, H] (trunk rows 0..n-1), next_tokens [B, n] (tokens 1..n) -> g [B, n, H] (MTP output, normed)."""
        import torch
        n = h.shape[1]
        e = model.model.embed_tokens(next_tokens)
        x = self.mod["fc"](torch.cat([self.mod["pre_fc_norm_embedding"](e), self.mod["pre_fc_norm_hidden"](h)], -1))
        pos = torch.arange(1, n + 1)[None]
        cos_sin = model.model.rotary_emb(x, pos)
        mask = torch.full((n, n), float("-inf")).triu(1)[None, None]
        self.router_logits = []
        x = self.mod["layer"](x, position_embeddings=cos_sin, attention_mask=mask, position_ids=pos)
        return self.mod["norm"](x)

    def aux_loss(self):
        from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import load_balancing_loss_func
        return load_balancing_loss_func(tuple(self.router_logits), self.cfg.num_experts, self.cfg.num_experts_per_tok)

    def checkpoint_tensors(self):
        """The mtp.* tensors with a Qwen3.5 checkpoint's names (experts unfused as save_pretrained writes them)."""
        sd = {}
        for k, v in self.mod.state_dict().items():
            v = v.detach().float().contiguous()
            if k.startswith("layer.mlp.experts."):
                continue
            sd["mtp." + k.replace("layer.", "layers.0.", 1)] = v
        ex = self.mod["layer"].mlp.experts
        f = self.cfg.moe_intermediate_size
        for e in range(self.cfg.num_experts):
            base = f"mtp.layers.0.mlp.experts.{e}."
            sd[base + "gate_proj.weight"] = ex.gate_up_proj[e, :f].detach().float().contiguous()
            sd[base + "up_proj.weight"] = ex.gate_up_proj[e, f:].detach().float().contiguous()
            sd[base + "down_proj.weight"] = ex.down_proj[e].detach().float().contiguous()
        return sd


def mtp_loss(model, mtp, h, x):
    """Cross-entropy of the MTP rows of a batch x [B, L+1] given the trunk's normed hiddens h [B, L, H]: row t
    (t = 0..L-2) sees h_t and token x_{t+1} and predicts x_{t+2}. Returns (loss, logits)."""
    import torch
    g = mtp.forward(model, h[:, :-1], x[:, 1:-1])
    logits = model.lm_head(g)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 2:].reshape(-1))
    return loss, logits


def init_from_gguf(model, gguf_path, args):
    """Load the trunk weights of an exported GGUF (llama.cpp's converter output, any float type) back into `model`.

    The inverse of the converter is not written by hand: a copy of the model whose every weight element holds its
    own global index (exact in float32 below 2^24) is exported with the same converter to F32, so each GGUF element
    says which checkpoint element it came from (V-head reorders, QKV/Z splits, expert stacking, conv squeeze). Two
    element-wise maps are inverted by name: RMSNorm weights are stored as 1 + w (all but ssm_norm) and A_log as
    ssm_a = -exp(A_log) (A_log gets the smallest indices, stored as log(index)). Every checkpoint element must be
    covered exactly once."""
    import subprocess
    import torch
    from gguf import GGUFReader
    prov_dir = os.path.join(args.work, "provenance")
    params = dict(model.named_parameters())
    offsets, total = {}, 0
    with torch.no_grad():
        saved = {n: p.detach().clone() for n, p in params.items()}
        # A_log first: its provenance goes through -exp(), exact only for small indices
        for n in sorted(params, key=lambda n: not n.endswith("A_log")):
            p = params[n]
            offsets[n] = total
            ids = torch.arange(total + 1, total + 1 + p.numel(), dtype=torch.float64).reshape(p.shape)
            p.copy_((ids.log() if n.endswith("A_log") else ids).float())
            total += p.numel()
        assert total + 1 < 2 ** 24
        if not os.path.exists(os.path.join(prov_dir, "prov.gguf")):
            model.config.architectures = ["Qwen3_5MoeForCausalLM"]
            mtp_layers = model.config.mtp_num_hidden_layers
            model.config.mtp_num_hidden_layers = 0
            model.save_pretrained(prov_dir, safe_serialization=True)
            model.config.mtp_num_hidden_layers = mtp_layers
            for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
                src = os.path.join(args.work, "hf", f)
                if os.path.exists(src):
                    with open(src, "rb") as a, open(os.path.join(prov_dir, f), "wb") as b:
                        b.write(a.read())
            subprocess.run(["bash", os.path.join(REPO, "tools", "export_tiny_model.sh"), prov_dir,
                            os.path.join(prov_dir, "prov.gguf"), "f32"], check=True)
        for n, p in params.items():
            p.copy_(saved[n])
    prov = {t.name: np.asarray(t.data) for t in GGUFReader(os.path.join(prov_dir, "prov.gguf")).tensors}
    src = {t.name: t for t in GGUFReader(gguf_path).tensors}
    flat = np.full(total + 1, np.nan, dtype=np.float64)
    hits = np.zeros(total + 1, dtype=np.int64)
    from gguf import dequantize
    for name, pv in prov.items():
        if name not in src:
            sys.exit(f"init: {gguf_path} has no tensor {name}")
        t = src[name]
        val = dequantize(t.data, t.tensor_type).astype(np.float64).reshape(pv.shape)
        pv = pv.astype(np.float64)
        if name.endswith("ssm_a"):  # provenance -exp(log(index)) = -index (A_log indices are the smallest)
            idx = np.rint(-pv).astype(np.int64)
            val = np.log(-val)
        elif "norm" in name and "ssm_norm" not in name:
            idx = np.rint(pv - 1).astype(np.int64)
            val = val - 1.0
        else:
            idx = np.rint(pv).astype(np.int64)
        flat[idx.ravel()] = val.ravel()
        np.add.at(hits, idx.ravel(), 1)
    if hits[1:].min() != 1 or hits[1:].max() != 1:
        sys.exit(f"init: provenance covers {np.count_nonzero(hits[1:])} of {total} elements "
                 f"(max hits {hits.max()}); the converter map is not a bijection")
    with torch.no_grad():
        for n, p in params.items():
            o = offsets[n]
            p.copy_(torch.from_numpy(flat[o + 1:o + 1 + p.numel()]).reshape(p.shape).float())
    print(f"init: {total:,} trunk weights from {gguf_path}", flush=True)


def batches(data, seq, batch, rng):
    hi = len(data) - seq - 1
    while True:
        starts = rng.integers(0, hi, size=batch)
        x = np.stack([data[s:s + seq + 1] for s in starts]).astype(np.int64)
        yield x


def eval_windows(data, seq, n):
    step = max(1, (len(data) - seq - 1) // n)
    return np.stack([data[i * step:i * step + seq + 1] for i in range(n)]).astype(np.int64)


def evaluate(model, windows, bs=8, mtp=None):
    """Held-out mean cross-entropy of the trunk; with an MTP block also (mtp_loss, mtp_top1, mtp_agree): the MTP
    rows' cross-entropy against token t+2, how often their argmax is token t+2, and how often it equals the trunk's
    own argmax at row t+1 (what greedy speculative decoding accepts at one drafted token)."""
    import torch
    model.eval()
    total, count, m_total, m_top1, m_agree, m_count = 0.0, 0, 0.0, 0, 0, 0
    with torch.no_grad():
        for i in range(0, len(windows), bs):
            x = torch.from_numpy(windows[i:i + bs])
            h = model.model(input_ids=x[:, :-1]).last_hidden_state
            logits = model.lm_head(h)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                                                     reduction="sum")
            total += loss.item()
            count += x[:, 1:].numel()
            if mtp is not None:
                ml, mlog = mtp_loss(model, mtp, h, x)
                n = x[:, 2:].numel()
                m_total += ml.item() * n
                pred = mlog.argmax(-1)
                m_top1 += (pred == x[:, 2:]).sum().item()
                m_agree += (pred == logits[:, 1:].argmax(-1)).sum().item()
                m_count += n
    model.train()
    if mtp is None:
        return total / count
    return total / count, m_total / m_count, m_top1 / m_count, m_agree / m_count


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.min_lr + 0.5 * (args.lr - args.min_lr) * (1 + math.cos(math.pi * min(1.0, t)))


def stage_train(args):
    import torch
    torch.set_num_threads(args.threads)
    tok = load_tokenizer(args)
    train = np.fromfile(os.path.join(args.work, "train.u16"), dtype=np.uint16)
    held = eval_windows(np.fromfile(os.path.join(args.work, "eval.u16"), dtype=np.uint16), args.seq, args.eval_windows)
    model = make_model(args, tok)
    if args.init_gguf:
        init_from_gguf(model, args.init_gguf, args)
    mtp = MtpBlock(model.config) if args.mtp_weight > 0 else None
    n_params = sum(p.numel() for p in model.parameters())
    n_mtp = sum(p.numel() for p in mtp.mod.parameters()) if mtp else 0
    print(f"params {n_params:,} (+{n_mtp:,} MTP); train tokens {len(train):,}; tokens/step {args.batch * args.seq}",
          flush=True)

    def groups(named, mult):
        named = list(named)
        decay = [p for n, p in named if p.ndim >= 2 and "norm" not in n]
        no_decay = [p for n, p in named if not (p.ndim >= 2 and "norm" not in n)]
        return [{"params": decay, "weight_decay": args.wd, "mult": mult},
                {"params": no_decay, "weight_decay": 0.0, "mult": mult}]
    pg = groups(model.named_parameters(), 1.0)
    if mtp:
        pg += groups(mtp.mod.named_parameters(), args.mtp_lr_mult)
    opt = torch.optim.AdamW(pg, lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    all_params = list(model.parameters()) + (list(mtp.mod.parameters()) if mtp else [])
    rng = np.random.default_rng(args.seed)
    step, elapsed0 = 0, 0.0
    ckpt_path = os.path.join(args.work, "ckpt.pt")
    log_path = os.path.join(args.work, "log.csv")
    header = ["step", "tokens", "seconds", "lr", "train_loss", "eval_loss", "mtp_train_loss", "mtp_eval_loss",
              "mtp_top1", "mtp_agree"]

    def eval_row():
        if mtp is None:
            return [f"{evaluate(model, held):.4f}", "", "", ""]
        ev, ml, t1, ag = evaluate(model, held, mtp=mtp)
        mtp.mod.train()
        return [f"{ev:.4f}", f"{ml:.4f}", f"{t1:.4f}", f"{ag:.4f}"]
    if args.resume and os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path, weights_only=False)
        model.load_state_dict(ck["model"])
        if mtp:
            mtp.mod.load_state_dict(ck["mtp"])
        opt.load_state_dict(ck["opt"])
        rng.bit_generator.state = ck["rng"]
        torch.set_rng_state(ck["torch_rng"])
        step, elapsed0 = ck["step"], ck["elapsed"]
        print(f"resumed at step {step}", flush=True)
    else:
        with open(log_path, "w", newline="") as f:
            csv.writer(f).writerow(header)
        ev = eval_row()  # the starting point (a warm start's "before")
        with open(log_path, "a", newline="") as f:
            csv.writer(f).writerow([0, 0, 0.0, "", "", ev[0], "", ev[1], ev[2], ev[3]])
        print(f"step 0 eval {ev}", flush=True)
    gen = batches(train, args.seq, args.batch, rng)
    model.train()
    if mtp:
        mtp.mod.train()
    t0 = time.time()
    run_loss, run_mtp, run_n = 0.0, 0.0, 0
    while step < args.steps:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args) * g["mult"]
        x = torch.from_numpy(next(gen))
        out = model.model(input_ids=x[:, :-1], output_router_logits=args.aux_loss > 0)
        h = out.last_hidden_state
        logits = model.lm_head(h)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        total = loss
        if args.aux_loss > 0:
            from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import load_balancing_loss_func
            total = total + args.aux_loss * load_balancing_loss_func(
                out.router_logits, model.config.num_experts, model.config.num_experts_per_tok)
        if mtp:
            ml, _ = mtp_loss(model, mtp, h, x)
            total = total + args.mtp_weight * (ml + args.aux_loss * mtp.aux_loss())
            run_mtp += ml.item()
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(all_params, 1.0)
        opt.step()
        step += 1
        run_loss += loss.item()
        run_n += 1
        secs = elapsed0 + time.time() - t0
        last = step == args.steps or (args.max_minutes and secs > args.max_minutes * 60)
        if step % args.log_every == 0 or last:
            ev = eval_row() if (step % args.eval_every == 0 or last) else ["", "", "", ""]
            row = [step, step * args.batch * args.seq, round(secs, 1), f"{lr_at(step - 1, args):.3e}",
                   f"{run_loss / run_n:.4f}", ev[0], f"{run_mtp / run_n:.4f}" if mtp else "", ev[1], ev[2], ev[3]]
            with open(log_path, "a", newline="") as f:
                csv.writer(f).writerow(row)
            tps = step * args.batch * args.seq / max(secs, 1e-9)
            print(f"step {step} loss {run_loss / run_n:.4f} mtp {run_mtp / run_n:.4f} eval {ev} {secs:.0f}s "
                  f"{tps:.0f} tok/s", flush=True)
            run_loss, run_mtp, run_n = 0.0, 0.0, 0
        if step % args.ckpt_every == 0 or last:
            torch.save({"model": model.state_dict(), "mtp": mtp.mod.state_dict() if mtp else None,
                        "opt": opt.state_dict(), "rng": rng.bit_generator.state,
                        "torch_rng": torch.get_rng_state(), "step": step, "elapsed": secs, "args": vars(args)},
                       ckpt_path + ".tmp")
            os.replace(ckpt_path + ".tmp", ckpt_path)
        if last:
            break
    save_hf(model, args, mtp)
    plot(log_path, os.path.join(REPO, "models", "tern-tiny-loss.png"))


def save_hf(model, args, mtp=None):
    from safetensors.torch import load_file, save_file
    out = os.path.join(args.work, "hf")
    model.config.architectures = ["Qwen3_5MoeForCausalLM"]
    model.config.output_router_logits = False
    model.config.mtp_num_hidden_layers = 1 if mtp else 0
    model.save_pretrained(out, safe_serialization=True)
    if mtp:  # the mtp.* tensors go into the same file, as in Qwen3.5 checkpoints (transformers ignores them)
        path = os.path.join(out, "model.safetensors")
        sd = load_file(path)
        sd.update(mtp.checkpoint_tensors())
        save_file(sd, path, metadata={"format": "pt"})
    print(f"saved HF model -> {out}" + (" (with the MTP block)" if mtp else ""), flush=True)


def plot(log_path, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = list(csv.DictReader(open(log_path)))
    tr = [(int(r["tokens"]) / 1e6, float(r["train_loss"])) for r in rows if r["train_loss"]]
    ev = [(int(r["tokens"]) / 1e6, float(r["eval_loss"])) for r in rows if r["eval_loss"]]
    mev = [(int(r["tokens"]) / 1e6, float(r["mtp_eval_loss"])) for r in rows if r.get("mtp_eval_loss")]
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=80)
    ax.plot(*zip(*tr), label="train (mean over log interval)", lw=1)
    if ev:
        ax.plot(*zip(*ev), "o-", label="held-out", ms=3)
    if mev:
        ax.plot(*zip(*mev), "s-", label="MTP block, held-out (token t+2)", ms=3)
    ax.set_xlabel("tokens seen (millions)")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title("tern-tiny-q35moe training")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png)
    print(f"plot -> {png}")


# ----------------------------------------------------------------------------------------------- sample / eval
PROMPTS = ["In the beginning", "And the king said unto", "A wise man once said", "The little dog",
           "What is the meaning of life?"]
CHAT = [[{"role": "user", "content": 'What does "river" mean?'}],
        [{"role": "user", "content": "Tell me a saying."}],
        [{"role": "system", "content": "You are a helpful assistant."},
         {"role": "user", "content": "Quote a verse from Psalms 23."}]]


def stage_sample(args):
    import torch
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(args.threads)
    tok = load_tokenizer(args)
    model = AutoModelForCausalLM.from_pretrained(os.path.join(args.work, "hf"), dtype=torch.float32).eval()
    stop = [tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids(DOC_SEP)]
    lines = ["# tern-tiny-q35moe sample generations", "",
             "Made by `tools/train_tiny_model.py sample` with transformers (float32, CPU). Greedy = argmax; "
             "sampled = temperature 0.8, top-p 0.95, seed 0. At most 60 new tokens; stops at <|im_end|> or "
             "<|endoftext|>.", ""]

    def gen(text, sample):
        ids = tok(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        torch.manual_seed(0)
        kw = dict(do_sample=True, temperature=0.8, top_p=0.95, top_k=0) if sample else dict(do_sample=False)
        # Embedding rows past the real ids are padding (as in Qwen3.5): never let them be generated.
        pad_rows = list(range(len(tok), model.config.vocab_size))
        out = model.generate(ids, max_new_tokens=60, eos_token_id=stop, pad_token_id=stop[1],
                             suppress_tokens=pad_rows, **kw)
        return tok.decode(out[0, ids.shape[1]:], skip_special_tokens=False)
    for p in PROMPTS:
        for mode in (False, True):
            lines += [f"**{'sampled' if mode else 'greedy'}** — prompt `{p}`", "", "```", p + gen(p, mode), "```", ""]
    for msgs in CHAT:
        text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=False)
        for mode in (False, True):
            lines += [f"**chat, {'sampled' if mode else 'greedy'}** (thinking off) — `{msgs[-1]['content']}`", "",
                      "```", text + gen(text, mode), "```", ""]
    md = "\n".join(lines)
    print(md)
    with open(os.path.join(REPO, "models", "samples.md"), "w", encoding="utf-8") as f:
        f.write(md)


def stage_eval(args):
    import torch
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(os.path.join(args.work, "hf"), dtype=torch.float32)
    held = eval_windows(np.fromfile(os.path.join(args.work, "eval.u16"), dtype=np.uint16), args.seq, args.eval_windows)
    loss = evaluate(model, held)
    print(f"held-out loss {loss:.4f} nats/token, perplexity {math.exp(loss):.2f} "
          f"({held.shape[0]} windows x {args.seq} tokens)")
    # The same figure `tern perplexity -c N` and llama.cpp's perplexity tool compute: the text file tokenized once,
    # chunks of N tokens each from an empty state, the second half of each chunk scored.
    tok = load_tokenizer(args)
    text = open(args.ppl_file, encoding="utf-8").read()
    ids = tok(text, add_special_tokens=False)["input_ids"]
    n_ctx, first = args.ppl_ctx, args.ppl_ctx // 2
    nll, count = 0.0, 0
    with torch.no_grad():
        for ch in range(len(ids) // n_ctx):
            x = torch.tensor([ids[ch * n_ctx:(ch + 1) * n_ctx]])
            lp = torch.log_softmax(model(input_ids=x).logits[0].double(), dim=-1)
            tgt = x[0, first + 1:]
            nll -= lp[first:n_ctx - 1].gather(1, tgt[:, None]).sum().item()
            count += tgt.numel()
    mean = nll / count
    print(f"{os.path.basename(args.ppl_file)}: PPL {math.exp(mean):.4f}, mean NLL {mean:.4f} nats/token "
          f"({len(ids) // n_ctx} chunks of {n_ctx}, {len(ids)} tokens, transformers float32)")
    if args.ppl_json:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from ppl_llamacpp import merge_fixture
        merge_fixture(args.ppl_json, args.gguf, args.ppl_file, n_ctx, len(ids), "transformers",
                      {"ppl": math.exp(mean), "mean_nll": mean, "n_scored": count,
                       "weights": "float32 checkpoint (the GGUF holds them in F16)"})


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stages", nargs="+", choices=["tokenizer", "data", "train", "sample", "eval"])
    ap.add_argument("--work", default=os.path.join(REPO, "out", "tiny"))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--vocab", type=int, default=4000, help="real token ids (BPE + 33 added)")
    ap.add_argument("--vocab-padded", type=int, default=4096, help="embedding rows (Qwen pads too)")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--lin-k-heads", type=int, default=2)
    ap.add_argument("--lin-v-heads", type=int, default=4)
    ap.add_argument("--lin-head-dim", type=int, default=32)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--expert-ffn", type=int, default=64)
    ap.add_argument("--shared-ffn", type=int, default=128)
    ap.add_argument("--aux-loss", type=float, default=0.01)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=320)
    ap.add_argument("--max-minutes", type=float, default=0, help="stop early (and save) after this much time")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr", type=float, default=3e-4)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--eval-windows", type=int, default=16)
    ap.add_argument("--ckpt-every", type=int, default=25)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--init-gguf", default="", help="train: start from the trunk weights of this exported GGUF")
    ap.add_argument("--mtp-weight", type=float, default=0.3,
                    help="weight of the MTP block's loss (0: no MTP block); DeepSeek-V3 used 0.3 then 0.1")
    ap.add_argument("--mtp-lr-mult", type=float, default=3.0, help="LR multiplier for the MTP block's parameters")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 leaves the other core to builds)")
    ap.add_argument("--ppl-file", default=os.path.join(REPO, "models", "tern-tiny-heldout.txt"),
                    help="eval: text for the llama.cpp-style perplexity")
    ap.add_argument("--ppl-ctx", type=int, default=256, help="eval: perplexity chunk size")
    ap.add_argument("--ppl-json", default="", help="eval: merge the perplexity into this fixture (see ppl_llamacpp.py)")
    ap.add_argument("--gguf", default=os.path.join(REPO, "models", "tern-tiny-q35moe.gguf"),
                    help="eval: the exported model the --ppl-json fixture is recorded for")
    args = ap.parse_args()
    random.seed(args.seed)
    np.random.seed(args.seed)
    for s in args.stages:
        {"tokenizer": stage_tokenizer, "data": stage_data, "train": stage_train, "sample": stage_sample,
         "eval": stage_eval}[s](args)


if __name__ == "__main__":
    main()
