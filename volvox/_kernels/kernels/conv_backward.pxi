# Window-op backward kernels, float32: the depthwise conv's (ops/conv.py's conv2d_grad_input /
# conv2d_grad_weight for groups = C = cout, multiplier 1) and max pooling's (ops/pool.py's
# max_pool2d_grad). Each walks the forward's window geometry (vx_conv_shape: the forward input's n, h, w,
# c and output oh, ow) and runs each channel as the innermost, contiguous loop, which the compiler
# vectorises. A work item is independent of every other (OpenMP over them, per_op.pxi): an input row for
# the depthwise dx (each input pixel sums the output pixels whose window read it, so no two items write
# one value), a band of output rows for dW (each band sums into its own partial (kh*kw, C)), an image for
# max pooling's dx (windows overlap within an image, never across). The hot spot is the channel loop.
from libc.stdint cimport int64_t
from libc.math cimport INFINITY
from libc.string cimport memset
from volvox._kernels.vx cimport vx_conv_shape


cdef void dwconv_dx_row_f32(const vx_conv_shape *s, const float *dy, const float *w, int64_t item,
                            float *dx) noexcept nogil:
    """Input row item = b * H + h of dx (W, C): dx[b, h, x, c] = sum over taps (i, j) and output pixels
    (oh, ow) reading it of dy[b, oh, ow, c] * w[i * kw + j, c]; dy (N, OH, OW, C), w (kh*kw, C)."""
    cdef int64_t C = s.c, b = item // s.h, h = item % s.h
    cdef int64_t i, j, col, c, oh, ow, rh, rw
    cdef float *dxo = dx + item * s.w * C                  # (W, C)
    cdef const float *dyp
    cdef const float *wp
    memset(dxo, 0, s.w * C * sizeof(float))
    for i in range(s.kh):
        rh = h + s.pt - i * s.dh                           # oh * sh when an output row read this row at tap i
        if rh < 0 or rh % s.sh != 0 or rh // s.sh >= s.oh:
            continue
        oh = rh // s.sh
        for j in range(s.kw):
            wp = w + (i * s.kw + j) * C
            for col in range(s.w):
                rw = col + s.pl - j * s.dw
                if rw < 0 or rw % s.sw != 0 or rw // s.sw >= s.ow:
                    continue
                ow = rw // s.sw
                dyp = dy + ((b * s.oh + oh) * s.ow + ow) * C
                for c in range(C):
                    dxo[col * C + c] += dyp[c] * wp[c]


cdef void dwconv_dw_rows_f32(const vx_conv_shape *s, const float *x, const float *dy, int64_t row0,
                             int64_t row1, float *partial) noexcept nogil:
    """partial (kh*kw, C) = sum over output rows row0 .. row1 - 1 (row = b * OH + oh) and their pixels of
    dy[b, oh, ow, c] * x[b, oh * sh - pt + i * dh, ow * sw - pl + j * dw, c]; x (N, H, W, C)."""
    cdef int64_t C = s.c, row, b, oh, ow, i, j, r, col, c
    cdef const float *dyp
    cdef const float *xp
    cdef float *acc
    memset(partial, 0, s.kh * s.kw * C * sizeof(float))
    for row in range(row0, row1):
        b, oh = row // s.oh, row % s.oh
        for ow in range(s.ow):
            dyp = dy + (row * s.ow + ow) * C
            for i in range(s.kh):
                r = oh * s.sh - s.pt + i * s.dh
                if r < 0 or r >= s.h:
                    continue
                for j in range(s.kw):
                    col = ow * s.sw - s.pl + j * s.dw
                    if col < 0 or col >= s.w:
                        continue
                    xp = x + ((b * s.h + r) * s.w + col) * C
                    acc = partial + (i * s.kw + j) * C
                    for c in range(C):
                        acc[c] += dyp[c] * xp[c]


cdef void max_pool_dx_image_f32(const vx_conv_shape *s, const float *x, const float *dy, int64_t b, float *best,
                                int64_t *first, float *dx) noexcept nogil:
    """Image b of max pooling's dx (H, W, C): each window's dy added at its first maximum in row-major window
    order (torch's choice among ties; padding never wins). best, first: (C,) scratch of this item."""
    cdef int64_t C = s.c, oh, ow, i, j, r, col, c, at
    cdef const float *xp
    cdef const float *dyp
    cdef float *dxo = dx + b * s.h * s.w * C            # (H, W, C)
    memset(dxo, 0, s.h * s.w * C * sizeof(float))
    for oh in range(s.oh):
        for ow in range(s.ow):
            for c in range(C):
                best[c] = -INFINITY
                first[c] = -1
            for i in range(s.kh):
                r = oh * s.sh - s.pt + i
                if r < 0 or r >= s.h:
                    continue
                for j in range(s.kw):
                    col = ow * s.sw - s.pl + j
                    if col < 0 or col >= s.w:
                        continue
                    at = r * s.w + col
                    xp = x + (b * s.h * s.w + at) * C
                    for c in range(C):
                        if xp[c] > best[c]:
                            best[c] = xp[c]
                            first[c] = at
            dyp = dy + ((b * s.oh + oh) * s.ow + ow) * C
            for c in range(C):
                if first[c] >= 0:
                    dxo[first[c] * C + c] += dyp[c]
