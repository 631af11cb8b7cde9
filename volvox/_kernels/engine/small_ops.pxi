# The engine's own small kernels, compiled once at baseline flags (no FMA contraction): row
# kernels light next to the matmuls around them (LayerNorm, GELU) and the int8 / global pooling /
# elementwise / copy loops of the vision steps (the f32 window pools are per tier: kernels/pool.pxi),
# each giving the exact bits of the numpy reference in volvox/ops that the per-op executor and the
# tests compare with.
from libc.math cimport fabs, fabsf, sqrt, sqrtf, NAN
from libc.stdint cimport INT64_MIN, int8_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset
from volvox._kernels.codes cimport *
from volvox._kernels.vx cimport vx_conv_shape, vx_pool_taps, vx_requant


# ------------------------------------------------------------------------------------ rows
cdef void layer_norm_row(int64_t D, const float *x, const float *weight, const float *bias, float eps,
                         float *y) noexcept nogil:
    """y (D,) = (x - mean) / sqrt(var + eps) * weight (+ bias), statistics in double; bias may be NULL."""
    cdef double total = 0.0, sq = 0.0, d, v
    cdef int64_t i
    for i in range(D):
        total += x[i]
    cdef double mean = total / <double>D
    for i in range(D):
        d = x[i] - mean
        sq += d * d
    cdef double inv = 1.0 / sqrt(sq / <double>D + <double>eps)
    for i in range(D):
        v = (x[i] - mean) * inv * weight[i]
        y[i] = <float>(v + bias[i] if bias != NULL else v)


cdef inline float exp_poly(float x) noexcept nogil:
    """e^x for x in [-87, 88] (Cephes' expf polynomial, about 1 ulp; smaller x gives e^-87), with
    no libm call and no branch, so the loops that call it vectorise."""
    x = x if x > <float>-87.0 else <float>-87.0
    cdef float t = x * <float>1.44269504088896341 + <float>0.5
    cdef int32_t n = <int32_t>t
    n -= <int32_t>(<float>n > t)  # floor
    cdef float fn = <float>n
    cdef float r = (x - fn * <float>0.693359375) - fn * <float>-2.12194440e-4  # x - n ln 2
    cdef float p = <float>1.9875691500e-4
    p = p * r + <float>1.3981999507e-3
    p = p * r + <float>8.3334519073e-3
    p = p * r + <float>4.1665795894e-2
    p = p * r + <float>1.6666665459e-1
    p = p * r + <float>5.0000001201e-1
    p = p * (r * r) + r + <float>1.0
    cdef int32_t bits = (n + 127) << 23  # 2^n
    cdef float scale
    memcpy(&scale, &bits, sizeof(float))
    return p * scale


cdef void gelu_row(int64_t n, const float *x, bint tanh_approx, float *y) noexcept nogil:
    """y (n,) = x * Phi(x): exact (erfc to 1.2e-7) or its tanh approximation, float32, written to
    vectorise (no libm calls); y may be x."""
    cdef int64_t i
    cdef float v, u, e, z, t, p, half_erfc
    cdef float c = <float>0.7978845608028654  # sqrt(2 / pi)
    if tanh_approx:
        # 0.5 v (1 + tanh(u)) = v / (1 + e) for u >= 0, v e / (1 + e) for u < 0, e = exp(-2|u|):
        # no cancellation for u << 0
        for i in range(n):
            v = x[i]
            u = c * (v + <float>0.044715 * v * v * v)
            e = exp_poly(<float>-2.0 * fabsf(u))
            y[i] = v * (e if u < <float>0.0 else <float>1.0) / (<float>1.0 + e)
        return
    # x Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2 with erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z/2),
    # z >= 0 (Numerical Recipes' Chebyshev fit, relative error < 1.2e-7 for every z)
    for i in range(n):
        v = x[i]
        z = fabsf(v) * <float>0.70710678118654752
        t = <float>1.0 / (<float>1.0 + <float>0.5 * z)
        p = <float>0.17087277
        p = p * t - <float>0.82215223
        p = p * t + <float>1.48851587
        p = p * t - <float>1.13520398
        p = p * t + <float>0.27886807
        p = p * t - <float>0.18628806
        p = p * t + <float>0.09678418
        p = p * t + <float>0.37409196
        p = p * t + <float>1.00002368
        p = p * t - <float>1.26551223
        half_erfc = <float>0.5 * t * exp_poly(p - z * z)
        y[i] = v * (half_erfc if v < <float>0.0 else <float>1.0 - half_erfc)


# ------------------------------------------------------------------------------------ int8
cdef inline int64_t round_away_i64(float v) noexcept nogil:
    """int64(std::round(v)) as numpy computes it on x86 (ops/quantized.py's tflite_round, then
    astype(int64)): halves away from zero, and INT64_MIN for NaN and values past int64. For
    a = |v| + 0.5 < 2**63 the truncating cast is floor(a); no libm call, so the loop vectorises."""
    cdef double a = fabs(<double>v) + 0.5
    if not (a < 9223372036854775808.0):
        return INT64_MIN
    cdef int64_t r = <int64_t>a
    return -r if v < <float>0.0 else r


cdef inline int8_t clamp_i8(int64_t q, int32_t zp, int32_t lo, int32_t hi) noexcept nogil:
    """clamp(q + zp) as int8, with numpy's wrapping int64 add."""
    q = <int64_t>(<uint64_t>q + <uint64_t><int64_t>zp)
    return <int8_t>(lo if q < lo else (hi if q > hi else q))


cdef void dequantize_i8_run(int64_t n, const int8_t *x, float scale, int32_t zp, float *y) noexcept nogil:
    """y (n,) = scale * (x - zp) in float32."""
    cdef float z = <float>zp
    cdef int64_t i
    for i in range(n):
        y[i] = scale * (<float>x[i] - z)


cdef enum:
    QAVG_CHANNELS = 64  # channels per pass of qavg_pool_row (its int32 sums stay in registers)


cdef void qavg_pool_row(const vx_conv_shape *s, int32_t lo, int32_t hi, const int8_t *x, int64_t item,
                        int8_t *y) noexcept nogil:
    """int8 average pool output row `item` = b * OH + oh: the in-image tap sum divided rounding half
    away from zero (TFLite's AveragePool), clamped to [lo, hi]."""
    cdef int64_t C = s.c, b = item // s.oh, oh = item % s.oh
    cdef int64_t ow, i0, i1, j0, j1, count, half, c, c0, n, i, j
    cdef int64_t acc64, q
    cdef int32_t acc[QAVG_CHANNELS]  # (n,)
    cdef int32_t a, m, q32
    cdef float fcount
    cdef const int8_t *xp
    cdef const int8_t *xr
    cdef int8_t *yo
    for ow in range(s.ow):
        vx_pool_taps(s, oh, ow, &i0, &i1, &j0, &j1)
        count = (i1 - i0) * (j1 - j0)
        half = count // 2
        xp = x + ((b * s.h + oh * s.sh - s.pt) * s.w + ow * s.sw - s.pl) * C  # tap (0, 0)
        yo = y + (item * s.ow + ow) * C                                       # (C,)
        if count == 0 or count >= (1 << 16):  # no taps, or sums past float's exact division
            for c in range(C):
                acc64 = 0
                for i in range(i0, i1):
                    for j in range(j0, j1):
                        acc64 += xp[(i * s.w + j) * C + c]
                if count == 0:
                    q = 0
                elif acc64 > 0:
                    q = (acc64 + half) // count
                else:
                    q = -((-acc64 + half) // count)
                yo[c] = <int8_t>(lo if q < lo else (hi if q > hi else q))
            continue
        # |sum| + half < 2^24 and count < 2^16: float32 division then truncation is the integer
        # quotient (a non-integer n / count is at least 1 / count below the next integer, more
        # than half an ulp of a quotient under 2^8), so the loops vectorise
        fcount = <float>count
        c0 = 0
        while c0 < C:
            n = C - c0 if C - c0 < QAVG_CHANNELS else QAVG_CHANNELS
            for c in range(n):
                acc[c] = 0
            for i in range(i0, i1):
                for j in range(j0, j1):
                    xr = xp + (i * s.w + j) * C + c0
                    for c in range(n):
                        acc[c] += xr[c]
            for c in range(n):
                a = -acc[c] if acc[c] < 0 else acc[c]
                m = <int32_t>(<float>(a + <int32_t>half) / fcount)
                q32 = -m if acc[c] < 0 else m
                yo[c0 + c] = <int8_t>(lo if q32 < lo else (hi if q32 > hi else q32))
            c0 += QAVG_CHANNELS


cdef void qsoftmax_row(int64_t n, const int8_t *x, const float *table, float out_scale, int32_t zp_out,
                       int8_t *y) noexcept nogil:
    """TFLite's int8 softmax of one row of n: e = table[max - x], the float32 sum in order,
    q = round_half_away(e / (sum * out_scale)) + zp_out, clamped."""
    cdef int32_t mx = -128
    cdef int64_t i
    for i in range(n):
        mx = x[i] if x[i] > mx else mx
    cdef float total = <float>0.0
    for i in range(n):
        total += table[mx - x[i]]
    cdef float inv = <float>1.0 / (total * out_scale)
    for i in range(n):
        y[i] = clamp_i8(round_away_i64(table[mx - x[i]] * inv), zp_out, -128, 127)


# --------------------------------------------------------------------------- numpy's float ops
cdef inline float np_maximum(float a, float b) noexcept nogil:
    """numpy's maximum(a, b): a when a >= b or a is NaN, else b. (The two tests are or'ed bitwise,
    not with `or`, whose short circuit Cython writes as branches that GCC then does not vectorise: a
    fused ReLU ran one element per branch, 10x slower.)"""
    cdef bint take_a = (a >= b) | (a != a)
    return a if take_a else b


cdef inline float np_clip(float v, float lo, float hi) noexcept nogil:
    """numpy's clip of a float: NaN stays NaN, else min(max(v, lo), hi) with max(a, b) = a > b ? a : b."""
    if v != v:
        return v
    v = v if v > lo else lo
    return v if v < hi else hi


# ----------------------------------------------------------------------------- elementwise
# Functions and operators by their codes (volvox/ops/codes.py, generated into codes.pxd).
UNARY_FNS = frozenset({FN_RELU, FN_SIGMOID, FN_HARD_SWISH, FN_HARD_SIGMOID, FN_SQRT, FN_SQUARE, FN_LEAKY_RELU})  # the unary step's


cdef void unary_run(int fn, int64_t n, const float *x, float alpha, float beta, float *y) noexcept nogil:
    """y (n,) = fn(x) for fn in UNARY_FNS but FN_HARD_SWISH (the tier's hard_swish_f32, kernels/activation.pxi)
    (an FN_* code; alpha, beta: its parameters, volvox/ops/codes.py), each with numpy's float32 arithmetic (the ops' references in ops/activation.py, ops/arith.py) but
    sigmoid (exp_poly's e^x: within a few ulp of the float64 reference)."""
    cdef int64_t i
    cdef float t, e
    if fn == FN_SIGMOID:  # e = exp(-|x|); y = 1 / (1 + e) for x >= 0, e / (1 + e) below (no overflow);
        for i in range(n):  # NaN: the positive quiet NaN, as numpy's tanh gives (a NaN's sign is no result)
            e = exp_poly(-fabsf(x[i]))
            t = (<float>1.0 if x[i] >= 0 else e) / (<float>1.0 + e)
            y[i] = t if x[i] == x[i] else NAN
    elif fn == FN_HARD_SIGMOID:  # y = clip(alpha * x + beta, 0, 1)
        for i in range(n):
            t = alpha * x[i]  # rounded before the sum (the engine is built without FMA)
            y[i] = np_clip(t + beta, <float>0.0, <float>1.0)
    elif fn == FN_SQRT:
        for i in range(n):
            y[i] = sqrtf(x[i])
    elif fn == FN_SQUARE:
        for i in range(n):
            y[i] = x[i] * x[i]
    elif fn == FN_RELU:  # numpy's maximum(x, 0)
        for i in range(n):
            y[i] = np_maximum(x[i], <float>0.0)
    elif fn == FN_LEAKY_RELU:  # y = x if x >= 0 else alpha * x (NaN: alpha * NaN)
        for i in range(n):
            y[i] = x[i] if x[i] >= 0 else alpha * x[i]


cdef inline float binary_op(int op, float a, float b) noexcept nogil:
    """a op b, a BIN_* code."""
    if op == BIN_ADD:
        return a + b
    if op == BIN_MUL:
        return a * b
    if op == BIN_SUB:
        return a - b
    return a / b


cdef void binary_run(int op, int64_t i0, int64_t i1, const float *a, const float *b, int64_t nb, int64_t div,
                     float *y) noexcept nogil:
    """y[i] = a[i] op b[(i / div) % nb] for i in [i0, i1) (nb 0: b[i])."""
    cdef int64_t i, j, e, k
    cdef float b0
    if nb == 0:
        if op == BIN_ADD:
            for i in range(i0, i1):
                y[i] = a[i] + b[i]
        elif op == BIN_MUL:
            for i in range(i0, i1):
                y[i] = a[i] * b[i]
        elif op == BIN_SUB:
            for i in range(i0, i1):
                y[i] = a[i] - b[i]
        else:
            for i in range(i0, i1):
                y[i] = a[i] / b[i]
        return
    if nb == 1:
        b0 = b[0]
        if op == BIN_ADD:
            for i in range(i0, i1):
                y[i] = a[i] + b0
        elif op == BIN_MUL:
            for i in range(i0, i1):
                y[i] = a[i] * b0
        elif op == BIN_SUB:
            for i in range(i0, i1):
                y[i] = a[i] - b0
        else:
            for i in range(i0, i1):
                y[i] = a[i] / b0
        return
    i = i0
    while i < i1:
        j = (i // div) % nb
        if div == 1:  # per channel: a run of nb - j elements against b[j..]
            e = i + (nb - j) if i + (nb - j) < i1 else i1
            for k in range(i, e):
                y[k] = binary_op(op, a[k], b[j + k - i])
        else:         # per row: a run of up to div elements against one b
            e = (i // div + 1) * div if (i // div + 1) * div < i1 else i1
            b0 = b[j]
            for k in range(i, e):
                y[k] = binary_op(op, a[k], b0)
        i = e


cdef void gather_rows(const int64_t *d, const float *x, int64_t r0, int64_t r1, float *y) noexcept nogil:
    """Output rows [r0, r1) of a strided view's contiguous copy: d = (ndim, shape[ndim],
    strides[ndim]) in elements. Rows go by runs along the second-last axis (the offset of a run's
    start from divisions, then steps of that axis's stride); a strided last axis is copied one of
    its elements at a time across the run (an NCHW image to NHWC: C passes over contiguous
    reads, not a division per pixel and C strided reads); two contiguous runs are interleaved in one pass."""
    cdef int64_t nd = d[0]
    cdef const int64_t *shape = d + 1
    cdef const int64_t *stride = d + 1 + nd
    cdef int64_t L = shape[nd - 1], sl = stride[nd - 1]
    cdef int64_t M = shape[nd - 2] if nd > 1 else 1                 # rows per run
    cdef int64_t sm = stride[nd - 2] if nd > 1 else 0
    cdef int64_t r = r0, j, j0, j1, k, off, rem, i
    cdef const float *src
    cdef float *dst
    while r < r1:
        j0 = r % M
        j1 = M if M - j0 < r1 - r else j0 + r1 - r
        off = 0
        rem = r // M
        for k in range(nd - 3, -1, -1):
            off += (rem % shape[k]) * stride[k]
            rem = rem // shape[k]
        dst = y + (r - j0) * L                                      # (M, L): row j at dst + j*L
        if sl == 1:
            for j in range(j0, j1):
                memcpy(dst + j * L, x + off + j * sm, <size_t>L * sizeof(float))
        elif L == 2 and sm == 1:  # two contiguous runs interleaved (a channel shuffle of 2 groups): one
            src = x + off         # pass, which GCC vectorises (unpack, not 2 strided passes)
            for j in range(j0, j1):
                dst[j * 2] = src[j]
                dst[j * 2 + 1] = src[j + sl]
        else:
            for i in range(L):
                src = x + off + i * sl
                for j in range(j0, j1):
                    dst[j * L + i] = src[j * sm]
        r += j1 - j0
