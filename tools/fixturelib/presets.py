"""Fixture presets: tiny random-weight Qwen3.5-MoE geometries.

  q35-ratio   the 35B-A3B's ratios at toy widths (interval 4, 8:1 attention heads, 2:1 DeltaNet v:k heads,
              experts top-k 1:4, untied output); projections at gain 0.5, where Q8_0 rounding moves the logits
              as little as it does on real models (at gain 1 a 2e-3 weight perturbation moved them by 3.6)
  odd         odd sizes everywhere (non-power-of-two widths, 3 k-heads / 9 v-heads, 7 experts top-3, irregular
              layer pattern, tied output)
  q24t-shape  the 2.4T shape (92 layers, interval 4, 512 experts top-10, 16:1 attention q:kv heads, 8:1 DeltaNet
              value:key heads) at widths small enough that its F16 file stays ~3 MB (the 512 x 92 experts and
              routers dominate: hidden 8, expert ff 1); projections at gain 0.3: at gain 1 the 92-layer stack amplifies fp32
              rounding ~1e5-fold (a cached decode no longer matches teacher forcing), and at 0.6 routing flips
              between two fp32 engines still leave rows beyond tolerance
"""
from __future__ import annotations

from dataclasses import dataclass, field


def interval_layers(n_layer: int, interval: int) -> list[str]:
    """HF Qwen3_5MoeTextConfig's default pattern: every interval-th layer is full attention."""
    return ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(n_layer)]


@dataclass
class Preset:
    name: str
    seed: int
    init_gain: float    # std of every projection is init_gain / sqrt(fan_in)
    logit_gain: float   # std of the output projection is logit_gain / sqrt(hidden): sets the logit spread
    router_gain: float  # router std: a decisive routing keeps expert choices away from near-ties
    n_tokenizer: int    # trained BPE vocab incl. 3 special tokens; ids n_tokenizer..vocab_size-1 are padding
    hf_config: dict
    gguf_types: list[str]        # written by llama.cpp's convert_hf_to_gguf.py
    quant_types: list[str] = field(default_factory=list)  # written by llama.cpp's quantizer from the f32 file
    work_only: list[str] = field(default_factory=list)  # gguf_types made for the references but not committed
    n_greedy: int = 40
    hf_arch: str = "Qwen3_5MoeForCausalLM"  # transformers' class (hfmodel.ARCHS): Qwen3.5-MoE, Qwen3-Next, dense Qwen3.5


def _rope(sections: list[int]) -> dict:
    """Interleaved MRoPE as Qwen3.5 writes it; sections sum to the rotated pairs, head_dim * 0.25 / 2 (text
    positions are equal in all three sections, so the split does not change the result)."""
    return {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
            "mrope_section": sections, "mrope_interleaved": True}


PRESETS: dict[str, Preset] = {
    "q35-ratio": Preset(
        name="q35-ratio", seed=3501, init_gain=0.5, logit_gain=4.0, router_gain=3.0, n_tokenizer=400,
        hf_config=dict(
            vocab_size=512, hidden_size=64, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=1,
            head_dim=32, rope_parameters=_rope([2, 1, 1]), layer_types=interval_layers(8, 4),
            linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
            linear_num_key_heads=4, linear_num_value_heads=8, num_experts=16, num_experts_per_tok=4,
            moe_intermediate_size=32, shared_expert_intermediate_size=32, tie_word_embeddings=False,
            max_position_embeddings=4096, rms_norm_eps=1e-6),
        gguf_types=["f32", "f16", "q8_0"], quant_types=["q4_0", "q4_k_m"], work_only=["f32"]),
    "odd": Preset(
        name="odd", seed=4807, init_gain=1.5, logit_gain=6.0, router_gain=3.0, n_tokenizer=290,
        hf_config=dict(
            vocab_size=301, hidden_size=48, num_hidden_layers=5, num_attention_heads=3, num_key_value_heads=1,
            head_dim=24, rope_parameters=_rope([1, 1, 1]),
            layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention",
                         "full_attention"],
            linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
            linear_num_key_heads=3, linear_num_value_heads=9, num_experts=7, num_experts_per_tok=3,
            moe_intermediate_size=20, shared_expert_intermediate_size=12, tie_word_embeddings=True,
            max_position_embeddings=4096, rms_norm_eps=1e-6),
        gguf_types=["f32"]),
    "q24t-shape": Preset(
        name="q24t-shape", seed=2400, init_gain=0.3, logit_gain=4.0, router_gain=3.0, n_tokenizer=300,
        hf_config=dict(
            vocab_size=320, hidden_size=8, num_hidden_layers=92, num_attention_heads=16, num_key_value_heads=1,
            head_dim=16, rope_parameters=_rope([1, 1, 0]), layer_types=interval_layers(92, 4),
            linear_conv_kernel_dim=4, linear_key_head_dim=8, linear_value_head_dim=8,
            linear_num_key_heads=1, linear_num_value_heads=8, num_experts=512, num_experts_per_tok=10,
            moe_intermediate_size=1, shared_expert_intermediate_size=16, tie_word_embeddings=False,
            max_position_embeddings=4096, rms_norm_eps=1e-6),
        gguf_types=["f16"]),
    # Qwen3-Next (GGUF qwen3next) and dense Qwen3.5 (qwen35) at toy widths, made by transformers' own classes;
    # F16 only (exact weights, half the bytes; the derived q35-next / q35-dense fixtures carry the quantized types).
    "next-tiny": Preset(
        name="next-tiny", seed=3801, init_gain=0.5, logit_gain=4.0, router_gain=3.0, n_tokenizer=400,
        hf_arch="Qwen3NextForCausalLM",
        hf_config=dict(
            vocab_size=512, hidden_size=64, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=1,
            head_dim=32, rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                                          "partial_rotary_factor": 0.25},
            layer_types=interval_layers(4, 4), linear_conv_kernel_dim=4, linear_key_head_dim=16,
            linear_value_head_dim=16, linear_num_key_heads=4, linear_num_value_heads=8, num_experts=8,
            num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32,
            intermediate_size=64, tie_word_embeddings=False, max_position_embeddings=4096, rms_norm_eps=1e-6),
        gguf_types=["f16"]),
    "dense-tiny": Preset(
        name="dense-tiny", seed=3901, init_gain=0.5, logit_gain=4.0, router_gain=3.0, n_tokenizer=400,
        hf_arch="Qwen3_5ForCausalLM",
        hf_config=dict(
            vocab_size=512, hidden_size=64, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=1,
            head_dim=32, rope_parameters=_rope([2, 1, 1]), layer_types=interval_layers(4, 4),
            linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=4,
            linear_num_value_heads=8, intermediate_size=96, tie_word_embeddings=False,
            max_position_embeddings=4096, rms_norm_eps=1e-6),
        gguf_types=["f16"]),
}

# Presets made by tools/make_mtp_fixture.py, not by make_fixtures.py (kept out of PRESETS so that a default
# make_fixtures.py run neither regenerates nor deletes their files).
#   q35-mtp   q35-ratio's widths and gains at 4 layers (3 DeltaNet + 1 attention) plus one multi-token-prediction
#             block (config mtp_num_hidden_layers = 1; the mtp.* tensors are drawn by make_mtp_fixture.py, since
#             transformers' Qwen3.5-MoE classes neither create nor run them); weights BF16-representable, so the
#             BF16 GGUF llama.cpp's converter writes holds exactly the reference weights
MTP_PRESETS: dict[str, Preset] = {
    "q35-mtp": Preset(
        name="q35-mtp", seed=3531, init_gain=0.5, logit_gain=4.0, router_gain=3.0, n_tokenizer=400,
        hf_config=dict(
            vocab_size=512, hidden_size=64, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=1,
            head_dim=32, rope_parameters=_rope([2, 1, 1]), layer_types=interval_layers(4, 4),
            linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
            linear_num_key_heads=4, linear_num_value_heads=8, num_experts=16, num_experts_per_tok=4,
            moe_intermediate_size=32, shared_expert_intermediate_size=32, tie_word_embeddings=False,
            max_position_embeddings=4096, rms_norm_eps=1e-6, mtp_num_hidden_layers=1),
        gguf_types=["bf16"]),
}

PROMPT_LENGTHS = [1, 5, 63, 64, 65, 300]  # chunk edges of the chunked delta rule (64)
GREEDY_PROMPTS = ["len5", "len65"]
LONG_KEEP_ROWS = 8                         # prompts longer than 65 keep only their last rows of logits
