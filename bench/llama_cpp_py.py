"""The llama.cpp peer of bench/streaming.py (moved from bench/e2e.py, which now runs the real llama-bench built by
bench/build_llamacpp.sh): streaming.py needs llama.cpp in one child process it can put in a memory cgroup, with
memory-mapped weights that are not repacked. Needs llama-cpp-python."""
from __future__ import annotations

import ctypes
import random
import sys
import time


class LlamaCpp:
    """llama.cpp through its C API (llama-cpp-python's ctypes bindings), timed the way llama-bench times: pp = one
    llama_decode of the whole prompt, tg = one llama_decode per token, a depth = a prompt decoded first, untimed;
    llama_synchronize before the clock stops; the memory (KV cache and recurrent state) cleared before each run."""

    def __init__(self, path, threads, n_ctx, mmap_only=False):
        import llama_cpp as L

        self.L = L
        L.llama_backend_init()
        self._log_cb = L.llama_log_callback(lambda level, text, user: None)  # keep a reference: C holds it
        L.llama_log_set(self._log_cb, ctypes.c_void_p())
        mp = L.llama_model_default_params()
        if mmap_only:  # weights stay in the page cache (no repacked copies), so a memory limit can reclaim them
            mp.load_mode = L.LLAMA_LOAD_MODE_MMAP
            mp.use_extra_bufts = False
        self.model = L.llama_model_load_from_file(path.encode(), mp)
        if not self.model:
            sys.exit(f"error: llama.cpp cannot load {path}")
        cp = L.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = 512
        cp.n_ubatch = 512
        cp.n_threads = threads
        cp.n_threads_batch = threads
        cp.no_perf = True
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            sys.exit(f"error: llama.cpp cannot create a context for {path}")
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        self.rng = random.Random(1234)

    def close(self):
        self.L.llama_free(self.ctx)
        self.L.llama_model_free(self.model)

    def _decode(self, tokens):
        arr = (self.L.llama_token * len(tokens))(*tokens)
        rc = self.L.llama_decode(self.ctx, self.L.llama_batch_get_one(arr, len(tokens)))
        if rc != 0:
            sys.exit(f"error: llama_decode returned {rc}")

    def _tokens(self, n):
        return [self.rng.randrange(self.n_vocab) for _ in range(n)]

    def _start(self, depth):
        self.L.llama_memory_clear(self.L.llama_get_memory(self.ctx), True)
        for i in range(0, depth, 512):
            self._decode(self._tokens(min(512, depth - i)))
        self.L.llama_synchronize(self.ctx)

    def pp(self, n, depth=0):
        self._start(depth)
        toks = self._tokens(n)
        t0 = time.perf_counter()
        for i in range(0, n, 512):
            self._decode(toks[i:i + 512])
        self.L.llama_synchronize(self.ctx)
        return n / (time.perf_counter() - t0)

    def tg(self, n, depth=0):
        self._start(depth)
        toks = self._tokens(n)
        t0 = time.perf_counter()
        for t in toks:
            self._decode([t])
        self.L.llama_synchronize(self.ctx)
        return n / (time.perf_counter() - t0)
