#include "models/glm_dsa/weights.h"

#include "core/error.h"
#include "core/log.h"
#include "formats/hybrid_layers.h"
#include "models/loader.h"
#include "quant/convert.h"
#include "quant/repack.h"

namespace tern::models::glm_dsa {

namespace {

void load_mla(Loader& L, const Config& c, int64_t i, bool indexer, MlaWeights& a) {
  const int64_t dqk = c.nope + c.rope;
  a.wq_a = L.linear(blk(i, "attn_q_a.weight"), {c.n_embd, c.q_lora});
  a.q_a_norm = L.vec(blk(i, "attn_q_a_norm.weight"), {c.q_lora});
  a.wq_b = L.linear(blk(i, "attn_q_b.weight"), {c.q_lora, c.n_head * dqk});
  a.wkv_a = L.linear(blk(i, "attn_kv_a_mqa.weight"), {c.n_embd, c.kv_lora + c.rope});
  a.kv_a_norm = L.vec(blk(i, "attn_kv_a_norm.weight"), {c.kv_lora});
  if (L.has(blk(i, "attn_kv_b.weight")))
    fail("%s: tensor '%s': an unsplit kv_b (older conversion) is not supported; convert the checkpoint again "
         "(attn_k_b / attn_v_b)", L.file_name().c_str(), blk(i, "attn_kv_b.weight").c_str());
  a.wk_b = L.linear(blk(i, "attn_k_b.weight"), {c.nope, c.kv_lora, c.n_head});
  a.wv_b = L.linear(blk(i, "attn_v_b.weight"), {c.kv_lora, c.v_head, c.n_head});
  a.wo = L.linear(blk(i, "attn_output.weight"), {c.n_head * c.v_head, c.n_embd});
  if (!indexer) return;
  IndexerWeights& x = a.indexer;
  x.wq_b = L.linear(blk(i, "indexer.attn_q_b.weight"), {c.q_lora, c.idx_heads * c.idx_dim});
  x.wk = L.linear(blk(i, "indexer.attn_k.weight"), {c.n_embd, c.idx_dim});
  x.proj = L.linear(blk(i, "indexer.proj.weight"), {c.n_embd, c.idx_heads});
  x.k_norm = L.vec(blk(i, "indexer.k_norm.weight"), {c.idx_dim});
  x.k_norm_b = L.vec(blk(i, "indexer.k_norm.bias"), {c.idx_dim});
}

void load_moe(Loader& L, const Config& c, int64_t i, MoeWeights& m) {
  m.router = L.linear(blk(i, "ffn_gate_inp.weight"), {c.n_embd, c.n_expert});
  if (L.has(blk(i, "exp_probs_b.bias"))) m.selection_bias = L.vec(blk(i, "exp_probs_b.bias"), {c.n_expert});
  m.gate_exps = L.linear(blk(i, "ffn_gate_exps.weight"), {c.n_embd, c.n_ff_exp, c.n_expert});
  m.up_exps = L.linear(blk(i, "ffn_up_exps.weight"), {c.n_embd, c.n_ff_exp, c.n_expert});
  m.down_exps = L.linear(blk(i, "ffn_down_exps.weight"), {c.n_ff_exp, c.n_embd, c.n_expert});
  if (c.n_ff_shexp > 0) {  // ungated: added as it is
    m.gate_shexp = L.linear(blk(i, "ffn_gate_shexp.weight"), {c.n_embd, c.n_ff_shexp});
    m.up_shexp = L.linear(blk(i, "ffn_up_shexp.weight"), {c.n_embd, c.n_ff_shexp});
    m.down_shexp = L.linear(blk(i, "ffn_down_shexp.weight"), {c.n_ff_shexp, c.n_embd});
  }
}

void load_layer(Loader& L, const Config& c, int64_t i, bool indexer, bool dense, LayerWeights& l) {
  l.attn_norm = L.vec(blk(i, "attn_norm.weight"), {c.n_embd});
  l.ffn_norm = L.vec(blk(i, "ffn_norm.weight"), {c.n_embd});
  load_mla(L, c, i, indexer, l.mla);
  if (dense) {
    l.ffn.gate = L.linear(blk(i, "ffn_gate.weight"), {c.n_embd, c.n_ff});
    l.ffn.up = L.linear(blk(i, "ffn_up.weight"), {c.n_embd, c.n_ff});
    l.ffn.down = L.linear(blk(i, "ffn_down.weight"), {c.n_ff, c.n_embd});
  } else {
    load_moe(L, c, i, l.moe);
  }
}

bool experts_grouped(const Config& c) {
  return c.n_ff_exp % quant::kRepackRows == 0 && c.n_embd % quant::kRepackRows == 0;
}
// attn_k_b / attn_v_b are used a head at a time (rows of one head): repacked only when a head is whole 8-row groups.
bool heads_grouped(const Config& c) {
  return c.kv_lora % quant::kRepackRows == 0 && c.v_head % quant::kRepackRows == 0;
}

// The expanded MLA form's key up-projection (mla_key_expansion) for layer i, in backend memory owned by `owned`.
Linear key_expansion(Loader& L, const Config& c, int64_t i, const Linear& wk_b,
                     std::vector<std::unique_ptr<backend::Buffer>>& owned) {
  const quant::Type type = key_expansion_type(wk_b.type, c);
  const size_t row = quant::row_size(quant::traits(type), c.kv_lora);
  std::vector<uint8_t> host(row * static_cast<size_t>(c.nope * c.n_head));
  mla_key_expansion(wk_b, c.nope, c.kv_lora, c.n_head, type, host.data());
  std::unique_ptr<backend::Buffer> buf = L.backend().alloc(backend::BufferKind::kWeights, host.size());
  buf->write(0, host.data(), host.size());
  Linear t;
  t.type = type;
  t.data = buf->data();
  t.n_in = c.kv_lora;
  t.n_out = c.nope * c.n_head;
  t.row_bytes = row;
  t.name = blk(i, "attn_k_b.weight") + " (transposed)";
  owned.push_back(std::move(buf));
  return t;
}

}  // namespace

quant::Type key_expansion_type(quant::Type wk_b, const Config& c) {
  if (wk_b == quant::Type::F32) return quant::Type::F32;
  if (wk_b == quant::Type::F16 || wk_b == quant::Type::BF16 || c.kv_lora % 32 != 0) return quant::Type::F16;
  return quant::Type::Q8_0;  // a quantized file: its values (at most 8 bits of code) re-encoded as Q8_0
}

uint64_t key_expansion_bytes(const gguf::TensorInfo& t, const Config& c) {
  const int64_t il = gguf::block_index(t.name);
  if (il < 0 || il >= c.n_layer || !t.name.ends_with("attn_k_b.weight")) return 0;
  return quant::row_size(quant::traits(key_expansion_type(t.type, c)), c.kv_lora) *
         static_cast<uint64_t>(c.nope * c.n_head);
}

Weights Weights::load(const gguf::File& f, const Config& c, backend::Backend& be) {
  Loader L(f, be);
  Weights w;
  w.token_embd = L.linear("token_embd.weight", {c.n_embd, c.n_vocab});
  w.output_norm = L.vec("output_norm.weight", {c.n_embd});
  w.output = L.linear("output.weight", {c.n_embd, c.n_vocab});
  w.has_mtp = c.n_nextn > 0;
  w.layers.resize(static_cast<size_t>(c.n_layer + (w.has_mtp ? 1 : 0)));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    LayerWeights& l = w.layers[static_cast<size_t>(i)];
    load_layer(L, c, i, c.idx_full[static_cast<size_t>(i)], c.dense_layer(i), l);
    l.mla.wk_b_t = key_expansion(L, c, i, l.mla.wk_b, w.owned);
  }
  if (w.has_mtp) {  // a full decoder layer (MLA with its own indexer, MoE) and the NextN projections
    const int64_t i = c.n_layer;
    load_layer(L, c, i, c.mtp_own_indexer, c.dense_block(i), w.layers.back());
    w.mtp.eh_proj = L.linear(blk(i, "nextn.eh_proj.weight"), {2 * c.n_embd, c.n_embd});
    w.mtp.enorm = L.vec(blk(i, "nextn.enorm.weight"), {c.n_embd});
    w.mtp.hnorm = L.vec(blk(i, "nextn.hnorm.weight"), {c.n_embd});
    w.mtp.head_norm = L.has(blk(i, "nextn.shared_head_norm.weight"))
                          ? L.vec(blk(i, "nextn.shared_head_norm.weight"), {c.n_embd})
                          : w.output_norm;
    w.mtp.embed = L.has(blk(i, "nextn.embed_tokens.weight")) ? L.linear(blk(i, "nextn.embed_tokens.weight"), {c.n_embd, c.n_vocab})
                                                              : w.token_embd;
    w.mtp.own_head = L.has(blk(i, "nextn.shared_head_head.weight"));
    w.mtp.head = w.mtp.own_head ? L.linear(blk(i, "nextn.shared_head_head.weight"), {c.n_embd, c.n_vocab}) : w.output;
    if (!c.mtp_drafts())
      log::info("%s: MTP (nextn) block loaded, not drafting: it has no indexer of its own to select its keys",
                f.name().c_str());
  }
  w.unused = L.unused();
  if (!w.unused.empty())
    log::warn("%s: %zu tensors not used by glm-dsa (first: %s)", f.name().c_str(), w.unused.size(),
              w.unused.front().c_str());
  return w;
}

bool tensor_repacked(const gguf::TensorInfo& t, const Config& c, bool repack, bool repack_experts) {
  const bool matrix = t.ne[1] * t.ne[2] * t.ne[3] >= quant::kRepackRows && t.name != "token_embd.weight" &&
                      !t.name.ends_with("nextn.embed_tokens.weight") && t.type != quant::Type::F32 &&
                      !t.name.ends_with(".bias") && !t.name.ends_with("norm.weight") &&
                      !t.name.ends_with("ffn_gate_inp.weight");  // routers stay as they are (fp32 routing)
  if (!repack || !matrix || !quant::has_repacked(t.type)) return false;
  if (t.name.find("_exps.") != std::string_view::npos) return repack_experts && experts_grouped(c);
  if (t.name.ends_with("attn_k_b.weight") || t.name.ends_with("attn_v_b.weight")) return heads_grouped(c);
  return true;
}

uint64_t resident_tensor_bytes(const gguf::TensorInfo& t, const Config& c, bool repack, bool repack_experts) {
  return tensor_repacked(t, c, repack, repack_experts) ? quant::repacked_bytes(t.type, t.ne[1] * t.ne[2] * t.ne[3], t.ne[0])
                                                        : t.n_bytes;
}

RepackReport Model::repack(RepackScope scope) {
  if (repack_scope != RepackScope::kNone) fail("internal: model repacked twice");
  repack_scope = scope;
  if (scope == RepackScope::kNone) return {};
  Repacker R(*backend, *file, repacked);
  R.one(weights.output, true);
  const bool experts = scope == RepackScope::kAll && experts_grouped(config);
  if (scope == RepackScope::kAll && !experts) R.report().kept.push_back("routed experts (n_ff_exp or n_embd not a multiple of 8 rows)");
  if (!heads_grouped(config)) R.report().kept.push_back("attn_k_b / attn_v_b (a head is not whole 8-row groups)");
  for (LayerWeights& l : weights.layers) {
    MlaWeights& a = l.mla;
    for (Linear* w : {&a.wq_a, &a.wq_b, &a.wkv_a, &a.wo, &a.indexer.wq_b, &a.indexer.wk, &a.indexer.proj,
                      &l.moe.gate_shexp, &l.moe.up_shexp, &l.moe.down_shexp, &l.ffn.gate, &l.ffn.up,
                      &l.ffn.down})
      R.one(*w, true);
    if (heads_grouped(config))
      for (Linear* w : {&a.wk_b, &a.wv_b}) R.one(*w, true);
    if (config.nope % quant::kRepackRows == 0) R.one(a.wk_b_t, false);  // its groups of heads are whole 8-row groups
    if (experts)
      for (Linear* w : {&l.moe.gate_exps, &l.moe.up_exps, &l.moe.down_exps}) R.one(*w, true);
  }
  if (weights.has_mtp) {
    R.one(weights.mtp.eh_proj, true);
    if (weights.mtp.own_head) R.one(weights.mtp.head, true);
    else weights.mtp.head = weights.output;  // the repacked head
  }
  return R.report();
}

ExpertLayout Model::expert_layout() const {
  ExpertLayout x;
  x.backend = backend.get();
  x.file = file.get();
  for (size_t i = 0; i < weights.layers.size(); ++i)  // the trunk, then the MTP block's layer when the file has one
    x.layers.push_back(config.dense_block(static_cast<int64_t>(i)) ? nullptr : &weights.layers[i].moe);
  x.n_expert = config.n_expert;
  x.n_ff_exp = config.n_ff_exp;
  x.n_embd = config.n_embd;
  x.repack_scope = repack_scope;
  x.rows_grouped = experts_grouped(config);
  return x;
}

std::unique_ptr<Model> Model::load(std::unique_ptr<gguf::File> file, std::unique_ptr<backend::Backend> be) {
  auto m = std::make_unique<Model>();
  m->backend = be ? std::move(be) : backend::make_backend("cpu");
  m->file = std::move(file);
  m->config = Config::from_gguf(*m->file);
  m->weights = Weights::load(*m->file, m->config, *m->backend);
  return m;
}

}  // namespace tern::models::glm_dsa
