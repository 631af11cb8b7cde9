# int8 elementwise and pooling kernels of volvox/ops/quantized.py: TFLite's fixed-point arithmetic
# (MultiplyByQuantizedMultiplier) in exact integers, so every tier and the numpy references agree
# bit for bit; built once with the engine (no tier would compute them differently).
from libc.stdint cimport int8_t, int32_t, int64_t


cdef inline int64_t mul_by_quantized_multiplier(int64_t v, int32_t mult, int32_t shift) noexcept nogil:
    """TFLite's MultiplyByQuantizedMultiplier of an int32 value: v * 2^max(shift, 0), the saturating
    rounding doubling high multiply by mult, then a rounding divide by 2^max(-shift, 0)."""
    cdef int64_t lsh = shift if shift > 0 else 0
    cdef int64_t rsh = -shift if shift < 0 else 0
    cdef int64_t ab = v * (<int64_t>1 << lsh) * <int64_t>mult
    cdef int64_t high = (ab + ((<int64_t>1 << 30) if ab >= 0 else (1 - (<int64_t>1 << 30)))) / (<int64_t>1 << 31)
    cdef int64_t mask = (<int64_t>1 << rsh) - 1
    cdef int64_t threshold = (mask >> 1) + (1 if high < 0 else 0)
    return (high >> rsh) + (1 if (high & mask) > threshold else 0)


cdef inline int8_t clamp_q8(int64_t q, int32_t lo, int32_t hi) noexcept nogil:
    return <int8_t>(lo if q < lo else (hi if q > hi else q))


cdef enum:
    QBIN_ADD = 0        # a and b rescaled to a common scale, summed, rescaled (ADD; SUB: b's multiplier negated)
    QBIN_MUL = 1        # (a - zp_a) (b - zp_b) rescaled
    QADD_LEFT_SHIFT = 20


cdef void qbinary_run(int32_t op, int64_t i0, int64_t i1, const int8_t *a, const int8_t *b, int64_t b_count,
                      int64_t b_div, const int32_t *zp, const int32_t *rq, int32_t lo, int32_t hi,
                      int8_t *y) noexcept nogil:
    """Elements [i0, i1) of int8 y = a (op) b: zp = (zp_a, zp_b, zp_y); rq = (m_a, shift_a, m_b, shift_b,
    m_y, shift_y) for QBIN_ADD, (m, shift) for QBIN_MUL; b[i], or broadcast b[(i / b_div) % b_count]."""
    cdef int64_t i, xa, xb, q
    for i in range(i0, i1):
        xa = <int64_t>a[i] - zp[0]
        xb = <int64_t>(b[i] if b_count == 0 else b[(i // b_div) % b_count]) - zp[1]
        if op == QBIN_MUL:
            q = mul_by_quantized_multiplier(xa * xb, rq[0], rq[1])
        else:
            q = mul_by_quantized_multiplier(mul_by_quantized_multiplier(xa * (1 << QADD_LEFT_SHIFT), rq[0], rq[1])
                                            + mul_by_quantized_multiplier(xb * (1 << QADD_LEFT_SHIFT), rq[2], rq[3]),
                                            rq[4], rq[5])
        y[i] = clamp_q8(q + zp[2], lo, hi)


cdef void qmax_pool_row(const vx_conv_shape *s, int32_t lo, int32_t hi, const int8_t *x, int64_t item,
                        int8_t *y) noexcept nogil:
    """int8 max pool output row `item` = b * OH + oh: the maximum over the in-image taps, clamped to [lo, hi]."""
    cdef int64_t C = s.c, b = item // s.oh, oh = item % s.oh
    cdef int64_t ow, i0, i1, j0, j1, i, j, c
    cdef const int8_t *xp
    cdef const int8_t *xr
    cdef int8_t *yo
    for ow in range(s.ow):
        vx_pool_taps(s, oh, ow, &i0, &i1, &j0, &j1)
        xp = x + ((b * s.h + oh * s.sh - s.pt) * s.w + ow * s.sw - s.pl) * C  # tap (0, 0)
        yo = y + (item * s.ow + ow) * C                                       # (C,)
        for c in range(C):
            yo[c] = -128
        for i in range(i0, i1):
            for j in range(j0, j1):
                xr = xp + (i * s.w + j) * C
                for c in range(C):
                    yo[c] = xr[c] if xr[c] > yo[c] else yo[c]
        for c in range(C):
            yo[c] = clamp_q8(yo[c], lo, hi)


cdef void qlookup_run(int64_t i0, int64_t i1, const int8_t *x, const int8_t *table, int8_t *y) noexcept nogil:
    """Elements [i0, i1) of int8 y = table[x + 128] (a (256,) table)."""
    cdef int64_t i
    for i in range(i0, i1):
        y[i] = table[<int32_t>x[i] + 128]
