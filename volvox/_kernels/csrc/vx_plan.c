/* volvox step plans (vx_plan.h): one OpenMP parallel region per forward pass, work
 * items claimed with atomic counters, no barriers between steps.
 *
 * Every thread walks the same step array. For step i it claims items until none are
 * left; before running its first item it waits until step i-1 is done (all of its items
 * finished: by induction every earlier step is then done too). A thread that arrives
 * late (descheduled, or still busy with its last item) finds the items taken and moves
 * on. Compiled once (not per ISA tier): the tier's tiles come in through the vx_table.
 */
#include <sched.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#else
static int omp_get_thread_num(void) { return 0; }
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define VX_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define VX_CPU_RELAX() __asm__ __volatile__("yield")
#else
#define VX_CPU_RELAX() ((void)0)
#endif

#include "vx_plan.h"

/* Weight rows per work item of a matrix-vector step (as the per-op path splits them). */
#define VX_LINEAR_CHUNK 16
/* Spins on a counter before yielding the core to whatever the OS wants to run. */
#define VX_SPINS_BEFORE_YIELD 2000

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Work items of a step. */
static int64_t step_items(const vx_step *s) {
    switch (s->kind) {
    case VX_STEP_LINEAR:
        return (s->n[1] + VX_LINEAR_CHUNK - 1) / VX_LINEAR_CHUNK;
    case VX_STEP_ATTENTION:
        return s->n[0];
    default:
        return 1;
    }
}

static void run_item(const vx_table *t, const vx_step *s, const vx_step_input *in, int64_t item) {
    switch (s->kind) {
    case VX_STEP_EMBED:
        t->dequant[s->wtype](s->n[0], (const uint8_t *)s->a + (s->flag ? in->pos : in->token) * s->n[1], s->y);
        break;
    case VX_STEP_RMS_NORM:
        t->rms_norm(s->n[0], (const float *)s->a, (const float *)s->b, s->f[0], s->y);
        break;
    case VX_STEP_QUANTIZE:
        t->quantize[s->wtype](s->n[0], (const float *)s->a, s->scratch);
        break;
    case VX_STEP_LINEAR: {
        const int64_t K = s->n[0], N = s->n[1], row_bytes = s->n[2];
        const int64_t n0 = item * VX_LINEAR_CHUNK;
        const int64_t n1 = n0 + VX_LINEAR_CHUNK < N ? n0 + VX_LINEAR_CHUNK : N;
        const int64_t act_bytes = t->quantize[s->wtype] != NULL ? (int64_t)vx_act_row_bytes(s->wtype, K)
                                                                 : K * (int64_t)sizeof(float);
        t->gemm[s->wtype](K, (const uint8_t *)s->b + n0 * row_bytes, row_bytes, n1 - n0, s->a, act_bytes, 1,
                          s->y + n0, N);
        const float *bias = (const float *)s->c;
        if (bias != NULL)
            for (int64_t r = n0; r < n1; r++) s->y[r] += bias[r];
        break;
    }
    case VX_STEP_ROPE:
        t->rope(s->n[0], s->n[1], s->n[2], s->flag, in->pos, s->f[0], s->f[1], (const float *)s->a, s->y);
        break;
    case VX_STEP_KV_STORE: {
        const int64_t n_kv = s->n[1], hd = s->n[2];
        float *kc = in->k_cache[s->n[4]], *vc = in->v_cache[s->n[4]];  /* (n_kv, capacity, hd) each */
        for (int64_t h = 0; h < n_kv; h++) {
            memcpy(kc + (h * in->capacity + in->pos) * hd, (const float *)s->b + h * hd, (size_t)hd * sizeof(float));
            memcpy(vc + (h * in->capacity + in->pos) * hd, (const float *)s->c + h * hd, (size_t)hd * sizeof(float));
        }
        break;
    }
    case VX_STEP_ATTENTION: {
        vx_attn_shape shape;
        shape.seq = 1;
        shape.start = in->pos;
        shape.n_heads = s->n[0];
        shape.n_kv_heads = s->n[1];
        shape.head_dim = s->n[2];
        shape.kv_head_stride = in->capacity * s->n[2];
        shape.window = s->n[3];
        shape.scale = s->f[0];
        float *scratch = (float *)s->scratch + (int64_t)omp_get_thread_num() * s->n[5];
        t->attention(&shape, (const float *)s->a, in->k_cache[s->n[4]], in->v_cache[s->n[4]], item, scratch, s->y);
        break;
    }
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
    case VX_STEP_LAYER_NORM:
        vx_layer_norm_row(s->n[0], (const float *)s->a, (const float *)s->b, (const float *)s->c, s->f[0], s->y);
        break;
    case VX_STEP_GELU:
        vx_gelu_row(s->n[0], (const float *)s->a, s->flag, s->y);
        break;
    default:
        break;
    }
}

/* Waits until every item of the step behind `sync` is done. */
static void wait_done(vx_step_sync *sync, int64_t items) {
    int spins = 0;
    while (__atomic_load_n(&sync->done, __ATOMIC_ACQUIRE) < items) {
        if (++spins < VX_SPINS_BEFORE_YIELD) {
            VX_CPU_RELAX();
        } else {
            sched_yield();
            spins = 0;
        }
    }
}

void vx_run_steps(const vx_table *t, const vx_step *steps, int64_t n, const vx_step_input *in,
                  int nthreads, vx_step_sync *sync, double *times) {
    memset(sync, 0, (size_t)n * sizeof(vx_step_sync));
#pragma omp parallel num_threads(nthreads)
    {
        const int timer = times != NULL && omp_get_thread_num() == 0;
        double t0 = timer ? now_seconds() : 0.0;
        for (int64_t i = 0; i < n; i++) {
            const vx_step *s = &steps[i];
            const int64_t items = step_items(s);
            int ready = i == 0;
            int64_t item;
            while ((item = __atomic_fetch_add(&sync[i].claimed, 1, __ATOMIC_RELAXED)) < items) {
                if (!ready) {
                    wait_done(&sync[i - 1], step_items(&steps[i - 1]));
                    ready = 1;
                }
                run_item(t, s, in, item);
                __atomic_fetch_add(&sync[i].done, 1, __ATOMIC_RELEASE);
            }
            if (timer) {
                wait_done(&sync[i], items);
                const double t1 = now_seconds();
                times[i] = t1 - t0;
                t0 = t1;
            }
        }
    } /* the region's closing barrier: every claimed item has run */
}
