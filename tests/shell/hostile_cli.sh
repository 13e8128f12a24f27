#!/usr/bin/env bash
# hostile_cli.sh TERN_BINARY FIXTURES_DIR: every subcommand that takes a model file, given a hostile file, must
# exit with status exactly 1 and exactly one stderr line starting with "tern: error:", within 1 second and
# under a 1 GiB address-space limit. Files are truncations of the committed fixture plus headers crafted here
# with printf. To cover a new subcommand, add it to COMMANDS ({} is replaced by the model path).
set -uo pipefail
tern=$1
fixtures=$2
COMMANDS=("info {}" "info --json {}" "run -m {} --tokens 1,2 -n 1 --print-ids -t 1" "logits -m {} --tokens 1,2 -o /dev/null -t 1"
          "bench -m {} -p 4 -n 2 -r 1 -t 1" "plan -m {}" "plan -m {} --mem-budget 64M --json")

work=$(mktemp -d); [ -n "${KEEP:-}" ] && echo "files in $work"
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT

# Sanitizer builds reserve terabytes of address space and start slower: no ulimit -v, a longer timeout.
limit_kb=$((1024 * 1024))
secs=1
# (grep -c reads all its input: with pipefail, grep -q's early exit can SIGPIPE nm or ldd and fail the pipeline, which
# once left an ASan binary under the 1 GiB limit.)
if [ "$(nm "$tern" 2>/dev/null | grep -c __asan_init)" -gt 0 ] || [ "$(ldd "$tern" 2>/dev/null | grep -c libasan)" -gt 0 ]; then
  limit_kb=unlimited
  secs=10
fi

# Little-endian encoders: u32 N, u64 HI LO (two 32-bit halves, since bash arithmetic is signed 64-bit).
u32() { printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($1 & 255)) $((($1 >> 8) & 255)) $((($1 >> 16) & 255)) $((($1 >> 24) & 255)))"; }
u64() { u32 "$2"; u32 "$1"; }
n64() { u64 0 "$1"; }                                 # small u64
str() { n64 ${#1}; printf '%s' "$1"; }                # GGUF string
hdr() { printf 'GGUF'; u32 "${3:-3}"; n64 "$1"; n64 "$2"; }   # hdr N_TENSORS N_KV [VERSION]
kv_u32() { str "$1"; u32 4; u32 "$2"; }
tinfo() { str "$1"; u32 1; n64 "$2"; u32 "$3"; n64 "$4"; }     # tinfo NAME NE0 TYPE OFFSET (1-D)
zeros() { head -c "$1" /dev/zero; }

cd "$work" || exit 1
true >empty
printf 'GGUF' >magic_only
{ printf 'GGML'; zeros 60; } >bad_magic
hdr 0 0 1 >version1
hdr 0 0 99 >version99
{ printf 'GGUF'; u32 3; u64 2147483648 0; n64 0; } >n_tensors_2e63
{ printf 'GGUF'; u32 3; n64 0; u64 268435456 0; } >n_kv_2e60
{ hdr 0 1; u64 1073741824 0; zeros 32; } >key_len_2e62
{ hdr 0 1; str k; u32 8; u64 4294967295 4294967295; zeros 8; } >str_len_huge
{ hdr 0 1; str k; u32 9; u32 4; u64 1073741823 0; zeros 8; } >array_len_huge
{ hdr 0 1; str k; u32 9; u32 8; n64 100000000; zeros 8; } >array_past_eof
{ u32 9; n64 1; } >chunk                                    # one nesting level; doubled 11 times: 2048 levels
for _ in $(seq 11); do cat chunk chunk >chunk2; mv chunk2 chunk; done
{ hdr 0 1; str k; u32 9; cat chunk; } >nested_deep; rm chunk
{ hdr 1 0; str w; u32 2; u64 1 0; u64 1 0; u32 0; n64 0; zeros 64; } >dims_overflow
{ hdr 1 0; str w; u32 1; u64 4294967295 4294967295; u32 0; n64 0; zeros 64; } >dim_negative
{ hdr 1 0; str w; u32 5; zeros 100; } >n_dims_5
{ hdr 1 0; tinfo w 32 4 0; zeros 200; } >unknown_type
{ hdr 0 1; str k; u32 13; zeros 8; } >unknown_value_type
{ hdr 1 0; tinfo w 4 0 16; zeros 128; } >misaligned
{ hdr 1 0; tinfo blk.3.ffn_down_exps.weight 4 0 4096; zeros 64; } >offset_past_eof
{ hdr 1 0; str w; u32 1; n64 8; u32 0; u64 4294967295 4294967264; zeros 64; } >offset_wraps
{ hdr 2 0; tinfo a 16 0 0; tinfo b 8 0 32; zeros 160; } >overlap
{ hdr 0 2; kv_u32 k 1; kv_u32 k 2; } >dup_key
{ hdr 2 0; tinfo w 8 0 0; tinfo w 8 0 32; zeros 160; } >dup_tensor
{ hdr 0 1; kv_u32 general.alignment 0; } >align0
{ hdr 0 1; kv_u32 general.alignment 3; } >align3
{ hdr 0 2; kv_u32 $'a\nb' 1; kv_u32 $'a\nb' 1; } >newline_key
{ hdr 0 1; kv_u32 general.architecture 7; } >arch_wrong_type
{ hdr 0 3; str general.architecture; u32 8; str qwen35moe; kv_u32 qwen35moe.block_count 4
  kv_u32 qwen35moe.full_attention_interval 0; } >interval_zero
{ hdr 0 3; str general.architecture; u32 8; str qwen35moe; kv_u32 qwen35moe.block_count 4000000000
  kv_u32 qwen35moe.full_attention_interval 4; } >layers_4e9
cd - >/dev/null || exit 1
fixture=$fixtures/gguf/tiny-qwen35moe.gguf
size=$(stat -c %s "$fixture")
for n in 3 24 100 1000 5000 $((size / 2)) $((size - 1)); do
  head -c "$n" "$fixture" >"$work/truncated_$n"
done
mkdir "$work/a_directory"
files=("$work"/* "$work/does_not_exist")

fail=0
checked=0
for f in "${files[@]}"; do
  for cmd in "${COMMANDS[@]}"; do
    argv=${cmd//\{\}/$f}
    # shellcheck disable=SC2086
    ( ulimit -v "$limit_kb"; exec timeout "$secs" "$tern" $argv ) >"$work.out" 2>"$work.err" </dev/null
    rc=$?
    lines=$(wc -l <"$work.err")
    first=$(head -n 1 "$work.err")
    checked=$((checked + 1))
    if [ "$rc" -ne 1 ] || [ "$lines" -ne 1 ] || [[ "$first" != "tern: error:"* ]]; then
      echo "FAIL: tern $argv -> exit $rc, $lines stderr lines:"
      sed 's/^/    /' "$work.err" | head -n 5
      fail=1
    fi
  done
done
rm -f "$work.out" "$work.err"
# The committed fixture itself must pass every command (so the checks above are not vacuous).
for cmd in "${COMMANDS[@]}"; do
  argv=${cmd//\{\}/$fixture}
  # shellcheck disable=SC2086
  if ! ( ulimit -v "$limit_kb"; exec timeout "$secs" "$tern" $argv ) >/dev/null 2>&1; then
    echo "FAIL: tern $argv on the valid fixture did not succeed"
    fail=1
  fi
done
[ "$fail" -eq 0 ] && echo "ok: $checked hostile runs, each exit 1 with one 'tern: error:' line"
exit "$fail"
