# StepPlan: a plan's steps as Python builds them. One method per step kind, its keyword arguments
# the kind's typed fields (addresses as ints: the builder keeps every buffer alive and checked
# every size); run() and run_range() execute them through the runner.
from libc.stdlib cimport calloc, free
from cpython.buffer cimport PyBUF_ANY_CONTIGUOUS, PyBuffer_Release, PyObject_GetBuffer

STEP_KINDS = {KINDS[k].name.decode(): k for k in range(<int>STEP_NKINDS)}  # step kind name -> code
CONV_STEP_PIXELS = CONV_PIXELS  # output pixels per work item of an im2col conv step (at most)


cdef inline void *ptr(uintptr_t address) noexcept:
    return <void *> address


cdef vx_requant requant_of(tuple r):
    """(bias, multiplier, shift addresses, zp_in, zp_out, lo, hi) as a vx_requant."""
    cdef vx_requant rq
    rq.bias = <const int32_t *> ptr(r[0])
    rq.mult = <const int32_t *> ptr(r[1])
    rq.shift = <const int32_t *> ptr(r[2])
    rq.zp_in, rq.zp_out, rq.lo, rq.hi = r[3:]
    return rq


cdef vx_conv_shape shape_of(tuple g):
    """(n, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, pad_top, pad_left) as a vx_conv_shape."""
    cdef vx_conv_shape s
    s.n, s.h, s.w, s.c, s.oh, s.ow, s.kh, s.kw, s.sh, s.sw, s.dh, s.dw, s.pt, s.pl = g
    return s


cdef Pointwise pointwise_of(tuple p, tuple requant):
    """(packed weights, f32 bias or 0, cout, act, int8 row sums or 0) [+ requant] as a Pointwise."""
    cdef Pointwise pw
    memset(&pw, 0, sizeof(pw))
    pw.packed = ptr(p[0])
    pw.bias = <const float *> ptr(p[1])
    pw.cout, pw.act = p[2:4]
    pw.wsum = <const int32_t *> ptr(p[4]) if len(p) > 4 else NULL
    if requant is not None:
        pw.rq = requant_of(requant)
    return pw


cdef class StepPlan:
    """A fixed array of kernel steps plus the KV cache they read (engine/steps.pxi)."""
    cdef Step *steps
    cdef Window *windows         # one per step (window steps point at theirs)
    cdef StepSync sync           # counters of an OpenMP-region run (another thread's plan has the team)
    cdef void *sync_block        # sync.rows' allocation (rows start at its first cache line)
    cdef int64_t n, cap, layers
    cdef float **k_cache
    cdef float **v_cache
    cdef int64_t kv_capacity

    def __cinit__(self, int64_t max_steps, int64_t layers=0):
        self.steps = <Step *> calloc(max(max_steps, 1), sizeof(Step))
        self.sync.stride = (2 * max(max_steps, 1) + 7) // 8 * 8
        self.sync_block = calloc(TEAM_MAX * self.sync.stride + 8, sizeof(uint64_t))
        self.sync.rows = <uint64_t *> ((<uintptr_t> self.sync_block + 63) // 64 * 64)
        self.windows = <Window *> calloc(max(max_steps, 1), sizeof(Window))
        self.k_cache = <float **> calloc(max(layers, 1), sizeof(float *))
        self.v_cache = <float **> calloc(max(layers, 1), sizeof(float *))
        if (self.steps == NULL or self.sync_block == NULL or self.windows == NULL or self.k_cache == NULL
                or self.v_cache == NULL):
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

    cdef Step *_next(self, StepKind kind) except NULL:
        if self.n >= self.cap:
            raise ValueError("step plan is full")
        cdef Step *s = &self.steps[self.n]
        memset(s, 0, sizeof(Step))
        s.kind = kind
        self.n += 1
        return s

    cdef Window *_window(self, Step *s, tuple window, int64_t cout, tuple requant, int64_t ldc=0,
                         int64_t per_thread=0, int act=0, int64_t cparts=1, int64_t pixels=0, int64_t band=0,
                         int64_t ldx=0, int64_t ldy=0):
        cdef Window *w = &self.windows[s - self.steps]
        memset(w, 0, sizeof(Window))
        w.s = shape_of(window)
        w.cout, w.ldc, w.per_thread, w.act, w.cparts, w.pixels = cout, ldc, per_thread, act, cparts, pixels
        w.band, w.ldx, w.ldy = band, ldx, ldy
        if requant is not None:
            w.rq = requant_of(requant)
        s.w = w
        return w

    # ------------------------------------------------------------- sequence steps
    def embed(self, *, uintptr_t table, uintptr_t y, int64_t dim, int64_t row_bytes, int64_t vocab, int wtype,
              bint by_position=False):
        """y (dim,) = dequantized row `token` (or `pos`, by_position) of table (vocab rows of row_bytes)."""
        cdef Step *s = self._next(STEP_EMBED)
        s.a.embed.table, s.a.embed.y = <const uint8_t *> ptr(table), <float *> ptr(y)
        s.a.embed.dim, s.a.embed.row_bytes, s.a.embed.vocab, s.a.embed.rows = dim, row_bytes, vocab, 1
        s.a.embed.wtype, s.a.embed.by_position = wtype, by_position

    def rms_norm(self, *, uintptr_t x, uintptr_t weight, uintptr_t y, int64_t dim, float eps, int64_t rows=1):
        """y (rows, dim) = x / sqrt(mean(x^2) + eps) * weight, row by row."""
        cdef Step *s = self._next(STEP_RMS_NORM)
        s.a.norm.x, s.a.norm.weight, s.a.norm.y = <const float *> ptr(x), <const float *> ptr(weight), <float *> ptr(y)
        s.a.norm.dim, s.a.norm.rows, s.a.norm.eps = dim, rows, eps

    def layer_norm(self, *, uintptr_t x, uintptr_t weight, uintptr_t bias, uintptr_t y, int64_t dim, float eps,
                   int64_t rows=1):
        """y (rows, dim) = (x - mean) / sqrt(var + eps) * weight (+ bias; 0: none), row by row."""
        cdef Step *s = self._next(STEP_LAYER_NORM)
        s.a.norm.x, s.a.norm.weight = <const float *> ptr(x), <const float *> ptr(weight)
        s.a.norm.bias, s.a.norm.y = <const float *> ptr(bias), <float *> ptr(y)
        s.a.norm.dim, s.a.norm.rows, s.a.norm.eps = dim, rows, eps

    def quantize_act(self, *, uintptr_t x, uintptr_t act, int64_t K, int wtype, int64_t rows=1):
        """act (rows, act_row_bytes(wtype, K)) = the 8-bit activation rows of x (rows, K) for weights of
        type wtype."""
        cdef Step *s = self._next(STEP_QUANTIZE_ACT)
        s.a.quantize_act.x, s.a.quantize_act.act = <const float *> ptr(x), <uint8_t *> ptr(act)
        s.a.quantize_act.K, s.a.quantize_act.rows, s.a.quantize_act.wtype = K, rows, wtype
        s.a.quantize_act.act_stride = vx_act_row_bytes(wtype, K)

    def linear(self, *, uintptr_t x, uintptr_t w, uintptr_t bias, uintptr_t y, int64_t K, int64_t N,
               int64_t row_bytes, int wtype, int64_t rows=1, int64_t group_bytes=0):
        """y (rows, N) = x @ W.T (+ bias; 0: none): x the act row a quantize_act step wrote (quantized
        wtype, one row) or float32 rows (f32 / f16 weights); W N rows of row_bytes, or (group_bytes > 0)
        interleaved by il_pack."""
        if group_bytes and (_tbl.gemm_il[wtype] == NULL or LINEAR_CHUNK % _tbl.il_rows):
            raise ValueError(f"the {_tbl.name.decode()} tier has no interleaved kernel for weight type {wtype}")
        cdef Step *s = self._next(STEP_LINEAR)
        cdef int64_t act = vx_act_row_bytes(wtype, K)
        s.a.linear.group_bytes = group_bytes
        s.a.linear.x, s.a.linear.w = ptr(x), <const uint8_t *> ptr(w)
        s.a.linear.bias, s.a.linear.y = <const float *> ptr(bias), <float *> ptr(y)
        s.a.linear.K, s.a.linear.N, s.a.linear.row_bytes, s.a.linear.rows = K, N, row_bytes, rows
        s.a.linear.x_stride = act if act else K * <int64_t>sizeof(float)
        s.a.linear.wtype = wtype

    def moe_route(self, *, uintptr_t logits, uintptr_t ids, uintptr_t weights, int64_t n_experts, int64_t top_k,
                  bint sigmoid=False, bint norm=False, bint shared=False, uintptr_t shared_logit=0):
        """ids (top_k,) int64, weights (top_k [+ 1 shared],) float32 = a token's chosen experts (engine/moe.pxi)."""
        set_moe_route(self._next(STEP_MOE_ROUTE), logits, shared_logit, ids, weights, n_experts, top_k, sigmoid,
                      norm, shared)

    def moe_linear(self, *, uintptr_t x, uintptr_t ids, uintptr_t experts, uintptr_t y, int64_t K, int64_t N,
                   int64_t row_bytes, int wtype, int64_t slots, int64_t x_stride, int64_t y_stride,
                   int64_t n_experts, int64_t parts=1, int64_t group_bytes=0):
        """y[slot, part N ..] (N,) = x[slot] @ W_part[ids[slot]].T, W the experts' weights by address
        (engine/moe.pxi)."""
        set_moe_linear(self._next(STEP_MOE_LINEAR), x, ids, experts, y, K, N, row_bytes, group_bytes, x_stride,
                       y_stride, slots, parts, n_experts, wtype)

    def moe_combine(self, *, uintptr_t x, uintptr_t weights, uintptr_t y, int64_t dim, int64_t top_k,
                    uintptr_t shared=0):
        """y (dim,) = the weighted sum of x's top_k rows (+ the shared expert's row; 0: none) (engine/moe.pxi)."""
        set_moe_combine(self._next(STEP_MOE_COMBINE), x, weights, shared, y, dim, top_k)

    def rope(self, *, uintptr_t x, uintptr_t y, int64_t n_heads, int64_t head_dim, int64_t rope_dim, float base,
             float freq_scale, bint interleaved, bint scaled=False, uintptr_t freq_factors=0, float ext_factor=0.0,
             float corr_lo=0.0, float corr_hi=0.0, float attn_factor=1.0):
        """y = x (n_heads heads) rotated for the run's position (scaled: ggml's rope_yarn angles, the
        freq_factors (rope_dim/2,) floats at that address, kept alive by the caller, or none at 0)."""
        cdef Step *s = self._next(STEP_ROPE)
        s.a.rope.x, s.a.rope.y = <const float *> ptr(x), <float *> ptr(y)
        s.a.rope.n_heads, s.a.rope.head_dim, s.a.rope.rope_dim, s.a.rope.rows = n_heads, head_dim, rope_dim, 1
        s.a.rope.base, s.a.rope.freq_scale, s.a.rope.interleaved = base, freq_scale, interleaved
        s.a.rope.scaled = scaled
        s.a.rope.yarn.freq_factors = <const float *> freq_factors
        s.a.rope.yarn.ext_factor, s.a.rope.yarn.corr_lo, s.a.rope.yarn.corr_hi = ext_factor, corr_lo, corr_hi
        s.a.rope.yarn.attn_factor = attn_factor

    def kv_store(self, *, uintptr_t k, uintptr_t v, int64_t n_kv_heads, int64_t head_dim, int64_t layer):
        """The k, v rows into the layer's cache at the run's position."""
        cdef Step *s = self._next(STEP_KV_STORE)
        s.a.kv_store.k, s.a.kv_store.v = <const float *> ptr(k), <const float *> ptr(v)
        s.a.kv_store.n_kv_heads, s.a.kv_store.head_dim, s.a.kv_store.layer = n_kv_heads, head_dim, layer

    def attention(self, *, uintptr_t q, uintptr_t y, uintptr_t scratch, int64_t n_heads, int64_t n_kv_heads,
                  int64_t head_dim, int64_t window, int64_t layer, int64_t scratch_floats, float scale,
                  float softcap=0.0):
        """y = causal attention of q over the layer's cache, positions 0 .. the run's (scratch:
        (threads, scratch_floats)); softcap > 0 caps the scores (Gemma 2)."""
        cdef Step *s = self._next(STEP_ATTENTION)
        s.a.attention.q, s.a.attention.y = <const float *> ptr(q), <float *> ptr(y)
        s.a.attention.scratch = <float *> ptr(scratch)
        s.a.attention.n_heads, s.a.attention.n_kv_heads, s.a.attention.head_dim = n_heads, n_kv_heads, head_dim
        s.a.attention.window, s.a.attention.layer, s.a.attention.scratch_floats = window, layer, scratch_floats
        s.a.attention.seq, s.a.attention.start, s.a.attention.capacity = 1, -1, 0
        s.a.attention.scale, s.a.attention.softcap = scale, softcap

    def glu(self, *, uintptr_t x, uintptr_t y, int64_t F, bint gated, int64_t rows=1):
        """y (rows, F) = silu(x[:, :F]) * x[:, F:] (gated, swiglu) or silu(x), row by row."""
        cdef Step *s = self._next(STEP_GLU)
        s.a.glu.x, s.a.glu.y = <const float *> ptr(x), <float *> ptr(y)
        s.a.glu.F, s.a.glu.rows, s.a.glu.gated = F, rows, gated
        s.a.glu.x_stride, s.a.glu.y_stride = (2 if gated else 1) * F, F

    def gelu(self, *, uintptr_t x, uintptr_t y, int64_t count, bint tanh):
        """y (count,) = gelu(x), exact or the tanh approximation; y may be x."""
        cdef Step *s = self._next(STEP_GELU)
        s.a.elem.x, s.a.elem.y, s.a.elem.count, s.a.elem.fn = ptr(x), ptr(y), count, <int32_t>tanh

    # ---------------------------------------------------------- elementwise steps
    def unary(self, *, uintptr_t x, uintptr_t y, int64_t count, int fn, float alpha=0.0, float beta=0.0):
        """y (count,) = fn(x), fn one of UNARY_FNS (an FN_* code; alpha, beta its parameters); y may be x."""
        if fn not in UNARY_FNS:
            raise ValueError(f"unary: no unary step for function code {fn}")
        cdef Step *s = self._next(STEP_UNARY)
        s.a.elem.x, s.a.elem.y, s.a.elem.count, s.a.elem.fn = ptr(x), ptr(y), count, fn
        s.a.elem.alpha, s.a.elem.beta = alpha, beta

    def binary(self, *, uintptr_t a, uintptr_t b, uintptr_t y, int64_t count, int op, int64_t b_count=0,
               int64_t b_div=1, int act=0):
        """y (count,) = a op b[(i / b_div) % b_count] (b_count 0: b[i]), a BIN_* code, then act (FN_NONE,
        FN_RELU or FN_RELU6)."""
        cdef Step *s = self._next(STEP_BINARY)
        s.a.binary.a, s.a.binary.b, s.a.binary.y = <const float *> ptr(a), <const float *> ptr(b), <float *> ptr(y)
        s.a.binary.count, s.a.binary.b_count, s.a.binary.b_div = count, b_count, b_div
        s.a.binary.op, s.a.binary.act = op, act

    def quantize_i8(self, *, uintptr_t x, uintptr_t y, int64_t count, float scale, int zero_point):
        """int8 y (count,) = clamp(round_half_away(x / scale) + zero_point)."""
        cdef Step *s = self._next(STEP_QUANTIZE_I8)
        s.a.elem.x, s.a.elem.y, s.a.elem.count, s.a.elem.fn, s.a.elem.alpha = ptr(x), ptr(y), count, zero_point, scale

    def dequantize_i8(self, *, uintptr_t x, uintptr_t y, int64_t count, float scale, int zero_point):
        """float y (count,) = scale * (int8 x - zero_point)."""
        cdef Step *s = self._next(STEP_DEQUANTIZE_I8)
        s.a.elem.x, s.a.elem.y, s.a.elem.count, s.a.elem.fn, s.a.elem.alpha = ptr(x), ptr(y), count, zero_point, scale

    def copy_rows(self, *, uintptr_t src, uintptr_t dst, int64_t rows, int64_t row_bytes, int64_t src_stride,
                  int64_t dst_stride, int64_t dst_offset=0, bint zero_rest=False):
        """Byte rows of src into dst at dst_offset (zero_rest: zero the rest of each dst row)."""
        cdef Step *s = self._next(STEP_COPY_ROWS)
        s.a.copy.src, s.a.copy.dst = <const uint8_t *> ptr(src), <uint8_t *> ptr(dst)
        s.a.copy.rows, s.a.copy.row_bytes, s.a.copy.src_stride = rows, row_bytes, src_stride
        s.a.copy.dst_stride, s.a.copy.dst_offset, s.a.copy.zero_rest = dst_stride, dst_offset, zero_rest

    def gather(self, *, uintptr_t x, uintptr_t view, uintptr_t y, int64_t rows):
        """y (contiguous) = the float32 elements of a strided view of x; view: int64 (ndim, shape[ndim],
        element strides[ndim])."""
        cdef Step *s = self._next(STEP_GATHER)
        s.a.gather.x, s.a.gather.view = <const float *> ptr(x), <const int64_t *> ptr(view)
        s.a.gather.y, s.a.gather.rows = <float *> ptr(y), rows

    # ------------------------------------------------------------- window steps
    def conv_f32(self, *, uintptr_t x, uintptr_t w, uintptr_t bias, uintptr_t y, uintptr_t scratch, tuple window,
                 int64_t cout, int64_t ldc=0, int64_t per_thread=0, int act=0, int64_t cparts=1, int64_t pixels=0,
                 int64_t band=0, int64_t ldx=0, int64_t ldy=0):
        """y = act(conv(x, w packed by sgemm_pack) + bias): im2col rows of ldc floats in scratch (ldc 0:
        a 1x1 stride-1 unpadded conv reading x's rows, ldx floats apart: 0, c); items: blocks of `pixels`
        output pixels, each in cparts ranges of output channels. band > 0 (unit column dilation): items
        are bands of `band` output rows instead, each convolved from a padded copy of its input rows in
        scratch (per_thread floats: cpu.conv_band_floats). y's pixels ldy floats apart (0: cout).
        window = (n, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, pad_top, pad_left)."""
        if (ldc != 0 or band != 0) and ldx != 0:
            raise ValueError("conv_f32: an im2col or banded conv reads contiguous pixels (ldx 0)")
        cdef Step *s = self._next(STEP_CONV_F32)
        self._window(s, window, cout, None, ldc, per_thread, act, cparts, pixels, band, ldx, ldy)
        self._operands(s, x, w, bias, y, scratch)

    def dwconv_f32(self, *, uintptr_t x, uintptr_t w, uintptr_t bias, uintptr_t y, tuple window, int64_t cout,
                   int act=0, int64_t ldx=0):
        """Depthwise (multiplier 1) y = act(conv(x, w (kh*kw, C)) + bias), x's pixels ldx floats apart (0:
        C); items: output rows."""
        cdef Step *s = self._next(STEP_DWCONV_F32)
        self._window(s, window, cout, None, 0, 0, act, 1, 0, 0, ldx, 0)
        self._operands(s, x, w, bias, y, 0)

    def fold_activation(self, int fn, uintptr_t y):
        """Whether the last step, a CONV_F32 or DWCONV_F32 with no activation writing y, now applies fn
        (FN_SILU or FN_HARD_SWISH) in place to each block it writes."""
        if self.n == 0 or (fn != FN_SILU and fn != FN_HARD_SWISH):
            return False
        cdef Step *s = &self.steps[self.n - 1]
        if (s.kind != STEP_CONV_F32 and s.kind != STEP_DWCONV_F32) or s.w.act != FN_NONE or <uintptr_t> s.a.win.y != y:
            return False
        self.windows[self.n - 1].act = fn
        return True

    def fold_residual(self, uintptr_t y, uintptr_t r, int act):
        """Whether the last step, a CONV_F32 (or DWPW_F32 / EXDWPW_F32: its 1x1 conv) with no
        activation writing y, now adds r (the same shape) to each block it writes, then applies act
        (FN_NONE, FN_RELU or FN_RELU6): a residual add y = act(y + r) run in place on the conv's output."""
        if self.n == 0 or act not in (FN_NONE, FN_RELU, FN_RELU6):
            return False
        cdef Step *s = &self.steps[self.n - 1]
        cdef int conv_act
        if s.kind == STEP_CONV_F32:
            conv_act = s.w.act
        elif s.kind == STEP_DWPW_F32 or s.kind == STEP_EXDWPW_F32:
            conv_act = s.w.pw.act
        else:
            return False
        if conv_act != FN_NONE or s.w.residual != NULL or s.w.ldy != 0 or <uintptr_t> s.a.win.y != y:
            return False
        self.windows[self.n - 1].residual = <const float *> r
        self.windows[self.n - 1].residual_act = act
        return True

    def dwpw_f32(self, *, uintptr_t x, uintptr_t w, uintptr_t bias, uintptr_t y, uintptr_t scratch, tuple window,
                 int64_t cout, int64_t per_thread, int act, tuple pointwise, int64_t cparts=1, int64_t ldx=0,
                 int64_t ldy=0):
        """A depthwise conv's output rows (w (kh*kw, C), bias; x's pixels ldx floats apart, 0: C) through
        the thread's scratch (ow * C floats) into the 1x1 conv `pointwise` = (packed, bias, cout, act)
        (its channels in cparts parts; y's pixels ldy floats apart, 0: its cout)."""
        cdef Step *s = self._next(STEP_DWPW_F32)
        cdef Window *win = self._window(s, window, cout, None, 0, per_thread, act, cparts, 0, 0, ldx, ldy)
        win.pw = pointwise_of(pointwise, None)
        self._operands(s, x, w, bias, y, scratch)

    def exdwpw_f32(self, *, uintptr_t x, uintptr_t w, uintptr_t bias, uintptr_t y, uintptr_t scratch, tuple window,
                   int64_t cout, int64_t band, int64_t per_thread, int act, tuple pointwise, tuple expand,
                   int64_t in_channels):
        """DWPW whose depthwise input rows come from a 1x1 conv `expand` = (packed, bias, cout, act) of x
        (in_channels): items are bands of `band` depthwise output rows of an image."""
        cdef Step *s = self._next(STEP_EXDWPW_F32)
        cdef Window *win = self._window(s, window, cout, None, band, per_thread, act)
        win.pw = pointwise_of(pointwise, None)
        win.ex = pointwise_of(expand, None)
        self._operands(s, x, w, bias, y, scratch)
        s.a.win.in_channels = in_channels

    def qconv(self, *, uintptr_t x, uintptr_t w, uintptr_t wsum, uintptr_t y, uintptr_t scratch, tuple window,
              int64_t cout, tuple requant, int64_t ldc, int64_t per_thread, int64_t cparts=1, int64_t pixels=0):
        """int8 y = requant(conv(x, w packed by qgemm_pack)); wsum: the row sums or 0 (folded into the bias);
        im2col rows of ldc bytes (K rounded up to 4) in scratch; items as conv_f32's. requant = (bias,
        multiplier, shift addresses, zp_in, zp_out, lo, hi)."""
        cdef Step *s = self._next(STEP_QCONV)
        self._window(s, window, cout, requant, ldc, per_thread, 0, cparts, pixels)
        self._operands(s, x, w, wsum, y, scratch)

    def qdwconv(self, *, uintptr_t x, uintptr_t w, uintptr_t y, tuple window, int64_t cout, tuple requant):
        """int8 y = requant(depthwise conv(x, w (kh*kw, C) int16)); items: output rows."""
        cdef Step *s = self._next(STEP_QDWCONV)
        self._window(s, window, cout, requant)
        self._operands(s, x, w, 0, y, 0)

    def qdwpw(self, *, uintptr_t x, uintptr_t w, uintptr_t y, uintptr_t scratch, tuple window, int64_t cout,
              tuple requant, int64_t band, int64_t per_thread, tuple pointwise, tuple pw_requant, int64_t cparts=1):
        """DWPW in int8 on bands of `band` depthwise rows: each band requantized into scratch (band * ow * C
        bytes), offset to u8 and multiplied by one int8 GEMM (`pointwise` = (packed, 0, cout, 0, row sums or
        0), pw_requant)."""
        cdef Step *s = self._next(STEP_QDWPW)
        cdef Window *win = self._window(s, window, cout, requant, band, per_thread, 0, cparts)
        win.pw = pointwise_of(pointwise, pw_requant)
        self._operands(s, x, w, 0, y, scratch)

    def qavg_pool(self, *, uintptr_t x, uintptr_t y, tuple window, int lo, int hi):
        """int8 y = average pool of x over in-image taps, clamped to [lo, hi]; items: output rows."""
        cdef Step *s = self._next(STEP_QAVG_POOL)
        self._window(s, window, window[3], (0, 0, 0, 0, 0, lo, hi))
        self._operands(s, x, 0, 0, y, 0)

    def qmax_pool(self, *, uintptr_t x, uintptr_t y, tuple window, int lo, int hi):
        """int8 y = max pool of x over in-image taps, clamped to [lo, hi]; items: output rows."""
        cdef Step *s = self._next(STEP_QMAX_POOL)
        self._window(s, window, window[3], (0, 0, 0, 0, 0, lo, hi))
        self._operands(s, x, 0, 0, y, 0)

    def qbinary(self, *, uintptr_t a, uintptr_t b, uintptr_t y, int64_t count, bint mul, tuple zero_points,
                tuple requant, int lo, int hi, int64_t b_count=0, int64_t b_div=1):
        """int8 y = a + b (TFLite's ADD / SUB rescaling, requant = (m_a, shift_a, m_b, shift_b, m_y, shift_y))
        or a * b (``mul``, requant = (m, shift)); zero_points = (a, b, y); b broadcast as the binary step's."""
        cdef Step *s = self._next(STEP_QBINARY)
        cdef int k
        s.a.qbinary.a, s.a.qbinary.b, s.a.qbinary.y = <const int8_t *> ptr(a), <const int8_t *> ptr(b), <int8_t *> ptr(y)
        s.a.qbinary.count, s.a.qbinary.b_count, s.a.qbinary.b_div = count, b_count, b_div
        s.a.qbinary.op = QBIN_MUL if mul else QBIN_ADD
        for k in range(3):
            s.a.qbinary.zp[k] = zero_points[k]
        for k in range(6):
            s.a.qbinary.rq[k] = requant[k] if k < len(requant) else 0
        s.a.qbinary.lo, s.a.qbinary.hi = lo, hi

    def qlookup(self, *, uintptr_t x, uintptr_t table, uintptr_t y, int64_t count):
        """int8 y = table[x + 128] over count elements (table (256,))."""
        cdef Step *s = self._next(STEP_QLOOKUP)
        s.a.qlookup.x, s.a.qlookup.table = <const int8_t *> ptr(x), <const int8_t *> ptr(table)
        s.a.qlookup.y, s.a.qlookup.count = <int8_t *> ptr(y), count

    def max_pool(self, *, uintptr_t x, uintptr_t y, tuple window, int64_t ldy=0):
        """f32 y = max pool of x (padding never wins), y's pixels ldy floats apart (0: C); items: output
        rows."""
        cdef Step *s = self._next(STEP_MAX_POOL)
        self._window(s, window, window[3], None, 0, 0, 0, 1, 0, 0, 0, ldy)
        self._operands(s, x, 0, 0, y, 0)

    def avg_pool(self, *, uintptr_t x, uintptr_t y, tuple window, bint include_pad, int64_t ldy=0):
        """f32 y = average pool of x (tap sums in order, / the in-image count or kh*kw), y's pixels ldy
        floats apart (0: C); items: output rows."""
        cdef Step *s = self._next(STEP_AVG_POOL)
        self._window(s, window, window[3], None, 0, 0, 0, 1, 0, 0, 0, ldy)
        self._operands(s, x, 0, 0, y, 0)
        s.a.win.include_pad = include_pad

    def qsoftmax(self, *, uintptr_t x, uintptr_t table, uintptr_t y, int64_t rows, int64_t n, int zp_out,
                 float out_scale):
        """int8 y = TFLite's softmax of int8 rows of n, exp table (256,)."""
        cdef Step *s = self._next(STEP_QSOFTMAX)
        s.a.softmax_i8.x, s.a.softmax_i8.table = <const int8_t *> ptr(x), <const float *> ptr(table)
        s.a.softmax_i8.y, s.a.softmax_i8.rows, s.a.softmax_i8.n = <int8_t *> ptr(y), rows, n
        s.a.softmax_i8.zp_out, s.a.softmax_i8.out_scale = zp_out, out_scale

    def global_avg(self, *, uintptr_t x, uintptr_t y, int64_t N, int64_t HW, int64_t C):
        """y (N, C) = mean of x (N, HW, C) over HW, summed in double."""
        cdef Step *s = self._next(STEP_GLOBAL_AVG)
        s.a.global_avg.x, s.a.global_avg.y = <const float *> ptr(x), <float *> ptr(y)
        s.a.global_avg.N, s.a.global_avg.HW, s.a.global_avg.C = N, HW, C

    cdef void _operands(self, Step *s, uintptr_t x, uintptr_t w, uintptr_t extra, uintptr_t y, uintptr_t scratch):
        s.a.win.x, s.a.win.w, s.a.win.extra, s.a.win.y, s.a.win.scratch = ptr(x), ptr(w), ptr(extra), ptr(y), ptr(scratch)

    # ------------------------------------------------------------------ operands
    def operands(self, int64_t step):
        """Step `step`'s tensor operand addresses: (input 0, input 1, input 2, output), 0 where unused."""
        if not 0 <= step < self.n:
            raise ValueError("step out of range")
        cdef const Operands *o = &self.steps[step].a.ops
        return (<uintptr_t> o.in0, <uintptr_t> o.in1, <uintptr_t> o.in2, <uintptr_t> o.out)

    def point(self, int64_t step, int port, object array, int64_t offset):
        """Point `step`'s input operand `port` (0-2) at byte `offset` of contiguous `array` (the caller
        keeps it alive and unchanged while the steps run)."""
        cdef Py_buffer view
        if not 0 <= step < self.n or not 0 <= port <= 2:
            raise ValueError("step or port out of range")
        PyObject_GetBuffer(array, &view, PyBUF_ANY_CONTIGUOUS)
        cdef const char *at = <const char *> view.buf + offset
        cdef bint inside = 0 <= offset < view.len
        PyBuffer_Release(&view)
        if not inside:
            raise ValueError("offset outside the array")
        cdef Operands *o = &self.steps[step].a.ops
        if port == 0:
            o.in0 = at
        elif port == 1:
            o.in1 = at
        else:
            o.in2 = at

    # ------------------------------------------------------------------- running
    def bind_cache(self, list keys, list values, int64_t capacity):
        """Per-layer addresses of the KV cache arrays, each (n_kv_heads, capacity, head_dim)."""
        cdef int64_t i
        for i in range(self.layers):
            self.k_cache[i] = <float *> ptr(keys[i])
            self.v_cache[i] = <float *> ptr(values[i])
        self.kv_capacity = capacity

    def run(self, int64_t token, int64_t pos, double[::1] times=None, int nthreads=0):
        """Run every step for one token at position pos on min(nthreads, get_num_threads()) threads
        (0: all of those); times (len(self)) gets per-step seconds."""
        cdef RunInput inp
        inp.token, inp.pos, inp.capacity = token, pos, self.kv_capacity
        inp.k_cache, inp.v_cache = self.k_cache, self.v_cache
        cdef double *tp = NULL if times is None else &times[0]
        cdef int nt = _nthreads if nthreads <= 0 else max(1, min(nthreads, _nthreads))
        cdef int rc = 0
        with nogil:
            rc = team_run(self.steps, self.n, &inp, nt, tp)
            if rc == TEAM_BUSY:                                 # another thread's plan has the team
                run_steps(self.steps, self.n, &inp, nt, &self.sync, 0, tp)
        if rc < 0:
            raise MemoryError("step plan run counters")

    def run_range(self, int nthreads, double[::1] times=None, int64_t start=0, int64_t stop=-1):
        """Run steps [start, stop) (stop -1: to the end) once, for a graph without a KV cache, on
        min(nthreads, get_num_threads()) threads; times (len(self)) gets per-step seconds."""
        cdef RunInput inp
        memset(&inp, 0, sizeof(inp))
        cdef int nt = max(1, min(nthreads, _nthreads))
        if stop < 0 or stop > self.n:
            stop = self.n
        if start < 0 or start > stop:
            raise ValueError("step range")
        cdef double *tp = NULL if times is None else &times[start]
        cdef int rc = 0
        with nogil:
            rc = team_run(self.steps + start, stop - start, &inp, nt, tp)
            if rc == TEAM_BUSY:                                 # another thread's plan has the team
                run_steps(self.steps + start, stop - start, &inp, nt, &self.sync, start, tp)
        if rc < 0:
            raise MemoryError("step plan run counters")
