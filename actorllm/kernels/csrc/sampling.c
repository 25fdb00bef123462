/* Tempered inverse-CDF sampling of unfiltered rows in one native pass per row (issue #17):
 * the torch path of kernels/sampling.py (amax, addcmul, exp_, block sums, cumsum,
 * searchsorted, gather, cumsum, searchsorted: five [B, V] passes and a [B, V] temporary)
 * as two reads of the row and no [B, V] writes.
 *
 * Per row, logits x [V] (float32, or bfloat16 widened), rt = 1 / temperature, u in [0, 1):
 *   1. m = max x; shift = -(m * rt)            (torch: amax, mul_, neg_)
 *   2. w_i = exp(x_i * rt + shift); block sums s_b over blocks of CDF_BLOCK tokens, kept in
 *      a [V / CDF_BLOCK] array; their running sum is the block cdf, total = its last entry
 *   3. target = min(u * total, total * (1 - 2^-20)); the block: the first whose cdf
 *      exceeds target (zero-mass blocks are skipped, as searchsorted(right=True) does)
 *   4. the block's weights are recomputed, summed in order, and the token is the first
 *      whose running sum exceeds target - (mass before the block), held strictly inside
 *      the block's own sum.
 * The same arithmetic as the torch path but for two things: the exp (a ~1 ulp polynomial,
 * exp_f32.h, not Sleef's) and the order a block's 256 weights are summed in; a draw can
 * move to the neighbouring token only when u lands within rounding of a boundary.
 *
 * Threads: OpenMP over rows, torch's libgomp (same soname) with torch's team size, only
 * when the call has enough work (see elementwise.c on why a small call never opens a
 * region).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "bf16_rows.h"
#include "exp_f32.h"

#define CDF_BLOCK 256 /* kernels/sampling.py's CDF_BLOCK */
#define PAR_MIN_ELEMS (1 << 18)
#define STRICTLY_BELOW (1.0f - 0x1p-20f) /* 1 - 2^-20 */

/* w[0:n] = exp(x[0:n] * rt + shift) widened from the row's dtype; returns their sum. */
static inline float block_weights(const void *row, int bf16, int64_t off, int n, float rt,
                                  float shift, float *restrict w) {
    float s = 0.0f;
    if (bf16) {
        const uint16_t *x = (const uint16_t *)row + off;
#pragma omp simd reduction(+ : s)
        for (int e = 0; e < n; e++) {
            w[e] = exp_f32(bf16_to_f32(x[e]) * rt + shift);
            s += w[e];
        }
    } else {
        const float *x = (const float *)row + off;
#pragma omp simd reduction(+ : s)
        for (int e = 0; e < n; e++) {
            w[e] = exp_f32(x[e] * rt + shift);
            s += w[e];
        }
    }
    return s;
}

static float row_max(const void *row, int bf16, int64_t v) {
    float m = -INFINITY;
    if (bf16) {
        const uint16_t *x = (const uint16_t *)row;
#pragma omp simd reduction(max : m)
        for (int64_t e = 0; e < v; e++) {
            float xe = bf16_to_f32(x[e]);
            m = xe > m ? xe : m;
        }
    } else {
        const float *x = (const float *)row;
#pragma omp simd reduction(max : m)
        for (int64_t e = 0; e < v; e++) m = x[e] > m ? x[e] : m; /* fmaxf: a libm call */
    }
    return m;
}

/* The first index holding m (0 when none does: a NaN row). */
static int64_t first_index_of(const void *row, int bf16, int64_t v, float m) {
    for (int64_t e = 0; e < v; e++) {
        float xe = bf16 ? bf16_to_f32(((const uint16_t *)row)[e]) : ((const float *)row)[e];
        if (xe == m) return e;
    }
    return 0;
}

/* One row: the token index. cdf: scratch of ceil(v / CDF_BLOCK) floats. */
static int64_t sample_row(const void *row, int bf16, int64_t v, float rt, float u,
                          float *restrict cdf) {
    int64_t nb = (v + CDF_BLOCK - 1) / CDF_BLOCK;
    float w[CDF_BLOCK];
    float m = row_max(row, bf16, v);
    float shift = -(m * rt);
    float run = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int n = (int)(v - b * CDF_BLOCK < CDF_BLOCK ? v - b * CDF_BLOCK : CDF_BLOCK);
        run += block_weights(row, bf16, b * CDF_BLOCK, n, rt, shift, w);
        cdf[b] = run;
    }
    float total = cdf[nb - 1];
    if (!(total > 0.0f) || isinf(total)) /* all -inf, an inf or a NaN: no usable mass */
        return first_index_of(row, bf16, v, m);
    float target = fminf(u * total, total * STRICTLY_BELOW);
    int64_t blk = 0;
    while (blk < nb - 1 && !(cdf[blk] > target)) blk++;
    float before = blk > 0 ? cdf[blk - 1] : 0.0f;
    int n = (int)(v - blk * CDF_BLOCK < CDF_BLOCK ? v - blk * CDF_BLOCK : CDF_BLOCK);
    block_weights(row, bf16, blk * CDF_BLOCK, n, rt, shift, w);
    float inner = 0.0f;
    for (int e = 0; e < n; e++) inner += w[e]; /* in order: the block's cdf end */
    float rest = fminf(target - before, inner * STRICTLY_BELOW);
    float acc = 0.0f;
    int j = 0;
    for (; j < n - 1; j++) {
        acc += w[j];
        if (acc > rest) break;
    }
    return blk * CDF_BLOCK + j;
}

/* logits [b, v] (row stride rs elements; float32, or bfloat16 with bf16), rt [b] float32
 * (1 / temperature, > 0), u [b] float32 in [0, 1) -> out [b] int64. Returns -1 on bad
 * arguments or when scratch cannot be allocated (nothing written then). */
int sample_tempered(const void *logits, int64_t rs, int bf16, const float *rt, const float *u,
                    int64_t *out, int64_t b, int64_t v, int num_threads) {
    if (v <= 0 || b < 0) return -1;
    int64_t nb = (v + CDF_BLOCK - 1) / CDF_BLOCK;
    int nt = b * v >= PAR_MIN_ELEMS && num_threads > 1 ? num_threads : 1;
    if (nt > b) nt = 1; /* never a team of another size than torch's (elementwise.c) */
    float *scratch = malloc(sizeof(float) * (size_t)(nb * nt));
    if (scratch == NULL) return -1;
    size_t esize = bf16 ? 2 : 4;
    if (nt == 1) {
        for (int64_t i = 0; i < b; i++)
            out[i] = sample_row((const char *)logits + i * rs * esize, bf16, v, rt[i], u[i],
                                scratch);
    } else {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int c = 0; c < nt; c++) {
            for (int64_t i = b * c / nt; i < b * (c + 1) / nt; i++)
                out[i] = sample_row((const char *)logits + i * rs * esize, bf16, v, rt[i],
                                    u[i], scratch + c * nb);
        }
    }
    free(scratch);
    return 0;
}
