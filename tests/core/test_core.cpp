// core: fp16/bf16 conversions, cpu features, error formatting.
#include <gtest/gtest.h>

#include <cmath>

#include "core/cpu.h"
#include "core/error.h"
#include "core/fp16.h"

using namespace tern;

// Exact: every one of the 65536 half values survives half -> float -> half unchanged (NaNs stay NaN).
TEST(Fp16, RoundTripAllHalves) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = fp16_to_fp32(static_cast<uint16_t>(h));
    uint16_t back = fp32_to_fp16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(fp16_to_fp32(back)));
    } else {
      EXPECT_EQ(back, h) << "half 0x" << std::hex << h;
    }
  }
}

TEST(Fp16, KnownValues) {
  EXPECT_EQ(fp16_to_fp32(0x3c00), 1.0f);
  EXPECT_EQ(fp16_to_fp32(0xc000), -2.0f);
  EXPECT_EQ(fp16_to_fp32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(fp32_to_fp16(1e6f), 0x7c00);                      // overflow -> inf
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie rounds to even
}

TEST(Bf16, RoundNearestEven) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_fp32(0x3f80), 1.0f);
  EXPECT_EQ(fp32_to_bf16(fp32_from_bits(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(fp32_to_bf16(fp32_from_bits(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(std::nanf("")))));
}

TEST(Error, Formats) {
  try {
    fail("%s: tensor %s: shape %d", "m.gguf", "blk.0", 3);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "m.gguf: tensor blk.0: shape 3");
  }
}

TEST(Cpu, RefAlwaysSupported) {
  EXPECT_TRUE(isa_supported(Isa::kRef));
  EXPECT_TRUE(isa_supported(best_isa()));
}
