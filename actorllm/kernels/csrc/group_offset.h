/* A weight group's offset in the packed layouts (wq_gemm.c, w4a8_gemm.c): stored per group,
 * or, for symmetric codes (offsets NULL), -mid * scale with mid = 2^(bits - 1); exact, mid
 * being a power of two. */
#pragma once
#include <stdint.h>

static inline float offset_at(const float *brow, const float *srow, int64_t g, float mid) {
    return brow ? brow[g] : -mid * srow[g];
}
