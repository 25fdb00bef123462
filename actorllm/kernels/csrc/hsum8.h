/* The sum of a float32 AVX vector's 8 lanes, in one fixed order: (0+4, 1+5, 2+6, 3+7),
 * then pairs, then the last two. */
#pragma once
#include <immintrin.h>

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
