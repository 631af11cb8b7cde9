/* Portable row kernels compiled once (not per ISA tier): LayerNorm and GELU. They are
 * light next to the matmuls around them (one pass over a row of a few thousand floats),
 * so plain C serves every tier; the per-op path (volvox.kernels) and the step plans
 * (vx_plan.c) call the same functions, so both give the same bits. */
#include <math.h>

#include "vx_kernels.h"

void vx_layer_norm_row(int64_t D, const float *x, const float *weight, const float *bias, float eps, float *y) {
    double sum = 0.0;
    for (int64_t i = 0; i < D; i++) sum += x[i];
    const double mean = sum / (double)D;
    double sq = 0.0;
    for (int64_t i = 0; i < D; i++) {
        const double d = x[i] - mean;
        sq += d * d;
    }
    const double inv = 1.0 / sqrt(sq / (double)D + (double)eps);
    for (int64_t i = 0; i < D; i++) {
        const double v = (x[i] - mean) * inv * weight[i];
        y[i] = (float)(bias != NULL ? v + bias[i] : v);
    }
}

void vx_gelu_row(int64_t n, const float *x, int tanh_approx, float *y) {
    if (tanh_approx) {
        const float c = 0.7978845608028654f;  /* sqrt(2 / pi) */
        for (int64_t i = 0; i < n; i++) {
            const float v = x[i];
            y[i] = 0.5f * v * (1.0f + tanhf(c * (v + 0.044715f * v * v * v)));
        }
    } else {
        /* x Phi(x) = x erfc(-x / sqrt 2) / 2: no cancellation for x << 0 */
        for (int64_t i = 0; i < n; i++) {
            const float v = x[i];
            y[i] = 0.5f * v * erfcf(-v * 0.70710678118654752f);
        }
    }
}
