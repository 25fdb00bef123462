/* exp on 8 float32 lanes, for the AVX2 paths of the attention kernels (paged_decode.c).
 * Include it after <immintrin.h>, where __AVX2__ and __FMA__. */
#ifndef ACTORLLM_EXP256_H
#define ACTORLLM_EXP256_H

#include "exp_f32.h" /* the constants */

/* exp512.h's Cephes expf on 8 lanes: x = n ln2 + r, |r| <= ln2 / 2, e^r by a degree-6
 * polynomial, times 2^n built in the exponent bits (AVX2 has no scalef, so x is clamped to
 * where 2^n is a normal float: [-87.3, 88.7]); about 1 ulp. x below -87.34 (-inf too) gives
 * 0, NaN stays NaN. */
static inline __m256 exp256(__m256 x_in) {
    __m256 x = _mm256_min_ps(_mm256_set1_ps(88.7f), _mm256_max_ps(_mm256_set1_ps(-87.3f), x_in));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(EXP_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P5));
    __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
    /* below the clamp: 0 (not less-than, unordered true: NaN keeps its NaN) */
    return _mm256_and_ps(y, _mm256_cmp_ps(x_in, _mm256_set1_ps(-87.33654f), _CMP_NLT_UQ));
}

#endif
