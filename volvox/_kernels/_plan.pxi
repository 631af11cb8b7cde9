# Step plans (csrc/vx_plan.c), included into _core.pyx: a forward pass lowered to an
# array of kernel calls that runs in one nogil call and one OpenMP region. The builders
# (volvox/runtime/native_plan.py, vision_plan.py) check every size and keep every buffer
# alive; this class trusts the addresses it is given.
from libc.stdlib cimport calloc, free
from libc.string cimport memset
from libc.stdint cimport int32_t, uint64_t, uintptr_t
from cpython.buffer cimport PyBUF_ANY_CONTIGUOUS, PyBuffer_Release, PyObject_GetBuffer


cdef extern from "vx_plan.h" nogil:
    enum:
        VX_STEP_EMBED
        VX_STEP_RMS_NORM
        VX_STEP_QUANTIZE
        VX_STEP_LINEAR
        VX_STEP_ROPE
        VX_STEP_KV_STORE
        VX_STEP_ATTENTION
        VX_STEP_SWIGLU
        VX_STEP_BINARY
        VX_STEP_LAYER_NORM
        VX_STEP_GELU
        VX_STEP_CONV_F32
        VX_STEP_DWCONV_F32
        VX_STEP_QCONV
        VX_STEP_QDWCONV
        VX_STEP_QUANTIZE_I8
        VX_STEP_DEQUANTIZE_I8
        VX_STEP_QAVG_POOL
        VX_STEP_QSOFTMAX
        VX_STEP_MAX_POOL
        VX_STEP_GLOBAL_AVG
        VX_STEP_RELU
        VX_STEP_COPY_ROWS
        VX_STEP_UNARY
        VX_STEP_GATHER
        VX_STEP_AVG_POOL
        VX_STEP_DWPW_F32
        VX_STEP_QDWPW
        VX_STEP_EXDWPW_F32
        VX_UNARY_HARD_SWISH
        VX_UNARY_HARD_SIGMOID
        VX_UNARY_SQRT
        VX_UNARY_SQUARE
        VX_BIN_ADD
        VX_BIN_MUL
        VX_BIN_SUB
        VX_BIN_DIV
        VX_CONV_PIXELS
        VX_TEAM_MAX
    ctypedef struct vx_pointwise:
        const void *packed
        const float *bias
        const int32_t *wsum
        vx_requant rq
        int64_t cout
        int32_t act
    ctypedef struct vx_window:
        vx_conv_shape s
        vx_requant rq
        int64_t cout, ldc, per_thread, cparts, pixels
        int32_t act
        vx_pointwise pw
        vx_pointwise ex
    ctypedef struct vx_step:
        int32_t kind, wtype, flag
        int64_t n[6]
        float f[2]
        const void *a
        const void *b
        const void *c
        float *y
        void *scratch
        const vx_window *p
    ctypedef struct vx_step_sync:
        uint64_t *rows
        int64_t stride
    ctypedef struct vx_step_input:
        int64_t token, pos, capacity
        float *const *k_cache
        float *const *v_cache
    void vx_run_steps(const vx_table *t, const vx_step *steps, int64_t n, const vx_step_input *inp,
                      int nthreads, const vx_step_sync *sync, int64_t first, double *times)
    void vx_dequantize_i8(int64_t n, const int8_t *x, float scale, int32_t zp, float *y)
    void vx_qavg_pool_row(const vx_window *w, const int8_t *x, int64_t item, int8_t *y)
    void vx_qsoftmax_row(int64_t n, const int8_t *x, const float *table, float out_scale, int32_t zp_out,
                         int8_t *y)

# Step kinds by name (csrc/vx_plan.h).
STEP_KINDS = {"embed": VX_STEP_EMBED, "rms_norm": VX_STEP_RMS_NORM, "quantize": VX_STEP_QUANTIZE,
              "linear": VX_STEP_LINEAR, "rope": VX_STEP_ROPE, "kv_store": VX_STEP_KV_STORE,
              "attention": VX_STEP_ATTENTION, "swiglu": VX_STEP_SWIGLU, "binary": VX_STEP_BINARY,
              "layer_norm": VX_STEP_LAYER_NORM, "gelu": VX_STEP_GELU, "conv_f32": VX_STEP_CONV_F32,
              "dwconv_f32": VX_STEP_DWCONV_F32, "qconv": VX_STEP_QCONV, "qdwconv": VX_STEP_QDWCONV,
              "quantize_i8": VX_STEP_QUANTIZE_I8, "dequantize_i8": VX_STEP_DEQUANTIZE_I8,
              "qavg_pool": VX_STEP_QAVG_POOL, "qsoftmax": VX_STEP_QSOFTMAX, "max_pool": VX_STEP_MAX_POOL,
              "global_avg": VX_STEP_GLOBAL_AVG, "relu": VX_STEP_RELU, "copy_rows": VX_STEP_COPY_ROWS,
              "unary": VX_STEP_UNARY, "gather": VX_STEP_GATHER, "avg_pool": VX_STEP_AVG_POOL,
              "dwpw_f32": VX_STEP_DWPW_F32, "qdwpw": VX_STEP_QDWPW, "exdwpw_f32": VX_STEP_EXDWPW_F32}
# Functions of an unary step and operators of a binary step (flag).
UNARY_FNS = {"hard_swish": VX_UNARY_HARD_SWISH, "hard_sigmoid": VX_UNARY_HARD_SIGMOID, "sqrt": VX_UNARY_SQRT,
             "square": VX_UNARY_SQUARE}
BINARY_OPS = {"add": VX_BIN_ADD, "mul": VX_BIN_MUL, "sub": VX_BIN_SUB, "div": VX_BIN_DIV}
# Output pixels per work item of an im2col conv step.
CONV_STEP_PIXELS = VX_CONV_PIXELS


cdef class StepPlan:
    """A fixed array of kernel steps plus the KV cache they read; see csrc/vx_plan.h."""
    cdef vx_step *steps
    cdef vx_window *windows  # one per step (window steps point at theirs)
    cdef vx_step_sync sync
    cdef void *sync_block  # sync.rows' allocation (rows start at its first cache line)
    cdef int64_t n, cap, layers
    cdef float **k_cache
    cdef float **v_cache
    cdef int64_t kv_capacity

    def __cinit__(self, int64_t max_steps, int64_t layers):
        self.steps = <vx_step *> calloc(max(max_steps, 1), sizeof(vx_step))
        self.sync.stride = (2 * max(max_steps, 1) + 7) // 8 * 8
        self.sync_block = calloc(VX_TEAM_MAX * self.sync.stride + 8, sizeof(uint64_t))
        self.sync.rows = <uint64_t *> ((<uintptr_t> self.sync_block + 63) // 64 * 64)
        self.windows = <vx_window *> calloc(max(max_steps, 1), sizeof(vx_window))
        self.k_cache = <float **> calloc(max(layers, 1), sizeof(float *))
        self.v_cache = <float **> calloc(max(layers, 1), sizeof(float *))
        if self.steps == NULL or self.sync_block == NULL or self.windows == NULL or self.k_cache == NULL or self.v_cache == NULL:
            raise MemoryError("step plan")
        self.cap = max_steps
        self.layers = layers
        self.n = 0

    def __dealloc__(self):
        free(self.steps)
        free(self.sync_block)
        free(self.windows)
        free(self.k_cache)
        free(self.v_cache)

    def __len__(self):
        return self.n

    def add(self, int kind, int wtype=0, int flag=0, tuple sizes=(), tuple floats=(), uintptr_t a=0,
            uintptr_t b=0, uintptr_t c=0, uintptr_t y=0, uintptr_t scratch=0, tuple window=None,
            int64_t cout=0, int64_t ldc=0, int64_t per_thread=0, int act=0, tuple requant=None,
            tuple pointwise=None, tuple pw_requant=None, int64_t cparts=1, int64_t pixels=0, tuple expand=None):
        """Append one step (addresses of buffers the caller keeps alive). Window steps also
        take window = (n, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, pad_top, pad_left), cout, ldc,
        per_thread, act, cparts (CONV_F32 / QCONV: output-channel parts per pixel block), pixels (their
        output pixels per block, 0: VX_CONV_PIXELS),
        requant = (bias, multiplier, shift addresses, zp_in, zp_out, lo, hi),
        (DWPW, QDWPW) pointwise = (packed weights address, f32 bias address or 0, cout, act,
        int8 row sums address or 0) and (QDWPW) pw_requant, the 1x1 conv's requant; (EXDWPW) expand =
        (packed weights address, bias address or 0, cout, act) of the 1x1 conv before."""
        if self.n >= self.cap or len(sizes) > 6 or len(floats) > 2:
            raise ValueError("step plan is full or a step has too many fields")
        cdef vx_step *s = &self.steps[self.n]
        cdef vx_window *w = &self.windows[self.n]
        cdef int i
        if window is not None:
            w.s = _window_shape(window)
            w.cout, w.ldc, w.per_thread, w.act, w.cparts, w.pixels = cout, ldc, per_thread, act, cparts, pixels
            if requant is not None:
                w.rq = _requant_of(requant)
            if pointwise is not None:
                w.pw.packed = <const void *> <uintptr_t> pointwise[0]
                w.pw.bias = <const float *> <uintptr_t> pointwise[1]
                w.pw.cout, w.pw.act = pointwise[2:4]
                w.pw.wsum = <const int32_t *> <uintptr_t> pointwise[4]
            if pw_requant is not None:
                w.pw.rq = _requant_of(pw_requant)
            if expand is not None:
                w.ex.packed = <const void *> <uintptr_t> expand[0]
                w.ex.bias = <const float *> <uintptr_t> expand[1]
                w.ex.cout, w.ex.act = expand[2:4]
            s.p = w
        else:
            s.p = NULL
        s.kind, s.wtype, s.flag = kind, wtype, flag
        for i in range(len(sizes)):
            s.n[i] = sizes[i]
        for i in range(len(floats)):
            s.f[i] = floats[i]
        s.a, s.b, s.c = <const void *> a, <const void *> b, <const void *> c
        s.y, s.scratch = <float *> y, <void *> scratch
        self.n += 1

    def point(self, int64_t step, int port, object array, int64_t offset):
        """Point ``step``'s a (port 0), b (1) or c (2) at byte ``offset`` of contiguous ``array``
        (the caller keeps it alive and unchanged while the steps run)."""
        cdef Py_buffer view
        if not 0 <= step < self.n or not 0 <= port <= 2:
            raise ValueError("step or port out of range")
        PyObject_GetBuffer(array, &view, PyBUF_ANY_CONTIGUOUS)
        cdef const char *at = <const char *> view.buf + offset
        cdef bint inside = 0 <= offset < view.len
        PyBuffer_Release(&view)
        if not inside:
            raise ValueError("offset outside the array")
        if port == 0:
            self.steps[step].a = at
        elif port == 1:
            self.steps[step].b = at
        else:
            self.steps[step].c = at

    def run_vision(self, int nthreads, double[::1] times=None, int64_t start=0, int64_t stop=-1):
        """Run steps [start, stop) (stop -1: to the end) once, for a graph without a KV cache, on
        min(nthreads, get_num_threads()) threads; times (len(self)) gets per-step seconds."""
        cdef vx_step_input inp
        memset(&inp, 0, sizeof(inp))
        cdef int nt = max(1, min(nthreads, _nthreads))
        if stop < 0 or stop > self.n:
            stop = self.n
        if start < 0 or start > stop:
            raise ValueError("step range")
        cdef double *tp = NULL if times is None else &times[start]
        with nogil:
            vx_run_steps(_tbl, self.steps + start, stop - start, &inp, nt, &self.sync, start, tp)

    def bind_cache(self, list keys, list values, int64_t capacity):
        """Per-layer addresses of the KV cache arrays, each (n_kv_heads, capacity, head_dim)."""
        cdef int64_t i
        for i in range(self.layers):
            self.k_cache[i] = <float *> <uintptr_t> keys[i]
            self.v_cache[i] = <float *> <uintptr_t> values[i]
        self.kv_capacity = capacity

    def run(self, int64_t token, int64_t pos, double[::1] times=None, int nthreads=0):
        """Run every step for one token at position pos on min(nthreads, get_num_threads())
        threads (0: all of those); times (len(self)) gets per-step seconds."""
        cdef vx_step_input inp
        inp.token, inp.pos, inp.capacity = token, pos, self.kv_capacity
        inp.k_cache, inp.v_cache = self.k_cache, self.v_cache
        cdef double *tp = NULL if times is None else &times[0]
        cdef int nt = _nthreads if nthreads <= 0 else max(1, min(nthreads, _nthreads))
        with nogil:
            vx_run_steps(_tbl, self.steps, self.n, &inp, nt, &self.sync, 0, tp)


cdef vx_requant _requant_of(tuple r):
    """(bias, multiplier, shift addresses, zp_in, zp_out, lo, hi) as a vx_requant."""
    cdef vx_requant rq
    rq.bias = <const int32_t *> <uintptr_t> r[0]
    rq.mult = <const int32_t *> <uintptr_t> r[1]
    rq.shift = <const int32_t *> <uintptr_t> r[2]
    rq.zp_in, rq.zp_out, rq.lo, rq.hi = r[3:]
    return rq


cdef vx_conv_shape _window_shape(tuple g):
    cdef vx_conv_shape s
    s.n, s.h, s.w, s.c, s.oh, s.ow, s.kh, s.kw, s.sh, s.sw, s.dh, s.dw, s.pt, s.pl = g
    return s


# Per-op entry points of the small int8 / pooling kernels the steps use (vx_plan.h);
# volvox.kernels checks the arguments.
def quantize_i8(const float[::1] x, float scale, int zp, int8_t[::1] y):
    """y = clamp(round_half_away(x / scale) + zp) as int8."""
    with nogil:
        _tbl.conv.quantize_i8(x.shape[0], &x[0], scale, zp, &y[0])


def dequantize_i8(const int8_t[::1] x, float scale, int zp, float[::1] y):
    """y = scale * (x - zp)."""
    with nogil:
        vx_dequantize_i8(x.shape[0], &x[0], scale, zp, &y[0])


def qavg_pool2d(const int8_t[:, :, :, ::1] x, tuple geo, int lo, int hi, int8_t[:, :, :, ::1] y):
    """int8 average pool; geo = (oh, ow, kh, kw, sh, sw, pad_top, pad_left)."""
    cdef vx_window w
    memset(&w, 0, sizeof(w))
    w.s = _window_shape((x.shape[0], x.shape[1], x.shape[2], x.shape[3]) + geo[:6] + (1, 1) + geo[6:])
    w.rq.lo, w.rq.hi = lo, hi
    cdef int64_t it
    with nogil:
        for it in range(w.s.n * w.s.oh):
            vx_qavg_pool_row(&w, &x[0, 0, 0, 0], it, &y[0, 0, 0, 0])


def qsoftmax(const int8_t[:, ::1] x, const float[::1] table, float out_scale, int zp_out, int8_t[:, ::1] y):
    """TFLite's int8 softmax of every row of x with the exp table (256,)."""
    cdef int64_t r
    with nogil:
        for r in range(x.shape[0]):
            vx_qsoftmax_row(x.shape[1], &x[r, 0], &table[0], out_scale, zp_out, &y[r, 0])
