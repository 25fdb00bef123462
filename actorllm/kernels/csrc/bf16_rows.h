/* bfloat16 <-> float32 for the native CPU kernels, and whole rows of either dtype.
 *
 * Shared by every csrc/*.c kernel (native.py ships the headers beside the source it
 * builds, and hashes them into the build's cache key).
 */
#ifndef ACTORLLM_BF16_ROWS_H
#define ACTORLLM_BF16_ROWS_H

#include <stdint.h>
#include <string.h>

static inline float bf16_to_f32(uint16_t x) {
    uint32_t u = (uint32_t)x << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Round to nearest even, NaN to torch's quiet NaN (c10::BFloat16). */
static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)0x7fc0 : (uint16_t)r;
}

/* dst[0:n] = row `off` of base (float32, or bfloat16 widened) */
static inline void load_row(float *dst, const void *base, int bf16, int64_t off, int n) {
    if (!bf16) {
        memcpy(dst, (const float *)base + off, sizeof(float) * (size_t)n);
        return;
    }
    const uint16_t *s = (const uint16_t *)base + off;
#pragma omp simd
    for (int e = 0; e < n; e++) dst[e] = bf16_to_f32(s[e]);
}

/* row `off` of base = src[0:n] (float32, or rounded to bfloat16) */
static inline void store_row(void *base, int bf16, int64_t off, const float *src, int n) {
    if (!bf16) {
        memcpy((float *)base + off, src, sizeof(float) * (size_t)n);
        return;
    }
    uint16_t *o = (uint16_t *)base + off;
#pragma omp simd
    for (int e = 0; e < n; e++) o[e] = f32_to_bf16(src[e]);
}

#endif
