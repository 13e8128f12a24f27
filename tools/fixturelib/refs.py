"""Reference files: a JSON index plus raw little-endian f32 arrays (.bin), read by tests/models without Python."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from .presets import LONG_KEEP_ROWS

FORMAT = "tern-model-ref-v1"
LOGITS_NOTE = (
    "Reference files: a JSON index plus raw little-endian arrays (.bin), readable from C++ without Python.\n\n"
    "Layout of tests/fixtures/models/<preset>/ref_<source>.json (format \"tern-model-ref-v1\"):\n"
    "  prompts[]: {name, tokens[], argmax[] (top-1 id at EVERY position), logits: {file, dtype \"f32\",\n"
    "              shape [rows, n_vocab], first_row}}  -- row r of the file is position first_row + r. Prompts of\n"
    f"              length <= 65 keep every row; the 300-token prompt keeps its last {LONG_KEEP_ROWS} rows (full "
    "logits would be\n"
    "              600 KB per prompt; its argmax still covers every position).\n"
    "  greedy[]:  {prompt (name), n_new, tokens[] (new tokens only), distinct}\n"
    "Each .bin holds exactly prod(shape) values, row-major, no header.")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for blk in iter(lambda: f.read(1 << 20), b""):
            h.update(blk)
    return h.hexdigest()


def first_stored_row(n_tokens: int) -> int:
    return 0 if n_tokens <= 65 else n_tokens - LONG_KEEP_ROWS


def prompt_entry(out_dir: Path, prefix: str, name: str, tokens: list[int], logits: np.ndarray) -> dict:
    """Writes <prefix>_<name>.f32.bin (all rows, or the last LONG_KEEP_ROWS of a long prompt)."""
    assert logits.shape[0] == len(tokens), (logits.shape, len(tokens))
    first = first_stored_row(len(tokens))
    rows = np.ascontiguousarray(logits[first:], dtype="<f4")
    fname = f"{prefix}_{name}.f32.bin"
    rows.tofile(out_dir / fname)
    return {"name": name, "tokens": [int(t) for t in tokens], "argmax": [int(a) for a in logits.argmax(axis=1)],
            "logits": {"file": fname, "dtype": "f32", "shape": list(rows.shape), "first_row": first}}


def write_ref(out_dir: Path, source: str, header: dict, prompts: list[dict], greedy: list[dict] | None) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = {"format": FORMAT, "source": source, **header, "logits_note": LOGITS_NOTE, "prompts": prompts}
    if greedy is not None:
        doc["greedy"] = greedy
    path = out_dir / f"ref_{source}.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path
