# State-space model kernels (ops/ssm.py): Mamba's causal depthwise conv1d and selective scan,
# Mamba-2's SSD scan, float32. A work item is a channel (conv, Mamba's scan) or one row of a head's
# state (SSD): it runs its recurrence over the sequence's rows in order, so a prefill and token-by-token
# decoding give the same bits, and items are independent (OpenMP over them, per_op.pxi).
# The hot spot is the scan's exp per state element and row.
from libc.math cimport expf, log1pf
from libc.stdint cimport int64_t

cdef float SOFTPLUS_THRESHOLD = 20.0  # torch's and ggml's: softplus(x) = x above it


cdef inline float softplus_f32(float x) noexcept nogil:
    return x if x > SOFTPLUS_THRESHOLD else log1pf(expf(x))


cdef inline float silu_f32(float x) noexcept nogil:
    return x / (<float>1.0 + expf(-x))


cdef void causal_conv1d_f32(int64_t seq, int64_t channels, int64_t kernel, int64_t c, const float *x,
                            const float *weight, const float *bias, float *state, float *y) noexcept nogil:
    """Channel c of the depthwise causal conv. The window is state's kernel-1 rows then x's seq rows
    (both (rows, channels)); y[t, c] = sum_k weight[c, k] window[t + k, c] + bias[c] (bias may be NULL);
    then state's rows become the window's last kernel-1 rows."""
    cdef int64_t t, k, j, hist = kernel - 1
    cdef float acc
    for t in range(seq):
        acc = bias[c] if bias != NULL else <float>0.0
        for k in range(kernel):
            j = t + k  # window row
            acc = acc + weight[c * kernel + k] * (state[j * channels + c] if j < hist else x[(j - hist) * channels + c])
        y[t * channels + c] = acc
    for k in range(hist):  # ascending: row seq + k is read before any row below it is written
        j = seq + k
        state[k * channels + c] = state[j * channels + c] if j < hist else x[(j - hist) * channels + c]


cdef void selective_scan_f32(int64_t seq, int64_t d_inner, int64_t n_state, int64_t d, const float *x,
                              const float *dt, const float *A, const float *B, const float *C, const float *D,
                              const float *z, float *state, float *y) noexcept nogil:
    """Channel d of Mamba's selective scan. x, dt, z, y (seq, d_inner); B, C (seq, n_state); A, state
    (d_inner, n_state); D (d_inner,). delta = softplus(dt); h = exp(delta A) h + delta x B;
    y = h . C + D x, times silu(z) unless z is NULL. state holds h before and after."""
    cdef float *h = state + d * n_state
    cdef const float *a = A + d * n_state
    cdef int64_t t, n
    cdef float delta, xv, dx, acc, out
    for t in range(seq):
        delta = softplus_f32(dt[t * d_inner + d])
        xv = x[t * d_inner + d]
        dx = delta * xv
        acc = 0.0
        for n in range(n_state):
            h[n] = expf(delta * a[n]) * h[n] + dx * B[t * n_state + n]
            acc = acc + h[n] * C[t * n_state + n]
        out = acc + D[d] * xv
        if z != NULL:
            out = out * silu_f32(z[t * d_inner + d])
        y[t * d_inner + d] = out


cdef void ssd_scan_f32(int64_t seq, int64_t n_heads, int64_t head_dim, int64_t n_groups, int64_t n_state,
                        int64_t item, const float *x, const float *dt, const float *dt_bias, const float *A,
                        const float *B, const float *C, const float *D, float *state, float *y) noexcept nogil:
    """Row p of head h's state (item = h * head_dim + p) in Mamba-2's SSD scan. x, y (seq, n_heads *
    head_dim); dt (seq, n_heads); B, C (seq, n_groups * n_state); state (n_heads, head_dim, n_state).
    Head h reads group g = h / (n_heads / n_groups): delta = softplus(dt + dt_bias[h]);
    s = exp(delta A[h]) s + delta x B[g]; y = s . C[g] + D[h] x."""
    cdef int64_t h = item // head_dim, width = n_heads * head_dim, bc = n_groups * n_state
    cdef int64_t g = h // (n_heads // n_groups), t, n
    cdef float *s = state + item * n_state
    cdef const float *b
    cdef const float *c
    cdef float delta, decay, xv, dx, acc
    for t in range(seq):
        delta = softplus_f32(dt[t * n_heads + h] + dt_bias[h])
        decay = expf(delta * A[h])
        xv = x[t * width + item]
        dx = delta * xv
        b = B + t * bc + g * n_state
        c = C + t * bc + g * n_state
        acc = 0.0
        for n in range(n_state):
            s[n] = decay * s[n] + dx * b[n]
            acc = acc + s[n] * c[n]
        y[t * width + item] = acc + D[h] * xv
