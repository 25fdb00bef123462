/* KV cache elements for the native attention kernels: float32, bfloat16, or fp8 (e4m3 or
 * e5m2, kernels/kv_quant.py) widened through a table of 256 floats, each byte's value
 * times the layer's scale, so the widened row is the dequantized one (one lookup each).
 */
#ifndef ACTORLLM_KV_ROWS_H
#define ACTORLLM_KV_ROWS_H

#include <stdint.h>

#include "bf16_rows.h"

/* The cache's dtype code (paged_decode.py's KV_DTYPES). */
#define KV_F32 0
#define KV_BF16 1
#define KV_FP8 2

static inline int64_t kv_esize(int kv) { return kv == KV_FP8 ? 1 : kv == KV_BF16 ? 2 : 4; }

/* dst[0:n] = row `off` of a cache of dtype kv, as float32 (fp8: through lut [256]). */
static inline void load_kv_row(float *dst, const void *base, int kv, const float *lut,
                               int64_t off, int n) {
    if (kv != KV_FP8) {
        load_row(dst, base, kv, off, n);
        return;
    }
    const uint8_t *s = (const uint8_t *)base + off;
    for (int e = 0; e < n; e++) dst[e] = lut[s[e]];
}

#endif
