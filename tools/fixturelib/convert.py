"""llama.cpp's own tools on fixture checkpoints: convert_hf_to_gguf.py (from the llama-cpp-python sdist, via
convert_shim.py) and, once llama-cpp-python imports, llama_model_quantize."""
from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

SDIST = "llama_cpp_python-0.3.36"
SHIM = Path(__file__).resolve().parent / "convert_shim.py"


def locate_llama_cpp_src(sdist: str | None, work: Path) -> Path:
    """llama.cpp's source tree (vendor/llama.cpp) from an sdist .tar.gz, an unpacked sdist, or work/<SDIST>;
    downloads the sdist with pip into work/ when none is given or found."""
    work.mkdir(parents=True, exist_ok=True)
    if sdist is None:
        unpacked = work / SDIST
        if not unpacked.exists():
            tgz = work / f"{SDIST}.tar.gz"
            if not tgz.exists():
                subprocess.run([sys.executable, "-m", "pip", "download", f"llama-cpp-python=={SDIST.split('-')[-1]}",
                                "--no-deps", "--no-binary", ":all:", "-d", str(work)], check=True)
            sdist = str(tgz)
        else:
            sdist = str(unpacked)
    src = Path(sdist)
    if src.is_file():
        with tarfile.open(src) as tf:
            top = tf.getnames()[0].split("/")[0]
            if not (work / top).exists():
                tf.extractall(work, filter="data")
        src = work / top
    lcpp = src / "vendor" / "llama.cpp"
    if not (lcpp / "convert_hf_to_gguf.py").exists():
        raise FileNotFoundError(f"{lcpp}/convert_hf_to_gguf.py not found")
    return lcpp


def convert(lcpp: Path, hf_dir: Path, outtype: str, out: Path, log: Path) -> None:
    """convert_hf_to_gguf.py --outtype OUTTYPE --no-mtp; its output goes to `log`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(SHIM), str(lcpp), str(hf_dir), "--outtype", outtype, "--outfile", str(out),
           "--no-mtp"]
    with open(log, "w") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        raise RuntimeError(f"convert_hf_to_gguf.py failed for {hf_dir} -> {outtype}; see {log}")


QUANT_FTYPES = {"q4_0": 2, "q8_0": 7, "q4_k_m": 15, "q5_k_m": 17, "q6_k": 18}  # llama_ftype


def quantize(src: Path, dst: Path, qtype: str, nthread: int = 2) -> None:
    """llama.cpp's quantizer (llama_model_quantize, as llama-quantize runs it) from an F32 file."""
    import ctypes

    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = QUANT_FTYPES[qtype]
    params.nthread = nthread
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize {src} -> {qtype} failed ({rc})")


def gguf_py_version(lcpp: Path) -> str | None:
    for line in (lcpp / "gguf-py" / "pyproject.toml").read_text().splitlines():
        if line.startswith("version"):
            return line.split("=")[1].strip().strip('"')
    return None
