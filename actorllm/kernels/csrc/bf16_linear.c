/* bfloat16 linear for few rows on a CPU without bf16 dot products (AVX2 / AVX-512F hosts:
 * AMD Zen 2/3, Intel before Cooper Lake): the weight is read as bfloat16, half the bytes of
 * the float32 copy oneDNN would need there, and widened in registers.
 *
 *   out[m, o] = bf16(sum_i x[m, i] * w[o, i] + bias[o])
 *
 * x bf16 [M, I], w bf16 [O, I], both row-major; bias float32 [O] or NULL; out bf16 [M, O].
 * Products are exact (bf16 x bf16 fits float32), summed in float32, rounded to bfloat16 once
 * (nearest even): the arithmetic of a bf16 GEMM.
 *
 * Batch invariant: every (m, o) is one 8-lane float32 accumulator walked over i in order,
 * its lanes summed in one fixed order, whatever M is and whichever tile the pair lands in.
 * A row's output is the same bits whether it runs alone (a decode step of one request) or
 * beside others (a speculative verify step of k + 1 rows, a batch): speculative decoding
 * under greedy sampling verifies with the same numbers it would have decoded with.
 *
 * Tiles: 4 output rows x 1 input row, or 2 x up to 5 (at most 10 accumulators beside the
 * widened weight vectors in the 16 ymm registers); each weight vector feeds every row of
 * the tile, each x vector every output. The weight rows of a tile stay in L1 across the
 * row tiles.
 *
 * Threads: OpenMP over output tiles, only when the call has enough work to pay for waking
 * the team (elementwise.c's rule: a region of another team size makes libgomp recreate
 * torch's pool).
 */
#include <stdint.h>
#include <stdlib.h>

#include "bf16_rows.h"

#define PAR_MIN_WORK (1 << 16)
/* Weight values read ahead of the product (8 KiB: the next tiles' rows when rows are
 * short). The tiles read several rows at once, which the hardware prefetcher follows less
 * well than one stream: a 2-core AMD EPYC VM, [151936 x 1024] LM head, 5 rows: 36.8 -> 23.4 ms;
 * 1 row: 18.5 -> 14.6 ms. A prefetch past the end of the weight never faults. */
#define PREFETCH 4096
#define MAX_ACC 10 /* accumulators a tile keeps in the 16 ymm registers */

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include "hsum8.h"

/* Widening 16 bf16 weights takes one load and two unpacks with zero (bf16 in the high
 * half of each 32-bit lane is the float32 value), which leave the columns in the order
 * (0-3, 8-11) and (4-7, 12-15): x is widened once per call into that same order, so the
 * products pair up as they should. */
static void widen_x(const uint16_t *x, int64_t n_rows, int64_t in, float *xf) {
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t k = 0; k < in; k += 16) {
            const uint16_t *s = x + r * in + k;
            float *d = xf + r * in + k;
            for (int j = 0; j < 4; j++) {
                d[j] = bf16_to_f32(s[j]);
                d[4 + j] = bf16_to_f32(s[8 + j]);
                d[8 + j] = bf16_to_f32(s[4 + j]);
                d[12 + j] = bf16_to_f32(s[12 + j]);
            }
        }
}

/* Keeps v in a register: without it the compiler folds each use of an x vector into its
 * FMA as a memory operand, one load per FMA, and loads are what limits this loop. */
#define IN_REG(v) __asm__("" : "+x"(v))

/* Half a 16-column block: the weights widened by `unpack`, then one FMA per (output, row)
 * pair, each x vector loaded once for every output of the tile. */
#define HALF(unpack, xoff)                                                              \
    do {                                                                              \
        __m256 wv[4];                                                                 \
        for (int a = 0; a < OT; a++) {                                                \
            __m256i v = _mm256_loadu_si256((const __m256i *)(wr[a] + k));             \
            wv[a] = _mm256_castsi256_ps(unpack(zero, v));                             \
        }                                                                             \
        for (int b = 0; b < MB; b++) {                                                \
            __m256 xv = _mm256_loadu_ps(xf + (m + b) * in + k + (xoff));              \
            IN_REG(xv);                                                               \
            for (int a = 0; a < OT; a++)                                              \
                acc[a * MB + b] = _mm256_fmadd_ps(wv[a], xv, acc[a * MB + b]);        \
        }                                                                             \
    } while (0)

/* ot (<= OT) output rows from o x MB input rows from m. OT and MB are constants at each
 * call site, so the compiler keeps the OT * MB accumulators in registers. Every pair is
 * one accumulator taking the low then the high half of each 16-column block. */
static inline __attribute__((always_inline)) void tile(
    const float *xf, int64_t m, const int MB, int64_t in, const uint16_t *w, int64_t o,
    const int OT, int ot, const float *bias, uint16_t *out, int64_t out_n) {
    const __m256i zero = _mm256_setzero_si256();
    __m256 acc[MAX_ACC];
    for (int t = 0; t < OT * MB; t++) acc[t] = _mm256_setzero_ps();
    const uint16_t *wr[4];
    for (int a = 0; a < OT; a++) wr[a] = w + (o + (a < ot ? a : 0)) * in;
    for (int64_t k = 0; k < in; k += 16) {
        for (int a = 0; a < OT; a++)
            _mm_prefetch((const char *)(wr[a] + k + PREFETCH), _MM_HINT_T0);
        HALF(_mm256_unpacklo_epi16, 0);
        HALF(_mm256_unpackhi_epi16, 8);
    }
    for (int a = 0; a < ot; a++) {
        float bo = bias ? bias[o + a] : 0.0f;
        for (int b = 0; b < MB; b++)
            out[(m + b) * out_n + o + a] = f32_to_bf16(hsum8(acc[a * MB + b]) + bo);
    }
}

/* Rows [0, m_rows) of outputs [o, o + ot). One row: 4 outputs a tile (4 accumulator
 * chains; the loop is bound by DRAM there). More: 2 outputs x up to 5 rows, the rows
 * split into near-equal tiles (wider tiles spill or wait on loads). Measured on a 2-core
 * AMD EPYC VM that reports family 23 model 1 (Zen 1 class: a 256-bit FMA is two 128-bit
 * halves, one a cycle): with its weights in L1 the 2 x 5 tile runs 1.65-1.9 G vector
 * FMAs/s, 70-80 % of the 2.3 G/s an FMA loop of independent chains reaches there. */
static void out_tile(const float *xf, int64_t m_rows, int64_t in, const uint16_t *w,
                     int64_t o, int ot, const float *bias, uint16_t *out, int64_t out_n) {
    if (m_rows == 1) {
        tile(xf, 0, 1, in, w, o, 4, ot, bias, out, out_n);
        return;
    }
    int64_t tiles = (m_rows + 4) / 5;
    for (int o2 = 0; o2 < ot; o2 += 2) {
        int n = ot - o2 < 2 ? ot - o2 : 2;
        for (int64_t t = 0; t < tiles; t++) {
            int64_t m = m_rows * t / tiles, mb = m_rows * (t + 1) / tiles - m;
            switch (mb) {
            case 5: tile(xf, m, 5, in, w, o + o2, 2, n, bias, out, out_n); break;
            case 4: tile(xf, m, 4, in, w, o + o2, 2, n, bias, out, out_n); break;
            case 3: tile(xf, m, 3, in, w, o + o2, 2, n, bias, out, out_n); break;
            case 2: tile(xf, m, 2, in, w, o + o2, 2, n, bias, out, out_n); break;
            default: tile(xf, m, 1, in, w, o + o2, 2, n, bias, out, out_n); break;
            }
        }
    }
}

/* Returns 0, or -1 when these shapes are not taken (I not a multiple of 16) or memory ran
 * out: the caller falls back. */
int bf16_linear(const uint16_t *x, int64_t m_rows, int64_t in, const uint16_t *w,
                int64_t out_n, const float *bias, uint16_t *out, int num_threads) {
    if (in % 16 || m_rows <= 0) return -1;
    float *xf = malloc(sizeof(float) * (size_t)(m_rows * in));
    if (!xf) return -1;
    widen_x(x, m_rows, in, xf);
    int64_t tiles = (out_n + 3) / 4;
    int nt = out_n * in >= PAR_MIN_WORK && num_threads > 1 ? num_threads : 1;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t t = 0; t < tiles; t++) {
        int64_t o = t * 4;
        int ot = out_n - o < 4 ? (int)(out_n - o) : 4;
        out_tile(xf, m_rows, in, w, o, ot, bias, out, out_n);
    }
    free(xf);
    return 0;
}
#else
int bf16_linear(const uint16_t *x, int64_t m_rows, int64_t in, const uint16_t *w,
                int64_t out_n, const float *bias, uint16_t *out, int num_threads) {
    (void)x, (void)m_rows, (void)in, (void)w, (void)out_n, (void)bias, (void)out;
    (void)num_threads;
    return -1; /* no AVX2 + FMA in this build: the caller keeps its torch path */
}
#endif
