// make_synthetic_model OUT.gguf [key=value ...]: writes a random-weight qwen35moe GGUF of any geometry with
// tern's own GGUF writer and reference quantizers, fast enough for test-time generation (a model much larger
// than a memory budget, for the expert-streaming tests). No tokenizer: for commands that take token ids
// (bench, logits). Keys (defaults in brackets): layers [4], embd [256], heads [4], kv_heads [1], head_dim [64],
// experts [64], used [4], ff [256], shared_ff [256], vocab [512], k_heads [2], v_heads [4], head_k [32],
// head_v [32], interval [4], type [f16] (matrices: f32, f16, q8_0, q4_0), seed [1], legacy_ssm_in [0] (1: layer 0
// also carries the fused q|k|v|z `ssm_in` of early qwen3next conversions, which a qwen35moe file may not hold).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "formats/gguf_writer.h"
#include "quant/convert.h"
#include "quant/types.h"

using namespace tern;

namespace {

struct Geometry {
  std::map<std::string, int64_t> v = {{"layers", 4},  {"embd", 256},  {"heads", 4},     {"kv_heads", 1},
                                      {"head_dim", 64}, {"experts", 64}, {"used", 4},   {"ff", 256},
                                      {"shared_ff", 256}, {"vocab", 512}, {"k_heads", 2}, {"v_heads", 4},
                                      {"head_k", 32}, {"head_v", 32}, {"interval", 4}, {"seed", 1},
                                      {"legacy_ssm_in", 0}};
  std::string type = "f16";
  int64_t operator[](const char* k) const { return v.at(k); }
};

class Builder {
 public:
  Builder(const Geometry& g, quant::Type mat) : g_(g), mat_(mat), rng_(static_cast<uint32_t>(g["seed"])) {}

  // A matrix {n_in, n_out[, n_expert]} of N(0, gain^2 / n_in) values stored as the matrix type.
  void matrix(const std::string& name, std::vector<int64_t> ne, float gain = 1.0f) { add(name, mat_, ne, gain / std::sqrt(float(ne[0])), 0); }
  void vector_f32(const std::string& name, std::vector<int64_t> ne, float mean, float std) { add(name, quant::Type::F32, ne, std, mean); }
  gguf::Writer& writer() { return w_; }

 private:
  void add(const std::string& name, quant::Type t, const std::vector<int64_t>& ne, float std, float mean) {
    int64_t rows = 1;
    for (size_t i = 1; i < ne.size(); ++i) rows *= ne[i];
    const int64_t n_in = ne[0];
    const size_t row_bytes = quant::row_size(quant::traits(t), n_in);
    std::vector<uint8_t> bytes(row_bytes * static_cast<size_t>(rows));
    std::normal_distribution<float> nd(mean, std);
    std::vector<float> row(static_cast<size_t>(n_in));
    for (int64_t r = 0; r < rows; ++r) {
      for (auto& x : row) x = nd(rng_);
      quant::quantize_row_ref(t, row.data(), bytes.data() + static_cast<size_t>(r) * row_bytes, n_in);
    }
    w_.add_tensor(name, t, ne, bytes);
  }
  const Geometry& g_;
  quant::Type mat_;
  std::mt19937 rng_;
  gguf::Writer w_;
};

std::string blk(int64_t i, const char* n) { return "blk." + std::to_string(i) + "." + n; }

void build(const Geometry& g, const std::string& out) {
  const auto type = quant::type_from_name(g.type);
  if (!type || (*type != quant::Type::F32 && *type != quant::Type::F16 && *type != quant::Type::Q8_0 &&
                *type != quant::Type::Q4_0))
    fail("type=%s: expected f32, f16, q8_0 or q4_0", g.type.c_str());
  Builder b(g, *type);
  auto& w = b.writer();
  const int64_t D = g["embd"], L = g["layers"], hd = g["head_dim"], nh = g["heads"], nkv = g["kv_heads"];
  const int64_t E = g["experts"], F = g["ff"], Fs = g["shared_ff"], V = g["vocab"];
  const int64_t hk = g["k_heads"], hv = g["v_heads"], dk = g["head_k"], dv = g["head_v"];
  const int64_t q_dim = nh * hd, kv_dim = nkv * hd, value_dim = hv * dv, conv_dim = 2 * hk * dk + value_dim;
  const std::string a = "qwen35moe.";
  w.add_str("general.architecture", "qwen35moe");
  w.add_str("general.name", "synthetic qwen35moe (random weights)");
  w.add_u32(a + "block_count", static_cast<uint32_t>(L));
  w.add_u32(a + "context_length", 4096);
  w.add_u32(a + "embedding_length", static_cast<uint32_t>(D));
  w.add_u32(a + "attention.head_count", static_cast<uint32_t>(nh));
  w.add_u32(a + "attention.head_count_kv", static_cast<uint32_t>(nkv));
  w.add_u32(a + "attention.key_length", static_cast<uint32_t>(hd));
  w.add_u32(a + "attention.value_length", static_cast<uint32_t>(hd));
  w.add_f32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  w.add_u32(a + "rope.dimension_count", static_cast<uint32_t>(hd / 4));
  w.add_f32(a + "rope.freq_base", 10000000.0f);
  w.add_u32(a + "ssm.conv_kernel", 4);
  w.add_u32(a + "ssm.state_size", static_cast<uint32_t>(dk));
  w.add_u32(a + "ssm.group_count", static_cast<uint32_t>(hk));
  w.add_u32(a + "ssm.time_step_rank", static_cast<uint32_t>(hv));
  w.add_u32(a + "ssm.inner_size", static_cast<uint32_t>(value_dim));
  w.add_u32(a + "expert_count", static_cast<uint32_t>(E));
  w.add_u32(a + "expert_used_count", static_cast<uint32_t>(g["used"]));
  w.add_u32(a + "expert_feed_forward_length", static_cast<uint32_t>(F));
  w.add_u32(a + "expert_shared_feed_forward_length", static_cast<uint32_t>(Fs));
  w.add_u32(a + "full_attention_interval", static_cast<uint32_t>(g["interval"]));

  b.matrix("token_embd.weight", {D, V}, std::sqrt(float(D)));  // embeddings ~N(0, 1)
  b.vector_f32("output_norm.weight", {D}, 1.0f, 0.0f);
  b.matrix("output.weight", {D, V}, 4.0f);
  for (int64_t i = 0; i < L; ++i) {
    b.vector_f32(blk(i, "attn_norm.weight"), {D}, 1.0f, 0.0f);
    b.vector_f32(blk(i, "post_attention_norm.weight"), {D}, 1.0f, 0.0f);
    if ((i + 1) % g["interval"] == 0) {
      b.matrix(blk(i, "attn_q.weight"), {D, 2 * q_dim}, 0.5f);
      b.matrix(blk(i, "attn_k.weight"), {D, kv_dim}, 0.5f);
      b.matrix(blk(i, "attn_v.weight"), {D, kv_dim}, 0.5f);
      b.matrix(blk(i, "attn_output.weight"), {q_dim, D}, 0.5f);
      b.vector_f32(blk(i, "attn_q_norm.weight"), {hd}, 1.0f, 0.0f);
      b.vector_f32(blk(i, "attn_k_norm.weight"), {hd}, 1.0f, 0.0f);
    } else {
      b.matrix(blk(i, "attn_qkv.weight"), {D, conv_dim}, 0.5f);
      b.matrix(blk(i, "attn_gate.weight"), {D, value_dim}, 0.5f);
      b.matrix(blk(i, "ssm_beta.weight"), {D, hv}, 0.5f);
      b.matrix(blk(i, "ssm_alpha.weight"), {D, hv}, 0.5f);
      b.matrix(blk(i, "ssm_out.weight"), {value_dim, D}, 0.5f);
      b.vector_f32(blk(i, "ssm_conv1d.weight"), {4, conv_dim}, 0.0f, 0.5f);
      b.vector_f32(blk(i, "ssm_dt.bias"), {hv}, 0.0f, 0.1f);
      b.vector_f32(blk(i, "ssm_a"), {hv}, -1.0f, 0.1f);
      b.vector_f32(blk(i, "ssm_norm.weight"), {dv}, 1.0f, 0.0f);
      if (i == 0 && g["legacy_ssm_in"]) b.matrix(blk(i, "ssm_in.weight"), {D, conv_dim + value_dim}, 0.5f);
    }
    b.vector_f32(blk(i, "ffn_gate_inp.weight"), {D, E}, 0.0f, 3.0f / std::sqrt(float(D)));
    b.matrix(blk(i, "ffn_gate_exps.weight"), {D, F, E}, 0.5f);
    b.matrix(blk(i, "ffn_up_exps.weight"), {D, F, E}, 0.5f);
    b.matrix(blk(i, "ffn_down_exps.weight"), {F, D, E}, 0.5f);
    b.matrix(blk(i, "ffn_gate_shexp.weight"), {D, Fs}, 0.5f);
    b.matrix(blk(i, "ffn_up_shexp.weight"), {D, Fs}, 0.5f);
    b.matrix(blk(i, "ffn_down_shexp.weight"), {Fs, D}, 0.5f);
    b.vector_f32(blk(i, "ffn_gate_inp_shexp.weight"), {D}, 0.0f, 1.0f / std::sqrt(float(D)));
  }
  w.write(out);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 2) fail("usage: make_synthetic_model OUT.gguf [key=value ...]");
    Geometry g;
    for (int i = 2; i < argc; ++i) {
      const std::string kv = argv[i];
      const size_t eq = kv.find('=');
      if (eq == std::string::npos) fail("'%s': expected key=value", kv.c_str());
      const std::string k = kv.substr(0, eq), val = kv.substr(eq + 1);
      if (k == "type") {
        g.type = val;
        continue;
      }
      if (!g.v.count(k)) fail("unknown key '%s'", k.c_str());
      char* end = nullptr;
      const long long n = std::strtoll(val.c_str(), &end, 10);
      if (*end || n < 1) fail("%s=%s: expected a positive integer", k.c_str(), val.c_str());
      g.v[k] = n;
    }
    build(g, argv[1]);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_synthetic_model: error: %s\n", e.what());
    return 1;
  }
}
