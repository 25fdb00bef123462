/* W4A8 on AMX-INT8 tiles: 4-bit group-quantized weights (GPTQ, AWQ, compressed-tensors
 * pack-quantized) times inputs quantized to int8 per row and block (act8.h, the same
 * rounding as w4a8_gemm.c), any number of rows:
 *
 *   out[m, o] = sum_b cvt(isum[m, o, b]) * (scale[g(b), o] * d[m, b])     (fused, b in order)
 *             + sum_g offset[g, o] * xs[m, g]                              (fused, g in order)
 *             + bias[o]
 *
 * isum[m, o, b] = sum_{i in block b} q[o, i] * xq[m, i]: one exact int32 per block (the
 * tiles' TDPBSUD, signed inputs x unsigned codes 0..15; at most 256 * 127 * 15, far from
 * overflow). Each output element's float sums run in one order whatever the rows beside it
 * or the thread that computes it: a row's result does not depend on its batch. The vector
 * kernel (w4a8_gemm.c) keeps 8 partial sums a block, so the two give different low bits;
 * a process runs one of them for a weight at every row count (the layout decides).
 *
 * Weight layout (kernels/w4a8_amx.py writes it once, at load; the same bytes as the
 * [O, I / 2] packed rows, only ordered for the tiles): output rows in tiles of 16, each
 * tile's S = I / 64 steps of 64 inputs in a row, 512 bytes a step. A step's B tile (16
 * rows of 64 bytes, VNNI order) holds at row r, bytes 4n..4n+3, output row n's codes for
 * the step's input positions 4r..4r+3, positions in act8's order for units of 64 (the 32
 * even columns, then the 32 odd ones); packed row r' < 8 holds tile row r' in its low
 * nibbles and tile row r' + 8 in its high ones, so a tile unpacks with one AND and one
 * shift a 64-byte row. Scales and offsets come transposed, [G, O]: a group's 16 output
 * rows are one vector.
 *
 * Orientation: the quantized inputs are the A operand (16 input rows of 64 bytes, read in
 * place from act8's buffer with a stride of I bytes; a last partial tile of rows from a
 * zero-padded copy), the unpacked codes B; C[m][n] is a row of 16 outputs, so the float
 * epilogue runs along output columns, one vector a row.
 *
 * Tiles: C 0-3 (rows 0-15 / 16-31 x columns 0-15 / 16-31 of a 32 x 32 block), A 4-5,
 * B 6-7. Up to 32 rows (decode) a block's steps are unpacked as they come; above, a
 * column pair's whole K is unpacked once and every 32-row group passes over it. */
#define _GNU_SOURCE /* syscall() under -std=c11 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>

#define PAR_MIN_WORK (1 << 16)
/* From this many input rows the thread team quantizes them. */
#define PAR_QUANT_ROWS 64
/* Quantized input bytes a pass over the weight keeps in the L2 (prefill). */
#define X_L2_BYTES (512 << 10)

#if defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__AVX512BW__)
#include "act8.h"
#include "amx_tiles.h"
#include "w4a8_out16.h"

/* Linux hands out the tile state only on request, once per process. */
int w4a8_amx_init(void) { return amx_request_tiles(); }

/* One step's 512 packed bytes -> its B tile's 16 rows of codes (1 KB at dst). */
static inline void unpack_step(const uint8_t *src, uint8_t *dst) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int r = 0; r < 8; r++) {
        __m512i v = _mm512_loadu_si512((const void *)(src + 64 * r));
        _mm512_store_si512((void *)(dst + 64 * r), _mm512_and_si512(v, m4));
        _mm512_store_si512((void *)(dst + 64 * (r + 8)),
                           _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
    }
}

/* Steps [s0, s1) of column tiles t and (two_n) t + 1 -> stage: step s's B tiles at
 * stage + (s - base) * 2048, the second tile 1 KB after the first. */
static void unpack_steps(const uint8_t *packed, int64_t steps, int64_t t, int two_n,
                         int64_t s0, int64_t s1, int64_t base, uint8_t *stage) {
    for (int64_t s = s0; s < s1; s++) {
        uint8_t *d = stage + (s - base) * 2048;
        unpack_step(packed + (t * steps + s) * 512, d);
        if (two_n) unpack_step(packed + ((t + 1) * steps + s) * 512, d + 1024);
    }
}

/* A block's steps [s0, s1) (stage: their B tiles from step base on) for input rows from
 * x0 (and x1 = 16 rows on: two_m), stride ldx -> cbuf[32][32] int32 (row m, column n). */
static inline __attribute__((always_inline)) void block(const int8_t *x0, const int8_t *x1,
                                                        int64_t ldx, const uint8_t *stage,
                                                        int64_t s0, int64_t s1, int64_t base,
                                                        int32_t *cbuf, int two_m, int two_n) {
    _tile_zero(0);
    if (two_n) _tile_zero(1);
    if (two_m) _tile_zero(2);
    if (two_m && two_n) _tile_zero(3);
    for (int64_t s = s0; s < s1; s++) {
        const uint8_t *b = stage + (s - base) * 2048;
        _tile_loadd(6, b, 64);
        if (two_n) _tile_loadd(7, b + 1024, 64);
        _tile_loadd(4, x0 + 64 * s, ldx);
        _tile_dpbsud(0, 4, 6);
        if (two_n) _tile_dpbsud(1, 4, 7);
        if (two_m) {
            _tile_loadd(5, x1 + 64 * s, ldx);
            _tile_dpbsud(2, 5, 6);
            if (two_n) _tile_dpbsud(3, 5, 7);
        }
    }
    _tile_stored(0, cbuf, 128);
    if (two_n) _tile_stored(1, cbuf + 16, 128);
    if (two_m) _tile_stored(2, cbuf + 16 * 32, 128);
    if (two_m && two_n) _tile_stored(3, cbuf + 16 * 32 + 16, 128);
}

static void run_block(const int8_t *x0, const int8_t *x1, int64_t ldx, const uint8_t *stage,
                      int64_t s0, int64_t s1, int64_t base, int32_t *cbuf, int two_m,
                      int two_n) {
    if (two_m && two_n)
        block(x0, x1, ldx, stage, s0, s1, base, cbuf, 1, 1);
    else if (two_m)
        block(x0, x1, ldx, stage, s0, s1, base, cbuf, 1, 0);
    else if (two_n)
        block(x0, x1, ldx, stage, s0, s1, base, cbuf, 0, 1);
    else
        block(x0, x1, ldx, stage, s0, s1, base, cbuf, 0, 0);
}

/* The rows of act8's buffer a 16-row tile reads: in place, or (the last, partial tile)
 * from a zero-padded copy. */
static const int8_t *tile_rows(const act8 *q, const int8_t *xpad, int64_t m, int64_t in,
                               int64_t r0) {
    return r0 + 16 <= m ? q->xq + r0 * in : xpad;
}

/* The last, partial tile of rows (m % 16 of them) -> xpad, zero-padded to 16 rows. */
static void pad_rows(const act8 *q, int8_t *xpad, int64_t m, int64_t in) {
    int64_t tail = m % 16;
    if (!tail) return;
    memset(xpad, 0, (size_t)(16 * in));
    memcpy(xpad, q->xq + (m - tail) * in, (size_t)(tail * in));
}

/* x: [m, in], float32 (x_bf16 0) or bfloat16 bits (1); packed: the tile layout above, n
 * output rows; scales_t, offsets_t: float32 [G, n] (w = q * scale + offset); bias: float32
 * [n] or NULL; out: [m, n], float32 (out_bf16 0) or bfloat16 (1: the float32 result
 * rounded as torch's .to() rounds it). Returns 1, or 0 where it did not run (a shape it
 * does not take: n % 16, gs % 64, in % gs; no memory). */
int w4a8_amx_linear(const void *x, int x_bf16, int64_t m, int64_t in, const uint8_t *packed,
                    int64_t n, const float *scales_t, const float *offsets_t, int64_t gs,
                    const float *bias, void *out, int out_bf16, int num_threads) {
    if (m < 1 || n < 16 || n % 16 || gs < 64 || gs % 64 || in % gs) return 0;
    act8 q;
    int64_t a = act8_block(gs); /* a multiple of 64: gs is */
    int8_t *xpad = NULL;
    int64_t tail = m % 16;
    if (alloc_act8(m, in, a, 64, gs, &q) ||
        (tail && !(xpad = aligned_alloc(64, (size_t)(16 * in))))) {
        free_act8(&q);
        free(xpad);
        return 0;
    }
    /* A decode batch is quantized before the team starts, so the team meets at one
     * barrier a call (its end): where a process has more OpenMP threads than cores
     * (two engines), libgomp's waits sleep instead of spinning, and each barrier costs
     * wake-ups. A prefill's rows are quantized by the team. */
    int serial = m < PAR_QUANT_ROWS;
    if (serial) {
        act8_rows_of(x, x_bf16, in, gs, &q, 0, m);
        pad_rows(&q, xpad, m, in);
    }
    int64_t steps = in / 64, per_block = a / 64, blocks = in / a, groups = in / gs;
    int64_t per_group = gs / a, tiles = n / 16, pairs = (tiles + 1) / 2;
    int64_t mpairs = (m + 31) / 32;
    int whole = mpairs > 1; /* prefill: a column pair's whole K unpacked once */
    /* Row pairs a pass over the weight: their quantized inputs stay in the L2 while every
     * column pair reads them (2,048 rows of 1,024 inputs, 2 MB, did not: 3.5x slower). */
    int64_t chunk = X_L2_BYTES / (32 * in);
    if (chunk < 1) chunk = 1;
    int nt = n * in >= PAR_MIN_WORK && num_threads > 1 ? num_threads : 1;
    int failed = 0;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int32_t cbuf[32 * 32] __attribute__((aligned(64)));
        float acc[32 * 32] __attribute__((aligned(64)));
        uint8_t small[4 * 2048] __attribute__((aligned(64))); /* a block's steps (a <= 256) */
        uint8_t *stage = whole ? aligned_alloc(64, (size_t)(steps * 2048)) : small;
        if (!stage) {
#pragma omp atomic write
            failed = 1;
        }
        if (!serial) { /* (the loop's barrier: every row is quantized before any is read) */
#pragma omp for schedule(static)
            for (int64_t r = 0; r < m; r += 16)
                act8_rows_of(x, x_bf16, in, gs, &q, r, r + 16 < m ? r + 16 : m);
#pragma omp single
            pad_rows(&q, xpad, m, in);
        }
        tiles_configure_full(); /* per thread: tile state is per thread */
        /* No barrier between passes: they write other rows, and read only the inputs. */
        for (int64_t c0 = 0; c0 < mpairs; c0 += chunk) {
#pragma omp for schedule(static) nowait
        for (int64_t p = 0; p < pairs; p++) {
            if (!stage) continue;
            int64_t t = 2 * p, n0 = 16 * t;
            int two_n = t + 1 < tiles;
            int cols = two_n ? 32 : 16;
            if (whole) unpack_steps(packed, steps, t, two_n, 0, steps, 0, stage);
            for (int64_t mp = c0; mp < mpairs && mp < c0 + chunk; mp++) {
                int64_t m0 = 32 * mp;
                int rows = (int)(m - m0 < 32 ? m - m0 : 32);
                int two_m = rows > 16;
                const int8_t *x0 = tile_rows(&q, xpad, m, in, m0);
                const int8_t *x1 = two_m ? tile_rows(&q, xpad, m, in, m0 + 16) : NULL;
                for (int r = 0; r < rows; r++)
                    for (int c = 0; c < cols; c += 16)
                        _mm512_store_ps(acc + r * 32 + c, _mm512_setzero_ps());
                for (int64_t b = 0; b < blocks; b++) {
                    int64_t s0 = b * per_block, s1 = s0 + per_block, base = whole ? 0 : s0;
                    if (!whole) unpack_steps(packed, steps, t, two_n, s0, s1, s0, stage);
                    run_block(x0, x1, in, stage, s0, s1, base, cbuf, two_m, two_n);
                    const float *sg = scales_t + (b / per_group) * n + n0;
                    for (int c = 0; c < cols; c += 16) {
                        __m512 sv = _mm512_loadu_ps(sg + c);
                        for (int r = 0; r < rows; r++) {
                            __m512 w = _mm512_mul_ps(sv, _mm512_set1_ps(q.d[(m0 + r) * blocks + b]));
                            __m512 v = _mm512_cvtepi32_ps(_mm512_load_si512(cbuf + r * 32 + c));
                            float *ar = acc + r * 32 + c;
                            _mm512_store_ps(ar, _mm512_fmadd_ps(v, w, _mm512_load_ps(ar)));
                        }
                    }
                }
                for (int r = 0; r < rows; r++) {
                    const float *xs = q.xs + (m0 + r) * groups;
                    for (int c = 0; c < cols; c += 16)
                        w4a8_out16(_mm512_load_ps(acc + r * 32 + c), offsets_t, xs, groups, n,
                                   n0 + c, bias, out, (m0 + r) * n + n0 + c, out_bf16);
                }
            }
        }
        }
        _tile_release();
        if (whole) free(stage);
    }
    free_act8(&q);
    free(xpad);
    return !failed;
}

#else

int w4a8_amx_init(void) { return 0; }
int w4a8_amx_linear(const void *x, int x_bf16, int64_t m, int64_t in, const uint8_t *packed,
                    int64_t n, const float *scales_t, const float *offsets_t, int64_t gs,
                    const float *bias, void *out, int out_bf16, int num_threads) {
    (void)x, (void)x_bf16, (void)m, (void)in, (void)packed, (void)n, (void)scales_t;
    (void)offsets_t, (void)gs, (void)bias, (void)out, (void)out_bf16, (void)num_threads;
    return 0;
}

#endif
