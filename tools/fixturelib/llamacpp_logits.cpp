// llamacpp_logits: llama.cpp's teacher-forced logits for a list of prompts, configured exactly as
// fixturelib/llamacpp.py configures llama-cpp-python (Llama(n_ctx=max(512, n), n_batch=n_ubatch=n_ctx,
// logits_all=True, flash_attn=False, n_threads=n_threads_batch=THREADS) + one eval() of the whole prompt in a fresh
// context), for machines where llama-cpp-python is not installed but llama.cpp's static libraries are (the build
// bench/build_llamacpp.sh makes). Not part of tern's build; tools/fixturelib/glm.py compiles and runs it.
// usage: llamacpp_logits MODEL.gguf PROMPTS.txt OUT.f32 [THREADS] [f32]
//   (a fifth argument "f32" makes the KV cache F32 instead of llama-cpp-python's default F16: diagnostics only)
//   PROMPTS.txt: one prompt per line, comma-separated token ids; OUT.f32: every prompt's [n_tokens, n_vocab]
//   logits, row-major little-endian float32, prompts in file order, no header.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "llama.h"

namespace {

void quiet_log(ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

bool parse(const std::string& line, std::vector<llama_token>& out) {
  out.clear();
  const char* s = line.c_str();
  while (*s) {
    char* end;
    const long v = std::strtol(s, &end, 10);
    if (end == s) return false;
    out.push_back(static_cast<llama_token>(v));
    s = *end == ',' ? end + 1 : end;
  }
  return !out.empty();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s MODEL.gguf PROMPTS.txt OUT.f32 [THREADS] [f32]\n", argv[0]);
    return 2;
  }
  const int threads = argc > 4 ? std::atoi(argv[4]) : 2;
  const bool kv_f32 = argc > 5 && std::string(argv[5]) == "f32";
  std::ifstream in(argv[2]);
  std::vector<std::vector<llama_token>> prompts;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    prompts.emplace_back();
    if (!parse(line, prompts.back())) {
      std::fprintf(stderr, "llamacpp_logits: bad prompt line '%s'\n", line.c_str());
      return 2;
    }
  }
  llama_log_set(quiet_log, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) {
    std::fprintf(stderr, "llamacpp_logits: llama.cpp cannot load %s\n", argv[1]);
    return 1;
  }
  const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  FILE* out = std::fopen(argv[3], "wb");
  if (!out) return 1;
  for (const auto& toks : prompts) {
    const uint32_t n = static_cast<uint32_t>(toks.size());
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n < 512 ? 512 : n;
    cp.n_batch = cp.n_ubatch = cp.n_ctx;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.no_perf = true;
    if (kv_f32) cp.type_k = cp.type_v = GGML_TYPE_F32;
    llama_context* ctx = llama_init_from_model(model, cp);
    if (!ctx) {
      std::fprintf(stderr, "llamacpp_logits: cannot create a llama.cpp context\n");
      return 1;
    }
    llama_batch batch = llama_batch_init(static_cast<int32_t>(n), 0, 1);
    for (uint32_t i = 0; i < n; ++i) {
      if (toks[i] < 0 || toks[i] >= n_vocab) {
        std::fprintf(stderr, "llamacpp_logits: token %d out of range\n", toks[i]);
        return 1;
      }
      batch.token[i] = toks[i];
      batch.pos[i] = static_cast<llama_pos>(i);
      batch.n_seq_id[i] = 1;
      batch.seq_id[i][0] = 0;
      batch.logits[i] = 1;
    }
    batch.n_tokens = static_cast<int32_t>(n);
    const int32_t rc = llama_decode(ctx, batch);
    llama_batch_free(batch);
    if (rc != 0) {
      std::fprintf(stderr, "llamacpp_logits: llama_decode returned %d\n", rc);
      return 1;
    }
    const float* lg = llama_get_logits(ctx);
    if (std::fwrite(lg, sizeof(float), static_cast<size_t>(n) * n_vocab, out) != static_cast<size_t>(n) * n_vocab)
      return 1;
    llama_free(ctx);
  }
  std::printf("llamacpp_logits: %zu prompts, n_vocab %d\n", prompts.size(), n_vocab);
  llama_model_free(model);
  llama_backend_free();
  return std::fclose(out) == 0 ? 0 : 1;
}
