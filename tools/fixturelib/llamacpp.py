"""llama.cpp (through llama-cpp-python) on a committed GGUF: teacher-forced logits for the reference prompts."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def available() -> str | None:
    """llama-cpp-python's version, or None when it does not import."""
    try:
        import llama_cpp
    except Exception:  # noqa: BLE001 - any import failure means "not available"
        return None
    return llama_cpp.__version__


def teacher_forced(gguf: Path, tokens: list[int], n_threads: int = 2) -> np.ndarray:
    """[len(tokens), n_vocab] logits, row i after token i, the whole prompt in one batch (as tern's prefill).
    A fresh context per prompt: no state carried between prompts."""
    from llama_cpp import Llama

    n_ctx = max(512, len(tokens))
    llm = Llama(model_path=str(gguf), n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, n_threads=n_threads,
                n_threads_batch=n_threads, logits_all=True, verbose=False)
    try:
        llm.eval(tokens)
        out = np.array(llm.scores[: len(tokens)], dtype=np.float32)
    finally:
        llm.close()
    if out.shape != (len(tokens), llm.n_vocab()):
        raise RuntimeError(f"{gguf}: llama.cpp logits shape {out.shape}")
    return out
