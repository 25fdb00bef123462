/* The scalar steps of the online softmax that the attention kernels' vector walks share
 * (paged_decode.c's AVX-512 and AVX2 tiles, paged_prefill.c's softmax rows): the running
 * sums' rescale factor and the score softcap. */
#ifndef ACTORLLM_ONLINE_SOFTMAX_H
#define ACTORLLM_ONLINE_SOFTMAX_H

#include <math.h>
#include <stdint.h>

/* The factor that rescales a row's running sum and accumulator when a tile moves its max
 * from m to mx (mx >= m): exp(m - mx); exactly 1 when the max did not move (the common case
 * once a few tiles are in: no exp), 0 on the row's first tile (m = -inf). */
static inline float online_rescale(float m, float mx) {
    return mx == m ? 1.0f : m == -INFINITY ? 0.0f : expf(m - mx);
}

/* s[0:n] = cap * tanh(s / cap), in place (Gemma 2's attention logit softcap). */
static inline void softcap_scores(float *s, int64_t n, float cap) {
    for (int64_t e = 0; e < n; e++) s[e] = cap * tanhf(s[e] / cap);
}

/* A row's running state before its first key: max -inf and sum 0, or with an attention sink
 * (gpt-oss: a logit in the softmax denominator whose value is zero) the sink taken as the
 * first key: max = sink, sum = exp(sink - sink) = 1, accumulator 0 either way. `sinks` NULL:
 * none. */
static inline void online_begin(const float *sinks, int64_t head, float *m, float *l) {
    if (sinks != NULL) {
        *m = sinks[head], *l = 1.0f;
    } else {
        *m = -INFINITY, *l = 0.0f;
    }
}

#endif
