# Vision kernels (csrc/vx_conv.c), included into _core.pyx: packed f32 GEMM and NHWC
# f32 / int8 convolutions. Like the rest of _core, everything trusts its arguments
# (volvox.kernels checked them). Work items: 32-feature weight panels (GEMM), blocks of
# CONV_PIXELS output pixels (im2col convs), output rows (depthwise); each is computed by
# one thread in a fixed order, so results do not depend on the thread count.
from volvox._kernels.vx cimport (
    vx_conv_shape, vx_conv_table, vx_qgemm_packed_bytes, vx_requant, vx_sgemm_packed_floats,
)
from libc.stdint cimport int8_t, int16_t, int32_t

# Output pixels per im2col work item (its cols block stays in L2).
cdef int64_t CONV_PIXELS = 64


def sgemm_packed_floats(int64_t K, int64_t n):
    """Floats sgemm_pack writes for n rows of K."""
    return vx_sgemm_packed_floats(K, n)


def qgemm_packed_bytes(int64_t K, int64_t n):
    """Bytes qgemm_pack writes for n int8 rows of K."""
    return vx_qgemm_packed_bytes(K, n)


def sgemm(const uint8_t[:, ::1] w, int64_t K, const float[:, ::1] x, float[:, ::1] y,
          float[::1] scratch, bint f16=False):
    """y (M, N) = x (M, K) @ W.T for f32 (or, f16, IEEE half) W given as N rows of bytes; each
    32-row panel is packed into the thread's scratch then multiplied. scratch: get_num_threads()
    * 32 * K floats (f16: twice that, the panel's rows widened to f32 first, exactly)."""
    cdef int64_t M = x.shape[0], N = w.shape[0], ws = w.shape[1]
    cdef int64_t npan = (N + 31) // 32, per = 32 * K * (2 if f16 else 1), c
    if M == 0 or N == 0:
        return
    cdef int nt = _threads_for(M * N * K)
    if nt == 1:
        with nogil:
            for c in range(npan):
                _sgemm_panel(&w[0, 0], ws, N, K, c, f16, &x[0, 0], M, &y[0, 0], &scratch[0])
        return
    for c in prange(npan, nogil=True, schedule="dynamic", num_threads=nt):
        _sgemm_panel(&w[0, 0], ws, N, K, c, f16, &x[0, 0], M, &y[0, 0], &scratch[threadid() * per])


cdef void _sgemm_panel(const uint8_t *w, int64_t ws, int64_t N, int64_t K, int64_t c, bint f16, const float *x,
                       int64_t M, float *y, float *scratch) noexcept nogil:
    """Panel c of sgemm: W rows 32c .. 32c + 31 packed into scratch (f16: widened into its second
    half first), then y[:, 32c ..] = x @ those rows.T."""
    cdef int64_t n0 = 32 * c, nn = min(32, N - n0), r
    cdef const uint8_t *rows = w + n0 * ws
    cdef int64_t stride = ws
    if f16:
        for r in range(nn):
            _tbl.dequant[VX_F16](K, w + (n0 + r) * ws, scratch + 32 * K + r * K)
        rows = <const uint8_t *> (scratch + 32 * K)
        stride = 4 * K
    _tbl.conv.sgemm_pack(K, rows, stride, nn, scratch)
    _tbl.conv.sgemm(K, scratch, nn, x, K, M, y + n0, N, NULL, 0)


def sgemm_pack(const float[:, ::1] w, float[::1] packed):
    """packed = W (n, K) in 32-row panels (sgemm_packed_floats(K, n) floats)."""
    _tbl.conv.sgemm_pack(w.shape[1], <const uint8_t *> &w[0, 0], w.shape[1] * 4, w.shape[0], &packed[0])


def qgemm_pack(const int8_t[:, ::1] w, int8_t[::1] packed, int32_t[::1] wsum):
    """packed = int8 W (n, K) in qgemm panels; wsum[r] = sum of row r."""
    _tbl.conv.qgemm_pack(w.shape[1], &w[0, 0], w.shape[0], &packed[0], &wsum[0])


cdef vx_conv_shape _shape(int64_t n, int64_t h, int64_t w, int64_t c, tuple geo):
    cdef vx_conv_shape s
    s.n, s.h, s.w, s.c = n, h, w, c
    s.oh, s.ow, s.kh, s.kw, s.sh, s.sw, s.dh, s.dw, s.pt, s.pl = geo
    return s


def conv2d_f32(const float[:, :, :, ::1] x, const float[::1] packed, int64_t cout, tuple geo,
               const float[::1] bias, int act, bint direct, float[:, :, :, ::1] y, float[::1] scratch):
    """y (N, OH, OW, cout) = act(conv(x, W) + bias), W packed by sgemm_pack as (cout, kh*kw*C).

    geo = (oh, ow, kh, kw, sh, sw, dh, dw, pad_top, pad_left); direct: a 1x1 stride-1
    unpadded conv (x rows are the GEMM rows); else scratch holds get_num_threads() *
    CONV_PIXELS * kh*kw*C floats of im2col rows."""
    cdef vx_conv_shape s = _shape(x.shape[0], x.shape[1], x.shape[2], x.shape[3], geo)
    cdef const vx_conv_table *t = _tbl.conv
    cdef int64_t KK = s.kh * s.kw * s.c, P = s.n * s.oh * s.ow
    cdef int64_t nblk = (P + CONV_PIXELS - 1) // CONV_PIXELS, per = CONV_PIXELS * KK, b, p0, np_
    cdef const float *bp = &bias[0] if bias is not None else NULL
    cdef const float *xp = &x[0, 0, 0, 0]
    cdef float *yp = &y[0, 0, 0, 0]
    cdef float *cols
    if P == 0 or cout == 0:
        return
    cdef int nt = _threads_for(P * cout * KK)
    for b in prange(nblk, nogil=True, schedule="dynamic", num_threads=nt):
        p0 = b * CONV_PIXELS
        np_ = min(CONV_PIXELS, P - p0)
        if direct:
            t.sgemm(KK, &packed[0], cout, xp + p0 * KK, KK, np_, yp + p0 * cout, cout, bp, act)
        else:
            cols = &scratch[threadid() * per]
            t.conv_f32(&s, xp, p0, np_, &packed[0], cout, bp, act, cols, yp + p0 * cout, cout)


def dwconv_f32(const float[:, :, :, ::1] x, const float[:, ::1] w, tuple geo, const float[::1] bias,
               int act, float[:, :, :, ::1] y):
    """Depthwise (multiplier 1) y = act(conv(x, w) + bias); w (kh*kw, C)."""
    cdef vx_conv_shape s = _shape(x.shape[0], x.shape[1], x.shape[2], x.shape[3], geo)
    cdef const float *bp = &bias[0] if bias is not None else NULL
    cdef int64_t it, items = s.n * s.oh
    if items == 0 or s.ow == 0 or s.c == 0:
        return
    cdef int nt = _threads_for(items * s.ow * s.c * s.kh * s.kw)
    for it in prange(items, nogil=True, schedule="static", num_threads=nt):
        _tbl.conv.dwconv_f32(&s, &x[0, 0, 0, 0], &w[0, 0], bp, act, it, &y[0, 0, 0, 0] + it * s.ow * s.c)


cdef vx_requant _requant(const int32_t[::1] bias, const int32_t[::1] mult, const int32_t[::1] shift,
                         tuple zps):
    cdef vx_requant rq
    rq.bias = &bias[0] if bias is not None else NULL
    rq.mult = &mult[0]
    rq.shift = &shift[0]
    rq.zp_in, rq.zp_out, rq.lo, rq.hi = zps
    return rq


def qconv2d(const int8_t[:, :, :, ::1] x, const int8_t[::1] packed, const int32_t[::1] wsum,
            int64_t cout, tuple geo, const int32_t[::1] bias, const int32_t[::1] mult,
            const int32_t[::1] shift, tuple zps, int8_t[:, :, :, ::1] y, uint8_t[::1] scratch):
    """int8 y (N, OH, OW, cout) = requant(conv(x - zp_in, W) + bias), W packed by qgemm_pack as
    (cout, kh*kw*C); zps = (zp_in, zp_out, act_min, act_max); wsum: W's row sums, or None when
    bias already holds bias - (zp_in + 128) * wsum (kernels.fold_zero_point); scratch holds
    get_num_threads() * CONV_PIXELS * K4 bytes (K4 = kh*kw*C rounded up to 4)."""
    cdef vx_conv_shape s = _shape(x.shape[0], x.shape[1], x.shape[2], x.shape[3], geo)
    cdef vx_requant rq = _requant(bias, mult, shift, zps)
    cdef const vx_conv_table *t = _tbl.conv
    cdef int64_t KK = s.kh * s.kw * s.c, K4 = (KK + 3) // 4 * 4, P = s.n * s.oh * s.ow
    cdef int64_t nblk = (P + CONV_PIXELS - 1) // CONV_PIXELS, per = CONV_PIXELS * K4, b, p0, np_
    cdef uint8_t pad = <uint8_t> (rq.zp_in + 128)
    cdef uint8_t *cols
    cdef const int32_t *ws = &wsum[0] if wsum is not None else NULL
    if P == 0 or cout == 0:
        return
    cdef int nt = _threads_for(P * cout * KK)
    for b in prange(nblk, nogil=True, schedule="dynamic", num_threads=nt):
        p0 = b * CONV_PIXELS
        np_ = min(CONV_PIXELS, P - p0)
        cols = &scratch[threadid() * per]
        t.im2col_u8(&s, &x[0, 0, 0, 0], p0, np_, pad, cols, K4)
        t.qgemm(K4, &packed[0], ws, cout, cols, K4, np_, &rq, &y[0, 0, 0, 0] + p0 * cout, cout)


def qdwconv(const int8_t[:, :, :, ::1] x, const int16_t[:, ::1] w, tuple geo, const int32_t[::1] bias,
            const int32_t[::1] mult, const int32_t[::1] shift, tuple zps, int8_t[:, :, :, ::1] y):
    """Depthwise int8 (multiplier 1); w (kh*kw, C) int16; zps as qconv2d."""
    cdef vx_conv_shape s = _shape(x.shape[0], x.shape[1], x.shape[2], x.shape[3], geo)
    cdef vx_requant rq = _requant(bias, mult, shift, zps)
    cdef int64_t it, items = s.n * s.oh
    if items == 0 or s.ow == 0 or s.c == 0:
        return
    cdef int nt = _threads_for(items * s.ow * s.c * s.kh * s.kw)
    for it in prange(items, nogil=True, schedule="static", num_threads=nt):
        _tbl.conv.qdwconv(&s, &x[0, 0, 0, 0], &w[0, 0], &rq, it, 1, &y[0, 0, 0, 0] + it * s.ow * s.c)
