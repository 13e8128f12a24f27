// llamacpp_dump: the llama.cpp side of tools/first_divergence.py. Runs one batch of token ids through llama.cpp
// (CPU, every row's logits) and writes each named graph tensor its eval callback sees as OUT_DIR/<name>.npy
// (float32, numpy order: ggml's ne reversed, size-1 outer dimensions dropped) — the names tern's --dump-tensors
// uses (attn_norm-3, l_out-3, result_output). A name llama.cpp gives to several tensors keeps the last one; the
// names that happened are listed on stdout. Not part of tern's build: first_divergence.py compiles it against the
// static libraries of bench/build_llamacpp.sh's llama.cpp build.
// usage: llamacpp_dump MODEL.gguf 1,2,3 OUT_DIR [THREADS] [f32|f16 KV cache]
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "llama.h"

namespace {

struct Dump {
  std::string dir;
  std::map<std::string, int> count;  // name -> how many tensors carried it
  std::vector<uint8_t> host;         // staging copy for tensors outside host memory
  bool failed = false;
};

// Graph names worth keeping: a llama.cpp cb() name ("attn_norm-3", "result_output"), not the names ggml derives
// for views and reshapes ("attn_norm-3 (reshaped)", "node_12").
bool wanted(const ggml_tensor* t) {
  const char* n = ggml_get_name(t);
  if (!n[0] || std::strchr(n, ' ') || std::strchr(n, '(') || std::strncmp(n, "node_", 5) == 0 ||
      std::strncmp(n, "leaf_", 5) == 0)
    return false;
  return t->type == GGML_TYPE_F32 || t->type == GGML_TYPE_F16 || t->type == GGML_TYPE_BF16;
}

bool write_npy(const std::string& path, const std::vector<float>& v, const std::vector<int64_t>& shape) {
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + ", ";
  if (shape.size() > 1) dims.resize(dims.size() - 1);  // "(5, 64)" ; "(64,)" keeps its comma
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const uint16_t hlen = static_cast<uint16_t>(header.size());
  bool ok = std::fwrite("\x93NUMPY\x01\x00", 1, 8, f) == 8 && std::fwrite(&hlen, 2, 1, f) == 1 &&
            std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
            std::fwrite(v.data(), sizeof(float), v.size(), f) == v.size();
  return std::fclose(f) == 0 && ok;
}

bool on_eval(ggml_tensor* t, bool ask, void* user) {
  if (ask) return wanted(t);
  auto* d = static_cast<Dump*>(user);
  if (!wanted(t)) return true;
  const uint8_t* base;
  if (ggml_backend_buffer_is_host(t->buffer)) {
    base = static_cast<const uint8_t*>(t->data);
  } else {
    d->host.resize(ggml_nbytes(t));
    ggml_backend_tensor_get(t, d->host.data(), 0, d->host.size());
    base = d->host.data();
  }
  // Gather through the strides: views and permutes arrive non-contiguous.
  std::vector<float> v(static_cast<size_t>(ggml_nelements(t)));
  size_t k = 0;
  for (int64_t i3 = 0; i3 < t->ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < t->ne[2]; ++i2)
      for (int64_t i1 = 0; i1 < t->ne[1]; ++i1)
        for (int64_t i0 = 0; i0 < t->ne[0]; ++i0) {
          const uint8_t* p = base + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
          if (t->type == GGML_TYPE_F32) v[k++] = *reinterpret_cast<const float*>(p);
          else if (t->type == GGML_TYPE_F16) v[k++] = ggml_fp16_to_fp32(*reinterpret_cast<const ggml_fp16_t*>(p));
          else v[k++] = ggml_bf16_to_fp32(*reinterpret_cast<const ggml_bf16_t*>(p));
        }
  std::vector<int64_t> shape{t->ne[3], t->ne[2], t->ne[1], t->ne[0]};
  while (shape.size() > 1 && shape.front() == 1) shape.erase(shape.begin());
  const std::string name = ggml_get_name(t);
  ++d->count[name];
  if (!write_npy(d->dir + "/" + name + ".npy", v, shape)) {
    std::fprintf(stderr, "llamacpp_dump: cannot write %s/%s.npy\n", d->dir.c_str(), name.c_str());
    d->failed = true;
  }
  return true;
}

void quiet_log(ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_WARN) std::fputs(text, stderr);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s MODEL.gguf 1,2,3 OUT_DIR [THREADS] [f32|f16]\n", argv[0]);
    return 2;
  }
  std::vector<llama_token> tokens;
  for (const char* s = argv[2]; *s;) {
    char* end;
    const long v = std::strtol(s, &end, 10);
    if (end == s) {
      std::fprintf(stderr, "llamacpp_dump: bad token list '%s'\n", argv[2]);
      return 2;
    }
    tokens.push_back(static_cast<llama_token>(v));
    s = *end == ',' ? end + 1 : end;
  }
  if (tokens.empty()) {
    std::fprintf(stderr, "llamacpp_dump: no tokens\n");
    return 2;
  }
  const int threads = argc > 4 ? std::atoi(argv[4]) : 2;
  const bool kv_f16 = argc > 5 && std::strcmp(argv[5], "f16") == 0;
  Dump dump;
  dump.dir = argv[3];

  llama_log_set(quiet_log, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  mp.use_extra_bufts = false;  // no repacked weight layouts: the plain CPU kernels
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) {
    std::fprintf(stderr, "llamacpp_dump: llama.cpp cannot load %s\n", argv[1]);
    return 1;
  }
  const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  for (llama_token t : tokens)
    if (t < 0 || t >= n_vocab) {
      std::fprintf(stderr, "llamacpp_dump: token %d out of range (vocabulary %d)\n", t, n_vocab);
      return 1;
    }
  const uint32_t n = static_cast<uint32_t>(tokens.size());
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = n < 256 ? 256 : n;
  cp.n_batch = cp.n_ubatch = n;  // one graph over the whole prompt, as tern's one forward
  cp.n_seq_max = 1;
  cp.n_threads = cp.n_threads_batch = threads;
  cp.type_k = cp.type_v = kv_f16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
  cp.cb_eval = on_eval;
  cp.cb_eval_user_data = &dump;
  cp.no_perf = true;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) {
    std::fprintf(stderr, "llamacpp_dump: cannot create a llama.cpp context\n");
    return 1;
  }
  llama_batch batch = llama_batch_init(static_cast<int32_t>(n), 0, 1);
  for (uint32_t i = 0; i < n; ++i) {
    batch.token[i] = tokens[i];
    batch.pos[i] = static_cast<llama_pos>(i);
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = 1;  // every row's logits: no output-row gather in the last layer
  }
  batch.n_tokens = static_cast<int32_t>(n);
  const int32_t rc = llama_decode(ctx, batch);
  llama_batch_free(batch);
  if (rc != 0) {
    std::fprintf(stderr, "llamacpp_dump: llama_decode returned %d\n", rc);
    return 1;
  }
  std::string dups;
  for (const auto& [name, c] : dump.count)
    if (c > 1) dups += " " + name + "x" + std::to_string(c);
  std::printf("llamacpp_dump: %zu names written to %s\n", dump.count.size(), dump.dir.c_str());
  if (!dups.empty()) std::printf("llamacpp_dump: names given to several tensors (the last kept):%s\n", dups.c_str());
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return dump.failed ? 1 : 0;
}
