/* W8A8's per-row input quantization on AVX-512 (amx_int8_linear.c, w8a8_vnni.c), as
 * int8_gemm.quantize_rows has it, bit for bit: scale = amax / 127 over the row, each value
 * x / scale (1 where the scale is 0) rounded half to even and saturated to int8. Float32
 * or bfloat16 rows (widened exactly), any length: lanes past k read as 0. AVX-512F/BW;
 * include after <immintrin.h> and bf16_torch16.h. */
#pragma once
#include <stdint.h>

/* Elements [i, i + 16) of the row (float32, or bfloat16 bits: bf16), 0 past k. */
static inline __m512 q8_load16(const void *xrow, int bf16, int64_t k, int64_t i) {
    __mmask16 in = (__mmask16)(i >= k ? 0 : k - i >= 16 ? 0xFFFF : (1u << (k - i)) - 1);
    return bf16 ? from_bf16(_mm256_maskz_loadu_epi16(in, (const uint16_t *)xrow + i))
                : _mm512_maskz_loadu_ps(in, (const float *)xrow + i);
}

/* The row's scale, amax / 127. */
static inline float q8_scale(const void *xrow, int bf16, int64_t k) {
    __m512 amax = _mm512_setzero_ps();
    for (int64_t i = 0; i < k; i += 16)
        amax = _mm512_max_ps(amax, _mm512_abs_ps(q8_load16(xrow, bf16, k, i)));
    return _mm512_reduce_max_ps(amax) / 127.0f;
}

/* The int8 values of elements [i, i + 16) (0 past k); safe: the scale, or 1 where it is
 * 0, in every lane. */
static inline __m128i q8_16(const void *xrow, int bf16, int64_t k, int64_t i, __m512 safe) {
    __m512 v = _mm512_roundscale_ps(_mm512_div_ps(q8_load16(xrow, bf16, k, i), safe),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(v)); /* saturating: the clamp */
}
