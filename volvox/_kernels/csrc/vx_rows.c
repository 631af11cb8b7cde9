/* Portable row kernels compiled once (not per ISA tier): LayerNorm and GELU. They are
 * light next to the matmuls around them (one pass over a row of a few thousand floats),
 * so plain C serves every tier; the per-op path (volvox.kernels) and the step plans
 * (vx_plan.c) call the same functions, so both give the same bits. */
#include <math.h>
#include <string.h>

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

/* e^x for x in [-87, 88] (Cephes' expf polynomial, about 1 ulp; smaller x gives e^-87), with
 * no libm call and no branch, so the loops below vectorise. */
static inline float exp_poly(float x) {
    x = x > -87.0f ? x : -87.0f;
    const float t = x * 1.44269504088896341f + 0.5f;
    int32_t n = (int32_t)t;
    n -= (float)n > t; /* floor */
    const float fn = (float)n;
    const float r = (x - fn * 0.693359375f) - fn * -2.12194440e-4f; /* x - n ln 2 */
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    const int32_t bits = (n + 127) << 23; /* 2^n */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

void vx_gelu_row(int64_t n, const float *x, int tanh_approx, float *y) {
    if (tanh_approx) {
        /* 0.5 v (1 + tanh(u)) = v / (1 + e) for u >= 0, v e / (1 + e) for u < 0, e = exp(-2|u|):
         * no cancellation for u << 0 */
        const float c = 0.7978845608028654f; /* sqrt(2 / pi) */
        for (int64_t i = 0; i < n; i++) {
            const float v = x[i];
            const float u = c * (v + 0.044715f * v * v * v);
            const float e = exp_poly(-2.0f * fabsf(u));
            y[i] = v * (u < 0.0f ? e : 1.0f) / (1.0f + e);
        }
    } else {
        /* x Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2 with erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z/2),
         * z >= 0 (Numerical Recipes' Chebyshev fit, relative error < 1.2e-7 for every z) */
        for (int64_t i = 0; i < n; i++) {
            const float v = x[i];
            const float z = fabsf(v) * 0.70710678118654752f;
            const float t = 1.0f / (1.0f + 0.5f * z);
            float p = 0.17087277f;
            p = p * t - 0.82215223f;
            p = p * t + 1.48851587f;
            p = p * t - 1.13520398f;
            p = p * t + 0.27886807f;
            p = p * t - 0.18628806f;
            p = p * t + 0.09678418f;
            p = p * t + 0.37409196f;
            p = p * t + 1.00002368f;
            p = p * t - 1.26551223f;
            const float half_erfc = 0.5f * t * exp_poly(p - z * z);
            y[i] = v * (v < 0.0f ? half_erfc : 1.0f - half_erfc);
        }
    }
}
