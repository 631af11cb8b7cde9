/* volvox step plans (vx_plan.h): one OpenMP parallel region per forward pass, work
 * items claimed from per-thread ranges, no barriers between steps.
 *
 * Every thread walks the same step array. For step i it claims items until none are
 * left: first its own contiguous share of the step's items (the same image rows as its
 * share of the step before, still in its core's cache), then the last items of other
 * threads' shares. Before running its first item it waits until step i-1 is done (all of
 * its items finished: by induction every earlier step is then done too). A thread that
 * arrives late (descheduled, or still busy with its last item) finds its share taken by
 * the others and moves on. Compiled once (not per ISA tier): the tier's tiles come in
 * through the vx_table.
 */
#include <math.h>
#include <stdint.h>
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

/* Rows per work item of a COPY_ROWS step: about VX_COPY_BYTES of destination. */
static int64_t copy_rows_per_item(const vx_step *s) {
    return s->n[3] >= VX_COPY_BYTES ? 1 : VX_COPY_BYTES / (s->n[3] > 0 ? s->n[3] : 1);
}

/* Output rows per work item of a GATHER step: about VX_COPY_BYTES of them. */
static int64_t gather_rows_per_item(const vx_step *s) {
    const int64_t *d = (const int64_t *)s->b, last = d[d[0]] * (int64_t)sizeof(float);
    return last >= VX_COPY_BYTES ? 1 : VX_COPY_BYTES / (last > 0 ? last : 1);
}

/* Output-channel parts per pixel block (or row band) of a conv step run by a team of `team`
 * threads (one on a one-thread team: nothing to balance), and part `part`'s channels [*c0, *c1)
 * of cout: whole 32-channel panels (VX_SG_NR = VX_QG_NR), the last part the rest. */
static int64_t conv_parts(const vx_window *w, int team) { return w->cparts > 1 && team > 1 ? w->cparts : 1; }

static void conv_part(const vx_window *w, int team, int64_t cout, int64_t part, int64_t *c0, int64_t *c1) {
    const int64_t parts = conv_parts(w, team), panels = (cout + 31) / 32, per = (panels + parts - 1) / parts;
    *c0 = part * per * 32 < cout ? part * per * 32 : cout;
    *c1 = (part + 1) * per * 32 < cout ? (part + 1) * per * 32 : cout;
}

/* Output pixels per block of a CONV_F32 / QCONV step. */
static int64_t conv_pixels(const vx_window *w) { return w->pixels > 0 && w->pixels < VX_CONV_PIXELS ? w->pixels : VX_CONV_PIXELS; }

/* rq for its channels c0 .. (a part of a conv step's output channels). */
static vx_requant rq_from(const vx_requant *rq, int64_t c0) {
    vx_requant r = *rq;
    r.bias = r.bias ? r.bias + c0 : NULL;
    r.mult += c0;
    r.shift += c0;
    return r;
}

/* Work items of a step run by a team of `team` threads. */
static int64_t step_items(const vx_step *s, int team) {
    switch (s->kind) {
    case VX_STEP_LINEAR:
        return (s->n[1] + VX_LINEAR_CHUNK - 1) / VX_LINEAR_CHUNK;
    case VX_STEP_ATTENTION:
        return s->n[0];
    case VX_STEP_CONV_F32:
    case VX_STEP_QCONV:
        return (s->p->s.n * s->p->s.oh * s->p->s.ow + conv_pixels(s->p) - 1) / conv_pixels(s->p) * conv_parts(s->p, team);
    case VX_STEP_EXDWPW_F32:  /* bands of ldc rows of an image */
        return s->p->s.n * ((s->p->s.oh + s->p->ldc - 1) / s->p->ldc);
    case VX_STEP_QDWPW:  /* bands of ldc rows, each in cparts */
        return (s->p->s.n * s->p->s.oh + s->p->ldc - 1) / s->p->ldc * conv_parts(s->p, team);
    case VX_STEP_DWPW_F32:
        return s->p->s.n * s->p->s.oh * conv_parts(s->p, team);
    case VX_STEP_DWCONV_F32:
    case VX_STEP_QDWCONV:
    case VX_STEP_QAVG_POOL:
    case VX_STEP_MAX_POOL:
        return s->p->s.n * s->p->s.oh;
    case VX_STEP_COPY_ROWS:
        return (s->n[0] + copy_rows_per_item(s) - 1) / copy_rows_per_item(s);
    case VX_STEP_GATHER:
        return (s->n[0] + gather_rows_per_item(s) - 1) / gather_rows_per_item(s);
    case VX_STEP_AVG_POOL:
        return s->p->s.n * s->p->s.oh;
    case VX_STEP_GLOBAL_AVG:
        return s->n[0] * ((s->n[2] + VX_GLOBAL_AVG_CHANNELS - 1) / VX_GLOBAL_AVG_CHANNELS);
    case VX_STEP_BINARY:
    case VX_STEP_RELU:
    case VX_STEP_UNARY:
    case VX_STEP_QUANTIZE_I8:
    case VX_STEP_DEQUANTIZE_I8:
        return s->n[0] > 0 ? (s->n[0] + VX_ELEM_CHUNK - 1) / VX_ELEM_CHUNK : 1;
    default:
        return 1;
    }
}

/* ------------------------------------------------------------------------------------
 * Small int8 / pooling kernels (vx_plan.h)
 * ---------------------------------------------------------------------------------- */
/* int64(std::round(v)) as numpy computes it on x86 (ops/quantized.py's tflite_round, then
 * astype(int64)): halves away from zero, and INT64_MIN for NaN and values past int64. For
 * a = |v| + 0.5 < 2**63 the truncating cast is floor(a); no libm call, so the loop vectorises. */
static int64_t round_away_i64(float v) {
    const double a = fabs((double)v) + 0.5;
    if (!(a < 9223372036854775808.0)) return INT64_MIN;
    const int64_t r = (int64_t)a;
    return v < 0.0f ? -r : r;
}

/* clamp(q + zp) as int8, with numpy's wrapping int64 add. */
static int8_t clamp_i8(int64_t q, int32_t zp, int32_t lo, int32_t hi) {
    q = (int64_t)((uint64_t)q + (uint64_t)(int64_t)zp);
    return (int8_t)(q < lo ? lo : q > hi ? hi : q);
}

void vx_dequantize_i8(int64_t n, const int8_t *x, float scale, int32_t zp, float *y) {
    const float z = (float)zp;
    for (int64_t i = 0; i < n; i++) y[i] = scale * ((float)x[i] - z);
}

/* Valid kernel taps [i0, i1) x [j0, j1) of output pixel (oh, ow) of a window (no dilation). */
static void pool_taps(const vx_conv_shape *s, int64_t oh, int64_t ow, int64_t *i0, int64_t *i1, int64_t *j0,
                      int64_t *j1) {
    const int64_t h0 = oh * s->sh - s->pt, w0 = ow * s->sw - s->pl;
    *i0 = h0 < 0 ? -h0 : 0;
    *i1 = h0 + s->kh > s->h ? s->h - h0 : s->kh;
    *j0 = w0 < 0 ? -w0 : 0;
    *j1 = w0 + s->kw > s->w ? s->w - w0 : s->kw;
}

/* Channels per pass of vx_qavg_pool_row (its int32 sums stay in registers). */
#define QAVG_CHANNELS 64

void vx_qavg_pool_row(const vx_window *w, const int8_t *x, int64_t item, int8_t *y) {
    const vx_conv_shape *s = &w->s;
    const int64_t C = s->c, b = item / s->oh, oh = item % s->oh;
    for (int64_t ow = 0; ow < s->ow; ow++) {
        int64_t i0, i1, j0, j1;
        pool_taps(s, oh, ow, &i0, &i1, &j0, &j1);
        const int64_t count = (i1 - i0) * (j1 - j0), half = count / 2;
        const int8_t *xp = x + ((b * s->h + oh * s->sh - s->pt) * s->w + ow * s->sw - s->pl) * C; /* tap (0, 0) */
        int8_t *yo = y + (item * s->ow + ow) * C;                                                 /* (C,) */
        if (count == 0 || count >= (1 << 16)) {  /* no taps, or sums past float's exact division */
            for (int64_t c = 0; c < C; c++) {
                int64_t acc = 0;
                for (int64_t i = i0; i < i1; i++)
                    for (int64_t j = j0; j < j1; j++) acc += xp[(i * s->w + j) * C + c];
                int64_t q = count == 0 ? 0 : acc > 0 ? (acc + half) / count : -((-acc + half) / count);
                yo[c] = (int8_t)(q < w->rq.lo ? w->rq.lo : q > w->rq.hi ? w->rq.hi : q);
            }
            continue;
        }
        /* |sum| + half < 2^24 and count < 2^16: float32 division then truncation is the integer
         * quotient (a non-integer n / count is at least 1 / count below the next integer, more
         * than half an ulp of a quotient under 2^8), so the loops vectorise */
        const float fcount = (float)count;
        for (int64_t c0 = 0; c0 < C; c0 += QAVG_CHANNELS) {
            const int64_t n = C - c0 < QAVG_CHANNELS ? C - c0 : QAVG_CHANNELS;
            int32_t acc[QAVG_CHANNELS] = {0};                                                  /* (n,) */
            for (int64_t i = i0; i < i1; i++)
                for (int64_t j = j0; j < j1; j++) {
                    const int8_t *xr = xp + (i * s->w + j) * C + c0;
                    for (int64_t c = 0; c < n; c++) acc[c] += xr[c];
                }
            for (int64_t c = 0; c < n; c++) {
                const int32_t a = acc[c] < 0 ? -acc[c] : acc[c];
                const int32_t m = (int32_t)((float)(a + (int32_t)half) / fcount);
                const int32_t q = acc[c] < 0 ? -m : m;
                yo[c0 + c] = (int8_t)(q < w->rq.lo ? w->rq.lo : q > w->rq.hi ? w->rq.hi : q);
            }
        }
    }
}

void vx_qsoftmax_row(int64_t n, const int8_t *x, const float *table, float out_scale, int32_t zp_out,
                     int8_t *y) {
    int32_t mx = -128;
    for (int64_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) sum += table[mx - x[i]];
    const float inv = 1.0f / (sum * out_scale);
    for (int64_t i = 0; i < n; i++) y[i] = clamp_i8(round_away_i64(table[mx - x[i]] * inv), zp_out, -128, 127);
}

/* numpy's maximum(a, b): a when a >= b or a is NaN, else b. */
static float np_maximum(float a, float b) { return (a >= b || a != a) ? a : b; }

void vx_max_pool_row(const vx_window *w, const float *x, int64_t item, float *y) {
    const vx_conv_shape *s = &w->s;
    const int64_t C = s->c, b = item / s->oh, oh = item % s->oh;
    for (int64_t ow = 0; ow < s->ow; ow++) {
        int64_t i0, i1, j0, j1;
        pool_taps(s, oh, ow, &i0, &i1, &j0, &j1);
        const float *xp = x + ((b * s->h + oh * s->sh - s->pt) * s->w + ow * s->sw - s->pl) * C; /* tap (0, 0) */
        float *yo = y + (item * s->ow + ow) * C;                                                 /* (C,) */
        for (int64_t c = 0; c < C; c++) yo[c] = -INFINITY;
        for (int64_t i = i0; i < i1; i++)
            for (int64_t j = j0; j < j1; j++) {
                const float *xr = xp + (i * s->w + j) * C;
                for (int64_t c = 0; c < C; c++) yo[c] = np_maximum(yo[c], xr[c]);
            }
    }
}

/* numpy's clip of a float: NaN stays NaN, else min(max(v, lo), hi) with max(a, b) = a > b ? a : b. */
static float np_clip(float v, float lo, float hi) {
    if (v != v) return v;
    v = v > lo ? v : lo;
    return v < hi ? v : hi;
}

/* An UNARY step's function over n floats (vx_plan.h: VX_UNARY_*). */
static void unary_f32(int kind, int64_t n, const float *x, float alpha, float beta, float *y) {
    switch (kind) {
    case VX_UNARY_HARD_SWISH:
        for (int64_t i = 0; i < n; i++) {
            const float t = np_clip(x[i] + 3.0f, 0.0f, 6.0f);
            y[i] = (x[i] * t) / 6.0f;
        }
        break;
    case VX_UNARY_HARD_SIGMOID:
        for (int64_t i = 0; i < n; i++) {
            const float t = alpha * x[i];  /* rounded before the sum (this file is built without FMA) */
            y[i] = np_clip(t + beta, 0.0f, 1.0f);
        }
        break;
    case VX_UNARY_SQRT:
        for (int64_t i = 0; i < n; i++) y[i] = sqrtf(x[i]);
        break;
    case VX_UNARY_SQUARE:
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * x[i];
        break;
    default:
        break;
    }
}

static inline float binary_op(int op, float a, float b) {
    return op == VX_BIN_ADD ? a + b : op == VX_BIN_MUL ? a * b : op == VX_BIN_SUB ? a - b : a / b;
}

/* y[i] = a[i] op b[(i / div) % nb] for i in [i0, i1) (nb 0: b[i]). */
static void binary_f32(int op, int64_t i0, int64_t i1, const float *a, const float *b, int64_t nb, int64_t div,
                       float *y) {
    if (nb == 0) {
        switch (op) {
        case VX_BIN_ADD: for (int64_t i = i0; i < i1; i++) y[i] = a[i] + b[i]; break;
        case VX_BIN_MUL: for (int64_t i = i0; i < i1; i++) y[i] = a[i] * b[i]; break;
        case VX_BIN_SUB: for (int64_t i = i0; i < i1; i++) y[i] = a[i] - b[i]; break;
        default: for (int64_t i = i0; i < i1; i++) y[i] = a[i] / b[i]; break;
        }
        return;
    }
    if (nb == 1) {
        const float b0 = b[0];
        switch (op) {
        case VX_BIN_ADD: for (int64_t i = i0; i < i1; i++) y[i] = a[i] + b0; break;
        case VX_BIN_MUL: for (int64_t i = i0; i < i1; i++) y[i] = a[i] * b0; break;
        case VX_BIN_SUB: for (int64_t i = i0; i < i1; i++) y[i] = a[i] - b0; break;
        default: for (int64_t i = i0; i < i1; i++) y[i] = a[i] / b0; break;
        }
        return;
    }
    for (int64_t i = i0; i < i1;) {
        const int64_t j = (i / div) % nb;
        if (div == 1) {  /* per channel: a run of nb - j elements against b[j..] */
            const int64_t e = i + (nb - j) < i1 ? i + (nb - j) : i1;
            for (int64_t k = i; k < e; k++) y[k] = binary_op(op, a[k], b[j + k - i]);
            i = e;
        } else {         /* per row: a run of up to div elements against one b */
            const int64_t e = (i / div + 1) * div < i1 ? (i / div + 1) * div : i1;
            const float bj = b[j];
            for (int64_t k = i; k < e; k++) y[k] = binary_op(op, a[k], bj);
            i = e;
        }
    }
}

/* Output rows [r0, r1) of a GATHER step: d = (ndim, shape[ndim], strides[ndim]) in elements. */
static void gather_rows(const int64_t *d, const float *x, int64_t r0, int64_t r1, float *y) {
    const int64_t nd = d[0], *shape = d + 1, *stride = d + 1 + nd, L = shape[nd - 1], sl = stride[nd - 1];
    for (int64_t r = r0; r < r1; r++) {
        int64_t off = 0, rem = r;
        for (int64_t k = nd - 2; k >= 0; k--) {
            off += (rem % shape[k]) * stride[k];
            rem /= shape[k];
        }
        const float *src = x + off;
        float *dst = y + r * L;
        if (sl == 1) memcpy(dst, src, (size_t)L * sizeof(float));
        else for (int64_t i = 0; i < L; i++) dst[i] = src[i * sl];
    }
}

/* f32 average pool output row `item` (ops/pool.py's fast path): y = tap (0, 0), then + each
 * other tap in row-major order (padding adds 0), then / the in-image count (or kh*kw). */
static void avg_pool_row(const vx_window *w, int include_pad, const float *x, int64_t item, float *y) {
    const vx_conv_shape *s = &w->s;
    const int64_t C = s->c, b = item / s->oh, oh = item % s->oh;
    for (int64_t ow = 0; ow < s->ow; ow++) {
        int64_t i0, i1, j0, j1;
        pool_taps(s, oh, ow, &i0, &i1, &j0, &j1);
        const float *xp = x + ((b * s->h + oh * s->sh - s->pt) * s->w + ow * s->sw - s->pl) * C; /* tap (0, 0) */
        float *yo = y + (item * s->ow + ow) * C;                                                 /* (C,) */
        for (int64_t i = 0; i < s->kh; i++)
            for (int64_t j = 0; j < s->kw; j++) {
                const int inside = i >= i0 && i < i1 && j >= j0 && j < j1;
                const float *xr = xp + (i * s->w + j) * C;
                if (i == 0 && j == 0) {
                    for (int64_t c = 0; c < C; c++) yo[c] = inside ? xr[c] : 0.0f;
                } else if (inside) {
                    for (int64_t c = 0; c < C; c++) yo[c] = yo[c] + xr[c];
                } else {
                    for (int64_t c = 0; c < C; c++) yo[c] = yo[c] + 0.0f;
                }
            }
        const float count = include_pad ? (float)(s->kh * s->kw) : (float)((i1 - i0) * (j1 - j0));
        for (int64_t c = 0; c < C; c++) yo[c] = yo[c] / count;
    }
}

void vx_global_avg(int64_t HW, int64_t C, int64_t c0, const float *x, float *y) {
    const int64_t n = C - c0 < VX_GLOBAL_AVG_CHANNELS ? C - c0 : VX_GLOBAL_AVG_CHANNELS;
    double acc[VX_GLOBAL_AVG_CHANNELS];                              /* (n,): the pixels summed in order */
    for (int64_t c = 0; c < n; c++) acc[c] = 0.0;
    for (int64_t p = 0; p < HW; p++)
        for (int64_t c = 0; c < n; c++) acc[c] += (double)x[p * C + c0 + c];
    for (int64_t c = 0; c < n; c++) y[c0 + c] = (float)(acc[c] / (double)HW);
}

static void run_item(const vx_table *t, const vx_step *s, const vx_step_input *in, int team, int64_t item) {
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
        const int64_t m = s->n[3] > 0 ? s->n[3] : 1;
        t->gemm[s->wtype](K, (const uint8_t *)s->b + n0 * row_bytes, row_bytes, n1 - n0, s->a, act_bytes, m,
                          s->y + n0, N);
        const float *bias = (const float *)s->c;
        if (bias != NULL)
            for (int64_t i = 0; i < m; i++)
                for (int64_t r = n0; r < n1; r++) s->y[i * N + r] += bias[r];
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
        const int64_t i0 = item * VX_ELEM_CHUNK, i1 = i0 + VX_ELEM_CHUNK < s->n[0] ? i0 + VX_ELEM_CHUNK : s->n[0];
        binary_f32(s->flag, i0, i1, (const float *)s->a, (const float *)s->b, s->n[1], s->n[2], s->y);
        float *y = s->y;                                             /* locals: y's stores alias *s */
        const int64_t act = s->n[3];                                 /* a fused ReLU / ReLU6 over the */
        if (act != VX_ACT_NONE)                                      /* chunk just written (in L1) */
            for (int64_t i = i0; i < i1; i++) y[i] = np_maximum(y[i], 0.0f);
        if (act == VX_ACT_RELU6)
            for (int64_t i = i0; i < i1; i++) y[i] = y[i] > 6.0f ? 6.0f : y[i];  /* NaN stays, as np.clip */
        break;
    }
    case VX_STEP_UNARY: {
        const int64_t i0 = item * VX_ELEM_CHUNK, i1 = i0 + VX_ELEM_CHUNK < s->n[0] ? i0 + VX_ELEM_CHUNK : s->n[0];
        unary_f32(s->flag, i1 - i0, (const float *)s->a + i0, s->f[0], s->f[1], s->y + i0);
        break;
    }
    case VX_STEP_GATHER: {
        const int64_t per = gather_rows_per_item(s), r0 = item * per;
        gather_rows((const int64_t *)s->b, (const float *)s->a, r0, r0 + per < s->n[0] ? r0 + per : s->n[0], s->y);
        break;
    }
    case VX_STEP_AVG_POOL:
        avg_pool_row(s->p, s->flag, (const float *)s->a, item, s->y);
        break;
    case VX_STEP_LAYER_NORM:
        vx_layer_norm_row(s->n[0], (const float *)s->a, (const float *)s->b, (const float *)s->c, s->f[0], s->y);
        break;
    case VX_STEP_GELU:
        vx_gelu_row(s->n[0], (const float *)s->a, s->flag, s->y);
        break;
    case VX_STEP_CONV_F32: {
        const vx_window *w = s->p;
        const int64_t P = w->s.n * w->s.oh * w->s.ow, pixels = conv_pixels(w), p0 = item / conv_parts(w, team) * pixels;
        const int64_t np = P - p0 < pixels ? P - p0 : pixels;
        const int64_t KK = w->s.kh * w->s.kw * w->s.c;
        int64_t c0, c1;
        conv_part(w, team, w->cout, item % conv_parts(w, team), &c0, &c1);
        const float *bias = (const float *)s->c;
        if (w->ldc != 0) {
            float *cols = (float *)s->scratch + (int64_t)omp_get_thread_num() * w->per_thread; /* (np, KK) */
            t->conv->conv_f32(&w->s, (const float *)s->a, p0, np, (const float *)s->b + c0 * KK, c1 - c0,
                              bias ? bias + c0 : NULL, w->act, cols, s->y + p0 * w->cout + c0, w->cout);
        } else {                                                     /* 1x1 direct: the input rows */
            t->conv->sgemm(KK, (const float *)s->b + c0 * KK, c1 - c0, (const float *)s->a + p0 * KK, KK, np,
                           s->y + p0 * w->cout + c0, w->cout, bias ? bias + c0 : NULL, w->act);
        }
        break;
    }
    case VX_STEP_DWCONV_F32: {
        const vx_conv_shape *g = &s->p->s;
        t->conv->dwconv_f32(g, (const float *)s->a, (const float *)s->b, (const float *)s->c, s->p->act, item,
                            s->y + item * g->ow * g->c);
        break;
    }
    case VX_STEP_DWPW_F32: {
        const vx_window *w = s->p;
        const vx_conv_shape *g = &w->s;
        const int64_t r = item / conv_parts(w, team);                /* the depthwise output row */
        int64_t c0, c1;                                              /* the 1x1 conv's channels */
        conv_part(w, team, w->pw.cout, item % conv_parts(w, team), &c0, &c1);
        float *row = (float *)s->scratch + (int64_t)omp_get_thread_num() * w->per_thread; /* (ow, C) */
        t->conv->dwconv_f32(g, (const float *)s->a, (const float *)s->b, (const float *)s->c, w->act, r, row);
        t->conv->sgemm(g->c, (const float *)w->pw.packed + c0 * g->c, c1 - c0, row, g->c, g->ow,
                       s->y + r * g->ow * w->pw.cout + c0, w->pw.cout, w->pw.bias ? w->pw.bias + c0 : NULL, w->pw.act);
        break;
    }
    case VX_STEP_EXDWPW_F32: {
        const vx_window *w = s->p;
        const vx_conv_shape *g = &w->s;                              /* the depthwise conv's, on (n, h, w, C) */
        const int64_t C = g->c, K = s->n[0], bands = (g->oh + w->ldc - 1) / w->ldc, b = item / bands;
        const int64_t r0 = item % bands * w->ldc, r1 = r0 + w->ldc < g->oh ? r0 + w->ldc : g->oh;
        const int64_t first = r0 * g->sh - g->pt, last = (r1 - 1) * g->sh - g->pt + (g->kh - 1) * g->dh;
        const int64_t lo = first > 0 ? first : 0, hi = last + 1 < g->h ? last + 1 : g->h;  /* rows read */
        float *rows = (float *)s->scratch + (int64_t)omp_get_thread_num() * w->per_thread; /* (hi - lo, w, C) */
        float *row = rows + vx_exdwpw_rows(w) * g->w * C;           /* (ow, C): a depthwise row */
        if (hi > lo)
            t->conv->sgemm(K, (const float *)w->ex.packed, C, (const float *)s->a + (b * g->h + lo) * g->w * K, K,
                           (hi - lo) * g->w, rows, C, w->ex.bias, w->ex.act);
        vx_conv_shape band = *g;                                     /* the depthwise conv on those rows */
        band.n = 1;
        band.h = hi - lo;
        band.oh = r1 - r0;
        band.pt = g->pt + lo - r0 * g->sh;
        for (int64_t r = r0; r < r1; r++) {
            t->conv->dwconv_f32(&band, rows, (const float *)s->b, (const float *)s->c, w->act, r - r0, row);
            t->conv->sgemm(C, (const float *)w->pw.packed, w->pw.cout, row, C, g->ow,
                           s->y + ((b * g->oh + r) * g->ow) * w->pw.cout, w->pw.cout, w->pw.bias, w->pw.act);
        }
        break;
    }
    case VX_STEP_QDWPW: {
        const vx_window *w = s->p;
        const vx_conv_shape *g = &w->s;
        const int64_t r0 = item / conv_parts(w, team) * w->ldc, rows = g->n * g->oh - r0 < w->ldc ? g->n * g->oh - r0 : w->ldc;
        int64_t c0, c1;                                              /* the 1x1 conv's channels */
        conv_part(w, team, w->pw.cout, item % conv_parts(w, team), &c0, &c1);
        int8_t *band = (int8_t *)s->scratch + (int64_t)omp_get_thread_num() * w->per_thread; /* (rows*ow, C) */
        t->conv->qdwconv(g, (const int8_t *)s->a, (const int16_t *)s->b, &w->rq, r0, rows, band);
        uint8_t *u = (uint8_t *)band;                                /* the GEMM's u8 rows: x + 128 */
        const int64_t nbytes = rows * g->ow * g->c;                  /* a local: u's stores alias *g */
        for (int64_t i = 0; i < nbytes; i++) u[i] ^= 0x80;
        const vx_requant rq = rq_from(&w->pw.rq, c0);
        t->conv->qgemm(g->c, (const int8_t *)w->pw.packed + c0 * g->c, w->pw.wsum ? w->pw.wsum + c0 : NULL, c1 - c0, u,
                       g->c, rows * g->ow, &rq, (int8_t *)s->y + r0 * g->ow * w->pw.cout + c0, w->pw.cout);
        break;
    }
    case VX_STEP_QCONV: {
        const vx_window *w = s->p;
        const int64_t P = w->s.n * w->s.oh * w->s.ow, pixels = conv_pixels(w), p0 = item / conv_parts(w, team) * pixels;
        const int64_t np = P - p0 < pixels ? P - p0 : pixels;
        int64_t c0, c1;
        conv_part(w, team, w->cout, item % conv_parts(w, team), &c0, &c1);
        uint8_t *cols = (uint8_t *)s->scratch + (int64_t)omp_get_thread_num() * w->per_thread; /* (np, ldc) */
        t->conv->im2col_u8(&w->s, (const int8_t *)s->a, p0, np, (uint8_t)(w->rq.zp_in + 128), cols, w->ldc);
        const vx_requant rq = rq_from(&w->rq, c0);
        const int32_t *wsum = (const int32_t *)s->c;
        t->conv->qgemm(w->ldc, (const int8_t *)s->b + c0 * w->ldc, wsum ? wsum + c0 : NULL, c1 - c0, cols, w->ldc, np,
                       &rq, (int8_t *)s->y + p0 * w->cout + c0, w->cout);
        break;
    }
    case VX_STEP_QDWCONV:
        t->conv->qdwconv(&s->p->s, (const int8_t *)s->a, (const int16_t *)s->b, &s->p->rq, item, 1,
                         (int8_t *)s->y + item * s->p->s.ow * s->p->s.c);
        break;
    case VX_STEP_QUANTIZE_I8:
    case VX_STEP_DEQUANTIZE_I8:
    case VX_STEP_RELU: {
        const int64_t i0 = item * VX_ELEM_CHUNK, i1 = i0 + VX_ELEM_CHUNK < s->n[0] ? i0 + VX_ELEM_CHUNK : s->n[0];
        if (s->kind == VX_STEP_QUANTIZE_I8)
            t->conv->quantize_i8(i1 - i0, (const float *)s->a + i0, s->f[0], (int32_t)s->n[1], (int8_t *)s->y + i0);
        else if (s->kind == VX_STEP_DEQUANTIZE_I8)
            vx_dequantize_i8(i1 - i0, (const int8_t *)s->a + i0, s->f[0], (int32_t)s->n[1], s->y + i0);
        else
            for (int64_t i = i0; i < i1; i++) s->y[i] = np_maximum(((const float *)s->a)[i], 0.0f);
        break;
    }
    case VX_STEP_QAVG_POOL:
        vx_qavg_pool_row(s->p, (const int8_t *)s->a, item, (int8_t *)s->y);
        break;
    case VX_STEP_QSOFTMAX:
        for (int64_t r = 0; r < s->n[0]; r++)
            vx_qsoftmax_row(s->n[1], (const int8_t *)s->a + r * s->n[1], (const float *)s->b, s->f[0],
                            (int32_t)s->n[2], (int8_t *)s->y + r * s->n[1]);
        break;
    case VX_STEP_MAX_POOL:
        vx_max_pool_row(s->p, (const float *)s->a, item, s->y);
        break;
    case VX_STEP_GLOBAL_AVG: {  /* item: (image, run of VX_GLOBAL_AVG_CHANNELS channels) */
        const int64_t HW = s->n[1], C = s->n[2], runs = (C + VX_GLOBAL_AVG_CHANNELS - 1) / VX_GLOBAL_AVG_CHANNELS;
        const int64_t b = item / runs;
        vx_global_avg(HW, C, item % runs * VX_GLOBAL_AVG_CHANNELS, (const float *)s->a + b * HW * C, s->y + b * C);
        break;
    }
    case VX_STEP_COPY_ROWS: {
        const uint8_t *src = (const uint8_t *)s->a;
        uint8_t *dst = (uint8_t *)s->y;
        const int64_t per = copy_rows_per_item(s), r0 = item * per;
        const int64_t r1 = r0 + per < s->n[0] ? r0 + per : s->n[0];
        const int64_t tail = s->n[3] - s->n[4] - s->n[1];  /* bytes after the copied run */
        for (int64_t r = r0; r < r1; r++) {
            uint8_t *row = dst + r * s->n[3];
            if (s->flag) {
                memset(row, 0, (size_t)s->n[4]);
                memset(row + s->n[4] + s->n[1], 0, (size_t)tail);
            }
            memcpy(row + s->n[4], src + r * s->n[2], (size_t)s->n[1]);
        }
        break;
    }
    default:
        break;
    }
}

/* Thread t's counters of step i. */
static uint64_t *counters(const vx_step_sync *sync, int t, int64_t i) { return sync->rows + t * sync->stride + 2 * i; }

/* Claims an item of a step whose counters are slot 2i of every row: thread `me` takes its own
 * range's first item, else (its range used up) the last unstarted item of another thread's
 * range. Contiguous ranges keep a thread on the same image rows step after step, in its own
 * cache; stealing from the far end keeps a late or slow owner's next items. -1: none left. */
static int64_t claim(const vx_step_sync *sync, int64_t i, int me, int team) {
    for (int k = 0; k < team; k++) {
        const int t = (me + k) % team;
        uint64_t *slot = counters(sync, t, i);
        uint64_t v = __atomic_load_n(slot, __ATOMIC_RELAXED);
        for (;;) {
            const uint64_t lo = v & 0xffffffffu, hi = v >> 32;
            if (lo >= hi) break;
            const uint64_t next = t == me ? v + 1 : ((hi - 1) << 32) | lo;
            if (__atomic_compare_exchange_n(slot, &v, next, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
                return (int64_t)(t == me ? lo : hi - 1);
        }
    }
    return -1;
}

/* Waits until `items` items of step i are finished (summed over the team's rows). */
static void wait_done(const vx_step_sync *sync, int64_t i, int team, int64_t items) {
    int spins = 0;
    for (;;) {
        int64_t done = 0;
        for (int t = 0; t < team; t++) done += (int64_t)__atomic_load_n(counters(sync, t, i) + 1, __ATOMIC_ACQUIRE);
        if (done >= items) return;
        if (++spins < VX_SPINS_BEFORE_YIELD) {
            VX_CPU_RELAX();
        } else {
            sched_yield();
            spins = 0;
        }
    }
}

void vx_run_steps(const vx_table *t, const vx_step *steps, int64_t n, const vx_step_input *in,
                  int nthreads, const vx_step_sync *sync, int64_t first, double *times) {
    const int team = nthreads < 1 ? 1 : nthreads > VX_TEAM_MAX ? VX_TEAM_MAX : nthreads;
    vx_step_sync at = *sync;                                  /* counters of steps[0] on */
    at.rows += 2 * first;
    for (int64_t i = 0; i < n; i++) {                         /* thread r's share: [r*items/team, ..) */
        const int64_t items = step_items(&steps[i], team);
        for (int r = 0; r < team; r++) {
            uint64_t *c = counters(&at, r, i);
            c[0] = (uint64_t)((r + 1) * items / team) << 32 | (uint64_t)(r * items / team);
            c[1] = 0;
        }
    }
#pragma omp parallel num_threads(team)
    {
        const int me = omp_get_thread_num() < team ? omp_get_thread_num() : 0;
        const int timer = times != NULL && omp_get_thread_num() == 0;
        double t0 = timer ? now_seconds() : 0.0;
        for (int64_t i = 0; i < n; i++) {
            const vx_step *s = &steps[i];
            int ready = i == 0;
            int64_t item;
            while ((item = claim(&at, i, me, team)) >= 0) {
                if (!ready) {
                    wait_done(&at, i - 1, team, step_items(&steps[i - 1], team));
                    ready = 1;
                }
                run_item(t, s, in, team, item);
                uint64_t *done = counters(&at, me, i) + 1;            /* only thread me writes it */
                __atomic_store_n(done, *done + 1, __ATOMIC_RELEASE);
            }
            if (timer) {
                wait_done(&at, i, team, step_items(s, team));
                const double t1 = now_seconds();
                times[i] = t1 - t0;
                t0 = t1;
            }
        }
    } /* the region's closing barrier: every claimed item has run */
}
