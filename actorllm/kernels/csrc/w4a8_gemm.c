/* W4A8, any number of rows: 4-bit weights in wq_gemm.c's packed layout times inputs
 * quantized to int8 here, multiplied on integers. vLLM's CPU build does the same by
 * default on the hosts it has an int8 kernel for (VLLM_CPU_INT4_W4A8); on AVX2 the float-
 * input kernel (wq_gemm.c) is bound by widening every code to float, this one by
 * vpmaddubsw, about 2.5x fewer cycles a weight.
 *
 * Layout: packed uint8 [O, I / 2] (column 2k in the low nibble of byte k, 2k + 1 in the
 * high one), scales and offsets float32 [O, G] (w = q * scale + offset, G = I / gs;
 * offsets NULL: symmetric codes, w = (q - 8) * scale, as wq_gemm.c);
 * x float32 [M, I]; out float32 [M, O]. Threads: OpenMP over output rows (wq_gemm.c's rule).
 */
#include <stdint.h>

#define PAR_MIN_WORK (1 << 16)

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#include "act8.h"
#include "group_offset.h"
#include "hsum8.h"
#include "prefetch_ahead.h"
#define HAVE_AVX2_PATH 1

/* Each call quantizes its input rows to int8, one symmetric scale per row and block of A
 * input columns (A the weight's group, at most 256), and the products run on integers:
 * vpmaddubsw multiplies 32 unsigned 4-bit codes by 32 signed int8 inputs into 16 int16
 * pair sums, so a 64-column step is one load, three bit operations and two multiply-adds.
 *
 *   out[m, o] = sum_b scale[o, g(b)] * d[m, b] * (sum_{i in b} q[o, i] * xq[m, i])
 *             + sum_g offset[o, g] * (sum_{b in g} d[m, b] * sum_{i in b} xq[m, i]) + bias[o]
 *
 * with x ~ d * xq as act8.h quantizes it. Integer sums are exact: a pair is at most
 * 2 * 15 * 127 = 3810 and an int16 lane adds at most 8 of them (256 columns) before
 * vpmaddwd widens it to int32.
 *
 * The inputs are deinterleaved per unit of U columns (act8.h), as the nibbles come: U is
 * 64 (blocks of 32 then go two to a unit: one 32-byte load serves both), or 32 where a
 * block of 96, 160 or 224 columns, or a row of an odd number of 32s, leaves no whole
 * units of 64.
 *
 * Where the compiler targets AVX512-VNNI (with BW and VL), block_dots forms the same int32
 * lanes with vpdpbusd in fewer instructions. A 64-column unit's codes go into one register
 * as [even columns | odd columns]; its inputs are already stored [even | odd]; so one
 * vpdpbusd adds into lane j the products of bytes 4j..4j+3 of the even half, and into lane
 * 8 + j those of the odd half. Adding the two halves gives lane j exactly what vpmaddubsw +
 * vpmaddwd give it (integer sums of the same products), and every float operation after is
 * unchanged: the bits do not depend on which path ran. A linear of 8 rows takes ~30% less
 * time. Q4_0's pairs of 32-column blocks (row_a8's own loop) stay on vpmaddubsw, which
 * measured faster there. */

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    !defined(NO_VNNI512)
#define HAVE_VNNI512 1
#endif

#ifdef HAVE_VNNI512
/* A 64-column unit's 32 packed bytes -> its 64 codes, [even columns | odd columns]. */
static inline __m512i unit_codes(const uint8_t *p) {
    __m256i v = _mm256_loadu_si256((const __m256i *)p);
    __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1);
    return _mm512_and_si512(z, _mm512_set1_epi8(0x0F));
}

/* 16 int32 lanes -> the 8 lanes vpmaddwd would hold: lane j + lane 8 + j. */
static inline __m256i fold16(__m512i a) {
    return _mm256_add_epi32(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64(a, 1));
}
#endif

/* Integer dot products of one block (n columns of one packed row) with MB rows' quantized
 * inputs, as int32 lanes in acc. Always inlined with MB a constant, so the accumulators
 * live in registers. */
static inline __attribute__((always_inline)) void block_dots(
    const uint8_t *p, const int8_t *xq, int64_t in, const int mb, int64_t n, int64_t u,
    __m256i *acc) {
#ifdef HAVE_VNNI512
    if (u == 64) {
        __m512i a[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                        _mm512_setzero_si512()};
        for (int64_t c = 0; c < n; c += 64) {
            __m512i codes = unit_codes(p + c / 2);
            for (int mi = 0; mi < mb; mi++)
                a[mi] = _mm512_dpbusd_epi32(a[mi], codes,
                                            _mm512_loadu_si512((const void *)(xq + mi * in + c)));
        }
        for (int mi = 0; mi < mb; mi++) acc[mi] = fold16(a[mi]);
    } else {
        const __m128i m4h = _mm_set1_epi8(0x0F);
        for (int mi = 0; mi < mb; mi++) acc[mi] = _mm256_setzero_si256();
        for (int64_t c = 0; c < n; c += 32) {
            __m128i v = _mm_loadu_si128((const __m128i *)(p + c / 2));
            __m256i codes = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4h),
                                             _mm_and_si128(v, m4h));
            for (int mi = 0; mi < mb; mi++)
                acc[mi] = _mm256_dpbusd_epi32(
                    acc[mi], codes, _mm256_loadu_si256((const __m256i *)(xq + mi * in + c)));
        }
    }
#else
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i s16[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                      _mm256_setzero_si256()};
    if (u == 64) {
        for (int64_t c = 0; c < n; c += 64) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(p + c / 2));
            __m256i lo = _mm256_and_si256(v, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            for (int mi = 0; mi < mb; mi++) {
                const int8_t *xr = xq + mi * in + c;
                __m256i e = _mm256_loadu_si256((const __m256i *)xr);
                __m256i o = _mm256_loadu_si256((const __m256i *)(xr + 32));
                s16[mi] = _mm256_add_epi16(s16[mi], _mm256_add_epi16(_mm256_maddubs_epi16(lo, e),
                                                                     _mm256_maddubs_epi16(hi, o)));
            }
        }
    } else {
        const __m128i m4h = _mm_set1_epi8(0x0F);
        for (int64_t c = 0; c < n; c += 32) {
            __m128i v = _mm_loadu_si128((const __m128i *)(p + c / 2));
            __m256i codes = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4h),
                                             _mm_and_si128(v, m4h));
            for (int mi = 0; mi < mb; mi++) {
                __m256i e = _mm256_loadu_si256((const __m256i *)(xq + mi * in + c));
                s16[mi] = _mm256_add_epi16(s16[mi], _mm256_maddubs_epi16(codes, e));
            }
        }
    }
    const __m256i ones = _mm256_set1_epi16(1);
    for (int mi = 0; mi < mb; mi++) acc[mi] = _mm256_madd_epi16(s16[mi], ones);
#endif
}

/* One output row against MB input rows (always inlined with MB a constant, so every
 * accumulator is a register). Blocks alternate between two float accumulators per row,
 * so short blocks do not wait on one FMA chain. */
static inline __attribute__((always_inline)) void row_a8(
    const act8 *q, int64_t in, const int mb, const uint8_t *prow, const float *srow,
    const float *brow, int64_t gs, int64_t m0, float bias, float *out, int64_t out_n) {
    int64_t groups = in / gs, blocks = in / q->a, per = gs / q->a, a = q->a;
    __m256 t0[4], t1[4];
    __m256i acc[4];
    for (int mi = 0; mi < 4; mi++) t0[mi] = t1[mi] = _mm256_setzero_ps();
    const int8_t *xq = q->xq + m0 * in;
    const float *d = q->d + m0 * blocks;
    if (a == 32 && q->u == 64) {  /* gs == 32 (GGUF's Q4_0): two blocks per step */
        const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
        for (int64_t b = 0; b < blocks; b += 2) {
            if ((b & 3) == 0) prefetch_ahead(prow + b * 16, 64);  /* a line every 4 blocks */
            __m256i v = _mm256_loadu_si256((const __m256i *)(prow + b * 16));
            __m256i lo = _mm256_and_si256(v, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            for (int mi = 0; mi < mb; mi++) {
                const int8_t *xr = xq + mi * in + b * 32;
                __m256i e = _mm256_loadu_si256((const __m256i *)xr);
                __m256i o = _mm256_loadu_si256((const __m256i *)(xr + 32));
                __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, e),
                                             _mm256_maddubs_epi16(hi, o));
                /* lanes 0-3: block b, lanes 4-7: block b + 1 */
                __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
                __m256 w = _mm256_insertf128_ps(
                    _mm256_castps128_ps256(_mm_set1_ps(srow[b] * d[mi * blocks + b])),
                    _mm_set1_ps(srow[b + 1] * d[mi * blocks + b + 1]), 1);
                if (b & 2)
                    t1[mi] = _mm256_fmadd_ps(f, w, t1[mi]);
                else
                    t0[mi] = _mm256_fmadd_ps(f, w, t0[mi]);
            }
        }
        blocks = 0;  /* done */
    }
    int64_t g = 0, j = 0;  /* block b's group, and its place in it */
    for (int64_t b = 0; b < blocks; b++) {
        prefetch_ahead(prow + b * a / 2, a / 2);
        block_dots(prow + b * a / 2, xq + b * a, in, mb, a, q->u, acc);
        float s = srow[g];
        if (b & 1) {
            for (int mi = 0; mi < mb; mi++)
                t1[mi] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[mi]),
                                         _mm256_set1_ps(s * d[mi * blocks + b]), t1[mi]);
        } else {
            for (int mi = 0; mi < mb; mi++)
                t0[mi] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[mi]),
                                         _mm256_set1_ps(s * d[mi * blocks + b]), t0[mi]);
        }
        if (++j == per) j = 0, g++;
    }
    for (int mi = 0; mi < mb; mi++) {
        float off = 0.0f;
        const float *xs = q->xs + (m0 + mi) * groups;
        for (int64_t k = 0; k < groups; k++) off += offset_at(brow, srow, k, 8.0f) * xs[k];
        out[(m0 + mi) * out_n] = hsum8(_mm256_add_ps(t0[mi], t1[mi])) + off + bias;
    }
}

/* One block (a multiple of 64 columns) of one packed row against one row's quantized
 * inputs: the products as 8 float lanes (exact integers). */
static inline __attribute__((always_inline)) __m256 dot64s(const uint8_t *p, const int8_t *xr,
                                                           int64_t a) {
    __m256i acc;
    block_dots(p, xr, 0, 1, a, 64, &acc);  /* one row: its stride is never used */
    return _mm256_cvtepi32_ps(acc);
}

/* One input row, blocks of a multiple of 64 columns (GPTQ's and AWQ's groups of 128, whole
 * rows): the decode case, kept free of the general loop's bookkeeping. Blocks go to the two
 * accumulators by their parity and every value is formed as in row_a8, so a row's result
 * does not depend on how many rows the call has (a replayed or re-batched request gets the
 * same bits). */
static float row1_a8(const act8 *q, int64_t in, const uint8_t *prow, const float *srow,
                     const float *brow, int64_t gs) {
    int64_t a = q->a, per = gs / a, blocks = in / a, groups = in / gs;
    const float *d = q->d;
    __m256 t0 = _mm256_setzero_ps(), t1 = t0;
    if (per == 1) {  /* a block per group: two at a time */
        int64_t b = 0;
        for (; b + 1 < blocks; b += 2) {
            prefetch_ahead(prow + b * a / 2, a);  /* both blocks */
            __m256 f0 = dot64s(prow + b * a / 2, q->xq + b * a, a);
            __m256 f1 = dot64s(prow + (b + 1) * a / 2, q->xq + (b + 1) * a, a);
            t0 = _mm256_fmadd_ps(f0, _mm256_set1_ps(srow[b] * d[b]), t0);
            t1 = _mm256_fmadd_ps(f1, _mm256_set1_ps(srow[b + 1] * d[b + 1]), t1);
        }
        if (b < blocks)
            t0 = _mm256_fmadd_ps(dot64s(prow + b * a / 2, q->xq + b * a, a),
                                 _mm256_set1_ps(srow[b] * d[b]), t0);
    } else {
        for (int64_t g = 0, b = 0; g < groups; g++) {
            for (int64_t j = 0; j < per; j++, b++) {
                prefetch_ahead(prow + b * a / 2, a / 2);
                __m256 f = dot64s(prow + b * a / 2, q->xq + b * a, a);
                __m256 w = _mm256_set1_ps(srow[g] * d[b]);
                if (b & 1)
                    t1 = _mm256_fmadd_ps(f, w, t1);
                else
                    t0 = _mm256_fmadd_ps(f, w, t0);
            }
        }
    }
    float off = 0.0f;
    for (int64_t g = 0; g < groups; g++) off += offset_at(brow, srow, g, 8.0f) * q->xs[g];
    return hsum8(_mm256_add_ps(t0, t1)) + off;
}

static int wq_linear_a8_avx2(const float *x, int64_t m_rows, int64_t in,
                             const uint8_t *packed, int64_t out_n, const float *scales,
                             const float *offsets, int64_t gs, const float *bias, float *out,
                             int nt) {
    if (gs % 32) return -1;
    act8 q;
    int64_t a = act8_block(gs);
    /* Blocks of 32 are taken in pairs (one 64-column unit) where the row has whole pairs. */
    int64_t u = a % 64 == 0 || (a == 32 && in % 64 == 0) ? 64 : 32;
    if (quantize_act8(x, m_rows, in, a, u, gs, &q)) {
        free_act8(&q);
        return -1;
    }
    int64_t groups = in / gs, row_bytes = in / 2;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t o = 0; o < out_n; o++) {
        const uint8_t *prow = packed + o * row_bytes;
        const float *srow = scales + o * groups, *brow = offsets ? offsets + o * groups : NULL;
        float b = bias ? bias[o] : 0.0f;
        if (m_rows == 1 && q.a % 64 == 0) {
            out[o] = row1_a8(&q, in, prow, srow, brow, gs) + b;
            continue;
        }
        for (int64_t m0 = 0; m0 < m_rows; m0 += 4) {
            switch (m_rows - m0 < 4 ? m_rows - m0 : 4) {
            case 1: row_a8(&q, in, 1, prow, srow, brow, gs, m0, b, out + o, out_n); break;
            case 2: row_a8(&q, in, 2, prow, srow, brow, gs, m0, b, out + o, out_n); break;
            case 3: row_a8(&q, in, 3, prow, srow, brow, gs, m0, b, out + o, out_n); break;
            default: row_a8(&q, in, 4, prow, srow, brow, gs, m0, b, out + o, out_n); break;
            }
        }
    }
    free_act8(&q);
    return 0;
}
#endif

/* 1 where this build has the W4A8 kernel (AVX2), else 0. */
int wq_linear_a8_built(void) {
#ifdef HAVE_AVX2_PATH
    return 1;
#else
    return 0;
#endif
}

/* 4-bit weights with int8 activations (see wq_linear_a8_avx2), wq_linear's arguments.
 * Returns 0, or -1 when the call is not one it takes (no AVX2 build, bits not 4, a group
 * not a multiple of 32, I not a multiple of the group): the caller then runs wq_linear,
 * which keeps the inputs in float. */
int wq_linear_a8(const float *x, int64_t m_rows, int64_t in, const uint8_t *packed,
                 int64_t out_n, int bits, const float *scales, const float *offsets,
                 int64_t gs, const float *bias, float *out, int num_threads) {
#ifdef HAVE_AVX2_PATH
    if (bits != 4 || gs <= 0 || in % gs) return -1;
    int64_t work = out_n * in;
    int nt = work >= PAR_MIN_WORK && num_threads > 1 ? num_threads : 1;
    return wq_linear_a8_avx2(x, m_rows, in, packed, out_n, scales, offsets, gs, bias, out, nt);
#else
    (void)x; (void)m_rows; (void)in; (void)packed; (void)out_n; (void)bits; (void)scales;
    (void)offsets; (void)gs; (void)bias; (void)out; (void)num_threads;
    return -1;
#endif
}
