/* volvox step plans: a compiled graph's one-token forward pass as a flat array of
 * kernel calls that C runs in one go ("Python plans, native runs").
 *
 * Python (volvox/runtime/native_plan.py) lowers each graph node to one or two vx_steps
 * whose pointers name preallocated buffers, weights and scratch; vx_run_steps then runs
 * the whole array inside a single OpenMP parallel region (the thread team starts once
 * per forward, not once per kernel). volvox/runtime/vision_plan.py lowers whole image
 * models the same way (the vision steps below). Each step is cut into work items (chunks
 * of 16 output rows, attention heads, blocks of 64 output pixels, output image rows,
 * chunks of elements, or one item for the small steps) that threads claim
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
    /* vision steps (NHWC; p: a vx_window the plan keeps) */
    VX_STEP_CONV_F32 = 11,    /* y = act(conv(a, packed b) + bias c): im2col (or 1x1 direct) + sgemm */
    VX_STEP_DWCONV_F32 = 12,  /* y = act(depthwise conv(a, b (kh*kw, C)) + bias c) */
    VX_STEP_QCONV = 13,       /* int8 y = requant(conv(a, packed b)): im2col_u8 + qgemm */
    VX_STEP_QDWCONV = 14,     /* int8 y = requant(depthwise conv(a, b (kh*kw, C) int16)) */
    VX_STEP_QUANTIZE_I8 = 15, /* int8 y (n) = quantize(float a), scale f[0], zero point n[1] */
    VX_STEP_DEQUANTIZE_I8 = 16, /* float y (n) = f[0] * (int8 a - n[1]) */
    VX_STEP_QAVG_POOL = 17,   /* int8 y = average pool of int8 a over in-image taps */
    VX_STEP_QSOFTMAX = 18,    /* int8 y = softmax of int8 a rows, exp table b */
    VX_STEP_MAX_POOL = 19,    /* y = max pool of a (padding never wins) */
    VX_STEP_GLOBAL_AVG = 20,  /* y (N, C) = mean of a (N, HW, C) over HW, in double */
    VX_STEP_RELU = 21,        /* y (n) = max(a, 0), numpy's maximum */
    VX_STEP_COPY_ROWS = 22,   /* byte rows of a into y at a column offset (concat, channel pad) */
    VX_STEP_UNARY = 23,       /* y (n) = f(a): hard_swish, hard_sigmoid, sqrt, square (flag: VX_UNARY_*) */
    VX_STEP_GATHER = 24,      /* y (contiguous) = the float32 elements of a at a strided view (transpose, slice) */
    VX_STEP_AVG_POOL = 25,    /* f32 y = average pool of a (tap sums in order, / in-image count or kh*kw) */
    VX_STEP_DWPW_F32 = 26,    /* y = a 1x1 conv of a depthwise conv's rows, the middle tensor never stored */
    VX_STEP_QDWPW = 27,       /* DWPW_F32 for int8: depthwise rows into scratch, then the 1x1 int8 GEMM */
    VX_STEP_EXDWPW_F32 = 28,  /* DWPW_F32 of a 1x1 conv's output rows computed into scratch (an inverted bottleneck) */
    VX_STEP_NKINDS = 28
};

/* Functions of an UNARY step, each numpy's float32 arithmetic (ops/activation.py, ops/arith.py). */
enum {
    VX_UNARY_HARD_SWISH = 0,   /* t = clip(x + 3, 0, 6); y = (x * t) / 6 */
    VX_UNARY_HARD_SIGMOID = 1, /* y = clip(f[0] * x + f[1], 0, 1) (a product, then a sum) */
    VX_UNARY_SQRT = 2,
    VX_UNARY_SQUARE = 3
};

/* Operators of a BINARY step. */
enum { VX_BIN_ADD = 0, VX_BIN_MUL = 1, VX_BIN_SUB = 2, VX_BIN_DIV = 3 };

/* The 1x1 stride-1 unpadded conv a DWPW / QDWPW step runs on each depthwise output row. */
typedef struct {
    const void *packed;  /* weights: f32 sgemm_pack, int8 qgemm_pack of (cout, C) */
    const float *bias;   /* f32: (cout,) or NULL */
    const int32_t *wsum; /* int8: the row sums, NULL once the zero point is in rq.bias */
    vx_requant rq;       /* int8 requantization */
    int64_t cout;        /* output channels */
    int32_t act;         /* VX_ACT_* (f32) */
    int32_t pad_;
} vx_pointwise;

/* Geometry of a window step (convs, pools): the input / output shape, int8 requantization
 * (pools: rq.lo / rq.hi clamp only), output channels, im2col row length and scratch. */
typedef struct {
    vx_conv_shape s;
    vx_requant rq;
    int64_t cout;        /* output channels */
    int64_t ldc;         /* im2col row: K floats (f32) or K4 bytes (int8); 0: 1x1 direct */
    int64_t per_thread;  /* scratch elements per thread */
    int64_t cparts;      /* CONV_F32 / QCONV: output-channel parts per pixel block (<= 1: one) */
    int64_t pixels;      /* CONV_F32 / QCONV: output pixels per block, 1 .. VX_CONV_PIXELS (0: all of those) */
    int32_t act;         /* VX_ACT_* (f32 convs) */
    int32_t pad_;
    vx_pointwise pw;     /* DWPW: the 1x1 conv after the depthwise one */
    vx_pointwise ex;     /* EXDWPW: the 1x1 conv before it (cout: the depthwise conv's channels) */
} vx_window;

/* Output pixels per im2col work item (the per-op kernels' CONV_PIXELS; the most a step's takes). */
#define VX_CONV_PIXELS 64

/* One kernel call. Field use per kind:
 *   EMBED      a table, n[0] D, n[1] row bytes, n[2] V, wtype; row `token`, or `pos` when flag
 *   RMS_NORM   a x, b weight, n[0] D, f[0] eps
 *   QUANTIZE   a x, n[0] K, wtype, scratch: the act row (vx_act_row_bytes(wtype, K) bytes)
 *   LINEAR     a: the act row a QUANTIZE step wrote (quantized wtype) or the float x (f32 /
 *              f16), b weight rows, c bias or NULL, n[0] K, n[1] N, n[2] row bytes, wtype;
 *              n[3] float x rows (0: one; f32 / f16 weights only)
 *   ROPE       a x, n[0] n_heads, n[1] head_dim, n[2] rope_dim, flag interleaved,
 *              f[0] base, f[1] freq_scale
 *   KV_STORE   b k row, c v row, n[1] n_kv_heads, n[2] head_dim, n[4] layer
 *   ATTENTION  a q, n[0] n_heads, n[1] n_kv_heads, n[2] head_dim, n[3] window, n[4] layer,
 *              n[5] scratch floats per thread, f[0] scale, scratch: (threads, n[5]) floats
 *   SWIGLU     a x, n[0] F, flag gated
 *   BINARY     y = a op b, flag VX_BIN_*; n[0] count; b broadcast: b[(i / n[2]) % n[1]] (n[1] 0: b[i];
 *              per channel: n[2] 1, n[1] C; per row: n[2] row length, n[1] rows); n[3] VX_ACT_* applied
 *              after (a fused ReLU / ReLU6: numpy's maximum, then min with 6)
 *   LAYER_NORM a x, b weight, c bias or NULL, n[0] D, f[0] eps
 *   GELU       a x, n[0] count, flag tanh approximation
 *   CONV_F32   a x, b packed (sgemm_pack), c bias or NULL, p window, scratch (threads, per_thread) floats;
 *              items: blocks of p->pixels output pixels, each split into p->cparts ranges of
 *              output channels (whole 32-channel panels) when the blocks are too few for the threads
 *   DWCONV_F32 a x, b weights (kh*kw, C), c bias or NULL, p window; items: output rows
 *   DWPW_F32   a x, b depthwise weights (kh*kw, C), c their bias or NULL, p window (the depthwise
 *              geometry, act; pw: the 1x1 conv), scratch (threads, per_thread = ow*C) floats, y the
 *              1x1 conv's output; items: depthwise output rows, each computed into the thread's
 *              scratch and multiplied straight into its ow output pixels
 *   QDWPW      DWPW_F32 in int8 on bands of p->ldc depthwise rows (items): b depthwise weights
 *              (kh*kw, C) int16, p window (rq: the depthwise requantization; pw: the 1x1 conv's
 *              packed weights, wsum, rq), scratch (threads, per_thread = ldc*ow*C) bytes: a band's
 *              rows are requantized there, offset to u8 and multiplied by one qgemm into their
 *              output pixels (C a multiple of 4: the rows are the GEMM's)
 *   EXDWPW_F32 DWPW_F32 whose depthwise input rows come from a 1x1 conv (p->ex, n[0] input channels)
 *              of a: items are bands of p->ldc depthwise output rows of an image; each computes the
 *              expanded rows its band reads (rows the band before shares, again) into the thread's
 *              scratch, then each depthwise row and its 1x1 conv as DWPW_F32 does; scratch (threads,
 *              per_thread = vx_exdwpw_rows(p) * w * C + ow * C) floats
 *   QCONV      a x, b packed (qgemm_pack), c wsum, p window (rq), scratch (threads, per_thread) bytes;
 *              items as CONV_F32
 *   QDWCONV    a x, b weights (kh*kw, C) int16, p window (rq); items: output rows
 *   QUANTIZE_I8 / DEQUANTIZE_I8  a x, n[0] count, n[1] zero point, f[0] scale
 *   QAVG_POOL  a x, p window (geometry, rq.lo / rq.hi); items: output rows
 *   QSOFTMAX   a x, b table (256 floats), n[0] rows, n[1] row length, n[2] output zero point,
 *              f[0] output scale
 *   MAX_POOL   a x, p window (geometry); items: output rows
 *   GLOBAL_AVG a x, n[0] N, n[1] H*W, n[2] C; items: runs of VX_GLOBAL_AVG_CHANNELS channels of an image
 *   RELU       a x, n[0] count
 *   UNARY      a x, n[0] count, flag VX_UNARY_*, f[0] alpha, f[1] beta
 *   GATHER     a x, b int64 (ndim, shape[ndim], element strides[ndim]) of the view, n[0] output
 *              rows (elements / shape[ndim-1]); items: runs of rows
 *   AVG_POOL   a x, p window (geometry), flag count_include_pad; items: output rows
 *   COPY_ROWS  a src, n[0] rows, n[1] bytes per row, n[2] src stride, n[3] dst stride, n[4] dst
 *              offset (bytes); flag: zero the rest of each dst row
 *   BINARY, RELU, UNARY, QUANTIZE_I8, DEQUANTIZE_I8 split n[0] into chunks of VX_ELEM_CHUNK; COPY_ROWS
 *   its rows into runs of about VX_COPY_BYTES.
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
    const vx_window *p;  /* window steps */
} vx_step;

/* Elements per work item of the elementwise steps. */
#define VX_ELEM_CHUNK 4096
/* Destination bytes per work item of a COPY_ROWS step (whole rows, at least one). */
#define VX_COPY_BYTES 65536

/* Expanded input rows an EXDWPW_F32 band of p->ldc depthwise output rows reads (at most). */
static inline int64_t vx_exdwpw_rows(const vx_window *p) { return (p->ldc - 1) * p->s.sh + (p->s.kh - 1) * p->s.dh + 1; }

/* What changes from one forward to the next: the token, its position and the KV cache. */
typedef struct {
    int64_t token, pos;
    int64_t capacity;         /* positions each cache array holds */
    float *const *k_cache;    /* per layer: (n_kv_heads, capacity, head_dim) */
    float *const *v_cache;
} vx_step_input;

/* Threads a step runner splits work among (a larger team is capped to it). */
#define VX_TEAM_MAX 64

/* Work counters of a run: row t (thread t's, `stride` uint64s from row t-1, whole cache lines)
 * holds for step i slot 2i: the items thread t has not yet started, [lo, hi) packed as
 * hi << 32 | lo (its owner takes lo, a thread out of work takes hi - 1), and slot 2i + 1: the
 * items thread t has finished. The runner fills rows 0 .. nthreads-1 before its region. */
typedef struct {
    uint64_t *rows;  /* (VX_TEAM_MAX, stride) */
    int64_t stride;  /* >= 2 * steps, a multiple of 8 */
} vx_step_sync;

/* Runs steps[0..n) on `nthreads` threads; sync: counters for at least `first + n` steps, of
 * which steps[0..n) use those of first .. first+n-1. times: NULL, or n doubles that receive
 * each step's wall seconds (thread 0 then waits for each step to finish). */
void vx_run_steps(const vx_table *t, const vx_step *steps, int64_t n, const vx_step_input *in,
                  int nthreads, const vx_step_sync *sync, int64_t first, double *times);

/* Small int8 / pooling kernels (vx_plan.c), shared by the steps above and the per-op fast
 * paths, each bit-identical to ops/quantized.py's / ops/pool.py's numpy references (the
 * quantize step's kernel is the tier table's conv->quantize_i8, vx_conv.c).
 * y[i] = scale * ((float)x[i] - (float)zp) */
void vx_dequantize_i8(int64_t n, const int8_t *x, float scale, int32_t zp, float *y);
/* int8 average pool output row `item` = b * OH + oh: in-image tap sum, divided rounding half
 * away from zero, clamped to [w->rq.lo, w->rq.hi]. */
void vx_qavg_pool_row(const vx_window *w, const int8_t *x, int64_t item, int8_t *y);
/* TFLite's int8 softmax of one row of n: e = table[max - x], float32 sum in order,
 * q = round_half_away(e / (sum * out_scale)) + zp_out, clamped. */
void vx_qsoftmax_row(int64_t n, const int8_t *x, const float *table, float out_scale, int32_t zp_out,
                     int8_t *y);
/* f32 max pool output row `item`: numpy's maximum over the in-image taps in row-major order. */
void vx_max_pool_row(const vx_window *w, const float *x, int64_t item, float *y);
/* Channels per work item of a GLOBAL_AVG step. */
#define VX_GLOBAL_AVG_CHANNELS 256
/* y[c] = float(sum over hw of double(x[hw][c]) / HW), summed in order, for channels c0 .. c0 +
 * VX_GLOBAL_AVG_CHANNELS - 1 (those below C) of one image's x (HW, C). */
void vx_global_avg(int64_t HW, int64_t C, int64_t c0, const float *x, float *y);

#ifdef __cplusplus
}
#endif
#endif /* VX_PLAN_H */
