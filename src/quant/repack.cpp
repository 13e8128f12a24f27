// Repacked (x8) weights: layout conversion both ways, the activation format, argument checks and dispatch.
#include "quant/repack.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "core/parallel.h"
#include "quant/blocks.h"
#include "quant/kernels.h"
#include "quant/kernels_impl.h"
#include "quant/repack_impl.h"

namespace tern::quant {
namespace {

using namespace x8;

// Q4_K / Q5_K 12-byte scale field <-> 8 scales and 8 mins of 6 bits (ggml get_scale_min_k4 and its inverse;
// all 96 bits are used, so the round trip is exact).
void unpack_k4_scales(const uint8_t* q, uint8_t sc[8], uint8_t mn[8]) {
  for (int j = 0; j < 8; ++j) {
    int32_t s, m;
    detail::scale_min_k4(j, q, &s, &m);
    sc[j] = static_cast<uint8_t>(s), mn[j] = static_cast<uint8_t>(m);
  }
}
void pack_k4_scales(const uint8_t sc[8], const uint8_t mn[8], uint8_t* q) {
  for (int j = 0; j < 4; ++j) {
    q[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    q[j + 4] = static_cast<uint8_t>((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    q[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
  }
}

void put16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
uint16_t get16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Q5_0 / Q5_1 high bits: the file's qh word has bit j = element j. The x8 word has them transposed so that a
// piece's 4 bytes need one uniform shift: bit 8i + k = element 4k + i (low nibble of qs byte 4k + i), bit
// 8i + 4 + k = element 16 + 4k + i (its high nibble), for byte i = 0..3 and piece k = 0..3. A bijection of the
// 32 bits, so the round trip is exact.
uint32_t qh_to_x8(uint32_t q) {
  uint32_t t = 0;
  for (int i = 0; i < 4; ++i)
    for (int k = 0; k < 4; ++k) {
      t |= ((q >> (4 * k + i)) & 1u) << (8 * i + k);
      t |= ((q >> (16 + 4 * k + i)) & 1u) << (8 * i + 4 + k);
    }
  return t;
}
uint32_t qh_from_x8(uint32_t t) {
  uint32_t q = 0;
  for (int i = 0; i < 4; ++i)
    for (int k = 0; k < 4; ++k) {
      q |= ((t >> (8 * i + k)) & 1u) << (4 * k + i);
      q |= ((t >> (8 * i + 4 + k)) & 1u) << (16 + 4 * k + i);
    }
  return q;
}

// Q3_K's 12-byte field <-> 16 scales as int8, already minus 32 (detail::unpack_q3_k_scales and its inverse;
// all 96 bits are used, so the round trip is exact).
void pack_q3_k_scales(const int8_t sc[16], uint8_t* s) {
  std::memset(s, 0, 12);
  for (int j = 0; j < 16; ++j) {
    const int v = sc[j] + 32;
    s[j % 8] |= static_cast<uint8_t>((v & 0xF) << (j < 8 ? 0 : 4));
    s[8 + j % 4] |= static_cast<uint8_t>((v >> 4) << (2 * (j / 4)));
  }
}

// IQ4_XS's scales_h (2 bits each) and scales_l (4 bits each) <-> 8 scales as int8, minus 32 (exact: 48 bits).
void pack_iq4_xs_scales(const int8_t sc[8], uint16_t* scales_h, uint8_t* scales_l) {
  uint16_t h = 0;
  std::memset(scales_l, 0, 4);
  for (int c = 0; c < 8; ++c) {
    const int v = sc[c] + 32;
    scales_l[c / 2] |= static_cast<uint8_t>((v & 0xF) << (4 * (c % 2)));
    h = static_cast<uint16_t>(h | ((v >> 4) << (2 * c)));
  }
  *scales_h = h;
}

// Copies `n_pieces` 4-byte pieces of one row's block (src, at src_off) into piece slots of a group block.
// to_group: src row bytes -> group; else group -> row bytes.
[[gnu::always_inline]] inline void pieces(bool to_group, uint8_t* row, size_t row_off, uint8_t* grp, size_t grp_off, int n_pieces, int r) {
  for (int k = 0; k < n_pieces; ++k) {
    uint8_t* g = grp + grp_off + (static_cast<size_t>(k) * kRepackRows + r) * 4;
    uint8_t* s = row + row_off + 4 * k;
    if (to_group) std::memcpy(g, s, 4);
    else std::memcpy(s, g, 4);
  }
}

// One fp16 / byte of a row <-> its slot r of a per-row array in the group block (8 entries of that size).
[[gnu::always_inline]] inline void slot16(bool to_group, uint16_t* row, uint8_t* grp, size_t grp_off, int r) {
  if (to_group) put16(grp + grp_off + 2 * r, *row);
  else *row = get16(grp + grp_off + 2 * r);
}
[[gnu::always_inline]] inline void slot8(bool to_group, void* row, uint8_t* grp, size_t grp_off, int r) {
  if (to_group) std::memcpy(grp + grp_off + r, row, 1);
  else std::memcpy(row, grp + grp_off + r, 1);
}

// Q5_0 / Q5_1 qh: the row's 4 bytes <-> the transposed word in slot r.
[[gnu::always_inline]] inline void qh_word(bool to_group, uint8_t* row_qh, uint8_t* grp, size_t grp_off, int r) {
  uint32_t v;
  if (to_group) {
    std::memcpy(&v, row_qh, 4);
    v = qh_to_x8(v);
    std::memcpy(grp + grp_off + 4 * r, &v, 4);
  } else {
    std::memcpy(&v, grp + grp_off + 4 * r, 4);
    v = qh_from_x8(v);
    std::memcpy(row_qh, &v, 4);
  }
}

// One row's block <-> its slot r in a group block. `row` is the file-layout block (to_group: read from it).
[[gnu::always_inline]] inline void convert_block(Type w, bool to_group, uint8_t* row, uint8_t* grp, int r) {
  switch (w) {
    case Type::Q4_1: {
      auto* b = reinterpret_cast<BlockQ4_1*>(row);
      slot16(to_group, &b->d, grp, 0, r), slot16(to_group, &b->m, grp, kQ4_1_m, r);
      pieces(to_group, b->qs, 0, grp, kQ4_1_qs, 4, r);
      break;
    }
    case Type::Q5_0: {
      auto* b = reinterpret_cast<BlockQ5_0*>(row);
      slot16(to_group, &b->d, grp, 0, r);
      qh_word(to_group, b->qh, grp, kQ5_0_qh, r);
      pieces(to_group, b->qs, 0, grp, kQ5_0_qs, 4, r);
      break;
    }
    case Type::Q5_1: {
      auto* b = reinterpret_cast<BlockQ5_1*>(row);
      slot16(to_group, &b->d, grp, 0, r), slot16(to_group, &b->m, grp, kQ5_1_m, r);
      qh_word(to_group, b->qh, grp, kQ5_1_qh, r);
      pieces(to_group, b->qs, 0, grp, kQ5_1_qs, 4, r);
      break;
    }
    case Type::IQ4_NL: {
      auto* b = reinterpret_cast<BlockIQ4_NL*>(row);
      slot16(to_group, &b->d, grp, 0, r);
      pieces(to_group, b->qs, 0, grp, kIQ4_NL_qs, 4, r);
      break;
    }
    case Type::Q2_K: {
      auto* b = reinterpret_cast<BlockQ2_K*>(row);
      slot16(to_group, &b->d, grp, 0, r), slot16(to_group, &b->dmin, grp, kQ2_K_dmin, r);
      for (int j = 0; j < 16; ++j) slot8(to_group, &b->scales[j], grp, kQ2_K_sc + 8 * j, r);  // file bytes
      pieces(to_group, b->qs, 0, grp, kQ2_K_qs, 16, r);  // [h][k] = piece 8h + k = bytes 32h + 4k
      break;
    }
    case Type::Q3_K: {
      auto* b = reinterpret_cast<BlockQ3_K*>(row);
      slot16(to_group, &b->d, grp, 0, r);
      int8_t sc[16];
      if (to_group) {
        int32_t v[16];
        detail::unpack_q3_k_scales(b->scales, v);
        for (int j = 0; j < 16; ++j) sc[j] = static_cast<int8_t>(v[j]);
      }
      for (int j = 0; j < 16; ++j) slot8(to_group, &sc[j], grp, kQ3_K_sc + 8 * j, r);
      if (!to_group) pack_q3_k_scales(sc, b->scales);
      pieces(to_group, b->hmask, 0, grp, kQ3_K_hm, 8, r);
      pieces(to_group, b->qs, 0, grp, kQ3_K_qs, 16, r);  // as Q2_K
      break;
    }
    case Type::IQ4_XS: {
      auto* b = reinterpret_cast<BlockIQ4_XS*>(row);
      slot16(to_group, &b->d, grp, 0, r);
      int8_t sc[8];
      if (to_group)
        for (int c = 0; c < 8; ++c) sc[c] = static_cast<int8_t>(detail::iq4_xs_scale(b->scales_h, b->scales_l, c));
      for (int c = 0; c < 8; ++c) slot8(to_group, &sc[c], grp, kIQ4_XS_sc + 8 * c, r);
      if (!to_group) pack_iq4_xs_scales(sc, &b->scales_h, b->scales_l);
      pieces(to_group, b->qs, 0, grp, kIQ4_XS_qs, 32, r);  // [c][k] = piece 4c + k = bytes 16c + 4k
      break;
    }
    case Type::Q4_0: {
      auto* b = reinterpret_cast<BlockQ4_0*>(row);
      if (to_group) put16(grp + 2 * r, b->d);
      else b->d = get16(grp + 2 * r);
      pieces(to_group, b->qs, 0, grp, kQ4_0_qs, 4, r);
      break;
    }
    case Type::Q8_0: {
      auto* b = reinterpret_cast<BlockQ8_0*>(row);
      if (to_group) put16(grp + 2 * r, b->d);
      else b->d = get16(grp + 2 * r);
      pieces(to_group, reinterpret_cast<uint8_t*>(b->qs), 0, grp, kQ8_0_qs, 8, r);
      break;
    }
    case Type::Q4_K: case Type::Q5_K: {
      // BlockQ4_K and BlockQ5_K share d, dmin, scales; Q5_K adds qh before qs.
      const bool q5 = w == Type::Q5_K;
      uint16_t* d = reinterpret_cast<uint16_t*>(row);
      uint8_t* scales = row + 4;
      uint8_t* qh = q5 ? row + 4 + kKScaleSize : nullptr;
      uint8_t* qs = row + 4 + kKScaleSize + (q5 ? kQK_K / 8 : 0);
      uint8_t sc[8], mn[8];
      if (to_group) {
        put16(grp + 2 * r, d[0]), put16(grp + kQ4_K_dmin + 2 * r, d[1]);
        unpack_k4_scales(scales, sc, mn);
        for (int j = 0; j < 8; ++j) grp[kQ4_K_sc + 8 * j + r] = sc[j];
        for (int p = 0; p < 4; ++p)
          grp[kQ4_K_mn + 16 * p + 2 * r] = mn[2 * p], grp[kQ4_K_mn + 16 * p + 2 * r + 1] = mn[2 * p + 1];
      } else {
        d[0] = get16(grp + 2 * r), d[1] = get16(grp + kQ4_K_dmin + 2 * r);
        for (int j = 0; j < 8; ++j) sc[j] = grp[kQ4_K_sc + 8 * j + r];
        for (int p = 0; p < 4; ++p)
          mn[2 * p] = grp[kQ4_K_mn + 16 * p + 2 * r], mn[2 * p + 1] = grp[kQ4_K_mn + 16 * p + 2 * r + 1];
        pack_k4_scales(sc, mn, scales);
      }
      if (q5) pieces(to_group, qh, 0, grp, kQ5_K_qh, 8, r);
      pieces(to_group, qs, 0, grp, q5 ? kQ5_K_qs : kQ4_K_qs, 32, r);  // [j][k] = piece 8j + k = bytes 32j + 4k
      break;
    }
    case Type::Q6_K: {
      auto* b = reinterpret_cast<BlockQ6_K*>(row);
      if (to_group) put16(grp + 2 * r, b->d);
      else b->d = get16(grp + 2 * r);
      for (int j = 0; j < 16; ++j) {
        uint8_t* g = grp + kQ6_K_sc + 8 * j + r;
        uint8_t* s = reinterpret_cast<uint8_t*>(&b->scales[j]);
        if (to_group) *g = *s;
        else *s = *g;
      }
      pieces(to_group, b->ql, 0, grp, kQ6_K_ql, 32, r);  // [h][p][k] = piece 16h + 8p + k = bytes 64h + 32p + 4k
      pieces(to_group, b->qh, 0, grp, kQ6_K_qh, 16, r);  // [h][k] = piece 8h + k = bytes 32h + 4k
      break;
    }
    default: fail("internal: no x8 layout for %s", type_name(w));
  }
}

void check_repacked(Type w, int64_t n_in, const char* what) {
  if (!has_repacked(w))
    fail("%s: weight type %s has no repacked layout (repacked: q4_0 q4_1 q5_0 q5_1 q8_0 iq4_nl q2_K q3_K q4_K "
         "q5_K q6_K iq4_xs)", what, type_name(w));
  const int64_t bs = traits(w).block_size;
  if (n_in <= 0 || n_in % bs != 0)
    fail("%s: row length %lld is not a positive multiple of %s's block size %lld", what,
         static_cast<long long>(n_in), type_name(w), static_cast<long long>(bs));
}

RepackFn repack_fn(Type w, Isa isa) {
  switch (isa) {
    case Isa::kRef: return repack_fn_ref(w);
    case Isa::kAvx2: return repack_fn_avx2(w);
    case Isa::kAvx512: {
      const Avx512Entries* e = avx512_entries();  // a test routing AVX-512 to the SIMDe twin
      return e ? e->repack_fn(w) : repack_fn_avx512(w);
    }
  }
  return nullptr;
}

}  // namespace

bool has_repacked(Type w) { return repacked_block_bytes(w) != 0; }

size_t repacked_block_bytes(Type w) {
  switch (w) {
    case Type::Q4_0: return kQ4_0_block;
    case Type::Q4_1: return kQ4_1_block;
    case Type::Q5_0: return kQ5_0_block;
    case Type::Q5_1: return kQ5_1_block;
    case Type::IQ4_NL: return kIQ4_NL_block;
    case Type::Q2_K: return kQ2_K_block;
    case Type::Q3_K: return kQ3_K_block;
    case Type::IQ4_XS: return kIQ4_XS_block;
    case Type::Q8_0: return kQ8_0_block;
    case Type::Q4_K: return kQ4_K_block;
    case Type::Q5_K: return kQ5_K_block;
    case Type::Q6_K: return kQ6_K_block;
    default: return 0;
  }
}

size_t repacked_bytes(Type w, int64_t n_rows, int64_t n_in) {
  check_repacked(w, n_in, "repacked_bytes");
  const int64_t groups = (n_rows + kRepackRows - 1) / kRepackRows;
  return static_cast<size_t>(groups) * static_cast<size_t>(n_in / traits(w).block_size) * repacked_block_bytes(w);
}

namespace {

constexpr size_t sizeof_block(Type w) {
  switch (w) {
    case Type::Q4_0: return sizeof(BlockQ4_0);
    case Type::Q4_1: return sizeof(BlockQ4_1);
    case Type::Q5_0: return sizeof(BlockQ5_0);
    case Type::Q5_1: return sizeof(BlockQ5_1);
    case Type::Q8_0: return sizeof(BlockQ8_0);
    case Type::IQ4_NL: return sizeof(BlockIQ4_NL);
    case Type::Q2_K: return sizeof(BlockQ2_K);
    case Type::Q3_K: return sizeof(BlockQ3_K);
    case Type::Q4_K: return sizeof(BlockQ4_K);
    case Type::Q5_K: return sizeof(BlockQ5_K);
    case Type::Q6_K: return sizeof(BlockQ6_K);
    case Type::IQ4_XS: return sizeof(BlockIQ4_XS);
    default: return 0;
  }
}

// The repack loop for one type (its block conversion inlined, constants folded: load time matters).
template <Type kW>
void repack_groups(const uint8_t* src, size_t stride, int64_t n_rows, int64_t nb, int64_t groups, uint8_t* dst) {
  constexpr size_t tsize = sizeof_block(kW);
  const size_t gb = repacked_block_bytes(kW);
  alignas(8) uint8_t zero[tsize] = {}, tmp[tsize];
  for (int64_t g = 0; g < groups; ++g) {
    uint8_t* out = dst + static_cast<size_t>(g * nb) * gb;
    for (int64_t b = 0; b < nb; ++b)
      for (int r = 0; r < kRepackRows; ++r) {
        const int64_t row = g * kRepackRows + r;
        const uint8_t* s = row < n_rows ? src + row * stride + b * tsize : zero;
        std::memcpy(tmp, s, tsize);  // convert_block takes a writable block for both directions
        convert_block(kW, true, tmp, out + b * gb, r);
      }
  }
}

}  // namespace

void repack(Type w, const void* src, size_t src_row_stride, int64_t n_rows, int64_t n_in, void* dst) {
  check_repacked(w, n_in, "repack");
  const int64_t nb = n_in / traits(w).block_size, groups = (n_rows + kRepackRows - 1) / kRepackRows;
  if (src_row_stride < row_size(traits(w), n_in)) fail("repack: row stride %zu too short", src_row_stride);
  switch (w) {
#define TERN_REPACK_CASE(T) \
  case Type::T: return repack_groups<Type::T>(static_cast<const uint8_t*>(src), src_row_stride, n_rows, nb, groups, \
                                              static_cast<uint8_t*>(dst));
    TERN_REPACK_CASE(Q4_0) TERN_REPACK_CASE(Q4_1) TERN_REPACK_CASE(Q5_0) TERN_REPACK_CASE(Q5_1)
    TERN_REPACK_CASE(Q8_0) TERN_REPACK_CASE(IQ4_NL) TERN_REPACK_CASE(Q2_K) TERN_REPACK_CASE(Q3_K)
    TERN_REPACK_CASE(Q4_K) TERN_REPACK_CASE(Q5_K) TERN_REPACK_CASE(Q6_K) TERN_REPACK_CASE(IQ4_XS)
#undef TERN_REPACK_CASE
    default: fail("internal: no x8 layout for %s", type_name(w));
  }
}

void unpack_row(Type w, const void* packed, int64_t n_in, int64_t row, void* dst) {
  check_repacked(w, n_in, "unpack_row");
  const size_t tsize = traits(w).type_size, gb = repacked_block_bytes(w);
  const int64_t nb = n_in / traits(w).block_size, g = row / kRepackRows;
  const int r = static_cast<int>(row % kRepackRows);
  const uint8_t* in = static_cast<const uint8_t*>(packed) + static_cast<size_t>(g * nb) * gb;
  for (int64_t b = 0; b < nb; ++b)
    convert_block(w, false, static_cast<uint8_t*>(dst) + b * tsize, const_cast<uint8_t*>(in + b * gb), r);
}

size_t repacked_act_row_bytes(Type w, int64_t n) {
  check_repacked(w, n, "repacked_act_row_bytes");
  return act_type(w) == Type::Q8_K ? act_row_bytes(w, n) : static_cast<size_t>(n / kQK) * sizeof(BlockQ8_0S);
}

void quantize_act_repacked(Type w, const float* x, void* xq, int64_t n, Isa isa) {
  check_repacked(w, n, "quantize_act_repacked");
  if (act_type(w) == Type::Q8_K) return quantize_act(w, x, xq, n, isa);
  // Q8_0 blocks (the same bytes quantize_act writes), then their exact quant sums.
  thread_local std::vector<BlockQ8_0> tmp;
  if (tmp.size() < static_cast<size_t>(n / kQK)) tmp.resize(static_cast<size_t>(n / kQK));
  quantize_act(Type::Q8_0, x, tmp.data(), n, isa);
  auto* out = static_cast<BlockQ8_0S*>(xq);
  for (int64_t b = 0; b < n / kQK; ++b) {
    int s = 0;
    for (int j = 0; j < kQK; ++j) s += tmp[b].qs[j];
    out[b].d = fp16_to_fp32(tmp[b].d);
    out[b].s = s;
    std::memcpy(out[b].qs, tmp[b].qs, kQK);
  }
}

void gemm_repacked(Type w, const void* packed, int64_t n_rows, int64_t n_in, const void* xq, size_t xq_stride,
                   int64_t g_begin, int64_t g_end, int64_t n_tok, float* y, int64_t ldy, Isa isa,
                   const int32_t* x_rows, int64_t y_col0) {
  check_repacked(w, n_in, "gemm_repacked");
  if (!isa_supported(isa) && !(isa == Isa::kAvx512 && avx512_entries()))
    fail("gemm_repacked: ISA %s requested but this CPU lacks it (has: %s)", isa_name(isa),
         cpu_features().summary().c_str());
  const int64_t groups = (n_rows + kRepackRows - 1) / kRepackRows;
  const int64_t row_end = std::min(n_rows, g_end * kRepackRows);
  if (n_rows <= 0 || g_begin < 0 || g_end < g_begin || g_end > groups || n_tok < 0 || y_col0 > g_begin * kRepackRows ||
      (n_tok > 1 && ldy < row_end - y_col0))
    fail("gemm_repacked: bad ranges groups [%lld, %lld) of %lld, n_tok %lld, ldy %lld",
         static_cast<long long>(g_begin), static_cast<long long>(g_end), static_cast<long long>(groups),
         static_cast<long long>(n_tok), static_cast<long long>(ldy));
  if (xq_stride < repacked_act_row_bytes(w, n_in)) fail("gemm_repacked: activation stride %zu too short", xq_stride);
  if (g_end == g_begin || n_tok == 0) return;
  const RepackFn fn = repack_fn(w, isa);
  if (!fn) fail("internal: no %s repacked gemm for %s", isa_name(isa), type_name(w));
  const int64_t nb = n_in / traits(w).block_size;
  fn(RepackArgs{static_cast<const uint8_t*>(packed), static_cast<size_t>(nb) * repacked_block_bytes(w), nb,
                static_cast<const uint8_t*>(xq), xq_stride, g_begin, g_end, n_rows, n_tok, y, ldy, x_rows, y_col0});
}

void matmul_repacked(Type w, const void* packed, int64_t n_out, int64_t n_in, const float* x, int64_t n_tok,
                     float* y, Isa isa) {
  static_assert(kMatmulRowChunk % kRepackRows == 0);
  if (n_out <= 0 || n_tok <= 0) return;
  const size_t stride = repacked_act_row_bytes(w, n_in);
  thread_local std::vector<uint8_t> scratch;
  if (scratch.size() < stride * n_tok) scratch.resize(stride * n_tok);
  uint8_t* xq = scratch.data();
  parallel_for(n_tok, [&](int64_t t) { quantize_act_repacked(w, x + t * n_in, xq + t * stride, n_in, isa); });
  const int64_t groups = (n_out + kRepackRows - 1) / kRepackRows;
  const int64_t per = task_rows(repacked_bytes(w, kRepackRows, n_in) / kRepackRows, n_tok) / kRepackRows;
  const int64_t n_chunks = (groups + per - 1) / per;
  parallel_for(n_chunks, [&](int64_t c) {
    gemm_repacked(w, packed, n_out, n_in, xq, stride, c * per, std::min(groups, c * per + per), n_tok, y, n_out, isa);
  });
}

}  // namespace tern::quant
