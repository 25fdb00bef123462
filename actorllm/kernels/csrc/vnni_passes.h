/* The work loop the AVX512-VNNI outputs-in-lanes kernels share (w4a8_vnni.c, w8a8_vnni.c):
 * OpenMP over units of one or two column tiles of 16 output rows, each unit taking passes
 * of up to VNNI_MR input rows, the passes over the weight in chunks whose quantized inputs
 * stay in the L2 while every unit reads them; a prefill's rows quantized by the team first.
 *
 * A kernel defines its pass (rows and tile count constants: registers, unrolled loops) and
 * VNNI_RUN_PASS(fn, pass, job_t) makes the dispatcher vnni_passes() calls. */
#pragma once
#include <stdint.h>

/* Input rows a pass: 8 rows x 2 tiles of int32 sums, 16 of the 32 vector registers. */
#define VNNI_MR 8
/* From this many input rows a pass takes two column tiles (a weight load serves more
 * products); below, one, so each thread streams one weight tile at a time. 2-core Zen 4,
 * W4A8, the 4 linears of 28 Qwen3-0.6B layers, weights cold, ms, one / two tiles a pass:
 * 1 row 9.5 / 11.2, 2 rows 11.7 / 12.5, 3 rows 14.6 / 15.6, 4 rows 14.1 / 13.9, 8 rows
 * 21.8 / 19.5. */
#define VNNI_PAIR_ROWS 4
/* Quantized input bytes a pass over the weight keeps in the L2 (prefill). */
#define VNNI_X_L2_BYTES (512 << 10)

/* fn(job, t, m0, mb, two_n): pass(job, t, m0, MB, TWO) with both as constants. */
#define VNNI_PASS_CASE(pass, R)            \
    case R:                                \
        if (two_n)                         \
            pass(j, t, m0, R, 1);          \
        else                               \
            pass(j, t, m0, R, 0);          \
        break;
#define VNNI_RUN_PASS(fn, pass, job_t)                                                      \
    static void fn(const void *arg, int64_t t, int64_t m0, int mb, int two_n) {             \
        const job_t *j = (const job_t *)arg;                                                \
        switch (mb) {                                                                       \
            VNNI_PASS_CASE(pass, 1) VNNI_PASS_CASE(pass, 2) VNNI_PASS_CASE(pass, 3)         \
            VNNI_PASS_CASE(pass, 4) VNNI_PASS_CASE(pass, 5) VNNI_PASS_CASE(pass, 6)         \
            VNNI_PASS_CASE(pass, 7) VNNI_PASS_CASE(pass, 8)                                 \
        }                                                                                   \
    }

typedef void (*vnni_pass_fn)(const void *job, int64_t t, int64_t m0, int mb, int two_n);
/* Quantize input rows [r0, r1) (the team, for a prefill). */
typedef void (*vnni_quant_fn)(const void *job, int64_t r0, int64_t r1);

/* Every pass of m input rows (in inputs each) over n output rows (a multiple of 16) on nt
 * threads; quant (NULL: the rows are quantized already) runs first, quant_rows rows a call,
 * behind the worksharing loop's barrier. */
static inline void vnni_passes(const void *job, vnni_pass_fn run, vnni_quant_fn quant,
                               int64_t quant_rows, int64_t m, int64_t n, int64_t in, int nt) {
    int width = m < VNNI_PAIR_ROWS ? 1 : 2; /* column tiles a pass */
    int64_t tiles = n / 16, units = (tiles + width - 1) / width;
    int64_t passes = (m + VNNI_MR - 1) / VNNI_MR;
    int64_t chunk = VNNI_X_L2_BYTES / (VNNI_MR * in);
    if (chunk < 1) chunk = 1;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        if (quant) { /* (the loop's barrier: every row is quantized before any is read) */
#pragma omp for schedule(static)
            for (int64_t r = 0; r < m; r += quant_rows)
                quant(job, r, r + quant_rows < m ? r + quant_rows : m);
        }
        for (int64_t c0 = 0; c0 < passes; c0 += chunk) {
            /* No barrier between chunks: they write other rows, and read only the inputs. */
#pragma omp for schedule(static) nowait
            for (int64_t p = 0; p < units; p++) {
                int64_t t = width * p;
                int two_n = width == 2 && t + 1 < tiles;
                for (int64_t pi = c0; pi < passes && pi < c0 + chunk; pi++) {
                    int64_t m0 = VNNI_MR * pi;
                    run(job, t, m0, (int)(m - m0 < VNNI_MR ? m - m0 : VNNI_MR), two_n);
                }
            }
        }
    }
}
