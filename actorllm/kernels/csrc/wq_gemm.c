/* Weight-only quantized linear for few rows (decode): the weight stays packed (4 or 8 bits
 * per value, one scale and zero point per group of input columns) and is dequantized one
 * chunk at a time inside the GEMM, so each decode step reads the packed bytes once.
 *
 *   out[m, o] = sum_i x[m, i] * (q[o, i] * scale[o, g(i)] + offset[o, g(i)])  (+ bias[o])
 *
 * (a zero point z is the offset -z * scale; GGUF's K-quants store offsets directly)
 *
 * Layout (models/quant/linear.py): packed uint8 [O, I * bits / 8] (4-bit: column 2k in the
 * low nibble of byte k, 2k + 1 in the high one), scales and offsets float32 [O, G] with
 * G = I / gs and groups contiguous; x float32 [M, I] row-major; out float32 [M, O].
 *
 * Each weight value is dequantized as q * scale + offset in float32, as the torch path; products are summed in 16 lanes per row (the auto-vectoriser turns
 * the lane loop into SIMD without reassociating anything), lanes summed at the end.
 *
 * Threads: OpenMP over output rows, only when the call has enough work to pay for waking
 * the team (the same rule as elementwise.c, for the same reason: a region of another team
 * size makes libgomp recreate torch's pool).
 */
#include <stdint.h>
#include <string.h>

#define LANES 16
#define CHUNK 256   /* dequantized values per step (within one group) */
#define MBLOCK 8    /* input rows accumulated together */
#define PAR_MIN_WORK (1 << 16)

static void one_output_row(const float *x, int64_t m_rows, int64_t in, const uint8_t *prow,
                           int bits, const float *srow, const float *brow, int64_t gs,
                           float bias, float *out, int64_t out_stride) {
    float w[CHUNK];
    for (int64_t m0 = 0; m0 < m_rows; m0 += MBLOCK) {
        int64_t mb = m_rows - m0 < MBLOCK ? m_rows - m0 : MBLOCK;
        float acc[MBLOCK][LANES];
        memset(acc, 0, sizeof(acc));
        /* A chunk never straddles two groups: it is one group (gs < CHUNK), or gs is a
         * power of two above CHUNK, or the whole row is one group. */
        int64_t step = gs < CHUNK ? gs : CHUNK;
        for (int64_t base = 0; base < in; base += step) {
            int64_t n = in - base < step ? in - base : step;
            int64_t g = base / gs;
            float s = srow[g], b = brow[g];
            if (bits == 4) {
                const uint8_t *p = prow + base / 2;
                for (int64_t k = 0; k < n / 2; k++) {
                    w[2 * k] = (float)(p[k] & 0xF) * s + b;
                    w[2 * k + 1] = (float)(p[k] >> 4) * s + b;
                }
            } else {
                const uint8_t *p = prow + base;
                for (int64_t k = 0; k < n; k++) w[k] = (float)p[k] * s + b;
            }
            for (int64_t mi = 0; mi < mb; mi++) {
                const float *xr = x + (m0 + mi) * in + base;
                float *a = acc[mi];
                for (int64_t k = 0; k < n; k += LANES)
                    for (int l = 0; l < LANES; l++) a[l] += xr[k + l] * w[k + l];
            }
        }
        for (int64_t mi = 0; mi < mb; mi++) {
            float sum = 0.0f;
            for (int l = 0; l < LANES; l++) sum += acc[mi][l];
            out[(m0 + mi) * out_stride] = sum + bias;
        }
    }
}

/* Returns 0, or -1 when the shapes are not ones this kernel takes (the caller falls back):
 * I and gs multiples of LANES, gs below CHUNK, a multiple of it, or the whole row. */
int wq_linear(const float *x, int64_t m_rows, int64_t in, const uint8_t *packed,
              int64_t out_n, int bits, const float *scales, const float *offsets, int64_t gs,
              const float *bias, float *out, int num_threads) {
    if (in % LANES || gs % LANES || (bits != 4 && bits != 8) || in % gs) return -1;
    if (gs > CHUNK && gs % CHUNK && gs != in) return -1;
    int64_t groups = in / gs, row_bytes = in * bits / 8;
    int64_t work = out_n * in;
    int nt = work >= PAR_MIN_WORK && num_threads > 1 ? num_threads : 1;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t o = 0; o < out_n; o++) {
        one_output_row(x, m_rows, in, packed + o * row_bytes, bits, scales + o * groups,
                       offsets + o * groups, gs, bias ? bias[o] : 0.0f, out + o, out_n);
    }
    return 0;
}

/* W8A8 for few rows on a host without int8 dot-product instructions (no VNNI / AMX-INT8,
 * where oneDNN's int8 GEMM is emulated): out[m, o] = sum_i xq[m, i] * w[o, i], exact in
 * int32 (integer sums may be reordered freely, so the auto-vectoriser runs the dot
 * products as SIMD multiply-adds). xq int8 [M, I], w int8 [O, I], out int32 [M, O]. */
int i8_gemm(const int8_t *xq, int64_t m_rows, int64_t in, const int8_t *w, int64_t out_n,
            int32_t *out, int num_threads) {
    int64_t work = out_n * in;
    int nt = work >= PAR_MIN_WORK && num_threads > 1 ? num_threads : 1;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t o = 0; o < out_n; o++) {
        const int8_t *wr = w + o * in;
        for (int64_t m = 0; m < m_rows; m++) {
            const int8_t *xr = xq + m * in;
            int32_t acc = 0;
            for (int64_t i = 0; i < in; i++) acc += (int32_t)xr[i] * (int32_t)wr[i];
            out[m * out_n + o] = acc;
        }
    }
    return 0;
}
