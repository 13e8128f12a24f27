// Repacked (x8) weights: repack/unpack is an exact round trip; the _ref gemm against an independent float64
// dot of the file-layout blocks; every ISA's kernel bit-identical to the _ref for any token count, group range
// and tail; matmul_repacked independent of the thread count; activation bytes identical across ISAs.
// ISAs the host lacks are skipped with the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/parallel.h"
#include "quant/blocks.h"
#include "quant/convert.h"
#include "quant/kernels.h"
#include "quant/repack.h"
#include "isa_variant.h"

using namespace tern;
using namespace tern::quant;

namespace {

const Type kTypes[] = {Type::Q4_0, Type::Q4_1, Type::Q5_0, Type::Q5_1, Type::Q8_0, Type::IQ4_NL,
                       Type::Q2_K, Type::Q3_K, Type::Q4_K, Type::Q5_K, Type::Q6_K, Type::IQ4_XS};

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Random block bytes with every fp16 scale replaced by a sane value (random bits would give inf/NaN scales).
std::vector<uint8_t> random_rows(Type t, int64_t n_rows, int64_t n_in, std::mt19937& rng) {
  const TypeTraits& tt = traits(t);
  std::vector<uint8_t> w(row_size(tt, n_in) * n_rows);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> mag(0.002f, 0.02f);
  for (auto& b : w) b = static_cast<uint8_t>(byte(rng));
  auto put = [&](uint8_t* p, float v) {
    const uint16_t h = fp32_to_fp16((byte(rng) & 1 ? -1.0f : 1.0f) * v);
    std::memcpy(p, &h, 2);
  };
  for (size_t off = 0; off < w.size(); off += tt.type_size) {
    uint8_t* blk = &w[off];
    switch (t) {
      case Type::Q4_1: case Type::Q5_1: case Type::Q4_K: case Type::Q5_K: put(blk, mag(rng)), put(blk + 2, mag(rng)); break;
      case Type::Q2_K: put(blk + offsetof(BlockQ2_K, d), mag(rng)), put(blk + offsetof(BlockQ2_K, dmin), mag(rng)); break;
      case Type::Q3_K: put(blk + offsetof(BlockQ3_K, d), mag(rng)); break;
      case Type::Q6_K: put(blk + offsetof(BlockQ6_K, d), mag(rng)); break;
      default: put(blk, mag(rng)); break;
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

// Activation row (repacked format) back to floats: d * q.
std::vector<double> act_values(Type w, const uint8_t* xq, int64_t n) {
  std::vector<double> v(n);
  if (act_type(w) == Type::Q8_K) {
    const auto* b = reinterpret_cast<const BlockQ8_K*>(xq);
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(b[i / 256].d) * b[i / 256].qs[i % 256];
  } else {
    const auto* b = reinterpret_cast<const BlockQ8_0S*>(xq);
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(b[i / 32].d) * b[i / 32].qs[i % 32];
  }
  return v;
}

struct Case {
  Type t;
  int64_t n_rows, n_in;
};

std::vector<Case> cases() {
  std::vector<Case> c;
  for (Type t : kTypes) {
    const int64_t bs = traits(t).block_size;
    for (int64_t rows : {1, 7, 8, 9, 24, 37})
      for (int64_t blocks : {1, 3, 8}) c.push_back({t, rows, bs * blocks});
  }
  return c;
}

std::string label(const Case& c) {
  return std::string(type_name(c.t)) + " rows " + std::to_string(c.n_rows) + " n_in " + std::to_string(c.n_in);
}

TEST(Repack, RoundTripIsExact) {
  std::mt19937 rng(1);
  for (const Case& c : cases()) {
    const auto w = random_rows(c.t, c.n_rows, c.n_in, rng);
    const size_t rs = row_size(traits(c.t), c.n_in);
    std::vector<uint8_t> packed(repacked_bytes(c.t, c.n_rows, c.n_in) + 64, 0xA5);
    repack(c.t, w.data(), rs, c.n_rows, c.n_in, packed.data());
    for (size_t i = packed.size() - 64; i < packed.size(); ++i) ASSERT_EQ(packed[i], 0xA5) << label(c) << " guard";
    std::vector<uint8_t> row(rs);
    for (int64_t r = 0; r < c.n_rows; ++r) {
      unpack_row(c.t, packed.data(), c.n_in, r, row.data());
      ASSERT_EQ(0, std::memcmp(row.data(), w.data() + r * rs, rs)) << label(c) << " row " << r;
    }
  }
}

TEST(Repack, SizesMatchLayouts) {
  EXPECT_EQ(repacked_bytes(Type::Q4_0, 8, 64), 8u * 2 * 18);  // same bytes as the file
  EXPECT_EQ(repacked_bytes(Type::Q8_0, 16, 32), 16u * 34);
  EXPECT_EQ(repacked_bytes(Type::Q6_K, 8, 256), 8u * 210);
  EXPECT_EQ(repacked_bytes(Type::Q4_K, 9, 256), 2u * 1184);   // a tail group is padded to 8 rows
  EXPECT_EQ(repacked_bytes(Type::Q5_K, 8, 512), 2u * 1440);
  EXPECT_EQ(repacked_bytes(Type::Q4_1, 8, 32), 8u * 20);       // the 32-blocks: same bytes as the file
  EXPECT_EQ(repacked_bytes(Type::Q5_0, 8, 32), 8u * 22);
  EXPECT_EQ(repacked_bytes(Type::Q5_1, 8, 32), 8u * 24);
  EXPECT_EQ(repacked_bytes(Type::IQ4_NL, 8, 32), 8u * 18);
  EXPECT_EQ(repacked_bytes(Type::Q2_K, 8, 256), 8u * 84);
  EXPECT_EQ(repacked_bytes(Type::Q3_K, 8, 256), 912u);        // 8 x 110 + 32: scales unpacked to one byte
  EXPECT_EQ(repacked_bytes(Type::IQ4_XS, 8, 256), 1104u);     // 8 x 136 + 16: scales unpacked to one byte
  // Every quantized type with kernels has a layout, and each stays within 5% of the file's bytes.
  for (uint32_t id = 0; id < 64; ++id) {
    const auto tt = type_traits(id);
    if (!tt || !tt->compute || tt->type == Type::F32 || tt->type == Type::F16 || tt->type == Type::BF16) continue;
    ASSERT_TRUE(has_repacked(tt->type)) << tt->name;
    EXPECT_LE(repacked_block_bytes(tt->type), 8 * tt->type_size * 105 / 100) << tt->name;
  }
  EXPECT_FALSE(has_repacked(Type::F16));
  EXPECT_FALSE(has_repacked(Type::IQ2_XXS));
  try {
    repacked_bytes(Type::F16, 8, 256);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f16 has no repacked layout (repacked: q4_0 q4_1"), std::string::npos)
        << e.what();
  }
}

// The ref against a float64 dot of the file-layout blocks: both compute sum(w*x) over the same dequantized
// values, so they differ only by the ref's float32 rounding (a few ulps per block step, bounded by
// 1e-5 * sum |w x| + 1e-6).
TEST(Repack, RefMatchesFloat64Dot) {
  std::mt19937 rng(2);
  for (const Case& c : cases()) {
    const auto w = random_rows(c.t, c.n_rows, c.n_in, rng);
    const size_t rs = row_size(traits(c.t), c.n_in);
    std::vector<uint8_t> packed(repacked_bytes(c.t, c.n_rows, c.n_in));
    repack(c.t, w.data(), rs, c.n_rows, c.n_in, packed.data());
    const auto x = random_acts(c.n_in, rng);
    std::vector<uint8_t> xq(repacked_act_row_bytes(c.t, c.n_in));
    quantize_act_repacked(c.t, x.data(), xq.data(), c.n_in, Isa::kRef);
    const auto xv = act_values(c.t, xq.data(), c.n_in);
    const int64_t groups = (c.n_rows + 7) / 8;
    std::vector<float> y(c.n_rows);
    gemm_repacked(c.t, packed.data(), c.n_rows, c.n_in, xq.data(), xq.size(), 0, groups, 1, y.data(), c.n_rows,
                  Isa::kRef);
    std::vector<float> wf(c.n_in);
    for (int64_t r = 0; r < c.n_rows; ++r) {
      dequantize_row(c.t, w.data() + r * rs, wf.data(), c.n_in);
      double exact = 0, mag = 0;
      for (int64_t i = 0; i < c.n_in; ++i) exact += wf[i] * xv[i], mag += std::fabs(wf[i] * xv[i]);
      ASSERT_NEAR(y[r], exact, 1e-5 * mag + 1e-6) << label(c) << " row " << r;
    }
  }
}

// Every ISA gives the ref's bits, for every token count (tiles of 4 and 8 and their remainders), group range and
// tail group; rows outside the range and past n_rows keep their guard value.
// Run per kernel variant: AVX2, native AVX-512, and the AVX-512 source compiled against SIMDe (tests/isa_variant.h).
class RepackIsa : public ::testing::TestWithParam<test::IsaVariant> {};

TEST_P(RepackIsa, BitIdenticalToRef) {
  const test::IsaVariant v = GetParam();
  if (const std::string why = test::variant_unavailable(v); !why.empty()) GTEST_SKIP() << why;
  test::ScopedIsaVariant scope(v);
  const Isa isa = v.isa;
  std::mt19937 rng(3);
  {
    for (const Case& c : cases()) {
      const auto w = random_rows(c.t, c.n_rows, c.n_in, rng);
      const size_t rs = row_size(traits(c.t), c.n_in);
      std::vector<uint8_t> packed(repacked_bytes(c.t, c.n_rows, c.n_in));
      repack(c.t, w.data(), rs, c.n_rows, c.n_in, packed.data());
      const int64_t groups = (c.n_rows + 7) / 8;
      for (int64_t n_tok : {1, 2, 3, 4, 5, 7, 8, 9, 13, 17}) {
        const auto x = random_acts(c.n_in * n_tok, rng);
        const size_t stride = repacked_act_row_bytes(c.t, c.n_in);
        std::vector<uint8_t> xq(stride * n_tok), xq_isa(stride * n_tok);
        for (int64_t t = 0; t < n_tok; ++t) {
          quantize_act_repacked(c.t, x.data() + t * c.n_in, xq.data() + t * stride, c.n_in, Isa::kRef);
          quantize_act_repacked(c.t, x.data() + t * c.n_in, xq_isa.data() + t * stride, c.n_in, isa);
        }
        ASSERT_EQ(xq, xq_isa) << label(c) << " activation bytes differ on " << test::variant_name(v);
        const int64_t ldy = c.n_rows + 3;
        const int64_t g0 = groups > 1 ? 1 : 0;
        std::vector<float> y_ref(ldy * n_tok, -7.0f), y(ldy * n_tok, -7.0f);
        gemm_repacked(c.t, packed.data(), c.n_rows, c.n_in, xq.data(), stride, g0, groups, n_tok, y_ref.data(), ldy,
                      Isa::kRef);
        gemm_repacked(c.t, packed.data(), c.n_rows, c.n_in, xq.data(), stride, g0, groups, n_tok, y.data(), ldy, isa);
        for (int64_t t = 0; t < n_tok; ++t)
          for (int64_t i = 0; i < ldy; ++i) {
            const float a = y_ref[t * ldy + i], b = y[t * ldy + i];
            ASSERT_EQ(bits(a), bits(b)) << label(c) << " " << test::variant_name(v) << " n_tok " << n_tok << " t " << t
                                        << " row " << i << ": " << a << " vs " << b;
            if (i < g0 * 8 || i >= c.n_rows) ASSERT_EQ(b, -7.0f) << "wrote outside its rows: " << i;
            else ASSERT_TRUE(std::isfinite(b));
          }
      }
    }
  }
}

// What the file layout's Q4_1 / Q5_1 path may differ by beyond rounding: it takes the min term m * sum(x) from
// Q8_1's s = d * sum(q) stored as fp16 (relative error <= 2^-11), where the repacked path uses the exact
// integer sum. Bound: sum over blocks of |m| * |s| * 2^-11. Zero for the other types.
double min_term_slack(Type t, const uint8_t* w_row, const float* x, int64_t n_in) {
  if (t != Type::Q4_1 && t != Type::Q5_1) return 0.0;
  std::vector<BlockQ8_1> xq(n_in / 32);
  quantize_act(t, x, xq.data(), n_in, Isa::kRef);
  double slack = 0.0;
  for (int64_t b = 0; b < n_in / 32; ++b) {
    uint16_t m;  // both blocks start with d, m
    std::memcpy(&m, w_row + b * traits(t).type_size + 2, 2);
    slack += std::fabs(fp16_to_fp32(m)) * std::fabs(fp16_to_fp32(xq[b].s)) * 0x1p-11;
  }
  return slack;
}

INSTANTIATE_TEST_SUITE_P(Variants, RepackIsa, ::testing::Values(test::kIsaVariants[1], test::kIsaVariants[2],
                                                                  test::kIsaVariants[3]),
                         [](const auto& info) { return test::variant_name(info.param); });

// The same product through the file layout's kernels agrees to float rounding (different reduction order; for
// Q4_1 / Q5_1 also min_term_slack), so repacking changes no model output beyond its tolerance.
TEST(Repack, AgreesWithFileLayoutGemm) {
  std::mt19937 rng(4);
  const Isa isa = best_isa();
  for (Type t : kTypes) {
    const int64_t n_rows = 40, n_in = 1024, n_tok = 3;
    const auto w = random_rows(t, n_rows, n_in, rng);
    const size_t rs = row_size(traits(t), n_in);
    std::vector<uint8_t> packed(repacked_bytes(t, n_rows, n_in));
    repack(t, w.data(), rs, n_rows, n_in, packed.data());
    const auto x = random_acts(n_in * n_tok, rng);
    std::vector<float> y_file(n_rows * n_tok), y_x8(n_rows * n_tok);
    matmul(t, w.data(), rs, n_rows, n_in, x.data(), n_tok, y_file.data(), isa);
    matmul_repacked(t, packed.data(), n_rows, n_in, x.data(), n_tok, y_x8.data(), isa);
    double mag = 0;
    for (float v : y_file) mag = std::max(mag, std::fabs(static_cast<double>(v)));
    for (size_t i = 0; i < y_file.size(); ++i) {
      const int64_t tok = static_cast<int64_t>(i) / n_rows, r = static_cast<int64_t>(i) % n_rows;
      const double slack = min_term_slack(t, w.data() + r * rs, x.data() + tok * n_in, n_in);
      ASSERT_NEAR(y_x8[i], y_file[i], 1e-5 * mag + slack) << type_name(t) << " " << i;
    }
  }
}

// A subset of a batch's rows (x_rows) into a chunk's own buffer (y_col0) gives exactly the plain call on the
// gathered rows, for both layouts and every ISA the host has.
TEST(Repack, RowIndicesAndColumnOffset) {
  std::mt19937 rng(6);
  for (Type t : kTypes)
    for (const test::IsaVariant v : test::kIsaVariants) {
      if (!test::variant_unavailable(v).empty()) continue;
      test::ScopedIsaVariant scope(v);
      const Isa isa = v.isa;
      const int64_t n_rows = 40, n_in = 512, n_batch = 7;
      const int32_t pick[] = {5, 0, 3, 3, 6};
      const int64_t m = 5;
      const auto w = random_rows(t, n_rows, n_in, rng);
      const size_t rs = row_size(traits(t), n_in);
      std::vector<uint8_t> packed(repacked_bytes(t, n_rows, n_in));
      repack(t, w.data(), rs, n_rows, n_in, packed.data());
      const auto x = random_acts(n_in * n_batch, rng);
      for (bool x8 : {false, true}) {
        const size_t stride = x8 ? repacked_act_row_bytes(t, n_in) : act_row_bytes(t, n_in);
        std::vector<uint8_t> xq(stride * n_batch), xg(stride * m);
        for (int64_t r = 0; r < n_batch; ++r) {
          if (x8) quantize_act_repacked(t, x.data() + r * n_in, xq.data() + r * stride, n_in, isa);
          else quantize_act(t, x.data() + r * n_in, xq.data() + r * stride, n_in, isa);
        }
        for (int64_t r = 0; r < m; ++r) std::memcpy(xg.data() + r * stride, xq.data() + pick[r] * stride, stride);
        std::vector<float> full(m * n_rows), chunk(m * 16, -1.0f);
        if (x8) {
          gemm_repacked(t, packed.data(), n_rows, n_in, xg.data(), stride, 0, 5, m, full.data(), n_rows, isa);
          gemm_repacked(t, packed.data(), n_rows, n_in, xq.data(), stride, 2, 4, m, chunk.data(), 16, isa, pick, 16);
        } else {
          gemm(t, w.data(), rs, xg.data(), stride, n_in, 0, n_rows, m, full.data(), n_rows, isa);
          gemm(t, w.data(), rs, xq.data(), stride, n_in, 16, 32, m, chunk.data(), 16, isa, pick, 16);
        }
        for (int64_t r = 0; r < m; ++r)
          for (int64_t i = 0; i < 16; ++i)
            ASSERT_EQ(bits(chunk[r * 16 + i]), bits(full[r * n_rows + 16 + i]))
                << type_name(t) << " " << test::variant_name(v) << (x8 ? " x8" : " file") << " token " << r << " row " << i;
      }
    }
}

// Thread count never changes a bit (fixed row chunks, one thread per chunk).
TEST(Repack, MatmulIndependentOfThreads) {
  std::mt19937 rng(5);
  const int saved = n_threads();
  for (Type t : kTypes) {
    const int64_t n_rows = 77, n_in = 512, n_tok = 6;
    const auto w = random_rows(t, n_rows, n_in, rng);
    std::vector<uint8_t> packed(repacked_bytes(t, n_rows, n_in));
    repack(t, w.data(), row_size(traits(t), n_in), n_rows, n_in, packed.data());
    const auto x = random_acts(n_in * n_tok, rng);
    std::vector<float> y1(n_rows * n_tok), y3(n_rows * n_tok), y_single(n_rows);
    set_n_threads(1);
    matmul_repacked(t, packed.data(), n_rows, n_in, x.data(), n_tok, y1.data(), best_isa());
    set_n_threads(3);
    matmul_repacked(t, packed.data(), n_rows, n_in, x.data(), n_tok, y3.data(), best_isa());
    matmul_repacked(t, packed.data(), n_rows, n_in, x.data() + 4 * n_in, 1, y_single.data(), best_isa());
    for (size_t i = 0; i < y1.size(); ++i) ASSERT_EQ(bits(y1[i]), bits(y3[i])) << type_name(t) << " " << i;
    for (int64_t i = 0; i < n_rows; ++i)
      ASSERT_EQ(bits(y_single[i]), bits(y1[4 * n_rows + i])) << type_name(t) << ": token alone vs in a batch";
  }
  set_n_threads(saved);
}

// Tasks of a matrix product (quant::task_rows): whole 16-row chunks, at least ~128 KB of weights' work at one token
// (long runs of a matrix per thread), 16 rows once the tokens make a chunk's work that large.
TEST(Repack, TaskRowsStreamLongRunsAtOneToken) {
  for (size_t rb : {size_t{18}, size_t{144}, size_t{1152}, size_t{2176}, size_t{8192}, size_t{1} << 20})
    for (int64_t n_tok : {1, 2, 4, 16, 512}) {
      const int64_t r = task_rows(rb, n_tok);
      ASSERT_EQ(r % kMatmulRowChunk, 0) << rb << " " << n_tok;
      ASSERT_GE(r * static_cast<int64_t>(rb) * n_tok, static_cast<int64_t>(kTaskStreamBytes)) << rb;
      if (r > kMatmulRowChunk) {  // no larger than it needs to be
        ASSERT_LT((r - kMatmulRowChunk) * static_cast<int64_t>(rb) * n_tok, static_cast<int64_t>(kTaskStreamBytes)) << rb;
      }
    }
  EXPECT_EQ(task_rows(1152, 1), 128);  // a 2048-wide Q4_0 row: 128 rows, 144 KB
  EXPECT_EQ(task_rows(1152, 512), kMatmulRowChunk);
}

// One token over a matrix of several long tasks and a short last one gives the bits of one gemm over all groups,
// at 1 and 3 threads, for every type.
TEST(Repack, OneTokenInLongTasksEqualsOneGemm) {
  std::mt19937 rng(7);
  const int saved = n_threads();
  for (Type t : kTypes) {
    const int64_t n_in = 256, n_tok = 1;
    const int64_t per = task_rows(repacked_bytes(t, kRepackRows, n_in) / kRepackRows, n_tok);
    const int64_t n_rows = 2 * per + 40;
    const auto w = random_rows(t, n_rows, n_in, rng);
    std::vector<uint8_t> packed(repacked_bytes(t, n_rows, n_in));
    repack(t, w.data(), row_size(traits(t), n_in), n_rows, n_in, packed.data());
    const auto x = random_acts(n_in, rng);
    std::vector<uint8_t> xq(repacked_act_row_bytes(t, n_in));
    quantize_act_repacked(t, x.data(), xq.data(), n_in, best_isa());
    std::vector<float> want(n_rows);
    gemm_repacked(t, packed.data(), n_rows, n_in, xq.data(), xq.size(), 0, n_rows / kRepackRows, 1, want.data(), n_rows,
                  best_isa());
    for (int threads : {1, 3}) {
      set_n_threads(threads);
      std::vector<float> y(n_rows, -1.0f);
      matmul_repacked(t, packed.data(), n_rows, n_in, x.data(), n_tok, y.data(), best_isa());
      for (int64_t i = 0; i < n_rows; ++i)
        ASSERT_EQ(bits(y[i]), bits(want[i])) << type_name(t) << " threads " << threads << " row " << i;
    }
  }
  set_n_threads(saved);
}

}  // namespace
