/* A 16 x 16 block of 32-bit lanes transposed in registers (AVX-512). */
#pragma once
#include <immintrin.h>

/* r[i][j] -> r[j][i] for a 16 x 16 block of int32 (64 shuffles). */
static inline void transpose16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 8; i++) { /* lane L: rows 2i, 2i+1 x columns 4L..4L+1 / 4L+2..4L+3 */
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int b = 0; b < 4; b++) { /* r[4b + q], lane L: column 4L + q, rows 4b..4b+3 */
        r[4 * b] = _mm512_unpacklo_epi64(t[4 * b], t[4 * b + 2]);
        r[4 * b + 1] = _mm512_unpackhi_epi64(t[4 * b], t[4 * b + 2]);
        r[4 * b + 2] = _mm512_unpacklo_epi64(t[4 * b + 1], t[4 * b + 3]);
        r[4 * b + 3] = _mm512_unpackhi_epi64(t[4 * b + 1], t[4 * b + 3]);
    }
    for (int q = 0; q < 4; q++) { /* the 4 x 4 transpose of 128-bit lanes */
        t[q] = _mm512_shuffle_i32x4(r[q], r[4 + q], 0x44);
        t[4 + q] = _mm512_shuffle_i32x4(r[q], r[4 + q], 0xEE);
        t[8 + q] = _mm512_shuffle_i32x4(r[8 + q], r[12 + q], 0x44);
        t[12 + q] = _mm512_shuffle_i32x4(r[8 + q], r[12 + q], 0xEE);
    }
    for (int q = 0; q < 4; q++) {
        r[q] = _mm512_shuffle_i32x4(t[q], t[8 + q], 0x88);
        r[4 + q] = _mm512_shuffle_i32x4(t[q], t[8 + q], 0xDD);
        r[8 + q] = _mm512_shuffle_i32x4(t[4 + q], t[12 + q], 0x88);
        r[12 + q] = _mm512_shuffle_i32x4(t[4 + q], t[12 + q], 0xDD);
    }
}
