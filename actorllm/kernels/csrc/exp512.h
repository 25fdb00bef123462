/* exp on 16 float32 lanes, shared by the AVX-512 paths of the attention kernels
 * (paged_decode.c, paged_prefill.c). Include it after <immintrin.h>, where __AVX512F__. */
#ifndef ACTORLLM_EXP512_H
#define ACTORLLM_EXP512_H

#include "exp_f32.h" /* the constants */

/* Cephes expf, 16 lanes: x = n ln2 + r, |r| <= ln2 / 2, e^r by a degree-6 polynomial, times
 * 2^n by scalef; about 1 ulp. -inf and very negative x give 0 (clamped, then 2^n
 * underflows), NaN stays NaN (max/min return their second operand for a NaN). */
static inline __m512 exp512(__m512 x) {
    x = _mm512_min_ps(_mm512_set1_ps(88.7f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(EXP_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(EXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P5));
    __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(y, n);
}

#endif
