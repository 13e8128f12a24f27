// The backend seam (backend/backend.h) and its CPU backend: buffers (zeroed, bounds-checked, accounted per kind),
// the composite ops the blocks moved into the backend (each against a naive formula or a per-head run of the
// verified kernel), and the seam itself: a model loaded onto a stand-in backend that forwards every call to the
// CPU backend gives the same bits as one on the CPU backend, with all of its state, scratch and weight memory
// allocated through the stand-in (what a CUDA backend would see).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "models/registry.h"
#include "ops/activation.h"
#include "ops/delta_rule.h"
#include "quant/convert.h"
#include "quant/kernels.h"
#include "quant/types.h"

namespace fs = std::filesystem;
using namespace tern;
using backend::BufferKind;

namespace {

std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace

TEST(Backend, BuffersStartZeroedAndRoundTrip) {
  auto be = backend::make_backend("cpu");
  for (size_t n : {size_t{1}, size_t{100}, size_t{3} << 20}) {  // heap and anonymous-mapping sizes
    auto b = be->alloc(BufferKind::kScratch, n);
    ASSERT_EQ(b->bytes(), n);
    EXPECT_EQ(b->kind(), BufferKind::kScratch);
    std::vector<uint8_t> got(n, 0xAB);
    b->read(0, got.data(), n);
    for (size_t i = 0; i < n; i += 4093) ASSERT_EQ(got[i], 0) << i;
    std::vector<uint8_t> src(n);
    for (size_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 7 + 3);
    b->write(0, src.data(), n);
    b->read(0, got.data(), n);
    EXPECT_EQ(got, src);
    b->zero();
    b->read(n - 1, got.data(), 1);
    EXPECT_EQ(got[0], 0);
  }
}

TEST(Backend, OutOfRangeCopiesAreErrors) {
  auto be = backend::make_backend("cpu");
  auto b = be->alloc(BufferKind::kState, 64);
  uint8_t tmp[128] = {};
  EXPECT_THROW(b->write(60, tmp, 8), Error);
  EXPECT_THROW(b->read(0, tmp, 65), Error);
  EXPECT_THROW(b->read(65, tmp, 0), Error);
  EXPECT_NO_THROW(b->read(64, tmp, 0));
  EXPECT_NO_THROW(b->write(56, tmp, 8));
}

TEST(Backend, LiveBytesFollowAllocations) {
  auto be = backend::make_backend("cpu");
  EXPECT_EQ(be->live_bytes(BufferKind::kWeights), 0u);
  auto w = be->alloc(BufferKind::kWeights, 1000);
  auto s = be->alloc(BufferKind::kState, size_t{2} << 20);
  EXPECT_EQ(be->live_bytes(BufferKind::kWeights), 1000u);
  EXPECT_EQ(be->live_bytes(BufferKind::kState), size_t{2} << 20);
  EXPECT_EQ(be->live_bytes(BufferKind::kScratch), 0u);
  s.reset();
  EXPECT_EQ(be->live_bytes(BufferKind::kState), 0u);
  be.reset();  // a buffer may outlive its backend
  w->zero();
  w.reset();
}

TEST(Backend, UnknownBackendNamesTheKnownOnes) {
  try {
    backend::make_backend("cuda");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown backend 'cuda'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cpu"), std::string::npos) << e.what();
  }
  EXPECT_EQ(backend::backend_names(), std::vector<std::string>{"cpu"});
  EXPECT_EQ(backend::make_backend()->name().rfind("cpu (", 0), 0u);
}

TEST(Backend, FloatsAndScratch) {
  auto be = backend::make_backend("cpu");
  const std::vector<float> v = random_floats(37, 1);
  backend::Floats f(*be, v);
  EXPECT_EQ(f.size(), 37);
  EXPECT_EQ(f.to_host(), v);
  EXPECT_EQ(std::vector<float>(f.data(), f.data() + 37), v);
  EXPECT_TRUE(backend::Floats().empty());
  EXPECT_EQ(backend::Floats().data(), nullptr);

  backend::Scratch s;
  float* a = s.grow<float>(*be, 100);
  EXPECT_EQ(s.grow<float>(*be, 50), a);  // never shrinks
  EXPECT_EQ(s.grow<float>(*be, 100), a);
  s.grow<float>(*be, 1000);
  EXPECT_GE(s.bytes(), 4000u);
  EXPECT_EQ(be->live_bytes(BufferKind::kScratch), s.bytes());  // the old buffer was freed
}

// The composite ops the blocks moved into the backend, against the formulas they replace. Sizes cover a decode
// row (the calling thread) and a batch (all threads).
TEST(BackendOps, ElementwiseAgainstFormulas) {
  auto be = backend::make_backend("cpu");
  for (int64_t rows : {1, 7}) {
    const int64_t D = 40;
    std::vector<float> x = random_floats(rows * D, 2), y = random_floats(rows * D, 3);
    std::vector<float> want = x;
    for (size_t i = 0; i < want.size(); ++i) want[i] += y[i];
    be->add(x.data(), y.data(), rows * D);
    EXPECT_EQ(x, want);

    std::vector<float> g = random_floats(rows * D, 4, -4, 4), u = random_floats(rows * D, 5);
    std::vector<float> sw(rows * D);
    for (size_t i = 0; i < sw.size(); ++i) sw[i] = ops::silu(g[i]) * u[i];
    be->swiglu(g.data(), u.data(), rows * D);
    for (size_t i = 0; i < sw.size(); ++i) ASSERT_NEAR(g[i], sw[i], 1e-6f * (1 + std::fabs(sw[i]))) << i;

    std::vector<float> yy = random_floats(rows * D, 6), sh = random_floats(rows * D, 7), gate = random_floats(rows, 8, -3, 3);
    std::vector<float> wy = yy;
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t d = 0; d < D; ++d) wy[t * D + d] += ops::sigmoid(gate[t]) * sh[t * D + d];
    be->add_gated_rows(yy.data(), sh.data(), gate.data(), rows, D);
    EXPECT_EQ(yy, wy);

    const std::vector<int64_t> pick = {rows - 1, 0};
    std::vector<float> got(2 * D);
    be->gather_rows(x.data(), pick.data(), 2, D, got.data());
    for (int64_t d = 0; d < D; ++d) {
      EXPECT_EQ(got[d], x[(rows - 1) * D + d]);
      EXPECT_EQ(got[D + d], x[d]);
    }

    std::vector<float> cp(D, 0.0f);
    be->copy(cp.data(), x.data() + (rows - 1) * D, D * sizeof(float));  // the last row
    EXPECT_EQ(cp, std::vector<float>(x.end() - D, x.end()));

    const int64_t da = 3;
    std::vector<float> cat(rows * (da + D));
    be->concat_rows(sh.data(), da, x.data(), D, rows, cat.data());
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t d = 0; d < da; ++d) EXPECT_EQ(cat[t * (da + D) + d], sh[t * da + d]);
      for (int64_t d = 0; d < D; ++d) EXPECT_EQ(cat[t * (da + D) + da + d], x[t * D + d]);
    }
  }
}

TEST(BackendOps, GetRowsDequantizesTheChosenRows) {
  auto be = backend::make_backend("cpu");
  const int64_t n_in = 64, n_rows = 5;
  const std::vector<float> table = random_floats(n_in * n_rows, 9);
  const size_t row_bytes = quant::row_size(quant::traits(quant::Type::Q8_0), n_in);
  std::vector<uint8_t> q(row_bytes * n_rows);
  for (int64_t r = 0; r < n_rows; ++r) quant::quantize_row_ref(quant::Type::Q8_0, table.data() + r * n_in, q.data() + r * row_bytes, n_in);
  backend::Matrix m;
  m.type = quant::Type::Q8_0;
  m.data = q.data();
  m.n_in = n_in;
  m.n_out = n_rows;
  m.row_bytes = row_bytes;
  const std::vector<int32_t> ids = {3, 0, 3};
  std::vector<float> got(3 * n_in), want(n_in);
  be->get_rows(m, ids.data(), 3, got.data());
  for (int i = 0; i < 3; ++i) {
    quant::dequantize_row(quant::Type::Q8_0, q.data() + ids[i] * row_bytes, want.data(), n_in);
    EXPECT_EQ(std::vector<float>(got.begin() + i * n_in, got.begin() + (i + 1) * n_in), want) << i;
  }
}

TEST(BackendOps, DeltaGatesSplitBaAndCombine) {
  auto be = backend::make_backend("cpu");
  const int64_t rows = 3, hk = 2, r = 3, hv = hk * r;
  std::vector<float> beta = random_floats(rows * hv, 10, -5, 5), g = random_floats(rows * hv, 11, -5, 5);
  const std::vector<float> a = random_floats(hv, 12, -2, -0.1f), dt = random_floats(hv, 13);
  std::vector<float> wb = beta, wg = g;
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t h = 0; h < hv; ++h) {
      wb[t * hv + h] = 1.0f / (1.0f + std::exp(-beta[t * hv + h]));
      wg[t * hv + h] = a[h] * std::log1p(std::exp(g[t * hv + h] + dt[h]));
    }
  be->delta_gates(beta.data(), g.data(), a.data(), dt.data(), rows, hv);
  for (size_t i = 0; i < beta.size(); ++i) {
    ASSERT_NEAR(beta[i], wb[i], 1e-6f) << i;
    ASSERT_NEAR(g[i], wg[i], 1e-5f * (1 + std::fabs(wg[i]))) << i;
  }

  // ba per key head: its r beta rows, then its r alpha rows.
  std::vector<float> ba(rows * 2 * hv), sb(rows * hv), sg(rows * hv);
  for (size_t i = 0; i < ba.size(); ++i) ba[i] = static_cast<float>(i);
  be->split_ba(ba.data(), rows, hk, r, sb.data(), sg.data());
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t k = 0; k < hk; ++k)
      for (int64_t i = 0; i < r; ++i) {
        EXPECT_EQ(sb[t * hv + k * r + i], ba[t * 2 * hv + k * 2 * r + i]);
        EXPECT_EQ(sg[t * hv + k * r + i], ba[t * 2 * hv + k * 2 * r + r + i]);
      }

  // moe_combine: y[t] = sum_k w[t,k] * out[slot_row[t*K+k]], in k order.
  const int64_t K = 2, D = 16, n_out_rows = rows * K;
  const std::vector<float> out = random_floats(n_out_rows * D, 14), w = random_floats(rows * K, 15, 0, 1);
  std::vector<int32_t> slot(rows * K);
  for (int64_t i = 0; i < rows * K; ++i) slot[i] = static_cast<int32_t>((i * 5 + 1) % n_out_rows);
  std::vector<float> y(rows * D, 99.0f), wy(rows * D, 0.0f);
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t d = 0; d < D; ++d) wy[t * D + d] += w[t * K + k] * out[slot[t * K + k] * D + d];
  be->moe_combine(out.data(), slot.data(), w.data(), rows, K, D, y.data());
  EXPECT_EQ(y, wy);
}

// Grouped expert FFNs: each job's output is SwiGLU(x W_gate, x W_up) W_down through the backend's own matmuls, bit
// for bit, for a one-token job (tasks of hundreds of rows: quant::task_rows streams ~128 KB a task at one token),
// a job of a few tokens (16-row tasks) and a subset of the batch's rows; matrices long enough that every pass
// has several tasks and a short last one, repacked as the engine holds them.
TEST(BackendOps, GroupedFfnsEqualThreeMatmulsAtAnyTaskSize) {
  auto be = backend::make_backend("cpu");
  const quant::Type t = quant::Type::Q4_0;
  const int64_t D = 288, F = 2016, n_rows = 5;  // gate/up: 288 -> 2016 (162 B rows); down: 2016 -> 288
  std::vector<std::unique_ptr<backend::Buffer>> keep;
  auto make = [&](int64_t n_out, int64_t n_in, uint32_t seed, std::vector<uint8_t>& file) {
    const std::vector<float> w = random_floats(n_out * n_in, seed);
    const size_t rb = quant::row_size(quant::traits(t), n_in);
    file.resize(rb * n_out);
    for (int64_t r = 0; r < n_out; ++r) quant::quantize_row_ref(t, w.data() + r * n_in, file.data() + r * rb, n_in);
    backend::Matrix m;
    m.type = t, m.data = file.data(), m.n_in = n_in, m.n_out = n_out, m.row_bytes = rb;
    keep.push_back(be->alloc(BufferKind::kWeights, be->repacked_bytes(m)));
    return be->repack_into(m, keep.back()->data(), true);
  };
  std::vector<uint8_t> fg, fu, fd;
  const backend::Matrix gate = make(F, D, 21, fg), up = make(F, D, 22, fu), down = make(D, F, 23, fd);
  ASSERT_GT(F, 2 * quant::task_rows(gate.row_bytes, 1));  // several tasks at one token, and a short last one
  ASSERT_GT(D, quant::task_rows(down.row_bytes, 1));
  const std::vector<float> x = random_floats(n_rows * D, 24);
  const std::vector<int32_t> pick = {4, 1, 3};
  std::vector<backend::FfnJob> jobs(3);
  jobs[0] = {gate, up, down, pick.data(), 1, 0};          // one token: long tasks
  jobs[1] = {gate, up, down, pick.data(), 3, 1};          // three tokens of the batch
  jobs[2] = {gate, up, down, nullptr, 2, 4};              // batch rows 0 and 1
  std::vector<float> out(6 * D, 99.0f);
  be->swiglu_ffns(jobs, x.data(), n_rows, D, out.data(), false, nullptr);
  // The oracle: each output row's token alone through matmul, SwiGLU, matmul.
  const int32_t rows_of[6] = {4, 4, 1, 3, 0, 1};
  for (int64_t o = 0; o < 6; ++o) {
    std::vector<float> g(F), u(F), y(D);
    be->matmul(gate, x.data() + rows_of[o] * D, 1, g.data());
    be->matmul(up, x.data() + rows_of[o] * D, 1, u.data());
    ops::swiglu(g.data(), u.data(), g.data(), F);
    be->matmul(down, g.data(), 1, y.data());
    for (int64_t d = 0; d < D; ++d) ASSERT_EQ(out[o * D + d], y[d]) << "output row " << o << " column " << d;
  }
}

// Grouped value heads (qwen3next): value head p pairs with key head p / R. Oracle: the verified kernel run on each
// value head alone with its own key head.
TEST(BackendOps, GroupedDeltaRuleEqualsPerHeadRuns) {
  auto be = backend::make_backend("cpu");
  const int64_t n = 5, hk = 2, hv = 6, dk = 8, dv = 4, R = hv / hk;
  const int64_t qk_stride = hk * dk;
  const std::vector<float> q = random_floats(n * qk_stride, 16), k = random_floats(n * qk_stride, 17);
  const std::vector<float> v = random_floats(n * hv * dv, 18), g = random_floats(n * hv, 19, -1, -0.01f);
  const std::vector<float> beta = random_floats(n * hv, 20, 0, 1);
  ops::DeltaRuleInputs in;
  in.q = q.data();
  in.q_stride = qk_stride;
  in.k = k.data();
  in.k_stride = qk_stride;
  in.v = v.data();
  in.v_stride = hv * dv;
  in.g = g.data();
  in.beta = beta.data();
  std::vector<float> state(hv * dk * dv, 0.0f), out(n * hv * dv);
  be->gated_delta_rule({n, hk, hv, dk, dv}, in, true, state.data(), out.data());

  for (int64_t p = 0; p < hv; ++p) {
    const int64_t kh = p / R;
    std::vector<float> gp(n), bp(n), st(dk * dv, 0.0f), op(n * dv);
    for (int64_t t = 0; t < n; ++t) {
      gp[t] = g[t * hv + p];
      bp[t] = beta[t * hv + p];
    }
    ops::DeltaRuleInputs one;
    one.q = q.data() + kh * dk;
    one.q_stride = qk_stride;
    one.k = k.data() + kh * dk;
    one.k_stride = qk_stride;
    one.v = v.data() + p * dv;
    one.v_stride = hv * dv;
    one.g = gp.data();
    one.beta = bp.data();
    ops::gated_delta_rule({n, 1, 1, dk, dv}, one, st.data(), op.data());
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < dv; ++j)
        ASSERT_NEAR(out[t * hv * dv + p * dv + j], op[t * dv + j], 1e-5f) << "head " << p << " token " << t;
  }
}

namespace {

// A stand-in for another backend: forwards every call to the CPU backend and records what passes the seam.
class Recording final : public backend::Backend {
 public:
  std::map<BufferKind, uint64_t> allocated;  // bytes asked for, by kind
  std::map<std::string, int64_t> calls;

  std::string name() const override { return "recording"; }
  std::unique_ptr<backend::Buffer> alloc(BufferKind kind, size_t bytes) override {
    allocated[kind] += bytes;
    return cpu_->alloc(kind, bytes);
  }
  const uint8_t* map_weights(const uint8_t* host, size_t bytes) override {
    ++calls["map_weights"];
    return cpu_->map_weights(host, bytes);
  }
  bool has_kernels(quant::Type t) const override { return cpu_->has_kernels(t); }
  bool can_repack(const backend::Matrix& w) const override { return cpu_->can_repack(w); }
  size_t repacked_bytes(const backend::Matrix& w) const override { return cpu_->repacked_bytes(w); }
  backend::Matrix repack_into(const backend::Matrix& w, uint8_t* dst, bool parallel) override {
    ++calls["repack_into"];
    return cpu_->repack_into(w, dst, parallel);
  }
#define TERN_FWD(name, params, args) \
  void name params override {        \
    ++calls[#name];                  \
    cpu_->name args;                 \
  }
  TERN_FWD(matmul, (const backend::Matrix& w, const float* x, int64_t n, float* y), (w, x, n, y))
  TERN_FWD(get_rows, (const backend::Matrix& t, const int32_t* ids, int64_t n, float* out), (t, ids, n, out))
  TERN_FWD(swiglu_ffns, (const std::vector<backend::FfnJob>& j, const float* x, int64_t n, int64_t D, float* out, bool s,
                         const backend::FfnMid& m), (j, x, n, D, out, s, m))
  TERN_FWD(rms_norm, (const float* x, const float* w, float* y, int64_t r, int64_t n, float e), (x, w, y, r, n, e))
  TERN_FWD(rms_norm_gated, (const float* x, const float* z, const float* w, float* y, int64_t r, int64_t n, float e),
           (x, z, w, y, r, n, e))
  TERN_FWD(add, (float* x, const float* y, int64_t n), (x, y, n))
  TERN_FWD(swiglu, (float* g, const float* u, int64_t n), (g, u, n))
  TERN_FWD(add_gated_rows, (float* y, const float* s, const float* g, int64_t r, int64_t D), (y, s, g, r, D))
  TERN_FWD(gather_rows, (const float* x, const int64_t* rows, int64_t n, int64_t D, float* o), (x, rows, n, D, o))
  TERN_FWD(copy, (void* d, const void* s, size_t n), (d, s, n))
  TERN_FWD(concat_rows, (const float* a, int64_t da, const float* b, int64_t db, int64_t n, float* o),
           (a, da, b, db, n, o))
  TERN_FWD(copy_rows, (const float* s, int64_t ss, float* d, int64_t ds, int64_t r, int64_t n), (s, ss, d, ds, r, n))
  TERN_FWD(scale, (float* x, float s, int64_t n), (x, s, n))
  TERN_FWD(rope_interleaved, (float* x, int64_t n, int64_t h, int64_t hs, int64_t o, int64_t r, const int32_t* p, float b),
           (x, n, h, hs, o, r, p, b))
  TERN_FWD(layer_norm, (const float* x, const float* w, const float* b, float* y, int64_t r, int64_t n, float e),
           (x, w, b, y, r, n, e))
  TERN_FWD(rows_store, (void* c, ops::KvType t, int64_t nc, int64_t d, const float* x, int64_t n, int64_t p0),
           (c, t, nc, d, x, n, p0))
  TERN_FWD(indexer_topk,
           (const float* q, const float* w, int64_t n, int64_t h, int64_t d, const void* k, ops::KvType t, int64_t nc,
            int64_t p0, int64_t tk, int32_t* sel, int32_t* ns),
           (q, w, n, h, d, k, t, nc, p0, tk, sel, ns))
  TERN_FWD(attention_mla,
           (const float* q, int64_t n, int64_t h, const void* kv, ops::KvType t, int64_t nc, int64_t dk, int64_t dv,
            int64_t p0, const int32_t* sel, int64_t ss, const int32_t* ns, float s, float* o),
           (q, n, h, kv, t, nc, dk, dv, p0, sel, ss, ns, s, o))
  TERN_FWD(rows_load, (const void* c, ops::KvType t, int64_t nc, int64_t d, int64_t p0, int64_t n, float* o),
           (c, t, nc, d, p0, n, o))
  TERN_FWD(attention_mla_expanded,
           (const float* q, int64_t qs, int64_t n, int64_t h, const float* k, const float* v, int64_t nc, int64_t dk,
            int64_t dv, int64_t p0, float s, float* o, int64_t os),
           (q, qs, n, h, k, v, nc, dk, dv, p0, s, o, os))
  TERN_FWD(split_q_gate, (const float* qg, int64_t n, int64_t h, int64_t hd, float* q, float* g), (qg, n, h, hd, q, g))
  TERN_FWD(rope_neox, (float* x, int64_t n, int64_t h, int64_t hd, int64_t r, const int32_t* p, float b),
           (x, n, h, hd, r, p, b))
  TERN_FWD(kv_store, (const ops::KvCacheView& kv, const float* k, const float* v, int64_t n, int64_t p0),
           (kv, k, v, n, p0))
  TERN_FWD(attention_causal,
           (const float* q, int64_t n, int64_t h, const ops::KvCacheView& kv, int64_t p0, float s, float* o),
           (q, n, h, kv, p0, s, o))
  TERN_FWD(sigmoid_gate, (float* o, const float* g, int64_t n), (o, g, n))
  TERN_FWD(delta_gates, (float* b, float* g, const float* a, const float* dt, int64_t r, int64_t h), (b, g, a, dt, r, h))
  TERN_FWD(split_ba, (const float* ba, int64_t r, int64_t hk, int64_t rr, float* b, float* g), (ba, r, hk, rr, b, g))
  TERN_FWD(conv1d_causal_silu, (const float* x, int64_t n, int64_t c, int64_t k, const float* w, float* s, float* y),
           (x, n, c, k, w, s, y))
  TERN_FWD(l2_norm, (const float* x, float* y, int64_t r, int64_t n, float e), (x, y, r, n, e))
  TERN_FWD(gated_delta_rule,
           (const ops::DeltaRuleShape& sh, const ops::DeltaRuleInputs& in, bool gr, float* st, float* o),
           (sh, in, gr, st, o))
  TERN_FWD(moe_route,
           (const float* l, int64_t r, int64_t e, int64_t k, const ops::RouteParams& p, int32_t* ids, float* w),
           (l, r, e, k, p, ids, w))
  TERN_FWD(moe_combine, (const float* o, const int32_t* s, const float* w, int64_t r, int64_t k, int64_t D, float* y),
           (o, s, w, r, k, D, y))
  TERN_FWD(sync, (), ())
#undef TERN_FWD

 private:
  std::unique_ptr<backend::Backend> cpu_ = backend::make_backend("cpu");
};

std::vector<float> run_model(models::Model& m, models::RepackScope scope) {
  m.repack(scope);
  m.start({}, 0);
  models::SequenceState st(m.backend(), m.state_shape(), 32, ops::KvType::kF16);
  std::vector<models::SeqInput> b{{&st, {1, 5, 9, 2, 7}, true}};
  std::vector<float> out = m.forward(b);
  std::vector<models::SeqInput> d{{&st, {4}, false}};
  const std::vector<float>& l = m.forward(d);
  out.insert(out.end(), l.begin(), l.end());
  return out;
}

}  // namespace

class BackendSeam : public ::testing::TestWithParam<std::string> {};

TEST_P(BackendSeam, AModelRunsOnAnyBackendWithTheSameBits) {
  const std::string path = (fs::path(TERN_FIXTURES_DIR) / "models" / GetParam()).string();
  for (auto scope : {models::RepackScope::kNone, models::RepackScope::kAll}) {
    auto cpu_model = models::load_model(path);
    const std::vector<float> want = run_model(*cpu_model, scope);

    auto rec = std::make_unique<Recording>();
    Recording& r = *rec;
    auto model = models::load_model(path, std::move(rec));
    EXPECT_EQ(&model->backend(), &r);
    const std::vector<float> got = run_model(*model, scope);
    EXPECT_EQ(got, want);

    // Everything the forward touched was allocated through the backend: the sequence state to the byte, scratch,
    // weight vectors (and the repacked matrices); the weights were mapped through it; the compute went through it.
    models::SequenceState st(model->backend(), model->state_shape(), 32, ops::KvType::kF16);
    EXPECT_EQ(r.allocated[BufferKind::kState], 2 * st.bytes());  // run_model's state and this one
    EXPECT_GT(r.allocated[BufferKind::kScratch], 0u);
    EXPECT_GT(r.allocated[BufferKind::kWeights], 0u);
    EXPECT_GT(r.calls["map_weights"], 0);
    EXPECT_EQ(r.calls["repack_into"] > 0, scope == models::RepackScope::kAll);
    for (const char* op : {"matmul", "get_rows", "rms_norm", "add", "gather_rows"}) EXPECT_GT(r.calls[op], 0) << op;
    const auto& info = model->info();
    if (info.n_expert > 0) EXPECT_GT(r.calls["swiglu_ffns"], 0);
    else EXPECT_GT(r.calls["swiglu"], 0);
    EXPECT_GT(r.calls["gated_delta_rule"], 0);
    EXPECT_GT(r.calls["attention_causal"], 0);
  }
}

// One file per architecture the registry runs: qwen35moe, qwen35 (dense FFN), qwen3next (grouped heads, fused ba).
INSTANTIATE_TEST_SUITE_P(Archs, BackendSeam,
                         ::testing::Values("q35-ratio.q8_0.gguf", "q35-dense.q8_0.gguf", "q35-next.q8_0.gguf"),
                         [](const auto& info) {
                           std::string s = info.param.substr(0, info.param.find(".gguf"));
                           for (char& c : s)
                             if (c == '-' || c == '.') c = '_';
                           return s;
                         });
