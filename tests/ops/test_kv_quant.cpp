// ops: the quantized KV cache (q8_0 / q4_0 rows, the f16 sink / window shadow) and the Hadamard rotation: stored
// blocks against ggml's reference encoders and decoder (quant::quantize_row_ref, dequantize_row), attention against a float64 reference over the
// values the cache holds, every ISA against the scalar twin, batch == one by one, and rotation alone changing the
// result by rounding only.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "core/parallel.h"
#include "ops/attention.h"
#include "quant/convert.h"
#include "attn_one_by_one.h"
#include "ref.h"

using namespace tern;
using namespace tern::ops;
using namespace tern::ops::test;

namespace {

struct Shape {
  int64_t n_head = 8, n_head_kv = 2, hd = 64, n_ctx = 96;
};

quant::Type qtype(KvType t) { return t == KvType::kQ8_0 ? quant::Type::Q8_0 : quant::Type::Q4_0; }

// One layer's cache of any type; unwritten bytes are 0xff (NaN halves, scale NaN for the block formats).
struct Cache {
  std::vector<uint8_t> k, v;
  std::vector<uint16_t> k16, v16;
  KvCacheView view;
  Cache(const Shape& s, KvType kt, KvType vt, int64_t sink = 0, int64_t window = 0, bool rotate = false) {
    view.k_type = kt;
    view.v_type = vt;
    view.n_head_kv = s.n_head_kv;
    view.n_ctx = s.n_ctx;
    view.head_dim = s.hd;
    const size_t rows = static_cast<size_t>(s.n_head_kv * s.n_ctx);
    k.assign(rows * kv_row_bytes(kt, s.hd), 0xff);
    v.assign(rows * kv_row_bytes(vt, s.hd), 0xff);
    view.k = k.data();
    view.v = v.data();
    if (sink > 0 || window > 0) {
      if (kv_quantized(kt)) {
        k16.assign(rows * s.hd, 0x7e00);
        view.k16 = k16.data();
      }
      if (kv_quantized(vt)) {
        v16.assign(rows * s.hd, 0x7e00);
        view.v16 = v16.data();
      }
      view.sink = sink;
      view.window = window;
    }
    view.rotate = rotate;
  }
  // Row (head g, position p) as the main store decodes it, in double.
  std::vector<double> row(bool is_k, int64_t g, int64_t p) const {
    const KvType t = is_k ? view.k_type : view.v_type;
    const uint8_t* base = (is_k ? k : v).data() + (g * view.n_ctx + p) * kv_row_bytes(t, view.head_dim);
    std::vector<float> f(view.head_dim);
    if (t == KvType::kF32) std::memcpy(f.data(), base, f.size() * 4);
    else if (t == KvType::kF16)
      for (int64_t i = 0; i < view.head_dim; ++i) f[i] = fp16_to_fp32(reinterpret_cast<const uint16_t*>(base)[i]);
    else quant::dequantize_row(qtype(t), base, f.data(), view.head_dim);
    return {f.begin(), f.end()};
  }
  std::vector<double> shadow(bool is_k, int64_t g, int64_t p) const {
    const uint16_t* r = (is_k ? k16 : v16).data() + (g * view.n_ctx + p) * view.head_dim;
    std::vector<double> d(view.head_dim);
    for (int64_t i = 0; i < view.head_dim; ++i) d[i] = fp16_to_fp32(r[i]);
    return d;
  }
  // What a query attending n_pos positions reads at position p.
  std::vector<double> read(bool is_k, int64_t g, int64_t p, int64_t n_pos) const {
    const bool sh = (is_k ? view.k16 : view.v16) != nullptr && (p < view.sink || p >= n_pos - view.window);
    return sh ? shadow(is_k, g, p) : row(is_k, g, p);
  }
};

// Float64 attention of q [T, n_head, hd] at positions pos0 + t over what the cache holds (no rotation).
std::vector<double> attention_double(const std::vector<float>& q, const Cache& c, int64_t T, int64_t pos0,
                                     const Shape& s) {
  const int64_t hd = s.hd, group = s.n_head / s.n_head_kv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<double> out(T * s.n_head * hd, 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < s.n_head; ++h) {
      const int64_t g = h / group, n_pos = pos0 + t + 1;
      std::vector<double> sc(n_pos);
      double mx = -INFINITY, sum = 0.0;
      for (int64_t p = 0; p < n_pos; ++p) {
        const std::vector<double> kr = c.read(true, g, p, n_pos);
        double d = 0.0;
        for (int64_t i = 0; i < hd; ++i) d += q[(t * s.n_head + h) * hd + i] * kr[i];
        sc[p] = d * scale;
        mx = std::max(mx, sc[p]);
      }
      for (auto& x : sc) sum += (x = std::exp(x - mx));
      for (int64_t p = 0; p < n_pos; ++p) {
        const std::vector<double> vr = c.read(false, g, p, n_pos);
        for (int64_t i = 0; i < hd; ++i) out[(t * s.n_head + h) * hd + i] += sc[p] / sum * vr[i];
      }
    }
  return out;
}

const KvType kQuant[] = {KvType::kQ8_0, KvType::kQ4_0};

}  // namespace

TEST(KvQuant, TypeNamesAndRowBytes) {
  for (KvType t : {KvType::kF32, KvType::kF16, KvType::kQ8_0, KvType::kQ4_0}) {
    KvType back;
    ASSERT_TRUE(parse_kv_type(kv_type_name(t), &back));
    EXPECT_EQ(back, t);
  }
  KvType t;
  EXPECT_FALSE(parse_kv_type("q5_0", &t));
  EXPECT_EQ(kv_row_bytes(KvType::kQ8_0, 256), 8 * 34);  // ggml block sizes: 2-byte scale + 32 / 16 bytes
  EXPECT_EQ(kv_row_bytes(KvType::kQ4_0, 256), 8 * 18);
  EXPECT_EQ(kv_row_bytes(KvType::kF16, 256), 512);
}

// The stored rows are ggml's blocks of the (rotated, when rotate) keys and values: q8_0 bit-exact as ggml's reference
// encoder writes them; q4_0 with a least-squares scale: decoded by ggml's own decoder, every row's squared error is
// at most the reference encoding's (1% margin: both round d to f16) and over all rows smaller (bounds below).
TEST(KvQuant, StoredRowsAreGgmlBlocks) {
  const Shape s;
  std::mt19937_64 rng(31);
  const int64_t T = 5, row = s.n_head_kv * s.hd;
  const auto k = rand_vec(rng, T * row, -3.0f, 3.0f), v = rand_vec(rng, T * row, -1.0f, 1.0f);
  for (bool rotate : {false, true})
    for (KvType t : kQuant) {
      Cache c(s, t, t, 0, 0, rotate);
      kv_store(c.view, k.data(), v.data(), T, 7);
      std::vector<float> kk = k, vv = v;
      if (rotate) {
        hadamard_rows(kk.data(), T * s.n_head_kv, s.hd, hadamard_block(s.hd), Isa::kRef);
        hadamard_rows(vv.data(), T * s.n_head_kv, s.hd, hadamard_block(s.hd), Isa::kRef);
      }
      const size_t rb = kv_row_bytes(t, s.hd);
      std::vector<uint8_t> want(rb);
      std::vector<float> got_f(s.hd), want_f(s.hd);
      double err_got = 0, err_ref = 0;
      for (int64_t tok = 0; tok < T; ++tok)
        for (int64_t g = 0; g < s.n_head_kv; ++g)
          for (int kv = 0; kv < 2; ++kv) {
            const float* x = (kv ? vv : kk).data() + (tok * s.n_head_kv + g) * s.hd;
            const uint8_t* stored = (kv ? c.v : c.k).data() + static_cast<size_t>(g * s.n_ctx + 7 + tok) * rb;
            quant::quantize_row_ref(qtype(t), x, want.data(), s.hd);
            if (t == KvType::kQ8_0) {
              EXPECT_EQ(std::memcmp(stored, want.data(), rb), 0) << "q8_0 " << (kv ? "V " : "K ") << tok << "," << g;
              continue;
            }
            quant::dequantize_row(qtype(t), stored, got_f.data(), s.hd);
            quant::dequantize_row(qtype(t), want.data(), want_f.data(), s.hd);
            double eg = 0, er = 0;
            for (int64_t i = 0; i < s.hd; ++i) {
              eg += (got_f[i] - x[i]) * double(got_f[i] - x[i]);
              er += (want_f[i] - x[i]) * double(want_f[i] - x[i]);
            }
            EXPECT_LE(eg, er * 1.01) << "q4_0 " << (kv ? "V " : "K ") << tok << "," << g;
            err_got += eg;
            err_ref += er;
          }
      // Uniform values gain ~5% (measured 0.947), rotated ones (near-Gaussian, with tails) more (< 0.9).
      if (t == KvType::kQ4_0) {
        EXPECT_LT(err_got, (rotate ? 0.9 : 0.97) * err_ref) << "rotate " << rotate;
      }
    }
}

// Every ISA (and the scalar twin) against float64 attention over exactly what the cache holds: decoded blocks,
// and the f16 shadow rows for sink and window positions. Same tolerance reason as test_attention: fp32 dots of
// head_dim terms give NMSE ~1e-13; a wrong block decode, nibble order or shadow boundary gives > 1e-4.
TEST(KvQuant, AttentionVsDoubleOverStoredValues) {
  const Shape s;
  std::mt19937_64 rng(32);
  const int64_t past = 40, T = 9, row = s.n_head_kv * s.hd, n_pos = past + T;
  const auto k = rand_vec(rng, n_pos * row, -2.0f, 2.0f), v = rand_vec(rng, n_pos * row, -1.0f, 1.0f);
  const auto q = rand_vec(rng, T * s.n_head * s.hd, -2.0f, 2.0f);
  struct Setting {
    KvType k, v;
    int64_t sink, window;
  };
  const Setting settings[] = {{KvType::kQ8_0, KvType::kQ8_0, 0, 0}, {KvType::kQ4_0, KvType::kQ4_0, 0, 0},
                              {KvType::kQ4_0, KvType::kQ4_0, 3, 6},  {KvType::kQ8_0, KvType::kF16, 2, 0},
                              {KvType::kF16, KvType::kQ4_0, 0, 11},  {KvType::kQ4_0, KvType::kF32, 5, 5}};
  for (const Setting& st : settings) {
    Cache c(s, st.k, st.v, st.sink, st.window);
    kv_store(c.view, k.data(), v.data(), past, 0);
    kv_store(c.view, k.data() + past * row, v.data() + past * row, T, past);
    const auto ref = attention_double(q, c, T, past, s);
    for (const tern::test::IsaVariant var : tern::test::kIsaVariants) {
      if (!tern::test::variant_unavailable(var).empty()) continue;
      const tern::test::ScopedIsaVariant scope(var);
      Guarded out(T * s.n_head * s.hd);
      attention_causal(q.data(), T, s.n_head, c.view, past, 1.0f / std::sqrt(static_cast<float>(s.hd)), out.data(),
                       var.isa);
      EXPECT_LE(nmse(out.values(), ref), 1e-10) << tern::test::variant_name(var) << " K " << kv_type_name(st.k)
                                                << " V " << kv_type_name(st.v) << " sink " << st.sink << " window "
                                                << st.window;
      EXPECT_TRUE(out.ok());
    }
  }
}

// A sink / window query reads the shadow: with a window covering every position the result is the f16 cache's.
TEST(KvQuant, FullWindowEqualsF16Cache) {
  const Shape s;
  std::mt19937_64 rng(33);
  const int64_t T = 20, row = s.n_head_kv * s.hd;
  const auto k = rand_vec(rng, T * row, -2.0f, 2.0f), v = rand_vec(rng, T * row, -1.0f, 1.0f);
  const auto q = rand_vec(rng, T * s.n_head * s.hd, -2.0f, 2.0f);
  Cache f16(s, KvType::kF16, KvType::kF16), q4(s, KvType::kQ4_0, KvType::kQ4_0, 0, T);
  std::vector<float> a(T * s.n_head * s.hd), b(a.size());
  kv_store(f16.view, k.data(), v.data(), T, 0, Isa::kRef);
  kv_store(q4.view, k.data(), v.data(), T, 0, Isa::kRef);
  attention_causal(q.data(), T, s.n_head, f16.view, 0, 0.125f, a.data(), Isa::kRef);
  attention_causal(q.data(), T, s.n_head, q4.view, 0, 0.125f, b.data(), Isa::kRef);
  EXPECT_TRUE(bit_equal(a, b));
}

class IsaKvQuant : public IsaTest {};
TERN_INSTANTIATE_SIMD(IsaKvQuant);

// Against the scalar twin (the same decoded values, another summation order): NMSE ~1e-14 as IsaAttention.VsRef,
// including a long context where V is read in several tiles on both sides of the window boundary.
TEST_P(IsaKvQuant, VsRef) {
  std::mt19937_64 rng(34);
  for (const int64_t depth : {int64_t{1}, int64_t{37}, int64_t{300}})
  for (const int64_t n_head : {int64_t{8}, int64_t{20}}) {  // 4 and 10 query heads per KV head
    Shape s;
    s.n_head = n_head;
    s.hd = 128;
    s.n_ctx = depth + 4;
    const int64_t T = depth > 4 ? 3 : 1, past = depth + 1 - T, row = s.n_head_kv * s.hd;
    const auto k = rand_vec(rng, (past + T) * row, -2.0f, 2.0f), v = rand_vec(rng, (past + T) * row, -1.0f, 1.0f);
    const auto q = rand_vec(rng, T * s.n_head * s.hd, -2.0f, 2.0f);
    for (KvType t : kQuant)
      for (int64_t window : {int64_t{0}, int64_t{17}}) {
        Cache c(s, t, t, window ? 4 : 0, window);
        kv_store(c.view, k.data(), v.data(), past + T, 0, Isa::kRef);
        std::vector<float> ref(T * s.n_head * s.hd);
        Guarded got(ref.size());
        attention_causal(q.data(), T, s.n_head, c.view, past, 0.09f, ref.data(), Isa::kRef);
        attention_causal(q.data(), T, s.n_head, c.view, past, 0.09f, got.data(), isa());
        EXPECT_TRUE(got.ok());
        EXPECT_LE(nmse(got.values(), ref), 1e-12)
            << kv_type_name(t) << " depth " << depth << " window " << window << " heads " << n_head;
      }
  }
}

// The rotation's butterflies are the same per element on every ISA: bit-identical to the scalar twin.
TEST_P(IsaKvQuant, HadamardBitExact) {
  std::mt19937_64 rng(35);
  for (int64_t n : {1, 2, 8, 16, 32, 128, 256}) {
    const auto x = rand_vec(rng, 5 * n, -4.0f, 4.0f);
    std::vector<float> a = x, b = x;
    hadamard_rows(a.data(), 5, n, n, Isa::kRef);
    hadamard_rows(b.data(), 5, n, n, isa());
    EXPECT_TRUE(bit_equal(a, b)) << n;
  }
  // Many rows: cut into chunks on several threads, the same bits.
  const auto x = rand_vec(rng, 100 * 256, -4.0f, 4.0f);
  std::vector<float> a = x, b = x;
  hadamard_rows(a.data(), 100, 256, 256, Isa::kRef);
  const int saved = n_threads();
  set_n_threads(3);
  hadamard_rows(b.data(), 50, 512, 256, isa());
  set_n_threads(saved);
  EXPECT_TRUE(bit_equal(a, b));
}

// Batch == one by one == another thread count, bit for bit, with a sink and window (a query's reads depend on its
// own position only) and with the rotation. With head size 256 the decoded tiles of a batch (64 rows) end inside the
// context; 8 and 10 query heads per KV head take a batch's task in groups of four; mixed K / V types too.
TEST_P(IsaKvQuant, BatchEqualsOneByOne) {
  std::mt19937_64 rng(36);
  const std::pair<KvType, KvType> types[] = {{KvType::kQ8_0, KvType::kQ8_0}, {KvType::kQ4_0, KvType::kQ4_0},
                                             {KvType::kQ8_0, KvType::kF16}, {KvType::kF16, KvType::kQ4_0}};
  for (const Shape& s : {Shape{}, Shape{16, 2, 256, 150}, Shape{20, 2, 64, 60}}) {
    const int64_t T = s.n_ctx - 10, row = s.n_head_kv * s.hd, row_q = s.n_head * s.hd;
    const auto k = rand_vec(rng, T * row, -2.0f, 2.0f), v = rand_vec(rng, T * row, -1.0f, 1.0f);
    const auto q = rand_vec(rng, T * row_q, -2.0f, 2.0f);
    for (const auto& [kt, vt] : types) {
      Cache a(s, kt, vt, 3, 7, true), b(s, kt, vt, 3, 7, true);
      std::vector<float> batch(T * row_q), multi(batch.size());
      const int saved = n_threads();
      set_n_threads(1);
      kv_store(a.view, k.data(), v.data(), T, 0, isa());
      attention_causal(q.data(), T, s.n_head, a.view, 0, 0.125f, batch.data(), isa());
      set_n_threads(3);
      attention_causal(q.data(), T, s.n_head, a.view, 0, 0.125f, multi.data(), isa());
      set_n_threads(saved);
      // One token at a time, at 1 and at 3 threads (f16 / f32 rows: a task per KV head at 1).
      const auto single = attend_one_by_one(b.view, k.data(), v.data(), q.data(), T, s.n_head, 0.125f, isa(), 1);
      const auto single3 = attend_one_by_one(b.view, k.data(), v.data(), q.data(), T, s.n_head, 0.125f, isa(), 3);
      EXPECT_TRUE(bit_equal(batch, single)) << kv_type_name(kt) << "/" << kv_type_name(vt) << " hd " << s.hd;
      EXPECT_TRUE(bit_equal(batch, single3)) << kv_type_name(kt) << "/" << kv_type_name(vt) << " hd " << s.hd;
      EXPECT_TRUE(bit_equal(batch, multi)) << kv_type_name(kt) << "/" << kv_type_name(vt) << " hd " << s.hd;
    }
  }
}

// H is orthonormal and symmetric: twice is the identity up to rounding, and norms are kept.
TEST(KvQuant, HadamardIsOrthonormalInvolution) {
  std::mt19937_64 rng(37);
  for (int64_t n : {2, 32, 256}) {
    const auto x = rand_vec(rng, 3 * n, -4.0f, 4.0f);
    std::vector<float> y = x;
    hadamard_rows(y.data(), 3, n, n, Isa::kRef);
    double nx = 0, ny = 0;
    for (int64_t i = 0; i < 3 * n; ++i) nx += double(x[i]) * x[i], ny += double(y[i]) * y[i];
    EXPECT_NEAR(ny / nx, 1.0, 1e-6);
    hadamard_rows(y.data(), 3, n, n, Isa::kRef);
    EXPECT_LE(nmse(y, x), 1e-13) << n;  // 2 log2(n) + 2 roundings per element
  }
  EXPECT_EQ(hadamard_block(256), 256);
  EXPECT_EQ(hadamard_block(96), 32);
  EXPECT_EQ(hadamard_block(100), 4);
  std::vector<float> z(12);
  EXPECT_THROW(hadamard_rows(z.data(), 1, 12, 8, Isa::kRef), Error);
}

// Rotation alone (an f32 cache) changes attention by rounding only: NMSE ~1e-14 against the unrotated result
// (the same sums in another basis); a wrong inverse or a Q / K basis mismatch gives NMSE ~1.
TEST(KvQuant, RotationAloneIsRoundingOnly) {
  const Shape s;
  std::mt19937_64 rng(38);
  const int64_t T = 12, row = s.n_head_kv * s.hd, row_q = s.n_head * s.hd;
  const auto k = rand_vec(rng, T * row, -2.0f, 2.0f), v = rand_vec(rng, T * row, -1.0f, 1.0f);
  const auto q = rand_vec(rng, T * row_q, -2.0f, 2.0f);
  for (const tern::test::IsaVariant var : tern::test::kIsaVariants) {
    if (!tern::test::variant_unavailable(var).empty()) continue;
    const tern::test::ScopedIsaVariant scope(var);
    Cache plain(s, KvType::kF32, KvType::kF32), rot(s, KvType::kF32, KvType::kF32, 0, 0, true);
    std::vector<float> a(T * row_q), b(a.size());
    kv_store(plain.view, k.data(), v.data(), T, 0, var.isa);
    kv_store(rot.view, k.data(), v.data(), T, 0, var.isa);
    attention_causal(q.data(), T, s.n_head, plain.view, 0, 0.125f, a.data(), var.isa);
    attention_causal(q.data(), T, s.n_head, rot.view, 0, 0.125f, b.data(), var.isa);
    EXPECT_LE(nmse(b, a), 1e-12) << tern::test::variant_name(var);
  }
}

// What the rotation is for: keys with a few outlier channels (as real models' K have) lose less in q4_0 rotated.
TEST(KvQuant, RotationReducesQ4ErrorOnOutlierKeys) {
  const Shape s;
  std::mt19937_64 rng(39);
  const int64_t T = 32, row = s.n_head_kv * s.hd, row_q = s.n_head * s.hd;
  auto k = rand_vec(rng, T * row, -1.0f, 1.0f);
  for (int64_t r = 0; r < T * s.n_head_kv; ++r) k[r * s.hd + 5] *= 20.0f, k[r * s.hd + 40] *= 12.0f;
  const auto v = rand_vec(rng, T * row, -1.0f, 1.0f), q = rand_vec(rng, T * row_q, -1.0f, 1.0f);
  Cache f32(s, KvType::kF32, KvType::kF32), plain(s, KvType::kQ4_0, KvType::kQ4_0),
      rot(s, KvType::kQ4_0, KvType::kQ4_0, 0, 0, true);
  std::vector<float> want(T * row_q), a(want.size()), b(want.size());
  for (Cache* c : {&f32, &plain, &rot}) kv_store(c->view, k.data(), v.data(), T, 0, Isa::kRef);
  attention_causal(q.data(), T, s.n_head, f32.view, 0, 0.125f, want.data(), Isa::kRef);
  attention_causal(q.data(), T, s.n_head, plain.view, 0, 0.125f, a.data(), Isa::kRef);
  attention_causal(q.data(), T, s.n_head, rot.view, 0, 0.125f, b.data(), Isa::kRef);
  EXPECT_LT(nmse(b, want), 0.5 * nmse(a, want)) << "rotated " << nmse(b, want) << " plain " << nmse(a, want);
}

TEST(KvQuant, RefusesHeadSizesTheBlocksCannotHold) {
  Shape s;
  s.hd = 48;
  std::vector<uint8_t> k(s.n_head_kv * s.n_ctx * 64), v(k.size());
  KvCacheView view{KvType::kQ8_0, KvType::kQ8_0, k.data(), v.data(), s.n_head_kv, s.n_ctx, s.hd};
  std::vector<float> x(s.n_head_kv * s.hd);
  try {
    kv_store(view, x.data(), x.data(), 1, 0);
    FAIL() << "accepted head_dim 48 for q8_0";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 32"), std::string::npos) << e.what();
  }
}
