// quant kernels: every (weight type x ISA) gemm against its scalar _ref, the _ref against an independent
// float64 computation (a local dequantizer written from ggml's dequantize_row_* loops), activation
// quantizers byte-identical across ISAs, and determinism across n_tok, row ranges and thread counts.
// Every test runs on each variant of tests/isa_variant.h: ref, avx2, avx512_native and avx512_simde (the AVX-512
// source through SIMDe, so it is checked on any AVX2 host); variants the host lacks are skipped with the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/parallel.h"
#include "isa_variant.h"
#include "quant/blocks.h"
#include "quant/kernels.h"

using namespace tern;
using namespace tern::quant;
using tern::test::IsaVariant;

namespace {

const Type kTypes[] = {Type::F32,  Type::F16,  Type::BF16, Type::Q4_0, Type::Q4_1,   Type::Q5_0,
                       Type::Q5_1, Type::Q8_0, Type::Q2_K, Type::Q3_K, Type::Q4_K,   Type::Q5_K,
                       Type::Q6_K, Type::IQ4_NL, Type::IQ4_XS};

bool is_float(Type t) { return t == Type::F32 || t == Type::F16 || t == Type::BF16; }

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// ---- random weights: random block bytes, then every fp16 scale set to a sane value -------------------------
void put_half(uint8_t* blk, size_t off, float v) {
  const uint16_t h = fp32_to_fp16(v);
  std::memcpy(blk + off, &h, 2);
}

std::vector<uint8_t> random_weights(Type t, int64_t n_rows, int64_t n_in, std::mt19937& rng) {
  const TypeTraits& tt = traits(t);
  const size_t rs = row_size(tt, n_in);
  std::vector<uint8_t> w(rs * n_rows);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  if (is_float(t)) {
    for (int64_t i = 0; i < n_rows * n_in; ++i) {
      const float v = nd(rng);
      if (t == Type::F32) std::memcpy(&w[4 * i], &v, 4);
      const uint16_t h = t == Type::F16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
      if (t != Type::F32) std::memcpy(&w[2 * i], &h, 2);
    }
    return w;
  }
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> mag(0.002f, 0.02f);
  auto scale = [&] { return (byte(rng) & 1 ? -1.0f : 1.0f) * mag(rng); };
  for (auto& b : w) b = static_cast<uint8_t>(byte(rng));
  for (size_t off = 0; off < w.size(); off += tt.type_size) {
    uint8_t* blk = &w[off];
    switch (t) {
      case Type::Q4_1: case Type::Q5_1: case Type::Q4_K: case Type::Q5_K:
        put_half(blk, 0, scale()), put_half(blk, 2, scale()); break;
      case Type::Q2_K:
        put_half(blk, offsetof(BlockQ2_K, d), scale()), put_half(blk, offsetof(BlockQ2_K, dmin), scale()); break;
      case Type::Q3_K: put_half(blk, offsetof(BlockQ3_K, d), scale()); break;
      case Type::Q6_K: put_half(blk, offsetof(BlockQ6_K, d), scale()); break;
      default: put_half(blk, 0, scale()); break;  // Q4_0 Q5_0 Q8_0 IQ4_NL IQ4_XS: d first
    }
  }
  return w;
}

std::vector<float> random_acts(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = nd(rng);
  return x;
}

// ---- independent float64 dequantizers, following ggml's dequantize_row_* loop structure ------------------
double h2d(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

void deq_legacy(Type t, const uint8_t* b, double* y) {
  const double d = h2d(b);
  const uint8_t* qs = b + (t == Type::Q4_1 ? 4 : t == Type::Q5_0 ? 6 : t == Type::Q5_1 ? 8 : 2);
  const double m = (t == Type::Q4_1 || t == Type::Q5_1) ? h2d(b + 2) : 0.0;
  uint32_t qh = 0;
  if (t == Type::Q5_0) std::memcpy(&qh, b + 2, 4);
  if (t == Type::Q5_1) std::memcpy(&qh, b + 4, 4);
  if (t == Type::Q8_0) {
    for (int j = 0; j < 32; ++j) y[j] = d * static_cast<int8_t>(b[2 + j]);
    return;
  }
  for (int j = 0; j < 16; ++j) {
    int x0 = qs[j] & 0xF, x1 = qs[j] >> 4;
    if (t == Type::Q5_0 || t == Type::Q5_1) x0 |= ((qh >> j) << 4) & 0x10, x1 |= (qh >> (j + 12)) & 0x10;
    if (t == Type::Q4_0) x0 -= 8, x1 -= 8;
    if (t == Type::Q5_0) x0 -= 16, x1 -= 16;
    if (t == Type::IQ4_NL) {
      y[j] = d * kValuesIq4nl[x0], y[j + 16] = d * kValuesIq4nl[x1];
    } else {
      y[j] = d * x0 + m, y[j + 16] = d * x1 + m;
    }
  }
}

void get_scale_min(int j, const uint8_t* q, int* d, int* m) {
  if (j < 4) {
    *d = q[j] & 63, *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void deq_q2_k(const BlockQ2_K& x, double* y) {
  const double d = fp16_to_fp32(x.d), mn = fp16_to_fp32(x.dmin);
  const uint8_t* q = x.qs;
  int is = 0;
  for (int n = 0; n < 256; n += 128, q += 32)
    for (int shift = 0; shift < 8; shift += 2)
      for (int half = 0; half < 2; ++half) {
        const uint8_t sc = x.scales[is++];
        for (int l = 0; l < 16; ++l) *y++ = d * (sc & 0xF) * ((q[l + 16 * half] >> shift) & 3) - mn * (sc >> 4);
      }
}

void deq_q3_k(const BlockQ3_K& x, double* y) {
  int sc[16];  // 6-bit scales: low 4 bits from bytes 0-7, high 2 bits from bytes 8-11 (ggml's kmask unpack)
  for (int j = 0; j < 16; ++j) {
    const int lo = (x.scales[j % 8] >> (4 * (j / 8))) & 0xF;
    sc[j] = (lo | (((x.scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
  }
  const double d = fp16_to_fp32(x.d);
  const uint8_t* q = x.qs;
  uint8_t m = 1;
  int is = 0;
  for (int n = 0; n < 256; n += 128, q += 32)
    for (int shift = 0; shift < 8; shift += 2, m <<= 1)
      for (int half = 0; half < 2; ++half) {
        const double dl = d * sc[is++];
        for (int l = 16 * half; l < 16 * half + 16; ++l)
          *y++ = dl * (((q[l] >> shift) & 3) - ((x.hmask[l] & m) ? 0 : 4));
      }
}

void deq_q45_k(const uint8_t* scales, uint16_t dh, uint16_t dminh, const uint8_t* ql, const uint8_t* qh,
               double* y) {
  const double d = fp16_to_fp32(dh), mn = fp16_to_fp32(dminh);
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0, is = 0; j < 256; j += 64, ql += 32, is += 2, u1 <<= 2, u2 <<= 2) {
    int sc, m;
    get_scale_min(is, scales, &sc, &m);
    for (int l = 0; l < 32; ++l) *y++ = d * sc * ((ql[l] & 0xF) + (qh && (qh[l] & u1) ? 16 : 0)) - mn * m;
    get_scale_min(is + 1, scales, &sc, &m);
    for (int l = 0; l < 32; ++l) *y++ = d * sc * ((ql[l] >> 4) + (qh && (qh[l] & u2) ? 16 : 0)) - mn * m;
  }
}

void deq_q6_k(const BlockQ6_K& x, double* y) {
  const double d = fp16_to_fp32(x.d);
  const uint8_t *ql = x.ql, *qh = x.qh;
  const int8_t* sc = x.scales;
  for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8)
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      y[l] = d * sc[is] * (((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
      y[l + 32] = d * sc[is + 2] * (((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
      y[l + 64] = d * sc[is + 4] * (((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
      y[l + 96] = d * sc[is + 6] * (((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
    }
}

void deq_iq4_xs(const BlockIQ4_XS& x, double* y) {
  const double d = fp16_to_fp32(x.d);
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const int ls = ((x.scales_l[ib / 2] >> 4 * (ib % 2)) & 0xF) | (((x.scales_h >> 2 * ib) & 3) << 4);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * (ls - 32) * kValuesIq4nl[x.qs[16 * ib + j] & 0xF];
      y[j + 16] = d * (ls - 32) * kValuesIq4nl[x.qs[16 * ib + j] >> 4];
    }
  }
}

std::vector<double> dequant_row(Type t, const uint8_t* row, int64_t n) {
  std::vector<double> y(n);
  const TypeTraits& tt = traits(t);
  for (int64_t b = 0; b < n / tt.block_size; ++b) {
    const uint8_t* blk = row + b * tt.type_size;
    double* yb = y.data() + b * tt.block_size;
    switch (t) {
      case Type::F32: { float f; std::memcpy(&f, blk, 4); *yb = f; break; }
      case Type::F16: *yb = h2d(blk); break;
      case Type::BF16: { uint16_t h; std::memcpy(&h, blk, 2); *yb = bf16_to_fp32(h); break; }
      case Type::Q2_K: deq_q2_k(*reinterpret_cast<const BlockQ2_K*>(blk), yb); break;
      case Type::Q3_K: deq_q3_k(*reinterpret_cast<const BlockQ3_K*>(blk), yb); break;
      case Type::Q4_K: { auto& x = *reinterpret_cast<const BlockQ4_K*>(blk); deq_q45_k(x.scales, x.d, x.dmin, x.qs, nullptr, yb); break; }
      case Type::Q5_K: { auto& x = *reinterpret_cast<const BlockQ5_K*>(blk); deq_q45_k(x.scales, x.d, x.dmin, x.qs, x.qh, yb); break; }
      case Type::Q6_K: deq_q6_k(*reinterpret_cast<const BlockQ6_K*>(blk), yb); break;
      case Type::IQ4_XS: deq_iq4_xs(*reinterpret_cast<const BlockIQ4_XS*>(blk), yb); break;
      default: deq_legacy(t, blk, yb); break;
    }
  }
  return y;
}

// Activation values as the kernels see them (q*d), plus per-32 stored sums s for Q8_1.
struct DeqAct {
  std::vector<double> x, s;  // s: Q8_1 only, one per 32-block
};
DeqAct dequant_act(Type w, const uint8_t* xq, int64_t n) {
  DeqAct r;
  r.x.resize(n);
  switch (act_type(w)) {
    case Type::F32: for (int64_t i = 0; i < n; ++i) { float f; std::memcpy(&f, xq + 4 * i, 4); r.x[i] = f; } break;
    case Type::Q8_0: {
      auto* b = reinterpret_cast<const BlockQ8_0*>(xq);
      for (int64_t i = 0; i < n; ++i) r.x[i] = double(fp16_to_fp32(b[i / 32].d)) * b[i / 32].qs[i % 32];
      break;
    }
    case Type::Q8_1: {
      auto* b = reinterpret_cast<const BlockQ8_1*>(xq);
      for (int64_t i = 0; i < n; ++i) r.x[i] = double(fp16_to_fp32(b[i / 32].d)) * b[i / 32].qs[i % 32];
      for (int64_t k = 0; k < n / 32; ++k) r.s.push_back(fp16_to_fp32(b[k].s));
      break;
    }
    default: {
      auto* b = reinterpret_cast<const BlockQ8_K*>(xq);
      for (int64_t i = 0; i < n; ++i) r.x[i] = double(b[i / 256].d) * b[i / 256].qs[i % 256];
    }
  }
  return r;
}

// ---- fixture ------------------------------------------------------------------------------------------------
struct Problem {
  Type t;
  int64_t n_out, n_in, n_tok;
  std::vector<uint8_t> w, xq;
  std::vector<float> x;
  size_t w_stride, x_stride;
};

Problem make_problem(Type t, int64_t n_out, int64_t n_in, int64_t n_tok, uint32_t seed) {
  std::mt19937 rng(seed);
  Problem p{t, n_out, n_in, n_tok, {}, {}, {}, 0, 0};
  p.w = random_weights(t, n_out, n_in, rng);
  p.w_stride = row_size(traits(t), n_in);
  p.x = random_acts(n_tok * n_in, rng);
  p.x_stride = act_row_bytes(t, n_in);
  p.xq.resize(p.x_stride * n_tok);
  for (int64_t k = 0; k < n_tok; ++k) quantize_act(t, &p.x[k * n_in], &p.xq[k * p.x_stride], n_in, Isa::kRef);
  return p;
}

constexpr float kGuard = -12345.678f;

// y laid out with ldy = n_out + 3 and 7 extra floats after the end, all prefilled with kGuard.
std::vector<float> run_gemm(const Problem& p, Isa isa, int64_t r0, int64_t r1, int64_t ldy) {
  std::vector<float> y(ldy * p.n_tok + 7, kGuard);
  gemm(p.t, p.w.data(), p.w_stride, p.xq.data(), p.x_stride, p.n_in, r0, r1, p.n_tok, y.data(), ldy, isa);
  return y;
}

std::vector<int64_t> n_in_cases(Type t) {
  if (is_float(t)) return {1, 7, 16, 37, 256 + 5};
  const int64_t bs = traits(t).block_size;
  return {bs, 3 * bs, bs == 32 ? 2048 : 1024};
}

using Param = std::tuple<Type, IsaVariant>;
std::string param_name(const testing::TestParamInfo<Param>& info) {
  return std::string(type_name(std::get<0>(info.param))) + "_" + tern::test::variant_name(std::get<1>(info.param));
}

// isa_ is what the tests pass to the kernels; for avx512_simde it is kAvx512 with the dispatch routed to the twin.
class KernelTest : public testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    type_ = std::get<0>(GetParam());
    const IsaVariant v = std::get<1>(GetParam());
    isa_ = v.isa;
    if (const std::string why = tern::test::variant_unavailable(v); !why.empty()) GTEST_SKIP() << why;
    variant_.emplace(v);
  }
  void TearDown() override { variant_.reset(); }
  Type type_;
  Isa isa_;
  std::optional<tern::test::ScopedIsaVariant> variant_;
};

// The kernel of each ISA against the ref. Quantized types: bit-exact (integer block sums are exact and the
// SIMD kernels keep the ref's float order). Float types: |diff| <= 1e-5 * sum|w*x| (float32 sums reassociated
// over <= 261 terms: bound ~ n*eps = 1.6e-5 worst case, far less in practice).
TEST_P(KernelTest, MatchesRef) {
  for (int64_t n_in : n_in_cases(type_))
    for (int64_t n_tok : {1, 2, 3, 8, 17}) {
      SCOPED_TRACE("n_in " + std::to_string(n_in) + " n_tok " + std::to_string(n_tok));
      const int64_t n_out = 13, ldy = n_out + 3;
      const Problem p = make_problem(type_, n_out, n_in, n_tok, 1000 + static_cast<uint32_t>(n_in * 31 + n_tok));
      const std::vector<float> ref = run_gemm(p, Isa::kRef, 0, n_out, ldy);
      const std::vector<float> got = run_gemm(p, isa_, 0, n_out, ldy);
      for (size_t k = 0; k < got.size(); ++k) {
        const int64_t t = static_cast<int64_t>(k) / ldy, i = static_cast<int64_t>(k) % ldy;
        if (t >= n_tok || i >= n_out) {  // guard: ldy gap and tail untouched
          ASSERT_EQ(bits(got[k]), bits(kGuard)) << "wrote outside y at " << k;
          continue;
        }
        ASSERT_TRUE(std::isfinite(got[k])) << "t " << t << " row " << i;
        if (!is_float(type_)) {
          ASSERT_EQ(bits(got[k]), bits(ref[k])) << "t " << t << " row " << i << ": " << got[k] << " vs " << ref[k];
        } else {
          const std::vector<double> w = dequant_row(type_, &p.w[i * p.w_stride], n_in);
          double norm = 0;
          for (int64_t j = 0; j < n_in; ++j) norm += std::fabs(w[j] * p.x[t * n_in + j]);
          ASSERT_NEAR(got[k], ref[k], 1e-5 * norm) << "t " << t << " row " << i;
        }
      }
    }
}

// Determinism: a token's outputs are bit-identical alone (n_tok = 1), in pairs (n_tok = 2: kernels may take two
// rows at once for one or two tokens), in a batch of 17, for any split of the output rows (odd splits leave single
// rows), and through matmul at 1, 2 and 3 threads.
TEST_P(KernelTest, DeterministicAcrossBatchRowsAndThreads) {
  const int64_t n_in = is_float(type_) ? 100 : 2 * traits(type_).block_size * (traits(type_).block_size == 32 ? 4 : 1);
  const int64_t n_out = 37, n_tok = 17;
  const Problem p = make_problem(type_, n_out, n_in, n_tok, 77);
  const std::vector<float> batch = run_gemm(p, isa_, 0, n_out, n_out);
  for (int64_t t = 0; t < n_tok; ++t) {
    std::vector<float> one(n_out, kGuard);
    gemm(type_, p.w.data(), p.w_stride, &p.xq[t * p.x_stride], p.x_stride, n_in, 0, 5, 1, one.data(), n_out, isa_);
    gemm(type_, p.w.data(), p.w_stride, &p.xq[t * p.x_stride], p.x_stride, n_in, 5, n_out, 1, one.data(), n_out, isa_);
    for (int64_t i = 0; i < n_out; ++i) ASSERT_EQ(bits(one[i]), bits(batch[t * n_out + i])) << "t " << t << " row " << i;
  }
  for (int64_t t = 0; t + 1 < n_tok; t += 2) {
    std::vector<float> two(2 * n_out, kGuard);
    gemm(type_, p.w.data(), p.w_stride, &p.xq[t * p.x_stride], p.x_stride, n_in, 0, 6, 2, two.data(), n_out, isa_);
    gemm(type_, p.w.data(), p.w_stride, &p.xq[t * p.x_stride], p.x_stride, n_in, 6, 11, 2, two.data(), n_out, isa_);
    gemm(type_, p.w.data(), p.w_stride, &p.xq[t * p.x_stride], p.x_stride, n_in, 11, n_out, 2, two.data(), n_out,
         isa_);
    for (int64_t k = 0; k < 2 * n_out; ++k)
      ASSERT_EQ(bits(two[k]), bits(batch[t * n_out + k])) << "pair at t " << t << ", element " << k;
  }
  const int saved = n_threads();
  for (int threads : {1, 2, 3}) {
    set_n_threads(threads);
    std::vector<float> y(n_out * n_tok, kGuard);
    matmul(type_, p.w.data(), p.w_stride, n_out, n_in, p.x.data(), n_tok, y.data(), isa_);
    for (int64_t k = 0; k < n_out * n_tok; ++k) ASSERT_EQ(bits(y[k]), bits(batch[k])) << "threads " << threads << " at " << k;
  }
  set_n_threads(saved);
}

// Activation quantizer: the same bytes as the ref on every ISA (random rows and an all-zero row).
TEST_P(KernelTest, ActQuantizerMatchesRefBytes) {
  const int64_t n = 4 * traits(type_).block_size * (is_float(type_) ? 64 : 1);
  std::mt19937 rng(5);
  std::vector<float> x = random_acts(n, rng);
  for (int64_t i = 0; i < n / 4; ++i) x[i] = 0.0f;  // a zero block (d = 0)
  const size_t rb = act_row_bytes(type_, n);
  std::vector<uint8_t> a(rb + 16, 0xAB), b(rb + 16, 0xAB);
  quantize_act(type_, x.data(), a.data(), n, Isa::kRef);
  quantize_act(type_, x.data(), b.data(), n, isa_);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size()));
  for (size_t k = rb; k < b.size(); ++k) ASSERT_EQ(b[k], 0xAB) << "wrote past the row";
}

INSTANTIATE_TEST_SUITE_P(AllTypes, KernelTest,
                         testing::Combine(testing::ValuesIn(kTypes), testing::ValuesIn(tern::test::kIsaVariants)),
                         param_name);

class RefTest : public testing::TestWithParam<Type> {};

// The ref itself against float64: sum over j of dequant(w)[j] * dequant(xq)[j] (Q4_1/Q5_1: the min part uses
// the activation's stored per-block sum s, as the Q8_1 format defines). Tolerance 1e-5 * sum|w*x|: float32
// steps per block (<= 64 blocks + an 8-lane tree, ~6e-8 each) bound the error near 4e-6 relative.
TEST_P(RefTest, MatchesFloat64) {
  const Type t = GetParam();
  for (int64_t n_in : n_in_cases(t)) {
    const int64_t n_out = 5, n_tok = 3;
    const Problem p = make_problem(t, n_out, n_in, n_tok, 4242 + static_cast<uint32_t>(n_in));
    const std::vector<float> y = run_gemm(p, Isa::kRef, 0, n_out, n_out);
    const bool has_min = t == Type::Q4_1 || t == Type::Q5_1;
    for (int64_t tok = 0; tok < n_tok; ++tok) {
      const DeqAct xa = dequant_act(t, &p.xq[tok * p.x_stride], n_in);
      for (int64_t i = 0; i < n_out; ++i) {
        const std::vector<double> w = dequant_row(t, &p.w[i * p.w_stride], n_in);
        double expect = 0, norm = 0;
        for (int64_t j = 0; j < n_in; ++j) {
          double wj = w[j];
          if (has_min) wj -= h2d(&p.w[i * p.w_stride + (j / 32) * traits(t).type_size + 2]);  // d*q part only
          expect += wj * xa.x[j], norm += std::fabs(w[j] * xa.x[j]);
        }
        if (has_min)
          for (int64_t b = 0; b < n_in / 32; ++b) {
            const double m = h2d(&p.w[i * p.w_stride + b * traits(t).type_size + 2]);
            expect += m * xa.s[b], norm += std::fabs(m * xa.s[b]);
          }
        EXPECT_NEAR(y[tok * n_out + i], expect, 1e-5 * norm + 1e-30) << "n_in " << n_in << " t " << tok << " row " << i;
      }
    }
  }
}

// The activation quantizer against its definition: |q*d - x| <= d/2 (plus float rounding of x/d), and the
// stored sums (Q8_1 s, Q8_K bsums) equal the sums of q.
TEST_P(RefTest, ActQuantizerDefinition) {
  const Type t = GetParam();
  if (is_float(t)) GTEST_SKIP() << "float weights read f32 activations unchanged";
  const int64_t n = 512;
  std::mt19937 rng(9);
  const std::vector<float> x = random_acts(n, rng);
  std::vector<uint8_t> xq(act_row_bytes(t, n));
  quantize_act(t, x.data(), xq.data(), n, Isa::kRef);
  const int64_t bs = act_type(t) == Type::Q8_K ? 256 : 32;
  for (int64_t b = 0; b < n / bs; ++b) {
    double amax = 0;
    for (int64_t j = 0; j < bs; ++j) amax = std::max(amax, std::fabs(double(x[b * bs + j])));
    const double d = amax / 127.0;
    for (int64_t j = 0; j < bs; ++j) {
      int q;
      if (act_type(t) == Type::Q8_K) {
        q = reinterpret_cast<const BlockQ8_K*>(xq.data())[b].qs[j];
      } else {
        q = reinterpret_cast<const int8_t*>(xq.data() + b * traits(act_type(t)).type_size + (act_type(t) == Type::Q8_1 ? 4 : 2))[j];
      }
      ASSERT_LE(std::abs(q), 127);
      ASSERT_LE(std::fabs(q * d - x[b * bs + j]), 0.5 * d * (1 + 1e-6)) << "block " << b << " j " << j;
    }
  }
  if (act_type(t) == Type::Q8_K) {
    auto* blk = reinterpret_cast<const BlockQ8_K*>(xq.data());
    for (int64_t b = 0; b < n / 256; ++b)
      for (int g = 0; g < 16; ++g) {
        int s = 0;
        for (int k = 0; k < 16; ++k) s += blk[b].qs[16 * g + k];
        EXPECT_EQ(blk[b].bsums[g], s);
      }
  }
  if (act_type(t) == Type::Q8_1) {
    auto* blk = reinterpret_cast<const BlockQ8_1*>(xq.data());
    for (int64_t b = 0; b < n / 32; ++b) {
      int s = 0;
      for (int k = 0; k < 32; ++k) s += blk[b].qs[k];
      // s is stored as fp16: relative rounding 2^-11
      EXPECT_NEAR(fp16_to_fp32(blk[b].s), fp16_to_fp32(blk[b].d) * s, std::fabs(fp16_to_fp32(blk[b].d) * s) * 1e-3 + 1e-6);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, RefTest, testing::ValuesIn(kTypes),
                         [](const testing::TestParamInfo<Type>& i) { return std::string(type_name(i.param)); });

// The SIMDe twin against the native AVX-512 unit on a host that has both: bit-identical outputs and activation
// bytes for every type, float types included (the twin's reductions follow Intel's pseudo-code, which is also
// the order of GCC's intrinsics), so the twin's passes elsewhere stand for the native unit's.
class SimdeTwinTest : public testing::TestWithParam<Type> {};

TEST_P(SimdeTwinTest, MatchesNativeAvx512) {
  const Type t = GetParam();
  const IsaVariant native{Isa::kAvx512, false}, twin{Isa::kAvx512, true};
  for (const IsaVariant v : {native, twin})
    if (const std::string why = tern::test::variant_unavailable(v); !why.empty()) GTEST_SKIP() << why;
  for (int64_t n_in : n_in_cases(t)) {
    SCOPED_TRACE("n_in " + std::to_string(n_in));
    const int64_t n_out = 11, n_tok = 6;
    const Problem p = make_problem(t, n_out, n_in, n_tok, 31 + static_cast<uint32_t>(n_in));
    const size_t rb = act_row_bytes(t, n_in);
    std::vector<uint8_t> xq_native(rb), xq_twin(rb);
    const std::vector<float> y_native = run_gemm(p, Isa::kAvx512, 0, n_out, n_out);
    quantize_act(t, p.x.data(), xq_native.data(), n_in, Isa::kAvx512);
    std::vector<float> y_twin;
    {
      const tern::test::ScopedIsaVariant scope(twin);
      y_twin = run_gemm(p, Isa::kAvx512, 0, n_out, n_out);
      quantize_act(t, p.x.data(), xq_twin.data(), n_in, Isa::kAvx512);
    }
    for (size_t k = 0; k < y_native.size(); ++k)
      ASSERT_EQ(bits(y_twin[k]), bits(y_native[k])) << "at " << k << ": " << y_twin[k] << " vs " << y_native[k];
    EXPECT_EQ(0, std::memcmp(xq_native.data(), xq_twin.data(), rb));
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, SimdeTwinTest, testing::ValuesIn(kTypes),
                         [](const testing::TestParamInfo<Type>& i) { return std::string(type_name(i.param)); });

TEST(Kernels, BadInputsThrow) {
  std::vector<uint8_t> w(1024);
  std::vector<float> x(64), y(64);
  EXPECT_THROW(matmul(Type::Q4_0, w.data(), 18, 1, 33, x.data(), 1, y.data(), Isa::kRef), Error);  // 33 % 32
  EXPECT_THROW(matmul(Type::Q8_K, w.data(), 292, 1, 256, x.data(), 1, y.data(), Isa::kRef), Error);  // no kernels
  EXPECT_THROW(act_type(Type::IQ2_XXS), Error);
  if (!isa_supported(Isa::kAvx512)) {
    EXPECT_THROW(matmul(Type::F32, w.data(), 4, 1, 1, x.data(), 1, y.data(), Isa::kAvx512), Error);
  }
}

TEST(Kernels, ActiveIsaIsBest) { EXPECT_EQ(active_isa(), best_isa()); }

}  // namespace
