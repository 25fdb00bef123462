/* Packed weights streamed once, in order, from memory (w4a8_gemm.c, q8a8_gemm.c): a step
 * of those kernels does too little work a 64-byte line for the hardware prefetcher alone
 * to hide the memory's latency (a one-row 4-bit product read at half the bandwidth), so
 * each step asks for its lines PF_DIST bytes ahead: 8 rows of 1024 4-bit columns. 2-core
 * Xeon, the 32 linears of 8 Qwen3-0.6B layers in a row: W4A8 one input row 6.2 -> 3.6 ms
 * (11 -> 20 GB/s), 8 rows 16.2 -> 14.1 ms; Q8_0 one row 10.5 -> 8.2 ms, 8 rows 27.7 ->
 * 18.5 ms. A prefetch past the end of the weight never faults. */
#pragma once
#include <immintrin.h>
#include <stdint.h>

#ifndef PF_DIST
#define PF_DIST 4096
#endif

/* Ask for the lines PF_DIST bytes past the `bytes` bytes at p. */
static inline void prefetch_ahead(const uint8_t *p, int64_t bytes) {
    for (int64_t c = 0; c < bytes; c += 64)
        _mm_prefetch((const char *)(p + PF_DIST + c), _MM_HINT_T0);
}
