# Elementwise activations a conv step applies to the blocks it writes (post_activation) and the
# unary step runs, per tier where numpy's float32 arithmetic vectorises: hard_swish (its division by
# 6 is the cost; at baseline flags it ran 4 lanes wide).


cdef void hard_swish_f32(int64_t n, const float *x, float *y) noexcept nogil:
    """y (n,) = (x * clip(x + 3, 0, 6)) / 6 in float32, numpy's bits (ops/activation.py): the clip as
    min(max(v, 0), 6) with max(a, b) = a > b ? a : b; a NaN x gives NaN through the product whatever
    the clip made of it. y may be x."""
    cdef vf three = vf_set1(<float>3.0), zero = vf_zero(), six = vf_set1(<float>6.0), v
    cdef vf_mask k
    cdef int64_t i = 0
    while i + VL <= n:
        v = vf_load(x + i)
        vf_store(y + i, vf_div(vf_mul(v, vf_min(vf_max(vf_add(v, three), zero), six)), six))
        i += VL
    if i < n:
        k = vf_lanes(n - i)
        v = vf_load_part(k, x + i)
        vf_store_part(k, y + i, vf_div(vf_mul(v, vf_min(vf_max(vf_add(v, three), zero), six)), six))


cdef void fill_activation(vx_table *t) noexcept:
    """The activation entries of the conv table."""
    cdef vx_conv_table *ct = <vx_conv_table *> t.conv
    ct.hard_swish_f32 = hard_swish_f32
