# Per-op entry points (volvox.kernels validates every argument first): each call is a plan of one
# or two steps built on the stack and run by the same runner, so a kernel's work split is written
# once, in its step kind. A call too small to be worth a second thread runs on one, without an
# OpenMP region.
from cython.parallel cimport prange
from libc.math cimport tanhf
from volvox._kernels.vx cimport (
    VX_NTYPES, VX_Q4_1, VX_Q5_0, VX_Q5_1, VX_Q8_0, VX_QK, VX_QK_K, vx_attn_scratch_floats, vx_il_block_bytes, vx_il_group_bytes,
    vx_is_kquant, vx_qgemm_packed_bytes, vx_sgemm_packed_floats)

include "il_pack_kquants.pxi"

cdef enum:
    MIN_PARALLEL_MACS = 1 << 16   # below this many multiply-adds a call runs on one thread (fork/join ~us)


cdef inline int threads_for(int64_t macs) noexcept nogil:
    return _nthreads if macs >= MIN_PARALLEL_MACS else 1


cdef void run_local(Step *steps, int64_t n, int team) noexcept nogil:
    """Run a per-op call's steps (at most 4) with counters on this thread's stack."""
    cdef StackSync space
    cdef StepSync sync = stack_sync(&space)
    cdef RunInput inp
    memset(&inp, 0, sizeof(inp))
    run_steps(steps, n, &inp, team, &sync, 0, NULL)


def act_row_bytes(int wtype, int64_t K):
    """Scratch bytes per activation row for weights of type `wtype` (0 for f32 / f16)."""
    return vx_act_row_bytes(wtype, K)


def attention_scratch_floats(int64_t total, int64_t head_dim, int64_t group):
    """Scratch floats attention() needs per thread for `total` cached positions and `group` query heads
    per kv head."""
    return vx_attn_scratch_floats(total, head_dim, group)


def sgemm_packed_floats(int64_t K, int64_t n):
    """Floats sgemm_pack writes for n rows of K."""
    return vx_sgemm_packed_floats(K, n)


def qgemm_packed_bytes(int64_t K, int64_t n):
    """Bytes qgemm_pack writes for n int8 rows of K."""
    return vx_qgemm_packed_bytes(K, n)


# ------------------------------------------------------------------ sequence kernels
def gemm(int wtype, const uint8_t[:, ::1] w, int64_t K, const float[:, ::1] x, float[:, ::1] y,
         uint8_t[::1] scratch):
    """y (M, N) = x (M, K) @ W.T, W given as N rows of bytes (quant blocks, f32 or f16): the activation
    rows quantized into scratch (M * act_row_bytes(wtype, K) bytes; unused for f32 / f16), then
    16-row chunks of W against all of them."""
    if x.shape[0] == 0 or w.shape[0] == 0:
        return
    run_gemm(wtype, &w[0, 0], w.shape[1], 0, K, w.shape[0], &x[0, 0], x.shape[0], &y[0, 0],
             &scratch[0] if scratch.shape[0] else NULL)


cdef void run_gemm(int wtype, const uint8_t *w, int64_t row_bytes, int64_t group_bytes, int64_t K, int64_t N,
                   const float *x, int64_t M, float *y, uint8_t *scratch):
    """The steps of gemm / gemm_il: the act rows quantized into scratch (quantized wtype), then 16-row
    chunks of W (N rows of row_bytes, or interleaved groups of group_bytes) against all of them."""
    cdef Step steps[2]
    memset(steps, 0, sizeof(steps))
    cdef int64_t act = vx_act_row_bytes(wtype, K), n = 0
    if act:
        steps[0].kind = STEP_QUANTIZE_ACT
        steps[0].a.quantize_act.x, steps[0].a.quantize_act.act = x, scratch
        steps[0].a.quantize_act.K, steps[0].a.quantize_act.rows = K, M
        steps[0].a.quantize_act.act_stride, steps[0].a.quantize_act.wtype = act, wtype
        n = 1
    cdef Step *lin = &steps[n]
    lin.kind = STEP_LINEAR
    lin.a.linear.x = <const void *> scratch if act else <const void *> x
    lin.a.linear.w, lin.a.linear.bias, lin.a.linear.y = w, NULL, y
    lin.a.linear.K, lin.a.linear.N, lin.a.linear.row_bytes, lin.a.linear.rows = K, N, row_bytes, M
    lin.a.linear.x_stride = act if act else K * <int64_t>sizeof(float)
    lin.a.linear.group_bytes, lin.a.linear.wtype = group_bytes, wtype
    with nogil:
        run_local(steps, n + 1, threads_for(M * N * K))


def il_rows(int wtype):
    """Rows per interleaved group of `wtype` weights on this tier (vx.pxd); 0: not interleaved here."""
    return _tbl.il_rows if 0 <= wtype < VX_NTYPES and _tbl.gemm_il[wtype] != NULL else 0


def il_group_bytes(int wtype, int64_t K):
    """Bytes of one interleaved group of K-column `wtype` rows on this tier (0: not interleaved here)."""
    return vx_il_group_bytes(wtype, _tbl.il_rows, K) if il_rows(wtype) else 0


def il_pack(int wtype, const uint8_t[:, ::1] w, int64_t K, uint8_t[::1] out):
    """out = the N rows of w (quantized `wtype`, K columns) interleaved il_rows at a time (vx.pxd);
    out holds ceil(N / il_rows) * il_group_bytes(wtype, K) bytes, rows past N zero."""
    cdef int R = il_rows(wtype)
    cdef int64_t N = w.shape[0], gb = il_group_bytes(wtype, K)
    cdef int64_t row_bytes = ((K // VX_QK_K) * kquant_block_bytes(wtype) if vx_is_kquant(wtype)
                              else (K // VX_QK) * vx_il_block_bytes(wtype, 1))
    if R == 0 or K % (VX_QK_K if vx_is_kquant(wtype) else VX_QK) or w.shape[1] != row_bytes:
        raise ValueError(f"il_pack: weight type {wtype} with K={K} and rows of {w.shape[1]} bytes")
    if out.shape[0] != ((N + R - 1) // R) * gb:
        raise ValueError(f"il_pack: out holds {out.shape[0]} bytes, not {((N + R - 1) // R) * gb}")
    with nogil:
        if vx_is_kquant(wtype):
            il_pack_kquant_rows(wtype, K, &w[0, 0] if N else NULL, w.shape[1], N, R, &out[0] if N else NULL)
        else:
            il_pack_rows(wtype, K, &w[0, 0] if N else NULL, w.shape[1], N, R, &out[0] if N else NULL)


cdef void il_pack_rows(int wtype, int64_t K, const uint8_t *w, int64_t w_stride, int64_t N, int R,
                       uint8_t *out) noexcept nogil:
    """il_pack's loop: for each group and block, the rows' scales (and q4_1 / q5_1 mins, q5's 5th bits)
    then lane by lane the rows' 4-byte groups (q8_0 bytes + 128)."""
    cdef int64_t nb = K // VX_QK, bsz = vx_il_block_bytes(wtype, 1), sb = vx_il_block_bytes(wtype, R)
    cdef int64_t g, b, row
    cdef int r, l, lanes = 8 if wtype == VX_Q8_0 else 4
    cdef bint has_m = wtype == VX_Q4_1 or wtype == VX_Q5_1
    cdef bint has_qh = wtype == VX_Q5_0 or wtype == VX_Q5_1
    cdef int qhsrc = 4 if has_m else 2                         # q5: qh offset in a plain block
    cdef int qsrc = qhsrc + (4 if has_qh else 0)               # qs offset in a plain block
    cdef int64_t qdst = qsrc * R                               # qs offset in an interleaved block
    cdef uint32_t flip = 0x80808080u if wtype == VX_Q8_0 else 0, v, qh
    cdef const uint8_t *src
    cdef uint8_t *dst
    memset(out, 0, ((N + R - 1) // R) * nb * sb)
    for row in range(N):
        g, r = row // R, row % R
        for b in range(nb):
            src = w + row * w_stride + b * bsz
            dst = out + (g * nb + b) * sb
            memcpy(dst + 2 * r, src, 2)                        # d
            if has_m:
                memcpy(dst + 2 * R + 2 * r, src + 2, 2)        # m
            if has_qh:                                         # lane l, half h: bits 4r .. 4r+3 of its mask (vx.pxd)
                memcpy(&qh, src + qhsrc, 4)
                for l in range(8):                             # l: lane l // 2, half l % 2
                    dst[qhsrc * R + l * (R // 2) + r // 2] |= <uint8_t>(
                        ((qh >> (4 * (l // 2) + 16 * (l % 2))) & 0x0F) << (4 * (r % 2)))
            for l in range(lanes):
                memcpy(&v, src + qsrc + 4 * l, 4)
                v ^= flip
                memcpy(dst + qdst + (l * R + r) * 4, &v, 4)


def gemm_il(int wtype, const uint8_t[::1] packed, int64_t K, int64_t N, const float[:, ::1] x, float[:, ::1] y,
            uint8_t[::1] scratch):
    """y (M, N) = x (M, K) @ W.T, W interleaved by il_pack: the act rows quantized into scratch (M *
    act_row_bytes(wtype, K) bytes), then one group at a time (what a plan's linear step runs)."""
    cdef int64_t M = x.shape[0], act = vx_act_row_bytes(wtype, K), gb = il_group_bytes(wtype, K)
    if gb == 0 or LINEAR_CHUNK % _tbl.il_rows or x.shape[1] != K or y.shape[0] != M or y.shape[1] != N:
        raise ValueError(f"gemm_il: weight type {wtype}, x {x.shape[0]}x{x.shape[1]}, y {y.shape[0]}x{y.shape[1]}")
    if packed.shape[0] != ((N + _tbl.il_rows - 1) // _tbl.il_rows) * gb or scratch.shape[0] < M * act:
        raise ValueError("gemm_il: packed or scratch has the wrong size")
    if M == 0 or N == 0:
        return
    run_gemm(wtype, &packed[0], 0, gb, K, N, &x[0, 0], M, &y[0, 0], &scratch[0])


def quantize_act(int wtype, const float[:, ::1] x, uint8_t[:, ::1] out):
    """out[i] = the act row of x[i] for weights of (quantized) type `wtype` (the caller checked K and
    out's shape (M, act_row_bytes(wtype, K)))."""
    cdef Step s
    memset(&s, 0, sizeof(s))
    if x.shape[0] == 0:
        return
    s.kind = STEP_QUANTIZE_ACT
    s.a.quantize_act.x, s.a.quantize_act.act = &x[0, 0], &out[0, 0]
    s.a.quantize_act.K, s.a.quantize_act.rows, s.a.quantize_act.act_stride = x.shape[1], x.shape[0], out.shape[1]
    s.a.quantize_act.wtype = wtype
    with nogil:
        run_local(&s, 1, 1)


def embedding(int wtype, const uint8_t[:, ::1] table, int64_t D, const long long[::1] ids, float[:, ::1] out):
    """out[s] = dequantized table row ids[s]. Returns the position of the first out-of-range id, or -1
    (then nothing was written)."""
    cdef int64_t S = ids.shape[0], V = table.shape[0], i
    for i in range(S):
        if ids[i] < 0 or ids[i] >= V:
            return i
    if S == 0:
        return -1
    cdef Step s
    memset(&s, 0, sizeof(s))
    s.kind = STEP_EMBED
    s.a.embed.table, s.a.embed.ids, s.a.embed.y = &table[0, 0], <const int64_t *> &ids[0], &out[0, 0]
    s.a.embed.dim, s.a.embed.row_bytes, s.a.embed.vocab, s.a.embed.rows = D, table.shape[1], V, S
    s.a.embed.wtype = wtype
    with nogil:
        run_local(&s, 1, threads_for(S * D * 16))
    return -1


cdef void run_norm(StepKind kind, const float[:, ::1] x, const float *weight, const float *bias, float eps,
                   float[:, ::1] out):
    """An RMS_NORM / LAYER_NORM step over x's rows."""
    cdef int64_t M = x.shape[0], D = x.shape[1]
    if M == 0 or D == 0:
        return
    cdef Step s
    memset(&s, 0, sizeof(s))
    s.kind = kind
    s.a.norm.x, s.a.norm.weight, s.a.norm.bias, s.a.norm.y = &x[0, 0], weight, bias, &out[0, 0]
    s.a.norm.dim, s.a.norm.rows, s.a.norm.eps = D, M, eps
    with nogil:
        run_local(&s, 1, threads_for(M * D * 16))


def rms_norm(const float[:, ::1] x, const float[::1] weight, float eps, float[:, ::1] out):
    """out[i] = x[i] / sqrt(mean(x[i]^2) + eps) * weight, row by row."""
    run_norm(STEP_RMS_NORM, x, &weight[0], NULL, eps, out)


def layer_norm(const float[:, ::1] x, const float[::1] weight, bias, float eps, float[:, ::1] out):
    """out[i] = (x[i] - mean) / sqrt(var + eps) * weight (+ bias), row by row (bias: None or float32 (D,))."""
    cdef const float[::1] b
    cdef const float *bp = NULL
    if bias is not None:
        b = bias
        bp = &b[0]
    run_norm(STEP_LAYER_NORM, x, &weight[0], bp, eps, out)


def gelu(const float[::1] x, float[::1] y, bint tanh_approx):
    """y = gelu(x) (exact, or the tanh approximation); y may be x."""
    cdef int64_t n = x.shape[0]
    if n == 0:
        return
    cdef Step s
    memset(&s, 0, sizeof(s))
    s.kind = STEP_GELU
    s.a.elem.x, s.a.elem.y, s.a.elem.count, s.a.elem.fn = &x[0], &y[0], n, <int32_t>tanh_approx
    with nogil:
        run_local(&s, 1, threads_for(n * 32))


def unary(int fn, const float[::1] x, float[::1] y, float alpha, float beta):
    """y = fn(x), fn one of UNARY_FNS (an FN_* code; alpha, beta its parameters); y may be x."""
    if fn not in UNARY_FNS:
        raise ValueError(f"unary: no unary step for function code {fn}")
    cdef int64_t n = x.shape[0]
    if n == 0:
        return
    cdef Step s
    memset(&s, 0, sizeof(s))
    s.kind = STEP_UNARY
    s.a.elem.x, s.a.elem.y, s.a.elem.count, s.a.elem.fn = &x[0], &y[0], n, fn
    s.a.elem.alpha, s.a.elem.beta = alpha, beta
    with nogil:
        run_local(&s, 1, threads_for(n * 8))


def attention(const float[:, ::1] q, const float[:, :, ::1] kc, const float[:, :, ::1] vc, int64_t start,
              int64_t n_heads, int64_t window, float scale, float[:, ::1] out, float[::1] scratch,
              int64_t keys=0, float softcap=0.0):
    """out (seq, n_heads*hd) = causal GQA attention of q (seq, n_heads*hd) over the cache kc, vc
    (n_kv_heads, capacity, hd) whose first start+seq rows are filled, or with keys > 0 every row over
    rows 0..keys-1 (not causal); scratch: get_num_threads() * attention_scratch_floats(start + seq
    (keys when not causal), hd, n_heads / n_kv_heads) floats; softcap > 0 caps the scores (Gemma 2)."""
    cdef int64_t seq = q.shape[0], hd = kc.shape[2]
    if n_heads * seq == 0:
        return
    cdef Step s
    memset(&s, 0, sizeof(s))
    s.kind = STEP_ATTENTION
    s.a.attention.q, s.a.attention.k_cache, s.a.attention.v_cache = &q[0, 0], &kc[0, 0, 0], &vc[0, 0, 0]
    s.a.attention.y, s.a.attention.scratch = &out[0, 0], &scratch[0]
    s.a.attention.n_heads, s.a.attention.n_kv_heads, s.a.attention.head_dim = n_heads, kc.shape[0], hd
    s.a.attention.window, s.a.attention.scale, s.a.attention.softcap = window, scale, softcap
    cdef int64_t total = keys if keys > 0 else start + seq     # keys the last row sees
    s.a.attention.scratch_floats = vx_attn_scratch_floats(total, hd, n_heads // kc.shape[0])
    s.a.attention.seq, s.a.attention.start, s.a.attention.capacity = seq, start, kc.shape[1]
    s.a.attention.keys = keys
    with nogil:
        run_local(&s, 1, threads_for(n_heads * seq * total * hd * 4))


def swiglu(const float[:, ::1] x, float[:, ::1] y, bint gated):
    """gated: y[i] = silu(x[i, :F]) * x[i, F:] with F = y.shape[1] = x.shape[1] / 2; else y[i] =
    silu(x[i]) (y has x's shape)."""
    cdef int64_t M = x.shape[0], F = y.shape[1]
    if M == 0 or F == 0:
        return
    cdef Step s
    memset(&s, 0, sizeof(s))
    s.kind = STEP_GLU
    s.a.glu.x, s.a.glu.y, s.a.glu.F, s.a.glu.rows, s.a.glu.gated = &x[0, 0], &y[0, 0], F, M, gated
    s.a.glu.x_stride, s.a.glu.y_stride = x.shape[1], F
    with nogil:
        run_local(&s, 1, threads_for(M * F * 16))


def rope(const float[:, ::1] x, const long long[::1] pos, int64_t n_heads, int64_t head_dim, int64_t rope_dim,
         int interleaved, float base, float freq_scale, float[:, ::1] y, yarn=None):
    """y[i] = x[i] rotated for position pos[i] (heads of head_dim, their first rope_dim dims); yarn:
    None or (freq_factors float32 (rope_dim/2,) or None, ext_factor, corr_lo, corr_hi, attn_factor)."""
    cdef const float[::1] factors = None
    cdef int64_t M = x.shape[0]
    if M == 0:
        return
    cdef Step s
    memset(&s, 0, sizeof(s))
    s.kind = STEP_ROPE
    s.a.rope.x, s.a.rope.positions, s.a.rope.y = &x[0, 0], <const int64_t *> &pos[0], &y[0, 0]
    s.a.rope.n_heads, s.a.rope.head_dim, s.a.rope.rope_dim, s.a.rope.rows = n_heads, head_dim, rope_dim, M
    s.a.rope.base, s.a.rope.freq_scale, s.a.rope.interleaved = base, freq_scale, interleaved != 0
    if yarn is not None:
        factors = yarn[0]
        s.a.rope.scaled = True
        s.a.rope.yarn.freq_factors = &factors[0] if factors is not None else NULL
        s.a.rope.yarn.ext_factor, s.a.rope.yarn.corr_lo, s.a.rope.yarn.corr_hi, s.a.rope.yarn.attn_factor = yarn[1:]
    with nogil:
        run_local(&s, 1, threads_for(M * n_heads * rope_dim * 8))


# -------------------------------------------------------------------- vision kernels
def sgemm(const uint8_t[:, ::1] w, int64_t K, const float[:, ::1] x, float[:, ::1] y, float[::1] scratch,
          bint f16=False):
    """y (M, N) = x (M, K) @ W.T for f32 (or, f16, IEEE half) W given as N rows of bytes; each 32-row
    panel is packed into the thread's scratch then multiplied. scratch: get_num_threads() * 32 * K
    floats (f16: twice that, the panel's rows widened to f32 first, exactly)."""
    cdef int64_t M = x.shape[0], N = w.shape[0]
    if M == 0 or N == 0:
        return
    cdef Step s
    memset(&s, 0, sizeof(s))
    s.kind = STEP_SGEMM
    s.a.sgemm.x, s.a.sgemm.w, s.a.sgemm.y, s.a.sgemm.scratch = &x[0, 0], &w[0, 0], &y[0, 0], &scratch[0]
    s.a.sgemm.K, s.a.sgemm.N, s.a.sgemm.row_bytes, s.a.sgemm.rows = K, N, w.shape[1], M
    s.a.sgemm.per_thread, s.a.sgemm.f16 = SGEMM_PANEL * K * (2 if f16 else 1), f16
    with nogil:
        run_local(&s, 1, threads_for(M * N * K))


def sgemm_pack(const float[:, ::1] w, float[::1] packed):
    """packed = W (n, K) in 32-row panels (sgemm_packed_floats(K, n) floats)."""
    _tbl.conv.sgemm_pack(w.shape[1], <const uint8_t *> &w[0, 0], w.shape[1] * 4, w.shape[0], &packed[0])


def qgemm_pack(const int8_t[:, ::1] w, int8_t[::1] packed, int32_t[::1] wsum):
    """packed = int8 W (n, K) in qgemm panels; wsum[r] = sum of row r."""
    _tbl.conv.qgemm_pack(w.shape[1], &w[0, 0], w.shape[0], &packed[0], &wsum[0])


cdef Window window_of(tuple x_shape, tuple geo):
    """A per-op call's Window: x (n, h, w, c) and geo = (oh, ow, kh, kw, sh, sw, dh, dw, pad_top, pad_left)."""
    cdef Window w
    memset(&w, 0, sizeof(w))
    w.s = shape_of(x_shape + geo)
    return w


cdef vx_requant requant_args(const int32_t[::1] bias, const int32_t[::1] mult, const int32_t[::1] shift, tuple zps):
    cdef vx_requant rq
    rq.bias = &bias[0] if bias is not None else NULL
    rq.mult, rq.shift = &mult[0], &shift[0]
    rq.zp_in, rq.zp_out, rq.lo, rq.hi = zps
    return rq


def conv2d_f32(const float[:, :, :, ::1] x, const float[::1] packed, int64_t cout, tuple geo,
               const float[::1] bias, int act, bint direct, int64_t band, int64_t band_floats,
               float[:, :, :, ::1] y, float[::1] scratch):
    """y (N, OH, OW, cout) = act(conv(x, W) + bias), W packed by sgemm_pack as (cout, kh*kw*C); direct: a
    1x1 stride-1 unpadded conv (x rows are the GEMM rows); band > 0: bands of `band` output rows
    from padded copies of their input rows, scratch holding get_num_threads() * band_floats
    (cpu.conv_band_floats); else scratch holds get_num_threads() * CONV_PIXELS * kh*kw*C floats of im2col rows."""
    cdef Window w = window_of((x.shape[0], x.shape[1], x.shape[2], x.shape[3]), geo)
    cdef int64_t KK = w.s.kh * w.s.kw * w.s.c, P = w.s.n * w.s.oh * w.s.ow
    if P == 0 or cout == 0:
        return
    w.cout, w.ldc, w.per_thread, w.act, w.cparts = cout, 0 if direct else KK, CONV_PIXELS * KK, act, 1
    if band > 0:
        w.band = band
        w.per_thread = band_floats
    cdef Step s
    memset(&s, 0, sizeof(s))
    s.kind, s.w = STEP_CONV_F32, &w
    s.a.win.x, s.a.win.w, s.a.win.y = &x[0, 0, 0, 0], &packed[0], &y[0, 0, 0, 0]
    s.a.win.extra = &bias[0] if bias is not None else NULL
    s.a.win.scratch = &scratch[0] if scratch.shape[0] else NULL
    with nogil:
        run_local(&s, 1, threads_for(P * cout * KK))


def dwconv_f32(const float[:, :, :, ::1] x, const float[:, ::1] wt, tuple geo, const float[::1] bias, int act,
               float[:, :, :, ::1] y):
    """Depthwise (multiplier 1) y = act(conv(x, wt) + bias); wt (kh*kw, C)."""
    cdef Window w = window_of((x.shape[0], x.shape[1], x.shape[2], x.shape[3]), geo)
    cdef int64_t items = w.s.n * w.s.oh
    if items == 0 or w.s.ow == 0 or w.s.c == 0:
        return
    w.cout, w.act = w.s.c, act
    cdef Step s
    memset(&s, 0, sizeof(s))
    s.kind, s.w = STEP_DWCONV_F32, &w
    s.a.win.x, s.a.win.w, s.a.win.y = &x[0, 0, 0, 0], &wt[0, 0], &y[0, 0, 0, 0]
    s.a.win.extra = &bias[0] if bias is not None else NULL
    with nogil:
        run_local(&s, 1, threads_for(items * w.s.ow * w.s.c * w.s.kh * w.s.kw))


def qconv2d(const int8_t[:, :, :, ::1] x, const int8_t[::1] packed, const int32_t[::1] wsum, int64_t cout,
            tuple geo, const int32_t[::1] bias, const int32_t[::1] mult, const int32_t[::1] shift, tuple zps,
            int8_t[:, :, :, ::1] y, uint8_t[::1] scratch):
    """int8 y (N, OH, OW, cout) = requant(conv(x - zp_in, W) + bias), W packed by qgemm_pack as
    (cout, kh*kw*C); zps = (zp_in, zp_out, act_min, act_max); wsum: W's row sums, or None when bias
    already holds bias - (zp_in + 128) * wsum (kernels.fold_zero_point); scratch holds
    get_num_threads() * CONV_PIXELS * K4 bytes (K4 = kh*kw*C rounded up to 4)."""
    cdef Window w = window_of((x.shape[0], x.shape[1], x.shape[2], x.shape[3]), geo)
    cdef int64_t KK = w.s.kh * w.s.kw * w.s.c, K4 = (KK + 3) // 4 * 4, P = w.s.n * w.s.oh * w.s.ow
    if P == 0 or cout == 0:
        return
    w.rq = requant_args(bias, mult, shift, zps)
    w.cout, w.ldc, w.per_thread, w.cparts = cout, K4, CONV_PIXELS * K4, 1
    cdef Step s
    memset(&s, 0, sizeof(s))
    s.kind, s.w = STEP_QCONV, &w
    s.a.win.x, s.a.win.w, s.a.win.y, s.a.win.scratch = &x[0, 0, 0, 0], &packed[0], &y[0, 0, 0, 0], &scratch[0]
    s.a.win.extra = &wsum[0] if wsum is not None else NULL
    with nogil:
        run_local(&s, 1, threads_for(P * cout * KK))


def qdwconv(const int8_t[:, :, :, ::1] x, const int16_t[:, ::1] wt, tuple geo, const int32_t[::1] bias,
            const int32_t[::1] mult, const int32_t[::1] shift, tuple zps, int8_t[:, :, :, ::1] y):
    """Depthwise int8 (multiplier 1); wt (kh*kw, C) int16; zps as qconv2d."""
    cdef Window w = window_of((x.shape[0], x.shape[1], x.shape[2], x.shape[3]), geo)
    cdef int64_t items = w.s.n * w.s.oh
    if items == 0 or w.s.ow == 0 or w.s.c == 0:
        return
    w.rq = requant_args(bias, mult, shift, zps)
    w.cout = w.s.c
    cdef Step s
    memset(&s, 0, sizeof(s))
    s.kind, s.w = STEP_QDWCONV, &w
    s.a.win.x, s.a.win.w, s.a.win.y = &x[0, 0, 0, 0], &wt[0, 0], &y[0, 0, 0, 0]
    with nogil:
        run_local(&s, 1, threads_for(items * w.s.ow * w.s.c * w.s.kh * w.s.kw))


def quantize_i8(const float[::1] x, float scale, int zp, int8_t[::1] y):
    """y = clamp(round_half_away(x / scale) + zp) as int8."""
    cdef Step s
    memset(&s, 0, sizeof(s))
    if x.shape[0] == 0:
        return
    s.kind = STEP_QUANTIZE_I8
    s.a.elem.x, s.a.elem.y, s.a.elem.count, s.a.elem.fn, s.a.elem.alpha = &x[0], &y[0], x.shape[0], zp, scale
    with nogil:
        run_local(&s, 1, threads_for(x.shape[0] * 4))


def dequantize_i8(const int8_t[::1] x, float scale, int zp, float[::1] y):
    """y = scale * (x - zp)."""
    cdef Step s
    memset(&s, 0, sizeof(s))
    if x.shape[0] == 0:
        return
    s.kind = STEP_DEQUANTIZE_I8
    s.a.elem.x, s.a.elem.y, s.a.elem.count, s.a.elem.fn, s.a.elem.alpha = &x[0], &y[0], x.shape[0], zp, scale
    with nogil:
        run_local(&s, 1, threads_for(x.shape[0] * 2))


def qavg_pool2d(const int8_t[:, :, :, ::1] x, tuple geo, int lo, int hi, int8_t[:, :, :, ::1] y):
    """int8 average pool; geo = (oh, ow, kh, kw, sh, sw, pad_top, pad_left)."""
    cdef Window w = window_of((x.shape[0], x.shape[1], x.shape[2], x.shape[3]), geo[:6] + (1, 1) + geo[6:])
    w.rq.lo, w.rq.hi, w.cout = lo, hi, w.s.c
    if w.s.n * w.s.oh == 0:
        return
    cdef Step s
    memset(&s, 0, sizeof(s))
    s.kind, s.w = STEP_QAVG_POOL, &w
    s.a.win.x, s.a.win.y = &x[0, 0, 0, 0], &y[0, 0, 0, 0]
    with nogil:
        run_local(&s, 1, threads_for(w.s.n * w.s.oh * w.s.ow * w.s.c * w.s.kh * w.s.kw))


def qsoftmax(const int8_t[:, ::1] x, const float[::1] table, float out_scale, int zp_out, int8_t[:, ::1] y):
    """TFLite's int8 softmax of every row of x with the exp table (256,)."""
    cdef Step s
    memset(&s, 0, sizeof(s))
    s.kind = STEP_QSOFTMAX
    s.a.softmax_i8.x, s.a.softmax_i8.table, s.a.softmax_i8.y = &x[0, 0], &table[0], &y[0, 0]
    s.a.softmax_i8.rows, s.a.softmax_i8.n = x.shape[0], x.shape[1]
    s.a.softmax_i8.zp_out, s.a.softmax_i8.out_scale = zp_out, out_scale
    with nogil:
        run_local(&s, 1, 1)


# ---------------------------------------------------------------- state-space models (kernels/ssm.pxi)
def causal_conv1d(const float[:, ::1] x, const float[:, ::1] weight, bias, float[:, ::1] state, float[:, ::1] y):
    """y (seq, C) = the depthwise causal conv of x (seq, C) with weight (C, K) (+ bias: None or float32
    (C,)) over the history rows state (K-1, C), which then holds x's window's last K-1 rows."""
    cdef int64_t seq = x.shape[0], channels = x.shape[1], kernel = weight.shape[1], c
    cdef const float[::1] b
    cdef const float *bp = NULL
    cdef float *sp = &state[0, 0] if kernel > 1 else NULL
    if bias is not None:
        b = bias
        bp = &b[0]
    if seq == 0 or channels == 0:
        return
    for c in prange(channels, nogil=True, schedule="static", num_threads=threads_for(seq * channels * kernel * 8)):
        causal_conv1d_f32(seq, channels, kernel, c, &x[0, 0], &weight[0, 0], bp, sp, &y[0, 0])


def selective_scan(const float[:, ::1] x, const float[:, ::1] dt, const float[:, ::1] A, const float[:, ::1] B,
                   const float[:, ::1] C, const float[::1] D, z, float[:, ::1] state, float[:, ::1] y):
    """Mamba's selective scan, one channel per work item: x, dt, y (seq, d_inner), A, state
    (d_inner, N), B, C (seq, N), D (d_inner,), z None or float32 (seq, d_inner)."""
    cdef int64_t seq = x.shape[0], d_inner = x.shape[1], n_state = A.shape[1], d
    cdef const float[:, ::1] zv
    cdef const float *zp = NULL
    if z is not None:
        zv = z
        zp = &zv[0, 0]
    if seq == 0 or d_inner == 0:
        return
    for d in prange(d_inner, nogil=True, schedule="static", num_threads=threads_for(seq * d_inner * n_state * 16)):
        selective_scan_f32(seq, d_inner, n_state, d, &x[0, 0], &dt[0, 0], &A[0, 0], &B[0, 0], &C[0, 0], &D[0],
                           zp, &state[0, 0], &y[0, 0])


def ssd_scan(const float[:, ::1] x, const float[:, ::1] dt, const float[::1] dt_bias, const float[::1] A,
             const float[:, ::1] B, const float[:, ::1] C, const float[::1] D, int64_t n_groups,
             float[:, :, ::1] state, float[:, ::1] y):
    """Mamba-2's SSD scan, one row of a head's state per work item: x, y (seq, H*P), dt (seq, H),
    dt_bias, A, D (H,), B, C (seq, n_groups*N), state (H, P, N)."""
    cdef int64_t seq = x.shape[0], n_heads = state.shape[0], head_dim = state.shape[1], n_state = state.shape[2]
    cdef int64_t item
    if seq == 0 or n_heads * head_dim == 0:
        return
    for item in prange(n_heads * head_dim, nogil=True, schedule="static",
                       num_threads=threads_for(seq * n_heads * head_dim * n_state * 8)):
        ssd_scan_f32(seq, n_heads, head_dim, n_groups, n_state, item, &x[0, 0], &dt[0, 0], &dt_bias[0], &A[0],
                     &B[0, 0], &C[0, 0], &D[0], &state[0, 0, 0], &y[0, 0])


# ---------------------------------------------------------------- conv backward (kernels/conv_backward.pxi)
def dwconv_grad_input_f32(const float[:, :, :, ::1] dy, const float[:, ::1] wt, tuple geo, float[:, :, :, ::1] dx):
    """dx (N, H, W, C) of a depthwise (multiplier 1) conv from dy (N, OH, OW, C) and wt (kh*kw, C), one
    input row per work item; geo as dwconv_f32's."""
    cdef vx_conv_shape s = shape_of((dx.shape[0], dx.shape[1], dx.shape[2], dx.shape[3]) + geo)
    cdef int64_t item
    if s.n * s.h == 0 or s.w * s.c == 0:
        return
    for item in prange(s.n * s.h, nogil=True, schedule="static",
                       num_threads=threads_for(s.n * s.oh * s.ow * s.c * s.kh * s.kw)):
        dwconv_dx_row_f32(&s, &dy[0, 0, 0, 0], &wt[0, 0], item, &dx[0, 0, 0, 0])


def dwconv_grad_weight_f32(const float[:, :, :, ::1] x, const float[:, :, :, ::1] dy, tuple geo,
                           float[:, ::1] partials):
    """partials (bands, kh*kw * C): band t's sum of dy x the taps of x over its share of the output rows (the
    caller sums the bands); geo as dwconv_f32's."""
    cdef vx_conv_shape s = shape_of((x.shape[0], x.shape[1], x.shape[2], x.shape[3]) + geo)
    cdef int64_t bands = partials.shape[0], rows = s.n * s.oh, t
    if bands == 0 or partials.shape[1] == 0:
        return
    for t in prange(bands, nogil=True, schedule="static",
                    num_threads=threads_for(s.n * s.oh * s.ow * s.c * s.kh * s.kw)):
        dwconv_dw_rows_f32(&s, &x[0, 0, 0, 0], &dy[0, 0, 0, 0], rows * t // bands, rows * (t + 1) // bands,
                           &partials[t, 0])


def max_pool_grad_f32(const float[:, :, :, ::1] x, const float[:, :, :, ::1] dy, tuple geo, float[:, :, :, ::1] dx,
                      float[:, ::1] best, int64_t[:, ::1] first):
    """dx (N, H, W, C) of max pooling from x and dy (N, OH, OW, C), one image per work item; best, first:
    (N, C) scratch; geo as dwconv_f32's (dilation 1)."""
    cdef vx_conv_shape s = shape_of((x.shape[0], x.shape[1], x.shape[2], x.shape[3]) + geo)
    cdef int64_t b
    if s.n == 0 or s.h * s.w * s.c == 0:
        return
    for b in prange(s.n, nogil=True, schedule="static", num_threads=threads_for(s.n * s.oh * s.ow * s.c * s.kh * s.kw)):
        max_pool_dx_image_f32(&s, &x[0, 0, 0, 0], &dy[0, 0, 0, 0], b, &best[b, 0], &first[b, 0], &dx[0, 0, 0, 0])


def softcap(const float[::1] x, float[::1] y, float cap):
    """y = cap * tanhf(x * (1 / cap)) as llama.cpp soft-caps Gemma 2's logits (ggml_scale, ggml_tanh with
    libm's tanhf, ggml_scale), on one thread (a row of logits per decode step); y may be x."""
    cdef int64_t n = x.shape[0], i
    cdef float inv = 1.0 / cap
    with nogil:
        for i in range(n):
            y[i] = tanhf(x[i] * inv) * cap
