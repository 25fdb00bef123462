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

/* x float32 [M, I] -> q (free with free_act8, also after a failure). A is at most 256;
 * I a multiple of A and of gs, and the larger of A and gs a multiple of the other.
 * Returns 0, or -1 when out of memory. */
static int quantize_act8(const float *x, int64_t m_rows, int64_t in, int64_t a, int64_t u,
                         int64_t gs, act8 *q) {
    q->a = a, q->u = u;
    int64_t blocks = in / a, groups = in / gs, seg = a < gs ? a : gs, half = u / 2;
    q->xq = malloc((size_t)(m_rows * in));
    q->d = malloc(sizeof(float) * (size_t)(m_rows * blocks));
    q->xs = malloc(sizeof(float) * (size_t)(m_rows * groups));
    if (!q->xq || !q->d || !q->xs) return -1;
    for (int64_t m = 0; m < m_rows; m++) {
        int8_t *dst = q->xq + m * in;
        float *xs = q->xs + m * groups;
        for (int64_t b = 0; b < blocks; b++) {
            const float *xb = x + m * in + b * a;
            float amax = 0.0f;
            for (int64_t i = 0; i < a; i++) {
                float v = fabsf(xb[i]);
                amax = v > amax ? v : amax;
            }
            float inv = amax > 0.0f ? 127.0f / amax : 0.0f, d = amax / 127.0f;
            q->d[m * blocks + b] = d;
            int8_t v[256];  /* the block in column order (a <= 256): a loop that vectorises */
            for (int64_t i = 0; i < a; i++) v[i] = (int8_t)nearbyintf(xb[i] * inv);
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
    return 0;
}
