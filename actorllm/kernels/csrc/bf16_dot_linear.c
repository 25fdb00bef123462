/* bfloat16 linears of few rows on AVX512-BF16 dot products, for CPUs that have them but no
 * AMX tiles (AMD Zen 4 and 5): out[M, N] = x[M, K] @ w[N, K]^T (+ bias).
 *
 * A decode step multiplies 1-32 rows by each weight, read from memory once a step. oneDNN's
 * prepacked bf16 matmul computes at M = 32 near the cores' dot-product rate on a weight in
 * cache, but on weights streamed from memory (every decode step's) it waits for them: on
 * a 2-core Zen 4 VM the Qwen3-0.6B shape's linears took 35 % longer in a decode step than
 * on a cached weight. This kernel streams a weight packed for it front to back, asking for
 * it ahead, so the loads hide under the products.
 *
 * Packed layout (uint16 bf16 bits): blocks of 32 output columns (N padded with zero
 * columns to a multiple of 32), each K / 2 pair rows of 64 values, contiguous: pair row p
 * of block b holds, for column c, w[32 b + c][2 p] then w[32 b + c][2 p + 1], the order
 * _mm512_dpbf16_ps reads (lane c += x[2 p] w[c][2 p] + x[2 p + 1] w[c][2 p + 1]). A block
 * is 64 K bytes.
 *
 * Registers: up to RB_MAX rows x 32 columns of float32 sums (two zmm a row), the pair row's
 * two weight vectors, one broadcast of x's pair; rows past RB_MAX take more passes over a
 * block (from L2: one block is 64 KB at K = 1024). x is copied once a call as pairs
 * across rows ([K / 2, M] words): a pair row's broadcasts read one cache line, where x's own
 * rows, K * 2 bytes apart, put 12 lines in one L1 set at K = 2048 (4 KB apart) and
 * thrashed it (Llama-3.2-1B's LM head at 32 rows: 68 -> 42 ms, oneDNN 52). Each product
 * is exact and summed in float32, rounded to bfloat16 once at the output (round to nearest
 * even), as a bf16 GEMM.
 *
 * Summation order: oneDNN's prepacked bf16 matmul, which computes the rows past 32, sums K
 * in blocks (K_BLOCK), each block's sums from zero, the blocks' sums added in order; this
 * kernel sums in the same order, so a row gets oneDNN's bits whatever the row count: a
 * row computed in a decode step and again in a replay's prefill agrees (a request replayed
 * after a crash continues with its tokens; tests/kernels/test_bf16_dot_linear.py compares
 * the two on hosts whose oneDNN takes this ISA's path, i.e. without AMX).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__) && defined(__AVX512BF16__)
#include <immintrin.h>

#define RB_MAX 12 /* 24 accumulators + 2 weight vectors + 1 broadcast of 32 zmm registers */
#ifndef PF_PAIRS
#define PF_PAIRS 24 /* prefetch distance in pair rows (128 bytes each): 3 KB ahead */
#endif

int bf16_dot_available(void) { return 1; }

/* Pair rows of a block of K summed from zero (oneDNN's brgemm on AVX512-BF16, torch 2.13:
 * 512 values up to K = 1024, else 1,024; measured against its products at K = 512-14,336,
 * 1 and 2 threads, 40-300 rows). */
static inline int64_t k_block_pairs(int64_t k) { return (k <= 1024 ? 512 : 1024) / 2; }

/* w: [N, K] bf16 row-major -> packed (N rounded up to 32) x K, see the header. */
void bf16_dot_pack(const uint16_t *w, int64_t n, int64_t k, uint16_t *packed) {
    int64_t blocks = (n + 31) / 32, pairs = k / 2;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < blocks; b++) {
        uint16_t *dst = packed + b * pairs * 64;
        for (int c = 0; c < 32; c++) {
            int64_t col = 32 * b + c;
            const uint16_t *src = w + col * k;
            for (int64_t p = 0; p < pairs; p++) {
                dst[p * 64 + 2 * c] = col < n ? src[2 * p] : 0;
                dst[p * 64 + 2 * c + 1] = col < n ? src[2 * p + 1] : 0;
            }
        }
    }
}

/* RB rows of x as pairs (xp[p * ldp + i]: pair p of row i) times one packed block of 32
 * columns: bias (float32 [32] or NULL) added, rounded to bf16, the first `cols` columns
 * written to out (rows ldo apart). `ahead`: ask for the block's stream ahead (the first
 * pass over it). */
static inline __attribute__((always_inline)) void rows_block(
    const uint32_t *xp, int64_t ldp, int64_t k, const uint16_t *wb, const float *bias,
    uint16_t *out, int64_t ldo, int cols, int ahead, const int RB) {
    __m512 a0[RB_MAX], a1[RB_MAX];
    float tot[RB_MAX][32] __attribute__((aligned(64))); /* the blocks before this one */
    int64_t pairs = k / 2, block = k_block_pairs(k);
    for (int64_t p0 = 0; p0 < pairs; p0 += block) {
        int64_t p1 = p0 + block < pairs ? p0 + block : pairs;
#pragma GCC unroll 12
        for (int i = 0; i < RB; i++) a0[i] = a1[i] = _mm512_setzero_ps();
        for (int64_t p = p0; p < p1; p++) {
            const uint16_t *row = wb + p * 64;
            if (ahead) {
                _mm_prefetch((const char *)(row + PF_PAIRS * 64), _MM_HINT_T0);
                _mm_prefetch((const char *)(row + PF_PAIRS * 64 + 32), _MM_HINT_T0);
            }
            __m512bh w0 = (__m512bh)_mm512_load_si512(row);
            __m512bh w1 = (__m512bh)_mm512_load_si512(row + 32);
            const uint32_t *xr = xp + p * ldp;
#pragma GCC unroll 12
            for (int i = 0; i < RB; i++) {
                __m512bh xb = (__m512bh)_mm512_set1_epi32((int)xr[i]);
                a0[i] = _mm512_dpbf16_ps(a0[i], xb, w0);
                a1[i] = _mm512_dpbf16_ps(a1[i], xb, w1);
            }
        }
#pragma GCC unroll 12
        for (int i = 0; i < RB; i++) {
            if (p0 > 0) { /* the running sums plus this block's */
                a0[i] = _mm512_add_ps(_mm512_load_ps(tot[i]), a0[i]);
                a1[i] = _mm512_add_ps(_mm512_load_ps(tot[i] + 16), a1[i]);
            }
            if (p1 < pairs) {
                _mm512_store_ps(tot[i], a0[i]);
                _mm512_store_ps(tot[i] + 16, a1[i]);
            }
        }
    }
    __m512 b0 = bias ? _mm512_loadu_ps(bias) : _mm512_setzero_ps();
    __m512 b1 = bias ? _mm512_loadu_ps(bias + 16) : _mm512_setzero_ps();
    __mmask16 m0 = cols >= 16 ? 0xffff : (__mmask16)((1u << cols) - 1u);
    __mmask16 m1 = cols >= 32 ? 0xffff : cols <= 16 ? 0 : (__mmask16)((1u << (cols - 16)) - 1u);
#pragma GCC unroll 12
    for (int i = 0; i < RB; i++) {
        __m256bh h0 = _mm512_cvtneps_pbh(_mm512_add_ps(a0[i], b0));
        __m256bh h1 = _mm512_cvtneps_pbh(_mm512_add_ps(a1[i], b1));
        _mm256_mask_storeu_epi16(out + i * ldo, m0, (__m256i)h0);
        _mm256_mask_storeu_epi16(out + i * ldo + 16, m1, (__m256i)h1);
    }
}

#define ROWS_FN(RB)                                                                         \
    static void rows_##RB(const uint32_t *xp, int64_t ldp, int64_t k, const uint16_t *wb, \
                          const float *bias, uint16_t *out, int64_t ldo, int cols,        \
                          int ahead) {                                                    \
        rows_block(xp, ldp, k, wb, bias, out, ldo, cols, ahead, RB);                      \
    }
ROWS_FN(1) ROWS_FN(2) ROWS_FN(3) ROWS_FN(4) ROWS_FN(5) ROWS_FN(6) ROWS_FN(7) ROWS_FN(8)
ROWS_FN(9) ROWS_FN(10) ROWS_FN(11) ROWS_FN(12)

typedef void (*rows_fn)(const uint32_t *, int64_t, int64_t, const uint16_t *, const float *,
                        uint16_t *, int64_t, int, int);
static const rows_fn ROWS[RB_MAX + 1] = {NULL, rows_1, rows_2, rows_3, rows_4, rows_5, rows_6,
                                         rows_7, rows_8, rows_9, rows_10, rows_11, rows_12};

static inline float bf16_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* x: bf16 [M, K] (rows K apart), packed from bf16_dot_pack of a [N, K] weight, bias bf16
 * [N] or NULL, out bf16 [M, N] (rows ldo apart). Returns 1, or 0 for shapes it does not
 * take (K not a positive multiple of 32) or when scratch memory could not be allocated.
 * Threads: OpenMP over the column blocks. */
int bf16_dot_linear(const uint16_t *x, int64_t m, int64_t k, const uint16_t *packed,
                    int64_t n, const uint16_t *bias, uint16_t *out, int64_t ldo,
                    int num_threads) {
    if (k <= 0 || k % 32 != 0 || m <= 0) return 0;
    int64_t blocks = (n + 31) / 32, pairs = k / 2;
    uint32_t *xp = malloc(sizeof(uint32_t) * (size_t)(pairs * m)); /* [K / 2, M] */
    if (xp == NULL) return 0;
    for (int64_t r = 0; r < m; r++) {
        const uint16_t *row = x + r * k;
        for (int64_t p = 0; p < pairs; p++) memcpy(xp + p * m + r, row + 2 * p, sizeof(uint32_t));
    }
#pragma omp parallel for schedule(static) num_threads(num_threads)
    for (int64_t b = 0; b < blocks; b++) {
        const uint16_t *wb = packed + b * (k / 2) * 64;
        int cols = n - 32 * b < 32 ? (int)(n - 32 * b) : 32;
        float bf[32], *bp = NULL;
        if (bias != NULL) {
            for (int c = 0; c < 32; c++) bf[c] = c < cols ? bf16_to_float(bias[32 * b + c]) : 0.0f;
            bp = bf;
        }
        for (int64_t r = 0; r < m; r += RB_MAX) {
            int rb = m - r < RB_MAX ? (int)(m - r) : RB_MAX;
            ROWS[rb](xp + r, m, k, wb, bp, out + r * ldo + 32 * b, ldo, cols, r == 0);
        }
    }
    free(xp);
    return 1;
}

#else
int bf16_dot_available(void) { return 0; }
#endif
