// The kernels core/peak.cpp times. Each runs `iters` iterations of independent multiply-accumulate chains on
// all-ones inputs and returns the sum of its accumulator lanes, which then equals the products it really did:
// int8: iters * kOps (MACs); fp32: iters * kOps / 2 (FMAs, or multiply-adds for the portable one) while a lane stays
// below 2^24. The unit test checks that identity, so no kernel can claim work the compiler took out. Inputs pass
// through an empty asm each round so products cannot be hoisted out of the loop or shared between chains.
#pragma once
#include <cstdint>

namespace tern::peak {

using KernelFn = double (*)(int64_t iters);

// Portable C++ (baseline x86-64): 64 u8 x s8 products into 16 int32 accumulators; 32 float multiply-adds.
double int8_ref(int64_t iters);
double fp32_ref(int64_t iters);
inline constexpr double kInt8RefOps = 64, kFp32RefOps = 64;

// AVX2: 3 rounds x 4 chains of vpmaddubsw + vpmaddwd(ones) + vpaddd on ymm (32 MACs each); 12 ymm FMA chains.
double int8_avx2(int64_t iters);
double fp32_avx2(int64_t iters);
inline constexpr double kInt8Avx2Ops = 3 * 4 * 32, kFp32Avx2Ops = 12 * 8 * 2;

// AVX-512 (F, BW, VL, DQ; VNNI for int8): 16 zmm vpdpbusd chains (64 MACs each); 24 zmm FMA chains.
double int8_avx512vnni(int64_t iters);
double fp32_avx512(int64_t iters);
inline constexpr double kInt8Avx512VnniOps = 16 * 64, kFp32Avx512Ops = 24 * 16 * 2;

}  // namespace tern::peak
