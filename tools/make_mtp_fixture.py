#!/usr/bin/env python3
"""Fixtures for a Qwen3.5-MoE multi-token-prediction (MTP / "nextn") block: a tiny random-weight model WITH an MTP
block (preset q35-mtp in fixturelib/presets.py: q35-ratio's widths at 4 layers), its BF16 GGUF made by llama.cpp's
own converter (MTP kept), and reference outputs of the MTP block from a PyTorch reference forward written from the
published definition (fixturelib/mtp_ref.py) and from llama.cpp's own MTP draft graph (fixturelib/mtp_llamacpp.py).

Steps:
  1. hf      tests/fixtures/hf/q35-mtp/: transformers' Qwen3_5MoeForCausalLM (every weight drawn from the preset's
             seed, rounded to a BF16-representable value) plus the mtp.* tensors real Qwen3.5-MoE checkpoints carry
             (mtp.fc, mtp.pre_fc_norm_embedding, mtp.pre_fc_norm_hidden, mtp.norm, mtp.layers.0.* = one
             full-attention decoder layer with per-expert keys), drawn from their own seeded generator with the
             trunk's rules; BF16 safetensors, config.json with mtp_num_hidden_layers = 1, the trained tokenizer
  2. gguf    tests/fixtures/models/q35-mtp.bf16.gguf: convert_hf_to_gguf.py (llama-cpp-python 0.3.36 sdist, via
             fixturelib/convert_shim.py) WITHOUT --no-mtp; checked: <arch>.nextn_predict_layers = 1, blk.4.nextn.*,
             and every MTP tensor equal to the checkpoint's (norms as 1 + w)
  3. refs    tests/fixtures/models/q35-mtp/: ref_hf.json + hf_len*.f32.bin (teacher-forced fp32 logits for prompts
             of 1, 5, 65 tokens, greedy continuations of len5 and len65; the tern-model-ref-v1 layout), and
             ref_mtp.json + mtp_*/draft_*.f32.bin: MTP logits of every prompt row and a 4-step greedy draft, from
             PyTorch and from llama.cpp (needs `import llama_cpp`); a prompt is redrawn while any trunk, MTP or
             draft row of either source nears a top-1 tie (top-2 gap < 0.02)
  Then tests/fixtures/models/q35-mtp/MANIFEST.json: every file's size and sha256, tool versions, measured diffs.

usage: python tools/make_mtp_fixture.py [--steps hf,gguf,refs] [--work /tmp/tern-fixtures] [--lcp-sdist PATH]
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_fixtures as mf  # noqa: E402  (near-tie margins, greedy checks, versions)
from fixturelib import convert, hfmodel, llamacpp, refs  # noqa: E402
from fixturelib import tokenizer as bpe  # noqa: E402
from fixturelib.mtp_ref import MtpRef  # noqa: E402
from fixturelib.presets import GREEDY_PROMPTS, MTP_PRESETS  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PRESET = MTP_PRESETS["q35-mtp"]
HF_OUT = ROOT / "tests/fixtures/hf" / PRESET.name
GGUF = ROOT / "tests/fixtures/models" / f"{PRESET.name}.bf16.gguf"
REF_OUT = ROOT / "tests/fixtures/models" / PRESET.name
PROMPT_LENGTHS = [1, 5, 65]   # q35-ratio's minus 63, 64 and 300 (bytes); MTP rows for every length >= 2
K_DRAFT = 4
LOOSE_GAP = 0.1                    # rows whose argmax llama.cpp's BF16 activation rounding (~0.05) might flip
MTP_SEED_OFFSET = 1_000_003        # the mtp.* tensors' generator: seed + this (the trunk's stays as build_model draws)
SIDE_FILES = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"]

ROW_CONVENTION = (
    "For a prompt x_0..x_{L-1} with trunk final-normed hidden states h_0..h_{L-1} (the vectors the trunk's LM head "
    "sees), MTP row r (r = 1..L-1) takes token x_r and hidden h_{r-1} at RoPE position r, with causal attention over "
    "MTP rows 1..r only (the MTP block's own KV cache; there is NO row for r = 0). Row r's logits predict x_{r+1}; "
    "mtp logits file row i is MTP row r = i + 1. Draft chain (K steps) after the prompt: t_1 = argmax of the trunk's "
    "logits at row L-1, u_1 = h_{L-1}; step s = 1..K is an MTP row at position L+s-1 with token t_s and hidden u_s, "
    "appended to the same MTP KV cache after rows 1..L-1; it gives logits m_s (draft file row s-1) and the MTP output "
    "hidden g_s (after mtp.norm); t_{s+1} = argmax(m_s), u_{s+1} = g_s. vLLM places MTP row r at position r-1 "
    "instead; that gives the same attention scores (RoPE depends on relative positions only), so the same logits. "
    "llama.cpp's server (common_speculative_impl_draft_mtp) additionally puts a row (x_0, zeros) at position 0, which "
    "these references do not (the published training objective has no such row); both sources here omit it.")


# ----------------------------------------------------------------------------------------------- 1. checkpoint

def bf16_exact(t: torch.Tensor) -> torch.Tensor:
    """f16 rounding (what hfmodel.build_model applies) then BF16: representable in both, so a BF16 file is exact."""
    return t.to(torch.float16).to(torch.bfloat16).to(torch.float32)


def mtp_shapes(sd: dict[str, torch.Tensor], cfg) -> dict[str, torch.Size]:
    """Names and shapes of the MTP tensors, with the checkpoint's names: mtp.layers.0.* copies the names and shapes
    of the trunk's first full-attention layer (per-expert keys, as save_pretrained writes them)."""
    h = cfg.hidden_size
    out = {"mtp.fc.weight": torch.Size([h, 2 * h]), "mtp.pre_fc_norm_embedding.weight": torch.Size([h]),
           "mtp.pre_fc_norm_hidden.weight": torch.Size([h]), "mtp.norm.weight": torch.Size([h])}
    src = f"model.layers.{cfg.layer_types.index('full_attention')}."
    for k, v in sd.items():
        if k.startswith(src):
            out["mtp.layers.0." + k[len(src):]] = v.shape
    return out


def draw_mtp(shapes: dict[str, torch.Size], hidden: int) -> dict[str, torch.Tensor]:
    """The trunk's initialisation rules (hfmodel._init, by name: norms as small offsets w of (1 + w), the router at
    router_gain, projections at init_gain / sqrt(fan_in)), own generator, names in sorted order."""
    g = torch.Generator().manual_seed(PRESET.seed + MTP_SEED_OFFSET)
    rule = {"mtp.pre_fc_norm_embedding.weight": "mtp.enorm.norm.weight",  # zero-centred RMSNorms like the others
            "mtp.pre_fc_norm_hidden.weight": "mtp.hnorm.norm.weight"}
    return {name: bf16_exact(hfmodel._init(rule.get(name, name), shapes[name], PRESET, hidden, g).to(torch.float32))
            for name in sorted(shapes)}


def step_hf(work: Path) -> dict:
    wdir = work / PRESET.name / "hf"
    if wdir.exists():
        shutil.rmtree(wdir)
    model = hfmodel.build_model(PRESET)
    with torch.no_grad():
        for _, prm in model.named_parameters():
            prm.copy_(bf16_exact(prm))
    model.save_pretrained(str(wdir), safe_serialization=True)
    bpe.save(bpe.train(PRESET.n_tokenizer), wdir, model_max_length=PRESET.hf_config["max_position_embeddings"])
    sd = {k: v.to(torch.bfloat16) for k, v in load_file(str(wdir / "model.safetensors")).items()}
    mtp = draw_mtp(mtp_shapes(sd, model.config), model.config.hidden_size)
    sd.update({k: v.to(torch.bfloat16) for k, v in mtp.items()})
    if HF_OUT.exists():
        shutil.rmtree(HF_OUT)
    HF_OUT.mkdir(parents=True)
    for f in SIDE_FILES:
        shutil.copy(wdir / f, HF_OUT / f)
    if json.loads((HF_OUT / "config.json").read_text()).get("mtp_num_hidden_layers") != 1:
        raise RuntimeError("config.json lacks mtp_num_hidden_layers = 1")
    save_file(sd, str(HF_OUT / "model.safetensors"), metadata={"format": "pt"})
    # The committed checkpoint must reload to exactly the model built (the references come from the reload).
    back = hfmodel.load_model(HF_OUT, PRESET.hf_arch)
    want = dict(model.named_parameters())
    for name, prm in back.named_parameters():
        if not torch.equal(prm, want[name]):
            raise RuntimeError(f"{HF_OUT}: {name} differs after save/load")
    print(f"  {HF_OUT.relative_to(ROOT)}: {len(sd)} tensors ({len(mtp)} mtp.*), "
          f"{(HF_OUT / 'model.safetensors').stat().st_size} bytes")
    return {"tensors": len(sd), "mtp_tensors": len(mtp)}


# ----------------------------------------------------------------------------------------------- 2. GGUF

def run_converter(lcpp: Path, outtype: str, out: Path, work: Path) -> None:
    """llama.cpp's converter as fixturelib/convert.py runs it, but keeping the MTP block (its default)."""
    log = work / PRESET.name / f"convert.{outtype}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(convert.SHIM), str(lcpp), str(HF_OUT), "--outtype", outtype, "--outfile", str(out)]
    with open(log, "w") as f:
        if subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode != 0:
            raise RuntimeError(f"convert_hf_to_gguf.py failed; see {log}")


def step_gguf(lcpp: Path, work: Path) -> dict:
    run_converter(lcpp, "bf16", GGUF, work)
    info = check_gguf(lcpp)
    print(f"  {GGUF.relative_to(ROOT)}: {GGUF.stat().st_size} bytes; {info['arch']}.nextn_predict_layers = 1, "
          f"{len(info['mtp_tensors'])} blk.{info['block_count'] - 1}.* tensors, "
          f"{len(info['checked_equal_to_checkpoint'])} checked equal to the checkpoint")
    return info


def check_gguf(lcpp: Path) -> dict:
    sys.path.insert(0, str(lcpp / "gguf-py"))
    from gguf import GGUFReader  # the converter's own gguf-py

    rd = GGUFReader(str(GGUF))

    def kv(key):
        f = rd.fields[key]
        return f.contents() if hasattr(f, "contents") else f.parts[f.data[0]].tolist()

    arch = kv("general.architecture")
    n_layer = PRESET.hf_config["num_hidden_layers"]
    if kv(f"{arch}.nextn_predict_layers") != 1 or kv(f"{arch}.block_count") != n_layer + 1:
        raise RuntimeError(f"{GGUF}: nextn_predict_layers {kv(f'{arch}.nextn_predict_layers')}, "
                           f"block_count {kv(f'{arch}.block_count')}")
    t = {x.name: x for x in rd.tensors}

    def arr(name):
        x = t[name]
        a = np.asarray(x.data)
        if x.tensor_type.name == "BF16":
            a = (a.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        return a.astype(np.float32).reshape([int(d) for d in reversed(x.shape)])

    ck = load_file(str(HF_OUT / "model.safetensors"))
    b = f"blk.{n_layer}."
    pairs = {  # gguf name -> (checkpoint name, norm stored as 1 + w)
        b + "nextn.eh_proj.weight": ("mtp.fc.weight", False),
        b + "nextn.enorm.weight": ("mtp.pre_fc_norm_embedding.weight", True),
        b + "nextn.hnorm.weight": ("mtp.pre_fc_norm_hidden.weight", True),
        b + "nextn.shared_head_norm.weight": ("mtp.norm.weight", True),
        b + "attn_norm.weight": ("mtp.layers.0.input_layernorm.weight", True),
        b + "post_attention_norm.weight": ("mtp.layers.0.post_attention_layernorm.weight", True),
        b + "attn_q.weight": ("mtp.layers.0.self_attn.q_proj.weight", False),
        b + "attn_k.weight": ("mtp.layers.0.self_attn.k_proj.weight", False),
        b + "attn_v.weight": ("mtp.layers.0.self_attn.v_proj.weight", False),
        b + "attn_output.weight": ("mtp.layers.0.self_attn.o_proj.weight", False),
        b + "attn_q_norm.weight": ("mtp.layers.0.self_attn.q_norm.weight", True),
        b + "attn_k_norm.weight": ("mtp.layers.0.self_attn.k_norm.weight", True),
        b + "ffn_gate_inp.weight": ("mtp.layers.0.mlp.gate.weight", False),
        b + "ffn_gate_inp_shexp.weight": ("mtp.layers.0.mlp.shared_expert_gate.weight", False),
        b + "ffn_up_shexp.weight": ("mtp.layers.0.mlp.shared_expert.up_proj.weight", False),
    }
    for gname, (cname, plus1) in pairs.items():
        want = ck[cname].float().numpy()
        want = (1.0 + want) if plus1 else want
        got = arr(gname)
        if got.size != want.size or not np.array_equal(got.reshape(-1), want.astype(np.float32).reshape(-1)):
            raise RuntimeError(f"{GGUF}: {gname} differs from {cname}")
    n_exp = PRESET.hf_config["num_experts"]
    down = np.stack([ck[f"mtp.layers.0.mlp.experts.{e}.down_proj.weight"].float().numpy() for e in range(n_exp)])
    if not np.array_equal(arr(b + "ffn_down_exps.weight").reshape(-1), down.reshape(-1)):
        raise RuntimeError(f"{GGUF}: {b}ffn_down_exps differs")
    nextn = sorted(n for n in t if n.startswith(b))
    return {"arch": arch, "nextn_predict_layers": 1, "block_count": n_layer + 1, "mtp_tensors": nextn,
            "checked_equal_to_checkpoint": sorted(pairs) + [b + "ffn_down_exps.weight"]}


# ----------------------------------------------------------------------------------------------- 3. references

def gap(lg: np.ndarray) -> float:
    return hfmodel.min_top2_gap(np.atleast_2d(lg))


def draw_prompt(n: int, model, ref: MtpRef, llm) -> dict:
    """The first draw of an n-token prompt whose trunk rows (make_fixtures' margins), greedy continuation, MTP rows
    and draft steps, in PyTorch and (when available) llama.cpp, all keep a top-2 gap of at least 0.02."""
    name = f"len{n}"
    for attempt in range(mf.MAX_ATTEMPTS):
        toks = hfmodel.prompt(PRESET, n, attempt)
        lg = hfmodel.teacher_forced(model, toks)
        if gap(lg) < mf.MIN_GAP_STORED:
            continue
        r = {"name": name, "attempt": attempt, "tokens": toks, "logits": lg, "greedy": None}
        if name in GREEDY_PROMPTS:
            cont = hfmodel.greedy(model, toks, PRESET.n_greedy)
            mf.check_greedy(f"{PRESET.name} {name}", cont)
            full = hfmodel.teacher_forced(model, toks + cont[:-1])[n - 1:]
            if [int(t) for t in full.argmax(axis=1)] != cont or gap(full) < mf.MIN_GAP_ARGMAX:
                continue
            r["greedy"] = cont
        if n >= 2:
            lg2, h = ref.trunk(toks)
            if not np.allclose(lg2, lg, rtol=0, atol=1e-5):  # h must be exactly what the LM head sees
                raise RuntimeError(f"{name}: lm_head(last_hidden_state) differs from the model's logits")
            r["h"] = h
            r["torch_mtp"] = ref.prompt_rows(toks, h)
            r["torch_draft_tokens"], r["torch_draft"] = ref.draft(toks, h, lg[n - 1], K_DRAFT)
            if min(gap(r["torch_mtp"]), gap(r["torch_draft"])) < mf.MIN_GAP_STORED:
                continue
            if llm is not None:
                # llama.cpp's CPU matmul rounds activations to BF16 against BF16 weights (logits move by ~0.05):
                # its own rows must keep the margin too, and agree with PyTorch on every argmax
                out = llm.run(toks, K_DRAFT)
                if min(gap(out["mtp_logits"]), gap(out["draft_logits"]), gap(out["trunk_logits"])) < mf.MIN_GAP_STORED:
                    continue
                if (out["draft_tokens"] != r["torch_draft_tokens"]
                        or not np.array_equal(out["mtp_logits"].argmax(1), r["torch_mtp"].argmax(1))
                        or not np.array_equal(out["trunk_logits"].argmax(1), lg.argmax(1))):
                    continue
                r["llamacpp"] = out
        return r
    raise RuntimeError(f"{PRESET.name} {name}: every prompt draw came near a top-1 tie")


def close_rows(*logits: np.ndarray) -> list[int]:
    """Rows whose top-2 gap is under LOOSE_GAP in any of the given [rows, V] arrays."""
    out = set()
    for lg in logits:
        top2 = np.sort(lg, axis=1)[:, -2:]
        out |= {int(i) for i in np.nonzero(top2[:, 1] - top2[:, 0] < LOOSE_GAP)[0]}
    return sorted(out)


def chain_g_diff(ref: MtpRef, toks: list[int], h: np.ndarray, o: dict) -> float:
    """max |g_s| difference over llama.cpp's draft steps, PyTorch recomputed on llama.cpp's own chain (its tokens
    and its g_s as the next step's hidden)."""
    n = len(toks)
    _, g = ref.rows(toks[1:] + o["draft_tokens"][:K_DRAFT], np.concatenate([h[:n], o["draft_g"][:K_DRAFT - 1]]),
                    list(range(1, n + K_DRAFT)))
    return float(np.abs(o["draft_g"] - g[n - 1:]).max())


def rows_file(name: str, a: np.ndarray) -> dict:
    rows = np.ascontiguousarray(a, dtype="<f4")
    rows.tofile(REF_OUT / name)
    return {"file": name, "dtype": "f32", "shape": list(rows.shape)}


def step_refs(lcpp: Path, work: Path) -> dict:
    REF_OUT.mkdir(parents=True, exist_ok=True)
    for f in REF_OUT.glob("*"):
        f.unlink()
    model = hfmodel.load_model(HF_OUT, PRESET.hf_arch)
    ck = load_file(str(HF_OUT / "model.safetensors"))
    ref = MtpRef(model, {k: v.float() for k, v in ck.items() if k.startswith("mtp.")})
    have_llama = llamacpp.available() is not None
    llm = llm32 = None
    if have_llama:
        from fixturelib.mtp_llamacpp import LlamaMtp
        llm = LlamaMtp(GGUF, n_threads=2)
        # The same checkpoint converted to F32 (not committed): llama.cpp then computes in f32 throughout, so its
        # graph must match the PyTorch reference to f32 rounding; the committed BF16 file cannot show that (llama.cpp
        # rounds activations to BF16 for BF16 weights).
        f32 = work / PRESET.name / f"{PRESET.name}.f32.gguf"
        run_converter(lcpp, "f32", f32, work)
        llm32 = LlamaMtp(f32, n_threads=2)
    versions = mf.versions(lcpp)
    hf_entries, greedy, draws, mtp_entries = [], [], {}, []
    diffs = {"mtp_logits": 0.0, "draft_logits": 0.0, "draft_g": 0.0, "trunk_h_vs_llamacpp_h_nextn": 0.0,
             "trunk_logits": 0.0}
    diffs32 = dict(diffs)
    min_gaps = {"torch": np.inf, "llamacpp": np.inf}
    try:
        for n in PROMPT_LENGTHS:
            r = draw_prompt(n, model, ref, llm)
            name, toks = r["name"], r["tokens"]
            draws[name] = r["attempt"]
            hf_entries.append(refs.prompt_entry(REF_OUT, "hf", name, toks, r["logits"]))
            if r["greedy"] is not None:
                greedy.append({"prompt": name, "n_new": PRESET.n_greedy, "tokens": r["greedy"],
                               "distinct": len(set(r["greedy"]))})
            msg = f"  {name}: draw {r['attempt']}, trunk min top-2 gap {gap(r['logits']):.3f}"
            if n < 2:
                print(msg)
                continue
            tm, td = r["torch_mtp"], r["torch_draft"]
            e = {"name": name, "tokens": toks,
                 "mtp": {"first_position": 1,
                         "torch": {**rows_file(f"mtp_torch_{name}.f32.bin", tm),
                                   "argmax": [int(a) for a in tm.argmax(axis=1)]}},
                 "draft": {"k": K_DRAFT, "first_position": n,
                           "torch": {"tokens": r["torch_draft_tokens"],
                                     **rows_file(f"draft_torch_{name}.f32.bin", td)}},
                 "min_top2_gap": {"torch": min(gap(tm), gap(td))}}
            min_gaps["torch"] = min(min_gaps["torch"], e["min_top2_gap"]["torch"])
            msg += f"; MTP torch gap {e['min_top2_gap']['torch']:.3f}, draft {r['torch_draft_tokens']}"
            if "llamacpp" in r:
                o = r["llamacpp"]
                lm, ld = o["mtp_logits"], o["draft_logits"]
                e["mtp"]["llamacpp"] = {**rows_file(f"mtp_llamacpp_{name}.f32.bin", lm),
                                        "argmax": [int(a) for a in lm.argmax(axis=1)]}
                e["draft"]["llamacpp"] = {"tokens": o["draft_tokens"],
                                          **rows_file(f"draft_llamacpp_{name}.f32.bin", ld)}
                e["min_top2_gap"]["llamacpp"] = min(gap(lm), gap(ld))
                e[f"rows_top2_gap_below_{LOOSE_GAP}"] = {
                    "mtp": close_rows(tm, lm), "draft": close_rows(td, ld)}
                min_gaps["llamacpp"] = min(min_gaps["llamacpp"], e["min_top2_gap"]["llamacpp"])
                d = {"mtp_logits": float(np.abs(lm - tm).max()),
                     "draft_logits": float(np.abs(ld - td).max()),
                     "draft_g": chain_g_diff(ref, toks, r["h"], o),
                     "trunk_h_vs_llamacpp_h_nextn": float(np.abs(o["h"] - r["h"]).max()),
                     "trunk_logits": float(np.abs(o["trunk_logits"] - r["logits"]).max())}
                e["max_abs_diff_torch_vs_llamacpp"] = d
                e["argmax_equal"] = {"mtp": e["mtp"]["torch"]["argmax"] == e["mtp"]["llamacpp"]["argmax"],
                                     "draft_tokens": r["torch_draft_tokens"] == o["draft_tokens"]}
                for k, v in d.items():
                    diffs[k] = max(diffs[k], v)
                msg += (f"; llama.cpp gap {e['min_top2_gap']['llamacpp']:.3f}, max|diff| mtp {d['mtp_logits']:.2e} "
                        f"draft {d['draft_logits']:.2e} h {d['trunk_h_vs_llamacpp_h_nextn']:.2e}")
                if not all(e["argmax_equal"].values()):
                    raise RuntimeError(f"{name}: torch and llama.cpp disagree on an argmax: {e['argmax_equal']}")
                o32 = llm32.run(toks, K_DRAFT)
                d32 = {"mtp_logits": float(np.abs(o32["mtp_logits"] - tm).max()),
                       "draft_logits": float(np.abs(o32["draft_logits"] - td).max()),
                       "draft_g": chain_g_diff(ref, toks, r["h"], o32),
                       "trunk_h_vs_llamacpp_h_nextn": float(np.abs(o32["h"] - r["h"]).max()),
                       "trunk_logits": float(np.abs(o32["trunk_logits"] - r["logits"]).max())}
                if o32["draft_tokens"] != r["torch_draft_tokens"]:
                    raise RuntimeError(f"{name}: llama.cpp (F32 GGUF) drafts {o32['draft_tokens']}, "
                                       f"PyTorch {r['torch_draft_tokens']}")
                e["max_abs_diff_torch_vs_llamacpp_f32_gguf"] = d32
                for k, v in d32.items():
                    diffs32[k] = max(diffs32[k], v)
                msg += f"; F32 GGUF: mtp {d32['mtp_logits']:.1e}"
            mtp_entries.append(e)
            print(msg)
    finally:
        for x in (llm, llm32):
            if x is not None:
                x.close()
    if have_llama and max(diffs32.values()) > 1e-3:
        raise RuntimeError(f"llama.cpp on the F32 GGUF differs from the PyTorch reference by more than f32 rounding: "
                           f"{diffs32}")

    header = {"preset": PRESET.name, "hf_config": PRESET.hf_config, "init_gain": PRESET.init_gain,
              "logit_gain": PRESET.logit_gain, "router_gain": PRESET.router_gain, "seed": PRESET.seed,
              "n_tokenizer": PRESET.n_tokenizer, "checkpoint": str(HF_OUT.relative_to(ROOT)) + " (BF16)",
              "prompt_draws": draws,
              "min_top2_gap": {"stored_rows": mf.MIN_GAP_STORED, "other_rows_and_greedy": mf.MIN_GAP_ARGMAX},
              "versions": versions, "greedy_matches_teacher_forced": {g["prompt"]: True for g in greedy}}
    refs.write_ref(REF_OUT, "hf", header, hf_entries, greedy)

    doc = {
        "format": "tern-mtp-ref-v1", "preset": PRESET.name, "checkpoint": str(HF_OUT.relative_to(ROOT)),
        "gguf": GGUF.name, "gguf_sha256": refs.sha256(GGUF), "n_vocab": PRESET.hf_config["vocab_size"],
        "k_draft": K_DRAFT, "row_convention": ROW_CONVENTION,
        "how": {
            "torch": "tools/fixturelib/mtp_ref.py: fp32, the committed BF16 checkpoint widened to f32; "
                     "e = pre_fc_norm_embedding(embed_tokens(x)), h' = pre_fc_norm_hidden(h), x = fc(cat([e, h'])), "
                     "x = one full-attention Qwen3.5-MoE decoder layer (transformers' Qwen3_5MoeDecoderLayer loaded "
                     "with mtp.layers.0.*, causal over the MTP rows), g = mtp.norm(x), logits = lm_head(g); RMSNorms "
                     "scale by (1 + w); h from the trunk (transformers' last_hidden_state, after model.norm)",
            "llamacpp": "tools/fixturelib/mtp_llamacpp.py: llama-cpp-python's libllama through ctypes on the "
                        "committed GGUF; model loaded with load_mtp = true; target context with "
                        "llama_set_embeddings_nextn(ctx, true, masked=false) gives h (its h_nextn rows); MTP context "
                        "with ctx_type = LLAMA_CONTEXT_TYPE_MTP, ctx_other = the target context, n_rs_seq = 0 and "
                        "llama_set_embeddings_nextn(ctx, true, masked=true) (its h_nextn = g), fed llama_batch_ext "
                        "entries carrying a token and an embedding row (llama_batch_ext_set_embd_token), "
                        "llama_process(DECODE): rows 1..L-1 in one batch with llama.cpp's OWN h, then one batch per "
                        "draft step; t_1 = argmax of llama.cpp's own trunk logits; F32 K/V caches, no flash "
                        "attention, 2 threads, fresh contexts per prompt",
            "files": "mtp_<source>_<prompt>.f32.bin: [L-1, n_vocab] MTP logits, row i = MTP row r = i + 1 (position "
                     "i + 1); draft_<source>_<prompt>.f32.bin: [K, n_vocab] logits of draft steps 1..K (positions "
                     "L..L+K-1); draft tokens are t_1..t_{K+1} (t_1 from the trunk). Raw little-endian f32, "
                     "row-major, no header.",
            "near_ties": f"every trunk row, MTP row and draft step of both sources keeps a top-2 gap >= "
                         f"{mf.MIN_GAP_STORED} (prompts redrawn until so) and the two sources agree on every argmax, "
                         f"so no rows need skipping against the PyTorch reference. rows_top2_gap_below_{LOOSE_GAP} "
                         f"(per prompt: file row indices of mtp and draft) lists the rows whose gap is under "
                         f"{LOOSE_GAP} in either source: an engine computing in f32 may legitimately disagree there "
                         f"with llama.cpp's BF16-rounded argmax",
        },
        "min_top2_gap": {k: (None if v == np.inf else float(v)) for k, v in min_gaps.items()},
        "max_abs_diff_torch_vs_llamacpp": diffs if have_llama else None,
        "max_abs_diff_torch_vs_llamacpp_f32_gguf": diffs32 if have_llama else None,
        "diff_note": "max_abs_diff_torch_vs_llamacpp: llama.cpp on the committed BF16 GGUF, whose CPU matmul rounds "
                     "the activations to BF16 against BF16 weights (ggml's vec_dot_type), so its logits move by a few "
                     "hundredths; compare with a tolerance of that order (or argmax). "
                     "max_abs_diff_torch_vs_llamacpp_f32_gguf: the same checkpoint converted to F32 (not committed), "
                     "where llama.cpp computes in f32: the graphs agree to f32 rounding. draft_g: the MTP output "
                     "hidden of each draft step, PyTorch recomputed on llama.cpp's own chain.",
        "llamacpp": "ok" if have_llama else "skipped (llama-cpp-python not importable)",
        "versions": versions, "prompts": mtp_entries,
    }
    (REF_OUT / "ref_mtp.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"  max |torch - llama.cpp| (BF16 GGUF): {json.dumps(diffs)}")
    print(f"  max |torch - llama.cpp| (F32 GGUF):  {json.dumps(diffs32)}")
    return {"prompt_draws": draws, "max_abs_diff_torch_vs_llamacpp": diffs if have_llama else None,
            "max_abs_diff_torch_vs_llamacpp_f32_gguf": diffs32 if have_llama else None,
            "min_top2_gap": doc["min_top2_gap"], "llamacpp": doc["llamacpp"]}


def files() -> dict:
    fs = sorted(HF_OUT.glob("*")) + [GGUF] + sorted(f for f in REF_OUT.glob("*") if f.name != "MANIFEST.json")
    return {str(f.relative_to(ROOT)): {"bytes": f.stat().st_size, "sha256": refs.sha256(f)} for f in fs if f.exists()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", default="hf,gguf,refs")
    ap.add_argument("--work", default="/tmp/tern-fixtures", help="intermediate files (WORK/q35-mtp)")
    ap.add_argument("--lcp-sdist", default=None, help="llama-cpp-python sdist (.tar.gz or unpacked dir)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    work = Path(a.work)
    steps = a.steps.split(",")
    lcpp = convert.locate_llama_cpp_src(a.lcp_sdist, work)
    man_path = REF_OUT / "MANIFEST.json"
    manifest = json.loads(man_path.read_text()) if man_path.exists() else {}
    print(f"[{PRESET.name}]")
    if "hf" in steps:
        manifest = {"hf": step_hf(work)}
    if "gguf" in steps:
        manifest["gguf"] = step_gguf(lcpp, work)
    if "refs" in steps:
        manifest["refs"] = step_refs(lcpp, work)
    manifest.update({"preset": PRESET.name, "seed": PRESET.seed, "mtp_seed": PRESET.seed + MTP_SEED_OFFSET,
                     "versions": mf.versions(lcpp), "files": files(),
                     "command": " ".join(["python tools/make_mtp_fixture.py"] + sys.argv[1:])})
    REF_OUT.mkdir(parents=True, exist_ok=True)
    man_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    total = sum(v["bytes"] for v in manifest["files"].values()) + man_path.stat().st_size
    print(f"q35-mtp fixtures: {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
