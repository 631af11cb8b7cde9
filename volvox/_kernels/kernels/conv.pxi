# conv kernels: the bodies every tier shares (each tier's own microkernels: kernels/<tier>/conv.pxi).
from libc.stdint cimport int64_t
from volvox._kernels.vx cimport vx_conv_shape


# ------------------------------------------------------------------------------------------------
# Window geometry, shared by the f32 and int8 convolutions (kernels/qconv.pxi uses these too).
# ------------------------------------------------------------------------------------------------
cdef inline void next_pixel(const vx_conv_shape *s, int64_t *b, int64_t *oh, int64_t *ow) noexcept nogil:
    """(b, oh, ow) of the next output pixel (im2col's walk: no divisions per pixel)."""
    ow[0] += 1
    if ow[0] < s.ow:
        return
    ow[0] = 0
    oh[0] += 1
    if oh[0] < s.oh:
        return
    oh[0] = 0
    b[0] += 1


cdef inline void valid_taps(const vx_conv_shape *s, int64_t oh, int64_t ow, int64_t *i0, int64_t *i1,
                            int64_t *j0, int64_t *j1) noexcept nogil:
    """The kernel taps of output pixel (oh, ow) that land inside the image: i in [*i0, *i1), j in
    [*j0, *j1); divisions only at the borders (interior pixels see every tap)."""
    cdef int64_t h0 = oh * s.sh - s.pt, w0 = ow * s.sw - s.pl
    i0[0] = 0 if h0 >= 0 else (-h0 + s.dh - 1) // s.dh
    if h0 + (s.kh - 1) * s.dh < s.h:
        i1[0] = s.kh
    else:
        i1[0] = 0 if h0 >= s.h else (s.h - 1 - h0) // s.dh + 1
    j0[0] = 0 if w0 >= 0 else (-w0 + s.dw - 1) // s.dw
    if w0 + (s.kw - 1) * s.dw < s.w:
        j1[0] = s.kw
    else:
        j1[0] = 0 if w0 >= s.w else (s.w - 1 - w0) // s.dw + 1


cdef void fill_conv(vx_table *t) noexcept:
    pass
