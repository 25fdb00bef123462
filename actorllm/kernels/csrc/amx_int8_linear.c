/* W8A8 int8 linears on AMX tiles: out[M, N] = ((x_q @ w^T)[m, n] * sx[m]) * sw[n] (+ bias),
 * x_q the input rows quantized to int8 here (one symmetric scale sx[m] = amax / 127 per
 * row, round half to even), w the int8 weight [N, K] as the checkpoint has it.
 *
 * Orientation: the weight is the A operand (the tile's M side: 16 weight rows of 64 k each,
 * read straight from the row-major weight with a stride of K bytes) and the quantized
 * input the B operand, in the VNNI order TDPBSSD reads (tile row r holds, for each of 16
 * input rows c, the 4 values x_q[c][64 s + 4 r + 0..3]). The input is small and quantized
 * on every call anyway, so it is written in that order as it is quantized; the weight
 * needs no packed copy: the model keeps one [N, K] int8 weight, read by this kernel and by
 * torch._int_mm alike. The product tiles come out transposed (C[n][m]); the epilogue reads
 * them column-wise.
 *
 * A decode step is bound by reading the weight once: the kernel streams it 32 output rows
 * (a block of 32 K bytes, contiguous) at a time, every partial sum in the tiles. Unlike
 * amx_linear.c it asks for nothing ahead: software prefetches of the 32 rows (4-16 steps
 * ahead, T0 or T1) measured no faster on a 2-core Xeon (AMX), and at times slower, with
 * cold weights; neither did a packed copy, read as contiguous tiles (standalone test, same
 * loop: 24.7 GB/s either way at up to 16 rows).
 *
 * Tiles: C00 C01 C10 C11 (0-3) accumulate weight rows 0-15 / 16-31 x input rows 0-15 /
 * 16-31 in int32; A0 A1 (4, 5) hold 16 weight rows x 64 k; B0 B1 (6, 7) 64 k of input rows
 * 0-15 / 16-31 (rows past M hold whatever the buffer held: only their own columns of C
 * see them, and those are never read). Integer sums are exact in any order: a row's
 * result does not depend on the rows beside it, nor on which kernel multiplied it.
 *
 * Epilogue: ((float)acc * sx[m]) * sw[n] in float32 (two roundings, no fused multiply), then
 * float32 out (+ bias), or bfloat16 rounded to nearest even on integers as torch's .to()
 * does (denormals kept, NaN 0xFFFF), + a bfloat16 bias in float32 rounded again, as
 * torch's `out += bias` on bfloat16: the bits of int8_gemm.int8_linear's torch path.
 */
#define _GNU_SOURCE /* syscall() under -std=c11 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>

#if defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__AVX512BW__)
#include "amx_tiles.h"
#include "bf16_torch16.h"
#include "q8_row.h"
#include "transpose16.h"

/* Linux hands out the tile state only on request, once per process. */
int amx_int8_init(void) { return amx_request_tiles(); }

/* Every tile 16 rows x 64 bytes: input rows past M are padding in B, never a shorter tile. */
static void configure(void) { tiles_configure_full(); }

/* Input row m (float32 or bfloat16 bits) -> its scale and its int8 values in xb's VNNI
 * order, k padded with zeros to kp. xb holds groups of 16 rows: group g, step s is 1 K
 * bytes at xb + (g * steps + s) * 1024, row r (k = 64 s + 4 r + j), bytes 4 c + j for
 * input row 16 g + c. The 16 rows of a group share every cache line: one thread writes a
 * group. Rows past m (padding up to 16) are left unwritten: their columns of the product
 * are never read, and integer products of any bytes are harmless. */
static void quantize_row(const void *xrow, int bf16, int64_t k, int64_t kp, int64_t m,
                         int8_t *xb, float *scale) {
    int64_t steps = kp / 64;
    int8_t *dst = xb + (m / 16) * steps * 1024 + (m % 16) * 4;
    float s = q8_scale(xrow, bf16, k);
    *scale = s;
    __m512 safe = _mm512_set1_ps(s > 0.0f ? s : 1.0f);
    for (int64_t i = 0; i < kp; i += 16) { /* 16 k: 4 VNNI rows of one step */
        __m128i q = q8_16(xrow, bf16, k, i, safe);
        int8_t *d = dst + (i / 64) * 1024 + ((i % 64) / 4) * 64;
        int32_t lanes[4];
        _mm_storeu_si128((__m128i *)lanes, q);
        for (int j = 0; j < 4; j++) memcpy(d + 64 * j, &lanes[j], 4);
    }
}

/* Up to this many rows the calling thread quantizes the input alone (see below). */
#define SERIAL_QUANT_ROWS 32

/* Input rows of 16-row groups [g0, g1) (rows past m skipped) -> xb, sx. */
static void quantize_rows(const void *x, int bf16, int64_t m, int64_t k, int64_t kp,
                          int64_t esize, int8_t *xb, float *sx, int64_t g0, int64_t g1) {
    for (int64_t r = 16 * g0; r < m && r < 16 * g1; r++)
        quantize_row((const char *)x + r * k * esize, bf16, k, kp, r, xb, sx + r);
}

/* 32 weight rows (wb, stride ldw; the last step's 64 k from tail when K is not a multiple
 * of 64: tail NULL otherwise) x up to 32 input rows (xg: their VNNI groups; two: rows
 * 16-31 present) -> acc[32][32] int32, acc[n][c] (row stride 32). Called with a constant
 * `two`: each caller gets its own loop. */
static inline __attribute__((always_inline)) void block(const int8_t *wb, int64_t ldw,
                                                        const int8_t *tail, int64_t steps,
                                                        const int8_t *xg, int32_t *acc,
                                                        int two) {
    _tile_zero(0);
    _tile_zero(2);
    if (two) {
        _tile_zero(1);
        _tile_zero(3);
    }
    int64_t full = tail ? steps - 1 : steps;
    for (int64_t s = 0; s < steps; s++) {
        if (s < full) {
            _tile_loadd(4, wb + 64 * s, ldw);
            _tile_loadd(5, wb + 16 * ldw + 64 * s, ldw);
        } else {
            _tile_loadd(4, tail, 64);
            _tile_loadd(5, tail + 1024, 64);
        }
        _tile_loadd(6, xg + s * 1024, 64);
        _tile_dpbssd(0, 4, 6);
        _tile_dpbssd(2, 5, 6);
        if (two) {
            _tile_loadd(7, xg + (steps + s) * 1024, 64);
            _tile_dpbssd(1, 4, 7);
            _tile_dpbssd(3, 5, 7);
        }
    }
    _tile_stored(0, acc, 128);
    _tile_stored(2, acc + 16 * 32, 128);
    if (two) {
        _tile_stored(1, acc + 16, 128);
        _tile_stored(3, acc + 16 * 32 + 16, 128);
    }
}

/* Up to this many input rows the epilogue gathers each row's 16 sums (acc[n][c] down a
 * column); above it, a 16 x 16 transpose of the sums costs less than the gathers. */
#define GATHER_MAX_ROWS 4

/* acc[n][c] of block rows n0.. -> out rows c < rows, columns n0 + n for n in [e0, 32) and
 * n0 + n < n_out: ((float)acc * sx[c]) * sw[n0 + n] (+ bias) in the output's dtype. */
static inline void emit(const int32_t *acc, int rows, const float *sx, const float *sw,
                        const void *bias, int64_t n0, int e0, int64_t n_out, void *out,
                        int64_t ldo, int out_bf16) {
    __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
                                                       12, 13, 14, 15),
                                     _mm512_set1_epi32(32));
    for (int h = 0; h < 2; h++) {
        int64_t c0 = n0 + 16 * h; /* first output column of this half */
        uint32_t valid = 0xFFFF;
        int lo = e0 - 16 * h; /* columns below it were emitted by the block before */
        if (lo >= 16) continue;
        if (lo > 0) valid &= ~((1u << lo) - 1);
        if (n_out - c0 < 16) valid &= n_out - c0 <= 0 ? 0 : (1u << (n_out - c0)) - 1;
        __mmask16 mask = (__mmask16)valid;
        if (!mask) continue;
        __m512 wsc = _mm512_maskz_loadu_ps(mask, sw + c0);
        __m512 b = _mm512_setzero_ps();
        if (bias)
            b = out_bf16 ? from_bf16(_mm256_maskz_loadu_epi16(mask, (const uint16_t *)bias + c0))
                         : _mm512_maskz_loadu_ps(mask, (const float *)bias + c0);
        const int32_t *half = acc + 16 * h * 32;
        for (int cg = 0; cg < rows; cg += 16) {
            __m512i col[16]; /* col[c - cg]: the sums of input row c, columns c0.. */
            int gather = rows <= GATHER_MAX_ROWS;
            if (!gather) {
                for (int n = 0; n < 16; n++) col[n] = _mm512_load_si512(half + n * 32 + cg);
                transpose16(col);
            }
            for (int c = cg; c < rows && c < cg + 16; c++) {
                __m512i a = gather ? _mm512_i32gather_epi32(idx, half + c, 4) : col[c - cg];
                __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(a), _mm512_set1_ps(sx[c]));
                v = _mm512_mul_ps(v, wsc); /* (acc * scale_row) * scale_col, as torch */
                if (out_bf16) {
                    __m256i o = to_bf16(v);
                    if (bias) o = to_bf16(_mm512_add_ps(from_bf16(o), b));
                    _mm256_mask_storeu_epi16((uint16_t *)out + c * ldo + c0, mask, o);
                } else {
                    if (bias) v = _mm512_add_ps(v, b);
                    _mm512_mask_storeu_ps((float *)out + c * ldo + c0, mask, v);
                }
            }
        }
    }
}

/* Weight bytes a thread keeps in its L2 while every 32-row group of the input passes over
 * them, where the quantized input is too large for the L2 itself (prefill). */
#define GROUP_BYTES (1 << 20)
/* Up to this size the quantized input stays in the L2 (a decode batch): the weight
 * streams block by block, each block read from memory once for all of the input. */
#define X_L2_BYTES (1 << 20)
/* A streamed block up to this size stays in the L1 (48 KB on every AMX core so far) for
 * its passes after the first: they then take 16 input rows each (2 products a step), not
 * 32 (4 a step), which lets the first pass, reading memory, stream faster. 2-core Xeon
 * (AMX), cold int8 [6144 x 1024] weights, 17-32 rows: 0.385 -> 0.345 ms; a [1024 x 3072]
 * block (96 KB, from the L2) gains nothing, and loses at 64-256 rows. */
#define L1_BLOCK_BYTES (32 << 10)

static inline void run_block(const int8_t *wb, int64_t ldw, const int8_t *tail, int64_t steps,
                             const int8_t *xg, int rows, int32_t *acc) {
    if (rows > 16)
        block(wb, ldw, tail, steps, xg, acc, 1);
    else
        block(wb, ldw, tail, steps, xg, acc, 0);
}

/* The last step's 64 k of the block's 32 rows, zero past K (K % 64 != 0): the tile reads
 * 64 bytes a row, which past the weight's last row would leave the tensor. */
static void fill_tail(const int8_t *wb, int64_t ldw, int64_t k, int64_t steps, int8_t *tail) {
    int64_t k0 = 64 * (steps - 1);
    memset(tail, 0, 2048);
    for (int r = 0; r < 32; r++) memcpy(tail + r * 64, wb + r * ldw + k0, (size_t)(k - k0));
}

/* x: [m, k] float32 (x_bf16 0) or bfloat16 bits (1), row stride k; w: int8 [n, k]
 * row-major; wscale: float32 [n]; bias: [n] in the output's dtype or NULL; out: [m, n]
 * float32 (out_bf16 0) or bfloat16 (1), row stride ldo. Returns 0 where it did not run
 * (a shape it does not take, no memory). */
int amx_int8_linear(const void *x, int x_bf16, int64_t m, int64_t k, const int8_t *w,
                    int64_t n, const float *wscale, const void *bias, void *out, int out_bf16,
                    int64_t ldo, int nt) {
    if (m < 1 || k < 1 || n < 1) return 0;
    int64_t kp = (k + 63) / 64 * 64, steps = kp / 64;
    int64_t mp = (m + 15) / 16 * 16; /* input rows padded to whole B tiles */
    int8_t *xb = aligned_alloc(64, (size_t)(mp * kp));
    float *sx = malloc(sizeof(float) * (size_t)m);
    int8_t *wpad = NULL;
    const int8_t *wsrc = w;
    int64_t ldw = k;
    if (n < 32) { /* fewer than 32 weight rows: a zero-padded copy, 32 x kp */
        wpad = aligned_alloc(64, (size_t)(32 * kp));
        if (wpad) {
            memset(wpad, 0, (size_t)(32 * kp));
            for (int64_t r = 0; r < n; r++) memcpy(wpad + r * kp, w + r * k, (size_t)k);
        }
        wsrc = wpad, ldw = kp;
    }
    if (!xb || !sx || (n < 32 && !wpad)) {
        free(xb), free(sx), free(wpad);
        return 0;
    }
    int has_tail = ldw % 64 != 0; /* (the padded copy's rows are whole steps) */
    int64_t blocks = (n + 31) / 32, block_bytes = 32 * ldw;
    int stream = m <= 32 || mp * kp <= X_L2_BYTES;
    int width = stream && block_bytes <= L1_BLOCK_BYTES ? 16 : 32; /* input rows a pass */
    int64_t passes = (m + width - 1) / width;
    int64_t per_group = stream ? 1 : GROUP_BYTES / block_bytes;
    if (per_group < 1) per_group = 1;
    int64_t groups = (blocks + per_group - 1) / per_group;
    int64_t esize = x_bf16 ? 2 : 4, osize = out_bf16 ? 2 : 4;
    /* A decode batch is quantized here, before the team starts, so the team meets at one
     * barrier (its end) a call. With the quantization inside it (a barrier after it), the
     * 2-core Xeon's `bench quant` (bf16 and W8A8 engines in one process) measured W8A8 at
     * 1.07x / 1.10x bf16 at batch 1 / 8; with it here, 1.28x / 1.18x. */
    int serial = m <= SERIAL_QUANT_ROWS;
    if (serial) quantize_rows(x, x_bf16, m, k, kp, esize, xb, sx, 0, mp / 16);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int32_t acc[32 * 32] __attribute__((aligned(64)));
        int8_t tail[2048] __attribute__((aligned(64)));
        if (!serial) {
#pragma omp for schedule(static)
            for (int64_t g = 0; g < mp / 16; g++)
                quantize_rows(x, x_bf16, m, k, kp, esize, xb, sx, g, g + 1);
        }
        configure(); /* per thread: tile state is per thread */
#pragma omp for schedule(static) nowait
        for (int64_t g = 0; g < groups; g++) {
            int64_t b0 = g * per_group, b1 = b0 + per_group < blocks ? b0 + per_group : blocks;
            /* streamed: each block once, every pass over it; grouped: every pass over the
             * group's blocks, one pass after the other */
            for (int64_t p = 0; p < (stream ? 1 : passes); p++) {
                for (int64_t b = b0; b < b1; b++) {
                    /* the last block ends at row n (overlapping the one before: its
                     * columns below 32 b are that block's to emit) */
                    int64_t n0 = 32 * b + 32 <= (n < 32 ? 32 : n) ? 32 * b : n - 32;
                    int e0 = (int)(32 * b - n0);
                    const int8_t *wb = wsrc + n0 * ldw;
                    const int8_t *tl = NULL;
                    if (has_tail) {
                        fill_tail(wb, ldw, k, steps, tail);
                        tl = tail;
                    }
                    for (int64_t q = stream ? 0 : p; q < (stream ? passes : p + 1); q++) {
                        int rows = (int)(m - width * q < width ? m - width * q : width);
                        const int8_t *xg = xb + (width / 16) * q * steps * 1024;
                        run_block(wb, ldw, tl, steps, xg, rows, acc);
                        emit(acc, rows, sx + width * q, wscale, bias, n0, e0, n,
                             (char *)out + width * q * ldo * osize, ldo, out_bf16);
                    }
                }
            }
        }
        _tile_release();
    }
    free(xb), free(sx), free(wpad);
    return 1;
}

#else

int amx_int8_init(void) { return 0; }
int amx_int8_linear(const void *x, int x_bf16, int64_t m, int64_t k, const int8_t *w,
                    int64_t n, const float *wscale, const void *bias, void *out, int out_bf16,
                    int64_t ldo, int nt) {
    (void)x, (void)x_bf16, (void)m, (void)k, (void)w, (void)n, (void)wscale, (void)bias;
    (void)out, (void)out_bf16, (void)ldo, (void)nt;
    return 0;
}

#endif
