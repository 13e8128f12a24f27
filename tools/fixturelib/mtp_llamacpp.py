"""llama.cpp's own multi-token-prediction (MTP / "nextn") draft graph on a GGUF that keeps the MTP block, driven
through ctypes from the installed llama-cpp-python (its libllama.so; llama_cpp_ext for the llama-ext.h functions,
whose exported names are C++-mangled).

Set up as llama.cpp's common code sets up a draft-mtp speculative decoder (common/speculative.cpp,
common_speculative_init_result and common_speculative_impl_draft_mtp):
  - the model loaded once with llama_model_params.load_mtp = true;
  - a target context with llama_set_embeddings_nextn(ctx, true, masked=false): its h_nextn output is the trunk's
    final-normed hidden state of every batch row (the vector its LM head sees);
  - an MTP context on the same model with ctx_type = LLAMA_CONTEXT_TYPE_MTP, ctx_other = the target context,
    n_rs_seq = 0, the target's n_ctx, and llama_set_embeddings_nextn(ctx, true, masked=true) (its h_nextn is the
    MTP block's output after its shared-head norm, one row per output); fed with llama_batch_ext entries that carry
    a token id AND an embedding row (llama_batch_ext_add_token + llama_batch_ext_set_embd_token, what
    common_batch::set_embd renders to), run by llama_process(DECODE).
Unlike llama.cpp's server (whose process() hook also puts a row (x_0, zeros) at position 0), only rows 1..L-1 are
fed: row r = (x_r, h_{r-1}) at position r, as the PyTorch reference (mtp_ref.py) does. Both contexts use F32 K/V
caches and no flash attention (llama.cpp's defaults are an F16 cache and auto), so that the comparison measures the
graph, not cache rounding; 2 threads.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np


class _Log:
    """Keeps llama.cpp's log (it is chatty on stderr) and hands back the tail when something fails."""

    def __init__(self):
        import llama_cpp
        self.lines: list[str] = []

        def cb(level, text, _user):
            self.lines.append(text.decode(errors="replace"))
            del self.lines[:-200]
        self.cb = llama_cpp.llama_log_callback(cb)
        llama_cpp.llama_log_set(self.cb, ctypes.c_void_p())

    def tail(self) -> str:
        return "".join(self.lines[-40:])


_LOG: _Log | None = None


def _ctx_params(n_ctx: int, n_threads: int):
    import llama_cpp
    cp = llama_cpp.llama_context_default_params()
    cp.n_ctx = cp.n_batch = cp.n_ubatch = n_ctx
    cp.n_seq_max = 1
    cp.n_threads = cp.n_threads_batch = n_threads
    cp.type_k = cp.type_v = llama_cpp.GGML_TYPE_F32
    cp.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    cp.no_perf = True
    return cp


class LlamaMtp:
    """One GGUF with its MTP block: a target context and an MTP draft context, fresh for every prompt."""

    def __init__(self, gguf: Path, n_threads: int = 2, n_ctx: int = 512):
        global _LOG
        import llama_cpp
        import llama_cpp.llama_cpp_ext as ext  # llama-ext.h: llama_set_embeddings_nextn, llama_get_embeddings_nextn*
        self.L, self.ext = llama_cpp, ext
        if _LOG is None:
            _LOG = _Log()
        llama_cpp.llama_backend_init()
        mp = llama_cpp.llama_model_default_params()
        mp.n_gpu_layers = 0
        mp.load_mtp = True
        self.model = llama_cpp.llama_model_load_from_file(str(gguf).encode(), mp)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {gguf}:\n{_LOG.tail()}")
        if llama_cpp.llama_model_n_layer_nextn(self.model) != 1:
            raise RuntimeError(f"{gguf}: llama_model_n_layer_nextn = "
                               f"{llama_cpp.llama_model_n_layer_nextn(self.model)}, want 1")
        self.n_embd = llama_cpp.llama_model_n_embd_out(self.model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(self.model))
        self.n_threads, self.n_ctx = n_threads, n_ctx

    def close(self) -> None:
        if self.model:
            self.L.llama_model_free(self.model)
            self.model = None

    # -- contexts and batches ---------------------------------------------------------------------------------

    def _contexts(self):
        L = self.L
        tgt = L.llama_init_from_model(self.model, _ctx_params(self.n_ctx, self.n_threads))
        if not tgt:
            raise RuntimeError(f"target context failed:\n{_LOG.tail()}")
        self.ext.llama_set_embeddings_nextn(tgt, True, False)
        cp = _ctx_params(self.n_ctx, self.n_threads)
        cp.ctx_type = L.LLAMA_CONTEXT_TYPE_MTP
        cp.n_rs_seq = 0
        cp.ctx_other = tgt
        mtp = L.llama_init_from_model(self.model, cp)
        if not mtp:
            L.llama_free(tgt)
            raise RuntimeError(f"MTP context failed:\n{_LOG.tail()}")
        self.ext.llama_set_embeddings_nextn(mtp, True, True)
        return tgt, mtp

    def _process(self, ctx, entries: list[tuple[int, int, np.ndarray | None]]) -> None:
        """One llama_process(DECODE) of (token, position, embedding row or None) entries, every entry output."""
        L = self.L
        b = L.llama_batch_ext_init(ctx)
        keep = []
        try:
            for tok, pos, row in entries:
                idx = L.llama_batch_ext_add_token(b, 0, tok)
                if idx < 0:
                    raise RuntimeError(f"llama_batch_ext_add_token({tok}) = {idx}")
                p = (L.llama_pos * 4)(pos, 0, 0, 0)  # a text token reads pos[0] only
                ok = L.llama_batch_ext_set_pos(b, idx, p)
                if row is not None:
                    a = np.ascontiguousarray(row, dtype=np.float32)
                    keep.append(a)
                    e = L.llama_embd(a.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, a.shape[0])
                    ok = ok and L.llama_batch_ext_set_embd_token(b, idx, e)
                ok = ok and L.llama_batch_ext_set_output_logits(b, idx, True)
                if not ok:
                    raise RuntimeError(f"llama_batch_ext setup failed at entry {idx}:\n{_LOG.tail()}")
            rc = L.llama_process(ctx, L.LLAMA_PROCESS_TYPE_DECODE, b)
            if rc != 0:
                raise RuntimeError(f"llama_process = {rc}:\n{_LOG.tail()}")
        finally:
            L.llama_batch_ext_free(b)

    def _logits(self, ctx, n: int) -> np.ndarray:
        return np.stack([np.ctypeslib.as_array(self.L.llama_get_logits_ith(ctx, i), shape=(self.n_vocab,)).copy()
                         for i in range(n)])

    # -- the reference runs -----------------------------------------------------------------------------------

    def run(self, tokens: list[int], k: int) -> dict:
        """For one prompt x_0..x_{L-1}, in fresh contexts:
          trunk_logits [L, V], h [L, H]       the target's logits and h_nextn (unmasked: every row)
          mtp_logits [L-1, V]                 MTP rows r = 1..L-1: (x_r, h_{r-1}) at position r, one batch
          draft_tokens t_1..t_{K+1}, draft_logits [K, V], draft_g [K, H]
                                              t_1 = argmax trunk_logits[L-1]; step s at position L+s-1 with
                                              (t_s, u_s), u_1 = h_{L-1}, u_{s+1} = the MTP's h_nextn of step s
        """
        L = self.L
        n = len(tokens)
        assert n >= 2 and n + k <= self.n_ctx
        tgt, mtp = self._contexts()
        try:
            self._process(tgt, [(t, i, None) for i, t in enumerate(tokens)])
            trunk = self._logits(tgt, n)
            hp = self.ext.llama_get_embeddings_nextn(tgt)
            if not hp:
                raise RuntimeError("target context gave no h_nextn rows")
            h = np.ctypeslib.as_array(hp, shape=(n, self.n_embd)).copy()

            self._process(mtp, [(tokens[r], r, h[r - 1]) for r in range(1, n)])
            mtp_logits = self._logits(mtp, n - 1)

            t, u = int(np.argmax(trunk[n - 1])), h[n - 1]
            d_tokens, d_logits, d_g = [t], [], []
            for s in range(1, k + 1):
                self._process(mtp, [(t, n + s - 1, u)])
                d_logits.append(self._logits(mtp, 1)[0])
                gp = self.ext.llama_get_embeddings_nextn_ith(mtp, 0)
                if not gp:
                    raise RuntimeError("MTP context gave no h_nextn row")
                u = np.ctypeslib.as_array(gp, shape=(self.n_embd,)).copy()
                d_g.append(u)
                t = int(np.argmax(d_logits[-1]))
                d_tokens.append(t)
        finally:
            L.llama_free(mtp)
            L.llama_free(tgt)
        return {"trunk_logits": trunk, "h": h, "mtp_logits": mtp_logits, "draft_tokens": d_tokens,
                "draft_logits": np.stack(d_logits), "draft_g": np.stack(d_g)}
