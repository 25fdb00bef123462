/* 16 float32 lanes to and from bfloat16 with AVX512-BF16's hardware conversion, where the
 * compiler targets it (-march=native on such a host: __AVX512BF16__; detected, never
 * assumed). Elsewhere BF16_VEC16 stays undefined and the kernels keep their portable loops
 * (bf16_rows.h's software round-to-nearest-even).
 *
 * vcvtneps2bf16 rounds to nearest even as bf16_rows.h's f32_to_bf16 does, but flushes
 * denormal inputs and outputs to zero and keeps a NaN's sign and payload (torch writes
 * 0x7fc0): the same bits for every finite, normal value.
 */
#ifndef ACTORLLM_BF16_VEC16_H
#define ACTORLLM_BF16_VEC16_H

#if defined(__AVX512F__) && defined(__AVX512BF16__) && !defined(NO_BF16_VEC16)
#define BF16_VEC16 1
#include <immintrin.h>
#include <stdint.h>

/* 16 bfloat16 at p -> float32 lanes (exact). */
static inline __m512 v16_load_bf16(const uint16_t *p) {
    __m256i h = _mm256_loadu_si256((const __m256i *)p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* float32 lanes -> 16 bfloat16 (round to nearest even). */
static inline __m256i v16_to_bf16(__m512 v) { return (__m256i)_mm512_cvtneps_pbh(v); }

static inline void v16_store_bf16(uint16_t *p, __m512 v) {
    _mm256_storeu_si256((__m256i *)p, v16_to_bf16(v));
}

/* v through bfloat16 and back: the value a bf16 tensor holds after torch rounds v. */
static inline __m512 v16_round_bf16(__m512 v) {
    __m512i w = _mm512_cvtepu16_epi32(v16_to_bf16(v));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
#endif

#endif
