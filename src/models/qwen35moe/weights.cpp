#include "models/qwen35moe/weights.h"

#include <algorithm>
#include <optional>
#include <set>

#include "core/error.h"
#include "core/log.h"
#include "core/mmap.h"
#include "models/loader.h"
#include "quant/convert.h"
#include "quant/repack.h"

namespace tern::models::qwen35moe {

namespace {

void load_attention(Loader& L, const Config& c, int64_t i, AttentionWeights& a) {
  const int64_t q_dim = c.n_head * c.head_dim, kv_dim = c.n_head_kv * c.head_dim;
  if (const auto* qkv = L.optional(blk(i, "attn_qkv.weight"), {c.n_embd, 2 * q_dim + 2 * kv_dim})) {
    Linear fused = L.to_linear(*qkv, blk(i, "attn_qkv.weight"));
    a.wq = fused.rows(0, 2 * q_dim);
    a.wk = fused.rows(2 * q_dim, kv_dim);
    a.wv = fused.rows(2 * q_dim + kv_dim, kv_dim);
  } else {
    a.wq = L.linear(blk(i, "attn_q.weight"), {c.n_embd, 2 * q_dim});
    a.wk = L.linear(blk(i, "attn_k.weight"), {c.n_embd, kv_dim});
    a.wv = L.linear(blk(i, "attn_v.weight"), {c.n_embd, kv_dim});
  }
  a.wo = L.linear(blk(i, "attn_output.weight"), {q_dim, c.n_embd});
  a.q_norm = L.vec(blk(i, "attn_q_norm.weight"), {c.head_dim});
  a.k_norm = L.vec(blk(i, "attn_k_norm.weight"), {c.head_dim});
}

// Legacy qwen3next in-projection (early conversions): ssm_in {n_embd, 2 * key_dim + 2 * value_dim}, rows per key
// head kh: q (head_k_dim), k (head_k_dim), then its R = n_v_heads / n_k_heads value heads' v rows and z rows
// (grouped order, as llama.cpp's legacy path reads it). Its rows are copied once, at load, into backend memory in
// the current layout (attn_qkv: all q, all k, all v; attn_gate: z), so the block sees one layout.
void load_legacy_qkvz(Loader& L, const Config& c, int64_t i, DeltaNetWeights& d, Weights& w) {
  const std::string name = blk(i, "ssm_in.weight");
  if (c.arch != "qwen3next" || L.has(blk(i, "attn_qkv.weight")) || L.has(blk(i, "attn_gate.weight")))
    fail("%s: tensor '%s': the fused q|k|v|z in-projection is read only in a qwen3next file without attn_qkv / "
         "attn_gate (this is %s)", L.file_name().c_str(), name.c_str(), c.arch.c_str());
  const int64_t dk = c.head_k_dim, R = c.n_v_heads / c.n_k_heads, vz = R * c.head_v_dim;
  const gguf::TensorInfo& t = L.tensor(name, {c.n_embd, 2 * c.n_k_heads * dk + 2 * c.value_dim()});
  Linear all = L.to_linear(t, name);  // the shape and type; its rows are read from the file's bytes below
  auto buf = L.backend().alloc(backend::BufferKind::kWeights, all.bytes());
  // the new [conv_dim + value_dim] rows, in order, from the file's rows (host bytes: Buffer::write uploads them)
  int64_t r = 0;
  auto put = [&](int64_t src_row, int64_t n) {
    buf->write(static_cast<size_t>(r) * all.row_bytes, t.data + static_cast<size_t>(src_row) * all.row_bytes,
               static_cast<size_t>(n) * all.row_bytes);
    r += n;
  };
  const int64_t per_head = 2 * dk + 2 * vz;
  for (int64_t kh = 0; kh < c.n_k_heads; ++kh) put(kh * per_head, dk);            // q
  for (int64_t kh = 0; kh < c.n_k_heads; ++kh) put(kh * per_head + dk, dk);       // k
  for (int64_t kh = 0; kh < c.n_k_heads; ++kh) put(kh * per_head + 2 * dk, vz);   // v
  for (int64_t kh = 0; kh < c.n_k_heads; ++kh) put(kh * per_head + 2 * dk + vz, vz);  // z
  drop_pages(t.data, t.n_bytes);  // never read again: the file's pages leave the resident set
  all.data = buf->data();
  d.wqkv = all.rows(0, c.conv_dim());
  d.wqkv.name = name + " (q|k|v)";
  d.wgate = all.rows(c.conv_dim(), c.value_dim());
  d.wgate.name = name + " (z)";
  w.owned.push_back(std::move(buf));
}

void load_deltanet(Loader& L, const Config& c, int64_t i, DeltaNetWeights& d, Weights& w) {
  if (L.has(blk(i, "ssm_in.weight"))) {
    load_legacy_qkvz(L, c, i, d, w);
  } else {
    d.wqkv = L.linear(blk(i, "attn_qkv.weight"), {c.n_embd, c.conv_dim()});
    d.wgate = L.linear(blk(i, "attn_gate.weight"), {c.n_embd, c.value_dim()});
  }
  if (const auto* ba = L.optional(blk(i, "ssm_ba.weight"), {c.n_embd, 2 * c.n_v_heads})) {
    d.wba = L.to_linear(*ba, blk(i, "ssm_ba.weight"));
  } else {
    d.wbeta = L.linear(blk(i, "ssm_beta.weight"), {c.n_embd, c.n_v_heads});
    d.walpha = L.linear(blk(i, "ssm_alpha.weight"), {c.n_embd, c.n_v_heads});
  }
  d.wout = L.linear(blk(i, "ssm_out.weight"), {c.value_dim(), c.n_embd});
  d.conv = L.vec(blk(i, "ssm_conv1d.weight"), {c.conv_kernel, c.conv_dim()});
  d.dt_bias = L.vec(blk(i, "ssm_dt.bias"), {c.n_v_heads});
  d.a = L.vec(blk(i, "ssm_a"), {c.n_v_heads});
  d.norm = L.vec(blk(i, "ssm_norm.weight"), {c.head_v_dim});
}

void load_moe(Loader& L, const Config& c, int64_t i, MoeWeights& m) {
  m.router = L.linear(blk(i, "ffn_gate_inp.weight"), {c.n_embd, c.n_expert});
  if (const auto* gu = L.optional(blk(i, "ffn_gate_up_exps.weight"), {c.n_embd, 2 * c.n_ff_exp, c.n_expert})) {
    m.gate_exps = L.to_linear(*gu, blk(i, "ffn_gate_up_exps.weight"));
    m.fused_gate_up = true;
  } else {
    m.gate_exps = L.linear(blk(i, "ffn_gate_exps.weight"), {c.n_embd, c.n_ff_exp, c.n_expert});
    m.up_exps = L.linear(blk(i, "ffn_up_exps.weight"), {c.n_embd, c.n_ff_exp, c.n_expert});
  }
  m.down_exps = L.linear(blk(i, "ffn_down_exps.weight"), {c.n_ff_exp, c.n_embd, c.n_expert});
  if (c.n_ff_shexp > 0) {
    m.gate_shexp = L.linear(blk(i, "ffn_gate_shexp.weight"), {c.n_embd, c.n_ff_shexp});
    m.up_shexp = L.linear(blk(i, "ffn_up_shexp.weight"), {c.n_embd, c.n_ff_shexp});
    m.down_shexp = L.linear(blk(i, "ffn_down_shexp.weight"), {c.n_ff_shexp, c.n_embd});
    m.shexp_gate = L.linear(blk(i, "ffn_gate_inp_shexp.weight"), {c.n_embd});
  }
}

// The draft head's rows for tern.draft_vocab's ids, copied from the head's file bytes (its file layout: one row of
// row_bytes per token) into backend memory; Model::repack repacks them with the rest.
void load_draft_vocab(const gguf::File& f, const Config& c, const gguf::Value& v, MtpWeights& m, Weights& w,
                      backend::Backend& be) {
  if (!v.is_array() || v.array_size() == 0)
    fail("%s: key '%s' must be a non-empty array of token ids", f.name().c_str(), kDraftVocabKey);
  const uint64_t n = v.array_size();
  if (n > static_cast<uint64_t>(c.n_vocab))
    fail("%s: key '%s' has %llu ids, more than the vocabulary's %lld", f.name().c_str(), kDraftVocabKey,
         static_cast<unsigned long long>(n), static_cast<long long>(c.n_vocab));
  std::vector<bool> seen(static_cast<size_t>(c.n_vocab), false);
  for (uint64_t i = 0; i < n; ++i) {
    int64_t id;
    try {
      id = v.array_i64(i);
    } catch (const Error& e) {
      fail("%s: key '%s': %s", f.name().c_str(), kDraftVocabKey, e.what());
    }
    if (id < 0 || id >= c.n_vocab || seen[static_cast<size_t>(id)])
      fail("%s: key '%s'[%llu] = %lld: %s", f.name().c_str(), kDraftVocabKey, static_cast<unsigned long long>(i),
           static_cast<long long>(id), id < 0 || id >= c.n_vocab ? "not a token id" : "repeated");
    seen[static_cast<size_t>(id)] = true;
    m.vocab.push_back(static_cast<int32_t>(id));
  }
  while (m.vocab.size() % quant::kRepackRows) m.vocab.push_back(m.vocab.back());
  const std::string name = m.own_head ? "nextn.shared_head_head.weight" : w.tied_output ? "token_embd.weight" : "output.weight";
  const gguf::TensorInfo* t = f.find_tensor(m.own_head ? "blk." + std::to_string(c.n_layer) + "." + name : name);
  if (!t) fail("internal: draft head tensor missing");
  Linear sub = m.head;
  auto buf = be.alloc(backend::BufferKind::kWeights, m.vocab.size() * sub.row_bytes);
  for (size_t r = 0; r < m.vocab.size(); ++r)
    buf->write(r * sub.row_bytes, t->data + static_cast<size_t>(m.vocab[r]) * sub.row_bytes, sub.row_bytes);
  sub.data = buf->data();
  sub.n_out = static_cast<int64_t>(m.vocab.size());
  sub.name = name + " (draft vocabulary)";
  m.head_sub = sub;
  w.owned.push_back(std::move(buf));
  log::info("%s: draft head restricted to %llu tokens of %lld (%s)", f.name().c_str(),
            static_cast<unsigned long long>(n), static_cast<long long>(c.n_vocab), kDraftVocabKey);
}

void load_ffn(Loader& L, const Config& c, int64_t i, FfnWeights& f) {
  f.gate = L.linear(blk(i, "ffn_gate.weight"), {c.n_embd, c.n_ff});
  f.up = L.linear(blk(i, "ffn_up.weight"), {c.n_embd, c.n_ff});
  f.down = L.linear(blk(i, "ffn_down.weight"), {c.n_ff, c.n_embd});
}

}  // namespace

Weights Weights::load(const gguf::File& f, const Config& c, backend::Backend& be) {
  Loader L(f, be);
  Weights w;
  w.token_embd = L.linear("token_embd.weight", {c.n_embd, c.n_vocab});
  w.output_norm = L.vec("output_norm.weight", {c.n_embd});
  if (f.find_tensor("output.weight")) {
    w.output = L.linear("output.weight", {c.n_embd, c.n_vocab});
  } else {
    w.output = w.token_embd;
    w.tied_output = true;
  }
  w.has_mtp = c.n_nextn > 0;
  w.layers.resize(static_cast<size_t>(c.n_layer + (w.has_mtp ? 1 : 0)));
  for (int64_t i = 0; i < static_cast<int64_t>(w.layers.size()); ++i) {
    LayerWeights& l = w.layers[i];
    l.kind = i < c.n_layer ? c.layer_kind[i] : LayerKind::kAttention;  // the MTP block: a full-attention layer
    l.attn_norm = L.vec(blk(i, "attn_norm.weight"), {c.n_embd});
    l.post_norm = L.vec(blk(i, "post_attention_norm.weight"), {c.n_embd});
    if (l.kind == LayerKind::kAttention) load_attention(L, c, i, l.attn);
    else load_deltanet(L, c, i, l.dn, w);
    if (c.dense()) load_ffn(L, c, i, l.ffn);
    else load_moe(L, c, i, l.moe);
  }
  if (w.has_mtp) {
    const int64_t i = c.n_layer;
    MtpWeights& m = w.mtp;
    m.eh_proj = L.linear(blk(i, "nextn.eh_proj.weight"), {2 * c.n_embd, c.n_embd});
    m.enorm = L.vec(blk(i, "nextn.enorm.weight"), {c.n_embd});
    m.hnorm = L.vec(blk(i, "nextn.hnorm.weight"), {c.n_embd});
    m.head_norm = L.has(blk(i, "nextn.shared_head_norm.weight")) ? L.vec(blk(i, "nextn.shared_head_norm.weight"), {c.n_embd})
                                                                 : w.output_norm;
    m.own_embed = L.has(blk(i, "nextn.embed_tokens.weight"));
    m.own_head = L.has(blk(i, "nextn.shared_head_head.weight"));
    m.embed = m.own_embed ? L.linear(blk(i, "nextn.embed_tokens.weight"), {c.n_embd, c.n_vocab}) : w.token_embd;
    m.head = m.own_head ? L.linear(blk(i, "nextn.shared_head_head.weight"), {c.n_embd, c.n_vocab}) : w.output;
    if (const gguf::Value* v = f.find(kDraftVocabKey)) load_draft_vocab(f, c, *v, m, w, be);
  }
  w.unused = L.unused();
  if (!w.unused.empty()) {
    if (c.n_nextn > 1)
      log::info("%s: %lld MTP (nextn) blocks; the first drafts, %zu tensors of the others are not loaded",
                f.name().c_str(), static_cast<long long>(c.n_nextn), w.unused.size());
    else
      log::warn("%s: %zu tensors not used by %s (first: %s)", f.name().c_str(), w.unused.size(), c.arch.c_str(),
                w.unused.front().c_str());
  }
  return w;
}

namespace {

bool expert_rows_grouped(const Config& c) {
  return c.n_ff_exp % quant::kRepackRows == 0 && c.n_embd % quant::kRepackRows == 0;
}

bool is_expert_tensor(std::string_view name) { return name.find("_exps.") != std::string_view::npos; }

}  // namespace

bool tensor_repacked(const gguf::TensorInfo& t, const Config& c, bool repack, bool repack_experts) {
  // Matrices of at least one 8-row group; a lone row (the shared expert's gate) stays as it is.
  // Embedding tables are lookups, never repacked (the trunk's and an MTP block's own).
  const bool matrix = t.ne[1] * t.ne[2] * t.ne[3] >= quant::kRepackRows && t.name != "token_embd.weight" &&
                      !t.name.ends_with("nextn.embed_tokens.weight");
  const bool expert = is_expert_tensor(t.name);
  return repack && matrix && quant::has_repacked(t.type) && (!expert || (repack_experts && expert_rows_grouped(c)));
}

uint64_t resident_tensor_bytes(const gguf::TensorInfo& t, const Config& c, bool repack, bool repack_experts) {
  return tensor_repacked(t, c, repack, repack_experts)
             ? quant::repacked_bytes(t.type, t.ne[1] * t.ne[2] * t.ne[3], t.ne[0])
             : t.n_bytes;
}

uint64_t repack_extra_bytes(const gguf::File& f, const Config& c, bool repack) {
  if (!repack || f.find_tensor("output.weight")) return 0;
  const gguf::TensorInfo* e = f.find_tensor("token_embd.weight");
  return e && quant::has_repacked(e->type) ? quant::repacked_bytes(e->type, e->ne[1], e->ne[0]) : 0;
}

uint64_t draft_vocab_bytes(const gguf::File& f, const Config& c, bool repack) {
  const gguf::Value* dv = c.n_nextn > 0 ? f.find(kDraftVocabKey) : nullptr;
  const std::string own = "blk." + std::to_string(c.n_layer) + ".nextn.shared_head_head.weight";
  const gguf::TensorInfo* head = f.find_tensor(own) ? f.find_tensor(own)
                                 : f.find_tensor("output.weight") ? f.find_tensor("output.weight")
                                                                  : f.find_tensor("token_embd.weight");
  if (!dv || !dv->is_array() || !head || head->ne[1] <= 0) return 0;
  const int64_t rows = (static_cast<int64_t>(dv->array_size()) + quant::kRepackRows - 1) / quant::kRepackRows *
                       quant::kRepackRows;
  return repack && quant::has_repacked(head->type) ? quant::repacked_bytes(head->type, rows, head->ne[0])
                                                   : static_cast<uint64_t>(rows) * (head->n_bytes / head->ne[1]);
}

bool Model::expert_rows_grouped() const { return qwen35moe::expert_rows_grouped(config); }

ExpertLayout Model::expert_layout() const {
  ExpertLayout x;
  x.backend = backend.get();
  x.file = file.get();
  for (const LayerWeights& l : weights.layers) x.layers.push_back(config.dense() ? nullptr : &l.moe);
  x.n_expert = config.n_expert;
  x.n_ff_exp = moe_split.comm ? moe_ff_local : config.n_ff_exp;  // split by rows: this rank's rows of each expert
  x.n_embd = moe_split.comm ? moe_embd_local : config.n_embd;
  x.repack_scope = repack_scope;
  x.rows_grouped = expert_rows_grouped();
  return x;
}

namespace {

using Runs = std::vector<std::pair<int64_t, int64_t>>;  // (first, count)

// Rows `runs` of w (file layout), side by side in that order: a view when they are one run, else a copy of its own.
Linear take_rows(backend::Backend& be, const gguf::File& f, const Linear& w, const Runs& runs,
                 std::vector<std::shared_ptr<backend::Buffer>>& owned) {
  if (!w.present()) return w;
  if (runs.size() == 1) return w.rows(runs[0].first, runs[0].second);
  int64_t n = 0;
  for (const auto& r : runs) n += r.second;
  std::shared_ptr<backend::Buffer> buf = be.alloc(backend::BufferKind::kWeights, static_cast<size_t>(n) * w.row_bytes);
  size_t off = 0;
  for (const auto& [r0, k] : runs) {
    buf->write(off, w.data + static_cast<size_t>(r0) * w.row_bytes, static_cast<size_t>(k) * w.row_bytes);
    off += static_cast<size_t>(k) * w.row_bytes;
  }
  Linear out = w;
  out.data = buf->data();
  out.n_out = n;
  owned.push_back(std::move(buf));
  // The copied file pages are not needed again (and the rest of the tensor is other ranks'): give them back, so a
  // rank's resident set is its share. Safe for a shared page's neighbour: a read-only file mapping reloads on use.
  if (w.data >= f.base() && w.data + w.bytes() <= f.base() + f.file_size()) drop_pages(w.data, w.bytes());
  return out;
}

// Whether column runs (element offsets along a row) start and end on block boundaries of `t`.
bool on_blocks(quant::Type t, const Runs& runs) {
  const int64_t b = quant::traits(t).block_size;
  return std::all_of(runs.begin(), runs.end(), [b](const auto& r) { return r.first % b == 0 && r.second % b == 0; });
}

// The unit a width split by rows over ranks goes in: 8-row groups, and for partial sums also the blocks of every
// layer's down matrix `down(l)`, whose columns follow the split.
template <class Down>
int64_t split_unit(const std::vector<LayerWeights>& layers, Down down) {
  int64_t a = quant::kRepackRows;
  for (const LayerWeights& l : layers) a = std::max<int64_t>(a, quant::traits(down(l).type).block_size);
  return a;
}

// Columns `runs` of every row of w (file layout), side by side in that order, into a buffer of its own: a matrix of
// w.n_out rows of the runs' total width. Every run on block boundaries of w's type (callers check: on_blocks).
Linear take_columns(backend::Backend& be, const gguf::File& f, const Linear& w, const Runs& runs,
                    std::vector<std::shared_ptr<backend::Buffer>>& owned) {
  if (!w.present()) return w;
  if (!on_blocks(w.type, runs) || w.repacked) fail("internal: column slice of %s off its blocks", w.name.c_str());
  const quant::TypeTraits& t = quant::traits(w.type);
  int64_t n = 0;
  for (const auto& r : runs) n += r.second;
  const size_t rb = quant::row_size(t, n);
  std::shared_ptr<backend::Buffer> buf = be.alloc(backend::BufferKind::kWeights, static_cast<size_t>(w.n_out) * rb);
  std::vector<uint8_t> row(rb);
  for (int64_t i = 0; i < w.n_out; ++i) {
    const uint8_t* src = w.data + static_cast<size_t>(i) * w.row_bytes;
    size_t off = 0;
    for (const auto& [c0, k] : runs) {
      const size_t len = quant::row_size(t, k);
      std::copy(src + quant::row_size(t, c0), src + quant::row_size(t, c0) + len, row.data() + off);
      off += len;
    }
    buf->write(static_cast<size_t>(i) * rb, row.data(), rb);
  }
  Linear out = w;
  out.data = buf->data();
  out.n_in = n;
  out.row_bytes = rb;
  owned.push_back(std::move(buf));
  if (w.data >= f.base() && w.data + w.bytes() <= f.base() + f.file_size()) drop_pages(w.data, w.bytes());
  return out;
}

// Elements [first * unit, (first + count) * unit) of each run of f, side by side.
backend::Floats take(backend::Backend& be, const backend::Floats& f, const Runs& runs, int64_t unit) {
  const std::vector<float> h = f.to_host();
  std::vector<float> out;
  for (const auto& [r0, k] : runs) out.insert(out.end(), h.begin() + r0 * unit, h.begin() + (r0 + k) * unit);
  return backend::Floats(be, out);
}

Runs scaled(const Runs& runs, int64_t unit, int64_t offset = 0) {
  Runs out;
  for (const auto& [r0, k] : runs) out.push_back({offset + r0 * unit, k * unit});
  return out;
}

// Sub-head runs (global head indices) of a share, in the order the block runs them locally. Attention (query heads
// grouped by KV head, h uses h / per) and grouped DeltaNet value heads: key-major. Tiled DeltaNet value heads (p uses
// key head p % n_key): sub-head-major, so that local head j * nk + i uses local key head i.
Runs sub_heads(const HeadShare& h, int64_t n_key, int64_t per, bool tiled) {
  Runs out;
  if (!tiled) {
    for (int64_t k = h.k0; k < h.k0 + h.nk; ++k) out.push_back({k * per + h.s0, h.ns});
    if (h.ns == per) out = {{h.k0 * per, h.nk * per}};  // whole groups: one run
  } else {
    for (int64_t j = h.s0; j < h.s0 + h.ns; ++j) out.push_back({j * n_key + h.k0, h.nk});
  }
  return out;
}

}  // namespace

void Model::split_heads(Comm& c, bool partial) {
  const int R = c.size(), me = c.rank();
  const ColumnLayout rows = ColumnLayout::contiguous(config.n_embd, quant::kRepackRows, R);
  const Split embd{config.n_embd, quant::kRepackRows, R};
  const int64_t e0 = embd.begin(me), ne = embd.size(me);
  const int64_t hd = config.head_dim;
  // Gated attention: KV heads with their query heads.
  const int64_t G = config.n_head / config.n_head_kv;
  if (const auto mine = head_share(config.n_head_kv, G, R, me)) {
    const Runs q = sub_heads(*mine, config.n_head_kv, G, false);
    attn_split.comm = &c;
    attn_split.rows = rows;
    attn_split.heads.total = config.n_head * hd;
    for (int r = 0; r < R; ++r)
      attn_split.heads.blocks.push_back(scaled(sub_heads(*head_share(config.n_head_kv, G, R, r), config.n_head_kv, G, false), hd));
    const Runs& cols = attn_split.heads.blocks[static_cast<size_t>(me)];
    // Every rank decides alike (each checks every rank's columns): a rank that summed while another gathered would
    // wait forever at a different collective.
    attn_split.partial_sums = partial && std::all_of(weights.layers.begin(), weights.layers.end(), [&](const LayerWeights& l) {
      return l.kind != LayerKind::kAttention ||
             std::all_of(attn_split.heads.blocks.begin(), attn_split.heads.blocks.end(), [&](const Runs& b) { return on_blocks(l.attn.wo.type, b); });
    });
    for (LayerWeights& l : weights.layers) {
      if (l.kind != LayerKind::kAttention) continue;
      l.attn.wq = take_rows(*backend, *file, l.attn.wq, scaled(q, 2 * hd), split_copies);  // per query head: query rows, gate rows
      l.attn.wk = l.attn.wk.rows(mine->k0 * hd, mine->nk * hd);
      l.attn.wv = l.attn.wv.rows(mine->k0 * hd, mine->nk * hd);
      l.attn.wo = attn_split.partial_sums ? take_columns(*backend, *file, l.attn.wo, cols, split_copies) : l.attn.wo.rows(e0, ne);
    }
  }
  // Gated DeltaNet: key heads with their value heads.
  const int64_t nK = config.n_k_heads, rv = config.n_v_heads / nK, dk = config.head_k_dim, dv = config.head_v_dim;
  const bool tiled = !config.deltanet().grouped_v_heads;
  if (const auto mine = head_share(nK, rv, R, me)) {
    const int64_t key_dim = nK * dk;
    const Runs vh = sub_heads(*mine, nK, rv, tiled);
    dn_split.comm = &c;
    dn_split.rows = rows;
    dn_split.heads.total = config.value_dim();
    for (int r = 0; r < R; ++r) dn_split.heads.blocks.push_back(scaled(sub_heads(*head_share(nK, rv, R, r), nK, rv, tiled), dv));
    // Channels of the q | k | v projection (and of the conv taps): this rank's key heads' q and k, its value heads' v.
    Runs ch = {{mine->k0 * dk, mine->nk * dk}, {key_dim + mine->k0 * dk, mine->nk * dk}};
    for (const auto& run : scaled(vh, dv, 2 * key_dim)) ch.push_back(run);
    // beta, alpha (fused or not), dt_bias and A stay whole: the block computes every head's gates and keeps its own.
    dn_split.n_heads = config.n_v_heads;
    dn_split.n_key_heads = nK;
    for (const auto& [h0, n] : vh)
      for (int64_t h = h0; h < h0 + n; ++h) dn_split.local_heads.push_back(static_cast<int32_t>(h));
    const Runs& cols = dn_split.heads.blocks[static_cast<size_t>(me)];
    dn_split.partial_sums = partial && std::all_of(weights.layers.begin(), weights.layers.end(), [&](const LayerWeights& l) {
      return l.kind != LayerKind::kRecurrent ||
             std::all_of(dn_split.heads.blocks.begin(), dn_split.heads.blocks.end(), [&](const Runs& b) { return on_blocks(l.dn.wout.type, b); });
    });
    for (LayerWeights& l : weights.layers) {
      if (l.kind != LayerKind::kRecurrent) continue;
      DeltaNetWeights& d = l.dn;
      d.wqkv = take_rows(*backend, *file, d.wqkv, ch, split_copies);
      d.conv = take(*backend, d.conv, ch, config.conv_kernel);
      d.wgate = take_rows(*backend, *file, d.wgate, scaled(vh, dv), split_copies);
      d.wout = dn_split.partial_sums ? take_columns(*backend, *file, d.wout, cols, split_copies) : d.wout.rows(e0, ne);
    }
  }
  config = rank_config(config, R, me);
}

bool Model::split_expert_rows(Comm& c, bool in_file, bool partial) {
  const int R = c.size(), me = c.rank();
  const int64_t E = config.n_expert, F = config.n_ff_exp, Fs = config.n_ff_shexp, D = config.n_embd;
  const int64_t A = quant::kRepackRows;
  // Partial sums: each down's columns split on its blocks (and the gate and up rows with them on 8-row groups).
  int64_t A_ff = split_unit(weights.layers, [](const LayerWeights& l) -> const Linear& { return l.moe.down_exps; });
  int64_t A_sh = Fs > 0 ? split_unit(weights.layers, [](const LayerWeights& l) -> const Linear& { return l.moe.down_shexp; }) : A;
  partial = partial && !in_file && F >= A_ff * R && (Fs == 0 || Fs >= A_sh * R);
  if (!partial) A_ff = A_sh = A;
  moe_split.comm = &c;
  moe_split.partial_sums = partial;
  moe_split.ff = ColumnLayout::contiguous(F, A_ff, R);
  moe_split.shff = ColumnLayout::contiguous(Fs, A_sh, R);
  moe_split.out = ColumnLayout::contiguous(D, A, R);
  const Split ffs{F, A_ff, R}, shs{Fs, A_sh, R}, outs{D, A, R};
  const int64_t f0 = ffs.begin(me), fl = ffs.size(me), s0 = shs.begin(me), sl = shs.size(me);
  const int64_t d0 = outs.begin(me), dl = outs.size(me);
  moe_ff_local = fl;
  moe_embd_local = partial ? D : dl;
  for (LayerWeights& l : weights.layers) {
    MoeWeights& m = l.moe;
    if (Fs > 0) {
      m.gate_shexp = m.gate_shexp.rows(s0, sl);
      m.up_shexp = m.up_shexp.rows(s0, sl);
      m.down_shexp = partial ? take_columns(*backend, *file, m.down_shexp, {{s0, sl}}, split_copies) : m.down_shexp.rows(d0, dl);
    }
    if (in_file) {  // views: each expert's rows are found in place (a streamed expert reads just those)
      m.ff0 = f0, m.ff_stride = F, m.d0 = d0, m.d_stride = D;
      continue;
    }
    Runs gate, up, down;
    for (int64_t e = 0; e < E; ++e) {
      if (m.fused_gate_up) {  // per expert: its F gate rows, then its F up rows
        gate.push_back({e * 2 * F + f0, fl});
        gate.push_back({e * 2 * F + F + f0, fl});
      } else {
        gate.push_back({e * F + f0, fl});
        up.push_back({e * F + f0, fl});
      }
      down.push_back({e * D + d0, dl});
    }
    m.gate_exps = take_rows(*backend, *file, m.gate_exps, gate, split_copies);
    if (!m.fused_gate_up) m.up_exps = take_rows(*backend, *file, m.up_exps, up, split_copies);
    m.down_exps = partial ? take_columns(*backend, *file, m.down_exps, {{f0, fl}}, split_copies)
                          : take_rows(*backend, *file, m.down_exps, down, split_copies);
  }
  return partial;
}

void Model::distribute(Comm& c, const SplitOptions& opt) {
  if (repack_scope != RepackScope::kNone) fail("internal: distribute after repack");
  if (comm) fail("internal: model distributed twice");
  comm = &c;
  const int R = c.size(), me = c.rank();
  vocab = Split{config.n_vocab, quant::kRepackRows, R};
  if (R == 1) return;
  if (config.n_vocab < static_cast<int64_t>(quant::kRepackRows) * R)
    fail("%d ranks: the vocabulary (%lld tokens) is too small to split", R, static_cast<long long>(config.n_vocab));
  const int64_t n_kv = config.n_head_kv, n_k = config.n_k_heads;
  split_heads(c, opt.partial_sums);
  auto how = [&](const TensorSplit& s, int64_t heads, const char* what) {
    if (!s.comm) return strf("whole on every rank (%lld %s heads do not share out over %d ranks)", static_cast<long long>(heads), what, R);
    if (!opt.partial_sums) return std::string("heads split");
    return std::string(s.partial_sums ? "heads split, out projection by columns and summed"
                                      : "heads split, out projection by rows (its heads' columns are not on its type's blocks)");
  };
  log::info("across %d ranks: attention %s, DeltaNet %s, LM head rows split", R, how(attn_split, n_kv, "KV").c_str(), how(dn_split, n_k, "key").c_str());
  const int64_t v0 = vocab.begin(me), nv = vocab.size(me);
  weights.output = weights.output.rows(v0, nv);
  if (weights.has_mtp) {
    if (weights.mtp.own_head) weights.mtp.head = weights.mtp.head.rows(v0, nv);
    else weights.mtp.head = weights.output;
  }
  if (config.dense()) {  // the FFN by rows, as the shared expert
    const int64_t F = config.n_ff, D = config.n_embd, A = quant::kRepackRows;
    if (F < A * R) fail("%d ranks: the FFN (%lld rows) is too narrow to split", R, static_cast<long long>(F));
    int64_t A_ff = split_unit(weights.layers, [](const LayerWeights& l) -> const Linear& { return l.ffn.down; });  // partial sums
    const bool partial = opt.partial_sums && F >= A_ff * R;
    if (!partial) A_ff = A;
    ffn_split.comm = &c;
    ffn_split.partial_sums = partial;
    ffn_split.heads = ColumnLayout::contiguous(F, A_ff, R);
    ffn_split.rows = ColumnLayout::contiguous(D, A, R);
    const Split fs{F, A_ff, R}, ds{D, A, R};
    for (LayerWeights& l : weights.layers) {
      l.ffn.gate = l.ffn.gate.rows(fs.begin(me), fs.size(me));
      l.ffn.up = l.ffn.up.rows(fs.begin(me), fs.size(me));
      l.ffn.down = partial ? take_columns(*backend, *file, l.ffn.down, {{fs.begin(me), fs.size(me)}}, split_copies)
                           : l.ffn.down.rows(ds.begin(me), ds.size(me));
    }
    log::info("across %d ranks: each rank holds 1/%d of the FFN's rows%s", R, R,
              partial ? ", down by columns and summed"
              : opt.partial_sums ? " (down by rows: the FFN's width does not split on its type's blocks)" : "");
    return;
  }
  // Experts by rows unless asked for whole experts, or a share would be empty (a tiny FFN on many ranks).
  const bool rows_fit = config.n_ff_exp >= static_cast<int64_t>(quant::kRepackRows) * R &&
                        (config.n_ff_shexp == 0 || config.n_ff_shexp >= static_cast<int64_t>(quant::kRepackRows) * R);
  if (!opt.whole_experts && rows_fit) {
    const bool partial = split_expert_rows(c, opt.experts_in_file, opt.partial_sums);
    const char* how = partial ? ", downs by columns and summed"
                      : !opt.partial_sums ? " (balanced at batch 1, exact)"
                      : opt.experts_in_file ? ", downs by rows (streamed experts are read by rows)"
                                            : ", downs by rows (the experts' widths do not split on their types' blocks)";
    log::info("across %d ranks: each rank holds 1/%d of the rows of every expert%s%s", R, R, how,
              opt.experts_in_file ? "; routed experts read from the file" : "");
    return;
  }
  if (!opt.whole_experts)
    log::info("across %d ranks: experts of %lld rows are too narrow to split by rows; each rank holds whole experts", R,
              static_cast<long long>(config.n_ff_exp));
  if (config.n_expert < R)
    fail("%d ranks, but the model has %lld routed experts per layer: at most that many ranks hold whole experts", R,
         static_cast<long long>(config.n_expert));
  log::info("across %d ranks: each rank holds whole experts, 1/%d of them (expert parallel)", R, R);
  const Split ex{config.n_expert, 1, R};
  const int64_t e0 = ex.begin(me), ne = ex.size(me);
  for (size_t il = 0; il < weights.layers.size(); ++il) {
    MoeWeights& m = weights.layers[il].moe;
    const int64_t per = (m.fused_gate_up ? 2 : 1) * config.n_ff_exp;
    m.gate_exps = m.gate_exps.rows(e0 * per, ne * per);
    if (m.up_exps.present()) m.up_exps = m.up_exps.rows(e0 * config.n_ff_exp, ne * config.n_ff_exp);
    m.down_exps = m.down_exps.rows(e0 * config.n_embd, ne * config.n_embd);
    m.expert0 = e0;
    m.n_local = ne;
    m.run_shared = owns_ffn(static_cast<int>(il));
  }
}

RepackReport Model::repack(RepackScope scope) {
  if (repack_scope != RepackScope::kNone) fail("internal: model repacked twice");
  repack_scope = scope;
  if (scope == RepackScope::kNone) return {};
  Repacker R(*backend, *file, repacked);
  auto one = [&](Linear& w, bool drop_source) { R.one(w, drop_source); };
  if (weights.tied_output) {
    one(weights.output, false);  // its own copy: the embedding lookup keeps reading the file layout
  } else {
    one(weights.output, true);
  }
  if (weights.has_mtp) {  // the MTP block's own matrices; a shared head follows the trunk's (now repacked) one
    one(weights.mtp.eh_proj, true);
    if (weights.mtp.own_head) one(weights.mtp.head, true);
    else weights.mtp.head = weights.output;
    const uint8_t* before = weights.mtp.head_sub.data;
    one(weights.mtp.head_sub, false);  // its own buffer, freed once repacked
    if (weights.mtp.head_sub.data != before)
      std::erase_if(weights.owned, [&](const auto& b) { return b->data() == before; });
  }
  // Experts left in the file's matrices across ranks (views of this rank's rows, SplitOptions::experts_in_file)
  // are not repacked here: that would copy every rank's rows.
  const bool in_file = std::any_of(weights.layers.begin(), weights.layers.end(),
                                   [](const LayerWeights& l) { return l.moe.ff_stride != 0; });
  const bool experts = scope == RepackScope::kAll && qwen35moe::expert_rows_grouped(config) && !in_file;
  if (scope == RepackScope::kAll && !qwen35moe::expert_rows_grouped(config))
    R.report().kept.push_back("routed experts (n_ff_exp or n_embd not a multiple of 8 rows)");
  else if (scope == RepackScope::kAll && in_file)
    R.report().kept.push_back("routed experts (this rank's rows, read from the file: --mem-budget across ranks)");
  for (LayerWeights& l : weights.layers) {
    for (Linear* w : {&l.attn.wq, &l.attn.wk, &l.attn.wv, &l.attn.wo, &l.dn.wqkv, &l.dn.wgate, &l.dn.wbeta,
                      &l.dn.walpha, &l.dn.wba, &l.dn.wout, &l.moe.gate_shexp, &l.moe.up_shexp, &l.moe.down_shexp,
                      &l.moe.shexp_gate, &l.ffn.gate, &l.ffn.up, &l.ffn.down})
      one(*w, true);
    if (experts)
      for (Linear* w : {&l.moe.gate_exps, &l.moe.up_exps, &l.moe.down_exps}) one(*w, true);
  }
  // Rows gathered across ranks (distribute) into buffers of their own are now repacked copies: free the originals
  // no matrix reads any more.
  std::vector<const uint8_t*> used = {weights.output.data, weights.mtp.eh_proj.data, weights.mtp.head.data,
                                      weights.mtp.head_sub.data, weights.token_embd.data};
  for (const LayerWeights& l : weights.layers)
    for (const Linear* w : {&l.attn.wq, &l.attn.wk, &l.attn.wv, &l.attn.wo, &l.dn.wqkv, &l.dn.wgate, &l.dn.wbeta,
                            &l.dn.walpha, &l.dn.wba, &l.dn.wout, &l.moe.gate_exps, &l.moe.up_exps, &l.moe.down_exps,
                            &l.moe.gate_shexp, &l.moe.up_shexp, &l.moe.down_shexp, &l.moe.shexp_gate, &l.moe.router,
                            &l.ffn.gate, &l.ffn.up, &l.ffn.down})
      used.push_back(w->data);
  std::erase_if(split_copies, [&](const std::shared_ptr<backend::Buffer>& b) {
    return std::none_of(used.begin(), used.end(), [&](const uint8_t* p) { return p >= b->data() && p < b->data() + b->bytes(); });
  });
  return R.report();
}

std::unique_ptr<Model> Model::load(const std::string& path, std::unique_ptr<backend::Backend> be) {
  return load(std::make_unique<gguf::File>(gguf::File::open(path)), std::move(be));
}

std::unique_ptr<Model> Model::load(std::unique_ptr<gguf::File> file, std::unique_ptr<backend::Backend> be) {
  auto m = std::make_unique<Model>();
  m->backend = be ? std::move(be) : backend::make_backend("cpu");
  m->file = std::move(file);
  m->config = Config::from_gguf(*m->file);
  m->weights = Weights::load(*m->file, m->config, *m->backend);
  return m;
}

}  // namespace tern::models::qwen35moe
