#!/usr/bin/env python3
"""First-divergence report: the same tokens through tern and a reference, named tensors lined up layer by layer.

Runs `tern logits --dump-tensors` on a GGUF, dumps the same forward from one or more references under tern's names
(llama.cpp's graph names: attn_norm-3, l_out-3, result_output), compares them in forward order
(tools/compare_dumps.py) and prints the error curve over layers (l_out's NMSE and max|diff| per layer, every op's
log10 error as a layer x op matrix) and the first tensor over its tolerance. References:

  --hf DIR        a transformers checkpoint run in fp32 with forward hooks on the modules that compute tern's
                  named tensors (HF_MAPS below: one table per HF model type: Qwen3.5-MoE, dense Qwen3.5,
                  Qwen3-Next, GLM-MoE-DSA). Value-head tensors of the Gated DeltaNet are put in the GGUF's tiled
                  order first (llama.cpp's converter reorders qwen35/qwen35moe value heads). Not mapped: q/k after RoPE
                  (HF rotates inside the attention's forward, where no hook reaches, and the converter may permute
                  rotary dimensions), and anything else no module boundary gives.
  --llamacpp      llama.cpp's eval callback on the same GGUF (tools/llamacpp_dump.cpp, compiled once against the
                  static libraries of bench/build_llamacpp.sh's build; llama-cpp-python is not needed).
  --ref-dump DIR  any dump directory made elsewhere with the same names (another engine, an earlier run).

Default tolerance: NMSE 1e-5 for every tensor (the contract's whole-model tolerance against fp32 transformers);
--tol OP=X per op / tensor / glob. Exit status 0 when every reference agrees everywhere, 1 on a divergence,
2 when nothing could be compared.

examples:
  python3 tools/first_divergence.py -m tests/fixtures/convert/q35-ratio.bf16.gguf --hf tests/fixtures/hf/q35-ratio \\
      --tokens 32,275,315,281,64
  python3 tools/first_divergence.py -m tests/fixtures/models/q35-ratio.f16.gguf --llamacpp --text "And it came" --all
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

TOOLS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TOOLS)
sys.path.insert(0, TOOLS)
import compare_dumps as cd  # noqa: E402

LLAMACPP_VERSION = "0.3.36"

# ---- transformers: module -> tern name tables ----------------------------------------------------------------
# Per decoder layer: (tern op, module path under the layer ("" is the layer itself), "out" (the module's output, the
# first element of a tuple) or "in" (its first input), transform or None). A row whose module the layer lacks
# (linear_attn on an attention layer, mlp.gate on a dense layer) is skipped. Transforms take (tensor [T, ...] fp32,
# layer module, text config) and return the tensor in tern's element order.


def _v_tiled(t, cfg, head_dim, offset=0):
    """Value heads from HF's grouped order (value head h uses key head h // (Hv/Hk)) to the tiled order
    llama.cpp's converter writes for qwen35/qwen35moe (value head p uses key head p % Hk), along the last dim
    from `offset` on. Tensors are first flattened to [T, -1]."""
    hk, hv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    T = t.shape[0]
    x = t.reshape(T, -1)
    if hv == hk:
        return x
    head, v = x[:, :offset], x[:, offset:offset + hv * head_dim]
    v = v.reshape(T, hk, hv // hk, head_dim).transpose(1, 2).reshape(T, hv * head_dim)
    import torch
    return torch.cat([head, v, x[:, offset + hv * head_dim:]], dim=1)


def _beta(t, layer, cfg):
    return _v_tiled(t.sigmoid(), cfg, 1)


def _gate(t, layer, cfg):
    import torch.nn.functional as F
    la = layer.linear_attn
    return _v_tiled(-la.A_log.float().exp() * F.softplus(t.float() + la.dt_bias.float()), cfg, 1)


def _qkv(t, layer, cfg):
    kd = cfg.linear_num_key_heads * cfg.linear_key_head_dim
    return _v_tiled(t, cfg, cfg.linear_value_head_dim, offset=2 * kd)


def _vhead(t, layer, cfg):
    return _v_tiled(t, cfg, cfg.linear_value_head_dim)


def _per_token(t, layer, cfg):
    return t


QWEN_ATTN_FFN = [
    ("Qcur_normed", "self_attn.q_norm", "out", None),
    ("Kcur_normed", "self_attn.k_norm", "out", None),
    ("attn_gated", "self_attn.o_proj", "in", None),
    ("attn_output", "self_attn", "out", None),
    ("attn_residual", "post_attention_layernorm", "in", None),
    ("attn_post_norm", "post_attention_layernorm", "out", None),
    ("ffn_moe_logits", "mlp.gate", "out", None),        # router logits, before the softmax
    ("ffn_moe_out", "mlp.experts", "out", None),        # routed experts, weighted and summed
    ("ffn_shexp", "mlp.shared_expert", "out", None),    # shared expert before its sigmoid gate
    ("ffn_swiglu", "mlp.down_proj", "in", None),        # dense FFN (qwen35)
    ("ffn_out", "mlp", "out", None),
    ("l_out", "", "out", None),
]
# Qwen3.5 (dense and MoE): separate in_proj_qkv / z / b / a; value heads reordered by the converter.
QWEN35_LAYER = [
    ("attn_norm", "input_layernorm", "out", None),
    ("linear_attn_qkv_mixed", "linear_attn.in_proj_qkv", "out", _qkv),
    ("z", "linear_attn.in_proj_z", "out", _vhead),
    ("beta_sigmoid", "linear_attn.in_proj_b", "out", _beta),
    ("gate", "linear_attn.in_proj_a", "out", _gate),
    ("attn_linear_core", "linear_attn.norm", "in", _vhead),  # delta-rule output before the gated norm
    ("final_output", "linear_attn.out_proj", "in", _vhead),
    ("linear_attn_out", "linear_attn", "out", None),
] + QWEN_ATTN_FFN
# Qwen3-Next: the fused in_proj_qkvz / in_proj_ba are reordered by HF inside the forward (no module output holds
# tern's qkv / z / beta / gate); value heads stay grouped in the GGUF.
QWEN3NEXT_LAYER = [
    ("attn_norm", "input_layernorm", "out", None),
    ("attn_linear_core", "linear_attn.norm", "in", _per_token),
    ("final_output", "linear_attn.out_proj", "in", None),
    ("linear_attn_out", "linear_attn", "out", None),
] + QWEN_ATTN_FFN
# GLM-MoE-DSA (glm-dsa): only tensors one module boundary gives unambiguously. Not mapped: q (tern's is after the
# interleaved RoPE, HF rotates inside the attention), kv_latent, indexer_k, kqv_out (absorbed MLA: no HF module
# computes them in that form).
GLM_DSA_LAYER = [
    ("attn_norm", "input_layernorm", "out", None),
    ("attn_output", "self_attn", "out", None),
    ("ffn_inp", "post_attention_layernorm", "in", None),
    ("ffn_norm", "post_attention_layernorm", "out", None),
    ("ffn_moe_logits", "mlp.gate", "out", None),  # router logits, before the sigmoid
    ("ffn_out", "mlp", "out", None),              # routed + shared experts (or the dense MLP)
    ("l_out", "", "out", None),
]
HF_MAPS = {
    "qwen3_5_moe": QWEN35_LAYER, "qwen3_5_moe_text": QWEN35_LAYER,
    "qwen3_5": QWEN35_LAYER, "qwen3_5_text": QWEN35_LAYER,
    "qwen3_next": QWEN3NEXT_LAYER,
    "glm_moe_dsa": GLM_DSA_LAYER,
}
# tern's architectures (GGUF general.architecture) each table serves; the registry's list, for --help and checks.
ARCH_OF_MODEL_TYPE = {"qwen3_5_moe": "qwen35moe", "qwen3_5_moe_text": "qwen35moe", "qwen3_5": "qwen35",
                      "qwen3_5_text": "qwen35", "qwen3_next": "qwen3next", "glm_moe_dsa": "glm-dsa"}

# llama.cpp graph names that mean something else than tern's tensor of the same name, per GGUF architecture:
# left out of a llama.cpp comparison, with the reason printed.
LLAMACPP_DIFFERENT = {
    "*": {
        "conv_output_silu": "tern dumps it after the in-place l2 norm of q and k, llama.cpp before",
    },
    "glm-dsa": {
        "q": "tern's is after the interleaved RoPE, llama.cpp's the raw q_b projection",
        "indexer_k": "llama.cpp names several stages indexer_k; the last (the rotated cache keys) is not tern's",
    },
}
LLAMACPP_ALIASES = {"model.input_embed": "inp_embd"}  # qwen35 / qwen35moe name the embeddings so


def log(msg):
    print(f"first_divergence: {msg}", file=sys.stderr, flush=True)


def find_tern(path):
    cands = [path] if path else [os.path.join(ROOT, "build", "tern"), os.path.join(ROOT, "build", "bin", "tern")]
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    sys.exit(f"error: no tern binary at {' or '.join(cands)} (build it: bash scripts/build.sh build, or --tern PATH)")


def gguf_architecture(path):
    """general.architecture of a GGUF, read with the standard library; None if the file cannot be read."""
    import struct
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"GGUF" or struct.unpack("<I", f.read(4))[0] < 2:
                return None
            _, n_kv = struct.unpack("<QQ", f.read(16))

            def string():
                n, = struct.unpack("<Q", f.read(8))
                return f.read(n).decode("utf-8", "replace")

            for _ in range(min(n_kv, 4096)):
                key = string()
                vtype, = struct.unpack("<I", f.read(4))
                if vtype == 8:
                    val = string()
                    if key == "general.architecture":
                        return val
                elif vtype == 9:
                    etype, n = struct.unpack("<IQ", f.read(12))
                    if etype == 8:
                        for _ in range(n):
                            string()
                    elif etype in sizes:
                        f.seek(sizes[etype] * n, 1)
                    else:
                        return None
                elif vtype in sizes:
                    f.seek(sizes[vtype], 1)
                else:
                    return None
    except (OSError, struct.error):
        return None
    return None


def tokens_from_args(args, tern):
    if args.tokens:
        try:
            return [int(t) for t in args.tokens.replace(" ", "").split(",") if t]
        except ValueError:
            sys.exit(f"error: --tokens {args.tokens}: expected comma-separated integers")
    tok_dir = args.tokenizer or args.hf
    if tok_dir:
        path = os.path.join(tok_dir, "tokenizer.json")
        try:
            from tokenizers import Tokenizer
            return Tokenizer.from_file(path).encode(args.text, add_special_tokens=False).ids
        except ImportError:
            from transformers import AutoTokenizer
            return AutoTokenizer.from_pretrained(tok_dir).encode(args.text, add_special_tokens=False)
    r = subprocess.run([tern, "tokenize", "-m", args.model, "-p", args.text], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"error: tern tokenize failed:\n{r.stderr}")
    return [int(t) for t in r.stdout.split()]


def run_tern(tern, args, tokens, out_dir):
    cmd = [tern, "logits", "-m", args.model, "--tokens", ",".join(map(str, tokens)),
           "-o", os.path.join(os.path.dirname(out_dir), "tern_logits.f32.bin"), "--dump-tensors", out_dir,
           "-t", str(args.threads), "--kv-type", args.kv_type] + (args.tern_arg or [])
    log(" ".join(cmd))
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"error: tern failed (exit {r.returncode}):\n{r.stderr.strip()}")


# ---- transformers reference ------------------------------------------------------------------------------------

def _get(module, path):
    for part in [p for p in path.split(".") if p]:
        module = getattr(module, part, None)
        if module is None:
            return None
    return module


def _first_tensor(x):
    import torch
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (tuple, list)):
        for v in x:
            t = _first_tensor(v)
            if t is not None:
                return t
    if isinstance(x, dict):
        for v in x.values():
            t = _first_tensor(v)
            if t is not None:
                return t
    return None


def hf_dump(hf_dir, tokens, out_dir, model_type=None):
    """Runs the checkpoint in fp32 with hooks; writes tern-named .npy files. Returns (model_type, #tensors)."""
    import numpy as np
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(hf_dir)
    mt = model_type or config.model_type
    if mt not in HF_MAPS:
        sys.exit(f"error: {hf_dir}: HF model type {mt!r} has no tensor map; supported: {', '.join(sorted(HF_MAPS))}")
    table = HF_MAPS[mt]
    try:
        model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager")
    except TypeError:
        model = AutoModelForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()
    text_cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    decoder = next((m for m in model.modules() if hasattr(m, "layers") and hasattr(m, "embed_tokens")
                    and isinstance(getattr(m, "layers"), torch.nn.ModuleList)), None)
    if decoder is None:
        sys.exit(f"error: {hf_dir}: no decoder module (embed_tokens + layers) found")
    captured, handles = {}, []

    def save(name, t, layer=None, fn=None):
        t = t.detach().float()
        if t.dim() >= 3 and t.shape[0] == 1:  # the batch of one
            t = t[0]
        if fn is not None:
            t = fn(t.reshape(len(tokens), -1), layer, text_cfg)
        captured[name] = t.cpu().numpy().astype(np.float32)

    def hook(name, where, layer=None, fn=None):
        if where == "out":
            return lambda mod, args, out: save(name, _first_tensor(out), layer, fn)
        return lambda mod, args, kwargs: save(name, _first_tensor(args) if args else _first_tensor(kwargs), layer, fn)

    def attach(module, name, where, layer=None, fn=None):
        if where == "out":
            handles.append(module.register_forward_hook(hook(name, where, layer, fn)))
        else:
            handles.append(module.register_forward_pre_hook(hook(name, where, layer, fn), with_kwargs=True))

    attach(decoder.embed_tokens, "inp_embd", "out")
    attach(decoder.norm, "result_norm", "out")
    attach(model.get_output_embeddings(), "result_output", "out")
    for il, layer in enumerate(decoder.layers):
        for op, path, where, fn in table:
            mod = _get(layer, path)
            if mod is not None:
                attach(mod, f"{op}-{il}", where, layer, fn)
    with torch.no_grad():
        model(torch.tensor([tokens], dtype=torch.long), use_cache=False)
    for h in handles:
        h.remove()
    os.makedirs(out_dir, exist_ok=True)
    for name, a in captured.items():
        np.save(os.path.join(out_dir, name + ".npy"), a)
    return mt, len(captured)


# ---- llama.cpp reference ---------------------------------------------------------------------------------------

def llamacpp_dumper(args):
    """Path of the llamacpp_dump binary: --llamacpp-dump, else compiled (once, cached next to the llama.cpp build)
    from tools/llamacpp_dump.cpp against that build's static libraries."""
    if args.llamacpp_dump:
        return args.llamacpp_dump
    lc = args.llamacpp_dir or os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                                           "tern", f"llama.cpp-{LLAMACPP_VERSION}")
    libs = [os.path.join(lc, "build", p) for p in ("src/libllama.a", "ggml/src/libggml.a",
                                                   "ggml/src/libggml-cpu.a", "ggml/src/libggml-base.a")]
    missing = [p for p in libs if not os.path.exists(p)]
    if missing:
        sys.exit(f"error: llama.cpp's static libraries are not in {lc} ({missing[0]} missing): build them with "
                 f"bash bench/build_llamacpp.sh, or point --llamacpp-dir at such a build")
    src = os.path.join(TOOLS, "llamacpp_dump.cpp")
    exe = os.path.join(lc, "build", "bin", "tern-llamacpp-dump")
    newest = max(os.path.getmtime(p) for p in libs + [src])
    if not os.path.exists(exe) or os.path.getmtime(exe) < newest:
        os.makedirs(os.path.dirname(exe), exist_ok=True)
        cmd = [os.environ.get("CXX", "c++"), "-O2", "-std=c++17", src,
               "-I", os.path.join(lc, "src", "include"), "-I", os.path.join(lc, "src", "ggml", "include")] + libs + \
              ["-fopenmp", "-lpthread", "-ldl", "-lm", "-o", exe + ".part"]
        log("compiling " + " ".join(cmd))
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            sys.exit(f"error: compiling {src} failed:\n{r.stdout}")
        os.replace(exe + ".part", exe)
    return exe


def llamacpp_dump(args, tokens, out_dir):
    exe = llamacpp_dumper(args)
    os.makedirs(out_dir, exist_ok=True)
    cmd = [exe, args.model, ",".join(map(str, tokens)), out_dir, str(args.threads), args.kv_type]
    log(" ".join(cmd))
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"error: llama.cpp dump failed (exit {r.returncode}):\n{r.stderr.strip()}")
    for src, dst in LLAMACPP_ALIASES.items():
        s, d = os.path.join(out_dir, src + ".npy"), os.path.join(out_dir, dst + ".npy")
        if os.path.exists(s) and not os.path.exists(d):
            os.replace(s, d)
    return r.stdout.strip()


# ---- main --------------------------------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True, help="GGUF that tern (and llama.cpp) run")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--tokens", help="token ids, comma separated")
    src.add_argument("--text", help="text, tokenized by --tokenizer / --hf's tokenizer.json, else by tern tokenize")
    ap.add_argument("--tokenizer", metavar="DIR", help="HF tokenizer directory for --text")
    ap.add_argument("--hf", metavar="DIR", help="reference: a transformers checkpoint, run in fp32 with hooks")
    ap.add_argument("--hf-model-type", help="use this HF model type's tensor map (default: the config's)")
    ap.add_argument("--llamacpp", action="store_true", help="reference: llama.cpp's eval callback on the same GGUF")
    ap.add_argument("--llamacpp-dir", metavar="DIR",
                    help="llama.cpp build made by bench/build_llamacpp.sh "
                         f"(default ~/.cache/tern/llama.cpp-{LLAMACPP_VERSION})")
    ap.add_argument("--llamacpp-dump", metavar="EXE", help="an already built tools/llamacpp_dump.cpp")
    ap.add_argument("--ref-dump", action="append", default=[], metavar="DIR",
                    help="reference: an existing dump directory with tern's names; repeatable")
    ap.add_argument("--tern", metavar="PATH", help="tern binary (default build/tern, then build/bin/tern)")
    ap.add_argument("--tern-arg", action="append", metavar="ARG",
                    help="extra argument for tern logits (e.g. --tern-arg=--no-repack); repeatable")
    ap.add_argument("-t", "--threads", type=int, default=2, help="threads for tern and llama.cpp (default 2)")
    ap.add_argument("--kv-type", choices=["f32", "f16"], default="f32",
                    help="KV cache type for tern and llama.cpp (default f32: no cache rounding in the comparison)")
    ap.add_argument("--keep", metavar="DIR", help="write the dumps under DIR (tern/, hf/, llamacpp/) and keep them")
    cd.add_compare_args(ap)
    args = ap.parse_args(argv)
    if not (args.hf or args.llamacpp or args.ref_dump):
        ap.error("no reference: give --hf DIR, --llamacpp and/or --ref-dump DIR")
    if not os.path.isfile(args.model):
        sys.exit(f"error: {args.model}: no such file")

    tern = find_tern(args.tern)
    tokens = tokens_from_args(args, tern)
    if not tokens:
        sys.exit("error: no tokens")
    arch = gguf_architecture(args.model) or "?"
    work = args.keep or tempfile.mkdtemp(prefix="tern-diverge-")
    os.makedirs(work, exist_ok=True)
    try:
        tern_dir = os.path.join(work, "tern")
        shutil.rmtree(tern_dir, ignore_errors=True)
        run_tern(tern, args, tokens, tern_dir)
        refs = []  # (label, dir, extra skips)
        if args.hf:
            d = os.path.join(work, "hf")
            shutil.rmtree(d, ignore_errors=True)
            mt, n = hf_dump(args.hf, tokens, d, args.hf_model_type)
            if arch != "?" and ARCH_OF_MODEL_TYPE.get(mt, arch) != arch:
                log(f"warning: HF model type {mt} is tern architecture {ARCH_OF_MODEL_TYPE[mt]}, the GGUF says {arch}")
            log(f"transformers ({mt}): {n} tensors hooked")
            refs.append(("transformers", d, {}))
        if args.llamacpp:
            d = os.path.join(work, "llamacpp")
            shutil.rmtree(d, ignore_errors=True)
            out = llamacpp_dump(args, tokens, d)
            if out:
                log(out)
            diff = dict(LLAMACPP_DIFFERENT["*"])
            diff.update(LLAMACPP_DIFFERENT.get(arch, {}))
            refs.append(("llama.cpp", d, diff))
        for i, d in enumerate(args.ref_dump):
            refs.append((f"ref{i + 1}:{d}", d, {}))

        print(f"model {args.model} ({arch}), {len(tokens)} tokens: {','.join(map(str, tokens[:16]))}"
              f"{' ...' if len(tokens) > 16 else ''}")
        codes = []
        all_json = {}
        for label, d, different in refs:
            print(f"\n== {label} (reference, A) vs tern (B)")
            report = cd.compare_dirs(d, tern_dir, args.nmse, cd.parse_tols(args.tol),
                                     list(args.skip) + list(different), use_numpy=False if args.pure_python else None)
            left_out = {cd.split_name(n)[0] for n in report["skipped"]}
            for op, why in different.items():
                if op in left_out:
                    print(f"  not compared: {op}: {why}")
            print("\n".join(cd.format_report(report, label, "tern", args.all, not args.no_curve, args.curve_metric)))
            codes.append(cd.exit_code(report))
            all_json[label] = report
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"model": args.model, "arch": arch, "tokens": tokens, "references": all_json}, f, indent=1,
                          default=str)
        if args.keep:
            log(f"dumps kept in {work}")
        return 1 if 1 in codes else (2 if 2 in codes else 0)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
