/* Inputs quantized to int8 for the integer-product kernels (w4a8_gemm.c, q8a8_gemm.c):
 * one symmetric scale per row and block of A columns,
 *
 *   x[m, i] ~ d[m, b] * xq[m, i],  xq = round-half-even(x * 127 / amax) in [-127, 127]
 *
 * (amax: the block's largest |x|; an all-zero block gives zeros, d = 0), so |xq| <= 127
 * and -128 never occurs. xs[m, g] = sum over group g's columns of d * xq: what a weight
 * group's zero point multiplies, from the quantized inputs, so q - zero is what meets each
 * rounded input as in the integer product. A group may span blocks (gs > A) or a block
 * groups (gs < A); the float sums run in column order either way.
 *
 * xq is stored per unit of U columns as a kernel's packed bytes deliver them: the U/2
 * even columns, then the U/2 odd ones (4-bit nibbles); U = 1 keeps column order. */
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "bf16_rows.h"

typedef struct {
    int8_t *xq;      /* [M, I], deinterleaved per unit */
    float *d;        /* [M, I / A]: each block's scale */
    float *xs;       /* [M, G]: sum over the group's columns of d * xq */
    int64_t a, u;    /* block and unit widths */
} act8;

/* The input block for weight groups of gs columns (gs 16 or a multiple of 32): the group
 * itself up to 256 columns, its largest power-of-two divisor up to 256 beyond; 32 for
 * groups of 16 (a block then holds two groups). */
static int64_t act8_block(int64_t gs) {
    if (gs < 32) return 32;
    if (gs <= 256) return gs;
    int64_t a = 256;
    while (gs % a) a /= 2;  /* gs % 32 == 0, so a >= 32 */
    return a;
}

static void free_act8(act8 *q) {
    free(q->xq);
    free(q->d);
    free(q->xs);
}

/* q's buffers for m_rows rows of I inputs (free with free_act8, also after a failure).
 * A is at most 256; I a multiple of A and of gs, and the larger of A and gs a multiple of
 * the other. Returns 0, or -1 when out of memory. */
static int alloc_act8(int64_t m_rows, int64_t in, int64_t a, int64_t u, int64_t gs, act8 *q) {
    q->a = a, q->u = u;
    q->xq = malloc((size_t)(m_rows * in));
    q->d = malloc(sizeof(float) * (size_t)(m_rows * (in / a)));
    q->xs = malloc(sizeof(float) * (size_t)(m_rows * (in / gs)));
    return q->xq && q->d && q->xs ? 0 : -1;
}

#if defined(__AVX512BW__) && defined(__AVX512F__) && !defined(ACT8_SCALAR)
#include <immintrin.h>
#include "bf16_torch16.h"
#define ACT8_HAVE_BLOCK64 1

/* 16 inputs from x + i (float32, or bfloat16 bits widened exactly). */
static inline __m512 act8_load16(const void *x, int bf16, int64_t i) {
    if (bf16) return from_bf16(_mm256_loadu_si256((const __m256i *)((const uint16_t *)x + i)));
    return _mm512_loadu_ps((const float *)x + i);
}

/* The largest |x| of n inputs (n a multiple of 16); NaN is skipped, as the scalar loop
 * skips it (vmaxps returns its second operand when either is NaN). */
static inline float act8_amax16(const void *x, int bf16, int64_t n) {
    __m512 mx = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16)
        mx = _mm512_max_ps(_mm512_abs_ps(act8_load16(x, bf16, i)), mx);
    return _mm512_reduce_max_ps(mx);
}

/* One block of A columns, A a multiple of 64, units of 64: the values and rounding of the
 * scalar loop in act8_rows_of, 16 columns at a time (x * inv rounded half to even by
 * vrndscaleps as by nearbyintf; integral floats convert exactly), each unit split into
 * its even and odd columns by narrowing 16-bit lanes (low bytes, then high ones). Returns
 * the sum of the block's values. */
static inline int32_t act8_block64(const void *xb, int bf16, int64_t a, float inv,
                                   int8_t *dst) {
    __m512 vinv = _mm512_set1_ps(inv);
    __m512i total = _mm512_setzero_si512();
    for (int64_t c = 0; c < a; c += 64) {
        __m512i v[4];
        for (int k = 0; k < 4; k++) {
            __m512 f = _mm512_mul_ps(act8_load16(xb, bf16, c + 16 * k), vinv);
            f = _mm512_roundscale_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            v[k] = _mm512_cvtps_epi32(f);
            total = _mm512_add_epi32(total, v[k]);
        }
        /* columns c .. c + 63 as bytes, in order (|values| <= 127: narrowing is exact) */
        __m512i bytes = _mm512_castsi128_si512(_mm512_cvtepi32_epi8(v[0]));
        bytes = _mm512_inserti32x4(bytes, _mm512_cvtepi32_epi8(v[1]), 1);
        bytes = _mm512_inserti32x4(bytes, _mm512_cvtepi32_epi8(v[2]), 2);
        bytes = _mm512_inserti32x4(bytes, _mm512_cvtepi32_epi8(v[3]), 3);
        _mm256_storeu_si256((__m256i *)(dst + c), _mm512_cvtepi16_epi8(bytes));
        _mm256_storeu_si256((__m256i *)(dst + c + 32),
                            _mm512_cvtepi16_epi8(_mm512_srli_epi16(bytes, 8)));
    }
    return _mm512_reduce_add_epi32(total);
}
#endif

/* x[i] of float32 (bf16 0) or bfloat16 bits (1) as float (exact). */
static inline float act8_at(const void *x, int bf16, int64_t i) {
    return bf16 ? bf16_to_f32(((const uint16_t *)x)[i]) : ((const float *)x)[i];
}

/* Rows [m0, m1) of x [M, I], float32 (bf16 0) or bfloat16 bits (1), -> q (allocated by
 * alloc_act8 for M rows). A bfloat16 input gives the bits its float32 copy gives. */
static void act8_rows_of(const void *x, int bf16, int64_t in, int64_t gs, act8 *q,
                         int64_t m0, int64_t m1) {
    int64_t esize = bf16 ? 2 : 4;
    int64_t a = q->a, u = q->u;
    int64_t blocks = in / a, groups = in / gs, seg = a < gs ? a : gs, half = u / 2;
    for (int64_t m = m0; m < m1; m++) {
        int8_t *dst = q->xq + m * in;
        float *xs = q->xs + m * groups;
        for (int64_t b = 0; b < blocks; b++) {
            const void *xb = (const char *)x + (m * in + b * a) * esize;
#ifdef ACT8_HAVE_BLOCK64
            if (u == 64 && a % 64 == 0) { /* then seg == a: one group's part a block */
                float amax = act8_amax16(xb, bf16, a);
                float inv = amax > 0.0f ? 127.0f / amax : 0.0f, d = amax / 127.0f;
                q->d[m * blocks + b] = d;
                int32_t total = act8_block64(xb, bf16, a, inv, dst + b * a);
                int64_t col = b * a, g = col / gs;
                xs[g] = (col % gs ? xs[g] : 0.0f) + d * (float)total;
                continue;
            }
#endif
            float amax = 0.0f;
            for (int64_t i = 0; i < a; i++) {
                float v = fabsf(act8_at(xb, bf16, i));
                amax = v > amax ? v : amax;
            }
            float inv = amax > 0.0f ? 127.0f / amax : 0.0f, d = amax / 127.0f;
            q->d[m * blocks + b] = d;
            int8_t v[256];  /* the block in column order (a <= 256): a loop that vectorises */
            for (int64_t i = 0; i < a; i++) v[i] = (int8_t)nearbyintf(act8_at(xb, bf16, i) * inv);
            int64_t k = (b * a) % u;  /* the first column's place in its unit */
            for (int64_t i = 0; i < a; i++) {
                dst[b * a + i - k + (k & 1) * half + k / 2] = v[i];
                if (++k == u) k = 0;
            }
            for (int64_t s = 0; s < a; s += seg) {  /* the block's part of one group */
                int32_t total = 0;
                for (int64_t i = s; i < s + seg; i++) total += v[i];
                int64_t col = b * a + s, g = col / gs;
                xs[g] = (col % gs ? xs[g] : 0.0f) + d * (float)total;
            }
        }
    }
}

/* x float32 [M, I] -> q (free with free_act8, also after a failure); alloc_act8's
 * conditions. Returns 0, or -1 when out of memory. */
static int quantize_act8(const float *x, int64_t m_rows, int64_t in, int64_t a, int64_t u,
                         int64_t gs, act8 *q) {
    if (alloc_act8(m_rows, in, a, u, gs, q)) return -1;
    act8_rows_of(x, 0, in, gs, q, 0, m_rows);
    return 0;
}
