/* volvox step plans (vx_plan.h): one OpenMP parallel region per forward pass.
 *
 * Every thread of the team walks the same step array. Small steps (norms, RoPE,
 * SwiGLU, adds and products, the embedding row) run on one thread (`omp single`); the matmuls and
 * attention share their output rows / heads out dynamically, so a thread the OS delays
 * does not hold the others back. A barrier separates consecutive steps. Compiled once
 * (not per ISA tier): the tier's tiles come in through the vx_table.
 */
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#else
static int omp_get_thread_num(void) { return 0; }
#endif

#include "vx_plan.h"

/* Weight rows per work item of a matrix-vector step (as the per-op path splits them). */
#define VX_LINEAR_CHUNK 16

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void step_linear(const vx_table *t, const vx_step *s) {
    const int64_t K = s->n[0], N = s->n[1], row_bytes = s->n[2];
    const vx_quantize_fn quantize = t->quantize[s->wtype];
    const vx_gemm_fn gemm = t->gemm[s->wtype];
    const uint8_t *w = (const uint8_t *)s->b;
    const float *bias = (const float *)s->c;
    const void *act = s->a;
    int64_t act_bytes = K * (int64_t)sizeof(float);
    if (quantize != NULL) {
#pragma omp single
        quantize(K, (const float *)s->a, s->scratch);
        act = s->scratch;
        act_bytes = (int64_t)vx_act_row_bytes(s->wtype, K);
    }
    const int64_t chunks = (N + VX_LINEAR_CHUNK - 1) / VX_LINEAR_CHUNK;
#pragma omp for schedule(dynamic) nowait
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t n0 = c * VX_LINEAR_CHUNK;
        const int64_t n1 = n0 + VX_LINEAR_CHUNK < N ? n0 + VX_LINEAR_CHUNK : N;
        gemm(K, w + n0 * row_bytes, row_bytes, n1 - n0, act, act_bytes, 1, s->y + n0, N);
        if (bias != NULL)
            for (int64_t r = n0; r < n1; r++) s->y[r] += bias[r];
    }
}

static void step_attention(const vx_table *t, const vx_step *s, const vx_step_input *in) {
    const int64_t n_heads = s->n[0], n_kv = s->n[1], hd = s->n[2], layer = s->n[4];
    float *kc = in->k_cache[layer], *vc = in->v_cache[layer];  /* (n_kv, capacity, hd) each */
#pragma omp single
    for (int64_t h = 0; h < n_kv; h++) {
        memcpy(kc + (h * in->capacity + in->pos) * hd, (const float *)s->b + h * hd, (size_t)hd * sizeof(float));
        memcpy(vc + (h * in->capacity + in->pos) * hd, (const float *)s->c + h * hd, (size_t)hd * sizeof(float));
    }
    vx_attn_shape shape;
    shape.seq = 1;
    shape.start = in->pos;
    shape.n_heads = n_heads;
    shape.n_kv_heads = n_kv;
    shape.head_dim = hd;
    shape.kv_head_stride = in->capacity * hd;
    shape.window = s->n[3];
    shape.scale = s->f[0];
    float *scratch = (float *)s->scratch + (int64_t)omp_get_thread_num() * s->n[5];
#pragma omp for schedule(dynamic) nowait
    for (int64_t h = 0; h < n_heads; h++)
        t->attention(&shape, (const float *)s->a, kc, vc, h, scratch, s->y);
}

static void step_single(const vx_table *t, const vx_step *s, const vx_step_input *in) {
    switch (s->kind) {
    case VX_STEP_EMBED:
        t->dequant[s->wtype](s->n[0], (const uint8_t *)s->a + in->token * s->n[1], s->y);
        break;
    case VX_STEP_RMS_NORM:
        t->rms_norm(s->n[0], (const float *)s->a, (const float *)s->b, s->f[0], s->y);
        break;
    case VX_STEP_ROPE:
        t->rope(s->n[0], s->n[1], s->n[2], s->flag, in->pos, s->f[0], s->f[1], (const float *)s->a, s->y);
        break;
    case VX_STEP_SWIGLU:
        t->swiglu(s->n[0], (const float *)s->a, s->flag ? (const float *)s->a + s->n[0] : NULL, s->y);
        break;
    case VX_STEP_BINARY: {
        const float *a = (const float *)s->a, *b = (const float *)s->b;
        if (s->flag)
            for (int64_t i = 0; i < s->n[0]; i++) s->y[i] = a[i] * b[i];
        else
            for (int64_t i = 0; i < s->n[0]; i++) s->y[i] = a[i] + b[i];
        break;
    }
    default:
        break;
    }
}

void vx_run_steps(const vx_table *t, const vx_step *steps, int64_t n, const vx_step_input *in,
                  int nthreads, double *times) {
#pragma omp parallel num_threads(nthreads)
    {
        double t0 = times != NULL ? now_seconds() : 0.0;
        for (int64_t i = 0; i < n; i++) {
            const vx_step *s = &steps[i];
            if (s->kind == VX_STEP_LINEAR) {
                step_linear(t, s);
            } else if (s->kind == VX_STEP_ATTENTION) {
                step_attention(t, s, in);
            } else {
#pragma omp single nowait
                step_single(t, s, in);
            }
#pragma omp barrier
            if (times != NULL && omp_get_thread_num() == 0) {
                const double t1 = now_seconds();
                times[i] = t1 - t0;
                t0 = t1;
            }
        }
    }
}
