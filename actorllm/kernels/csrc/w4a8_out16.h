/* The last float steps of a W4A8 output (w4a8_amx.c, w4a8_vnni.c: one definition, so the
 * tiles and the vectors agree on every bit): 16 outputs of one input row, their scaled
 * integer sums `acc` plus the groups' offsets times the row's per-group input sums, plus
 * the bias, stored as float32 or rounded to bfloat16.
 *
 *   out[row, col + j] = (acc[j] + sum_g offsets_t[g, col + j] * xs[g]) + bias[col + j]
 *
 * the offsets summed in g order, from zero (fused multiply-adds). */
#pragma once
#include <immintrin.h>
#include <stdint.h>
#include "bf16_torch16.h"

/* offsets_t: float32 [groups, n]; xs: the row's input sum per group [groups]; bias: float32
 * [n] or NULL; out: [.., n] float32 or (out_bf16) bfloat16, written at element `at`. */
static inline void w4a8_out16(
    __m512 acc, const float *offsets_t, const float *xs, int64_t groups, int64_t n, int64_t col,
    const float *bias, void *out, int64_t at, int out_bf16) {
    __m512 off = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; g++)
        off = _mm512_fmadd_ps(_mm512_loadu_ps(offsets_t + g * n + col), _mm512_set1_ps(xs[g]),
                              off);
    __m512 v = _mm512_add_ps(acc, off);
    if (bias) v = _mm512_add_ps(v, _mm512_loadu_ps(bias + col));
    if (out_bf16)
        _mm256_storeu_si256((__m256i *)((uint16_t *)out + at), to_bf16(v));
    else
        _mm512_storeu_ps((float *)out + at, v);
}
