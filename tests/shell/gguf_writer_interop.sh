#!/usr/bin/env bash
# gguf_writer_interop.sh TERN_BINARY FIXTURES_DIR: files written by tern's gguf::Writer (via the test_formats
# binary's WriterInterop.WriteSamples) must load in the reference readers: the gguf Python package (every key,
# value and tensor checked), and llama.cpp's own reader (gguf_init_from_file in the libggml-base bundled with
# llama-cpp-python) when that package is installed. Skips (exit 0, with a message) only when `import gguf` fails:
# scripts/install-pydeps.sh installs it.
set -euo pipefail
tern=$1
test_formats=$(dirname "$tern")/tests/test_formats
if ! python3 -c 'import gguf, numpy' 2>/dev/null; then
  echo "SKIP: python3 cannot import gguf/numpy (run scripts/install-pydeps.sh)"
  exit 0
fi
[ -x "$test_formats" ] || { echo "FAIL: $test_formats not built"; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
TERN_GGUF_INTEROP_DIR=$dir "$test_formats" --gtest_filter=WriterInterop.WriteSamples --gtest_brief=1 >/dev/null
for f in nested flat align64; do [ -s "$dir/$f.gguf" ] || { echo "FAIL: $f.gguf not written"; exit 1; }; done

python3 - "$dir" <<'EOF'
import sys, math
import numpy as np
import gguf
d = sys.argv[1]
# The values tests/formats/test_gguf_writer.cpp sample_writer() adds (inputs, not tern output).
expect = {
    "general.architecture": "llama", "general.name": "tern writer sample \u00e9",
    "t.u8": 200, "t.i8": -100, "t.u16": 60000, "t.i16": -30000, "t.u32": 4000000000, "t.i32": -2000000000,
    "t.f32": 0.15625, "t.bool": True, "t.u64": 18000000000000000000, "t.i64": -9000000000000000000,
    "t.f64": -1.0 / 3.0, "t.arr_u8": [1, 2, 255], "t.arr_i32": [-1, 0, 7], "t.arr_f32": [0.5, -1.25],
    "t.arr_f64": [1e300, -2.5], "t.arr_u64": [1, 1 << 40], "t.arr_i16": [-5, 5], "t.arr_bool": [True, False, True],
    "t.arr_str": ["alpha", "", "\u4e2d"], "llama.block_count": 1,
}
types = {"t.u8": "UINT8", "t.i8": "INT8", "t.u16": "UINT16", "t.i16": "INT16", "t.u32": "UINT32",
         "t.i32": "INT32", "t.f32": "FLOAT32", "t.bool": "BOOL", "t.u64": "UINT64", "t.i64": "INT64",
         "t.f64": "FLOAT64", "general.name": "STRING"}
bad = []
for name, align in (("nested", 32), ("flat", 32), ("align64", 64)):
    r = gguf.GGUFReader(f"{d}/{name}.gguf")
    if r.alignment != align:
        bad.append(f"{name}: alignment {r.alignment} != {align}")
    for k, v in expect.items():
        f = r.fields.get(k)
        if f is None:
            bad.append(f"{name}: missing {k}"); continue
        got = f.contents()
        if isinstance(got, list):
            got = [x.item() if hasattr(x, "item") else x for x in got]
        elif hasattr(got, "item"):
            got = got.item()
        if got != v and not (isinstance(v, float) and math.isclose(got, v, rel_tol=0, abs_tol=0)):
            bad.append(f"{name}: {k} = {got!r}, expected {v!r}")
        if k in types and f.types[0].name != types[k]:
            bad.append(f"{name}: {k} has type {f.types[0].name}, expected {types[k]}")
    if name == "nested":
        f = r.fields["t.arr_arr"]  # gguf-py flattens nested arrays: check structure via its types
        if [t.name for t in f.types] != ["ARRAY", "ARRAY", "INT32"]:
            bad.append(f"nested: t.arr_arr types {[t.name for t in f.types]}")
    ts = {t.name: t for t in r.tensors}
    a = ts["blk.0.attn_norm.weight"]
    if list(a.shape) != [32, 3] or a.tensor_type != gguf.GGMLQuantizationType.F32:
        bad.append(f"{name}: attn_norm shape {list(a.shape)} type {a.tensor_type}")
    want = (np.arange(96, dtype=np.float32) * 0.5 - 7.0)
    if not np.array_equal(np.asarray(a.data).reshape(-1), want):  # exact: the writer copies bytes
        bad.append(f"{name}: attn_norm data differs")
    q = ts["blk.0.ffn_up.weight"]
    if list(q.shape) != [64, 2] or q.tensor_type != gguf.GGMLQuantizationType.Q8_0 or int(q.n_bytes) != 136:
        bad.append(f"{name}: ffn_up shape {list(q.shape)} type {q.tensor_type} bytes {q.n_bytes}")
    raw = np.frombuffer(open(f"{d}/{name}.gguf", "rb").read(), dtype=np.uint8)
    qb = raw[q.data_offset:q.data_offset + 136]
    if not np.array_equal(qb, (np.arange(136) * 7 + 3).astype(np.uint8)):
        bad.append(f"{name}: ffn_up bytes differ")
    for t in r.tensors:
        if t.data_offset % align:
            bad.append(f"{name}: {t.name} at {t.data_offset}, not {align}-aligned")
if bad:
    print("FAIL (gguf-py):\n  " + "\n  ".join(bad)); sys.exit(1)
print("ok: gguf-py reads nested.gguf, flat.gguf, align64.gguf")
EOF

# llama.cpp's reader (optional: when llama-cpp-python is installed, or TERN_LIBGGML_BASE names a libggml-base.so).
python3 - "$dir" <<'EOF'
import ctypes, glob, os, sys
cands = [os.environ["TERN_LIBGGML_BASE"]] if os.environ.get("TERN_LIBGGML_BASE") else []
if not cands:
    try:
        import llama_cpp
    except Exception:
        print("note: llama_cpp not importable; skipped the llama.cpp reader check"); sys.exit(0)
    libdir = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    cands = sorted(glob.glob(os.path.join(libdir, "libggml-base.so*")))
    if not cands:
        print(f"FAIL: no libggml-base.so under {libdir}"); sys.exit(1)
lib = ctypes.CDLL(cands[0])
class Params(ctypes.Structure):
    _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.c_void_p)]
lib.gguf_init_from_file.restype = ctypes.c_void_p
lib.gguf_init_from_file.argtypes = [ctypes.c_char_p, Params]
for fn, rt in (("gguf_get_n_kv", ctypes.c_int64), ("gguf_get_n_tensors", ctypes.c_int64),
               ("gguf_get_alignment", ctypes.c_size_t), ("gguf_get_data_offset", ctypes.c_size_t)):
    getattr(lib, fn).restype = rt
    getattr(lib, fn).argtypes = [ctypes.c_void_p]
lib.gguf_free.argtypes = [ctypes.c_void_p]
d = sys.argv[1]
bad = []
for name, align, n_kv in (("flat", 32, 22), ("align64", 64, 23)):  # align64 adds general.alignment
    ctx = lib.gguf_init_from_file(f"{d}/{name}.gguf".encode(), Params(True, None))
    if not ctx:
        bad.append(f"{name}: gguf_init_from_file failed"); continue
    got = (lib.gguf_get_n_kv(ctx), lib.gguf_get_n_tensors(ctx), lib.gguf_get_alignment(ctx))
    if got != (n_kv, 3, align):
        bad.append(f"{name}: n_kv, n_tensors, alignment = {got}, expected {(n_kv, 3, align)}")
    lib.gguf_free(ctx)
if bad:
    print("FAIL (llama.cpp):\n  " + "\n  ".join(bad)); sys.exit(1)
print("ok: llama.cpp's gguf reader loads flat.gguf, align64.gguf")
EOF
