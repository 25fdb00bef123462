/* Paged attention for decode rows on the CPU: one query token per request, its keys and
 * values read straight from the paged KV cache, each block once.
 *
 * The torch reference path gathers every decode row's context into a padded float32 copy
 * and runs SDPA on it: for a bfloat16 cache that is a conversion and a copy of the whole
 * context per layer, plus the padding. Here each (request, KV head) pair is one task: its
 * G = Hq / Hk query heads are scored against the KV head's keys (converted to float32 one
 * row at a time, shared by the G heads), softmaxed in float32, and the values accumulated.
 *
 * Layouts (element strides; the last dimension is contiguous):
 *   q, out       [N, Hq, D] float32, contiguous
 *   k/v cache    [NB, BS, Hk, D] viewed through strides (s_block, s_slot, s_head): the
 *                worker stores it head-major ([Hk, NB, BS, D]) on the reference path
 *   seq_lens     [N] int32: context length including this step's token (already written)
 *   block_table  [N, table_stride] int32: physical blocks in order
 * window > 0 keeps only the last `window` keys; softcap > 0 applies Gemma 2's
 * softcap * tanh(score / softcap) before the softmax.
 *
 * Threads: OpenMP, over (request, KV head) tasks. Built against the libgomp torch already
 * loaded (same soname), so the kernel shares torch's thread pool instead of a second one.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline float bf16_to_f32(uint16_t x) {
    union {
        uint32_t u;
        float f;
    } c;
    c.u = (uint32_t)x << 16;
    return c.f;
}

/* Row `slot` of block `block` for KV head `head`, as float32: a pointer into the cache, or
 * into `scratch` after conversion. */
static inline const float *kv_row(const void *cache, int kv_bf16, int64_t offset, int d,
                                  float *scratch) {
    if (!kv_bf16) return (const float *)cache + offset;
    const uint16_t *src = (const uint16_t *)cache + offset;
#pragma omp simd
    for (int e = 0; e < d; e++) scratch[e] = bf16_to_f32(src[e]);
    return scratch;
}

static void attend(const float *q, float *out, const void *k_cache, const void *v_cache,
                   int kv_bf16, int64_t s_block, int64_t s_slot, int64_t s_head,
                   const int32_t *table, int len, int head, int g, int d, int block_size,
                   float scale, int window, float softcap, float *scores, float *row,
                   float *acc) {
    int start = (window > 0 && len > window) ? len - window : 0;
    int n = len - start;
    /* scores[gi * n + j] = q_gi . k_(start + j), block by block (no division per token) */
    for (int b = start / block_size; b * block_size < len; b++) {
        int64_t base = (int64_t)table[b] * s_block + (int64_t)head * s_head;
        int t0 = b * block_size;
        int lo = t0 < start ? start : t0, hi = t0 + block_size < len ? t0 + block_size : len;
        for (int t = lo; t < hi; t++) {
            const float *k = kv_row(k_cache, kv_bf16, base + (int64_t)(t - t0) * s_slot, d, row);
            for (int gi = 0; gi < g; gi++) {
                const float *qg = q + (int64_t)gi * d;
                float s = 0.0f;
#pragma omp simd reduction(+ : s)
                for (int e = 0; e < d; e++) s += qg[e] * k[e];
                s *= scale;
                if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
                scores[(int64_t)gi * n + (t - start)] = s;
            }
        }
    }
    /* softmax per query head, float32; the normaliser is applied at the end */
    float sums[g];
    for (int gi = 0; gi < g; gi++) {
        float *sc = scores + (int64_t)gi * n;
        float m = -INFINITY;
        for (int j = 0; j < n; j++) m = sc[j] > m ? sc[j] : m;
        float sum = 0.0f;
        for (int j = 0; j < n; j++) {
            sc[j] = expf(sc[j] - m);
            sum += sc[j];
        }
        sums[gi] = sum;
    }
    memset(acc, 0, sizeof(float) * (size_t)g * (size_t)d);
    for (int b = start / block_size; b * block_size < len; b++) {
        int64_t base = (int64_t)table[b] * s_block + (int64_t)head * s_head;
        int t0 = b * block_size;
        int lo = t0 < start ? start : t0, hi = t0 + block_size < len ? t0 + block_size : len;
        for (int t = lo; t < hi; t++) {
            const float *v = kv_row(v_cache, kv_bf16, base + (int64_t)(t - t0) * s_slot, d, row);
            for (int gi = 0; gi < g; gi++) {
                float p = scores[(int64_t)gi * n + (t - start)];
                float *a = acc + (int64_t)gi * d;
#pragma omp simd
                for (int e = 0; e < d; e++) a[e] += p * v[e];
            }
        }
    }
    for (int gi = 0; gi < g; gi++) {
        float inv = 1.0f / sums[gi];
        for (int e = 0; e < d; e++) out[(int64_t)gi * d + e] = acc[(int64_t)gi * d + e] * inv;
    }
}

/* Returns 0, or -1 when scratch memory could not be allocated. */
int paged_decode(const float *q, float *out, const void *k_cache, const void *v_cache,
                 int kv_bf16, int64_t s_block, int64_t s_slot, int64_t s_head,
                 const int32_t *seq_lens, const int32_t *block_table, int64_t table_stride,
                 int n, int hq, int hk, int d, int block_size, float scale, int window,
                 float softcap, int num_threads) {
    int g = hq / hk;
    int max_len = 0;
    for (int i = 0; i < n; i++) max_len = seq_lens[i] > max_len ? seq_lens[i] : max_len;
    int failed = 0;
#pragma omp parallel num_threads(num_threads) reduction(| : failed)
    {
        float *scores = malloc(sizeof(float) * (size_t)g * (size_t)(max_len > 0 ? max_len : 1));
        float *row = malloc(sizeof(float) * (size_t)d);
        float *acc = malloc(sizeof(float) * (size_t)g * (size_t)d);
        int ok = scores != NULL && row != NULL && acc != NULL;
        failed |= !ok;
        /* every thread takes part in the worksharing loop; one without scratch skips work */
#pragma omp for schedule(dynamic, 1)
        for (int64_t w = 0; w < (int64_t)n * hk; w++) {
            if (!ok) continue;
            int i = (int)(w / hk), head = (int)(w % hk);
            int64_t qo = ((int64_t)i * hq + (int64_t)head * g) * d;
            attend(q + qo, out + qo, k_cache, v_cache, kv_bf16, s_block, s_slot, s_head,
                   block_table + (int64_t)i * table_stride, seq_lens[i], head, g, d,
                   block_size, scale, window, softcap, scores, row, acc);
        }
        free(scores);
        free(row);
        free(acc);
    }
    return failed ? -1 : 0;
}
