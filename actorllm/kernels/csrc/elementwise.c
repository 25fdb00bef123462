/* Fused element-wise CPU kernels: RMSNorm (optionally after the residual add), NeoX rotary
 * on q and k, SiLU-and-mul. Each replaces a chain of torch ops (dtype conversions, pow,
 * mean, rsqrt, mul, cat...) with one pass over the rows, float32 math, results rounded to
 * the output dtype where the torch reference rounds (bfloat16: round to nearest even).
 *
 * Element types: float32 or bfloat16 (flag bf16), one type per call. Rows: the last
 * dimension is contiguous; leading dimensions are passed as (n0, s0) x (n1, s1) in elements
 * so q/k views of a fused qkv output are read in place. Outputs are contiguous.
 *
 * Portable C written for the auto-vectoriser (-O3 -march=native: whatever SIMD the host
 * has), plus 16-lane AVX-512 paths for rows whose width is a multiple of 16 where the
 * compiler targets AVX-512 (__AVX512F__; bfloat16 also __AVX512BF16__, bf16_vec16.h):
 * detected by the build, never assumed; the portable loops serve everything else (tests
 * build them with -mno-avx512f). Strict IEEE order (-std=c11 leaves -ffp-contract off): no
 * FMA contraction, so rotary and the bf16 roundings match torch's separate mul / add ops
 * (the only FMAs are exp_f32's and SiLU's reciprocal step, written out).
 *
 * Threads: OpenMP over rows, the libgomp torch already loaded (same soname), only when a
 * call has enough work to pay for waking the team.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "bf16_rows.h"
#include "bf16_vec16.h"
#include "exp_f32.h"
#ifdef __AVX512F__
#include <immintrin.h>
#endif

/* Below this many elements a call runs on the calling thread: a decode step's norms
 * ([128, 768]) take ~20 us on one core, less than waking the team costs on a loaded box. */
#define PAR_MIN_ELEMS (1 << 18)

/* Runs the body (the last argument; it reads lo, hi: a range of rows; no pragmas in it)
 * over [0, n): on the calling thread when work < PAR_MIN_ELEMS, else split evenly across an
 * OpenMP team of num_threads. A small call
 * never enters a parallel region at all: a region of another team size would make libgomp
 * release and recreate torch's pool threads and recount them, which changes its spin
 * regime (worker/omp_spin.py) and made the float32 linears after the kernels 2x slower. */
#define FOR_ROW_RANGES(n, work, num_threads, ...)                                      \
    do {                                                                              \
        int nt_ = (work) >= PAR_MIN_ELEMS && (num_threads) > 1 ? (num_threads) : 1;   \
        if (nt_ == 1) {                                                               \
            int64_t lo = 0, hi = (n);                                                 \
            __VA_ARGS__;                                                              \
        } else {                                                                      \
            _Pragma("omp parallel for num_threads(nt_) schedule(static)")             \
            for (int c_ = 0; c_ < nt_; c_++) {                                        \
                int64_t lo = (n) * c_ / nt_, hi = (n) * (c_ + 1) / nt_;               \
                __VA_ARGS__;                                                          \
            }                                                                         \
        }                                                                             \
    } while (0)

/* A float through bfloat16 and back: the value torch holds after a bf16 op's rounding. */
static inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

#define ROW_MAX 8192
#define CH 1024 /* silu_and_mul's chunk of a row */ /* widest row a call takes (python checks) */

/* One row of RMSNorm, float32 in and out: pass 1 sums squares (writing x + r to res_out
 * first when r), pass 2 scales. No staging copies: rows are often short (head_dim 64). */
static inline void norm_row_f32(const float *x, const float *r, float *res_out, float *out,
                                const float *restrict wf, int d, float eps) {
    float ss = 0.0f;
    if (r != NULL) {
#pragma omp simd reduction(+ : ss)
        for (int e = 0; e < d; e++) {
            float v = x[e] + r[e];
            res_out[e] = v;
            ss += v * v;
        }
        x = res_out;
    } else {
#pragma omp simd reduction(+ : ss)
        for (int e = 0; e < d; e++) ss += x[e] * x[e];
    }
    float inv = 1.0f / sqrtf(ss / (float)d + eps);
#pragma omp simd
    for (int e = 0; e < d; e++) out[e] = x[e] * inv * wf[e];
}

#ifdef __AVX512F__
/* norm_row_f32 for d a multiple of 16: the squares summed in one 16-lane accumulator, then
 * across it (float32 reassociation only; the same value for every call with this d). */
static inline void norm_row_f32_v16(const float *x, const float *r, float *res_out, float *out,
                                    const float *restrict wf, int d, float eps) {
    __m512 acc = _mm512_setzero_ps();
    if (r != NULL) {
        for (int e = 0; e < d; e += 16) {
            __m512 v = _mm512_add_ps(_mm512_loadu_ps(x + e), _mm512_loadu_ps(r + e));
            _mm512_storeu_ps(res_out + e, v);
            acc = _mm512_add_ps(acc, _mm512_mul_ps(v, v));
        }
        x = res_out;
    } else {
        for (int e = 0; e < d; e += 16) {
            __m512 v = _mm512_loadu_ps(x + e);
            acc = _mm512_add_ps(acc, _mm512_mul_ps(v, v));
        }
    }
    __m512 inv = _mm512_set1_ps(1.0f / sqrtf(_mm512_reduce_add_ps(acc) / (float)d + eps));
    for (int e = 0; e < d; e += 16) {
        __m512 y = _mm512_mul_ps(_mm512_loadu_ps(x + e), inv);
        _mm512_storeu_ps(out + e, _mm512_mul_ps(y, _mm512_loadu_ps(wf + e)));
    }
}
#endif

/* norm_row_f32 with head_dim rows (q/k norms) at a constant trip count, no loop peeling;
 * 16 lanes at a time where the compiler targets AVX-512 and d is a multiple of 16. */
static inline void norm_row_f32_any(const float *x, const float *r, float *res_out, float *out,
                                    const float *restrict wf, int d, float eps) {
#ifdef __AVX512F__
    if (d % 16 == 0) {
        if (d == 64)
            norm_row_f32_v16(x, r, res_out, out, wf, 64, eps);
        else
            norm_row_f32_v16(x, r, res_out, out, wf, d, eps);
        return;
    }
#endif
    if (d == 64)
        norm_row_f32(x, r, res_out, out, wf, 64, eps);
    else if (d == 128)
        norm_row_f32(x, r, res_out, out, wf, 128, eps);
    else
        norm_row_f32(x, r, res_out, out, wf, d, eps);
}

/* The same for bfloat16: x + r rounded before it is squared and normed; mode 0 rounds the
 * normed value and then w * it, mode 1 rounds once. */
static inline void norm_row_bf16(const uint16_t *x, const uint16_t *r, uint16_t *res_out,
                                 uint16_t *out, const float *restrict wf, int d, float eps,
                                 int mode) {
    float ss = 0.0f;
    if (r != NULL) {
#pragma omp simd reduction(+ : ss)
        for (int e = 0; e < d; e++) {
            uint16_t h = f32_to_bf16(bf16_to_f32(x[e]) + bf16_to_f32(r[e]));
            res_out[e] = h;
            float v = bf16_to_f32(h);
            ss += v * v;
        }
        x = res_out;
    } else {
#pragma omp simd reduction(+ : ss)
        for (int e = 0; e < d; e++) {
            float v = bf16_to_f32(x[e]);
            ss += v * v;
        }
    }
    float inv = 1.0f / sqrtf(ss / (float)d + eps);
    if (mode == 0) {
#pragma omp simd
        for (int e = 0; e < d; e++)
            out[e] = f32_to_bf16(round_bf16(bf16_to_f32(x[e]) * inv) * wf[e]);
    } else {
#pragma omp simd
        for (int e = 0; e < d; e++) out[e] = f32_to_bf16(bf16_to_f32(x[e]) * inv * wf[e]);
    }
}

#ifdef BF16_VEC16
/* norm_row_bf16 for d a multiple of 16, 16 lanes at a time with the hardware conversion:
 * the squares summed in one vector accumulator, then across its lanes (another order than
 * the portable loop's: float32 reassociation only). */
static inline void norm_row_bf16_v16(const uint16_t *x, const uint16_t *r, uint16_t *res_out,
                                     uint16_t *out, const float *restrict wf, int d, float eps,
                                     int mode) {
    __m512 acc = _mm512_setzero_ps();
    if (r != NULL) {
        for (int e = 0; e < d; e += 16) {
            __m512 v = v16_round_bf16(_mm512_add_ps(v16_load_bf16(x + e), v16_load_bf16(r + e)));
            _mm256_storeu_si256((__m256i *)(res_out + e), v16_to_bf16(v));
            acc = _mm512_add_ps(acc, _mm512_mul_ps(v, v));
        }
        x = res_out;
    } else {
        for (int e = 0; e < d; e += 16) {
            __m512 v = v16_load_bf16(x + e);
            acc = _mm512_add_ps(acc, _mm512_mul_ps(v, v));
        }
    }
    float inv = 1.0f / sqrtf(_mm512_reduce_add_ps(acc) / (float)d + eps);
    __m512 vinv = _mm512_set1_ps(inv);
    for (int e = 0; e < d; e += 16) {
        __m512 y = _mm512_mul_ps(v16_load_bf16(x + e), vinv);
        if (mode == 0) y = v16_round_bf16(y);
        v16_store_bf16(out + e, _mm512_mul_ps(y, _mm512_loadu_ps(wf + e)));
    }
}
#endif

/* One bfloat16 row of RMSNorm: the vector path where there is one and d fits it. */
static inline void norm_row_bf16_any(const uint16_t *x, const uint16_t *r, uint16_t *res_out,
                                     uint16_t *out, const float *restrict wf, int d, float eps,
                                     int mode) {
#ifdef BF16_VEC16
    if (d % 16 == 0) {
        if (d == 64)
            norm_row_bf16_v16(x, r, res_out, out, wf, 64, eps, mode);
        else
            norm_row_bf16_v16(x, r, res_out, out, wf, d, eps, mode);
        return;
    }
#endif
    /* head_dim rows (q/k norms): a constant trip count, no loop peeling */
    if (d == 64)
        norm_row_bf16(x, r, res_out, out, wf, 64, eps, mode);
    else if (d == 128)
        norm_row_bf16(x, r, res_out, out, wf, 128, eps, mode);
    else
        norm_row_bf16(x, r, res_out, out, wf, d, eps, mode);
}

/* RMSNorm over rows of d: x [n0, n1, d] (strides xs0, xs1), optional residual r (same
 * shape, strides rs0, rs1; NULL: none) -> out [n0 * n1, d] contiguous and, with r, the new
 * residual res_out [n0 * n1, d] = x + r (rounded to the dtype, then normed, as torch does).
 *
 * mode 0 (Llama / HF LlamaRMSNorm): bf16 rounds the normed row, then w * it rounds again;
 * float32 computes x * rsqrt(mean(x^2) + eps) * w. mode 1 (Gemma): (x * rsqrt(...)) *
 * (offset + w) in float32, rounded once. */
int rms_norm(const void *x, int64_t xs0, int64_t xs1, const void *r, int64_t rs0, int64_t rs1,
             void *res_out, void *out, const void *w, int bf16, int64_t n0, int64_t n1, int d,
             float eps, int mode, float offset, int num_threads) {
    if (d <= 0 || d > ROW_MAX) return -1;
    float wf[ROW_MAX];
    load_row(wf, w, bf16, 0, d);
    if (mode == 1)
        for (int e = 0; e < d; e++) wf[e] += offset;
    FOR_ROW_RANGES(n0 * n1, n0 * n1 * d, num_threads, {
        int64_t a = lo / n1, b = lo % n1;
        for (int64_t i = lo; i < hi; i++) {
            int64_t xo = a * xs0 + b * xs1, ro = a * rs0 + b * rs1, oo = i * d;
            if (++b == n1) b = 0, a++;
            if (bf16) {
                const uint16_t *rr = r != NULL ? (const uint16_t *)r + ro : NULL;
                const uint16_t *xx = (const uint16_t *)x + xo;
                uint16_t *ro16 = (uint16_t *)res_out + oo, *o16 = (uint16_t *)out + oo;
                norm_row_bf16_any(xx, rr, ro16, o16, wf, d, eps, mode);
            } else {
                const float *rr = r != NULL ? (const float *)r + ro : NULL;
                const float *xx = (const float *)x + xo;
                float *ro32 = (float *)res_out + oo, *o32 = (float *)out + oo;
                norm_row_f32_any(xx, rr, ro32, o32, wf, d, eps);
            }
        }
    });
    return 0;
}

/* One head of NeoX rotary, float32: [x1 | x2] -> [x1 cos - x2 sin | x2 cos + x1 sin]. */
static inline void rotate_half(const float *restrict x, float *restrict o,
                               const float *restrict cosv, const float *restrict sinv,
                               int half) {
#pragma omp simd
    for (int e = 0; e < half; e++) {
        float x1 = x[e], x2 = x[e + half];
        o[e] = x1 * cosv[e] + x2 * -sinv[e];
        o[e + half] = x2 * cosv[e] + x1 * sinv[e];
    }
}

#ifdef BF16_VEC16
/* rotate_half on a bfloat16 head (half a multiple of 16) into a bfloat16 row: the same
 * float32 products and sums as rotate_half (x2 * -sin added = x2 * sin subtracted). */
static inline void rotate_half_bf16_v16(const uint16_t *x, uint16_t *o, const float *cosv,
                                        const float *sinv, int half) {
    for (int e = 0; e < half; e += 16) {
        __m512 x1 = v16_load_bf16(x + e), x2 = v16_load_bf16(x + half + e);
        __m512 c = _mm512_loadu_ps(cosv + e), sn = _mm512_loadu_ps(sinv + e);
        v16_store_bf16(o + e, _mm512_sub_ps(_mm512_mul_ps(x1, c), _mm512_mul_ps(x2, sn)));
        v16_store_bf16(o + half + e, _mm512_add_ps(_mm512_mul_ps(x2, c), _mm512_mul_ps(x1, sn)));
    }
}
#endif

#ifdef __AVX512F__
/* rotate_half 16 lanes at a time (half a multiple of 16): the same products and sums. */
static inline void rotate_half_v16(const float *x, float *o, const float *cosv,
                                   const float *sinv, int half) {
    for (int e = 0; e < half; e += 16) {
        __m512 x1 = _mm512_loadu_ps(x + e), x2 = _mm512_loadu_ps(x + half + e);
        __m512 c = _mm512_loadu_ps(cosv + e), sn = _mm512_loadu_ps(sinv + e);
        _mm512_storeu_ps(o + e, _mm512_sub_ps(_mm512_mul_ps(x1, c), _mm512_mul_ps(x2, sn)));
        _mm512_storeu_ps(o + half + e, _mm512_add_ps(_mm512_mul_ps(x2, c), _mm512_mul_ps(x1, sn)));
    }
}
#endif

/* One head's rotation, row `src` (dtype per bf16) -> row `dst` of out. */
static inline void rotate_head(const void *src, void *dst, const float *cosv, const float *sinv,
                               int bf16, int d) {
    int half = d / 2;
#ifdef __AVX512F__
    if (!bf16 && half % 16 == 0) {
        rotate_half_v16((const float *)src, (float *)dst, cosv, sinv, half);
        return;
    }
#endif
#ifdef BF16_VEC16
    if (bf16 && half % 16 == 0) {
        rotate_half_bf16_v16((const uint16_t *)src, (uint16_t *)dst, cosv, sinv, half);
        return;
    }
#endif
    float buf[ROW_MAX], o[ROW_MAX];
    load_row(buf, src, bf16, 0, d);
    rotate_half(buf, o, cosv, sinv, half);
    store_row(dst, bf16, 0, o, d);
}

/* Rotary rows [lo, hi) of rotary_neox. */
static void rotary_rows(const int64_t *pos, const float *cos_sin, int64_t cs, const void *q,
                        int64_t qs0, int64_t qs1, int hq, const void *k, int64_t ks0,
                        int64_t ks1, int hk, void *out, int bf16, int d, int64_t lo,
                        int64_t hi) {
    int half = d / 2, heads = hq + hk;
    size_t es = bf16 ? 2 : 4;
    for (int64_t i = lo; i < hi; i++) {
        const float *cosv = cos_sin + pos[i] * cs, *sinv = cosv + half;
        for (int h = 0; h < heads; h++) {
            int64_t off = h < hq ? i * qs0 + h * qs1 : i * ks0 + (h - hq) * ks1;
            const char *src = (const char *)(h < hq ? q : k) + off * (int64_t)es;
            char *dst = (char *)out + (i * heads + h) * (int64_t)d * (int64_t)es;
            rotate_head(src, dst, cosv, sinv, bf16, d);
        }
    }
}

/* NeoX (rotate-half) rotary: q [t, hq, d] (strides qs0, qs1), k [t, hk, d] (ks0, ks1),
 * cos_sin [P, d] float32 (cos | sin halves, row stride cs) looked up at pos [t] ->
 * out [t, hq + hk, d] contiguous: [x1 | x2] -> [x1 cos - x2 sin | x2 cos + x1 sin].
 * Returns -1 (nothing defined written) if a position is outside [0, P). */
int rotary_neox(const int64_t *pos, const float *cos_sin, int64_t cs, int64_t num_pos,
                const void *q, int64_t qs0, int64_t qs1, int hq, const void *k, int64_t ks0,
                int64_t ks1, int hk, void *out, int bf16, int64_t t, int d, int num_threads) {
    if (d <= 0 || d % 2 != 0 || d > ROW_MAX) return -1;
    for (int64_t i = 0; i < t; i++)
        if (pos[i] < 0 || pos[i] >= num_pos) return -1;
    FOR_ROW_RANGES(t, t * (hq + hk) * d, num_threads,
                   rotary_rows(pos, cos_sin, cs, q, qs0, qs1, hq, k, ks0, ks1, hk, out, bf16,
                               d, lo, hi));
    return 0;
}

/* Qwen3's attention prologue for rows [lo, hi): each head of q and k RMSNormed over d
 * (weights wqf / wkf, float32) as rms_norm rounds it, then rotated as rotary_neox. */
static void qk_norm_rope_rows(const int64_t *pos, const float *cos_sin, int64_t cs,
                              const void *q, int64_t qs0, int64_t qs1, int hq, const void *k,
                              int64_t ks0, int64_t ks1, int hk, const float *wqf,
                              const float *wkf, float eps, void *out, int bf16, int d,
                              int64_t lo, int64_t hi) {
    int heads = hq + hk;
    size_t es = bf16 ? 2 : 4;
    float nf[ROW_MAX]; /* one head after the norm: float32, or bfloat16 in nh */
    uint16_t nh[ROW_MAX];
    for (int64_t i = lo; i < hi; i++) {
        const float *cosv = cos_sin + pos[i] * cs, *sinv = cosv + d / 2;
        for (int h = 0; h < heads; h++) {
            int64_t off = h < hq ? i * qs0 + h * qs1 : i * ks0 + (h - hq) * ks1;
            const char *src = (const char *)(h < hq ? q : k) + off * (int64_t)es;
            const float *wf = h < hq ? wqf : wkf;
            if (bf16) {
                norm_row_bf16_any((const uint16_t *)src, NULL, NULL, nh, wf, d, eps, 0);
            } else {
                norm_row_f32_any((const float *)src, NULL, NULL, nf, wf, d, eps);
            }
            char *dst = (char *)out + (i * heads + h) * (int64_t)d * (int64_t)es;
            rotate_head(bf16 ? (const void *)nh : (const void *)nf, dst, cosv, sinv, bf16, d);
        }
    }
}

/* rms_norm per head of q [t, hq, d] (weight wq [d]) and k [t, hk, d] (wk), then
 * rotary_neox of both: out [t, hq + hk, d] contiguous, what rms_norm (mode 0) then
 * rotary_neox write (bfloat16: bit for bit; float32: up to the order the compiler sums a
 * head's squares in), in one pass over the heads while they are in L1.
 * Returns -1 (nothing defined written) if a position is outside [0, num_pos). */
int qk_norm_rope(const int64_t *pos, const float *cos_sin, int64_t cs, int64_t num_pos,
                 const void *q, int64_t qs0, int64_t qs1, int hq, const void *k, int64_t ks0,
                 int64_t ks1, int hk, const void *wq, const void *wk, float eps, void *out,
                 int bf16, int64_t t, int d, int num_threads) {
    if (d <= 0 || d % 2 != 0 || d > ROW_MAX) return -1;
    for (int64_t i = 0; i < t; i++)
        if (pos[i] < 0 || pos[i] >= num_pos) return -1;
    float wqf[ROW_MAX], wkf[ROW_MAX];
    load_row(wqf, wq, bf16, 0, d);
    load_row(wkf, wk, bf16, 0, d);
    FOR_ROW_RANGES(t, t * (hq + hk) * d, num_threads,
                   qk_norm_rope_rows(pos, cos_sin, cs, q, qs0, qs1, hq, k, ks0, ks1, hk, wqf,
                                     wkf, eps, out, bf16, d, lo, hi));
    return 0;
}

static inline float silu_f32(float g) { return g / (1.0f + exp_f32(-g)); }

#ifdef __AVX512F__
#define SILU_V16 1
/* exp_f32 on 16 lanes: the same operations (clamp, round by 1.5 * 2^23, Cody-Waite,
 * polynomial, 2^n by the exponent bits, overflow and underflow selects), the same values. */
static inline __m512 exp_f32_v16(__m512 x_in) {
    __m512 x = _mm512_min_ps(_mm512_max_ps(x_in, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.7f));
    const __m512 magic = _mm512_set1_ps(12582912.0f);
    __m512 n = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(EXP_LOG2E)),
                                           magic), magic);
#ifdef __FMA__
#define V16_MADD(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#else
#define V16_MADD(a, b, c) _mm512_add_ps(_mm512_mul_ps((a), (b)), (c))
#endif
    __m512 r = V16_MADD(n, _mm512_set1_ps(-EXP_LN2_HI), x);
    r = V16_MADD(n, _mm512_set1_ps(-EXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(EXP_P0);
    p = V16_MADD(p, r, _mm512_set1_ps(EXP_P1));
    p = V16_MADD(p, r, _mm512_set1_ps(EXP_P2));
    p = V16_MADD(p, r, _mm512_set1_ps(EXP_P3));
    p = V16_MADD(p, r, _mm512_set1_ps(EXP_P4));
    p = V16_MADD(p, r, _mm512_set1_ps(EXP_P5));
    p = _mm512_add_ps(V16_MADD(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
#undef V16_MADD
    __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n),
                                                      _mm512_set1_epi32(127)), 23);
    p = _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
    __mmask16 over = _mm512_cmp_ps_mask(x_in, _mm512_set1_ps(88.72283f), _CMP_GT_OQ);
    __mmask16 under = _mm512_cmp_ps_mask(x_in, _mm512_set1_ps(-87.33654f), _CMP_LT_OQ);
    p = _mm512_mask_mov_ps(p, over, _mm512_set1_ps(INFINITY));
    return _mm512_mask_mov_ps(p, under, _mm512_setzero_ps());
}

/* silu(g) = g / (1 + exp(-g)), the division as a reciprocal estimate refined by one
 * Newton step (within ~2 ulp of the quotient; vdivps set the pace of the loop). exp(-g)
 * overflowing (g < -88.7) gives 0 * g = -0, as the division does. */
static inline __m512 silu_v16(__m512 g) {
    __m512 den = _mm512_add_ps(_mm512_set1_ps(1.0f), exp_f32_v16(_mm512_sub_ps(_mm512_setzero_ps(), g)));
    __m512 r = _mm512_rcp14_ps(den);
    r = _mm512_fmadd_ps(r, _mm512_fnmadd_ps(den, r, _mm512_set1_ps(1.0f)), r);
    __mmask16 inf = _mm512_cmp_ps_mask(den, _mm512_set1_ps(INFINITY), _CMP_EQ_OQ);
    return _mm512_mul_ps(g, _mm512_mask_mov_ps(r, inf, _mm512_setzero_ps()));
}
#endif

/* silu(gate) * up for rows [lo, hi) of silu_and_mul. */
static void silu_rows(const void *x, int64_t xs, void *out, int bf16, int d, int64_t lo,
                      int64_t hi) {
#ifdef SILU_V16
#ifdef BF16_VEC16
    int vec_bf16 = 1;
#else
    int vec_bf16 = 0;
#endif
    if (d % 16 == 0 && (!bf16 || vec_bf16)) {
        for (int64_t i = lo; i < hi; i++) {
#ifdef BF16_VEC16
            if (bf16) {
                const uint16_t *g = (const uint16_t *)x + i * xs, *u = g + d;
                uint16_t *o = (uint16_t *)out + i * (int64_t)d;
                for (int e = 0; e < d; e += 16) {
                    __m512 s = v16_round_bf16(silu_v16(v16_load_bf16(g + e)));
                    v16_store_bf16(o + e, _mm512_mul_ps(s, v16_load_bf16(u + e)));
                }
                continue;
            }
#endif
            const float *g = (const float *)x + i * xs, *u = g + d;
            float *o = (float *)out + i * (int64_t)d;
            for (int e = 0; e < d; e += 16) {
                __m512 s = silu_v16(_mm512_loadu_ps(g + e));
                _mm512_storeu_ps(o + e, _mm512_mul_ps(s, _mm512_loadu_ps(u + e)));
            }
        }
        return;
    }
#endif
    for (int64_t i = lo; i < hi; i++) {
        if (bf16) {
            const uint16_t *g = (const uint16_t *)x + i * xs, *u = g + d;
            uint16_t *o = (uint16_t *)out + i * (int64_t)d;
#pragma omp simd
            for (int e = 0; e < d; e++)
                o[e] = f32_to_bf16(round_bf16(silu_f32(bf16_to_f32(g[e]))) * bf16_to_f32(u[e]));
        } else {
            const float *g = (const float *)x + i * xs, *u = g + d;
            float *o = (float *)out + i * (int64_t)d;
#pragma omp simd
            for (int e = 0; e < d; e++) o[e] = silu_f32(g[e]) * u[e];
        }
    }
}

/* silu(gate) * up: x [n, 2 * d] (row stride xs, gate | up) -> out [n, d] contiguous.
 * bf16 rounds silu's result before the multiply, as torch's silu then mul_ do. One fused
 * loop per row, no staging buffers. */
int silu_and_mul(const void *x, int64_t xs, void *out, int bf16, int64_t n, int d,
                 int num_threads) {
    if (d <= 0) return -1;
    FOR_ROW_RANGES(n, n * d, num_threads, silu_rows(x, xs, out, bf16, d, lo, hi));
    return 0;
}

/* The KV-cache write: key, value [t, hk, d] (row strides ks0 / vs0, head strides ks1 / vs1,
 * in elements) -> k_cache, v_cache at each token's slot s = block * bs + offset, element
 * (h, e) at block * c_block + offset * c_slot + h * c_head + e (both caches laid out
 * alike; head-major or not). Slots < 0 (padding) are skipped. esize: 4 (float32), 2
 * (bfloat16) or 1 (fp8, quantized by the caller), one dtype for all four tensors: a copy,
 * bit for bit. Returns -1, having
 * written nothing, when a slot is past the cache (nslots). */
int write_kv(const void *key, int64_t ks0, int64_t ks1, const void *value, int64_t vs0,
             int64_t vs1, void *k_cache, void *v_cache, int64_t c_block, int64_t c_slot,
             int64_t c_head, int64_t bs, int64_t nslots, const int64_t *slots, int64_t t,
             int hk, int d, int esize, int num_threads) {
    for (int64_t i = 0; i < t; i++)
        if (slots[i] >= nslots) return -1;
    size_t row = (size_t)d * (size_t)esize;
    /* a prompt's tokens over the threads (2,048 tokens of 8 heads of 128, bfloat16, into
     * a cold cache: ~1 ms on one core of a 2-core Xeon); a decode step's few on the caller */
    FOR_ROW_RANGES(t, t * hk * d, num_threads, {
        for (int64_t i = lo; i < hi; i++) {
            int64_t s = slots[i];
            if (s < 0) continue;
            int64_t base = (s / bs) * c_block + (s % bs) * c_slot;
            for (int h = 0; h < hk; h++) {
                int64_t dst = (base + h * c_head) * esize;
                memcpy((char *)k_cache + dst, (const char *)key + (i * ks0 + h * ks1) * esize,
                       row);
                memcpy((char *)v_cache + dst,
                       (const char *)value + (i * vs0 + h * vs1) * esize, row);
            }
        }
    });
    return 0;
}
