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
#   int64_t swiglu_blocks(int64_t F, const float *gate, const float *up, float *y)   (<tier>/swiglu.pxi on x86)
#       swiglu over the leading whole blocks of 8 (avx512: of 16, ggml's AVX-512 expf) with the vector
#       expf (rows.pxi finishes the rest)
# and its vector layer's vf_* (VL float lanes) for the weighted sum of values (wv_lanes).
from libc.math cimport INFINITY, tanhf
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


cdef inline vf wv_key(const float *v, const float *w, int64_t j, vf a) noexcept nogil:
    """a + V row j's VL floats at v times w[j], rounded once (one key's term of a lane's sum)."""
    return vf_fma(vf_load(v), vf_set1(w[j]), a)


cdef inline float scores8_each(const float *K, const float *q, int64_t hd, float scale, float *w) noexcept nogil:
    """w[k] = dot_vec_f32(K + k * hd, q, hd) * scale for k < 8; returns their largest (NaNs skipped)."""
    cdef float mx = -INFINITY
    cdef int k
    for k in range(8):
        w[k] = dot_vec_f32(K + k * hd, q, hd) * scale
        mx = w[k] if w[k] > mx else mx
    return mx


cdef enum:
    WV_CHUNK = 8        # blocks of 8 keys (of one chain) whose values wv_lanes runs through per column
    ATTN_AHEAD = 16     # key rows ahead of the one scored that attention_f32 prefetches


cdef inline void wv_lanes(const float *V, int64_t hd, const float *w, int64_t j0, int64_t nk, int64_t c,
                          int64_t chains, int64_t b_lo, int64_t b_hi, float *lanes) noexcept nogil:
    """lanes[l * hd + d] (l < 8, d < hd) += in key order V[j * hd + d] * w[j] (each term one FMA) over
    the keys j0 <= j < nk of the blocks b_lo <= b < b_hi (8 keys each) of chain c (b % chains == c)
    with j % 8 == l. Called over consecutive block ranges from zeroed lanes, this is the lane sums of
    ggml_vec_dot_f32 (4 chains) or tinyBLAS (1), bit for bit: every lane takes its keys in order.

    The range is WV_CHUNK blocks of the chain (64 value rows, 16 KiB at hd 64: in L1 for every
    column), a column of VL values at a time with its 8 lanes' sums in registers: one load and store
    of a sum per range, not per key. (An axpy into the lane rows per key ran one 512-token layer in
    17 to 33 ms, by where the scratch fell against the cache modulo 4 KiB: its stores and the value
    loads aliased.)"""
    cdef int64_t b_first = (b_lo if b_lo > j0 // 8 else j0 // 8)
    cdef int64_t d, b, jb, j, je
    cdef const float *p
    cdef vf a0, a1, a2, a3, a4, a5, a6, a7          # lanes 0..7 of one column
    b_first += (c - b_first % chains + chains) % chains    # the range's first block of chain c
    if b_first >= b_hi or b_first * 8 >= nk:
        return
    d = 0
    while d + VL <= hd:
        a0 = vf_load(lanes + d)
        a1 = vf_load(lanes + hd + d)
        a2 = vf_load(lanes + 2 * hd + d)
        a3 = vf_load(lanes + 3 * hd + d)
        a4 = vf_load(lanes + 4 * hd + d)
        a5 = vf_load(lanes + 5 * hd + d)
        a6 = vf_load(lanes + 6 * hd + d)
        a7 = vf_load(lanes + 7 * hd + d)
        b = b_first
        while b < b_hi and b * 8 < nk:
            jb = b * 8
            p = V + jb * hd + d
            if jb >= j0 and jb + 8 <= nk:         # a whole block of 8 keys, row by row
                a0 = wv_key(p, w, jb, a0)
                p += hd
                a1 = wv_key(p, w, jb + 1, a1)
                p += hd
                a2 = wv_key(p, w, jb + 2, a2)
                p += hd
                a3 = wv_key(p, w, jb + 3, a3)
                p += hd
                a4 = wv_key(p, w, jb + 4, a4)
                p += hd
                a5 = wv_key(p, w, jb + 5, a5)
                p += hd
                a6 = wv_key(p, w, jb + 6, a6)
                p += hd
                a7 = wv_key(p, w, jb + 7, a7)
            else:                                 # the first or last block: its visible keys
                je = jb + 8 if jb + 8 < nk else nk
                for j in range(jb if jb > j0 else j0, je):
                    p = V + j * hd + d
                    if j % 8 == 0:
                        a0 = wv_key(p, w, j, a0)
                    elif j % 8 == 1:
                        a1 = wv_key(p, w, j, a1)
                    elif j % 8 == 2:
                        a2 = wv_key(p, w, j, a2)
                    elif j % 8 == 3:
                        a3 = wv_key(p, w, j, a3)
                    elif j % 8 == 4:
                        a4 = wv_key(p, w, j, a4)
                    elif j % 8 == 5:
                        a5 = wv_key(p, w, j, a5)
                    elif j % 8 == 6:
                        a6 = wv_key(p, w, j, a6)
                    else:
                        a7 = wv_key(p, w, j, a7)
            b += chains
        vf_store(lanes + d, a0)
        vf_store(lanes + hd + d, a1)
        vf_store(lanes + 2 * hd + d, a2)
        vf_store(lanes + 3 * hd + d, a3)
        vf_store(lanes + 4 * hd + d, a4)
        vf_store(lanes + 5 * hd + d, a5)
        vf_store(lanes + 6 * hd + d, a6)
        vf_store(lanes + 7 * hd + d, a7)
        d += VL
    while d < hd:                                 # the last hd % VL values, key by key
        b = b_first
        while b < b_hi and b * 8 < nk:
            jb = b * 8
            je = jb + 8 if jb + 8 < nk else nk
            for j in range(jb if jb > j0 else j0, je):
                lanes[(j % 8) * hd + d] = vx_fma(V[j * hd + d], w[j], lanes[(j % 8) * hd + d])
            b += chains
        d += 1


cdef inline float head_scores(const vx_attn_shape *s, const float *K, const float *qr, int64_t j0, int64_t nk,
                              int64_t b, float *w) noexcept nogil:
    """w[8b .. 8b + 8) = scale * (K row j) . qr, -inf outside j0 <= j < nk (ggml_mul_mat of k and q,
    ggml_vec_scale_f32, the mask); returns the largest."""
    cdef int64_t hd = s.head_dim, j
    cdef float mx = -INFINITY
    if 8 * b >= j0 and 8 * b + 8 <= nk:  # a whole block of visible keys
        return scores8(K + 8 * b * hd, qr, hd, s.scale, w + 8 * b)
    for j in range(8 * b, 8 * b + 8):
        if j < j0 or j >= nk:
            w[j] = -INFINITY
            continue
        w[j] = dot_vec_f32(K + j * hd, qr, hd) * s.scale
        mx = w[j] if w[j] > mx else mx
    return mx


cdef inline float softcap8(float cap, int64_t j0, int64_t nk, float *w) noexcept nogil:
    """w[j] = cap * tanhf(w[j] * (1 / cap)) for the visible j0 <= j < nk of these 8 (ggml_scale, ggml_tanh,
    ggml_scale: llama.cpp's Gemma 2 scores); returns the largest."""
    cdef float inv = 1.0 / cap, mx = -INFINITY
    cdef int k
    for k in range(8):
        if j0 <= k < nk:
            w[k] = tanhf(w[k] * inv) * cap
            mx = w[k] if w[k] > mx else mx
    return mx


cdef inline vf chain_lane(const float *acc, int64_t hd, int k, int64_t d) noexcept nogil:
    """Lane k of the four chains' sums at columns d ..: (c0 + c2) + (c1 + c3)."""
    return vf_add(vf_add(vf_load(acc + k * hd + d), vf_load(acc + (16 + k) * hd + d)),
                  vf_add(vf_load(acc + (8 + k) * hd + d), vf_load(acc + (24 + k) * hd + d)))


cdef inline int64_t lane_sums_out(const float *acc, int64_t hd, int chains, float *o) noexcept nogil:
    """o[d] for d below hd rounded down to VL: acc's lane sums (rows k * hd, 8 per chain) added as the
    scalar loop after it adds them, VL columns at a time (the same additions, lane by lane); returns
    the first d left."""
    cdef int64_t d = 0
    cdef vf l0, l1, l2, l3, l4, l5, l6, l7
    while d + VL <= hd:
        if chains == 1:   # hsum8_tree
            vf_store(o + d, vf_add(vf_add(vf_add(vf_load(acc + d), vf_load(acc + 4 * hd + d)),
                                          vf_add(vf_load(acc + 2 * hd + d), vf_load(acc + 6 * hd + d))),
                                   vf_add(vf_add(vf_load(acc + hd + d), vf_load(acc + 5 * hd + d)),
                                          vf_add(vf_load(acc + 3 * hd + d), vf_load(acc + 7 * hd + d)))))
        else:             # GGML_F32x8_REDUCE
            l0 = chain_lane(acc, hd, 0, d)
            l1 = chain_lane(acc, hd, 1, d)
            l2 = chain_lane(acc, hd, 2, d)
            l3 = chain_lane(acc, hd, 3, d)
            l4 = chain_lane(acc, hd, 4, d)
            l5 = chain_lane(acc, hd, 5, d)
            l6 = chain_lane(acc, hd, 6, d)
            l7 = chain_lane(acc, hd, 7, d)
            vf_store(o + d, vf_add(vf_add(vf_add(l0, l4), vf_add(l1, l5)), vf_add(vf_add(l2, l6), vf_add(l3, l7))))
        d += VL
    return d


cdef void attention_f32(const vx_attn_shape *s, const float *q, const float *kc, const float *vc,
                        int64_t item, float *scratch, float *out) noexcept nogil:
    """One work item of causal GQA attention over the KV cache (vx.pxd): head h and query row i, item =
    h * seq + i; or, for one query row (decode), kv head `item` and its query heads together, which
    read each key and value row once (from memory) for all of them. out[i, h] = softmax(scale * K q,
    masked) . V, ggml's f32 CPU attention step for step, per head. Soft-capped (softcap > 0, Gemma 2),
    as llama.cpp builds it: the query scaled first, then softmax(softcap * tanh(K q / softcap))."""
    cdef int64_t hd = s.head_dim, nh = s.n_heads
    cdef int64_t group = nh // s.n_kv_heads
    cdef int64_t heads = group if s.seq == 1 else 1                   # query heads of this item
    cdef int64_t h0 = item * group if s.seq == 1 else item // s.seq  # its first
    cdef int64_t i = 0 if s.seq == 1 else item % s.seq
    cdef int64_t kvh = h0 // group
    cdef int64_t nk = s.keys if s.keys > 0 else s.start + i + 1       # keys 0..start+i (causal)
    cdef int64_t j0 = nk - s.window if s.window > 0 and nk > s.window else 0  # first visible
    cdef int64_t np = (nk + 7) // 8 * 8
    cdef int64_t per = np + 33 * hd + 16                              # scratch floats per head (vx.pxd)
    cdef const float *K = kc + kvh * s.kv_head_stride                 # (capacity, hd)
    cdef const float *V = vc + kvh * s.kv_head_stride                 # (capacity, hd)
    cdef int chains = 4 if s.seq == 1 else 1
    cdef int64_t span = WV_CHUNK * chains                            # blocks per pass of wv_lanes
    cdef int64_t g, b, c, d, line, j
    cdef int k
    cdef float *w                                                     # (np,) head g's scores, then weights
    cdef float *acc                                                   # (32, hd): its lane sums of w * V
    cdef float *mx                                                    # (1,) after them: its largest score
    cdef float bm, inv
    cdef double total
    cdef float l[8]                                                   # (8,) one output's lanes
    cdef float *o
    cdef const float *qh                                              # (hd,) head g's query (scaled when capped)
    cdef float *qs                                                    # (hd,) after mx: its scaled copy
    cdef vx_attn_shape capped = s[0]                                  # soft-capped: the scale is q's, not the scores'
    cdef const vx_attn_shape *sh = s
    if s.softcap > 0:
        capped.scale = 1.0
        sh = &capped
        for g in range(heads):
            qs = scratch + g * per + np + 32 * hd + 16
            for d in range(hd):
                qs[d] = q[i * nh * hd + (h0 + g) * hd + d] * s.scale  # ggml_scale(Qcur, f_attention_scale)
    for g in range(heads):
        scratch[g * per + np + 32 * hd] = -INFINITY
    # kq = k . q (ggml_mul_mat), * scale (ggml_vec_scale_f32), masked to -inf: 8 keys at a time for
    # every head of the item (the rows from L1 after the first), K ATTN_AHEAD rows ahead and these
    # rows of V (read after the softmax) asked for from memory
    for b in range(np // 8):
        for line in range(0, 8 * hd, 16):
            __builtin_prefetch(K + (8 * b + ATTN_AHEAD) * hd + line, 0, 3)
            __builtin_prefetch(V + 8 * b * hd + line, 0, 2)
        for g in range(heads):
            w = scratch + g * per
            mx = w + np + 32 * hd
            qh = w + np + 32 * hd + 16 if s.softcap > 0 else q + i * nh * hd + (h0 + g) * hd
            bm = head_scores(sh, K, qh, j0, nk, b, w)
            if s.softcap > 0:
                bm = softcap8(s.softcap, j0 - 8 * b, nk - 8 * b, w + 8 * b)
            mx[0] = bm if bm > mx[0] else mx[0]
    # softmax (ggml_vec_soft_max_f32): exp in chunks of 8, their sums added in double
    for g in range(heads):
        w = scratch + g * per
        total = 0.0
        for c in range(0, np, 8):
            total += <double>exp8(w + c, w[np + 32 * hd], w + c)
        inv = <float>(1.0 / total)
        for j in range(j0, nk):
            w[j] = w[j] * inv
        acc = w + np
        for k in range(32 * hd):
            acc[k] = 0.0
    # out = w . V, as ggml_mul_mat of v and the weights: one query row runs ggml_vec_dot_f32 (key j
    # feeds lane j % 8 of chain (j / 8) % 4), several rows tinyBLAS (one chain: lane j % 8). acc row
    # (j & 31) or (j & 7) holds that lane. Range by range of blocks, every head of the item.
    b = (j0 // 8) // span * span
    while 8 * b < nk:
        for c in range(chains):
            for g in range(heads):
                w = scratch + g * per
                wv_lanes(V, hd, w, j0, nk, c, chains, b, b + span, w + np + c * 8 * hd)
        b += span
    for g in range(heads):
        acc = scratch + g * per + np
        o = out + i * nh * hd + (h0 + g) * hd                        # (hd,)
        d = lane_sums_out(acc, hd, chains, o)
        for d in range(d, hd):
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
