#!/usr/bin/env python3
"""Regenerates tests/fixtures/models/ from seeds: tiny random-weight Qwen3.5-MoE models (fixturelib/presets.py),
their transformers fp32 references, llama.cpp's conversions and quantizations of them, and llama.cpp's
teacher-forced logits on each committed file.

Per preset:
  1. hf        transformers checkpoint in WORK/<preset>/hf (weights f16-representable, trained BPE tokenizer);
               OUT/<preset>/ref_hf.json + hf_len*.f32.bin: teacher-forced logits for random prompts of 1, 5, 63,
               64, 65 and 300 tokens, and 40-token greedy continuations (checked varied, and equal to teacher
               forcing); a prompt is redrawn while any of its rows, or its continuation's, nears a top-1 tie
  2. gguf      OUT/<preset>.<type>.gguf by llama.cpp's convert_hf_to_gguf.py (llama-cpp-python sdist)
  3. llamacpp  (needs `import llama_cpp`) quantized types by llama_model_quantize from the F32 conversion, then
               OUT/<preset>/ref_llamacpp_<type>.json + bins: llama.cpp's logits on every committed GGUF
Then OUT/MANIFEST.json: every file's size and sha256, per-step status, tool versions.

usage: python tools/make_fixtures.py [--presets q35-ratio,odd,q24t-shape] [--steps hf,gguf,llamacpp]
                                     [--work /tmp/tern-fixtures] [--lcp-sdist PATH] [--out tests/fixtures/models]
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixturelib import convert, hfmodel, llamacpp, refs  # noqa: E402
from fixturelib.presets import GREEDY_PROMPTS, PRESETS, PROMPT_LENGTHS, Preset  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def versions(lcpp: Path | None) -> dict:
    import tokenizers
    import transformers
    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
            "numpy": np.__version__, "gguf_py (converter's)": convert.gguf_py_version(lcpp) if lcpp else None,
            "llama_cpp_sdist": convert.SDIST, "llama_cpp_python (installed)": llamacpp.available()}


# Near-tie margins (logits). Stored rows are compared with llama.cpp, whose F16 path (activations rounded to f16)
# moved a top-2 gap by 0.002 on q24t-shape; the other rows (top-1 only) and greedy continuations are compared
# with tern, whose largest error against transformers is 0.003 (q24t-shape, the l2-norm epsilon).
MIN_GAP_STORED = 0.02
MIN_GAP_ARGMAX = 0.004
MAX_ATTEMPTS = 40


def check_greedy(name: str, toks: list[int]) -> int:
    """A continuation must be varied: a seed whose model repeats itself tests nothing."""
    distinct = len(set(toks))
    top = max(toks.count(t) for t in set(toks))
    if distinct < len(toks) // 4 or top > len(toks) // 3:
        raise RuntimeError(f"{name}: greedy continuation is degenerate ({distinct} distinct, one token x{top}): "
                           f"pick another seed")
    return distinct


def reference_prompt(p: Preset, model, n: int) -> tuple[int, list[int], np.ndarray, list[int] | None]:
    """The first draw of an n-token prompt (and, for a greedy prompt, its continuation) with no row nearer a
    top-1 tie than the margins above: an engine that rounds differently must not flip an exact-weight
    comparison on a coin toss."""
    name = f"len{n}"
    for attempt in range(MAX_ATTEMPTS):
        toks = hfmodel.prompt(p, n, attempt)
        lg = hfmodel.teacher_forced(model, toks)
        first = refs.first_stored_row(n)
        if hfmodel.min_top2_gap(lg[first:]) < MIN_GAP_STORED or hfmodel.min_top2_gap(lg) < MIN_GAP_ARGMAX:
            continue
        if name not in GREEDY_PROMPTS:
            return attempt, toks, lg, None
        cont = hfmodel.greedy(model, toks, p.n_greedy)
        check_greedy(f"{p.name} {name}", cont)
        # The cached (recurrent) decode must agree with one teacher-forced pass over prompt + continuation.
        full = hfmodel.teacher_forced(model, toks + cont[:-1])[n - 1:]
        if [int(t) for t in full.argmax(axis=1)] == cont and hfmodel.min_top2_gap(full) >= MIN_GAP_ARGMAX:
            return attempt, toks, lg, cont
    raise RuntimeError(f"{p.name} {name}: every prompt draw came near a top-1 tie")


def step_hf(p: Preset, work: Path, out: Path, lcpp: Path | None) -> dict:
    hf_dir = work / p.name / "hf"
    hfmodel.save_checkpoint(p, hf_dir)
    model = hfmodel.load_model(hf_dir, p.hf_arch)
    pdir = out / p.name
    pdir.mkdir(parents=True, exist_ok=True)
    for f in pdir.glob("hf_*.bin"):
        f.unlink()
    entries, greedy, attempts = [], [], {}
    for n in PROMPT_LENGTHS:
        name = f"len{n}"
        attempts[name], toks, lg, cont = reference_prompt(p, model, n)
        entries.append(refs.prompt_entry(pdir, "hf", name, toks, lg))
        print(f"  {p.name} {name}: draw {attempts[name]}, max|logit| {np.abs(lg).max():.2f}, "
              f"min top-2 gap {hfmodel.min_top2_gap(lg):.3f}")
        if cont is not None:
            greedy.append({"prompt": name, "n_new": p.n_greedy, "tokens": cont, "distinct": len(set(cont))})
            print(f"  {p.name} greedy {name}: {len(set(cont))} distinct of {p.n_greedy}: {cont}")
    consistent = {g["prompt"]: True for g in greedy}
    header = {"preset": p.name, "hf_config": p.hf_config, "init_gain": p.init_gain, "logit_gain": p.logit_gain,
              "router_gain": p.router_gain, "seed": p.seed, "n_tokenizer": p.n_tokenizer,
              "prompt_draws": attempts,
              "min_top2_gap": {"stored_rows": MIN_GAP_STORED, "other_rows_and_greedy": MIN_GAP_ARGMAX},
              "versions": versions(lcpp), "greedy_matches_teacher_forced": consistent}
    refs.write_ref(pdir, "hf", header, entries, greedy)
    return {"greedy_distinct": {g["prompt"]: g["distinct"] for g in greedy},
            "greedy_matches_teacher_forced": consistent, "prompt_draws": attempts}


def step_gguf(p: Preset, work: Path, out: Path, lcpp: Path) -> dict:
    status = {}
    for t in p.gguf_types:
        dst = out / f"{p.name}.{t}.gguf"
        convert.convert(lcpp, work / p.name / "hf", t, dst, work / p.name / f"convert.{t}.log")
        status[t] = "ok"
        print(f"  {dst}: {dst.stat().st_size} bytes")
    return status


def step_llamacpp(p: Preset, work: Path, out: Path, lcpp: Path) -> tuple[dict, str]:
    status = {}
    if p.quant_types:
        f32 = work / p.name / f"{p.name}.f32.gguf"  # llama-quantize's usual input: the full-precision file
        convert.convert(lcpp, work / p.name / "hf", "f32", f32, work / p.name / "convert.f32.log")
        for t in p.quant_types:
            dst = out / f"{p.name}.{t}.gguf"
            convert.quantize(f32, dst, t)
            status[t] = "ok (llama_model_quantize from f32)"
            print(f"  {dst}: {dst.stat().st_size} bytes")
    pdir = out / p.name
    for f in list(pdir.glob("llamacpp_*.bin")) + list(pdir.glob("ref_llamacpp_*.json")):
        f.unlink()
    hf_ref = json.loads((pdir / "ref_hf.json").read_text())
    for t in p.gguf_types + p.quant_types:
        gg = out / f"{p.name}.{t}.gguf"
        entries = []
        for pr in hf_ref["prompts"]:
            lg = llamacpp.teacher_forced(gg, pr["tokens"])
            entries.append(refs.prompt_entry(pdir, f"llamacpp_{t}", pr["name"], pr["tokens"], lg))
        header = {"preset": p.name, "gguf": gg.name, "gguf_sha256": refs.sha256(gg), "type": t,
                  "versions": versions(lcpp),
                  "how": "llama-cpp-python Llama(logits_all=True, n_threads=2), one eval() of the whole prompt "
                         "in a fresh context"}
        refs.write_ref(pdir, f"llamacpp_{t}", header, entries, None)
        print(f"  {p.name} ref_llamacpp_{t}.json")
    return status, "ok"


def files_of(p: Preset, out: Path) -> dict:
    fs = sorted(out.glob(f"{p.name}.*.gguf")) + sorted((out / p.name).glob("*"))
    return {str(f.relative_to(out)): {"bytes": f.stat().st_size, "sha256": refs.sha256(f)} for f in fs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--steps", default="hf,gguf,llamacpp",
                    help="hf,gguf,llamacpp; llamacpp is skipped (and recorded so) when llama_cpp does not import")
    ap.add_argument("--work", default="/tmp/tern-fixtures", help="checkpoints and intermediate files")
    ap.add_argument("--out", default=str(ROOT / "tests/fixtures/models"))
    ap.add_argument("--lcp-sdist", default=None, help="llama-cpp-python sdist (.tar.gz or unpacked dir)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    work, out = Path(a.work), Path(a.out)
    steps = a.steps.split(",")
    lcpp = convert.locate_llama_cpp_src(a.lcp_sdist, work) if {"gguf", "llamacpp"} & set(steps) else None
    manifest_path = out / "MANIFEST.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    manifest.setdefault("presets", {})
    for name in a.presets.split(","):
        p = PRESETS[name]
        print(f"[{name}]")
        entry = manifest["presets"].setdefault(name, {})
        if "hf" in steps:
            for f in out.glob(f"{name}.*.gguf"):  # everything of this preset is regenerated
                f.unlink()
            for f in (out / name).glob("*") if (out / name).exists() else []:
                f.unlink()
            entry.clear()
            entry.update({"seed": p.seed, "init_gain": p.init_gain, "hf": step_hf(p, work, out, lcpp)})
        if "gguf" in steps:
            entry["gguf"] = step_gguf(p, work, out, lcpp)
        if "llamacpp" in steps:
            if llamacpp.available() is None:
                entry["llamacpp"] = "skipped (llama-cpp-python not importable)"
            else:
                q, entry["llamacpp"] = step_llamacpp(p, work, out, lcpp)
                entry.setdefault("gguf", {}).update(q)
        for t in p.work_only:  # written for the llama.cpp references, not committed (tests upcast the F16 file)
            f = out / f"{name}.{t}.gguf"
            if f.exists():
                f.replace(work / name / f.name)
                print(f"  {f.name}: moved to {work / name} (not committed)")
        entry["files"] = files_of(p, out)
    manifest["versions"] = versions(lcpp)
    manifest["command"] = "python tools/make_fixtures.py " + " ".join(sys.argv[1:])
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    total = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"{out}: {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
