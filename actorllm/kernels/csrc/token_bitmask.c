/* The grammar token bitmask on the CPU: a forbidden token's logit becomes -inf, in place.
 *
 * Layouts (element strides; the last dimension is contiguous):
 *   logits  [N, V] float32 (apply_token_bitmask) or bfloat16 as uint16
 *           (apply_token_bitmask_bf16: -inf is 0xFF80), rows logits_stride apart
 *   bitmask [R, W] int32, rows mask_stride apart: bit t % 32 of word t / 32 set = token t
 *           allowed; tokens at or past 32 * W are forbidden
 *   rows    [N] int64: the bitmask row (< R) of logits row i, or -1 (left as it is)
 * Returns 0, or 1 for a negative size and 2 for a row at or past R (nothing written then).
 *
 * Constrained rows are mostly allowed words (inside a JSON string nearly every token is), so
 * a word of all ones is one compare and no store; an all-zero word is 32 stores; only mixed
 * words look at their bits (a select the compiler vectorises). The row mapping is read here,
 * so the caller gathers nothing. Serial: 64 rows x 32000 tokens is tens of microseconds,
 * below what waking a thread team costs.
 */
#include <math.h>
#include <stdint.h>

/* One kernel per logits type T: a forbidden token's logit becomes NEG_INF. */
#define DEFINE_APPLY(NAME, T, NEG_INF)                                                      \
    static void NAME##_word(T *x, uint32_t bits, int64_t n) {                              \
        if (bits == 0xFFFFFFFFu && n == 32)                                                \
            return;                                                                        \
        for (int64_t k = 0; k < n; k++)                                                    \
            x[k] = ((bits >> k) & 1u) ? x[k] : (NEG_INF);                                  \
    }                                                                                      \
    int NAME(T *logits, int64_t logits_stride, const int32_t *bitmask, int64_t mask_stride, \
             int64_t mask_rows, const int64_t *rows, int64_t n, int64_t vocab,             \
             int64_t width) {                                                              \
        if (n < 0 || vocab < 0 || width < 0)                                               \
            return 1;                                                                      \
        for (int64_t i = 0; i < n; i++)                                                    \
            if (rows[i] >= mask_rows)                                                      \
                return 2;                                                                  \
        for (int64_t i = 0; i < n; i++) {                                                  \
            int64_t r = rows[i];                                                           \
            if (r < 0)                                                                     \
                continue;                                                                  \
            T *x = logits + i * logits_stride;                                             \
            const uint32_t *words = (const uint32_t *)(bitmask + r * mask_stride);         \
            int64_t t = 0;                                                                 \
            for (int64_t j = 0; j < width && t < vocab; j++, t += 32) {                    \
                int64_t left = vocab - t;                                                  \
                NAME##_word(x + t, words[j], left < 32 ? left : 32);                       \
            }                                                                              \
            for (; t < vocab; t++) /* past the bitmask's words: forbidden */               \
                x[t] = (NEG_INF);                                                          \
        }                                                                                  \
        return 0;                                                                          \
    }

DEFINE_APPLY(apply_token_bitmask, float, -INFINITY)
DEFINE_APPLY(apply_token_bitmask_bf16, uint16_t, (uint16_t)0xFF80u) /* bf16 -inf */
