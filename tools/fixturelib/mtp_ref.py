"""A PyTorch reference forward of the Qwen3.5-MoE multi-token-prediction (MTP, "nextn") block, fp32, written from
the published definition (the Qwen3-Next / Qwen3.5 MTP predictor as vLLM runs it):

    e  = pre_fc_norm_embedding(embed_tokens(token))      # the trunk's token embedding, RMSNorm (1 + w)
    h' = pre_fc_norm_hidden(h)                           # h: the trunk's FINAL-NORMED hidden state
    x  = fc(cat([e, h'], -1))                            # fc: [H, 2H], no bias
    x  = decoder_layer(x)                                # one full-attention Qwen3.5-MoE decoder layer, own KV
    g  = norm(x)                                         # the MTP's own final RMSNorm (mtp.norm)
    logits = lm_head(g)                                  # the trunk's LM head

The decoder layer is transformers' own Qwen3_5MoeDecoderLayer built for a full-attention layer index, loaded with
mtp.layers.0.* (per-expert checkpoint keys fused into its [E, 2F, H] / [E, H, F] expert tensors). Its "own KV
cache" is realised by recomputing every MTP row of a sequence under a causal mask: a row attends to itself and to
the MTP rows before it, never to the trunk's cache.

Row convention (what tern's test follows): for a prompt x_0..x_{L-1} with trunk normed hiddens h_0..h_{L-1}, MTP
row r (r = 1..L-1) takes token x_r and hidden h_{r-1} at RoPE position r, and its logits predict x_{r+1}. There is
no row for r = 0. A K-step draft after the prompt continues the same sequence of rows: step s (1..K) is a row at
position L+s-1 with token t_s and hidden u_s, where t_1 = argmax of the trunk's logits at row L-1, u_1 = h_{L-1},
t_{s+1} = argmax(logits of step s), u_{s+1} = g of step s.
"""
from __future__ import annotations

import numpy as np
import torch
from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeDecoderLayer

MTP_NAMES = ("mtp.fc.weight", "mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight", "mtp.norm.weight")


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """Qwen3.5's zero-centred RMSNorm: the stored weight is an offset, the scale is (1 + w)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w)


def fuse_experts(layer_sd: dict[str, torch.Tensor], n_expert: int) -> dict[str, torch.Tensor]:
    """Per-expert checkpoint keys (mlp.experts.{e}.{gate,up,down}_proj.weight) -> transformers' fused expert
    parameters: gate_up_proj [E, 2F, H] (gate rows first), down_proj [E, H, F]."""
    out = {k: v for k, v in layer_sd.items() if not k.startswith("mlp.experts.")}
    gate = [layer_sd[f"mlp.experts.{e}.gate_proj.weight"] for e in range(n_expert)]
    up = [layer_sd[f"mlp.experts.{e}.up_proj.weight"] for e in range(n_expert)]
    down = [layer_sd[f"mlp.experts.{e}.down_proj.weight"] for e in range(n_expert)]
    out["mlp.experts.gate_up_proj"] = torch.cat([torch.stack(gate), torch.stack(up)], dim=1)
    out["mlp.experts.down_proj"] = torch.stack(down)
    return out


class MtpRef:
    """The MTP block of a loaded transformers Qwen3_5MoeForCausalLM (fp32, eager attention and experts) and its
    mtp.* tensors (a state dict with the checkpoint's names)."""

    def __init__(self, model, mtp_sd: dict[str, torch.Tensor]):
        cfg = model.config
        self.model = model
        self.eps = cfg.rms_norm_eps
        self.fc = mtp_sd["mtp.fc.weight"].float()
        self.w_enorm = mtp_sd["mtp.pre_fc_norm_embedding.weight"].float()
        self.w_hnorm = mtp_sd["mtp.pre_fc_norm_hidden.weight"].float()
        self.w_norm = mtp_sd["mtp.norm.weight"].float()
        prefix = "mtp.layers.0."
        layer_sd = {k[len(prefix):]: v.float() for k, v in mtp_sd.items() if k.startswith(prefix)}
        self.layer = Qwen3_5MoeDecoderLayer(cfg, cfg.layer_types.index("full_attention")).eval()
        self.layer.load_state_dict(fuse_experts(layer_sd, cfg.num_experts), strict=True)
        unused = set(mtp_sd) - set(MTP_NAMES) - {k for k in mtp_sd if k.startswith(prefix)}
        if unused:
            raise ValueError(f"unexpected MTP tensors: {sorted(unused)}")

    @torch.no_grad()
    def trunk(self, tokens: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """The trunk's teacher-forced logits [L, V] and final-normed hidden states [L, H] (what its LM head sees)."""
        out = self.model.model(input_ids=torch.tensor([tokens]), use_cache=False)
        h = out.last_hidden_state
        logits = self.model.lm_head(h)
        return logits[0].float().numpy(), h[0].float().numpy()

    @torch.no_grad()
    def rows(self, tokens: list[int], hidden: np.ndarray, positions: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """MTP rows (token_i, hidden_i) at RoPE positions_i, causal over the rows in order: logits [n, V] and the
        MTP output hidden g (after mtp.norm) [n, H]."""
        n = len(tokens)
        assert hidden.shape[0] == n and len(positions) == n
        e = self.model.model.embed_tokens(torch.tensor([tokens]))                 # [1, n, H]
        h = torch.from_numpy(np.ascontiguousarray(hidden, dtype=np.float32))[None]
        x = torch.cat([rms_norm(e, self.w_enorm, self.eps), rms_norm(h, self.w_hnorm, self.eps)], dim=-1)
        x = x @ self.fc.T
        pos = torch.tensor([positions])                                           # [1, n]
        cos_sin = self.model.model.rotary_emb(x, pos)                             # interleaved MRoPE, text positions
        mask = torch.full((n, n), float("-inf")).triu(1)[None, None]              # additive causal mask
        x = self.layer(x, position_embeddings=cos_sin, attention_mask=mask, position_ids=pos)
        g = rms_norm(x, self.w_norm, self.eps)
        logits = self.model.lm_head(g)
        return logits[0].float().numpy(), g[0].float().numpy()

    def prompt_rows(self, tokens: list[int], h: np.ndarray) -> np.ndarray:
        """Rows r = 1..L-1 of a prompt (token x_r, hidden h_{r-1}, position r): logits [L-1, V]."""
        L = len(tokens)
        return self.rows(tokens[1:], h[:L - 1], list(range(1, L)))[0]

    def draft(self, tokens: list[int], h: np.ndarray, trunk_last_logits: np.ndarray, k: int
              ) -> tuple[list[int], np.ndarray]:
        """The K-step greedy draft after the prompt: tokens t_1..t_{K+1} and the logits of steps 1..K [K, V]."""
        L = len(tokens)
        toks, hid, pos = list(tokens[1:]), [row for row in h[:L - 1]], list(range(1, L))
        t, u = int(np.argmax(trunk_last_logits)), h[L - 1]
        out_tokens, out_logits = [t], []
        for s in range(1, k + 1):
            toks.append(t)
            hid.append(u)
            pos.append(L + s - 1)
            lg, g = self.rows(toks, np.stack(hid), pos)
            out_logits.append(lg[-1])
            t, u = int(np.argmax(lg[-1])), g[-1]
            out_tokens.append(t)
        return out_tokens, np.stack(out_logits)
