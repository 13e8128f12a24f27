#!/usr/bin/env python3
"""GLM-5 family fixtures (HF glm_moe_dsa / GGUF glm-dsa): tiny random-weight models built by transformers' own
GlmMoeDsaForCausalLM (presets in fixturelib/glm.py), their fp32 references, llama.cpp's conversions and
quantizations, and llama.cpp's teacher-forced logits on each GGUF.

Per preset:
  1. hf        checkpoint (F16 safetensors, weights f16-representable; router / bias / indexer.weights_proj F32) +
               GLM-style BPE tokenizer in WORK/<preset>/hf, copied to tests/fixtures/hf/<preset>;
               OUT/<preset>/ref_hf.json + hf_len*.f32.bin: teacher-forced fp32 logits for prompts of 1, 5, k, k+1, 40
               and 120 tokens (k = index_topk), 30-token greedy continuations of len5 and len40 (cached decode,
               checked equal to teacher forcing); a prompt is redrawn while a row nears a top-1 tie, a continuation
               loops, any indexer row nears a tie at its top-k cut, or any router nears a tie at its top-k cut.
               OUT/<preset>/indexer_topk.json: layer 0's selected key positions (and scores) for a few query rows.
               The header records that DSA matters: the same prompts with index_topk >= length give other logits.
  2. gguf      OUT/<preset>.<type>.gguf by llama.cpp's convert_hf_to_gguf.py (pre-tokenizer forced to glm4, MTP
               kept); the F32 conversion stays in WORK (same weights as the F16 file: tests upcast that)
  3. llamacpp  quantized types by llama-quantize from the F32 conversion; OUT/<preset>/ref_llamacpp_<type>.json +
               bins (last 4 rows of every prompt) on every GGUF, committed or work-only; through llama-cpp-python when
               it imports, else through fixturelib/llamacpp_logits.cpp compiled against llama.cpp's static build
               (which also records, in ref_llamacpp_f32.json, how far llama.cpp's F32 logits move with an F32
               cache and with transformers' q_a/kv_a norm eps set to rms_norm_eps).
Then OUT/MANIFEST.json's presets.<preset> entry: files with size and sha256, per-step status, versions.

usage: python tools/make_glm_fixtures.py [--presets glm5-toy,glm52-toy] [--steps hf,gguf,llamacpp]
                                         [--work /tmp/tern-fixtures] [--lcp-sdist PATH] [--llama-dir DIR]
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import shutil
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixturelib import convert, glm, refs  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

MIN_GAP_STORED = 0.02    # top-1 vs top-2 logit, stored rows (as make_fixtures.py)
MIN_GAP_ARGMAX = 0.004   # every other row and the greedy continuations
MIN_ROUTER_GAP = 1e-4    # top_k-th vs (top_k+1)-th router selection score (sigmoid + bias)
MAX_ATTEMPTS = 80


def indexer_margin(n_rows: int) -> float:
    """Smallest allowed (k-th - (k+1)-th) indexer score gap relative to the row's largest |score|. 1e-4 for up to
    48 rows; 2e-5 for the 120-token prompt and the len40 continuation (over ~300 cut rows a 1e-4 margin is met by
    <5% of draws; fp32 engines agree with transformers' scores to ~1e-6 relative)."""
    return 1e-4 if n_rows <= 48 else 2e-5


def versions(lcpp: Path | None, backend: str | None = None) -> dict:
    import tokenizers
    import transformers
    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
            "numpy": np.__version__, "gguf_py (converter's)": convert.gguf_py_version(lcpp) if lcpp else None,
            "llama_cpp_sdist": convert.SDIST, "llama.cpp logits via": backend}


def varied(toks: list[int]) -> bool:
    """A continuation must be varied (at least half its tokens distinct): a loop tests little of the decode."""
    return len(set(toks)) >= len(toks) // 2 and max(toks.count(t) for t in set(toks)) <= len(toks) // 5


def gaps_ok(p: glm.GlmPreset, lg: np.ndarray, rec: dict, first: int) -> tuple[bool, dict]:
    k = p.hf_config["index_topk"]
    ig = glm.indexer_cut_gaps(rec, k)
    st = {"min_top2_gap_stored": glm.min_top2_gap(lg[first:]), "min_top2_gap_all": glm.min_top2_gap(lg),
          "indexer_cut_gap_rel": min(ig.values()) if ig else None, "router_cut_gap": glm.router_cut_gap(rec)}
    ok = (st["min_top2_gap_stored"] >= MIN_GAP_STORED and st["min_top2_gap_all"] >= MIN_GAP_ARGMAX
          and (st["indexer_cut_gap_rel"] is None or st["indexer_cut_gap_rel"] >= indexer_margin(lg.shape[0])) and st["router_cut_gap"] >= MIN_ROUTER_GAP)
    return ok, st


def reference_prompt(p: glm.GlmPreset, model, n: int):
    name = f"len{n}"
    for attempt in range(MAX_ATTEMPTS):
        toks = glm.prompt(p, n, attempt)
        lg, rec = glm.teacher_forced(model, toks)
        ok, st = gaps_ok(p, lg, rec, refs.first_stored_row(n))
        if not ok:
            continue
        st["bias_changes_routing"] = glm.bias_changes_routing(rec)
        if name not in p.greedy_prompts:
            return attempt, toks, lg, rec, st, None
        cont = glm.greedy(model, toks, p.n_greedy)
        if not varied(cont):
            continue
        # The cached decode must agree with one teacher-forced pass over prompt + continuation, away from ties.
        full, frec = glm.teacher_forced(model, toks + cont[:-1])
        gap = glm.min_top2_gap(full[n - 1:])
        ig = min(glm.indexer_cut_gaps(frec, p.hf_config["index_topk"]).values())
        rg = glm.router_cut_gap(frec)
        if ([int(t) for t in full[n - 1:].argmax(axis=1)] == cont and gap >= MIN_GAP_ARGMAX
                and ig >= indexer_margin(full.shape[0]) and rg >= MIN_ROUTER_GAP):
            st.update({"greedy_min_top2_gap": gap, "greedy_indexer_cut_gap_rel": ig, "greedy_router_cut_gap": rg})
            return attempt, toks, lg, rec, st, cont
    raise RuntimeError(f"{p.name} {name}: every prompt draw came near a tie")


def shared_sources(types: list[str]) -> dict:
    """shared layer -> the full layer whose top-k it reuses (the most recent full layer)."""
    out, last = {}, None
    for i, t in enumerate(types):
        if t == "full":
            last = i
        else:
            out[str(i)] = last
    return out


def topk_record(p: glm.GlmPreset, name: str, toks: list[int], rec: dict) -> list[dict]:
    """Layer 0's selection for the first row that drops a key, the middle row and the last row."""
    k = p.hf_config["index_topk"]
    r = rec["indexer"][0]
    n = len(toks)
    rows = []
    for t in sorted({k, n // 2, n - 1}):
        if t < k or t >= n:
            continue
        vis = r["scores"][t, : t + 1]
        srt = torch.sort(vis, descending=True).values
        rows.append({"prompt": name, "layer": 0, "query": t, "n_visible": t + 1,
                     "selected": sorted(int(x) for x in r["topk"][t].tolist()),
                     "dropped": sorted(set(range(t + 1)) - set(int(x) for x in r["topk"][t].tolist())),
                     "cut_gap_rel": float(srt[k - 1] - srt[k]) / float(vis.abs().max()),
                     "scores": [float(x) for x in vis.tolist()]})
    return rows


def step_hf(p: glm.GlmPreset, work: Path, out: Path, hf_out: Path, lcpp: Path | None) -> dict:
    hf_dir = work / p.name / "hf"
    summary = glm.save_checkpoint(p, hf_dir)
    dst = hf_out / p.name
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(hf_dir, dst)
    for f in dst.iterdir():
        f.chmod(0o644)
    model = glm.load_model(hf_dir)
    k = p.hf_config["index_topk"]
    pdir = out / p.name
    pdir.mkdir(parents=True, exist_ok=True)
    entries, greedy, stats, draws, topk_rows, effect = [], [], {}, {}, [], {}
    for n in glm.prompt_lengths(p):
        name = f"len{n}"
        draws[name], toks, lg, rec, st, cont = reference_prompt(p, model, n)
        entries.append(refs.prompt_entry(pdir, "hf", name, toks, lg))
        stats[name] = st
        print(f"  {p.name} {name}: draw {draws[name]}, max|logit| {np.abs(lg).max():.2f}, "
              f"top-2 gap {st['min_top2_gap_all']:.4f}, indexer cut gap {st['indexer_cut_gap_rel']:.2e}, "
              f"router gap {st['router_cut_gap']:.2e}, bias changes {st['bias_changes_routing']:.0%} of routings")
        if cont is not None:
            greedy.append({"prompt": name, "n_new": p.n_greedy, "tokens": cont, "distinct": len(set(cont))})
            print(f"  {p.name} greedy {name}: {len(set(cont))} distinct of {p.n_greedy}: {cont}")
        if n > k:
            topk_rows += topk_record(p, name, toks, rec)
            with glm.topk_raised(model, 10 ** 6):
                dense, _ = glm.teacher_forced(model, toks)
            d = np.abs(dense - lg).max(axis=1)
            effect[name] = {"max_abs_logit_diff": float(d.max()),
                            "max_abs_logit_diff_rows_below_k": float(d[:k].max()),  # fp32 noise only
                            "first_row_differing_by_1e-3": int(np.argmax(d > 1e-3)) if (d > 1e-3).any() else None,
                            "rows_with_other_argmax": int((dense.argmax(1) != lg.argmax(1)).sum())}
            e = effect[name]
            print(f"  {p.name} {name}: index_topk raised to >= length changes the logits by up to "
                  f"{e['max_abs_logit_diff']:.3f} (rows < k: {e['max_abs_logit_diff_rows_below_k']:.1e}; first row "
                  f"off by > 1e-3: {e['first_row_differing_by_1e-3']}, {e['rows_with_other_argmax']} argmax changes)")
    cfg = model.config
    header = {"preset": p.name, "hf_config": p.hf_config, "indexer_types": cfg.indexer_types,
              "mlp_layer_types": cfg.mlp_layer_types, "shared_layer_reuses": shared_sources(cfg.indexer_types),
              "mtp_block": (f"model.layers.{cfg.num_hidden_layers}.* in the safetensors (ignored by transformers)"
                            if p.mtp else None),
              "init_gain": p.init_gain, "logit_gain": p.logit_gain, "router_gain": p.router_gain,
              "bias_std": p.bias_std, "seed": p.seed, "n_tokenizer": p.n_tokenizer, "prompt_draws": draws,
              "margins": {"min_top2_gap_stored_rows": MIN_GAP_STORED, "min_top2_gap_other_rows": MIN_GAP_ARGMAX,
                          "indexer_cut_gap_rel": "1e-4 (<= 48 rows), 2e-5 (longer)",
                          "router_cut_gap": MIN_ROUTER_GAP},
              "prompt_stats": stats,
              "indexer_effect": {"how": "same prompt, every indexer's index_topk raised to 10^6 (dense causal "
                                        "attention); rows with <= k keys change only by fp32 noise (the eager "
                                        "expert loop batches other tokens with them)", **effect},
              "versions": versions(lcpp), "greedy_matches_teacher_forced": {g["prompt"]: True for g in greedy},
              "how": "GlmMoeDsaForCausalLM.from_pretrained(dtype=float32, attn_implementation='eager', "
                     "experts_implementation='eager'); teacher forcing = one forward, use_cache=False; greedy = "
                     "prefill + one-token steps with the DynamicCache (latent KV + indexer key cache)"}
    refs.write_ref(pdir, "hf", header, entries, greedy)
    (pdir / "indexer_topk.json").write_text(json.dumps({
        "preset": p.name, "index_topk": k, "indexer_types": cfg.indexer_types,
        "note": "layer 0's indexer on the reference prompts (ref_hf.json tokens): for query row `query` (0-based "
                "position), the key positions it selects (`selected`, sorted), the causal keys it drops, its "
                "scores for keys 0..query (transformers fp32, after ReLU and head weighting, before the mask), and "
                "the gap between the k-th and (k+1)-th score relative to max |score|",
        "rows": topk_rows}, indent=1) + "\n")
    return {"checkpoint": summary, "prompt_draws": draws, "indexer_effect": effect,
            "greedy_distinct": {g["prompt"]: g["distinct"] for g in greedy}}


def step_gguf(p: glm.GlmPreset, work: Path, out: Path, lcpp: Path) -> dict:
    status = {}
    for t in p.gguf_types + p.work_only:
        dst = (work / p.name if t in p.work_only else out) / f"{p.name}.{t}.gguf"
        glm.convert(lcpp, work / p.name / "hf", t, dst, work / p.name / f"convert.{t}.log")
        status[t] = "ok" + (" (work only, not committed)" if t in p.work_only else "")
        print(f"  {dst}: {dst.stat().st_size} bytes")
    return status


def gguf_path(p: glm.GlmPreset, t: str, work: Path, out: Path) -> Path:
    return (work / p.name if t in p.work_only else out) / f"{p.name}.{t}.gguf"


def llamacpp_entry(pdir: Path, t: str, name: str, toks: list[int], lg: np.ndarray) -> dict:
    first = glm.first_stored_row(len(toks), "llamacpp")
    rows = np.ascontiguousarray(lg[first:], dtype="<f4")
    fname = f"llamacpp_{t}_{name}.f32.bin"
    rows.tofile(pdir / fname)
    return {"name": name, "tokens": [int(x) for x in toks], "argmax": [int(a) for a in lg.argmax(axis=1)],
            "logits": {"file": fname, "dtype": "f32", "shape": list(rows.shape), "first_row": first}}


def step_llamacpp(p: glm.GlmPreset, work: Path, out: Path, lcpp: Path, llama_dir: Path | None) -> dict:
    status = {}
    backend, exe = glm.llamacpp_backend(llama_dir, work)
    if p.quant_types:
        f32 = work / p.name / f"{p.name}.f32.gguf"
        if not f32.exists():
            glm.convert(lcpp, work / p.name / "hf", "f32", f32, work / p.name / "convert.f32.log")
        for t in p.quant_types:
            dst = out / f"{p.name}.{t}.gguf"
            how = glm.quantize(f32, dst, t, llama_dir)
            status[t] = f"ok ({how} from f32)"
            print(f"  {dst}: {dst.stat().st_size} bytes; {how}")
    pdir = out / p.name
    for f in list(pdir.glob("llamacpp_*.bin")) + list(pdir.glob("ref_llamacpp_*.json")):
        f.unlink()
    hf_ref = json.loads((pdir / "ref_hf.json").read_text())
    hf_logits = {pr["name"]: np.fromfile(pdir / pr["logits"]["file"], dtype="<f4").reshape(pr["logits"]["shape"])
                 for pr in hf_ref["prompts"]}
    n_vocab = p.hf_config["vocab_size"]
    agreement = {}
    if exe is not None and "f32" in p.gguf_types + p.work_only:
        status["diagnostics_f32"] = f32_diagnostics(p, gguf_path(p, "f32", work, out), hf_ref, exe, work)
        print(f"  {p.name} F32 diagnostics: {status['diagnostics_f32']}")
    for t in p.gguf_types + p.quant_types + p.work_only:
        gg = gguf_path(p, t, work, out)
        toks = [pr["tokens"] for pr in hf_ref["prompts"]]
        lgs = glm.llamacpp_teacher_forced(gg, toks, exe, n_vocab)
        entries, agree, maxd = [], [], {}
        for pr, lg in zip(hf_ref["prompts"], lgs):
            entries.append(llamacpp_entry(pdir, t, pr["name"], pr["tokens"], lg))
            agree += [int(a == b) for a, b in zip(lg.argmax(axis=1), pr["argmax"])]
            first = pr["logits"]["first_row"]
            common = max(first, glm.first_stored_row(len(pr["tokens"]), "llamacpp"))
            maxd[pr["name"]] = float(np.abs(lg[common:] - hf_logits[pr["name"]][common - first:]).max())
        agreement[t] = {"top1_agreement_with_hf": sum(agree) / len(agree), "positions": len(agree),
                        "max_abs_logit_diff_vs_hf_last4_rows": maxd}
        header = {"preset": p.name, "gguf": gg.name, "gguf_sha256": refs.sha256(gg), "type": t,
                  "gguf_committed": t not in p.work_only, "versions": versions(lcpp, backend),
                  "rows_kept": "the last 4 rows of every prompt (first_row); argmax covers every position",
                  "vs_transformers": agreement[t],
                  **({"diagnostics": status["diagnostics_f32"]} if t == "f32" and "diagnostics_f32" in status
                     else {}),
                  "how": "llama.cpp (CPU, 2 threads), context as llama-cpp-python's Llama(n_ctx=max(512, n), "
                         "n_batch=n_ubatch=n_ctx, logits_all=True, flash_attn=False; F16 KV and indexer-key "
                         "cache), one llama_decode of the whole prompt in a fresh context"}
        refs.write_ref(pdir, f"llamacpp_{t}", header, entries, None)
        print(f"  {p.name} ref_llamacpp_{t}.json: top-1 agreement with transformers "
              f"{agreement[t]['top1_agreement_with_hf']:.3f} over {len(agree)} positions; max |diff| (last 4 rows) "
              + ", ".join(f"{k} {v:.3g}" for k, v in maxd.items()))
    status["agreement"] = agreement
    status["backend"] = backend
    return status


def f32_diagnostics(p: glm.GlmPreset, f32: Path, hf_ref: dict, exe: Path, work: Path) -> dict:
    """Where llama.cpp's F32 logits differ from transformers': max |diff| over all rows and prompts of
    (a) transformers with q_a/kv_a RMSNorm eps 1e-6 (its default) vs rms_norm_eps (llama.cpp's, the only eps in
    the GGUF), (b) llama.cpp with its default F16 KV + indexer-key cache vs transformers, (c) llama.cpp with an F32
    cache vs transformers at eps = rms_norm_eps."""
    toks = [pr["tokens"] for pr in hf_ref["prompts"]]
    model = glm.load_model(work / p.name / "hf")
    hf = [glm.teacher_forced(model, t)[0] for t in toks]
    for layer in model.model.layers:
        layer.self_attn.q_a_layernorm.variance_epsilon = p.hf_config["rms_norm_eps"]
        layer.self_attn.kv_a_layernorm.variance_epsilon = p.hf_config["rms_norm_eps"]
    hf_eps = [glm.teacher_forced(model, t)[0] for t in toks]
    n_vocab = p.hf_config["vocab_size"]
    lc16 = glm.llamacpp_teacher_forced(f32, toks, exe, n_vocab)
    lc32 = glm.llamacpp_teacher_forced(f32, toks, exe, n_vocab, kv_f32=True)

    def mx(a, b):
        return float(max(np.abs(x - y).max() for x, y in zip(a, b)))
    return {"hf_qa_kva_eps_1e-6_vs_rms_norm_eps": mx(hf, hf_eps),
            "llamacpp_f16_cache_vs_hf": mx(lc16, hf),
            "llamacpp_f32_cache_vs_hf": mx(lc32, hf),
            "llamacpp_f32_cache_vs_hf_with_rms_norm_eps": mx(lc32, hf_eps)}


def files_of(p: glm.GlmPreset, out: Path, hf_out: Path) -> dict:
    fs = sorted(out.glob(f"{p.name}.*.gguf")) + sorted((out / p.name).glob("*"))
    res = {str(f.relative_to(out)): {"bytes": f.stat().st_size, "sha256": refs.sha256(f)} for f in fs}
    for f in sorted((hf_out / p.name).glob("*")):
        res[str(f.relative_to(out.parent))] = {"bytes": f.stat().st_size, "sha256": refs.sha256(f)}
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", default=",".join(glm.GLM_PRESETS))
    ap.add_argument("--steps", default="hf,gguf,llamacpp")
    ap.add_argument("--work", default="/tmp/tern-fixtures")
    ap.add_argument("--out", default=str(ROOT / "tests/fixtures/models"))
    ap.add_argument("--hf-out", default=str(ROOT / "tests/fixtures/hf"))
    ap.add_argument("--lcp-sdist", default=None, help="llama-cpp-python sdist (.tar.gz or unpacked dir)")
    ap.add_argument("--llama-dir", default=None,
                    help=f"llama.cpp static build (src/, build/) for llama-quantize and, without llama-cpp-python, "
                         f"the logits driver (default {glm.DEFAULT_LLAMA_BUILD})")
    a = ap.parse_args()
    torch.set_num_threads(1)
    work, out, hf_out = Path(a.work), Path(a.out), Path(a.hf_out)
    llama_dir = Path(a.llama_dir) if a.llama_dir else None
    steps = a.steps.split(",")
    lcpp = convert.locate_llama_cpp_src(a.lcp_sdist, work) if {"gguf", "llamacpp"} & set(steps) else None
    manifest_path = out / "MANIFEST.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    manifest.setdefault("presets", {})
    for name in a.presets.split(","):
        p = glm.GLM_PRESETS[name]
        print(f"[{name}]")
        entry = manifest["presets"].setdefault(name, {})
        if "hf" in steps:
            for f in out.glob(f"{name}.*.gguf"):
                f.unlink()
            for f in (out / name).glob("*") if (out / name).exists() else []:
                f.unlink()
            entry.clear()
            entry.update({"seed": p.seed, "init_gain": p.init_gain, "arch": "GlmMoeDsaForCausalLM / glm-dsa",
                          "made_by": "tools/make_glm_fixtures.py", "hf": step_hf(p, work, out, hf_out, lcpp)})
        if "gguf" in steps:
            entry["gguf"] = step_gguf(p, work, out, lcpp)
            entry["gguf_metadata"] = glm.gguf_summary(out / f"{name}.{p.gguf_types[0]}.gguf")
        if "llamacpp" in steps:
            q = step_llamacpp(p, work, out, lcpp, llama_dir)
            entry["llamacpp"] = {"backend": q.pop("backend"), "agreement": q.pop("agreement"),
                                 "f32_diagnostics": q.pop("diagnostics_f32", None)}
            entry.setdefault("gguf", {}).update(q)
        entry["files"] = files_of(p, out, hf_out)
        entry["versions"] = versions(lcpp)
        entry["command"] = "python tools/make_glm_fixtures.py " + " ".join(sys.argv[1:])
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True, default=str) + "\n")
    total = sum(v["bytes"] for n in a.presets.split(",") for v in manifest["presets"][n]["files"].values())
    print(f"{', '.join(a.presets.split(','))}: {total / 1e6:.2f} MB committed")


if __name__ == "__main__":
    main()
