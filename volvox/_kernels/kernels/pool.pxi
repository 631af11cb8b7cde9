# Float32 max / average pooling over NHWC (the MAX_POOL / AVG_POOL steps; ops/pool.py's numpy fast
# paths give the same bits): each output pixel's channels go in blocks of POOL_VECTORS vectors whose
# accumulators stay in registers across the window's taps, then a vector (the last one partial).
# The global average pool (GLOBAL_AVG steps: an SE block's squeeze, a classifier's pool) sums in
# float64, a block of GAP_BLOCK channels in registers across the pixels.
from libc.math cimport INFINITY
from volvox._kernels.vx cimport vx_conv_shape, vx_pool_taps

cdef enum:
    POOL_VECTORS = 4    # vectors of channels per block
    GAP_BLOCK = 32      # channels whose float64 sums a global average pool keeps in registers


cdef void max_pool_f32(const vx_conv_shape *s, const float *x, int64_t item, float *y, int64_t ldy) noexcept nogil:
    """Output row item = b * oh_total + oh into y (n, oh, ow pixels of C, ldy floats apart: C, or more
    when y is a channel slice of a wider tensor): per channel numpy's maximum over the in-image taps
    in row-major order, from -inf (padding never wins)."""
    cdef int64_t C = s.c, b = item // s.oh, oh = item % s.oh
    cdef int64_t ow, i0, i1, j0, j1, i, j, c, v
    cdef const float *xp
    cdef const float *xr
    cdef float *yo
    cdef vf acc[POOL_VECTORS]
    cdef vf one
    cdef vf_mask k
    for ow in range(s.ow):
        vx_pool_taps(s, oh, ow, &i0, &i1, &j0, &j1)
        xp = x + ((b * s.h + oh * s.sh - s.pt) * s.w + ow * s.sw - s.pl) * C  # tap (0, 0)
        yo = y + (item * s.ow + ow) * ldy                                      # (C,)
        c = 0
        while c + POOL_VECTORS * VL <= C:
            for v in range(POOL_VECTORS):
                acc[v] = vf_set1(-INFINITY)
            for i in range(i0, i1):
                for j in range(j0, j1):
                    xr = xp + (i * s.w + j) * C + c
                    for v in range(POOL_VECTORS):
                        acc[v] = vf_max_nan(acc[v], vf_load(xr + v * VL))
            for v in range(POOL_VECTORS):
                vf_store(yo + c + v * VL, acc[v])
            c += POOL_VECTORS * VL
        while c < C:
            k = vf_lanes(C - c)
            one = vf_set1(-INFINITY)
            for i in range(i0, i1):
                for j in range(j0, j1):
                    one = vf_max_nan(one, vf_load_part(k, xp + (i * s.w + j) * C + c))
            vf_store_part(k, yo + c, one)
            c += VL


cdef void avg_pool_f32(const vx_conv_shape *s, bint include_pad, const float *x, int64_t item,
                       float *y, int64_t ldy) noexcept nogil:
    """Output row item = b * oh_total + oh into y (pixels ldy floats apart, as max_pool_f32's): per
    channel the in-image taps summed in row-major order, + 0.0 when the window has padded taps
    (adding the padding's zeros tap by tap gives the same bits: only a -0 sum changes, to +0), / the
    in-image count (or kh * kw)."""
    cdef int64_t C = s.c, b = item // s.oh, oh = item % s.oh
    cdef int64_t ow, i0, i1, j0, j1, i, j, c, v, taps
    cdef bint padded
    cdef const float *xp
    cdef const float *x0
    cdef const float *xr
    cdef float *yo
    cdef vf acc[POOL_VECTORS]
    cdef vf one, count
    cdef vf_mask k
    for ow in range(s.ow):
        vx_pool_taps(s, oh, ow, &i0, &i1, &j0, &j1)
        taps = (i1 - i0) * (j1 - j0) if i1 > i0 and j1 > j0 else 0
        padded = taps < s.kh * s.kw
        count = vf_set1(<float>(s.kh * s.kw) if include_pad else <float>taps)
        xp = x + ((b * s.h + oh * s.sh - s.pt) * s.w + ow * s.sw - s.pl) * C  # tap (0, 0)
        x0 = xp + (i0 * s.w + j0) * C                                         # the first in-image tap
        yo = y + (item * s.ow + ow) * ldy                                      # (C,)
        c = 0
        while c + POOL_VECTORS * VL <= C:
            for v in range(POOL_VECTORS):
                acc[v] = vf_load(x0 + c + v * VL) if taps else vf_zero()
            for i in range(i0, i1):
                for j in range(j0, j1):
                    if i != i0 or j != j0:
                        xr = xp + (i * s.w + j) * C + c
                        for v in range(POOL_VECTORS):
                            acc[v] = vf_add(acc[v], vf_load(xr + v * VL))
            for v in range(POOL_VECTORS):
                if padded:
                    acc[v] = vf_add(acc[v], vf_zero())
                vf_store(yo + c + v * VL, vf_div(acc[v], count))
            c += POOL_VECTORS * VL
        while c < C:
            k = vf_lanes(C - c)
            one = vf_load_part(k, x0 + c) if taps else vf_zero()
            for i in range(i0, i1):
                for j in range(j0, j1):
                    if i != i0 or j != j0:
                        one = vf_add(one, vf_load_part(k, xp + (i * s.w + j) * C + c))
            if padded:
                one = vf_add(one, vf_zero())
            vf_store_part(k, yo + c, vf_div(one, count))
            c += VL


cdef void global_avg_f32(int64_t HW, int64_t C, int64_t c0, int64_t c1, const float *x, float *y) noexcept nogil:
    """y[c] = float(sum over hw of double(x[hw][c]) / HW), the pixels summed in order, for channels
    c0 <= c < c1 of one image's x (HW, C). The float64 sums are plain loops of a constant length
    that the compiler vectorises at the tier's width (the vector layers have no float64 type)."""
    cdef double acc[GAP_BLOCK]   # (GAP_BLOCK,) a block's sums: in registers once its loops unroll
    cdef const float *xp
    cdef int64_t c = c0, p, n
    cdef int j
    while c + GAP_BLOCK <= c1:
        for j in range(GAP_BLOCK):
            acc[j] = 0.0
        xp = x + c
        for p in range(HW):
            for j in range(GAP_BLOCK):
                acc[j] += <double>xp[j]
            xp += C
        for j in range(GAP_BLOCK):
            y[c + j] = <float>(acc[j] / <double>HW)
        c += GAP_BLOCK
    n = c1 - c                                                  # the last channels: fewer than a block
    if n > 0:
        for j in range(n):
            acc[j] = 0.0
        xp = x + c
        for p in range(HW):
            for j in range(n):
                acc[j] += <double>xp[j]
            xp += C
        for j in range(n):
            y[c + j] = <float>(acc[j] / <double>HW)


cdef void fill_pool(vx_table *t) noexcept:
    """The f32 pool entries of the conv table."""
    cdef vx_conv_table *ct = <vx_conv_table *> t.conv
    ct.max_pool_f32 = max_pool_f32
    ct.avg_pool_f32 = avg_pool_f32
    ct.global_avg_f32 = global_avg_f32
