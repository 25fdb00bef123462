/* W8A8 int8 linears on AVX512-VNNI vectors, the weight stored with its output rows in
 * lanes: hosts with VNNI but no AMX tiles (AMD Zen 4, Intel Ice Lake) run compressed-
 * tensors int8 checkpoints through it, with amx_int8_linear.c's numbers bit for bit.
 *
 *   out[m, n] = ((float)(x_q[m] . w[n]) * sx[m]) * sw[n]   (+ bias)
 *
 * x_q the input rows quantized to int8 here (one symmetric scale sx[m] = amax / 127 a
 * row, round half to even), w the checkpoint's int8 weight. The dot products are exact
 * int32 however they are summed, so this kernel, the AMX tiles, torch._int_mm and the
 * row-major vector loop (wq_gemm.c) all give the same bits, and a row's result does not
 * depend on its batch.
 *
 * Why a layout of its own: vpdpbusd multiplies 64 unsigned bytes by 64 signed ones into 16
 * int32 lanes, 4 products a lane. With the weight row-major (wq_gemm.c) a lane holds 4
 * inputs of one output row, so every output needs a horizontal sum at the end and every
 * input row its own pass over the weight row: a decode batch of 8 ran W8A8 at 0.85x
 * bf16's tokens/s on Zen 4. Stored as 16 output rows x 4 inputs a 64-byte row, one load feeds every input row
 * of a pass (4 input bytes broadcast, here straight from memory), and the outputs stay in
 * lanes to the epilogue.
 *
 * Layout (w8a8_vnni.py: tile_layout): output rows in tiles of 16; tile t is 16 * I bytes,
 * step s (inputs 4s .. 4s + 3) its 64 bytes at 64 s, output row 16 t + r at bytes 4r ..
 * 4r + 3, each byte the weight plus 128 (as unsigned: vpdpbusd's unsigned operand; the
 * input is the signed one, so it can be the broadcast):
 *
 *   sum_i (w[i] + 128) x[i] = sum_i w[i] x[i] + 128 sum_i x[i]
 *
 * and the second term (`excess`, one per input row, computed as it is quantized) comes off
 * at the end. Modulo 2^32 every step is exact, and the result fits in int32.
 *
 * Work (vnni_passes.h): OpenMP over column tiles, one or two a pass; a pass takes up to 8
 * input rows against its tiles, the sums in registers (two chains a sum up to 4 rows), the
 * epilogue amx_int8_linear.c's. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define PAR_MIN_WORK (1 << 16)
/* From this many input rows the thread team quantizes them. */
#define PAR_QUANT_ROWS 64
/* Steps (4 inputs, 64 weight bytes each) a pass's inner loop unrolls: 1 KB of a tile. */
#define UNROLL 16

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512F__) && \
    !defined(NO_W8A8_VNNI)
#include <immintrin.h>
#include "bf16_torch16.h"
#include "prefetch_ahead.h"
#include "q8_row.h"
#include "vnni_passes.h"

int w8a8_vnni_built(void) { return 1; }

/* Input row (float32, or bfloat16 bits) of k values -> q, its scale (q8_row.h, as the AMX
 * kernel quantizes) and 128 * the sum of its int8 values. */
static void quantize_row(const void *xrow, int bf16, int64_t k, int8_t *q, float *scale,
                         int32_t *excess) {
    float s = q8_scale(xrow, bf16, k);
    *scale = s;
    __m512 safe = _mm512_set1_ps(s > 0.0f ? s : 1.0f);
    __m512i sum = _mm512_setzero_si512();
    for (int64_t i = 0; i < k; i += 16) {
        __m128i b = q8_16(xrow, bf16, k, i, safe);
        _mm_storeu_si128((__m128i *)(q + i), b);
        sum = _mm512_add_epi32(sum, _mm512_cvtepi8_epi32(b));
    }
    *excess = 128 * _mm512_reduce_add_epi32(sum);
}

/* Input bytes p[0..3] in every 32-bit lane. */
static inline __m512i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* What one pass needs beside its rows and tiles. */
typedef struct {
    const void *x; /* the input rows (float32, or bfloat16 bits: x_bf16) */
    int x_bf16;
    int8_t *xq;
    float *sx;
    int32_t *excess;
    const uint8_t *w;
    const float *sw;
    const void *bias; /* the output's dtype, or NULL */
    void *out;
    int64_t in, n, ldo;
    int out_bf16;
} job;

/* Input rows m0 .. m0 + mb - 1 against column tiles t (and t + 1: two_n) -> out. */
static inline __attribute__((always_inline)) void pass(const job *j, int64_t t, int64_t m0,
                                                       const int mb, const int two_n) {
    const int64_t in = j->in, steps = in / 4, n0 = 16 * t;
    const uint8_t *w0 = j->w + t * 16 * in, *w1 = w0 + 16 * in;
    const int8_t *xq = j->xq + m0 * in;
    const int split = mb <= 4; /* even and odd steps on their own chains */
    __m512i a[2][VNNI_MR][2];
#pragma GCC unroll 8
    for (int mi = 0; mi < mb; mi++)
        a[0][mi][0] = a[0][mi][1] = a[1][mi][0] = a[1][mi][1] = _mm512_setzero_si512();
    for (int64_t s0 = 0; s0 < steps; s0 += UNROLL) {
        prefetch_ahead(w0 + 64 * s0, 64 * UNROLL);
        if (two_n) prefetch_ahead(w1 + 64 * s0, 64 * UNROLL);
#pragma GCC unroll 16
        for (int r = 0; r < UNROLL; r++) {
            const int64_t s = s0 + r;
            const int ch = split & r;
            __m512i v0 = _mm512_loadu_si512((const void *)(w0 + 64 * s));
            __m512i v1 = v0;
            if (two_n) v1 = _mm512_loadu_si512((const void *)(w1 + 64 * s));
#pragma GCC unroll 8
            for (int mi = 0; mi < mb; mi++) {
                __m512i xb = bcast4(xq + mi * in + 4 * s);
                a[ch][mi][0] = _mm512_dpbusd_epi32(a[ch][mi][0], v0, xb);
                if (two_n) a[ch][mi][1] = _mm512_dpbusd_epi32(a[ch][mi][1], v1, xb);
            }
        }
    }
    for (int c = 0; c < 1 + two_n; c++) {
        const int64_t col = n0 + 16 * c;
        __m512 wsc = _mm512_loadu_ps(j->sw + col);
        __m512 b = _mm512_setzero_ps();
        if (j->bias)
            b = j->out_bf16 ? from_bf16(_mm256_loadu_si256((const __m256i *)((const uint16_t *)j->bias + col)))
                            : _mm512_loadu_ps((const float *)j->bias + col);
#pragma GCC unroll 8
        for (int mi = 0; mi < mb; mi++) {
            const int64_t m = m0 + mi;
            __m512i acc = split ? _mm512_add_epi32(a[0][mi][c], a[1][mi][c]) : a[0][mi][c];
            acc = _mm512_sub_epi32(acc, _mm512_set1_epi32(j->excess[m]));
            /* (acc * scale_row) * scale_col, as torch and amx_int8_linear.c's emit */
            __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), _mm512_set1_ps(j->sx[m]));
            v = _mm512_mul_ps(v, wsc);
            if (j->out_bf16) {
                __m256i o = to_bf16(v);
                if (j->bias) o = to_bf16(_mm512_add_ps(from_bf16(o), b));
                _mm256_storeu_si256((__m256i *)((uint16_t *)j->out + m * j->ldo + col), o);
            } else {
                if (j->bias) v = _mm512_add_ps(v, b);
                _mm512_storeu_ps((float *)j->out + m * j->ldo + col, v);
            }
        }
    }
}

VNNI_RUN_PASS(run_pass, pass, job)

/* Input rows [r0, r1) quantized. */
static void quantize(const void *job_, int64_t r0, int64_t r1) {
    const job *j = (const job *)job_;
    const int64_t k = j->in, esize = j->x_bf16 ? 2 : 4;
    for (int64_t r = r0; r < r1; r++)
        quantize_row((const char *)j->x + r * k * esize, j->x_bf16, k, j->xq + r * k, j->sx + r,
                     j->excess + r);
}

/* amx_int8_linear's arguments and result, the weight in this kernel's layout: x [m, k]
 * float32 (x_bf16 0) or bfloat16 bits (1); w the tiled weight of n output rows (n a
 * multiple of 16, k of 64); wscale float32 [n]; bias [n] in the output's dtype or NULL;
 * out [m, n] float32 (out_bf16 0) or bfloat16 (1), row stride ldo. Returns 1, or 0 where
 * it did not run (a shape it does not take, no memory). */
int w8a8_vnni_linear(const void *x, int x_bf16, int64_t m, int64_t k, const uint8_t *w,
                     int64_t n, const float *wscale, const void *bias, void *out, int out_bf16,
                     int64_t ldo, int num_threads) {
    if (m < 1 || n < 16 || n % 16 || k < 64 || k % 64) return 0;
    int8_t *xq = malloc((size_t)(m * k));
    float *sx = malloc(sizeof(float) * (size_t)m);
    int32_t *excess = malloc(sizeof(int32_t) * (size_t)m);
    if (!xq || !sx || !excess) {
        free(xq), free(sx), free(excess);
        return 0;
    }
    job j = {x, x_bf16, xq, sx, excess, w, wscale, bias, out, k, n, ldo, out_bf16};
    /* A decode batch is quantized before the team starts (one barrier a call, as
     * amx_int8_linear.c); a prefill's rows by the team. */
    int serial = m < PAR_QUANT_ROWS;
    if (serial) quantize(&j, 0, m);
    int nt = n * k >= PAR_MIN_WORK && num_threads > 1 ? num_threads : 1;
    vnni_passes(&j, run_pass, serial ? NULL : quantize, 1, m, n, k, nt);
    free(xq), free(sx), free(excess);
    return 1;
}

#else

int w8a8_vnni_built(void) { return 0; }
int w8a8_vnni_linear(const void *x, int x_bf16, int64_t m, int64_t k, const uint8_t *w,
                     int64_t n, const float *wscale, const void *bias, void *out, int out_bf16,
                     int64_t ldo, int num_threads) {
    (void)x, (void)x_bf16, (void)m, (void)k, (void)w, (void)n, (void)wscale, (void)bias;
    (void)out, (void)out_bf16, (void)ldo, (void)num_threads;
    return 0;
}

#endif
