/* Paged attention for decode rows on the CPU: one query token per request, its keys and
 * values read straight from the paged KV cache, each block once.
 *
 * One OpenMP task per request (or, when there are fewer requests than the threads want, per
 * (request, group of its KV heads)). It walks the context block by block, and in each block
 * every KV head of the task in turn: G = Hq / Hk query heads share every key and value row
 * loaded. A block's rows of all heads are read together, so where the cache keeps a block's
 * heads side by side (the worker's CPU layout, worker/kv_cache.py: K and V of a block in one
 * run of memory) a task streams long runs instead of one small run per head: on a 2-core
 * box, random 4 KB runs read at ~16 GB/s and 32 KB runs at ~27. Per head the walk is in
 * tiles of up to 16 keys (a tile never crosses a block) with an online softmax
 * (flash-decoding): per tile the G x 16 scores, the running max and sum, the accumulator
 * rescaled when the max grows, then P.V; each head's state waits in memory while the other
 * heads take their turn in the block. No scores array, K and V read once. Float32
 * throughout: a bfloat16 cache is widened exactly, an fp8 one through its table (kv_rows.h). Each head sees its tiles in the same
 * order whatever the task's grouping, so the results do not depend on it.
 *
 * Where the compiler targets AVX-512 (-march=native on such a host, __AVX512F__) a tile's 16
 * scores come from 16 vertical dot products reduced together (one transpose-add tree), the
 * exp is vectorised, and the accumulators live in registers (specialised per G and D / 16).
 * Where it also targets AVX512-BF16 (__AVX512BF16__), a bfloat16 cache whose q is exact in
 * bfloat16 (a bfloat16 model's q) takes q.k from _mm512_dpbf16_ps on the cache's rows as
 * stored and scales the sums: the same exact products, float32 sums in another order.
 * Where it targets AVX2 and FMA but not AVX-512 (Zen 2/3, client x86), the same walk on 8
 * lanes: tiles of up to 8 keys, a hadd tree, exp256.h, P.V a chunk of D at a time (75M
 * preset, 8 layers x 128 rows, 2 threads, 2-core Zen 3: float32 57-62 -> 26-30 ms,
 * bfloat16 46-48 -> 19-21 against the portable walk). Elsewhere the same walk in portable C.
 *
 * Layouts (element strides; the last dimension is contiguous):
 *   q, out       [T, Hq, D] float32 or bfloat16 (each its own flag), rows q_stride and
 *                out_stride elements apart, each row's [Hq, D] contiguous; decode row i
 *                reads and writes row rows[i] (rows == NULL: row i)
 *   k/v cache    [NB, BS, Hk, D] viewed through strides (s_block, s_slot, s_head): the
 *                worker stores it block-major ([NB, Hk, BS, D]); float32, bfloat16 or fp8
 *                (kv, kv_rows.h: k_lut / v_lut [256] widen its bytes, scales folded in)
 *   seq_lens     [N] int32: context length including this step's token (already written)
 *   block_table  [N, table_stride] int32: physical blocks in order
 * window > 0 keeps only the last `window` keys; softcap > 0 applies Gemma 2's
 * softcap * tanh(score / softcap) before the softmax. sinks (NULL: none) [Hq] float32:
 * gpt-oss's per-head sink logits, each in its head's softmax denominator with no value (the
 * walk starts from it as from a key: online_begin).
 *
 * Threads: OpenMP, over the tasks. Built against the libgomp torch already loaded (same
 * soname), so the kernel shares torch's thread pool instead of a second one.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16_rows.h"
#include "kv_rows.h"
#include "online_softmax.h"

/* Tasks a thread takes at a time from the dynamic schedule (see paged_decode). */
#ifndef TASK_CHUNK
#define TASK_CHUNK 2
#endif

/* Tasks per thread below which a request's KV heads are split over several tasks. */
#ifndef MIN_TASKS_PER_THREAD
#define MIN_TASKS_PER_THREAD 4
#endif

/* One task's inputs: request `table`/`len`, KV heads [head, head + nh). */
typedef struct task_s {
    const void *k_cache, *v_cache;
    int kv;                     /* KV_F32, KV_BF16, KV_FP8 (kv_rows.h) */
    const float *k_lut, *v_lut; /* KV_FP8: each byte's value times the scale [256] */
    int64_t s_block, s_slot, s_head;
    const int32_t *table; /* this request's blocks */
    int len, head, nh, g, d, block_size;
    float scale, softcap;
    int window;
    /* q [nh, G, D] (scaled) as bfloat16 where that is exact and the cache is bfloat16 and
     * the CPU has AVX512-BF16 dot products (NULL: the float32 walk) */
    const uint16_t *qb;
    /* the task this thread runs next (NULL: none): its first blocks are prefetched while
     * this one's last blocks are computed */
    const struct task_s *next;
    const float *sinks; /* [Hq] sink logits (NULL: none) */
} task_t;

/* The first key a task attends to (its window's start). */
static inline int task_start(const task_t *t) {
    return (t->window > 0 && t->len > t->window) ? t->len - t->window : 0;
}

/* The portable walk of one head (t->head; t->nh is not read): q [G, D] float32 (already
 * scaled) -> out [G, D] float32. Scratch: row [D], acc [G, D]. */
static void attend_portable(const task_t *t, const float *q, float *out, float *row,
                            float *acc) {
    int g = t->g, d = t->d, bs = t->block_size, len = t->len;
    int start = (t->window > 0 && len > t->window) ? len - t->window : 0;
    float m[g], l[g], s[g * 16];
    for (int gi = 0; gi < g; gi++) online_begin(t->sinks, (int64_t)t->head * g + gi, m + gi, l + gi);
    memset(acc, 0, sizeof(float) * (size_t)g * (size_t)d);
    for (int b = start / bs; b * bs < len; b++) {
        int64_t base = (int64_t)t->table[b] * t->s_block + (int64_t)t->head * t->s_head;
        int b0 = b * bs;
        int lo = b0 < start ? start - b0 : 0, hi = b0 + bs < len ? bs : len - b0;
        for (int r0 = lo; r0 < hi; r0 += 16) {
            int nt = hi - r0 < 16 ? hi - r0 : 16; /* keys r0 .. r0 + nt of the block */
            for (int j = 0; j < nt; j++) {
                load_kv_row(row, t->k_cache, t->kv, t->k_lut, base + (r0 + j) * t->s_slot, d);
                for (int gi = 0; gi < g; gi++) {
                    const float *qg = q + (int64_t)gi * d;
                    float x = 0.0f;
#pragma omp simd reduction(+ : x)
                    for (int e = 0; e < d; e++) x += qg[e] * row[e];
                    if (t->softcap > 0.0f) x = t->softcap * tanhf(x / t->softcap);
                    s[gi * 16 + j] = x;
                }
            }
            for (int gi = 0; gi < g; gi++) {
                float *sg = s + gi * 16, mx = m[gi];
                for (int j = 0; j < nt; j++) mx = sg[j] > mx ? sg[j] : mx;
                float alpha = expf(m[gi] - mx), sum = 0.0f;
                for (int j = 0; j < nt; j++) sum += sg[j] = expf(sg[j] - mx);
                l[gi] = l[gi] * alpha + sum;
                m[gi] = mx;
                if (alpha != 1.0f)
                    for (int e = 0; e < d; e++) acc[(int64_t)gi * d + e] *= alpha;
            }
            for (int j = 0; j < nt; j++) {
                load_kv_row(row, t->v_cache, t->kv, t->v_lut, base + (r0 + j) * t->s_slot, d);
                for (int gi = 0; gi < g; gi++) {
                    float p = s[gi * 16 + j], *a = acc + (int64_t)gi * d;
#pragma omp simd
                    for (int e = 0; e < d; e++) a[e] += p * row[e];
                }
            }
        }
    }
    for (int gi = 0; gi < g; gi++) {
        float inv = 1.0f / l[gi];
        for (int e = 0; e < d; e++) out[(int64_t)gi * d + e] = acc[(int64_t)gi * d + e] * inv;
    }
}

/* AVX512-BF16 dot products for q.k where the compiler targets them (-march=native on such
 * a host) and -DNO_BF16_DOT does not turn them off. */
#if defined(__AVX512F__) && defined(__AVX512BF16__) && !defined(NO_BF16_DOT)
#define PAGED_DECODE_BF16_DOT 1
#endif

/* Which vector path serves the tiles: AVX-512 where the compiler targets it, else AVX2 with
 * FMA (8 lanes), else none (the portable walk). */
#if defined(__AVX512F__)
#define PAGED_DECODE_AVX512 1
#elif defined(__AVX2__) && defined(__FMA__)
#define PAGED_DECODE_AVX2 1
#endif

#if defined(PAGED_DECODE_AVX512) || defined(PAGED_DECODE_AVX2)
#include <immintrin.h>
#define PAGED_DECODE_HAVE_TILE 1
#define TILE_MAX_G 8
#define TILE_MAX_NC 16 /* D <= 256: D / 16 (past 128, attend_tile_any only) */
/* A tile kernel's arguments: one task; q [nh, G, D] float32 (scaled) -> out [nh, G, D];
 * scratch accm [nh, G, D], ml [2 * nh * G]. */
#define TILE_ARGS const task_t *t, const float *q, float *out, float *accm, float *ml
/* The (G, D / 16) shapes with a kernel of their own (attend_tile_G_NC, loops unrolled), each
 * ISA section instantiating X = TILE_FN and the dispatch X = TILE_CASE over this one list;
 * other shapes up to the maxima take attend_tile_any. */
#define TILE_SHAPES(X)                                                                      \
    X(1, 1) X(1, 2) X(1, 4) X(1, 8) X(2, 1) X(2, 2) X(2, 4) X(2, 8) X(3, 1) X(3, 2)          \
    X(3, 4) X(3, 8) X(4, 1) X(4, 2) X(4, 4) X(4, 8) X(8, 1) X(8, 2) X(8, 4) X(8, 8)

/* Blocks are scattered, so the hardware prefetcher stops at each one's end: the K and V
 * rows PREFETCH_BLOCKS x 16 x nh rows further on in the task's walk (block by block, each
 * of its nh heads in turn; with 16-key blocks, the same head of block b + PREFETCH_BLOCKS)
 * are asked for while a tile is computed, one row per key (all at once, the prefetches
 * queue behind each other and stall the loads), into L2
 * (prefetcht1): a task walks all its heads of a block at once, so the blocks in flight
 * (2 x 16 KB for the 75M preset's float32 heads) are more than L1 holds, and prefetched
 * into L1 they evicted each other before use. Measured on the 75M preset's layer, 128
 * rows, 2 threads, 2-core Zen 4 (8 layers, ms): float32 33 -> 24.5, bfloat16 19.5 -> 13
 * (with the block-major cache; into L1 with this walk: 31 / 21). 1 to 4 blocks ahead
 * read within noise of 2. The distance is counted in rows, not blocks: in blocks, larger
 * blocks put it further ahead (two 128-key blocks: 1 MB of K and V at the Qwen3-0.6B
 * shape, 8 KV heads, D 128, bfloat16), and a block's first tile asked for the rest of the
 * block at once. In rows it is the same 128 KB whatever the block size: 28 layers of that
 * shape, 48 requests of ~320 keys, 2 threads, Intel Xeon AMX host, ms: 16-key blocks 87
 * (unchanged), 32-key (the engine's CPU default) 100 -> 88, 128-key (vLLM's CPU default)
 * 133 -> 86; the 75M preset's layer, 32-key blocks: 19.3 -> 15.9. (Inline asm: GCC deletes a loop of
 * _mm_prefetch calls as side-effect free.) */
#ifndef PREFETCH_BLOCKS
#define PREFETCH_BLOCKS 2
#endif
#ifndef PREFETCH_INSN
#define PREFETCH_INSN "prefetcht1"
#endif
static inline void prefetch_line(const char *p) {
    __asm__ volatile(PREFETCH_INSN " %0" : : "m"(*p));
}

/* Rows [r_lo, r_hi) of block b's K and V for the task's head h (0 <= h < nh; nothing past
 * the context). */
static inline void prefetch_rows(const task_t *t, int b, int h, int r_lo, int r_hi) {
    if ((int64_t)b * t->block_size >= t->len) return;
    int64_t base = (int64_t)t->table[b] * t->s_block + (int64_t)(t->head + h) * t->s_head;
    int64_t esize = kv_esize(t->kv), row_bytes = (int64_t)t->d * esize;
    const char *k = (const char *)t->k_cache + base * esize;
    const char *v = (const char *)t->v_cache + base * esize;
    for (int r = r_lo; r < r_hi; r++) {
        int64_t at = (int64_t)r * t->s_slot * esize;
        for (int64_t x = 0; x < row_bytes; x += 64) {
            prefetch_line(k + at + x);
            prefetch_line(v + at + x);
        }
    }
}

/* A position in a task's walk: block b, head h of the task (0 <= h < nh), row r of the
 * block; t the task (the next one past this one's end). */
typedef struct {
    const task_t *t;
    int b, h, r;
} walkpos_t;

/* The walk's position `rows` rows after row r of head h of block b of t (0 <= r < bs); past
 * the task's last block, in the next task (none: a block past the end, which prefetch_rows
 * skips). */
static inline walkpos_t walk_at(const task_t *t, int b, int h, int r, int rows) {
    const int bs = t->block_size, nh = t->nh;
    r += rows;
    walkpos_t p = {t, b, h + r / bs, r % bs};
    p.b += p.h / nh, p.h %= nh;
#ifndef NO_NEXT_TASK_PREFETCH
    int nblocks = (t->len + bs - 1) / bs;
    if (p.b >= nblocks && t->next != NULL) {
        p.b = task_start(t->next) / bs + (p.b - nblocks);
        p.t = t->next;
    }
#endif
    return p;
}

/* Rows [r_lo, r_hi) from position p, clamped to its block (a tile's rows never cross it). */
static inline void prefetch_at(walkpos_t p, int r_lo, int r_hi) {
    int bs = p.t->block_size;
    prefetch_rows(p.t, p.b, p.h, p.r + r_lo, p.r + r_hi < bs ? p.r + r_hi : bs);
}

/* The prefetch distance in rows of the walk (see PREFETCH_BLOCKS). */
static inline int prefetch_distance(const task_t *t) { return PREFETCH_BLOCKS * 16 * t->nh; }

/* A tile walk's start: the task's heads' running state (online_begin, acc = 0 for its
 * `rows` = nh * G query heads) and its first prefetch_distance rows prefetched (later
 * ones a row per key). */
static inline void walk_begin(const task_t *t, float *accm, float *ml, int rows) {
    const int bs = t->block_size, start = task_start(t);
    for (int x = 0; x < rows; x++) /* query head t->head * G + x */
        online_begin(t->sinks, (int64_t)t->head * t->g + x, ml + x, ml + rows + x);
    memset(accm, 0, sizeof(float) * (size_t)rows * (size_t)t->d);
    for (int a = 0; a < prefetch_distance(t); a += 16)
        prefetch_at(walk_at(t, start / bs, 0, start % bs, a), 0, 16);
}
#endif /* a vector path */

#ifdef PAGED_DECODE_AVX512
/* -- AVX-512 tiles ------------------------------------------------------------------------ */
#include "exp512.h"

/* p[16] -> lane j = sum of p[j]'s lanes: a transpose-add tree (15 adds, 30 shuffles). */
static inline __m512 reduce16(const __m512 *p) {
    __m512 a[8], b[4], c[2];
    for (int i = 0; i < 8; i++) /* per 128-bit lane: p2i at 0 and 2, p2i+1 at 1 and 3 */
        a[i] = _mm512_add_ps(_mm512_unpacklo_ps(p[2 * i], p[2 * i + 1]),
                             _mm512_unpackhi_ps(p[2 * i], p[2 * i + 1]));
    for (int i = 0; i < 4; i++) /* per 128-bit lane: p4i .. p4i+3 */
        b[i] = _mm512_add_ps(_mm512_shuffle_ps(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int i = 0; i < 2; i++) /* 128-bit lanes: b2i halves, b2i+1 halves */
        c[i] = _mm512_add_ps(
            _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
            _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

/* 16 elements at `off` as float32 (bfloat16 widened exactly: a shift; fp8: 16 lookups in
 * lut, one gather). */
static inline __m512 load16(const void *base, int kv, const float *lut, int64_t off) {
    if (kv == KV_F32) return _mm512_loadu_ps((const float *)base + off);
    if (kv == KV_FP8) {
        __m128i b = _mm_loadu_si128((const __m128i *)((const uint8_t *)base + off));
        return _mm512_i32gather_ps(_mm512_cvtepu8_epi32(b), lut, 4);
    }
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)base + off));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Block b of one head h of a task: its tiles folded into that head's running state (m, l
 * [G]; acc [G, D] in memory, in registers for the block), q [G, D] float32 (scaled), qb its
 * bfloat16 copy (DOT). Inlined with constant G and NC (D = 16 * NC), the loops unroll.
 * While it computes, it prefetches the rows prefetch_distance on in the walk, one per key.
 * DOT (bfloat16 cache, q exact in bfloat16, NC even): the scores by _mm512_dpbf16_ps
 * straight from the cache's bfloat16 K rows, no widening to a float32 tile first, on the
 * unscaled q, each score's sum then times the scale. Every product is exact either way
 * (8-bit mantissas); the order of the float32 sums differs, and a scale that is not a power
 * of two rounds once more (after the sum instead of on each q element). */
static inline __attribute__((always_inline)) void block_head(
    const task_t *t, int h, int b, int start, const float *q, const uint16_t *qb,
    float *accm, float *m, float *l, const int G, const int NC,
    const int DOT) {
    const int d = 16 * NC, bs = t->block_size, len = t->len, kv = t->kv;
    __m512 acc[TILE_MAX_G][TILE_MAX_NC];
    float pbuf[TILE_MAX_G][16] __attribute__((aligned(64)));
    float kbuf[16 * 16 * TILE_MAX_NC] __attribute__((aligned(64))); /* widened K [16, D] */
#pragma GCC unroll 8
    for (int gi = 0; gi < G; gi++)
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) acc[gi][c] = _mm512_loadu_ps(accm + gi * d + 16 * c);
    int64_t base = (int64_t)t->table[b] * t->s_block + (int64_t)(t->head + h) * t->s_head;
    int b0 = b * bs;
    int lo = b0 < start ? start - b0 : 0, hi = b0 + bs < len ? bs : len - b0;
    for (int r0 = lo; r0 < hi; r0 += 16) {
        int nt = hi - r0 < 16 ? hi - r0 : 16; /* keys r0 .. r0 + nt of the block */
        __mmask16 valid = (__mmask16)((1u << nt) - 1u);
        int64_t row0 = base + (int64_t)r0 * t->s_slot;
        const float *kp; /* the tile's K rows, float32, kstride apart */
        int64_t kstride;
        if (kv != KV_F32 && !DOT) {
            for (int j = 0; j < nt; j++)
#pragma GCC unroll 8
                for (int c = 0; c < NC; c++)
                    _mm512_store_ps(kbuf + j * d + 16 * c,
                                    load16(t->k_cache, kv, t->k_lut, row0 + j * t->s_slot + 16 * c));
            kp = kbuf, kstride = d;
        } else {
            kp = (const float *)t->k_cache + row0, kstride = t->s_slot;
        }
#pragma GCC unroll 8
        for (int gi = 0; gi < G; gi++) {
            /* a compiler barrier: without it GCC keeps the tile's K rows, loaded for head 0,
             * for the next heads by spilling them to the stack and reading them back (more
             * traffic than loading them again from L1) */
#ifndef NO_GI_BARRIER
            __asm__ volatile("" ::: "memory");
#endif
            __m512 qv[TILE_MAX_NC], part[16];
#ifdef PAGED_DECODE_BF16_DOT
            if (DOT) { /* lanes: pairs of q_gi * k_j, summed over D's 32-chunks */
                __m512bh qh[TILE_MAX_NC / 2];
#pragma GCC unroll 4
                for (int c = 0; c < NC / 2; c++)
                    qh[c] = (__m512bh)_mm512_loadu_si512(qb + gi * d + 32 * c);
#pragma GCC unroll 16
                for (int j = 0; j < 16; j++) {
                    if (j < nt) {
                        const uint16_t *kr = (const uint16_t *)t->k_cache + row0 + j * t->s_slot;
                        __m512 a = _mm512_setzero_ps();
#pragma GCC unroll 4
                        for (int c = 0; c < NC / 2; c++)
                            a = _mm512_dpbf16_ps(a, qh[c], (__m512bh)_mm512_loadu_si512(kr + 32 * c));
                        part[j] = a;
                    } else {
                        part[j] = _mm512_setzero_ps();
                    }
                }
            }
#endif
            if (!DOT) {
#pragma GCC unroll 8
                for (int c = 0; c < NC; c++) qv[c] = _mm512_loadu_ps(q + gi * d + 16 * c);
#pragma GCC unroll 16
                for (int j = 0; j < 16; j++) {
                    if (j < nt) { /* lanes of q_gi * k_j, summed over D's 16-chunks */
                        const float *kr = kp + j * kstride;
                        __m512 a = _mm512_mul_ps(qv[0], _mm512_loadu_ps(kr));
#pragma GCC unroll 8
                        for (int c = 1; c < NC; c++)
                            a = _mm512_fmadd_ps(qv[c], _mm512_loadu_ps(kr + 16 * c), a);
                        part[j] = a;
                    } else {
                        part[j] = _mm512_setzero_ps();
                    }
                }
            }
            __m512 s = reduce16(part); /* [16] scores of head gi */
            if (DOT) s = _mm512_mul_ps(s, _mm512_set1_ps(t->scale)); /* qb is unscaled q */
            if (t->softcap > 0.0f) {
                float tmp[16];
                _mm512_storeu_ps(tmp, s);
                softcap_scores(tmp, nt, t->softcap);
                s = _mm512_loadu_ps(tmp);
            }
            float bm = _mm512_mask_reduce_max_ps(valid, s);
            float mx = bm > m[gi] ? bm : m[gi];
            float alpha = online_rescale(m[gi], mx);
            __m512 p = _mm512_maskz_mov_ps(valid, exp512(_mm512_sub_ps(s, _mm512_set1_ps(mx))));
            l[gi] = l[gi] * alpha + _mm512_reduce_add_ps(p);
            m[gi] = mx;
            if (alpha != 1.0f) {
                __m512 av = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
                for (int c = 0; c < NC; c++) acc[gi][c] = _mm512_mul_ps(acc[gi][c], av);
            }
            _mm512_store_ps(pbuf[gi], p);
        }
        /* the rows ahead this tile covers (the block's last tile: a whole tile's) */
        walkpos_t pf = walk_at(t, b, h, r0, prefetch_distance(t));
        for (int j = 0; j < nt; j++) { /* acc += p_j v_j, each V row shared by G heads */
            /* spread over the keys, so the prefetches never queue up behind each other */
            prefetch_at(pf, j, j + 1 < nt || r0 + nt < hi ? j + 1 : 16);
            __m512 vv[TILE_MAX_NC];
#pragma GCC unroll 8
            for (int c = 0; c < NC; c++)
                vv[c] = load16(t->v_cache, kv, t->v_lut, row0 + j * t->s_slot + 16 * c);
#pragma GCC unroll 8
            for (int gi = 0; gi < G; gi++) {
                __m512 pj = _mm512_set1_ps(pbuf[gi][j]);
#pragma GCC unroll 8
                for (int c = 0; c < NC; c++) acc[gi][c] = _mm512_fmadd_ps(pj, vv[c], acc[gi][c]);
            }
        }
    }
#pragma GCC unroll 8
    for (int gi = 0; gi < G; gi++)
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) _mm512_storeu_ps(accm + gi * d + 16 * c, acc[gi][c]);
}

/* One task: q [nh, G, D] float32 (scaled) -> out [nh, G, D] float32. Scratch: accm [nh, G,
 * D], ml [2 * nh * G] (the heads' running max and sum). Block by block, each head of the
 * task in turn (block_head). */
static inline __attribute__((always_inline)) void attend_tile(const task_t *t, const float *q,
                                                             float *out, float *accm,
                                                             float *ml, const int G,
                                                             const int NC, const int DOT) {
    const int d = 16 * NC, bs = t->block_size, len = t->len, nh = t->nh;
    const int start = task_start(t), nblocks = (len + bs - 1) / bs;
    float *m = ml, *l = ml + nh * G;
    walk_begin(t, accm, ml, nh * G);
    for (int b = start / bs; b < nblocks; b++) {
        for (int h = 0; h < nh; h++)
            block_head(t, h, b, start, q + h * G * d, DOT ? t->qb + h * G * d : NULL,
                       accm + h * G * d, m + h * G, l + h * G, G, NC, DOT);
    }
    for (int x = 0; x < nh * G; x++) {
        __m512 inv = _mm512_set1_ps(1.0f / l[x]);
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++)
            _mm512_storeu_ps(out + x * d + 16 * c, _mm512_mul_ps(_mm512_loadu_ps(accm + x * d + 16 * c), inv));
    }
}

#ifdef PAGED_DECODE_BF16_DOT
#define TILE_FN(G, NC)                                                                      \
    static void attend_tile_##G##_##NC(TILE_ARGS) {                                       \
        if ((NC) % 2 == 0 && t->qb != NULL)                                               \
            attend_tile(t, q, out, accm, ml, G, NC, (NC) % 2 == 0);                       \
        else                                                                              \
            attend_tile(t, q, out, accm, ml, G, NC, 0);                                   \
    }
#else
#define TILE_FN(G, NC)                                                                      \
    static void attend_tile_##G##_##NC(TILE_ARGS) { attend_tile(t, q, out, accm, ml, G, NC, 0); }
#endif
TILE_SHAPES(TILE_FN)

/* Any G <= TILE_MAX_G and D <= 16 * TILE_MAX_NC: not unrolled, acc in memory. */
static __attribute__((noinline)) void attend_tile_any(TILE_ARGS) {
    attend_tile(t, q, out, accm, ml, t->g, t->d / 16, 0);
}
#endif /* PAGED_DECODE_AVX512 */

#ifdef PAGED_DECODE_AVX2
/* -- AVX2 tiles --------------------------------------------------------------------------- */
/* The AVX-512 walk on 8 lanes, for hosts without AVX-512 (Zen 2/3, most client x86): tiles
 * of up to 8 keys, a tile's 8 scores from 8 vertical dot products reduced together (a hadd
 * tree), the exp vectorised (exp256.h), and P.V chunk by chunk of D with the G heads'
 * accumulators in registers (16 ymm registers do not hold G x D / 8 of them for the whole
 * block, as the AVX-512 walk's 32 zmm do). Each head sees the same tiles in the same order
 * whatever the grouping, so results do not depend on it. */
#include "exp256.h"
#include "hsum8.h"

#define TILE_MAX_NC8 (2 * TILE_MAX_NC) /* D / 8 */

/* p[8] -> lane j = sum of p[j]'s lanes. */
static inline __m256 reduce8(const __m256 *p) {
    __m256 t0 = _mm256_hadd_ps(p[0], p[1]), t1 = _mm256_hadd_ps(p[2], p[3]);
    __m256 t2 = _mm256_hadd_ps(p[4], p[5]), t3 = _mm256_hadd_ps(p[6], p[7]);
    __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3); /* halves of p0..3, p4..7 */
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                         _mm256_permute2f128_ps(u0, u1, 0x31));
}

static inline float hmax8(__m256 v) {
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_max_ss(x, _mm_movehdup_ps(x)));
}

/* 8 elements at `off` as float32 (bfloat16 widened exactly: a shift; fp8: 8 lookups in
 * lut, one gather). */
static inline __m256 load8(const void *base, int kv, const float *lut, int64_t off) {
    if (kv == KV_F32) return _mm256_loadu_ps((const float *)base + off);
    if (kv == KV_FP8) {
        __m128i b = _mm_loadl_epi64((const __m128i *)((const uint8_t *)base + off));
        return _mm256_i32gather_ps(lut, _mm256_cvtepu8_epi32(b), 4);
    }
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)base + off));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* Block b of head h of a task (block_head's contract, NC = D / 8): its tiles folded into
 * the head's state (m, l [G]; acc [G, D] in memory). The rows prefetch_distance on in the
 * walk are prefetched while it computes, spread over the tile's chunks of D. */
static inline __attribute__((always_inline)) void block_head8(
    const task_t *t, int h, int b, int start, const float *q, float *accm, float *m, float *l,
    const int G, const int NC) {
    const int d = 8 * NC, bs = t->block_size, len = t->len, kv = t->kv;
    float pbuf[TILE_MAX_G][8] __attribute__((aligned(32)));
    float kbuf[8 * 8 * TILE_MAX_NC8] __attribute__((aligned(32))); /* widened K [8, D] */
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    int64_t base = (int64_t)t->table[b] * t->s_block + (int64_t)(t->head + h) * t->s_head;
    int b0 = b * bs;
    int lo = b0 < start ? start - b0 : 0, hi = b0 + bs < len ? bs : len - b0;
    for (int r0 = lo; r0 < hi; r0 += 8) {
        int nt = hi - r0 < 8 ? hi - r0 : 8; /* keys r0 .. r0 + nt of the block */
        __m256 valid = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(nt), lane));
        int64_t row0 = base + (int64_t)r0 * t->s_slot;
        const float *kp; /* the tile's K rows, float32, kstride apart */
        int64_t kstride;
        if (kv != KV_F32) {
            for (int j = 0; j < nt; j++)
                load_kv_row(kbuf + j * d, t->k_cache, kv, t->k_lut, row0 + j * t->s_slot, d);
            kp = kbuf, kstride = d;
        } else {
            kp = (const float *)t->k_cache + row0, kstride = t->s_slot;
        }
#pragma GCC unroll 8
        for (int gi = 0; gi < G; gi++) {
#ifndef NO_GI_BARRIER
            __asm__ volatile("" ::: "memory"); /* (see block_head) */
#endif
            const float *qg = q + gi * d;
            __m256 part[8];
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) {
                if (j < nt) { /* lanes of q_gi * k_j, summed over D's 8-chunks */
                    const float *kr = kp + j * kstride;
                    __m256 a = _mm256_mul_ps(_mm256_loadu_ps(qg), _mm256_loadu_ps(kr));
#pragma GCC unroll 16
                    for (int c = 1; c < NC; c++)
                        a = _mm256_fmadd_ps(_mm256_loadu_ps(qg + 8 * c), _mm256_loadu_ps(kr + 8 * c), a);
                    part[j] = a;
                } else {
                    part[j] = _mm256_setzero_ps();
                }
            }
            __m256 s = reduce8(part); /* [8] scores of head gi */
            if (t->softcap > 0.0f) {
                float tmp[8];
                _mm256_storeu_ps(tmp, s);
                softcap_scores(tmp, nt, t->softcap);
                s = _mm256_loadu_ps(tmp);
            }
            float bm = hmax8(_mm256_blendv_ps(_mm256_set1_ps(-INFINITY), s, valid));
            float mx = bm > m[gi] ? bm : m[gi];
            float alpha = online_rescale(m[gi], mx);
            __m256 p = _mm256_and_ps(valid, exp256(_mm256_sub_ps(s, _mm256_set1_ps(mx))));
            l[gi] = l[gi] * alpha + hsum8(p);
            m[gi] = mx;
            if (alpha != 1.0f) {
                __m256 av = _mm256_set1_ps(alpha);
#pragma GCC unroll 16
                for (int c = 0; c < NC; c++)
                    _mm256_storeu_ps(accm + gi * d + 8 * c,
                                     _mm256_mul_ps(_mm256_loadu_ps(accm + gi * d + 8 * c), av));
            }
            _mm256_store_ps(pbuf[gi], p);
        }
        /* the rows ahead this tile covers (the block's last tile: a whole tile's) */
        walkpos_t pf = walk_at(t, b, h, r0, prefetch_distance(t));
        int p_n = r0 + nt < hi ? nt : 8;
        for (int c = 0; c < NC; c++) { /* acc[:, chunk c] += p_j v_j[chunk c] */
            prefetch_at(pf, p_n * c / NC, p_n * (c + 1) / NC);
            __m256 a[TILE_MAX_G];
#pragma GCC unroll 8
            for (int gi = 0; gi < G; gi++) a[gi] = _mm256_loadu_ps(accm + gi * d + 8 * c);
            for (int j = 0; j < nt; j++) {
                __m256 vv = load8(t->v_cache, kv, t->v_lut, row0 + j * t->s_slot + 8 * c);
#pragma GCC unroll 8
                for (int gi = 0; gi < G; gi++)
                    a[gi] = _mm256_fmadd_ps(_mm256_broadcast_ss(&pbuf[gi][j]), vv, a[gi]);
            }
#pragma GCC unroll 8
            for (int gi = 0; gi < G; gi++) _mm256_storeu_ps(accm + gi * d + 8 * c, a[gi]);
        }
    }
}

/* One task (attend_tile's contract) through block_head8, NC = D / 8. */
static inline __attribute__((always_inline)) void attend_tile8(TILE_ARGS, const int G,
                                                              const int NC) {
    const int d = 8 * NC, bs = t->block_size, len = t->len, nh = t->nh;
    const int start = task_start(t), nblocks = (len + bs - 1) / bs;
    float *m = ml, *l = ml + nh * G;
    walk_begin(t, accm, ml, nh * G);
    for (int b = start / bs; b < nblocks; b++) {
        for (int h = 0; h < nh; h++)
            block_head8(t, h, b, start, q + h * G * d, accm + h * G * d, m + h * G, l + h * G,
                        G, NC);
    }
    for (int x = 0; x < nh * G; x++) {
        __m256 inv = _mm256_set1_ps(1.0f / l[x]);
#pragma GCC unroll 16
        for (int c = 0; c < NC; c++)
            _mm256_storeu_ps(out + x * d + 8 * c, _mm256_mul_ps(_mm256_loadu_ps(accm + x * d + 8 * c), inv));
    }
}

/* attend_tile_G_NC with NC = D / 16, as the AVX-512 path names them (one dispatch). */
#define TILE_FN(G, NC)                                                                      \
    static void attend_tile_##G##_##NC(TILE_ARGS) { attend_tile8(t, q, out, accm, ml, G, 2 * (NC)); }
TILE_SHAPES(TILE_FN)

static __attribute__((noinline)) void attend_tile_any(TILE_ARGS) {
    attend_tile8(t, q, out, accm, ml, t->g, t->d / 8);
}
#endif /* PAGED_DECODE_AVX2 */

#ifdef PAGED_DECODE_HAVE_TILE
#define TILE_CASE(G, NC)                                                                    \
    case (G) * 64 + (NC):                                                                 \
        attend_tile_##G##_##NC(t, q, out, accm, ml);                                      \
        return 1;
/* 1 where a tile kernel served the task. */
static int attend_fast(TILE_ARGS) {
    if (t->d % 16 != 0) return 0; /* the tiles take D in whole 16-lane chunks */
    switch (t->g * 64 + t->d / 16) {
        TILE_SHAPES(TILE_CASE)
    default:
        break;
    }
    if (t->d % 16 == 0 && t->d <= 16 * TILE_MAX_NC && t->g <= TILE_MAX_G) {
        attend_tile_any(t, q, out, accm, ml);
        return 1;
    }
    return 0;
}
#endif

/* KV heads per task: all of a request's, unless that leaves fewer than
 * MIN_TASKS_PER_THREAD tasks a thread; then the largest divisor of hk that does not. */
static int heads_per_task(int n, int hk, int num_threads) {
    int64_t want = (int64_t)MIN_TASKS_PER_THREAD * (num_threads > 1 ? num_threads : 1);
    int per = hk;
    while (per > 1 && (int64_t)n * (hk / per) < want) {
        int p = per - 1;
        while (hk % p != 0) p--;
        per = p;
    }
    return per;
}

/* Returns 0, or -1 when scratch memory could not be allocated. */
int paged_decode(const void *q, int q_bf16, int64_t q_stride, void *out, int out_bf16,
                 int64_t out_stride, const int64_t *rows,
                 const void *k_cache, const void *v_cache, int kv, const float *k_lut,
                 const float *v_lut, int64_t s_block,
                 int64_t s_slot, int64_t s_head, const int32_t *seq_lens,
                 const int32_t *block_table, int64_t table_stride, int n, int hq, int hk,
                 int d, int block_size, float scale, int window, float softcap,
                 int num_threads, const float *sinks) {
    int g = hq / hk, nh = heads_per_task(n, hk, num_threads), groups = hk / nh;
    int64_t span = (int64_t)nh * g * d; /* one task's q / out elements */
    int failed = 0;
#pragma omp parallel num_threads(num_threads) reduction(| : failed)
    {
        /* qf, of, acc [nh, G, D]; row [D]; ml [2, nh, G]; qb [nh, G, D] bfloat16 (in
         * floats' room) */
        float *qf = malloc(sizeof(float) * (size_t)(4 * span + d + 2 * nh * g));
        int ok = qf != NULL;
        float *of = ok ? qf + span : NULL; /* no arithmetic on a NULL qf */
        float *acc = ok ? of + span : NULL, *row = ok ? acc + span : NULL;
        float *ml = ok ? row + d : NULL;
        uint16_t *qb = ok ? (uint16_t *)(ml + 2 * nh * g) : NULL;
        failed |= !ok;
        /* every thread takes part in the worksharing loop; one without scratch skips work.
         * Chunks of TASK_CHUNK tasks: a thread knows its next task inside a chunk and
         * prefetches its first blocks while finishing this one; dynamic, so a thread
         * sharing its core (the event loop) takes fewer. */
        int64_t total = (int64_t)n * groups;
#pragma omp for schedule(dynamic, TASK_CHUNK)
        for (int64_t w = 0; w < total; w++) {
            if (!ok) continue;
            int i = (int)(w / groups), head = (int)(w % groups) * nh;
            int64_t r = rows ? rows[i] : i, h0 = (int64_t)head * g * d;
            int64_t qo = r * q_stride + h0, oo = r * out_stride + h0;
            load_row(qf, q, q_bf16, qo, (int)span);
            task_t t = {k_cache, v_cache, kv, k_lut, v_lut, s_block, s_slot, s_head,
                        block_table + (int64_t)i * table_stride, seq_lens[i], head, nh, g, d,
                        block_size, scale, softcap, window, NULL, NULL, sinks};
#ifdef PAGED_DECODE_BF16_DOT
            if (kv == KV_BF16 && d % 32 == 0) { /* q exact in bfloat16 (a bfloat16 model's):
                                           * the dot products take it unscaled, their sums
                                           * are scaled (block_head) */
                int exact = 1;
                for (int64_t e = 0; e < span; e++) {
                    uint32_t u;
                    memcpy(&u, &qf[e], sizeof u);
                    qb[e] = (uint16_t)(u >> 16);
                    exact &= (u & 0xffffu) == 0;
                }
                if (exact) t.qb = qb;
            }
#endif
            for (int64_t e = 0; e < span; e++) qf[e] *= scale;
            task_t next = t;
            if ((w + 1) % TASK_CHUNK != 0 && w + 1 < total) { /* same chunk: this thread's */
                int ni = (int)((w + 1) / groups);
                next.table = block_table + (int64_t)ni * table_stride;
                next.len = seq_lens[ni], next.head = (int)((w + 1) % groups) * nh;
                t.next = &next;
            }
            int done = 0;
#ifdef PAGED_DECODE_HAVE_TILE
            done = attend_fast(&t, qf, of, acc, ml);
#endif
            for (int h = 0; !done && h < nh; h++) { /* one head at a time */
                task_t th = t;
                th.head = head + h, th.nh = 1;
                attend_portable(&th, qf + (int64_t)h * g * d, of + (int64_t)h * g * d, row, acc);
            }
            store_row(out, out_bf16, oo, of, (int)span);
        }
        free(qf);
    }
    return failed ? -1 : 0;
}
