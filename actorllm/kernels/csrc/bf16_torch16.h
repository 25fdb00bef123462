/* 16 float32 lanes to and from bfloat16 with the bits torch's own conversion gives (the
 * AMX-INT8 kernels' outputs must equal their torch paths' `.to(torch.bfloat16)`): round to
 * nearest even in integer arithmetic, denormals kept, NaN 0xFFFF (torch's vectorized
 * conversion). AVX-512F; include after <immintrin.h> where the compiler targets it. */
#pragma once
#include <immintrin.h>

/* bfloat16 bits of 16 floats, nearest even, NaN 0xFFFF. */
static inline __m256i to_bf16(__m512 v) {
    __m512i u = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i bias = _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
    __mmask16 ordered = _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
    r = _mm512_mask_blend_epi32(ordered, _mm512_set1_epi32(0xFFFF), r);
    return _mm512_cvtepi32_epi16(r);
}

/* 16 bfloat16 -> float32 lanes (exact). */
static inline __m512 from_bf16(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
