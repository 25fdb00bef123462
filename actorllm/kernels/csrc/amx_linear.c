/* bfloat16 linears of few rows on AMX tiles: out[M, N] = x[M, K] @ w[N, K]^T (+ bias).
 *
 * A decode step multiplies 1-32 rows by each weight: the product is bound by reading the
 * weight once, at the memory's bandwidth. oneDNN's prepacked bf16 matmul reads it at half
 * that at M = 32 on an AMX host (7-8 of 17 GB/s): this kernel streams a weight packed for
 * the tiles (amx_pack) front to back once per call, 32 output columns at a time, keeping
 * x in the L1/L2 and every partial sum in the tile registers.
 *
 * Layout of the packed weight (uint16 bf16 bits): blocks of 32 columns (N padded with
 * zero columns to a multiple of 32), each holding K / 32 steps of two B tiles of 16 rows x
 * 64 bytes, in the "VNNI" order TDPBF16PS reads: tile t, row r, element 2 n + j holds
 * w[32 b + 16 t + n][32 s + 2 r + j]. One block is 64 K bytes, contiguous, read once.
 *
 * Tiles: C00 C01 C10 C11 (0-3) accumulate rows 0-15 / 16-31 x columns 0-15 / 16-31 in
 * float32; A0 A1 (4, 5) hold 16 rows x 32 k of x; B0 B1 (6, 7) the two weight tiles.
 * Each product is exact and summed in float32 (TDPBF16PS), rounded to bfloat16 once at the
 * output (round to nearest even), as a bf16 GEMM does.
 */
#define _GNU_SOURCE /* syscall() under -std=c11 */
#include <stdint.h>
#include <string.h>
#include <immintrin.h>

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__)
#include "amx_tiles.h"

/* Linux hands out the tile state only on request, once per process. */
int amx_init(void) { return amx_request_tiles(); }

/* w: [N, K] bf16 row-major -> packed (N rounded up to 32) x K, see the header. */
void amx_pack(const uint16_t *w, int64_t n, int64_t k, uint16_t *packed) {
    int64_t blocks = (n + 31) / 32, steps = k / 32;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < blocks; b++) {
        uint16_t *dst = packed + b * steps * 1024;
        for (int64_t s = 0; s < steps; s++)
            for (int t = 0; t < 2; t++)
                for (int r = 0; r < 16; r++)
                    for (int c = 0; c < 16; c++) {
                        int64_t col = 32 * b + 16 * t + c;
                        for (int j = 0; j < 2; j++) {
                            uint16_t v = col < n ? w[col * k + 32 * s + 2 * r + j] : 0;
                            dst[s * 1024 + t * 512 + r * 32 + 2 * c + j] = v;
                        }
                    }
    }
}

static void configure(int m0, int m1) {
    const int rows[8] = {m0, m0, m1, m1, m0, m1, 16, 16};
    tiles_configure(rows);
}

#ifndef PREFETCH_AHEAD
#define PREFETCH_AHEAD 8192 /* uint16s: 8 steps (16 KB) ahead */
#endif

/* One step's 2 KB of weight (32 lines) asked for ahead of use. */
static inline void prefetch_step(const uint16_t *p) {
#ifndef NO_PREFETCH
    for (int i = 0; i < 32; i++) _mm_prefetch((const char *)(p + 32 * i), _MM_HINT_T0);
#else
    (void)p;
#endif
}

/* 32 output columns of up to 32 rows (two: rows 16-31 present): acc[32][32] float32 (row
 * stride 32). pf: NULL to prefetch this block's stream ahead; else the next block, of
 * which this pass asks for the steps s with s % every == phase (the passes over one block
 * share its prefetch). Called with a constant `two`: each caller gets its own loop.
 *
 * The tile registers are not renamed: a load into a tile waits until every earlier
 * product reading it is done, and the tiles issue in program order. So each load sits
 * right after the last product that reads its tile, and the next step's A0 and B0 are
 * loaded while this step's last products run (A0 B0 -> C00, A1 B0 -> C10, A0 B1 -> C01,
 * A1 B1 -> C11). Loading all four tiles before the four products (the plain order) left
 * the multiplier idle during every load: 19-20 GB/s of weight at 32 rows on a 2-core
 * Xeon (AMX) VM, against 22.5-24 GB/s in this order; M = 64-128 gain 10-15 %, M = 1 is
 * unchanged. */
static inline __attribute__((always_inline)) void block(const uint16_t *x, int64_t k,
                                                        const uint16_t *wb, float *acc,
                                                        const uint16_t *pf, int every,
                                                        int phase, int two) {
    _tile_zero(0);
    _tile_zero(1);
    if (two) {
        _tile_zero(2);
        _tile_zero(3);
    }
    int64_t stride = k * 2, steps = k / 32;
    _tile_loadd(4, x, stride); /* A0: rows 0-15 of step 0 */
    _tile_loadd(6, wb, 64);    /* B0: columns 0-15 of step 0 */
    for (int64_t s = 0; s < steps; s++) {
        const uint16_t *bt = wb + s * 1024;
        int more = s + 1 < steps;
        if (!pf)
            prefetch_step(bt + PREFETCH_AHEAD);
        else if (s % every == phase)
            prefetch_step(pf + s * 1024);
        _tile_dpbf16ps(0, 4, 6);
        if (two) _tile_loadd(5, x + 16 * k + 32 * s, stride); /* A1 */
        _tile_loadd(7, bt + 512, 64);                         /* B1 */
        if (two) _tile_dpbf16ps(2, 5, 6);
        if (more) _tile_loadd(6, bt + 1024, 64); /* B0 of step s + 1 */
        _tile_dpbf16ps(1, 4, 7);
        if (more) _tile_loadd(4, x + 32 * (s + 1), stride); /* A0 of step s + 1 */
        if (two) _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, acc, 128);
    _tile_stored(1, acc + 16, 128);
    if (two) {
        _tile_stored(2, acc + 16 * 32, 128);
        _tile_stored(3, acc + 16 * 32 + 16, 128);
    }
}

/* acc rows -> bf16 out columns [c0, c0 + cols) (+ bias), round to nearest even. */
static inline void emit(const float *acc, int m, int cols, const uint16_t *bias, int64_t c0,
                        uint16_t *out, int64_t ldo) {
    __mmask16 lo = (__mmask16)(cols >= 16 ? 0xFFFF : (1u << cols) - 1);
    __mmask16 hi = (__mmask16)(cols >= 32 ? 0xFFFF : cols > 16 ? (1u << (cols - 16)) - 1 : 0);
    __m512 b0 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();
    if (bias) {
        b0 = _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lo, bias + c0)), 16));
        b1 = _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(hi, bias + c0 + 16)), 16));
    }
    for (int r = 0; r < m; r++) {
        __m512 v0 = _mm512_add_ps(_mm512_loadu_ps(acc + r * 32), b0);
        __m512 v1 = _mm512_add_ps(_mm512_loadu_ps(acc + r * 32 + 16), b1);
        __m256i h0 = (__m256i)_mm512_cvtneps_pbh(v0);
        __m256i h1 = (__m256i)_mm512_cvtneps_pbh(v1);
        _mm256_mask_storeu_epi16(out + r * ldo + c0, lo, h0);
        if (hi) _mm256_mask_storeu_epi16(out + r * ldo + c0 + 16, hi, h1);
    }
}

/* Weight bytes a thread keeps in its L2 while every 32-row block of x passes over them,
 * where x is too large for the L2 itself (prefill): each weight byte then leaves memory
 * once per call and x once per group. */
#define GROUP_BYTES (1 << 20)
/* Up to this size x stays in the L2 (a decode batch): the weight streams block by block,
 * each block read from memory once for all of x's row blocks. */
#define X_L2_BYTES (1 << 20)

static inline void run_block(const uint16_t *xr, int rows, int64_t k, const uint16_t *wb,
                             float *acc, const uint16_t *pf, int every, int phase) {
    if (rows > 16)
        block(xr, k, wb, acc, pf, every, phase, 1);
    else
        block(xr, k, wb, acc, pf, every, phase, 0);
}

static inline void set_rows(int rows, int *configured) {
    if (rows != *configured) {
        configure(rows < 16 ? rows : 16, rows < 16 ? 0 : rows - 16);
        *configured = rows;
    }
}

/* x: [m, k] bf16 (row stride k, k % 32 == 0); packed from amx_pack(w, n, k); bias: [n]
 * bf16 or NULL; out: [m, n] bf16 (row stride ldo). Returns 0 where it did not run (a
 * shape it does not take). */
int amx_linear(const uint16_t *x, int64_t m, int64_t k, const uint16_t *packed, int64_t n,
               const uint16_t *bias, uint16_t *out, int64_t ldo, int nt) {
    if (m < 1 || k < 32 || k % 32 != 0) return 0;
    int64_t blocks = (n + 31) / 32, block_elems = (k / 32) * 1024;
    int passes = (int)((m + 31) / 32);
    int stream = m <= 32 || m * k * 2 <= X_L2_BYTES;
    int64_t per_group = stream ? 1 : GROUP_BYTES / (block_elems * 2);
    if (per_group < 1) per_group = 1;
    int64_t groups = (blocks + per_group - 1) / per_group;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        float acc[32 * 32] __attribute__((aligned(64)));
        int configured = -1; /* rows of the current tile configuration */
#pragma omp for schedule(static)
        for (int64_t g = 0; g < groups; g++) {
            int64_t b0 = g * per_group, b1 = b0 + per_group < blocks ? b0 + per_group : blocks;
            if (stream) { /* b0 alone: every row block over it, prefetching b0 + 1 */
                const uint16_t *wb = packed + b0 * block_elems;
                const uint16_t *next = passes > 1 && b0 + 1 < blocks ? wb + block_elems : 0;
                int cols = (int)(n - 32 * b0 < 32 ? n - 32 * b0 : 32);
                for (int p = 0; p < passes; p++) {
                    int rows = (int)(m - 32 * p < 32 ? m - 32 * p : 32);
                    set_rows(rows, &configured);
                    run_block(x + 32 * p * k, rows, k, wb, acc, next, passes, p);
                    emit(acc, rows, cols, bias, 32 * b0, out + 32 * p * ldo, ldo);
                }
                continue;
            }
            for (int64_t r0 = 0; r0 < m; r0 += 32) {
                int rows = (int)(m - r0 < 32 ? m - r0 : 32);
                set_rows(rows, &configured);
                for (int64_t b = b0; b < b1; b++) {
                    int cols = (int)(n - 32 * b < 32 ? n - 32 * b : 32);
                    run_block(x + r0 * k, rows, k, packed + b * block_elems, acc, 0, 1, 0);
                    emit(acc, rows, cols, bias, 32 * b, out + r0 * ldo, ldo);
                }
            }
        }
        if (configured >= 0) _tile_release();
    }
    return 1;
}

#else

int amx_init(void) { return 0; }
void amx_pack(const uint16_t *w, int64_t n, int64_t k, uint16_t *packed) {
    (void)w, (void)n, (void)k, (void)packed;
}
int amx_linear(const uint16_t *x, int64_t m, int64_t k, const uint16_t *packed, int64_t n,
               const uint16_t *bias, uint16_t *out, int64_t ldo, int nt) {
    (void)x, (void)m, (void)k, (void)packed, (void)n, (void)bias, (void)out, (void)ldo, (void)nt;
    return 0;
}

#endif
