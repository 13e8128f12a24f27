// Scale searches used by the K-quant reference quantizers (ggml make_qx_quants, make_q3_quants,
// make_qkx2_quants), restricted to the variants the non-imatrix reference path calls. Internal to ref/.
#pragma once
#include <cstdint>

namespace tern::quant::ref {

// Symmetric codes L[i] in [0, 2*nmax) for n values, weight x^2, 18-step scale refinement (rmse_type 1).
// Returns the scale (x ~ scale * (L - nmax)).
float make_qx_quants(int n, int nmax, const float* x, int8_t* L);

// Symmetric codes in [0, 2*nmax) refined by up to 5 greedy passes of single-code changes (do_rmse = true).
float make_q3_quants(int n, int nmax, const float* x, int8_t* L);

// Affine codes L[i] in [0, nmax] with x ~ scale * L - the_min, searching nstep+1 candidate scales.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad);

}  // namespace tern::quant::ref
