// The CPU backend: host memory, quant/ kernels for the matrices and ops/ for the rest, on the ISA quant and ops
// choose (engine_isa(), logged once). The code below is what the blocks ran directly before the seam; outputs are
// bit-identical to it.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backend/backend.h"
#include "core/error.h"
#include "core/mmap.h"
#include "core/parallel.h"
#include "ops/activation.h"
#include "ops/conv.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "ops/split.h"
#include "quant/convert.h"
#include "quant/kernels.h"
#include "quant/repack.h"

namespace tern::backend {

const char* kind_name(BufferKind kind) {
  switch (kind) {
    case BufferKind::kWeights: return "weights";
    case BufferKind::kScratch: return "scratch";
    case BufferKind::kState: return "state";
  }
  return "?";
}

void Buffer::check_range(size_t off, size_t n, const char* what) const {
  if (off > bytes_ || n > bytes_ - off)
    fail("internal: %s of %zu bytes at offset %zu outside a %s buffer of %zu bytes", what, n, off, kind_name(kind_),
         bytes_);
}

Floats::Floats(Backend& be, const std::vector<float>& host) : n_(static_cast<int64_t>(host.size())) {
  if (host.empty()) return;
  buf_ = be.alloc(BufferKind::kWeights, host.size() * sizeof(float));
  buf_->write(0, host.data(), host.size() * sizeof(float));
}

std::vector<float> Floats::to_host() const {
  std::vector<float> v(static_cast<size_t>(n_));
  if (buf_) buf_->read(0, v.data(), v.size() * sizeof(float));
  return v;
}

uint8_t* Scratch::grow_bytes(Backend& be, size_t n) {
  if (!buf_ || buf_->bytes() < n) {
    buf_.reset();  // the old one first: peak memory stays one buffer
    buf_ = be.alloc(BufferKind::kScratch, std::max<size_t>(n, 64));
  }
  return buf_->data();
}

namespace {

// Host memory: small buffers from the heap (64-byte aligned), large ones as anonymous mappings (lazily backed,
// huge pages where the kernel gives them; core/mmap.h).
class CpuBuffer final : public Buffer {
 public:
  static std::unique_ptr<CpuBuffer> make(BufferKind kind, size_t n, std::shared_ptr<LiveBytes> live);
  ~CpuBuffer() override {
    if (small_) std::free(small_);
  }
  void write(size_t off, const void* src, size_t n) override {
    check_range(off, n, "write");
    if (n) std::memcpy(data() + off, src, n);
  }
  void read(size_t off, void* dst, size_t n) const override {
    check_range(off, n, "read");
    if (n) std::memcpy(dst, data() + off, n);
  }
  void zero() override {
    if (bytes()) std::memset(data(), 0, bytes());
  }
  void discard(size_t off, size_t n) override {
    check_range(off, n, "discard");
    if (big_.data() && n) drop_pages(data() + off, n);  // anonymous pages: zero again when next touched
  }

 private:
  CpuBuffer(BufferKind kind, size_t n, uint8_t* data, uint8_t* small, AnonBuffer big, std::shared_ptr<LiveBytes> live)
      : Buffer(kind, n, data, std::move(live)), small_(small), big_(std::move(big)) {}
  uint8_t* small_;
  AnonBuffer big_;
};

constexpr size_t kSmallBuffer = size_t{1} << 20;

std::unique_ptr<CpuBuffer> CpuBuffer::make(BufferKind kind, size_t n, std::shared_ptr<LiveBytes> live) {
  uint8_t* small = nullptr;
  AnonBuffer big;
  uint8_t* data = nullptr;
  if (n < kSmallBuffer) {
    const size_t rounded = std::max<size_t>(64, (n + 63) / 64 * 64);
    small = static_cast<uint8_t*>(std::aligned_alloc(64, rounded));
    if (!small) fail("cannot allocate %zu bytes of %s", n, kind_name(kind));
    std::memset(small, 0, rounded);
    data = small;
  } else {
    big = AnonBuffer(n);  // zero pages until written
    data = big.data();
  }
  return std::unique_ptr<CpuBuffer>(new CpuBuffer(kind, n, data, small, std::move(big), std::move(live)));
}

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return std::string("cpu (") + isa_name(quant::active_isa()) + ")"; }

  std::unique_ptr<Buffer> alloc(BufferKind kind, size_t bytes) override {
    return CpuBuffer::make(kind, bytes, live_);
  }
  const uint8_t* map_weights(const uint8_t* host, size_t) override { return host; }

  bool has_kernels(quant::Type t) const override { return quant::has_kernels(t); }
  bool can_repack(const Matrix& w) const override { return !w.repacked && quant::has_repacked(w.type); }
  size_t repacked_bytes(const Matrix& w) const override { return quant::repacked_bytes(w.type, w.n_out, w.n_in); }
  Matrix repack_into(const Matrix& w, uint8_t* dst, bool parallel) override {
    constexpr int64_t kChunk = 16 * quant::kRepackRows;
    const int64_t n_chunks = parallel ? (w.n_out + kChunk - 1) / kChunk : 1;
    auto chunk = [&](int64_t c) {
      const int64_t r0 = c * kChunk, n = parallel ? std::min(kChunk, w.n_out - r0) : w.n_out;
      quant::repack(w.type, w.data + r0 * w.row_bytes, w.row_bytes, n, w.n_in,
                    dst + quant::repacked_bytes(w.type, r0, w.n_in));
    };
    if (parallel) parallel_for(n_chunks, chunk);
    else chunk(0);
    Matrix r = w;
    r.data = dst;
    r.repacked = true;
    return r;
  }

  void matmul(const Matrix& w, const float* x, int64_t n_tok, float* y) override {
    if (w.repacked) quant::matmul_repacked(w.type, w.data, w.n_out, w.n_in, x, n_tok, y, quant::active_isa());
    else quant::matmul(w.type, w.data, w.row_bytes, w.n_out, w.n_in, x, n_tok, y, quant::active_isa());
  }
  void get_rows(const Matrix& t, const int32_t* ids, int64_t n_tok, float* out) override {
    if (t.repacked) fail("internal: %s: row lookup in a repacked matrix", t.name.c_str());
    for (int64_t i = 0; i < n_tok; ++i) quant::dequantize_row(t.type, t.data + t.row_bytes * ids[i], out + i * t.n_in, t.n_in);
  }
  void swiglu_ffns(const std::vector<FfnJob>& jobs, const float* x, int64_t n_rows, int64_t D, float* out,
                   bool same_x, const FfnMid& mid) override;

  void rms_norm(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps) override {
    ops::rms_norm(x, w, y, n_rows, n, eps);
  }
  void rms_norm_gated(const float* x, const float* z, const float* w, float* y, int64_t n_rows, int64_t n,
                      float eps) override {
    ops::rms_norm_gated(x, z, w, y, n_rows, n, eps);
  }
  // Elementwise: a batch on all threads, a decode row on the calling thread (ops/split.h; each element's value
  // is the same either way).
  void add(float* x, const float* y, int64_t n) override {
    ops::split::elements(n, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) x[i] += y[i];
    });
  }
  void swiglu(float* g, const float* u, int64_t n) override {
    ops::split::elements(n, [&](int64_t i0, int64_t i1) { ops::swiglu(g + i0, u + i0, g + i0, i1 - i0); });
  }
  void add_gated_rows(float* y, const float* s, const float* gate, int64_t n_rows, int64_t D) override {
    ops::split::rows(n_rows, D, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const float gt = ops::sigmoid(gate[t]);
        for (int64_t d = 0; d < D; ++d) y[t * D + d] += gt * s[t * D + d];
      }
    });
  }
  void gather_rows(const float* x, const int64_t* rows, int64_t n, int64_t D, float* out) override {
    for (int64_t i = 0; i < n; ++i) std::memcpy(out + i * D, x + rows[i] * D, static_cast<size_t>(D) * sizeof(float));
  }
  void copy(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void concat_rows(const float* a, int64_t da, const float* b, int64_t db, int64_t n_rows, float* out) override {
    for (int64_t r = 0; r < n_rows; ++r) {
      std::memcpy(out + r * (da + db), a + r * da, static_cast<size_t>(da) * sizeof(float));
      std::memcpy(out + r * (da + db) + da, b + r * db, static_cast<size_t>(db) * sizeof(float));
    }
  }

  void copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t n_rows,
                 int64_t n) override {
    for (int64_t r = 0; r < n_rows; ++r)
      std::memcpy(dst + r * dst_stride, src + r * src_stride, static_cast<size_t>(n) * sizeof(float));
  }
  void scale(float* x, float s, int64_t n) override {
    ops::split::elements(n, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) x[i] *= s;
    });
  }

  void split_q_gate(const float* qg, int64_t n_tok, int64_t n_head, int64_t head_dim, float* q,
                    float* gate) override {
    ops::split_q_gate(qg, n_tok, n_head, head_dim, q, gate);
  }
  void rope_neox(float* x, int64_t n_tok, int64_t n_head, int64_t head_dim, int64_t n_rot, const int32_t* pos,
                 float freq_base) override {
    ops::rope_neox(x, n_tok, n_head, head_dim, n_rot, pos, freq_base);
  }
  void kv_store(const ops::KvCacheView& kv, const float* k, const float* v, int64_t n_tok, int64_t pos0) override {
    ops::kv_store(kv, k, v, n_tok, pos0);
  }
  void attention_causal(const float* q, int64_t n_tok, int64_t n_head, const ops::KvCacheView& kv, int64_t pos0,
                        float scale, float* out) override {
    ops::attention_causal(q, n_tok, n_head, kv, pos0, scale, out);
  }
  void sigmoid_gate(float* o, const float* gate, int64_t n) override { ops::apply_sigmoid_gate(o, gate, n); }

  void rope_interleaved(float* x, int64_t n_tok, int64_t n_head, int64_t head_stride, int64_t off, int64_t n_rot,
                        const int32_t* pos, float freq_base) override {
    ops::rope_interleaved(x, n_tok, n_head, head_stride, off, n_rot, pos, freq_base);
  }
  void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t n_rows, int64_t n,
                  float eps) override {
    ops::layer_norm(x, w, b, y, n_rows, n, eps);
  }
  void rows_store(void* cache, ops::KvType type, int64_t n_ctx, int64_t dim, const float* x, int64_t n_tok,
                  int64_t pos0) override {
    ops::rows_store(cache, type, n_ctx, dim, x, n_tok, pos0);
  }
  void indexer_topk(const float* q, const float* w, int64_t n_tok, int64_t n_head, int64_t dim, const void* k,
                    ops::KvType type, int64_t n_ctx, int64_t pos0, int64_t topk, int32_t* sel,
                    int32_t* n_sel) override {
    ops::indexer_topk(q, w, n_tok, n_head, dim, k, type, n_ctx, pos0, topk, sel, n_sel);
  }
  void attention_mla(const float* q, int64_t n_tok, int64_t n_head, const void* kv, ops::KvType type, int64_t n_ctx,
                     int64_t dk, int64_t dv, int64_t pos0, const int32_t* sel, int64_t sel_stride,
                     const int32_t* n_sel, float scale, float* out) override {
    ops::attention_mla(q, n_tok, n_head, kv, type, n_ctx, dk, dv, pos0, sel, sel_stride, n_sel, scale, out);
  }
  void rows_load(const void* cache, ops::KvType type, int64_t n_ctx, int64_t dim, int64_t pos0, int64_t n_rows,
                 float* out) override {
    ops::rows_load(cache, type, n_ctx, dim, pos0, n_rows, out);
  }
  void attention_mla_expanded(const float* q, int64_t q_stride, int64_t n_tok, int64_t n_head, const float* k,
                              const float* v, int64_t n_ctx, int64_t dk, int64_t dv, int64_t pos0, float scale,
                              float* out, int64_t out_stride) override {
    ops::attention_mla_expanded(q, q_stride, n_tok, n_head, k, v, n_ctx, dk, dv, pos0, scale, out, out_stride);
  }

  void delta_gates(float* beta, float* g, const float* a, const float* dt_bias, int64_t n_rows,
                   int64_t n_heads) override {
    ops::sigmoid_inplace(beta, n_rows * n_heads);
    for (int64_t t = 0; t < n_rows; ++t)
      for (int64_t h = 0; h < n_heads; ++h) {
        float& gv = g[t * n_heads + h];
        gv = a[h] * ops::softplus(gv + dt_bias[h]);
      }
  }
  void split_ba(const float* ba, int64_t n_rows, int64_t n_k_heads, int64_t r, float* beta, float* g) override {
    const int64_t hv = n_k_heads * r;
    for (int64_t t = 0; t < n_rows; ++t)
      for (int64_t kh = 0; kh < n_k_heads; ++kh)
        for (int64_t i = 0; i < r; ++i) {
          beta[t * hv + kh * r + i] = ba[t * 2 * hv + kh * 2 * r + i];
          g[t * hv + kh * r + i] = ba[t * 2 * hv + kh * 2 * r + r + i];
        }
  }
  void conv1d_causal_silu(const float* x, int64_t n_tok, int64_t n_ch, int64_t kernel, const float* w, float* state,
                          float* y) override {
    ops::conv1d_causal_silu(x, n_tok, n_ch, kernel, w, state, y);
  }
  void l2_norm(const float* x, float* y, int64_t n_rows, int64_t n, float eps) override {
    ops::l2_norm(x, y, n_rows, n, eps);
  }
  void gated_delta_rule(const ops::DeltaRuleShape& shape, const ops::DeltaRuleInputs& in, bool grouped, float* state,
                        float* out) override;

  void moe_route(const float* logits, int64_t n_rows, int64_t n_expert, int64_t n_used, const ops::RouteParams& p,
                 int32_t* ids, float* weights) override {
    ops::moe_route(logits, n_rows, n_expert, n_used, p, ids, weights);
  }
  void moe_combine(const float* out, const int32_t* slot_row, const float* wts, int64_t n_rows, int64_t K, int64_t D,
                   float* y) override {
    parallel_for(n_rows, [&](int64_t t) {
      float* yt = y + t * D;
      std::memset(yt, 0, static_cast<size_t>(D) * sizeof(float));
      for (int64_t k = 0; k < K; ++k) {
        const float wk = wts[t * K + k];
        const float* sl = out + static_cast<int64_t>(slot_row[t * K + k]) * D;
        for (int64_t d = 0; d < D; ++d) yt[d] += wk * sl[d];
      }
    });
  }

  void sync() override {}

 private:
  // Workspace of swiglu_ffns, kept across calls (one forward at a time).
  std::vector<Matrix> q_fmt_;                // activation formats quantized for this call ...
  std::vector<std::vector<uint8_t>> q_buf_;  // ... and those activations [n_rows, act_row_bytes]
  std::vector<float> h_;                     // SwiGLU rows of every job [rows, F]
  std::vector<uint8_t> down_q_;              // every job's down input, quantized
};

size_t act_row_bytes(const Matrix& w) {
  return w.repacked ? quant::repacked_act_row_bytes(w.type, w.n_in) : quant::act_row_bytes(w.type, w.n_in);
}

// Whether activations quantized for a can feed b.
bool same_act_format(const Matrix& a, const Matrix& b) {
  if (a.n_in != b.n_in || a.repacked != b.repacked) return false;
  if (a.repacked) return (quant::act_type(a.type) == quant::Type::Q8_K) == (quant::act_type(b.type) == quant::Type::Q8_K);
  return quant::act_type(a.type) == quant::act_type(b.type);
}

void quantize_rows(const Matrix& w, const float* x, int64_t n_tok, uint8_t* xq) {
  const size_t stride = act_row_bytes(w);
  const Isa isa = quant::active_isa();
  parallel_for(n_tok, [&](int64_t t) {
    if (w.repacked) quant::quantize_act_repacked(w.type, x + t * w.n_in, xq + t * stride, w.n_in, isa);
    else quant::quantize_act(w.type, x + t * w.n_in, xq + t * stride, w.n_in, isa);
  });
}

// Rows [r0, r1) of w times the quantized rows (token t reads xq row rows[t], or t when rows is null) on the calling
// thread; row i lands at y[t * ldy + i - r0].
void gemm_rows(const Matrix& w, const uint8_t* xq, const int32_t* rows, int64_t n_tok, int64_t r0, int64_t r1,
               float* y, int64_t ldy) {
  const size_t stride = act_row_bytes(w);
  if (w.repacked) {
    if (r0 % quant::kRepackRows != 0 || (r1 != w.n_out && r1 % quant::kRepackRows != 0))
      fail("internal: %s: rows [%lld, %lld) are not on 8-row groups", w.name.c_str(), static_cast<long long>(r0),
           static_cast<long long>(r1));
    quant::gemm_repacked(w.type, w.data, w.n_out, w.n_in, xq, stride, r0 / quant::kRepackRows,
                         (r1 + quant::kRepackRows - 1) / quant::kRepackRows, n_tok, y, ldy, quant::active_isa(), rows,
                         r0);
  } else {
    quant::gemm(w.type, w.data, w.row_bytes, xq, stride, w.n_in, r0, r1, n_tok, y, ldy, quant::active_isa(), rows, r0);
  }
}

// Rows of one matrix per grouped-FFN task, for a job of m tokens (quant::task_rows: a multiple of the 8-row groups).
int64_t task_rows(const Matrix& w, int64_t m) { return quant::task_rows(w.row_bytes, m); }
int64_t chunks(int64_t n, int64_t rows) { return (n + rows - 1) / rows; }

// Every job's gate+up (with SwiGLU), then every job's down, as three parallel passes over fixed (job, row chunk)
// tasks: each output element is one gemm call's, so results never depend on the threads. Jobs read their tokens'
// rows of the batch's activations, quantized once per format.
void CpuBackend::swiglu_ffns(const std::vector<FfnJob>& jobs, const float* x, int64_t n_rows, int64_t D,
                             float* out, bool same_x, const FfnMid& mid) {
  if (!same_x) q_fmt_.clear();
  auto batch_q = [&](const Matrix& w) -> const uint8_t* {
    for (size_t i = 0; i < q_fmt_.size(); ++i)
      if (same_act_format(q_fmt_[i], w)) return q_buf_[i].data();
    const size_t i = q_fmt_.size();
    q_fmt_.push_back(w);
    if (q_buf_.size() <= i) q_buf_.emplace_back();  // buffers are reused call after call
    uint8_t* q = grow(q_buf_[i], n_rows * static_cast<int64_t>(act_row_bytes(w)));
    quantize_rows(w, x, n_rows, q);
    return q;
  };
  std::vector<const uint8_t*> gate_in(jobs.size()), up_in(jobs.size());
  int64_t F = 0, h_rows = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    gate_in[i] = batch_q(jobs[i].gate);
    up_in[i] = batch_q(jobs[i].up);
    F = std::max(F, jobs[i].gate.n_out);
    h_rows = std::max(h_rows, jobs[i].out_off + jobs[i].m);
  }

  // gate and up rows of a task into per-thread [m, rows] tiles, SwiGLU into h [h_rows, F] (each job's m rows at
  // out_off).
  std::vector<std::pair<int32_t, int32_t>> tasks;
  for (size_t i = 0; i < jobs.size(); ++i)
    for (int64_t c = 0; c < chunks(jobs[i].gate.n_out, task_rows(jobs[i].gate, jobs[i].m)); ++c)
      tasks.push_back({static_cast<int32_t>(i), static_cast<int32_t>(c)});
  float* h = grow(h_, h_rows * F);
  parallel_for(static_cast<int64_t>(tasks.size()), [&](int64_t k) {
    const FfnJob& j = jobs[tasks[k].first];
    const int64_t rows = task_rows(j.gate, j.m);
    const int64_t r0 = tasks[k].second * rows, r1 = std::min(j.gate.n_out, r0 + rows);
    thread_local std::vector<float> tg, tu;
    float* g = grow(tg, j.m * rows);
    float* u = grow(tu, j.m * rows);
    gemm_rows(j.gate, gate_in[tasks[k].first], j.tokens, j.m, r0, r1, g, rows);
    gemm_rows(j.up, up_in[tasks[k].first], j.tokens, j.m, r0, r1, u, rows);
    for (int64_t t = 0; t < j.m; ++t)
      ops::swiglu(g + t * rows, u + t * rows, h + (j.out_off + t) * F + r0, r1 - r0);
  });

  if (mid) {  // tensor parallel: every rank's SwiGLU columns (each job's gate width must be the same F)
    for (const FfnJob& j : jobs)
      if (j.gate.n_out != F) fail("internal: split FFN jobs of different widths (%lld, %lld)", static_cast<long long>(j.gate.n_out),
                                  static_cast<long long>(F));
    int64_t F_down = 0;
    h = const_cast<float*>(mid(h, h_rows, F, &F_down));
    F = F_down;
  }

  // down: its input rows quantized, then its rows in chunks into out [.., D] at out_off.
  std::vector<size_t> dn_off(jobs.size());
  size_t dn_bytes = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    dn_off[i] = dn_bytes;
    dn_bytes += static_cast<size_t>(jobs[i].m) * act_row_bytes(jobs[i].down);
  }
  uint8_t* dq = grow(down_q_, static_cast<int64_t>(dn_bytes));
  std::vector<std::pair<int32_t, int32_t>> rows;
  for (size_t i = 0; i < jobs.size(); ++i)
    for (int64_t t = 0; t < jobs[i].m; ++t) rows.push_back({static_cast<int32_t>(i), static_cast<int32_t>(t)});
  parallel_for(static_cast<int64_t>(rows.size()), [&](int64_t k) {
    const FfnJob& j = jobs[rows[k].first];
    const int64_t t = rows[k].second;
    // h rows are F wide; the down matrix reads its first n_in (= this job's F) of them
    quantize_rows(j.down, h + (j.out_off + t) * F, 1, dq + dn_off[rows[k].first] + t * act_row_bytes(j.down));
  });
  tasks.clear();
  for (size_t i = 0; i < jobs.size(); ++i)
    for (int64_t c = 0; c < chunks(jobs[i].down.n_out, task_rows(jobs[i].down, jobs[i].m)); ++c)
      tasks.push_back({static_cast<int32_t>(i), static_cast<int32_t>(c)});
  parallel_for(static_cast<int64_t>(tasks.size()), [&](int64_t k) {
    const FfnJob& j = jobs[tasks[k].first];
    const int64_t rows = task_rows(j.down, j.m);
    const int64_t r0 = tasks[k].second * rows, r1 = std::min(j.down.n_out, r0 + rows);
    gemm_rows(j.down, dq + dn_off[tasks[k].first], nullptr, j.m, r0, r1, out + j.out_off * D + r0, D);
  });
}

void CpuBackend::gated_delta_rule(const ops::DeltaRuleShape& shape, const ops::DeltaRuleInputs& in, bool grouped,
                                  float* state, float* out) {
  ops::DeltaRuleShape s = shape;
  s.grouped = grouped;  // the kernels' head map (ops/delta_rule.h): no copies
  ops::gated_delta_rule(s, in, state, out);
}

}  // namespace

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name == "cpu") return std::make_unique<CpuBackend>();
  std::string known;
  for (const std::string& n : backend_names()) known += (known.empty() ? "" : ", ") + n;
  fail("unknown backend '%s' (this build has: %s)", name.c_str(), known.c_str());
}

std::vector<std::string> backend_names() { return {"cpu"}; }

}  // namespace tern::backend
