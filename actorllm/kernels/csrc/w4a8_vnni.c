/* W4A8 on AVX512-VNNI vector products, in the AMX kernel's weight layout (w4a8_amx.c) and
 * with its numbers bit for bit: hosts with VNNI but no tiles (AMD Zen 4, Intel Ice Lake)
 * run 4-bit GPTQ / AWQ / compressed-tensors linears through it.
 *
 *   out[m, o] = sum_b cvt(isum[m, o, b]) * (scale[g(b), o] * d[m, b])     (fused, b in order)
 *             + sum_g offset[g, o] * xs[m, g]                              (fused, g in order)
 *             + bias[o]
 *
 * isum[m, o, b] is an exact int32 however it is summed, so this kernel and the tiles agree
 * on every bit, and a row's result does not depend on its batch.
 *
 * Why this layout on vectors: the tile layout's B rows are what vpdpbusd wants with the
 * outputs in lanes: row r of a step holds 16 output rows x 4 input positions, so one
 * vpdpbusd against 4 broadcast input bytes adds 64 products into 16 outputs, and an
 * unpacked 64-byte row serves every input row of the pass. The row-major vector kernel
 * (w4a8_gemm.c) keeps a block's input positions in lanes instead: each input row costs its
 * own unpacking, epilogue and horizontal sum, and 8 rows took longer than bf16 on Zen 4.
 *
 * Layout (w4a8_amx.c): output rows in tiles of 16, each tile's S = I / 64 steps of 512
 * bytes; packed row r' < 8 of a step holds tile row r' (input positions 4r'..4r'+3 of the
 * step, act8's order for units of 64) in its low nibbles and row r' + 8 (positions 32 +
 * 4r'..) in its high ones, output row n at bytes 4n..4n+3. Scales and offsets [G, O].
 *
 * Work (vnni_passes.h): OpenMP over column tiles, one or two a pass; a pass takes up to 8
 * input rows against its tiles' steps, block by block, the integer sums in registers (two
 * chains a sum up to 4 rows, so one row's products are not one dependent chain), the float
 * epilogue a block. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define PAR_MIN_WORK (1 << 16)
/* From this many input rows the thread team quantizes them. */
#define PAR_QUANT_ROWS 64

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512F__) && \
    !defined(NO_W4A8_VNNI)
#include <immintrin.h>
#include "act8.h"
#include "prefetch_ahead.h"
#include "vnni_passes.h"
#include "w4a8_out16.h"

int w4a8_vnni_built(void) { return 1; }

/* Input bytes p[0..3] in every 32-bit lane. */
static inline __m512i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* Steps [s0, s1) of tiles w0 (and w1: two_n) against mb input rows from xq (stride in)
 * -> isum[2 * mi + c]: the exact int32 sums of row mi, tile c. */
static inline __attribute__((always_inline)) void block_sums(
    const uint8_t *w0, const uint8_t *w1, const int8_t *xq, int64_t in, const int mb,
    const int two_n, int64_t s0, int64_t s1, __m512i *isum) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const int split = mb <= 4; /* low and high rows on their own chains */
    __m512i a[2][VNNI_MR][2];
#pragma GCC unroll 8
    for (int mi = 0; mi < mb; mi++)
        a[0][mi][0] = a[0][mi][1] = a[1][mi][0] = a[1][mi][1] = _mm512_setzero_si512();
    for (int64_t s = s0; s < s1; s++) {
        const uint8_t *p0 = w0 + 512 * s, *p1 = w1 + 512 * s;
        prefetch_ahead(p0, 512);
        if (two_n) prefetch_ahead(p1, 512);
        const int8_t *xs = xq + 64 * s;
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
            __m512i v0 = _mm512_loadu_si512((const void *)(p0 + 64 * r));
            __m512i lo0 = _mm512_and_si512(v0, m4);
            __m512i hi0 = _mm512_and_si512(_mm512_srli_epi16(v0, 4), m4);
            __m512i lo1 = lo0, hi1 = hi0;
            if (two_n) {
                __m512i v1 = _mm512_loadu_si512((const void *)(p1 + 64 * r));
                lo1 = _mm512_and_si512(v1, m4);
                hi1 = _mm512_and_si512(_mm512_srli_epi16(v1, 4), m4);
            }
#pragma GCC unroll 8
            for (int mi = 0; mi < mb; mi++) {
                __m512i xl = bcast4(xs + mi * in + 4 * r);
                __m512i xh = bcast4(xs + mi * in + 32 + 4 * r);
                a[0][mi][0] = _mm512_dpbusd_epi32(a[0][mi][0], lo0, xl);
                a[split][mi][0] = _mm512_dpbusd_epi32(a[split][mi][0], hi0, xh);
                if (two_n) {
                    a[0][mi][1] = _mm512_dpbusd_epi32(a[0][mi][1], lo1, xl);
                    a[split][mi][1] = _mm512_dpbusd_epi32(a[split][mi][1], hi1, xh);
                }
            }
        }
    }
#pragma GCC unroll 8
    for (int mi = 0; mi < mb; mi++)
        for (int c = 0; c < 2; c++)
            isum[2 * mi + c] = split ? _mm512_add_epi32(a[0][mi][c], a[1][mi][c]) : a[0][mi][c];
}

/* What one pass needs beside its rows and tiles. */
typedef struct {
    const void *x; /* the input rows (float32, or bfloat16 bits: x_bf16) */
    int x_bf16;
    act8 *q;
    const uint8_t *packed;
    const float *scales_t, *offsets_t, *bias;
    void *out;
    int64_t in, n, steps, per_block, blocks, per_group, groups, gs;
    int out_bf16;
} job;

/* Input rows m0 .. m0 + mb - 1 against column tiles t (and t + 1: two_n) -> out. The
 * float operations are w4a8_amx.c's, in its order. */
static inline __attribute__((always_inline)) void pass(const job *j, int64_t t, int64_t m0,
                                                       const int mb, const int two_n) {
    const int64_t in = j->in, n = j->n, n0 = 16 * t;
    const uint8_t *w0 = j->packed + t * j->steps * 512, *w1 = w0 + j->steps * 512;
    const int8_t *xq = j->q->xq + m0 * in;
    const float *d = j->q->d + m0 * j->blocks;
    __m512 acc[VNNI_MR][2];
    __m512i isum[2 * VNNI_MR];
#pragma GCC unroll 8
    for (int mi = 0; mi < mb; mi++) acc[mi][0] = acc[mi][1] = _mm512_setzero_ps();
    for (int64_t b = 0; b < j->blocks; b++) {
        int64_t s0 = b * j->per_block;
        block_sums(w0, w1, xq, in, mb, two_n, s0, s0 + j->per_block, isum);
        const float *sg = j->scales_t + (b / j->per_group) * n + n0;
        for (int c = 0; c < 1 + two_n; c++) {
            __m512 sv = _mm512_loadu_ps(sg + 16 * c);
#pragma GCC unroll 8
            for (int mi = 0; mi < mb; mi++) {
                __m512 w = _mm512_mul_ps(sv, _mm512_set1_ps(d[mi * j->blocks + b]));
                acc[mi][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[2 * mi + c]), w, acc[mi][c]);
            }
        }
    }
    for (int mi = 0; mi < mb; mi++) {
        const float *xs = j->q->xs + (m0 + mi) * j->groups;
        for (int c = 0; c < 1 + two_n; c++) {
            int64_t col = n0 + 16 * c;
            w4a8_out16(acc[mi][c], j->offsets_t, xs, j->groups, n, col, j->bias, j->out,
                       (m0 + mi) * n + col, j->out_bf16);
        }
    }
}

VNNI_RUN_PASS(run_pass, pass, job)

/* Input rows [r0, r1) quantized (the team, for a prefill). */
static void quantize(const void *job_, int64_t r0, int64_t r1) {
    const job *j = (const job *)job_;
    act8_rows_of(j->x, j->x_bf16, j->in, j->gs, j->q, r0, r1);
}

/* w4a8_amx_linear's arguments and results (x float32 or bfloat16 [m, in]; packed the tile
 * layout, n output rows; scales_t, offsets_t float32 [G, n]; bias float32 [n] or NULL; out
 * [m, n] float32 or bfloat16). Returns 1, or 0 where it did not run. */
int w4a8_vnni_linear(const void *x, int x_bf16, int64_t m, int64_t in, const uint8_t *packed,
                     int64_t n, const float *scales_t, const float *offsets_t, int64_t gs,
                     const float *bias, void *out, int out_bf16, int num_threads) {
    if (m < 1 || n < 16 || n % 16 || gs < 64 || gs % 64 || in % gs) return 0;
    act8 q;
    int64_t a = act8_block(gs); /* a multiple of 64: gs is */
    if (alloc_act8(m, in, a, 64, gs, &q)) {
        free_act8(&q);
        return 0;
    }
    /* A decode batch is quantized before the team starts (one barrier a call, as
     * w4a8_amx.c); a prefill's rows by the team. */
    int serial = m < PAR_QUANT_ROWS;
    if (serial) act8_rows_of(x, x_bf16, in, gs, &q, 0, m);
    job j = {x, x_bf16, &q, packed, scales_t, offsets_t, bias, out, in, n, in / 64, a / 64,
             in / a, gs / a, in / gs, gs, out_bf16};
    int nt = n * in >= PAR_MIN_WORK && num_threads > 1 ? num_threads : 1;
    vnni_passes(&j, run_pass, serial ? NULL : quantize, 16, m, n, in, nt);
    free_act8(&q);
    return 1;
}

#else

int w4a8_vnni_built(void) { return 0; }
int w4a8_vnni_linear(const void *x, int x_bf16, int64_t m, int64_t in, const uint8_t *packed,
                     int64_t n, const float *scales_t, const float *offsets_t, int64_t gs,
                     const float *bias, void *out, int out_bf16, int num_threads) {
    (void)x, (void)x_bf16, (void)m, (void)in, (void)packed, (void)n, (void)scales_t;
    (void)offsets_t, (void)gs, (void)bias, (void)out, (void)out_bf16, (void)num_threads;
    return 0;
}

#endif
