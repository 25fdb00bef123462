/* Paged attention for prefill requests on the CPU: every request of the step with more than
 * one query token, in one call, its keys and values read straight from the paged KV cache.
 *
 * One OpenMP task per (request, KV head, query tile of up to QT query tokens): the tile's
 * R = QT x G query rows (G = Hq / Hk heads share each loaded K and V row) walk the keys the
 * tile can see, 16 at a time (a key tile never crosses a block), with an online softmax
 * (flash attention): per key tile the R x 16 scores, each row's running max and sum, its
 * accumulator rescaled when the max grows, then P.V. Causal: query i of a request of L query
 * tokens and seq_len context sits at position seq_len - L + i (chunked prefill or a
 * prefix-cache hit: seq_len > L); key tiles past the tile's last query are never read, and
 * only key tiles on the diagonal are masked per row. Float32 math throughout (a bfloat16
 * cache is widened exactly, an fp8 one through its tables k_lut / v_lut, kv_rows.h, when
 * the tiles are packed).
 *
 * Each K/V tile is packed once per call, by the first task that reads it (an atomic state
 * per tile; no thread waits for another: one that finds a tile being packed packs its own
 * copy), and read packed by every later query tile of its (request, KV head): K transposed
 * ([D, 16]: keys in lanes, so a query row's 16 scores are D broadcast-FMAs), V rows [16, D]
 * as float32. Where the
 * compiler targets AVX-512 (__AVX512F__: -march=native on such a host) the scores, exp and
 * P.V are 16-lane intrinsics over blocks of rows; where it also targets AVX512-BF16
 * (__AVX512BF16__) a bfloat16 cache whose q is exact in bfloat16 (a bfloat16 model's) takes
 * q.k from _mm512_dpbf16_ps on pairs of the cache's values as stored, on the unscaled q,
 * and scales the sums: the same exact products, float32 sums in another order (and, for a
 * scale that is not a power of two, one rounding after the sum instead of one on each q),
 * and, for the query rows the caller asks for (positions from pv_from on; -1: none) where
 * the output is bfloat16 too (a bfloat16 model;
 * not -DNO_BF16_PV), P.V on pairs of keys: each tile's probabilities rounded to bfloat16 (as the AMX kernel's P tiles),
 * the V rows packed as pairs, exact products and float32 sums (one 2048-token prompt,
 * Hq 16 / Hk 8 / D 128, a 2-core Zen 4: 127 -> 92 ms a layer). Where it targets AVX2 and
 * FMA but not AVX-512, the scores and P.V are 8-lane intrinsics over blocks of rows (the
 * softmax step stays portable C). Elsewhere the same walk in portable C (which the compiler
 * vectorises for its target).
 *
 * Layouts (element strides; the last dimension is contiguous):
 *   q, out       [T, Hq, D] float32 or bfloat16 (each its own flag), rows q_stride and
 *                out_stride elements apart, each row's [Hq, D] contiguous
 *   q_start      [N] int32: request n's query rows are q_start[n] .. q_start[n] + q_len[n]
 *   q_len        [N] int32: its query tokens (L)
 *   seq_lens     [N] int32: its context length including those tokens (already written)
 *   block_table  [N, table_stride] int32: its physical blocks in order
 *   k/v cache    [NB, BS, Hk, D] viewed through strides (s_block, s_slot, s_head)
 * window > 0 keeps, for a query at position p, only keys > p - window; softcap > 0 applies
 * Gemma 2's softcap * tanh(score / softcap) before the mask and softmax. sinks (NULL: none)
 * [Hq] float32: gpt-oss's per-head sink logits, each in its head's softmax denominator with
 * no value (a row's walk starts from it as from a key: online_begin).
 *
 * Threads: OpenMP over the tasks, the longest first (a dynamic schedule then balances).
 * Built against the libgomp torch already loaded (same soname): torch's thread pool.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16_rows.h"
#include "kv_rows.h"
#include "exp_f32.h"
#include "online_softmax.h"

/* Query rows of a task: QT tokens x G heads, QT = ROWS_TARGET / G (at least 1): enough rows
 * to pay the K tile's transpose, few enough that q, the accumulators and the tiles stay in
 * L1/L2 and that little of the causal diagonal is masked work. 4 prompts of 128 tokens, 8
 * layers of the 75M preset (G = 3), 1 thread, kernel alone, best of 7: 32 / 48 / 64 / 96
 * rows: bf16 7.7 / 7.3 / 7.6 / 7.9 ms, fp32 10.5 / 9.0 / 9.7 / 8.8-13 ms (K tiles then packed
 * per task). */
#ifndef ROWS_TARGET
#define ROWS_TARGET 48
#endif
#define KT 16 /* keys per tile */

#if defined(__AVX512F__)
#include <immintrin.h>
#define PREFILL_AVX512 1
#if defined(__AVX512BF16__) && !defined(NO_BF16_DOT)
#define PREFILL_BF16_DOT 1
#endif
#endif

#ifdef PREFILL_AVX512
#include "exp512.h"
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define PREFILL_AVX2 1 /* 8-lane scores and P.V where the host has AVX2 but not AVX-512 */
#endif

typedef struct {
    const void *q;
    int q_bf16;
    int64_t q_stride;
    void *out;
    int out_bf16;
    int64_t out_stride;
    const int32_t *q_start, *q_len, *seq_lens, *block_table;
    int64_t table_stride;
    const void *k_cache, *v_cache;
    int kv;                     /* KV_F32, KV_BF16, KV_FP8 (kv_rows.h) */
    const float *k_lut, *v_lut; /* KV_FP8: each byte's value times the scale [256] */
    int64_t s_block, s_slot, s_head;
    int hq, hk, g, d, block_size, qt, window;
    float scale, softcap;
    /* K/V tiles packed once per call by the first task that needs them, read by every later
     * one: request n, head h, tile t (keys 16 t' .. of block t / tpb, t' = t % tpb) at tile
     * tile_off[n] + h * ntiles[n] + t, tile_floats apart; its state 0 (not packed), 1 (being
     * packed), 2 (packed) */
    float *packed;
    int *state;
    const int64_t *tile_off;
    const int32_t *ntiles;
    int tpb;
    int64_t tile_floats;
    const float *sinks; /* [Hq] sink logits (NULL: none) */
    /* P.V on bf16 pairs for query positions from pv_from on: the caller asked (pv_from >=
     * 0), the build has them, a bf16 cache and output (a bf16 model) and D a multiple of
     * 16; the tiles then carry V as pairs */
    int pv_pairs;
    int pv_from;
} args_t;

/* A thread's scratch, for tasks of up to `rows` query rows. */
typedef struct {
    float *qs;    /* [R, D] scaled q rows (row r = query r / G, head r % G) */
    float *acc;   /* [R, D] */
    float *s;     /* [R, 16] scores, then probabilities */
    float *m, *l, *alpha; /* [R] running max, sum, this tile's rescale */
    uint16_t *qb; /* [R, D] q rows as bfloat16 (when exact) */
    uint32_t *pb; /* [R, 8] probabilities as bfloat16 pairs (the bf16 P.V) */
    float *tile;  /* a private packed tile, while another thread packs the shared one */
} scratch_t;

/* -- scores: s[r, 0:16] = q[r] . K tile ------------------------------------------------- */

#if !defined(PREFILL_AVX512) && !defined(PREFILL_AVX2)
static void scores_portable(const float *qs, const float *kt, float *s, int rows, int d) {
    for (int r = 0; r < rows; r++) {
        float acc[KT] = {0};
        const float *qr = qs + (int64_t)r * d;
        for (int e = 0; e < d; e++) {
            float x = qr[e];
#pragma omp simd
            for (int j = 0; j < KT; j++) acc[j] += x * kt[e * KT + j];
        }
        memcpy(s + (int64_t)r * KT, acc, sizeof acc);
    }
}
#endif

#ifdef PREFILL_AVX512
/* RB rows at a time: one K load feeds RB independent FMA chains. BF16: kt holds bfloat16
 * pairs [D / 2, 16] and q bfloat16 rows, lane j += q[2e] k_j[2e] + q[2e+1] k_j[2e+1]
 * (exact products, float32 sums). */
static inline __attribute__((always_inline)) void scores_block(const void *q, const void *kt,
                                                              float *s, int d, const int RB,
                                                              const int BF16) {
    __m512 a[8];
#pragma GCC unroll 8
    for (int i = 0; i < RB; i++) a[i] = _mm512_setzero_ps();
    if (!BF16) {
        const float *q0 = q, *k0 = kt;
        for (int e = 0; e < d; e++) {
            __m512 k = _mm512_load_ps(k0 + e * KT);
#pragma GCC unroll 8
            for (int i = 0; i < RB; i++)
                a[i] = _mm512_fmadd_ps(_mm512_set1_ps(q0[(int64_t)i * d + e]), k, a[i]);
        }
    }
#ifdef PREFILL_BF16_DOT
    if (BF16) {
        const uint32_t *q0 = q, *k0 = kt;
        int half = d / 2;
        for (int e = 0; e < half; e++) {
            __m512bh k = (__m512bh)_mm512_load_si512(k0 + e * KT);
#pragma GCC unroll 8
            for (int i = 0; i < RB; i++)
                a[i] = _mm512_dpbf16_ps(
                    a[i], (__m512bh)_mm512_set1_epi32((int)q0[(int64_t)i * half + e]), k);
        }
    }
#endif
#pragma GCC unroll 8
    for (int i = 0; i < RB; i++) _mm512_store_ps(s + (int64_t)i * KT, a[i]);
}

#define SCORES_FN(RB, BF16)                                                                 \
    static void scores_##RB##_##BF16(const void *q, const void *kt, float *s, int d) {    \
        scores_block(q, kt, s, d, RB, BF16);                                              \
    }
SCORES_FN(8, 0) SCORES_FN(4, 0) SCORES_FN(3, 0) SCORES_FN(2, 0) SCORES_FN(1, 0)
#ifdef PREFILL_BF16_DOT
SCORES_FN(8, 1) SCORES_FN(4, 1) SCORES_FN(3, 1) SCORES_FN(2, 1) SCORES_FN(1, 1)
#endif

/* s[r, 0:16] for every row: blocks of 8 (or 4) rows, the last block overlapping the one
 * before it rather than leaving a tail of single rows (one FMA chain each, latency bound):
 * an overlapped row is computed again from the same inputs in the same order, the same
 * bits. q: [rows, D] float32, or bfloat16 (bf16: kt holds the pairs). */
static void scores_avx512(const void *q, const void *kt, float *s, int rows, int d, int bf16) {
    int64_t esize = bf16 ? 2 : 4;
    typedef void (*fn_t)(const void *, const void *, float *, int);
    fn_t f8 = scores_8_0, f4 = scores_4_0, small[4] = {NULL, scores_1_0, scores_2_0, scores_3_0};
#ifdef PREFILL_BF16_DOT
    if (bf16) {
        f8 = scores_8_1, f4 = scores_4_1;
        small[1] = scores_1_1, small[2] = scores_2_1, small[3] = scores_3_1;
    }
#endif
    int rb = rows >= 8 ? 8 : rows >= 4 ? 4 : rows;
    fn_t f = rb == 8 ? f8 : rb == 4 ? f4 : small[rb];
    for (int r = 0; r < rows; r += rb) {
        int r0 = r + rb <= rows ? r : rows - rb;
        f((const char *)q + r0 * d * esize, kt, s + (int64_t)r0 * KT, d);
    }
}
#endif

/* -- softmax step: s[r] -> p[r] (0 outside the row's valid keys), m, l, alpha ----------- */

static inline void softmax_row(float *s, float *m, float *l, float *alpha, uint32_t valid,
                               int nt) {
    if (valid == 0) { /* no key of this tile is visible to the row */
        memset(s, 0, sizeof(float) * KT);
        *alpha = 1.0f;
        return;
    }
#ifdef PREFILL_AVX512
    __mmask16 k = (__mmask16)valid;
    __m512 x = _mm512_load_ps(s);
    float mx = _mm512_mask_reduce_max_ps(k, x);
    mx = mx > *m ? mx : *m;
    __m512 p = _mm512_maskz_mov_ps(k, exp512(_mm512_sub_ps(x, _mm512_set1_ps(mx))));
    float a = online_rescale(*m, mx);
    *l = *l * a + _mm512_reduce_add_ps(p);
    _mm512_store_ps(s, p);
    (void)nt;
#else
    float mx = *m;
    for (int j = 0; j < nt; j++)
        if ((valid >> j) & 1u) mx = s[j] > mx ? s[j] : mx;
    float a = online_rescale(*m, mx), sum = 0.0f;
    for (int j = 0; j < KT; j++) {
        float p = j < nt && ((valid >> j) & 1u) ? exp_f32(s[j] - mx) : 0.0f;
        s[j] = p;
        sum += p;
    }
    *l = *l * a + sum;
#endif
    *m = mx;
    *alpha = a;
}

/* -- P.V: acc[r] = acc[r] * alpha[r] + sum_j p[r, j] v[j] -------------------------------- */

static void pv_portable(float *acc, const float *p, const float *alpha, const float *v,
                        int rows, int d, int nt) {
    for (int r = 0; r < rows; r++) {
        float *a = acc + (int64_t)r * d, al = alpha[r];
        const float *pr = p + (int64_t)r * KT;
        if (al != 1.0f)
#pragma omp simd
            for (int e = 0; e < d; e++) a[e] *= al;
        for (int j = 0; j < nt; j++) {
            float pj = pr[j];
            if (pj == 0.0f) continue;
#pragma omp simd
            for (int e = 0; e < d; e++) a[e] += pj * v[j * d + e];
        }
    }
}

#ifdef PREFILL_AVX512
/* RB rows x NC 16-lane chunks of acc in registers; each V chunk loaded once per RB rows. */
static inline __attribute__((always_inline)) void pv_block(float *acc, const float *p,
                                                          const float *alpha, const float *v,
                                                          int d, int nt, const int RB,
                                                          const int NC) {
    __m512 a[4][8];
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++) {
        __m512 al = _mm512_set1_ps(alpha[i]);
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++)
            a[i][c] = _mm512_mul_ps(_mm512_loadu_ps(acc + (int64_t)i * d + 16 * c), al);
    }
    for (int j = 0; j < nt; j++) {
        __m512 vv[8];
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) vv[c] = _mm512_load_ps(v + j * d + 16 * c);
#pragma GCC unroll 4
        for (int i = 0; i < RB; i++) {
            __m512 pj = _mm512_set1_ps(p[i * KT + j]);
#pragma GCC unroll 8
            for (int c = 0; c < NC; c++) a[i][c] = _mm512_fmadd_ps(pj, vv[c], a[i][c]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++)
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) _mm512_storeu_ps(acc + (int64_t)i * d + 16 * c, a[i][c]);
}

#define PV_FN(RB, NC)                                                                       \
    static void pv_##RB##_##NC(float *acc, const float *p, const float *alpha,            \
                               const float *v, int d, int nt) {                           \
        pv_block(acc, p, alpha, v, d, nt, RB, NC);                                        \
    }
PV_FN(4, 1) PV_FN(4, 2) PV_FN(4, 4) PV_FN(2, 8) PV_FN(1, 1) PV_FN(1, 2) PV_FN(1, 4)
PV_FN(1, 8)

/* PRE##_avx512: P.V of one tile over every row, RB-row blocks of the PRE##_RB_NC kernels
 * (rows PW elements of P apart), the last rows one at a time; 1 where D took the
 * intrinsics (D = 16, 32, 64, or a multiple of 128). A D past 128 (Gemma's 256) is done in
 * passes of 128 columns: acc's and V's rows keep their stride d, each pass scales only its
 * own columns by alpha. One scheme for float32 P (pv) and bfloat16 pairs (pvb). */
#define PV_ROWS(PRE, P_T, V_T, PW)                                                          \
    static int PRE##_avx512(float *acc, const P_T *p, const float *alpha, const V_T *v,   \
                            int rows, int d, int nt) {                                    \
        typedef void (*fn_t)(float *, const P_T *, const float *, const V_T *, int, int); \
        int nc = d / 16, r = 0, rb;                                                       \
        if (d % 16 != 0) return 0;                                                        \
        if (nc > 8 && nc % 8 == 0) {                                                      \
            for (int c0 = 0; c0 < d; c0 += 128) {                                         \
                for (r = 0; r + 2 <= rows; r += 2)                                        \
                    PRE##_2_8(acc + (int64_t)r * d + c0, p + (int64_t)r * PW, alpha + r,  \
                              v + c0, d, nt);                                             \
                if (r < rows)                                                             \
                    PRE##_1_8(acc + (int64_t)r * d + c0, p + (int64_t)r * PW, alpha + r,  \
                              v + c0, d, nt);                                             \
            }                                                                             \
            return 1;                                                                     \
        }                                                                                 \
        fn_t big, one;                                                                    \
        switch (nc) {                                                                     \
        case 1: big = PRE##_4_1, one = PRE##_1_1, rb = 4; break;                          \
        case 2: big = PRE##_4_2, one = PRE##_1_2, rb = 4; break;                          \
        case 4: big = PRE##_4_4, one = PRE##_1_4, rb = 4; break;                          \
        case 8: big = PRE##_2_8, one = PRE##_1_8, rb = 2; break;                          \
        default: return 0;                                                                \
        }                                                                                 \
        for (; r + rb <= rows; r += rb)                                                   \
            big(acc + (int64_t)r * d, p + (int64_t)r * PW, alpha + r, v, d, nt);          \
        for (; r < rows; r++)                                                             \
            one(acc + (int64_t)r * d, p + (int64_t)r * PW, alpha + r, v, d, nt);          \
        return 1;                                                                         \
    }
PV_ROWS(pv, float, float, KT)
#endif

#ifdef PREFILL_BF16_DOT
/* P.V on bfloat16 pairs: pb [RB, 8] a row's probabilities rounded to bfloat16, two keys a
 * word; vp [8, D] the tile's V rows as pairs (word e of pair jp: v[2 jp][e] | v[2 jp + 1][e]
 * << 16). Lane e += p[2 jp] v[2 jp][e] + p[2 jp + 1] v[2 jp + 1][e]: exact products,
 * float32 sums, half the instructions of the float32 FMAs. */
static inline __attribute__((always_inline)) void pvb_block(float *acc, const uint32_t *pb,
                                                           const float *alpha,
                                                           const uint32_t *vp, int d, int nt,
                                                           const int RB, const int NC) {
    __m512 a[4][8];
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++) {
        __m512 al = _mm512_set1_ps(alpha[i]);
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++)
            a[i][c] = _mm512_mul_ps(_mm512_loadu_ps(acc + (int64_t)i * d + 16 * c), al);
    }
    for (int jp = 0; jp < (nt + 1) / 2; jp++) {
        __m512bh vv[8];
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) vv[c] = (__m512bh)_mm512_load_si512(vp + jp * d + 16 * c);
#pragma GCC unroll 4
        for (int i = 0; i < RB; i++) {
            __m512bh pj = (__m512bh)_mm512_set1_epi32((int)pb[i * (KT / 2) + jp]);
#pragma GCC unroll 8
            for (int c = 0; c < NC; c++) a[i][c] = _mm512_dpbf16_ps(a[i][c], pj, vv[c]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++)
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) _mm512_storeu_ps(acc + (int64_t)i * d + 16 * c, a[i][c]);
}

#define PVB_FN(RB, NC)                                                                      \
    static void pvb_##RB##_##NC(float *acc, const uint32_t *pb, const float *alpha,       \
                                const uint32_t *vp, int d, int nt) {                      \
        pvb_block(acc, pb, alpha, vp, d, nt, RB, NC);                                     \
    }
PVB_FN(4, 1) PVB_FN(4, 2) PVB_FN(4, 4) PVB_FN(2, 8) PVB_FN(1, 1) PVB_FN(1, 2) PVB_FN(1, 4)
PVB_FN(1, 8)

PV_ROWS(pvb, uint32_t, uint32_t, KT / 2)
#endif

#ifdef PREFILL_AVX2
/* scores_block on 8 lanes: RB rows x the tile's 16 keys (two 8-lane halves) in registers,
 * each K load feeding RB rows (the portable loop runs one row's 16 lanes at a time: two FMA
 * chains, latency bound). */
static inline __attribute__((always_inline)) void scores_block8(const float *q, const float *kt,
                                                               float *s, int d, const int RB) {
    __m256 a[4][2];
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++) a[i][0] = a[i][1] = _mm256_setzero_ps();
    for (int e = 0; e < d; e++) {
        __m256 k0 = _mm256_load_ps(kt + e * KT), k1 = _mm256_load_ps(kt + e * KT + 8);
#pragma GCC unroll 4
        for (int i = 0; i < RB; i++) {
            __m256 x = _mm256_broadcast_ss(q + (int64_t)i * d + e);
            a[i][0] = _mm256_fmadd_ps(x, k0, a[i][0]);
            a[i][1] = _mm256_fmadd_ps(x, k1, a[i][1]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++) {
        _mm256_store_ps(s + (int64_t)i * KT, a[i][0]);
        _mm256_store_ps(s + (int64_t)i * KT + 8, a[i][1]);
    }
}

#define SCORES8_FN(RB)                                                                      \
    static void scores8_##RB(const float *q, const float *kt, float *s, int d) {          \
        scores_block8(q, kt, s, d, RB);                                                   \
    }
SCORES8_FN(4) SCORES8_FN(3) SCORES8_FN(2) SCORES8_FN(1)

/* s[r, 0:16] for every row, 4 rows at a time, the last block overlapping the one before it
 * (scores_avx512's scheme: an overlapped row gets the same bits again). */
static void scores_avx2(const float *q, const float *kt, float *s, int rows, int d) {
    typedef void (*fn_t)(const float *, const float *, float *, int);
    fn_t fns[5] = {NULL, scores8_1, scores8_2, scores8_3, scores8_4};
    int rb = rows >= 4 ? 4 : rows;
    for (int r = 0; r < rows; r += rb) {
        int r0 = r + rb <= rows ? r : rows - rb;
        fns[rb](q + (int64_t)r0 * d, kt, s + (int64_t)r0 * KT, d);
    }
}

/* pv_block on 8 lanes: RB rows x CB 8-lane chunks of acc in registers, D in passes of 8 CB
 * columns; each V chunk loaded once per RB rows. */
static inline __attribute__((always_inline)) void pv_block8(float *acc, const float *p,
                                                           const float *alpha, const float *v,
                                                           int d, int nt, const int RB,
                                                           const int CB) {
    for (int c0 = 0; c0 < d; c0 += 8 * CB) {
        __m256 a[2][4];
#pragma GCC unroll 2
        for (int i = 0; i < RB; i++) {
            __m256 al = _mm256_set1_ps(alpha[i]);
#pragma GCC unroll 4
            for (int c = 0; c < CB; c++)
                a[i][c] = _mm256_mul_ps(_mm256_loadu_ps(acc + (int64_t)i * d + c0 + 8 * c), al);
        }
        for (int j = 0; j < nt; j++) {
            __m256 vv[4];
#pragma GCC unroll 4
            for (int c = 0; c < CB; c++) vv[c] = _mm256_load_ps(v + j * d + c0 + 8 * c);
#pragma GCC unroll 2
            for (int i = 0; i < RB; i++) {
                __m256 pj = _mm256_broadcast_ss(p + i * KT + j);
#pragma GCC unroll 4
                for (int c = 0; c < CB; c++) a[i][c] = _mm256_fmadd_ps(pj, vv[c], a[i][c]);
            }
        }
#pragma GCC unroll 2
        for (int i = 0; i < RB; i++)
#pragma GCC unroll 4
            for (int c = 0; c < CB; c++)
                _mm256_storeu_ps(acc + (int64_t)i * d + c0 + 8 * c, a[i][c]);
    }
}

#define PV8_FN(RB, CB)                                                                      \
    static void pv8_##RB##_##CB(float *acc, const float *p, const float *alpha,           \
                                const float *v, int d, int nt) {                          \
        pv_block8(acc, p, alpha, v, d, nt, RB, CB);                                       \
    }
PV8_FN(2, 4) PV8_FN(1, 4) PV8_FN(2, 2) PV8_FN(1, 2)

/* 1 where D took the intrinsics (a multiple of 16). */
static int pv_avx2(float *acc, const float *p, const float *alpha, const float *v, int rows,
                   int d, int nt) {
    if (d % 16 != 0) return 0;
    int wide = d % 32 == 0, r = 0;
    for (; r + 2 <= rows; r += 2) {
        float *a = acc + (int64_t)r * d;
        const float *pr = p + (int64_t)r * KT, *al = alpha + r;
        if (wide)
            pv8_2_4(a, pr, al, v, d, nt);
        else
            pv8_2_2(a, pr, al, v, d, nt);
    }
    if (r < rows) {
        float *a = acc + (int64_t)r * d;
        const float *pr = p + (int64_t)r * KT, *al = alpha + r;
        if (wide)
            pv8_1_4(a, pr, al, v, d, nt);
        else
            pv8_1_2(a, pr, al, v, d, nt);
    }
    return 1;
}
#endif

/* -- one task ---------------------------------------------------------------------------- */

#ifdef PREFILL_BF16_DOT
#define PACK_PAIRS 1
#else
#define PACK_PAIRS 0
#endif

/* A packed tile's parts: kt [D, 16] float32, K transposed (keys in lanes, lanes past the
 * context zero); kp [D / 2, 16] the bfloat16 cache's K as pairs (the same, for the BF16
 * dot products); v [16, D] float32; vp [8, D] the bfloat16 cache's V rows as pairs of
 * keys (for the bf16 P.V, packed only where it runs; rows past the context zero). */
static inline float *tile_kt(float *tile, int d) { return (void)d, tile; }
static inline uint32_t *tile_kp(float *tile, int d) { return (uint32_t *)(tile + KT * d); }
static inline float *tile_v(float *tile, int d) { return tile + KT * d + KT * d / 2; }
static inline uint32_t *tile_vp(float *tile, int d) {
    return (uint32_t *)(tile + KT * d * 5 / 2);
}
#define TILE_FLOATS(d) ((int64_t)KT * (d) * 5 / 2) /* without vp */
#define TILE_VP_FLOATS(d) ((int64_t)(KT / 2) * (d))

/* Pack the nt keys of block b from row slot0 on, KV head `head`, into `tile`. */
static void pack_tile(const args_t *a, const int32_t *table, int b, int slot0, int nt,
                      int head, float *tile) {
    int d = a->d;
    int64_t base = (int64_t)table[b] * a->s_block + (int64_t)head * a->s_head +
                   (int64_t)slot0 * a->s_slot;
    float *kt = tile_kt(tile, d), *v = tile_v(tile, d);
    uint32_t *kp = tile_kp(tile, d);
    uint16_t *vp = (uint16_t *)tile_vp(tile, d); /* [8, D, 2] */
    if (nt < KT) {
        memset(kt, 0, sizeof(float) * (size_t)d * KT);
        if (a->kv == KV_BF16 && PACK_PAIRS) memset(kp, 0, sizeof(uint32_t) * (size_t)(d / 2) * KT);
        if (a->pv_pairs) memset(vp, 0, sizeof(uint32_t) * (size_t)d * (KT / 2));
    }
    for (int j = 0; j < nt; j++) {
        int64_t off = base + (int64_t)j * a->s_slot;
        if (a->kv == KV_FP8) {
            const uint8_t *kr = (const uint8_t *)a->k_cache + off;
            for (int e = 0; e < d; e++) kt[e * KT + j] = a->k_lut[kr[e]];
        } else if (a->kv == KV_BF16) {
            const uint16_t *kr = (const uint16_t *)a->k_cache + off;
            for (int e = 0; e < d; e++) kt[e * KT + j] = bf16_to_f32(kr[e]);
            for (int e = 0; e < (PACK_PAIRS ? d / 2 : 0); e++) { /* bf16 pairs: one word */
                uint32_t u;
                memcpy(&u, kr + 2 * e, sizeof u);
                kp[e * KT + j] = u;
            }
            const uint16_t *vr = (const uint16_t *)a->v_cache + off;
            uint16_t *vo = vp + (int64_t)(j / 2) * 2 * d + j % 2; /* key j's half of pair j/2 */
            for (int e = 0; e < (a->pv_pairs ? d : 0); e++) vo[2 * e] = vr[e];
        } else {
            const float *kr = (const float *)a->k_cache + off;
            for (int e = 0; e < d; e++) kt[e * KT + j] = kr[e];
        }
        load_kv_row(v + (int64_t)j * d, a->v_cache, a->kv, a->v_lut, off, d);
    }
}

/* Request n's tile t for KV head `head` (keys k0 .. of block b from row slot0 on), packed:
 * the shared copy, packed here when no thread has yet (no thread ever waits: while another
 * packs it, a private copy in scratch). */
static const float *get_tile(const args_t *a, int n, int head, int t, scratch_t *w) {
    int bs = a->block_size, b = t / a->tpb, slot0 = t % a->tpb * KT, k0 = b * bs + slot0;
    int nt = bs - slot0 < KT ? bs - slot0 : KT;
    nt = a->seq_lens[n] - k0 < nt ? a->seq_lens[n] - k0 : nt; /* all that the context has */
    int64_t at = a->tile_off[n] + (int64_t)head * a->ntiles[n] + t;
    float *tile = a->packed + at * a->tile_floats;
    int *state = a->state + at;
    if (__atomic_load_n(state, __ATOMIC_ACQUIRE) == 2) return tile;
    const int32_t *table = a->block_table + (int64_t)n * a->table_stride;
    int expect = 0;
    if (__atomic_compare_exchange_n(state, &expect, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        pack_tile(a, table, b, slot0, nt, head, tile);
        __atomic_store_n(state, 2, __ATOMIC_RELEASE);
        return tile;
    }
    if (expect == 2) return tile;
    pack_tile(a, table, b, slot0, nt, head, w->tile);
    return w->tile;
}

/* The keys of [k0, k0 + nt) that a query at position `pos` sees, as bits. */
static inline uint32_t visible(int pos, int k0, int nt, int window) {
    int hi = pos - k0 + 1; /* keys k0 .. pos */
    hi = hi < 0 ? 0 : hi > nt ? nt : hi;
    uint32_t bits = hi == 32 ? 0xffffffffu : (1u << hi) - 1u;
    if (window > 0) {
        int lo = pos - window + 1 - k0; /* keys before pos - window + 1 are out */
        lo = lo < 0 ? 0 : lo > nt ? nt : lo;
        bits &= ~((1u << lo) - 1u);
    }
    return bits;
}

/* Request n, KV head `head`, query tokens i0 .. i0 + nq. */
static void run_task(const args_t *a, int n, int head, int i0, int nq, scratch_t *w) {
    int g = a->g, d = a->d, rows = nq * g, bs = a->block_size;
    int len = a->q_len[n], ctx = a->seq_lens[n];
    int pos0 = ctx - len + i0, pos1 = pos0 + nq - 1; /* positions of the first, last query */
    int64_t q0 = (int64_t)a->q_start[n] + i0, h0 = (int64_t)head * g * d;
    for (int i = 0; i < nq; i++) {
        load_row(w->qs + (int64_t)i * g * d, a->q, a->q_bf16, (q0 + i) * a->q_stride + h0,
                 g * d);
    }
    int pairs = 0;
#ifdef PREFILL_BF16_DOT
    if (a->kv == KV_BF16 && d % 32 == 0) { /* q exact in bfloat16: the dot products take it
                                            * unscaled, their sums are scaled */
        int exact = 1;
        for (int64_t e = 0; e < (int64_t)rows * d; e++) {
            uint32_t u;
            memcpy(&u, &w->qs[e], sizeof u);
            w->qb[e] = (uint16_t)(u >> 16);
            exact &= (u & 0xffffu) == 0;
        }
        pairs = exact;
    }
#endif
    for (int64_t e = 0; e < (int64_t)rows * d; e++) w->qs[e] *= a->scale;
    for (int r = 0; r < rows; r++) /* row r: query head head * G + r % G */
        online_begin(a->sinks, (int64_t)head * g + r % g, w->m + r, w->l + r);
    memset(w->acc, 0, sizeof(float) * (size_t)rows * (size_t)d);
    int kstart = a->window > 0 && pos0 - a->window + 1 > 0 ? pos0 - a->window + 1 : 0;
    int kend = pos1 + 1; /* keys past the last query are never read */
    /* key tiles: 16 keys from the start of a block on (a tile never crosses a block); the
     * first may start before the window and the last past the diagonal: masked there */
    int tpb = a->tpb, t_first = kstart / bs * tpb + kstart % bs / KT;
    int t_last = (kend - 1) / bs * tpb + (kend - 1) % bs / KT;
    for (int t = t_first; t <= t_last; t++) {
        int b = t / tpb, slot0 = t % tpb * KT, k0 = b * bs + slot0;
        int nt = bs - slot0 < KT ? bs - slot0 : KT;
        nt = kend - k0 < nt ? kend - k0 : nt; /* keys past the last query: never read */
        float *tile = (float *)get_tile(a, n, head, t, w);
#ifdef PREFILL_AVX512
        if (pairs) {
            scores_avx512(w->qb, tile_kp(tile, d), w->s, rows, d, 1);
            float sc = a->scale; /* a local: w->s may alias *a for the compiler */
            for (int64_t e = 0; e < (int64_t)rows * KT; e++) w->s[e] *= sc;
        } else
            scores_avx512(w->qs, tile_kt(tile, d), w->s, rows, d, 0);
#elif defined(PREFILL_AVX2)
        (void)pairs;
        scores_avx2(w->qs, tile_kt(tile, d), w->s, rows, d);
#else
        (void)pairs;
        scores_portable(w->qs, tile_kt(tile, d), w->s, rows, d);
#endif
        if (a->softcap > 0.0f) softcap_scores(w->s, (int64_t)rows * KT, a->softcap);
        /* every query of the tile sees every key: past the diagonal, inside the window */
        int all = k0 + nt - 1 <= pos0 && (a->window <= 0 || k0 > pos1 - a->window);
        for (int i = 0; i < nq; i++) {
            uint32_t valid = all ? (1u << nt) - 1u : visible(pos0 + i, k0, nt, a->window);
            for (int gi = 0; gi < g; gi++) {
                int r = i * g + gi;
                softmax_row(w->s + (int64_t)r * KT, w->m + r, w->l + r, w->alpha + r,
                            valid, nt);
            }
        }
        int done = 0, r0 = rows; /* rows [0, r0) keep float32 P: positions before pv_from */
#ifdef PREFILL_BF16_DOT
        if (a->pv_pairs) { /* the probabilities rounded to bf16, as the AMX kernel's */
            int64_t cut = ((int64_t)a->pv_from - pos0) * g; /* row r sits at pos0 + r / g */
            r0 = cut < 0 ? 0 : cut > rows ? rows : (int)cut;
            for (int r = r0; r < rows; r++) /* round to nearest even, as the tiles' inputs */
                _mm256_store_si256((__m256i *)(w->pb + (int64_t)r * (KT / 2)),
                                   (__m256i)_mm512_cvtneps_pbh(_mm512_load_ps(w->s + r * KT)));
            if (r0 < rows) /* D is a multiple of 16 (pv_pairs): always taken */
                pvb_avx512(w->acc + (int64_t)r0 * d, w->pb + (int64_t)r0 * (KT / 2),
                           w->alpha + r0, tile_vp(tile, d), rows - r0, d, nt);
        }
#endif
        if (r0 > 0) {
#ifdef PREFILL_AVX512
            done = pv_avx512(w->acc, w->s, w->alpha, tile_v(tile, d), r0, d, nt);
#elif defined(PREFILL_AVX2)
            done = pv_avx2(w->acc, w->s, w->alpha, tile_v(tile, d), r0, d, nt);
#endif
            if (!done) pv_portable(w->acc, w->s, w->alpha, tile_v(tile, d), r0, d, nt);
        }
    }
    for (int r = 0; r < rows; r++) { /* every row saw its own key: l > 0 */
        float inv = 1.0f / w->l[r], *ar = w->acc + (int64_t)r * d;
        for (int e = 0; e < d; e++) ar[e] *= inv;
    }
    for (int i = 0; i < nq; i++)
        store_row(a->out, a->out_bf16, (q0 + i) * a->out_stride + h0,
                  w->acc + (int64_t)i * g * d, g * d);
}

/* -- the call ---------------------------------------------------------------------------- */

typedef struct {
    int n, head, i0, nq;
    int64_t work; /* keys read x rows, for the longest-first order */
} task_t;

static int by_work_desc(const void *x, const void *y) {
    int64_t a = ((const task_t *)x)->work, b = ((const task_t *)y)->work;
    return a < b ? 1 : a > b ? -1 : 0;
}

static void *alloc64(size_t bytes) {
    return aligned_alloc(64, (bytes + 63) / 64 * 64);
}

static int scratch_init(scratch_t *w, int rows, int d, int64_t tile_floats) {
    size_t rd = (size_t)rows * (size_t)d;
    w->qs = alloc64(sizeof(float) * rd);
    w->acc = alloc64(sizeof(float) * rd);
    w->s = alloc64(sizeof(float) * (size_t)rows * KT);
    w->m = alloc64(sizeof(float) * 3 * (size_t)rows);
    w->qb = alloc64(sizeof(uint16_t) * rd);
    w->pb = alloc64(sizeof(uint32_t) * (size_t)rows * (KT / 2));
    w->tile = alloc64(sizeof(float) * (size_t)tile_floats);
    if (w->m != NULL) w->l = w->m + rows, w->alpha = w->m + 2 * rows;
    return w->qs && w->acc && w->s && w->m && w->qb && w->pb && w->tile;
}

static void scratch_free(scratch_t *w) {
    free(w->qs), free(w->acc), free(w->s), free(w->m);
    free(w->qb), free(w->pb), free(w->tile);
}

/* Returns 0, -1 when memory could not be allocated, -2 for arguments it does not take. */
int paged_prefill(const void *q, int q_bf16, int64_t q_stride, void *out, int out_bf16,
                  int64_t out_stride, const int32_t *q_start, const int32_t *q_len,
                  const int32_t *seq_lens, const int32_t *block_table, int64_t table_stride,
                  int n, const void *k_cache, const void *v_cache, int kv,
                  const float *k_lut, const float *v_lut,
                  int64_t s_block, int64_t s_slot, int64_t s_head, int hq, int hk, int d,
                  int block_size, float scale, int window, float softcap, int num_threads,
                  const float *sinks, int pv_from) {
    if (hk <= 0 || hq % hk != 0 || d <= 0 || block_size <= 0) return -2;
    int g = hq / hk, qt = ROWS_TARGET / g > 0 ? ROWS_TARGET / g : 1;
    args_t a = {q, q_bf16, q_stride, out, out_bf16, out_stride, q_start, q_len, seq_lens,
                block_table, table_stride, k_cache, v_cache, kv, k_lut, v_lut, s_block, s_slot, s_head,
                hq, hk, g, d, block_size, qt, window, scale, softcap,
                NULL, NULL, NULL, NULL, 0, 0, sinks, 0}; /* the packed tiles: below */
#ifndef NO_BF16_PV
    int reached = 0; /* a query row at pv_from or later: else no tile needs V as pairs */
    for (int i = 0; i < n; i++) reached |= pv_from >= 0 && seq_lens[i] - 1 >= pv_from;
    a.pv_pairs = PACK_PAIRS && reached && kv == KV_BF16 && out_bf16 && d % 16 == 0;
    a.pv_from = pv_from;
#else
    (void)pv_from;
#endif
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += (int64_t)((q_len[i] + qt - 1) / qt) * hk;
    task_t *tasks = malloc(sizeof(task_t) * (size_t)(total > 0 ? total : 1));
    if (tasks == NULL) return -1;
    int64_t t = 0;
    for (int i = 0; i < n; i++) {
        for (int i0 = 0; i0 < q_len[i]; i0 += qt) {
            int nq = q_len[i] - i0 < qt ? q_len[i] - i0 : qt;
            int64_t last = (int64_t)seq_lens[i] - q_len[i] + i0 + nq; /* keys read */
            int64_t first = window > 0 ? last - nq - window + 1 : 0;
            int64_t work = (last - (first > 0 ? first : 0)) * nq;
            for (int h = 0; h < hk; h++) tasks[t++] = (task_t){i, h, i0, nq, work};
        }
    }
    qsort(tasks, (size_t)total, sizeof(task_t), by_work_desc);
    /* room for the packed K/V tiles of every block of every request and KV head, ceil(BS /
     * 16) tiles per block; only those a task reads get packed */
    int64_t *tile_off = malloc(sizeof(int64_t) * (size_t)(n + 1));
    int32_t *ntiles = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    a.tpb = (block_size + KT - 1) / KT;
    a.tile_floats = TILE_FLOATS(d) + (a.pv_pairs ? TILE_VP_FLOATS(d) : 0);
    if (tile_off != NULL && ntiles != NULL) {
        tile_off[0] = 0;
        for (int i = 0; i < n; i++) {
            int nb = (seq_lens[i] + block_size - 1) / block_size;
            ntiles[i] = nb * a.tpb;
            tile_off[i + 1] = tile_off[i] + (int64_t)ntiles[i] * hk;
        }
    }
    size_t packed_floats = (size_t)(n > 0 && tile_off ? tile_off[n] : 0) * (size_t)a.tile_floats;
    float *packed = tile_off && ntiles ? alloc64(sizeof(float) * (packed_floats + 1)) : NULL;
    int *state = packed ? calloc((size_t)tile_off[n] + 1, sizeof(int)) : NULL;
    if (state == NULL) {
        free(tasks), free(tile_off), free(ntiles), free(packed);
        return -1;
    }
    a.packed = packed, a.state = state, a.tile_off = tile_off, a.ntiles = ntiles;
    int failed = 0;
#pragma omp parallel num_threads(num_threads) reduction(| : failed)
    {
        scratch_t w = {0};
        int ok = scratch_init(&w, qt * g, d, a.tile_floats);
        failed |= !ok;
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < total; i++) {
            if (!ok) continue;
            run_task(&a, tasks[i].n, tasks[i].head, tasks[i].i0, tasks[i].nq, &w);
        }
        scratch_free(&w);
    }
    free(tasks), free(tile_off), free(ntiles), free(packed), free(state);
    return failed ? -1 : 0;
}
