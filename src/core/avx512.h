// First include of every AVX-512 translation unit (those listed through tern_add_avx512_sources, CMakeLists.txt).
// Each such unit is built twice: natively with TERN_AVX512_FLAGS, and for the test binaries again as its SIMDe twin
// (-DTERN_SIMDE, AVX2 flags), where core/simde_avx512.h maps every AVX-512 intrinsic to SIMDe's portable code, so
// the AVX-512 source runs its tests on any AVX2 host. The twin's external symbols must differ from the native
// unit's: define them between TERN_AVX512_BEGIN and TERN_AVX512_END (the twin's land in namespace simde_twin).
#pragma once

#ifdef TERN_SIMDE
#include "core/simde_avx512.h"
#define TERN_AVX512_BEGIN namespace simde_twin {
#define TERN_AVX512_END }
#else
#include <immintrin.h>
#define TERN_AVX512_BEGIN
#define TERN_AVX512_END
#endif
