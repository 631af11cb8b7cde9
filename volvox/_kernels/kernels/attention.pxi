# attention kernels: the bodies every tier shares (each tier's own microkernels: kernels/<tier>/attention.pxi).
#
# The x86 SIMD tiers redo ggml's f32 CPU arithmetic operation for operation: the same products,
# FMA chains and horizontal-sum trees, and ggml's vectorised expf (AVX2 + FMA variant, ported from
# ARM's optimized-routines). Together with the quantized GEMMs this makes a llama-style forward
# pass match llama.cpp's CPU build bit for bit. The neon tiers run the same 8-lane structure as two
# float32x4 halves (the same sums in the same order, the same expf algorithm), so arm64 gives the
# x86 SIMD tiers' bits as far as libm's expf (swiglu's leftovers) agrees. The portable tier follows
# the same order in plain C, with libm's expf: close, not bit-identical.
#
# Each tier defines (kernels/<tier>/attention.pxi):
#   float exp8(const float *x, float mx, float *y)      y[l] = exp(x[l] - mx), l < 8; their hsum8_tree
#   float dot_vec_f32(const float *a, const float *b, int64_t n)   ggml_vec_dot_f32's a . b
#   void axpy(int64_t n, float w, const float *v, float *a)        a[d] = fma(v[d], w, a[d])
#   int64_t swiglu_blocks8(int64_t F, const float *gate, const float *up, float *y)
#       swiglu over the leading whole blocks of 8 with the vector expf (rows.pxi finishes the rest)
from libc.math cimport INFINITY
from libc.string cimport memset
from libc.stdint cimport int64_t
from volvox._kernels.vx cimport vx_attn_shape

# ggml_v_expf's constants (ARM optimized-routines' expf), spelled as ggml's C spells them.
cdef extern from *:
    const float EXPF_SHIFT "0x1.8p23f"              # 1.5 * 2^23: rounds x / ln2 to an integer
    const float EXPF_INV_LN2 "0x1.715476p+0f"
    const float EXPF_LN2_HI "0x1.62e4p-1f"
    const float EXPF_LN2_LO "0x1.7f7d1cp-20f"
    const float EXPF_C0 "0x1.ffffecp-1f"            # exp(b) - 1 ~ C0 b + C1 b^2 + ... + C4 b^5
    const float EXPF_C1 "0x1.fffdb6p-2f"
    const float EXPF_C2 "0x1.555e66p-3f"
    const float EXPF_C3 "0x1.573e2ep-5f"
    const float EXPF_C4 "0x1.0e4020p-7f"
    const float EXPF_NEG_ZERO "-0.0f"               # the sign bit (|n| = andnot(-0.0, n))
    const int EXPF_SCALE_NEG "((int)0x82000000u)"   # scale bits of 2^-125 (n <= 0) over 2^127
    const int EXPF_SCALE_BIAS "0x7f000000"


cdef inline float hsum8_tree(const float *l) noexcept nogil:
    """ggml's hsum_float_8 tree over 8 lanes: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7))."""
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))


cdef void attention_f32(const vx_attn_shape *s, const float *q, const float *kc, const float *vc,
                        int64_t item, float *scratch, float *out) noexcept nogil:
    """One work item (head h, query row i), item = h * seq + i, of causal GQA attention over the
    KV cache: out[i, h] = softmax(scale * K q, masked) . V, ggml's f32 CPU attention step for step."""
    cdef int64_t hd = s.head_dim, nh = s.n_heads
    cdef int64_t h = item // s.seq, i = item % s.seq
    cdef int64_t kvh = h // (nh // s.n_kv_heads)
    cdef int64_t nk = s.start + i + 1                                 # keys 0..start+i
    cdef int64_t j0 = nk - s.window if s.window > 0 and nk > s.window else 0  # first visible
    cdef int64_t np = (nk + 7) // 8 * 8
    cdef const float *qr = q + i * nh * hd + h * hd                   # (hd,)
    cdef const float *K = kc + kvh * s.kv_head_stride                 # (capacity, hd)
    cdef const float *V = vc + kvh * s.kv_head_stride                 # (capacity, hd)
    cdef float *w = scratch                                           # (np,) scores, then weights
    cdef float *acc = scratch + np                                    # (32, hd): lane sums of w * V
    cdef int64_t j, c, d
    cdef int k
    # kq = k . q (ggml_mul_mat), * scale (ggml_vec_scale_f32), masked to -inf
    cdef float mx = -INFINITY
    for j in range(np):
        if j < j0 or j >= nk:
            w[j] = -INFINITY
            continue
        w[j] = dot_vec_f32(K + j * hd, qr, hd) * s.scale
        mx = w[j] if w[j] > mx else mx
    # softmax (ggml_vec_soft_max_f32): exp in chunks of 8, their sums added in double
    cdef double total = 0.0
    for c in range(0, np, 8):
        total += <double>exp8(w + c, mx, w + c)
    cdef float inv = <float>(1.0 / total)
    # out = w . V, as ggml_mul_mat of v and the weights: one query row runs ggml_vec_dot_f32 (key j
    # feeds lane j % 8 of chain (j / 8) % 4), several rows tinyBLAS (one chain: lane j % 8).
    # acc row (j & 31) or (j & 7) holds that lane.
    cdef int chains = 4 if s.seq == 1 else 1
    cdef int64_t lanes_mask = 8 * chains - 1
    memset(acc, 0, <size_t>(8 * chains * hd) * sizeof(float))
    for j in range(j0, nk):
        axpy(hd, w[j] * inv, V + j * hd, acc + (j & lanes_mask) * hd)
    cdef float *o = out + i * nh * hd + h * hd                        # (hd,)
    cdef float l[8]                                                   # (8,) one output's lanes
    for d in range(hd):
        if chains == 1:
            for k in range(8):
                l[k] = acc[k * hd + d]
            o[d] = hsum8_tree(l)
        else:  # GGML_F32x8_REDUCE: chains (0+2)+(1+3), then lanes k + (k+4), hadd twice
            for k in range(8):
                l[k] = (acc[k * hd + d] + acc[(16 + k) * hd + d]) + (acc[(8 + k) * hd + d] + acc[(24 + k) * hd + d])
            o[d] = ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]))


cdef void fill_attention(vx_table *t) noexcept:
    t.attention = attention_f32
