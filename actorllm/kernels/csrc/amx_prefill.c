/* Paged prefill attention on AMX tiles: bfloat16 q and KV cache, every prefill request of
 * the step in one call, keys and values read from their blocks.
 *
 * Why: a 2,048-token prompt of a head-size-128 model spends ~40% of its prefill in
 * attention on a 2-core AMX Xeon when it runs as torch's CPU flash SDPA (~23 ms a layer,
 * ~0.75 TFLOP/s), while the linears of the same step run at ~2.2 TFLOP/s on AMX. Here both
 * products of attention run on the tiles and the softmax between them needs no horizontal
 * reduction and no transpose, by computing the transposed problem:
 *
 *   S^T = K . Q^T   A = 16 keys x 32 depth: K's rows as stored, copied out of the cache
 *                   once per (request, KV head) so that a head's keys are contiguous
 *                   B = Q^T, packed once per task (16 query rows as the tile's columns)
 *                   C = [16 keys, 16 query rows] float32
 *   softmax         per query row = per lane: the max and sum over keys are vertical ops
 *                   over the rows of S^T; P^T's bf16 pairs of consecutive keys are
 *                   exactly the B tile rows of the next product
 *   O^T = V^T . P^T A = V^T (16 head dims x 32 keys), packed once per (request, KV head)
 *                   B = P^T as above; C = [16 dims, 16 query rows] float32, accumulated
 *                   onto O^T rescaled by the online softmax's alpha (a lane vector)
 *
 * A task is (request, KV head, query tokens i0 .. i0 + tq): its R = tq x G query rows
 * (G = Hq / Hk heads share each key; row r is token r / G of head r % G) are the 32 lanes
 * of two 16-lane halves. Keys go 128 at a time through one online-softmax step (the max,
 * the rescale of O^T, the sum), 32 at a time through the tiles. Causal: query i of a
 * request of L query tokens and seq_len context sits at position seq_len - L + i (a chunk
 * after a cached prefix); key blocks past the task's last query are never read, and only
 * the keys of a diagonal block past the task's first position (a block at the window's
 * edge: all of it) are masked per lane. window > 0 keeps, for a query at position p, only
 * keys > p - window.
 *
 * Arithmetic: q.k products exact, summed in float32 (TDPBF16PS); the softmax in float32
 * (a polynomial 2^x); P rounded to bfloat16 for P.V (as torch's CPU flash kernel and
 * vLLM's AMX kernel do), summed in float32; the row sum from the unrounded P; the output
 * rounded to bfloat16 once (round to nearest even).
 *
 * Layouts (element strides; the last dimension is contiguous):
 *   q, out       [T, Hq, D] bfloat16, rows q_stride and out_stride elements apart
 *   q_start, q_len, seq_lens [N] int32; block_table [N, table_stride] int32
 *   k/v cache    [NB, BS, Hk, D] bfloat16 viewed through strides (s_block, s_slot, s_head)
 * Takes D a multiple of 32 up to 256, BS a multiple of 16, G <= 32.
 *
 * Threads: OpenMP (torch's libgomp): first K and V^T are copied out of the cache, (request,
 * head, 256 keys) per item; then the tasks, a head's together, the longest first,
 * dynamically scheduled. Each thread loads the
 * tile configuration itself; the process asked Linux for the tile state once (amx_init in
 * amx_linear.c, which the Python side calls first).
 */
#define _GNU_SOURCE /* amx_tiles.h: syscall() under -std=c11 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>

#include "bf16_rows.h"

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__)
#include "amx_tiles.h"
#include "transpose16.h"

#define QR 32      /* query rows per task: two halves of 16 lanes */
#define KG 32      /* keys per tile step */
#define MAX_D 256  /* head size bound */
#ifndef KB
#define KB 128 /* keys per online-softmax step */
#endif
#define PACK_KEYS 256 /* keys per K / V^T packing item */

/* Every tile 16 rows x 64 bytes: C (0-3) 16 x 16 float32, A and B (4-7) 16 x 32 bfloat16. */
static void configure(void) { tiles_configure_full(); }

typedef struct {
    const uint16_t *q;
    int64_t q_stride;
    uint16_t *out;
    int64_t out_stride;
    const int32_t *q_start, *q_len, *seq_lens, *block_table;
    int64_t table_stride;
    const uint16_t *k_cache, *v_cache;
    int64_t s_block, s_slot, s_head;
    int g, d, bs, window;
    float scale;
    /* V^T of request n, KV head h, keys 32 c .. 32 c + 31: [D, 32] at
     * vt + vt_off[n] + (h * groups[n] + c) * 32 D; keys past the context are zero. K and
     * V^T are copied out of the cache once per call, side by side per head: a head's rows
     * in the cache lie a block's stride apart, so the L2 sets they map to are few, and the
     * tasks that reread them (every query tile of the head) would miss */
    uint16_t *vt;
    const int64_t *vt_off;
    const int32_t *groups;
    /* K of request n, KV head h, keys 32 c .. : [32, D] rows at the same offsets in kp */
    uint16_t *kp;
} args_t;

/* A thread's scratch. */
typedef struct {
    uint16_t *qt;  /* [D / 32][2 halves][16][32]: B tiles of Q^T */
    float *st;     /* [KB][32]: S^T of a key block, then masked */
    uint16_t *pt;  /* [KB / 32][2 halves][16][32]: B tiles of P^T */
    float *ot;     /* [D][32]: O^T */
    uint16_t *rows; /* [32][D]: a key group's V rows side by side */
} scratch_t;

/* -- K and V^T out of the cache ---------------------------------------------------------- */

/* Keys [k0, k1) of request n, KV head h (k0, k1 multiples of 32), into K's rows and V^T
 * groups (keys past the context: zero). V^T: the group's 32 rows copied side by side, then
 * two dims at a time, a 32-bit gather per 16 keys takes both dims' values of each key and
 * a permute splits the pairs into the two V^T rows. */
static void pack_kv(const args_t *a, int n, int h, int k0, int k1, uint16_t *rows) {
    int d = a->d, bs = a->bs, ctx = a->seq_lens[n];
    const int32_t *table = a->block_table + (int64_t)n * a->table_stride;
    const __m512i lo = _mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38,
                                        36, 34, 32, 30, 28, 26, 24, 22, 20, 18, 16, 14, 12,
                                        10, 8, 6, 4, 2, 0);
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(1));
    const __m512i i0 = _mm512_mullo_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
        _mm512_set1_epi32(d / 2)); /* key j's row, in 32-bit words */
    const __m512i i1 = _mm512_add_epi32(i0, _mm512_set1_epi32(8 * d)); /* keys 16 .. 31 */
    for (int c = k0 / KG; c < k1 / KG; c++) {
        int64_t at = a->vt_off[n] + ((int64_t)h * a->groups[n] + c) * KG * d;
        uint16_t *dst = a->vt + at, *kdst = a->kp + at;
        for (int j = 0; j < KG; j++) {
            int k = c * KG + j;
            size_t bytes = sizeof(uint16_t) * (size_t)d;
            if (k >= ctx) {
                memset(rows + (int64_t)j * d, 0, bytes);
                memset(kdst + (int64_t)j * d, 0, bytes);
                continue;
            }
            int64_t off = (int64_t)table[k / bs] * a->s_block + (int64_t)(k % bs) * a->s_slot +
                          (int64_t)h * a->s_head;
            memcpy(rows + (int64_t)j * d, a->v_cache + off, bytes);
            memcpy(kdst + (int64_t)j * d, a->k_cache + off, bytes);
        }
        for (int e = 0; e < d; e += 2) {
            const int *src = (const int *)(rows + e);
            __m512i g0 = _mm512_i32gather_epi32(i0, src, 4);
            __m512i g1 = _mm512_i32gather_epi32(i1, src, 4);
            _mm512_store_si512(dst + e * KG, _mm512_permutex2var_epi16(g0, lo, g1));
            _mm512_store_si512(dst + (e + 1) * KG, _mm512_permutex2var_epi16(g0, hi, g1));
        }
    }
}

/* -- one task ---------------------------------------------------------------------------- */

/* S^T of keys kb .. kb + nk into st (nk a multiple of 32). */
static void scores(const args_t *a, const uint16_t *kp, int kb, int nk, const scratch_t *w) {
    int steps = a->d / 32;
    int64_t s0 = (int64_t)a->d * 2, s1 = s0; /* bytes between K rows */
    for (int j = 0; j < nk; j += KG) {
        const uint16_t *k0 = kp + (int64_t)(kb + j) * a->d, *k1 = k0 + 16 * a->d;
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int s = 0; s < steps; s++) {
            _tile_loadd(4, k0 + 32 * s, s0);
            _tile_loadd(5, k1 + 32 * s, s1);
            _tile_loadd(6, w->qt + s * 1024, 64);
            _tile_loadd(7, w->qt + s * 1024 + 512, 64);
            _tile_dpbf16ps(0, 4, 6); /* keys 0-15 x rows 0-15 */
            _tile_dpbf16ps(1, 4, 7); /* keys 0-15 x rows 16-31 */
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
        float *st = w->st + (int64_t)j * QR;
        _tile_stored(0, st, QR * 4);
        _tile_stored(1, st + 16, QR * 4);
        _tile_stored(2, st + 16 * QR, QR * 4);
        _tile_stored(3, st + 16 * QR + 16, QR * 4);
    }
}

/* 2^t on 16 lanes for t <= 0: t = n + f, |f| <= 1/2, 2^f by its degree-4 Taylor
 * polynomial (relative error < 5e-5, far below the bfloat16 rounding P.V applies), times
 * 2^n by scalef. t is clamped at -126: a probability that small is 0 to the sums. */
static inline __m512 exp2_neg(__m512 t) {
    t = _mm512_max_ps(t, _mm512_set1_ps(-126.0f));
    __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(t, n);
    __m512 p = _mm512_set1_ps(9.6181291e-3f);                    /* ln2^4 / 4! */
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504109e-2f));    /* ln2^3 / 3! */
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022651e-1f));    /* ln2^2 / 2! */
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718e-1f));    /* ln2 */
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* The online-softmax step of one half (16 lanes) over keys kb .. kb + nk: the lanes' max
 * m, sum l, P^T's B tiles for the half, and returns alpha (the rescale of O^T). pos: the
 * lanes' positions; masked: whether some lane sees only some of the keys. Scores stay
 * unscaled up to here: exp(scale (x - m)) = 2^(x c - m c), c = scale log2(e). */
static __m512 softmax_half(const args_t *a, const scratch_t *w, int half, int kb, int nk,
                           __m512i pos, int masked, __m512 *m, __m512 *l) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    const __m512 c = _mm512_set1_ps(a->scale * 1.4426950408889634f);
    __m512 mx = *m;
    float *st = w->st + 16 * half;
    /* keys before `unmasked` are seen by every lane (every lane's position at or past
     * them, no window, no padding lane): only the block's tail goes through the mask */
    int unmasked = nk;
    if (masked) {
        int least = a->window > 0 ? 0 : _mm512_reduce_min_epi32(pos) - kb + 1;
        unmasked = least <= 0 ? 0 : least < nk ? least & ~1 : nk; /* pairs below stay whole */
    }
    __m512 mx1 = mx;
    for (int k = 0; k < unmasked; k += 2) {
        mx = _mm512_max_ps(mx, _mm512_load_ps(st + (int64_t)k * QR));
        mx1 = _mm512_max_ps(mx1, _mm512_load_ps(st + (int64_t)(k + 1) * QR));
    }
    mx = _mm512_max_ps(mx, mx1);
    for (int k = unmasked; k < nk; k++) {
        __m512i kv = _mm512_set1_epi32(kb + k);
        __mmask16 ok = _mm512_cmple_epi32_mask(kv, pos); /* key <= position */
        if (a->window > 0) /* key > position - window */
            ok &= _mm512_cmpgt_epi32_mask(kv,
                                          _mm512_sub_epi32(pos, _mm512_set1_epi32(a->window)));
        __m512 x = _mm512_mask_mov_ps(ninf, ok, _mm512_load_ps(st + (int64_t)k * QR));
        _mm512_store_ps(st + (int64_t)k * QR, x);
        mx = _mm512_max_ps(mx, x);
    }
    /* lanes that have seen no key yet keep -inf: take 0 there so that -inf - 0 gives p = 0 */
    __mmask16 seen = _mm512_cmp_ps_mask(mx, ninf, _CMP_NEQ_OQ);
    __m512 mu = _mm512_maskz_mov_ps(seen, mx);
    __mmask16 had = _mm512_cmp_ps_mask(*m, ninf, _CMP_NEQ_OQ);
    __m512 alpha = _mm512_maskz_mov_ps(
        had, exp2_neg(_mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_mov_ps(had, *m), mu), c)));
    __m512 nmc = _mm512_mul_ps(mu, c);
    const __m512i pairs = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25,
                                           9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18,
                                           2, 17, 1, 16, 0);
    __m512 sum0 = _mm512_setzero_ps(), sum1 = sum0;
    for (int k = 0; k < nk; k += 2) {
        __m512 x0 = _mm512_load_ps(st + (int64_t)k * QR);
        __m512 x1 = _mm512_load_ps(st + (int64_t)(k + 1) * QR);
        __m512 p0 = exp2_neg(_mm512_fmsub_ps(x0, c, nmc));
        __m512 p1 = exp2_neg(_mm512_fmsub_ps(x1, c, nmc));
        if (k >= unmasked) { /* masked keys: exactly 0 */
            p0 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x0, ninf, _CMP_NEQ_OQ), p0);
            p1 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x1, ninf, _CMP_NEQ_OQ), p1);
        }
        sum0 = _mm512_add_ps(sum0, p0);
        sum1 = _mm512_add_ps(sum1, p1);
        /* bf16 of keys k, k + 1 for each lane, as adjacent pairs: row k / 2 % 16 of the
         * half's B tile of key step k / 32 */
        __m512i both = (__m512i)_mm512_cvtne2ps_pbh(p1, p0); /* [p0 x 16 | p1 x 16] */
        uint16_t *row = w->pt + (int64_t)(k / KG) * 1024 + half * 512 + (k % KG / 2) * 32;
        _mm512_store_si512(row, _mm512_permutexvar_epi16(pairs, both));
    }
    *l = _mm512_fmadd_ps(*l, alpha, _mm512_add_ps(sum0, sum1));
    *m = mx;
    return alpha;
}

/* O^T = O^T * alpha + V^T . P^T over key steps of keys kb .. kb + nk; the task's first
 * key block (first): O^T = V^T . P^T, from zero tiles (O^T's memory not read). */
static void values(const args_t *a, const uint16_t *vt, int kb, int nk, __m512 alpha0,
                   __m512 alpha1, int first, const scratch_t *w) {
    int d = a->d;
    for (int e = 0; !first && e < d; e++) {
        float *o = w->ot + (int64_t)e * QR;
        _mm512_store_ps(o, _mm512_mul_ps(_mm512_load_ps(o), alpha0));
        _mm512_store_ps(o + 16, _mm512_mul_ps(_mm512_load_ps(o + 16), alpha1));
    }
    for (int dc = 0; dc < d; dc += 32) {
        float *o = w->ot + (int64_t)dc * QR;
        if (first) {
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
        } else {
            _tile_loadd(0, o, QR * 4);
            _tile_loadd(1, o + 16, QR * 4);
            _tile_loadd(2, o + 16 * QR, QR * 4);
            _tile_loadd(3, o + 16 * QR + 16, QR * 4);
        }
        for (int s = 0; s < nk / KG; s++) {
            const uint16_t *v = vt + ((int64_t)(kb / KG + s) * d + dc) * KG;
            _tile_loadd(4, v, 64);           /* dims dc .. dc + 15 x 32 keys */
            _tile_loadd(5, v + 16 * KG, 64); /* dims dc + 16 .. dc + 31 */
            _tile_loadd(6, w->pt + s * 1024, 64);
            _tile_loadd(7, w->pt + s * 1024 + 512, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
        _tile_stored(0, o, QR * 4);
        _tile_stored(1, o + 16, QR * 4);
        _tile_stored(2, o + 16 * QR, QR * 4);
        _tile_stored(3, o + 16 * QR + 16, QR * 4);
    }
}

/* Request n, KV head h, query tokens i0 .. i0 + nq. */
static void run_task(const args_t *a, int n, int h, int i0, int nq, scratch_t *w) {
    int g = a->g, d = a->d, rows = nq * g;
    int len = a->q_len[n], ctx = a->seq_lens[n];
    int pos0 = ctx - len + i0, pos1 = pos0 + nq - 1; /* the first and last query's positions */
    int64_t q0 = (int64_t)a->q_start[n] + i0;
    /* Q^T B tiles: tile (s, half) row r holds, for its 16 rows m, q[m][32 s + 2 r + 0..1]:
     * the half's rows' words 16 s .. 16 s + 15 (a bf16 pair each), transposed */
    const uint32_t *qw = (const uint32_t *)a->q; /* bf16 pairs: one word */
    for (int half = 0; half < 2; half++) {
        const uint32_t *src[16];
        for (int m = 0; m < 16; m++) {
            int r0 = 16 * half + m;
            int64_t off = (q0 + r0 / g) * a->q_stride + ((int64_t)h * g + r0 % g) * d;
            src[m] = r0 < rows ? qw + off / 2 : NULL;
        }
        for (int s = 0; s < d / 32; s++) {
            __m512i v[16];
            for (int m = 0; m < 16; m++)
                v[m] = src[m] ? _mm512_loadu_si512(src[m] + 16 * s) : _mm512_setzero_si512();
            transpose16(v);
            uint32_t *tile = (uint32_t *)(w->qt + s * 1024 + half * 512);
            for (int r = 0; r < 16; r++) _mm512_store_si512(tile + r * 16, v[r]);
        }
    }
    int lane_pos[QR];
    for (int r = 0; r < QR; r++) lane_pos[r] = r < rows ? pos0 + r / g : -1;
    __m512i pos_lo = _mm512_loadu_si512(lane_pos), pos_hi = _mm512_loadu_si512(lane_pos + 16);
    __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0;
    __m512 l0 = _mm512_setzero_ps(), l1 = l0;
    int kstart = a->window > 0 && pos0 - a->window + 1 > 0 ? pos0 - a->window + 1 : 0;
    kstart -= kstart % KG;
    int kend = pos1 + 1; /* keys past the last query: never read */
    int64_t at = a->vt_off[n] + (int64_t)h * a->groups[n] * KG * d;
    const uint16_t *vt = a->vt + at, *kp = a->kp + at;
    for (int kb = kstart; kb < kend; kb += KB) {
        int nk = kend - kb < KB ? kend - kb : KB;
        nk = (nk + KG - 1) / KG * KG;
        /* every lane sees every key of the block: none past the first query, none before
         * the last query's window; and no padding lanes (they would see none) */
        int all = rows == QR && kb + nk - 1 <= pos0 &&
                  (a->window <= 0 || kb > pos1 - a->window);
        scores(a, kp, kb, nk, w);
        __m512 al0 = softmax_half(a, w, 0, kb, nk, pos_lo, !all, &m0, &l0);
        __m512 al1 = softmax_half(a, w, 1, kb, nk, pos_hi, !all, &m1, &l1);
        values(a, vt, kb, nk, al0, al1, kb == kstart, w);
    }
    float inv[QR] __attribute__((aligned(64)));
    _mm512_store_ps(inv, _mm512_div_ps(_mm512_set1_ps(1.0f), l0));
    _mm512_store_ps(inv + 16, _mm512_div_ps(_mm512_set1_ps(1.0f), l1));
    /* row r of O is column r of O^T: 16 x 16 blocks of O^T transposed (every real row saw
     * its own key: l > 0), rounded to bfloat16 (nearest even) */
    for (int r0 = 0; r0 < rows; r0 += 16) {
        uint16_t *dst[16];
        for (int j = 0; j < 16 && r0 + j < rows; j++) {
            int r = r0 + j;
            dst[j] = a->out + (q0 + r / g) * a->out_stride + ((int64_t)h * g + r % g) * d;
        }
        for (int e = 0; e < d; e += 16) {
            __m512i x[16]; /* x[i]: dim e + i of rows r0 .. r0 + 15; transposed: row r0 + i */
            for (int i = 0; i < 16; i++)
                x[i] = _mm512_castps_si512(_mm512_load_ps(w->ot + (int64_t)(e + i) * QR + r0));
            transpose16(x);
            for (int j = 0; j < 16 && r0 + j < rows; j++) {
                __m512 v = _mm512_mul_ps(_mm512_castsi512_ps(x[j]), _mm512_set1_ps(inv[r0 + j]));
                _mm256_storeu_si256((__m256i *)(dst[j] + e), (__m256i)_mm512_cvtneps_pbh(v));
            }
        }
    }
}

/* -- the call ---------------------------------------------------------------------------- */

typedef struct {
    int n, head, i0, nq;
} task_t;

static void *alloc64(size_t bytes) { return aligned_alloc(64, (bytes + 63) / 64 * 64); }

/* V^T of the calling thread's calls, grown as needed and kept: a step's layers all need
 * the same size, and a fresh allocation of megabytes per layer would fault its pages in
 * again every time. */
static __thread uint16_t *vt_buffer;
static __thread size_t vt_capacity;

static uint16_t *vt_reserve(size_t elements) {
    if (elements > vt_capacity) {
        free(vt_buffer);
        vt_buffer = alloc64(elements * sizeof(uint16_t));
        vt_capacity = vt_buffer ? elements : 0;
    }
    return vt_buffer;
}

/* Returns 0, -1 when memory could not be allocated, -2 for arguments it does not take. */
int amx_prefill(const uint16_t *q, int64_t q_stride, uint16_t *out, int64_t out_stride,
                const int32_t *q_start, const int32_t *q_len, const int32_t *seq_lens,
                const int32_t *block_table, int64_t table_stride, int n,
                const uint16_t *k_cache, const uint16_t *v_cache, int64_t s_block,
                int64_t s_slot, int64_t s_head, int hq, int hk, int d, int block_size,
                float scale, int window, int num_threads) {
    if (hk <= 0 || hq % hk != 0 || hq / hk > QR || d % 32 != 0 || d > MAX_D ||
        block_size % 16 != 0 || block_size <= 0)
        return -2;
    int g = hq / hk, tq = QR / g;
    int64_t *vt_off = malloc(sizeof(int64_t) * (size_t)(n + 1));
    int32_t *groups = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    if (!vt_off || !groups) {
        free(vt_off), free(groups);
        return -1;
    }
    int64_t total = 0, items = 0;
    vt_off[0] = 0;
    for (int i = 0; i < n; i++) {
        total += (int64_t)((q_len[i] + tq - 1) / tq) * hk;
        groups[i] = (seq_lens[i] + KG - 1) / KG;
        vt_off[i + 1] = vt_off[i] + (int64_t)groups[i] * KG * d * hk;
        items += (int64_t)(groups[i] * KG + PACK_KEYS - 1) / PACK_KEYS * hk;
    }
    uint16_t *vt = vt_reserve(2 * (size_t)vt_off[n] + 1); /* V^T, then K */
    task_t *tasks = malloc(sizeof(task_t) * (size_t)(total > 0 ? total : 1));
    if (!vt || !tasks) {
        free(vt_off), free(groups), free(tasks);
        return -1;
    }
    /* tasks of one (request, head) in a row, the longest first: the threads then read the
     * same head's K and V^T (~0.5 MB each for 2,048 keys of head size 128) from their L2
     * task after task; heads in any order would stream every head's from memory each time */
    int64_t t = 0;
    for (int i = 0; i < n; i++)
        for (int h = 0; h < hk; h++)
            for (int i0 = (q_len[i] - 1) / tq * tq; i0 >= 0; i0 -= tq) {
                int nq = q_len[i] - i0 < tq ? q_len[i] - i0 : tq;
                tasks[t++] = (task_t){i, h, i0, nq};
            }
    args_t a = {q, q_stride, out, out_stride, q_start, q_len, seq_lens, block_table,
                table_stride, k_cache, v_cache, s_block, s_slot, s_head, g, d, block_size,
                window, scale, vt, vt_off, groups, vt + vt_off[n]};
    int failed = 0;
#pragma omp parallel num_threads(num_threads) reduction(| : failed)
    {
        scratch_t w;
        w.qt = alloc64(sizeof(uint16_t) * (size_t)(d / 32) * 1024);
        w.st = alloc64(sizeof(float) * KB * QR);
        w.pt = alloc64(sizeof(uint16_t) * (KB / KG) * 1024);
        w.ot = alloc64(sizeof(float) * (size_t)d * QR);
        w.rows = alloc64(sizeof(uint16_t) * KG * (size_t)d);
        int ok = w.qt && w.st && w.pt && w.ot && w.rows;
        failed |= !ok;
        /* the items: request, head, PACK_KEYS keys */
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < items; it++) {
            if (!ok) continue;
            int64_t rest = it;
            int i = 0;
            for (;; i++) {
                int64_t per = (int64_t)(groups[i] * KG + PACK_KEYS - 1) / PACK_KEYS * hk;
                if (rest < per) break;
                rest -= per;
            }
            int chunks = (groups[i] * KG + PACK_KEYS - 1) / PACK_KEYS;
            int h = (int)(rest / chunks), k0 = (int)(rest % chunks) * PACK_KEYS;
            int k1 = k0 + PACK_KEYS < groups[i] * KG ? k0 + PACK_KEYS : groups[i] * KG;
            pack_kv(&a, i, h, k0, k1, w.rows);
        } /* implicit barrier: V^T complete */
        if (ok) configure();
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < total; i++) {
            if (!ok) continue;
            run_task(&a, tasks[i].n, tasks[i].head, tasks[i].i0, tasks[i].nq, &w);
        }
        if (ok) _tile_release();
        free(w.qt), free(w.st), free(w.pt), free(w.ot), free(w.rows);
    }
    free(vt_off), free(groups), free(tasks);
    return failed ? -1 : 0;
}

int amx_prefill_built(void) { return 1; }

#else

int amx_prefill(const uint16_t *q, int64_t q_stride, uint16_t *out, int64_t out_stride,
                const int32_t *q_start, const int32_t *q_len, const int32_t *seq_lens,
                const int32_t *block_table, int64_t table_stride, int n,
                const uint16_t *k_cache, const uint16_t *v_cache, int64_t s_block,
                int64_t s_slot, int64_t s_head, int hq, int hk, int d, int block_size,
                float scale, int window, int num_threads) {
    (void)q, (void)q_stride, (void)out, (void)out_stride, (void)q_start, (void)q_len;
    (void)seq_lens, (void)block_table, (void)table_stride, (void)n, (void)k_cache;
    (void)v_cache, (void)s_block, (void)s_slot, (void)s_head, (void)hq, (void)hk, (void)d;
    (void)block_size, (void)scale, (void)window, (void)num_threads;
    return -2;
}

int amx_prefill_built(void) { return 0; }

#endif
