/* volvox step plans: a compiled graph's one-token forward pass as a flat array of
 * kernel calls that C runs in one go ("Python plans, native runs").
 *
 * Python (volvox/runtime/native_plan.py) lowers each graph node to one or two vx_steps
 * whose pointers name preallocated buffers, weights and scratch; vx_run_steps then runs
 * the whole array inside a single OpenMP parallel region (the thread team starts once
 * per forward, not once per kernel). Each step is cut into work items (chunks of 16
 * output rows, attention heads, or one item for the small steps) that threads claim
 * with an atomic counter; a thread starts on step i once every item of step i-1 is
 * done. There is no barrier: a thread the OS has descheduled delays only the items it
 * already claimed, never a whole step, so a busy machine slows a forward pass instead
 * of stalling it at every step. Each output element is computed by one thread with
 * the same tile functions the per-op path uses, so results are bit-identical to it at
 * any thread count.
 */
#ifndef VX_PLAN_H
#define VX_PLAN_H

#include "vx_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    VX_STEP_EMBED = 0,     /* y (D) = dequantized row `token` of a (V rows of n[1] bytes) */
    VX_STEP_RMS_NORM = 1,  /* y (D) = rms_norm(a (D), weight b, eps f[0]) */
    VX_STEP_QUANTIZE = 2,  /* scratch = the act row of a (K) for weights of type wtype */
    VX_STEP_LINEAR = 3,    /* y (N) = x (K) @ W.T (+ bias c); W = b, N rows of n[2] bytes */
    VX_STEP_ROPE = 4,      /* y = a rotated for position `pos` */
    VX_STEP_KV_STORE = 5,  /* the k, v rows into the layer's cache at `pos` */
    VX_STEP_ATTENTION = 6, /* y = attention of q over the layer's cache, positions 0..pos */
    VX_STEP_SWIGLU = 7,    /* y (F) = silu(a[:F]) * a[F:] (gated) or silu(a) */
    VX_STEP_BINARY = 8,    /* y (n) = a + b (flag 0) or a * b (flag 1) */
    VX_STEP_LAYER_NORM = 9, /* y (D) = layer_norm(a (D), weight b, bias c or NULL, eps f[0]) */
    VX_STEP_GELU = 10,     /* y (n) = gelu(a), exact (flag 0) or tanh (flag 1) */
    VX_STEP_NKINDS = 11
};

/* One kernel call. Field use per kind:
 *   EMBED      a table, n[0] D, n[1] row bytes, n[2] V, wtype; row `token`, or `pos` when flag
 *   RMS_NORM   a x, b weight, n[0] D, f[0] eps
 *   QUANTIZE   a x, n[0] K, wtype, scratch: the act row (vx_act_row_bytes(wtype, K) bytes)
 *   LINEAR     a: the act row a QUANTIZE step wrote (quantized wtype) or the float x (f32 /
 *              f16), b weight rows, c bias or NULL, n[0] K, n[1] N, n[2] row bytes, wtype
 *   ROPE       a x, n[0] n_heads, n[1] head_dim, n[2] rope_dim, flag interleaved,
 *              f[0] base, f[1] freq_scale
 *   KV_STORE   b k row, c v row, n[1] n_kv_heads, n[2] head_dim, n[4] layer
 *   ATTENTION  a q, n[0] n_heads, n[1] n_kv_heads, n[2] head_dim, n[3] window, n[4] layer,
 *              n[5] scratch floats per thread, f[0] scale, scratch: (threads, n[5]) floats
 *   SWIGLU     a x, n[0] F, flag gated
 *   BINARY     a, b, n[0] count, flag 0 add / 1 multiply
 *   LAYER_NORM a x, b weight, c bias or NULL, n[0] D, f[0] eps
 *   GELU       a x, n[0] count, flag tanh approximation
 */
typedef struct {
    int32_t kind;
    int32_t wtype;
    int32_t flag;
    int32_t pad_;
    int64_t n[6];
    float f[2];
    const void *a, *b, *c;
    float *y;
    void *scratch;
} vx_step;

/* What changes from one forward to the next: the token, its position and the KV cache. */
typedef struct {
    int64_t token, pos;
    int64_t capacity;         /* positions each cache array holds */
    float *const *k_cache;    /* per layer: (n_kv_heads, capacity, head_dim) */
    float *const *v_cache;
} vx_step_input;

/* Per-step work counters, one cache line each (the runner zeroes them). */
typedef struct {
    int64_t claimed, done;
    char pad_[48];
} vx_step_sync;

/* Runs steps[0..n) on `nthreads` threads; sync: n counters. times: NULL, or n doubles
 * that receive each step's wall seconds (thread 0 then waits for each step to finish). */
void vx_run_steps(const vx_table *t, const vx_step *steps, int64_t n, const vx_step_input *in,
                  int nthreads, vx_step_sync *sync, double *times);

#ifdef __cplusplus
}
#endif
#endif /* VX_PLAN_H */
