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

// --isa: names parse both ways; an ISA this CPU lacks is refused; once the kernels have run with one ISA another is
// refused (the same one is accepted), since weights repacked and logged under one must not meet kernels of another.
TEST(Cpu, EngineIsaChoice) {
  for (Isa i : {Isa::kRef, Isa::kAvx2, Isa::kAvx512}) {
    Isa parsed = Isa::kRef;
    ASSERT_TRUE(parse_isa(isa_name(i), &parsed)) << isa_name(i);
    EXPECT_EQ(parsed, i);
  }
  Isa parsed = Isa::kAvx2;
  EXPECT_FALSE(parse_isa("auto", &parsed));
  EXPECT_FALSE(parse_isa("AVX2", &parsed));
  EXPECT_FALSE(parse_isa("", &parsed));
  EXPECT_EQ(parsed, Isa::kAvx2);

  hide_native_avx512(true);  // as on a CPU without AVX-512
  try {
    set_engine_isa(Isa::kAvx512);
    ADD_FAILURE() << "--isa avx512 accepted without AVX-512";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot run"), std::string::npos) << e.what();
  }
  hide_native_avx512(false);

  const Isa fixed = engine_isa();  // fixes the choice (the default: best_isa, unless a test asked before)
  EXPECT_NO_THROW(set_engine_isa(fixed));
  const Isa other = fixed == Isa::kRef ? (isa_supported(Isa::kAvx2) ? Isa::kAvx2 : Isa::kRef) : Isa::kRef;
  if (other != fixed) {
    try {
      set_engine_isa(other);
      ADD_FAILURE() << "--isa changed after the kernels ran";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("already run"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(engine_isa(), fixed);
}

TEST(Cpu, RefAlwaysSupported) {
  EXPECT_TRUE(isa_supported(Isa::kRef));
  EXPECT_TRUE(isa_supported(best_isa()));
}
