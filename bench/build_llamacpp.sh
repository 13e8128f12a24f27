#!/usr/bin/env bash
# bench/build_llamacpp.sh [DIR]: llama.cpp's own tools (llama-bench, llama-server, llama-quantize, llama-perplexity),
# the peer of bench/e2e.py, built CPU-only for this machine (GGML_NATIVE=ON, static libraries, no tests, examples,
# web UI download or OpenSSL) from the llama.cpp vendored in the llama-cpp-python==0.3.36 source distribution,
# outside the repository in DIR (default ${XDG_CACHE_HOME:-$HOME/.cache}/tern/llama.cpp-0.3.36).
# Cached: when DIR already holds the finished build it only prints the paths. Output on stdout, one per line:
# NAME=PATH for the four binaries, convert_hf_to_gguf.py and the bin folder; progress goes to stderr.
# A copy of llama_cpp_python-0.3.36.tar.gz placed in DIR beforehand is used instead of downloading it.
# --isa avx2 [DIR]: a second build with AVX2/FMA/F16C and no AVX-512 (GGML_NATIVE=OFF), default DIR
# .../llama.cpp-0.3.36-avx2: with `tern bench --isa avx2` (bench/e2e.py --isa avx2) it compares the two engines'
# AVX2 code paths on an AVX-512 machine.
set -euo pipefail
version=0.3.36
isa=native
if [[ ${1:-} == --isa ]]; then
  [[ ${2:-} == avx2 ]] || { echo "build_llamacpp: --isa takes avx2 (got '${2:-}')" >&2; exit 2; }
  isa=avx2
  shift 2
fi
suffix=; [[ $isa == avx2 ]] && suffix=-avx2
dir=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/tern/llama.cpp-$version$suffix}
tools=(llama-bench llama-server llama-quantize llama-perplexity)
sdist=llama_cpp_python-$version.tar.gz
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
bin=$dir/build/bin

print_paths() {
  for t in "${tools[@]}"; do echo "$t=$bin/$t"; done
  echo "convert_hf_to_gguf=$dir/src/convert_hf_to_gguf.py"
  echo "bin=$bin"
}

complete() {
  [[ -f $dir/build-info.txt ]] || return 1
  for t in "${tools[@]}"; do [[ -x $bin/$t ]] || return 1; done
}

if complete; then
  echo "build_llamacpp: cached in $dir ($(head -1 "$dir/build-info.txt"))" >&2
  print_paths
  exit 0
fi

native_sdist=${XDG_CACHE_HOME:-$HOME/.cache}/tern/llama.cpp-$version/$sdist
if [[ ! -f $dir/$sdist && $isa == avx2 && -f $native_sdist ]]; then cp "$native_sdist" "$dir/$sdist"; fi
if [[ ! -f $dir/$sdist ]]; then
  echo "build_llamacpp: downloading the llama-cpp-python $version source distribution" >&2
  python3 -m pip download --quiet --no-binary :all: --no-deps "llama-cpp-python==$version" -d "$dir/dl" >&2
  mv "$dir/dl/$sdist" "$dir/$sdist"
  rm -rf "$dir/dl"
fi

# Only vendor/llama.cpp is needed; its commit comes from the submodule's HEAD in the archive (the extracted tree
# has no usable .git, so llama.cpp's build-info would say "unknown").
if [[ ! -f $dir/src/CMakeLists.txt ]]; then
  echo "build_llamacpp: extracting vendor/llama.cpp" >&2
  rm -rf "$dir/src" "$dir/src.part"
  mkdir -p "$dir/src.part"
  tar -xzf "$dir/$sdist" -C "$dir/src.part" --strip-components=3 "llama_cpp_python-$version/vendor/llama.cpp"
  rm -f "$dir/src.part/.git"
  mv "$dir/src.part" "$dir/src"
fi
commit=$(tar -xzOf "$dir/$sdist" "llama_cpp_python-$version/.git/modules/vendor/llama.cpp/HEAD" 2>/dev/null |
           tr -dc '0-9a-f' | head -c 40 || true)
[[ -n $commit ]] || commit=unknown

isa_flags=(-DGGML_NATIVE=ON)
[[ $isa == avx2 ]] && isa_flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
                                 -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF
                                 -DGGML_AVX_VNNI=OFF)
flags=(-DCMAKE_BUILD_TYPE=Release "${isa_flags[@]}" -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF
       -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF
       -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DGGML_CUDA=OFF -DGGML_VULKAN=OFF
       -DGGML_METAL=OFF -DLLAMA_BUILD_COMMIT="$commit")
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
echo "build_llamacpp: building ${tools[*]} (llama.cpp $commit, ${flags[*]}) with $(nproc) jobs in $dir/build" >&2
t0=$(date +%s)
nice cmake -S "$dir/src" -B "$dir/build" "${generator[@]}" "${flags[@]}" >"$dir/cmake.log" 2>&1 ||
  { tail -30 "$dir/cmake.log" >&2; echo "build_llamacpp: cmake configure failed (log: $dir/cmake.log)" >&2; exit 1; }
nice cmake --build "$dir/build" -j "$(nproc)" --target "${tools[@]}" >"$dir/build.log" 2>&1 ||
  { tail -30 "$dir/build.log" >&2; echo "build_llamacpp: build failed (log: $dir/build.log)" >&2; exit 1; }
secs=$(( $(date +%s) - t0 ))
for t in "${tools[@]}"; do
  [[ -x $bin/$t ]] || { echo "build_llamacpp: $bin/$t missing after the build" >&2; exit 1; }
done
{
  echo "llama.cpp $commit from llama-cpp-python $version, built $(date -u +%Y-%m-%dT%H:%M:%SZ)" \
       "in ${secs} s, $(nproc) jobs"
  echo "cmake ${flags[*]}"
} >"$dir/build-info.txt"
echo "build_llamacpp: done in ${secs} s" >&2
print_paths
