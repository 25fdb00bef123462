/* 8-bit group codes times int8-quantized inputs, any number of rows: GGUF's 8-bit blocks
 * (Q8_0, and Q6_K repacked to a code a byte) multiplied on integers, as llama.cpp's CPU
 * backend and vLLM's GGUF kernels do (both quantize the activations to 8 bits a block:
 * Q8_0 / Q8_1 / Q8_K). On AVX2 the float-input kernel (wq_gemm.c) widens every code to
 * float before its FMA; here 32 codes cost one xor, one abs and, a row, one sign, one
 * vpmaddubsw and one vpmaddwd.
 *
 * Layout: packed uint8 [O, I] (wq_gemm.c's 8-bit layout), scales and offsets float32
 * [O, G] (w = q * scale + offset, groups of gs columns: 16 or a multiple of 32, G = I / gs;
 * offsets NULL: symmetric codes, w = (q - 128) * scale, as wq_gemm.c);
 * x float32 [M, I]; out float32 [M, O]. Threads: OpenMP over output rows (wq_gemm.c's rule).
 */
#include <stdint.h>

#define PAR_MIN_WORK (1 << 16)

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#include "act8.h"
#include "hsum8.h"
#include "prefetch_ahead.h"
#define HAVE_AVX2_PATH 1

/* With the inputs quantized per row and block of A columns (act8.h: A = 32 for groups of
 * 16 and 32, the group up to 256 beyond) and the codes read as signed bytes c = q - 128,
 * w = c * scale + (offset + 128 * scale), so
 *
 *   out[m, o] = sum_b d[m, b] * sum_{i in b} scale[o, g(i)] * c[o, i] * xq[m, i]
 *             + sum_g (offset[o, g] + 128 * scale[o, g]) * xs[m, g] + bias[o]
 *
 * (symmetric codes, offsets NULL: Q8_0 and repacked Q6_K, have no second term).
 * vpmaddubsw wants one unsigned operand: it gets |c| (|-128| = 128 read unsigned), and xq
 * takes c's sign (vpsignb; exact as |xq| <= 127), so a pair is at most 2 * 128 * 127 =
 * 32512 and never saturates; vpmaddwd widens the pairs to int32 every 32 columns. Lanes 0-3 of a 32-column step hold
 * columns 0-15, lanes 4-7 columns 16-31: a group of 16 scales half a vector. An int32 lane
 * sums at most 32 products of a block (256 columns): below 2^24, so it converts exactly.
 *
 * Every row of a call is computed the same way whatever the number of rows, so a row's
 * result does not depend on its batch (a replayed or re-batched request gets the same
 * bits). */

/* The zero-point term of one output row for one input row: sum_g (offset + 128 * scale)
 * * xs, eight groups a step, in one fixed order; 0 for symmetric codes (zrow NULL). */
static inline float zero_term(const float *srow, const float *zrow, const float *xs,
                              int64_t groups) {
    if (!zrow) return 0.0f;
    const __m256 k128 = _mm256_set1_ps(128.0f);
    __m256 t = _mm256_setzero_ps();
    int64_t g = 0;
    for (; g + 8 <= groups; g += 8) {
        __m256 z = _mm256_fmadd_ps(k128, _mm256_loadu_ps(srow + g), _mm256_loadu_ps(zrow + g));
        t = _mm256_fmadd_ps(z, _mm256_loadu_ps(xs + g), t);
    }
    float off = hsum8(t);
    for (; g < groups; g++) off += (zrow[g] + 128.0f * srow[g]) * xs[g];
    return off;
}

/* One output row against MB input rows (always inlined with MB a constant, so every
 * accumulator is a register). Blocks alternate between two float accumulators per row,
 * so short blocks do not wait on one FMA chain. */
static inline __attribute__((always_inline)) void row_q8(
    const act8 *q, int64_t in, const int mb, const uint8_t *prow, const float *srow,
    const float *zrow, int64_t gs, int64_t m0, float bias, float *out, int64_t out_n) {
    const int64_t a = q->a, groups = in / gs;
    int64_t blocks = in / a;
    const int64_t per = gs / a;  /* blocks a group, beyond a == 32 */
    const __m256i flip = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
    __m256 t0[4], t1[4];
    for (int mi = 0; mi < 4; mi++) t0[mi] = t1[mi] = _mm256_setzero_ps();
    const int8_t *xq = q->xq + m0 * in;
    const float *d = q->d + m0 * blocks;
    if (a == 32) {  /* GGUF's blocks: a step per block, a group or two */
        for (int64_t b = 0; b < blocks; b++) {
            if ((b & 1) == 0) prefetch_ahead(prow + b * 32, 64); /* a line every 2 blocks */
            __m256i w = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(prow + b * 32)),
                                         flip);
            __m256i aw = _mm256_abs_epi8(w);
            __m256 s = gs == 16 ? _mm256_insertf128_ps(
                                      _mm256_castps128_ps256(_mm_set1_ps(srow[2 * b])),
                                      _mm_set1_ps(srow[2 * b + 1]), 1)
                                : _mm256_set1_ps(srow[b]);
            for (int mi = 0; mi < mb; mi++) {
                __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + mi * in + b * 32));
                __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, w));
                __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
                __m256 sd = _mm256_mul_ps(s, _mm256_set1_ps(d[mi * blocks + b]));
                if (b & 1)
                    t1[mi] = _mm256_fmadd_ps(f, sd, t1[mi]);
                else
                    t0[mi] = _mm256_fmadd_ps(f, sd, t0[mi]);
            }
        }
        blocks = 0;  /* done */
    }
    int64_t g = 0, j = 0;  /* block b's group, and its place in the group */
    for (int64_t b = 0; b < blocks; b++) {
        __m256i acc[4];
        for (int mi = 0; mi < 4; mi++) acc[mi] = _mm256_setzero_si256();
        for (int64_t c = b * a; c < (b + 1) * a; c += 32) {
            if ((c & 63) == 0) prefetch_ahead(prow + c, 64);
            __m256i w = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(prow + c)), flip);
            __m256i aw = _mm256_abs_epi8(w);
            for (int mi = 0; mi < mb; mi++) {
                __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + mi * in + c));
                __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, w));
                acc[mi] = _mm256_add_epi32(acc[mi], _mm256_madd_epi16(p, ones));
            }
        }
        for (int mi = 0; mi < mb; mi++) {
            __m256 sd = _mm256_set1_ps(srow[g] * d[mi * blocks + b]);
            __m256 f = _mm256_cvtepi32_ps(acc[mi]);
            if (b & 1)
                t1[mi] = _mm256_fmadd_ps(f, sd, t1[mi]);
            else
                t0[mi] = _mm256_fmadd_ps(f, sd, t0[mi]);
        }
        if (++j == per) j = 0, g++;
    }
    for (int mi = 0; mi < mb; mi++) {
        float off = zero_term(srow, zrow, q->xs + (m0 + mi) * groups, groups);
        out[(m0 + mi) * out_n] = hsum8(_mm256_add_ps(t0[mi], t1[mi])) + off + bias;
    }
}

static int q8a8_avx2(const float *x, int64_t m_rows, int64_t in, const uint8_t *packed,
                     int64_t out_n, const float *scales, const float *offsets, int64_t gs,
                     const float *bias, float *out, int nt) {
    int64_t groups = in / gs;
    act8 q;
    if (quantize_act8(x, m_rows, in, act8_block(gs), 1, gs, &q)) {
        free_act8(&q);
        return -1;
    }
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t o = 0; o < out_n; o++) {
        const uint8_t *prow = packed + o * in;
        const float *srow = scales + o * groups, *zrow = offsets ? offsets + o * groups : NULL;
        float b = bias ? bias[o] : 0.0f;
        for (int64_t m0 = 0; m0 < m_rows; m0 += 4) {
            switch (m_rows - m0 < 4 ? m_rows - m0 : 4) {
            case 1: row_q8(&q, in, 1, prow, srow, zrow, gs, m0, b, out + o, out_n); break;
            case 2: row_q8(&q, in, 2, prow, srow, zrow, gs, m0, b, out + o, out_n); break;
            case 3: row_q8(&q, in, 3, prow, srow, zrow, gs, m0, b, out + o, out_n); break;
            default: row_q8(&q, in, 4, prow, srow, zrow, gs, m0, b, out + o, out_n); break;
            }
        }
    }
    free_act8(&q);
    return 0;
}
#endif

/* 1 where this build has the kernel (AVX2), else 0. */
int wq_linear_a8_built(void) {
#ifdef HAVE_AVX2_PATH
    return 1;
#else
    return 0;
#endif
}

/* 8-bit codes with int8 activations (see q8a8_avx2), wq_linear's arguments; the same
 * name as w4a8_gemm.c's entry (kernels/quant_gemm.py picks the library by bits). Returns 0, or
 * -1 when the call is not one it takes (no AVX2 build, bits not 8, a group neither 16 nor
 * a multiple of 32, I not a multiple of the group and of 32, out of memory): the caller
 * then runs wq_linear, which keeps the inputs in float. */
int wq_linear_a8(const float *x, int64_t m_rows, int64_t in, const uint8_t *packed,
                 int64_t out_n, int bits, const float *scales, const float *offsets,
                 int64_t gs, const float *bias, float *out, int num_threads) {
#ifdef HAVE_AVX2_PATH
    if (bits != 8 || (gs != 16 && (gs <= 0 || gs % 32)) || in % gs || in % 32) return -1;
    int64_t work = out_n * in;
    int nt = work >= PAR_MIN_WORK && num_threads > 1 ? num_threads : 1;
    return q8a8_avx2(x, m_rows, in, packed, out_n, scales, offsets, gs, bias, out, nt);
#else
    (void)x; (void)m_rows; (void)in; (void)packed; (void)out_n; (void)bits; (void)scales;
    (void)offsets; (void)gs; (void)bias; (void)out; (void)num_threads;
    return -1;
#endif
}
