/* exp(x) for float32 as a branch-free inline function the auto-vectoriser can use.
 *
 * Shared by csrc/elementwise.c (SiLU) and csrc/sampling.c (softmax weights).
 */
#ifndef ACTORLLM_EXP_F32_H
#define ACTORLLM_EXP_F32_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* a * b + c: fused where the target has FMA (a single instruction, one rounding), else two
 * operations (fmaf would be a slow library call there). Only exp_f32 uses it. */
#ifdef __FMA__
#define MADD(a, b, c) fmaf((a), (b), (c))
#else
#define MADD(a, b, c) ((a) * (b) + (c))
#endif

/* The constants of every exp in csrc (exp_f32 below, its 16-lane copy in elementwise.c,
 * exp512.h, exp256.h): log2(e), ln 2 split in two for Cody-Waite (EXP_LN2_HI has few
 * mantissa bits, so n * EXP_LN2_HI is exact) and Cephes' degree-6 polynomial for e^r, r in
 * [-ln2 / 2, ln2 / 2], highest degree first. */
#define EXP_LOG2E 1.44269504088896341f
#define EXP_LN2_HI 0.693359375f
#define EXP_LN2_LO -2.12194440e-4f
#define EXP_P0 1.9875691500e-4f
#define EXP_P1 1.3981999507e-3f
#define EXP_P2 8.3334519073e-3f
#define EXP_P3 4.1665795894e-2f
#define EXP_P4 1.6666665459e-1f
#define EXP_P5 5.0000001201e-1f

/* exp(x) for float32: Cody-Waite reduction and Cephes' degree-6 polynomial (about 1 ulp),
 * branch-free so loops over it vectorise (fminf / floorf would not: comparisons and the
 * 1.5 * 2^23 round-to-nearest trick do). Overflow gives inf, underflow 0; NaN passes. */
static inline float exp_f32(float x_in) {
    float x = x_in < -87.3f ? -87.3f : x_in;
    x = x > 88.7f ? 88.7f : x;
    float n = (x * EXP_LOG2E + 12582912.0f) - 12582912.0f; /* round(x / ln 2) */
    float r = MADD(n, -EXP_LN2_HI, x);
    r = MADD(n, -EXP_LN2_LO, r);
    float p = EXP_P0;
    p = MADD(p, r, EXP_P1);
    p = MADD(p, r, EXP_P2);
    p = MADD(p, r, EXP_P3);
    p = MADD(p, r, EXP_P4);
    p = MADD(p, r, EXP_P5);
    p = MADD(p * r, r, r) + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    /* Overflow to inf and underflow to 0 as expf does: silu(-100) must be -0 like torch's,
     * not a tiny value whose product with up is a denormal (float32 GEMMs slow down 2x on
     * those). */
    p = x_in > 88.72283f ? INFINITY : p * scale;
    return x_in < -87.33654f ? 0.0f : p;
}

#endif
