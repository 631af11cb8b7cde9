# The kernel table's contract: the types every ISA tier's kernels take and the table of function
# pointers a tier module hands the engine (kernels/tier.pxi fills it; engine.pyx calls through it).
# Pure Cython definitions, cimported by the engine and by every tier module.
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t


# ------------------------------------------------------------------------------------------------
# Weight types and ggml's block layouts (byte for byte what a GGUF file holds). Weights are read in
# place: never widened to f32 at load.
# ------------------------------------------------------------------------------------------------
cdef enum:
    VX_Q4_0 = 0
    VX_Q4_1 = 1
    VX_Q8_0 = 2
    VX_Q4_K = 3
    VX_Q6_K = 4
    VX_F32 = 5
    VX_F16 = 6
    VX_Q5_0 = 7
    VX_Q5_1 = 8
    VX_IQ4_NL = 9
    VX_Q2_K = 10
    VX_Q3_K = 11
    VX_Q5_K = 12
    VX_NTYPES = 13
    VX_QK = 32          # values per block of q4_0 / q4_1 / q5_0 / q5_1 / q8_0 / iq4_nl
    VX_QK_K = 256       # values per super-block of the k-quants (q2_K .. q6_K)

ctypedef uint16_t vx_f16
ctypedef struct vx_block_q4_0:      # 18 B
    vx_f16 d
    uint8_t qs[16]                  # [VX_QK / 2]
ctypedef struct vx_block_q4_1:      # 20 B
    vx_f16 d
    vx_f16 m
    uint8_t qs[16]                  # [VX_QK / 2]
ctypedef struct vx_block_q8_0:      # 34 B
    vx_f16 d
    int8_t qs[32]                   # [VX_QK]
ctypedef struct vx_block_q4_K:      # 144 B
    vx_f16 d                        # super-block scale for the 6-bit scales
    vx_f16 dmin                     # super-block scale for the 6-bit mins
    uint8_t scales[12]              # 8 scales + 8 mins, 6 bits each (get_scale_min_k4)
    uint8_t qs[128]                 # [VX_QK_K / 2]
ctypedef struct vx_block_q6_K:      # 210 B
    uint8_t ql[128]                 # [VX_QK_K / 2] low 4 bits
    uint8_t qh[64]                  # [VX_QK_K / 4] high 2 bits
    int8_t scales[16]               # [VX_QK_K / 16] 8-bit scale per 16 values
    vx_f16 d
ctypedef struct vx_block_q5_0:      # 22 B
    vx_f16 d
    uint8_t qh[4]                   # bit j: the 5th bit of value j
    uint8_t qs[16]                  # [VX_QK / 2] low nibbles: values 0..15, high: 16..31
ctypedef struct vx_block_q5_1:      # 24 B
    vx_f16 d
    vx_f16 m
    uint8_t qh[4]                   # bit j: the 5th bit of value j
    uint8_t qs[16]                  # [VX_QK / 2]
ctypedef struct vx_block_iq4_nl:    # 18 B
    vx_f16 d
    uint8_t qs[16]                  # [VX_QK / 2] indices into the 16 levels (ggml's kvalues_iq4nl)
ctypedef struct vx_block_q2_K:      # 84 B
    uint8_t scales[16]              # [VX_QK_K / 16] per 16 values: scale (low 4 bits), min (high 4)
    uint8_t qs[64]                  # [VX_QK_K / 4] 2 bits per value
    vx_f16 d                        # super-block scale for the scales
    vx_f16 dmin                     # super-block scale for the mins
ctypedef struct vx_block_q3_K:      # 110 B
    uint8_t hmask[32]               # [VX_QK_K / 8] bit j of byte l: value l of sub-block j is >= 0
    uint8_t qs[64]                  # [VX_QK_K / 4] low 2 bits per value
    uint8_t scales[12]              # 16 scales of 6 bits (stored + 32)
    vx_f16 d
ctypedef struct vx_block_q5_K:      # 176 B
    vx_f16 d                        # super-block scale for the 6-bit scales
    vx_f16 dmin                     # super-block scale for the 6-bit mins
    uint8_t scales[12]              # as q4_K's
    uint8_t qh[32]                  # [VX_QK_K / 8] bit j of byte l: 5th bit of value l of sub-block j
    uint8_t qs[128]                 # [VX_QK_K / 2]


cdef inline size_t VX_ALIGN(size_t n) noexcept nogil:
    """n rounded up to a multiple of 64 (offsets inside an act row)."""
    return (n + 63) & ~(<size_t>63)


# ------------------------------------------------------------------------------------------------
# Quantized activation rows ("act"), one per activation row, in caller scratch. The quantization is
# bit-identical to ggml's x86 build (the activation format ggml pairs with each weight type), so
# volvox and llama.cpp see the same integers and scales:
#   32-block weights (q4_0 / q5_0 / q8_0 / iq4_nl: ggml's q8_0; q4_1 / q5_1: ggml's q8_1):
#     int8  qs[K]              at 0
#     float ds[K/32][2]        at VX_ALIGN(K): d and s per block, held in f32 but with ggml's
#                              values: d = fp16(amax / 127); s = fp16(d * sum(qs)) (q8_1, q4_1
#                              weights) or the exact d16 * sum(qs) (q8_0)
#     int32 corr[K/4]          q4_0 / q5_0 / iq4_nl weights only, at VX_ALIGN(K) + VX_ALIGN(8 * K/32):
#                              -(qs[4 j] + .. + qs[4 j + 3]) * 8 (q4_0), * 16 (q5_0) or * 128
#                              (iq4_nl), the start of lane j's dot in the x86 kernels over unsigned
#                              weights (q4_0's nibbles: every x86 q4_0 kernel, so that a lane ends
#                              at ggml's int32 of (nibble - 8) * q; q5_0's q + 16 and iq4_nl's
#                              level + 128: the avx512 interleaved kernels), once per act row
#                              instead of per group
#     q = round-half-even(x * (127 / amax)), so |q| <= 127.
#   k-quant weights (q2_K .. q6_K), ggml's q8_K (quantize_row_q8_K_ref):
#     int8  qs[K]              at 0: min(127, round-half-even(x * (-127 / max))), max the first
#                              value of largest |x| in the 256
#     float d[K/256]           at VX_ALIGN(K): 1 / (-127 / max) (negative when max > 0)
#     int32 bsums[K/16]        at VX_ALIGN(K) + VX_ALIGN(4 * K/256): sums of 16 qs
#   f32 / f16 weights take the float activations as they are (no act row).
# The x86 SIMD tiers multiply block by block in ggml's order (8 float lanes per block, one FMA per
# block, then a horizontal sum), so avx2 and avx512 agree bit for bit with each other and with
# ggml's AVX2 kernels; the portable tier sums one float per block (ggml's generic order).
# ------------------------------------------------------------------------------------------------
cdef inline bint vx_is_kquant(int wtype) noexcept nogil:
    """Whether wtype is a 256-value super-block type (q8_K activations)."""
    return (wtype == VX_Q2_K or wtype == VX_Q3_K or wtype == VX_Q4_K or wtype == VX_Q5_K
            or wtype == VX_Q6_K)


cdef inline size_t vx_act_row_bytes(int wtype, int64_t K) noexcept nogil:
    """Bytes of one act row for weights of type wtype and K columns (0: f32 / f16 take floats)."""
    if vx_is_kquant(wtype):
        return VX_ALIGN(K) + VX_ALIGN(4 * (K // VX_QK_K)) + VX_ALIGN(4 * (K // 16))
    if wtype == VX_F32 or wtype == VX_F16:
        return 0
    if wtype == VX_Q4_0 or wtype == VX_Q5_0 or wtype == VX_IQ4_NL:
        return VX_ALIGN(K) + VX_ALIGN(8 * (K // VX_QK)) + VX_ALIGN(K)
    return VX_ALIGN(K) + VX_ALIGN(8 * (K // VX_QK))


cdef inline const int32_t *vx_act_corrections(const void *act, int64_t K) noexcept nogil:
    """corr (K/4,) of a q4_0 / q5_0 / iq4_nl act row (see above)."""
    return <const int32_t *>(<const char *>act + VX_ALIGN(K) + VX_ALIGN(8 * (K // VX_QK)))


# ------------------------------------------------------------------------------------------------
# Interleaved 32-block weights. A tier whose table sets il_rows = R also runs q4_0 / q4_1 / q8_0 / iq4_nl /
# q5_0 / q5_1
# weights packed R rows at a time, so that one vector instruction works on R rows (a decode step's
# matrix-vector products stream them; the engine's il_pack makes the layout). Group g holds rows
# R g .. R g + R - 1 (rows past n: zero scales), block after block; block b of a group is
#   vx_f16 d[R]                the rows' scales
#   vx_f16 m[R]                q4_1 / q5_1 only: the rows' mins
#   uint8  qh[4][2][R/2]       q5_0 / q5_1 only: per lane l and half h (0: low nibbles, 1: high), a
#                              4R-bit mask whose bit 4r + k is the 5th bit of row r's value
#                              4l + k + 16h (qh bit 4l + k + 16h): the mask of the bytes of lane l
#                              (qs below) whose nibble gains 16, loaded as is into a mask register
#   uint8  qs[L][R][4]         lane l of row r: the row's block bytes 4l .. 4l+3, as stored (q4_0 /
#                              q4_1 / iq4_nl / q5_0 / q5_1: L = 4 packed nibble bytes) or plus 128
#                              (q8_0: L = 8, byte ^ 0x80)
# so a group's block is R times the plain block's bytes and a group nb = K / 32 of them. Each row's
# dot product is formed with exactly the operations of the row-by-row kernels (same bits).
# ------------------------------------------------------------------------------------------------
cdef inline int64_t vx_il_block_bytes(int wtype, int R) noexcept nogil:
    """Bytes of one block of an interleaved group of R rows (0: wtype has no interleaved layout)."""
    if wtype == VX_Q4_0 or wtype == VX_IQ4_NL:
        return R * 18
    if wtype == VX_Q4_1:
        return R * 20
    if wtype == VX_Q8_0:
        return R * 34
    if wtype == VX_Q5_0:
        return R * 22
    if wtype == VX_Q5_1:
        return R * 24
    return 0


# ------------------------------------------------------------------------------------------------
# Interleaved k-quant weights. A tier that sets gemm_il[t] for a k-quant t runs it R = il_rows rows
# at a time as well: group g holds rows R g .. R g + R - 1 (rows past n: zero), super-block after
# super-block, each decoded at load from the rows' GGUF super-blocks (engine: il_pack) into
# R-wide arrays, every field row-minor:
#   lanes[L][R][4]  lane l of row r: the row's 4 bytes of quants at 4 l (of its 32-byte chunk)
#   q2_K (84 R):  d[R] dmin[R] (f16) | scales[4][R][4] (as stored: scale | min << 4; row r's groups
#                 4 i, 4 i + 2, 4 i + 1, 4 i + 3 at [i][r]) | qs lanes[2 * 8] (chunk h: qs[32 h ..])
#   q3_K (114 R): d[R] | scales[8][R][2] (int8: the 6-bit scale - 32; group 2 j + t of row r at [j][r][t]) | value
#                 lanes[8 * 3]: sub-block j's 32 values v = q + 4 (0 .. 7: 2 qs bits, hmask bit as 4)
#                 in its lanes t = 0, 1, 2 (3 j + t); value 16 h + 4 w + k of the sub-block lies in
#                 byte k of the lanes' row r, nibble h: for w < 3 in bits 0 .. 2 of lane w's nibble,
#                 for w = 3 bit t of it in bit 3 of lane t's nibble
#   q4_K (148 R): d[R] dmin[R] | sc[8][R] mn[8][R] (uint8, get_scale_min_k4's) | qs lanes[4 * 8]
#   q5_K (180 R): d[R] dmin[R] | sc[8][R] mn[8][R] | value planes[8 * 5]: sub-block j's 32 values
#                 (5 bits: the qs nibble, qh bit j as 16) as 8 lanes v_0 .. v_7 (v_w: values 4 w ..
#                 4 w + 3) in its planes t = 0 .. 4 (5 j + t): v_t in bits 0 .. 4 of plane t; bits 5 .. 7
#                 of planes 0 .. 4 hold v_5 bits 0 .. 2 | v_5 bits 3, 4 and v_6 bit 0 | v_6 bits 1 .. 3 |
#                 v_7 bits 0, 1 and v_6 bit 4 | v_7 bits 2 .. 4
#   q6_K (210 R): d[R] | scales[16][R] (int8) | value planes[16 * 3]: group g's 16 values (6 bits: the ql
#                 nibble, the qh pair as 16, 32) as 4 lanes v_0 .. v_3 in its planes t = 0, 1, 2 (3 g + t):
#                 v_t in bits 0 .. 5 of plane t, v_3's bits 2 t, 2 t + 1 in bits 6, 7 of plane t
# so a group's super-block is R times the plain super-block's bytes, plus R times 4 for the unpacked
# 6-bit scales of q3_K / q4_K / q5_K.
# ------------------------------------------------------------------------------------------------
cdef inline int64_t vx_il_superblock_bytes(int wtype, int R) noexcept nogil:
    """Bytes of one super-block of an interleaved k-quant group of R rows (0: not a k-quant)."""
    if wtype == VX_Q2_K:
        return R * 84
    if wtype == VX_Q3_K:
        return R * 114
    if wtype == VX_Q4_K:
        return R * 148
    if wtype == VX_Q5_K:
        return R * 180
    if wtype == VX_Q6_K:
        return R * 210
    return 0


cdef inline int64_t vx_il_group_bytes(int wtype, int R, int64_t K) noexcept nogil:
    """Bytes of one interleaved group of R rows of K columns (0: wtype has no interleaved layout)."""
    if vx_is_kquant(wtype):
        return (K // VX_QK_K) * vx_il_superblock_bytes(wtype, R)
    return (K // VX_QK) * vx_il_block_bytes(wtype, R)


# Quantize one activation row of K floats into an act row.
ctypedef void (*vx_quantize_fn)(int64_t K, const float *x, void *act) noexcept nogil
# y[i*ldy + r] = dot(weight row r, activation row i) for r < n, i < m; w: the first weight row, rows
# w_stride bytes apart; a: act rows a_stride bytes apart (f32 / f16 weights: the float rows). The
# tile reads weight rows once per group of up to 4 activation rows.
ctypedef void (*vx_gemm_fn)(int64_t K, const uint8_t *w, int64_t w_stride, int64_t n,
                            const void *a, int64_t a_stride, int64_t m,
                            float *y, int64_t ldy) noexcept nogil
# Dequantize one weight row of K values into floats.
ctypedef void (*vx_dequant_fn)(int64_t K, const uint8_t *w, float *y) noexcept nogil
ctypedef void (*vx_rms_norm_fn)(int64_t D, const float *x, const float *weight, float eps,
                                float *y) noexcept nogil


# ------------------------------------------------------------------------------------------------
# Sequence kernels: attention, SwiGLU, RoPE.
# ------------------------------------------------------------------------------------------------
# Causal grouped-query attention of `seq` new query rows over a KV cache laid out (n_kv_heads,
# capacity, head_dim) per layer, the new rows already appended at positions start .. start+seq-1.
# Query row i (absolute position start+i) sees keys j <= start+i, and only j > start+i-window when
# window > 0.
ctypedef struct vx_attn_shape:
    int64_t seq, start           # new rows; the absolute position of the first
    int64_t n_heads, n_kv_heads, head_dim
    int64_t kv_head_stride       # floats from one kv head to the next in the cache
    int64_t window               # 0: unlimited
    int64_t keys                 # > 0: not causal, every query sees keys 0..keys-1; 0: causal
    float scale                  # applied to q.k before the softmax (to q before its dot products when softcap > 0)
    float softcap                # > 0: scores -> softcap * tanhf(scores * (1 / softcap)) (Gemma 2); 0: none


cdef inline size_t vx_attn_scratch_floats(int64_t total, int64_t head_dim, int64_t group) noexcept nogil:
    """Floats of scratch one attention work item needs (one per thread): per head of a work item (a
    decode step's items are kv heads, `group` query heads each), a score row, 32 lane rows, its largest
    score and its scaled query row (soft-capped scores)."""
    return <size_t>group * <size_t>(((total + 7) // 8) * 8 + 33 * head_dim + 16)


# One work item `item` = (head h, query row i), item = h * seq + i: out[i * n_heads * head_dim +
# h * head_dim + d] for d < head_dim; q: (seq, n_heads * head_dim); kc, vc: the layer's keys and
# values. A single query row (seq 1, decode) has one item per kv head instead, `item` = kv head: its
# n_heads / n_kv_heads query heads together, each key and value row read once for all of them. The x86 SIMD tiers do ggml's f32 arithmetic step for step (ggml_mul_mat of k and q,
# ggml_soft_max_ext with its vectorised expf, ggml_mul_mat of v and the weights), so they agree bit
# for bit with llama.cpp's CPU attention (f32 KV cache, no flash).
ctypedef void (*vx_attn_fn)(const vx_attn_shape *s, const float *q, const float *kc,
                            const float *vc, int64_t item, float *scratch,
                            float *out) noexcept nogil
# y[f] = silu(gate[f]) * up[f] for f < F, or silu(gate[f]) when up is NULL (ggml_vec_swiglu_f32).
ctypedef void (*vx_swiglu_fn)(int64_t F, const float *gate, const float *up, float *y) noexcept nogil
# Rotary embedding of one row of n_heads heads at absolute position pos, as ggml's rope (f32). Pairs
# are (2i, 2i+1) when interleaved (ggml's NORM), else (i, i + rope_dim/2) (NEOX); the dims from
# rope_dim to head_dim are copied. x and y may be the same row.
# yarn (NULL: none) scales the angles as ggml's rope_yarn: each pair's theta divided by its freq factor,
# YaRN's ramp blend of interpolated and kept angles, and cos / sin times attn_factor.
ctypedef struct vx_rope_yarn:
    const float *freq_factors    # (rope_dim/2,) per-pair divisors of theta (GGUF rope_freqs), or NULL
    float ext_factor             # YaRN's ramp weight (0: interpolated angles only)
    float corr_lo, corr_hi       # YaRN's correction dims (ggml_rope_yarn_corr_dims)
    float attn_factor            # cos / sin multiplier (times 1 + 0.1 ln(1 / freq_scale) with a ramp)
ctypedef void (*vx_rope_fn)(int64_t n_heads, int64_t head_dim, int64_t rope_dim,
                            int interleaved, int64_t pos, float base, float freq_scale,
                            const vx_rope_yarn *yarn, const float *x, float *y) noexcept nogil


# ------------------------------------------------------------------------------------------------
# Vision kernels: packed f32 GEMM, f32 / int8 NHWC convolutions. A fused activation `act` is an
# ElementwiseFn code (codes.pxd): FN_NONE, FN_RELU or FN_RELU6.
# ------------------------------------------------------------------------------------------------
# A 2-D NHWC convolution's geometry (weights (out, kh, kw, in), pads top / left given; bottom /
# right are implied by oh / ow).
ctypedef struct vx_conv_shape:
    int64_t n, h, w, c           # input
    int64_t oh, ow               # output rows / columns
    int64_t kh, kw, sh, sw, dh, dw, pt, pl


cdef inline void vx_pool_taps(const vx_conv_shape *s, int64_t oh, int64_t ow, int64_t *i0, int64_t *i1,
                              int64_t *j0, int64_t *j1) noexcept nogil:
    """In-image taps [i0, i1) x [j0, j1) of output pixel (oh, ow)'s pooling window (no dilation)."""
    cdef int64_t h0 = oh * s.sh - s.pt, w0 = ow * s.sw - s.pl
    i0[0] = -h0 if h0 < 0 else 0
    i1[0] = s.h - h0 if h0 + s.kh > s.h else s.kh
    j0[0] = -w0 if w0 < 0 else 0
    j1[0] = s.w - w0 if w0 + s.kw > s.w else s.kw

# Per-output-channel int8 requantization (TFLite's MultiplyByQuantizedMultiplier).
ctypedef struct vx_requant:
    const int32_t *bias          # (n,) or NULL
    const int32_t *mult          # (n,)
    const int32_t *shift         # (n,)
    int32_t zp_in, zp_out, lo, hi


cdef inline size_t vx_sgemm_packed_floats(int64_t K, int64_t n) noexcept nogil:
    """Floats of f32 weights packed in panels of 32 rows: [ceil(n/32)][K][32], zero padded."""
    return <size_t>((n + 31) // 32 * 32 * K)


cdef inline size_t vx_qgemm_packed_bytes(int64_t K, int64_t n) noexcept nogil:
    """Bytes of int8 weights packed for qgemm: [ceil(n/32)*2][K4/4][16][4], K4 = K rounded up to 4."""
    return <size_t>((n + 31) // 32 * 32 * ((K + 3) & ~(<int64_t>3)))


ctypedef struct vx_conv_table:
    # pack f32 rows w (n rows, w_stride bytes apart, K floats each) into panels
    void (*sgemm_pack)(int64_t K, const uint8_t *w, int64_t w_stride, int64_t n,
                       float *packed) noexcept nogil
    # y[i*ldy + r] = act(bias[r] + a[i*lda : +K] . W[r]) for i < m, r < n (bias may be NULL)
    void (*sgemm)(int64_t K, const float *packed, int64_t n, const float *a, int64_t lda,
                  int64_t m, float *y, int64_t ldy, const float *bias, int act) noexcept nogil
    # y[r] = act(bias[r] + x . W[r]) for r < n: one row x of K floats (bias may be NULL); W packed
    void (*sgemv)(int64_t K, const float *packed, int64_t n, const float *x, const float *bias, int act,
                  float *y) noexcept nogil
    # y[q*ldy + r] = act(bias[r] + conv of output pixel p0 + q (flattened b, oh, ow) with W[r]) for
    # q < np, r < n; W packed (kh*kw*C per row); cols: np*kh*kw*C floats of scratch
    void (*conv_f32)(const vx_conv_shape *s, const float *x, int64_t p0, int64_t np,
                     const float *packed, int64_t n, const float *bias, int act, float *cols,
                     float *y, int64_t ldy) noexcept nogil
    # y[(q*ow + j)*ldy + r] = act(bias[r] + conv of output pixel (r0 + q, j) of image b with W[r])
    # for q < rows, r < n; unit column dilation; band: the rows' padded input (band_input_rows x
    # band_input_cols x C floats of scratch)
    void (*conv_band_f32)(const vx_conv_shape *s, const float *x, int64_t b, int64_t r0, int64_t rows,
                          const float *packed, int64_t n, const float *bias, int act, float *band,
                          float *y, int64_t ldy) noexcept nogil
    # depthwise (multiplier 1) output row item = b*oh_total + oh into y (ow, C); x's pixels ldx
    # floats apart (C, or more: a channel slice); w (kh*kw, C)
    void (*dwconv_f32)(const vx_conv_shape *s, const float *x, int64_t ldx, const float *w,
                       const float *bias, int act, int64_t item, float *y) noexcept nogil
    # pack int8 rows (n, K) for qgemm; wsum[r] = sum of row r
    void (*qgemm_pack)(int64_t K, const int8_t *w, int64_t n, int8_t *packed,
                       int32_t *wsum) noexcept nogil
    # im2col of int8 x as u8 (x + 128), padding pad_u8, rows ldc bytes (>= kh*kw*C, 0 filled)
    void (*im2col_u8)(const vx_conv_shape *s, const int8_t *x, int64_t p0, int64_t np,
                      uint8_t pad_u8, uint8_t *cols, int64_t ldc) noexcept nogil
    # y[i*ldy + r] = requant(sum_k (x - zp_in) w[r][k] + bias[r]); a: u8 rows of K4 bytes
    void (*qgemm)(int64_t K4, const int8_t *packed, const int32_t *wsum, int64_t n,
                  const uint8_t *a, int64_t lda, int64_t m, const vx_requant *rq, int8_t *y,
                  int64_t ldy) noexcept nogil
    # depthwise int8 (multiplier 1) output rows item .. item + rows - 1 (item = b*oh_total + oh)
    # into y (rows, ow, C); w (kh*kw, C) int16
    void (*qdwconv)(const vx_conv_shape *s, const int8_t *x, const int16_t *w,
                    const vx_requant *rq, int64_t item, int64_t rows, int8_t *y) noexcept nogil
    # y (n) = clamp(round_half_away(x / scale) + zp) as int8 (ops/quantized.py's quantize)
    void (*quantize_i8)(int64_t n, const float *x, float scale, int32_t zp, int8_t *y) noexcept nogil
    # f32 pools (kernels/pool.pxi), output row item = b*oh_total + oh into y (pixels of C, ldy
    # floats apart: C, or more for a channel slice): max (numpy's maximum over the in-image taps);
    # average (the in-image taps summed in row-major order, / the in-image count, or kh*kw with
    # include_pad)
    void (*max_pool_f32)(const vx_conv_shape *s, const float *x, int64_t item, float *y,
                         int64_t ldy) noexcept nogil
    void (*avg_pool_f32)(const vx_conv_shape *s, bint include_pad, const float *x, int64_t item,
                         float *y, int64_t ldy) noexcept nogil
    # global average pool of one image's x (HW, C), channels c0 <= c < c1: y[c] = float(the pixels
    # summed in order in float64 / HW)
    void (*global_avg_f32)(int64_t HW, int64_t C, int64_t c0, int64_t c1, const float *x,
                           float *y) noexcept nogil
    # y (n) = (x * clip(x + 3, 0, 6)) / 6, numpy's float32 bits (kernels/activation.pxi); y may be x
    void (*hard_swish_f32)(int64_t n, const float *x, float *y) noexcept nogil


# ------------------------------------------------------------------------------------------------
# Training kernels (kernels/backward.pxi): the backward passes of the LLM path's heavy ops.
# ------------------------------------------------------------------------------------------------
cdef enum:
    VX_MATMUL_T_ROWS = 256   # weight rows per panel of matmul_t_strip
    VX_MATMUL_T_COLS = 128   # input columns a work item of matmul_t_strip spans at most (one k-quant strip)


cdef inline int64_t vx_matmul_t_strip(int wtype) noexcept nogil:
    """Input columns per strip of matmul_t_strip: one block (256 for the k-quants, 32 else)."""
    return VX_QK_K if vx_is_kquant(wtype) else VX_QK


cdef inline int64_t vx_matmul_t_span(int wtype) noexcept nogil:
    """Strips one work item of matmul_t_strip takes at most (VX_MATMUL_T_COLS columns, one strip or more)."""
    return VX_MATMUL_T_COLS // vx_matmul_t_strip(wtype) if vx_matmul_t_strip(wtype) < VX_MATMUL_T_COLS else 1


cdef inline int64_t vx_matmul_t_panel_floats(int wtype, int64_t N) noexcept nogil:
    """Floats of scratch matmul_t_strip needs (one per thread) for a weight of N rows."""
    return (N if N < VX_MATMUL_T_ROWS else VX_MATMUL_T_ROWS) * vx_matmul_t_strip(wtype) * vx_matmul_t_span(wtype)


# Causal grouped-query self-attention over a whole sequence (no KV cache): q, out (seq, n_heads *
# head_dim); k, v (seq, n_kv_heads * head_dim); query row i sees keys j <= i, and only j > i - window
# when window > 0; lse, delta (n_heads, seq).
ctypedef struct vx_attn_train_shape:
    int64_t seq, n_heads, n_kv_heads, head_dim
    int64_t window               # 0: unlimited
    float scale                  # applied to q.k before the softmax


cdef inline int64_t vx_attn_fwd_scratch_floats(int64_t head_dim) noexcept nogil:
    """Floats of scratch attention_fwd_block needs (one per thread): k of a block of 32 keys transposed,
    the block's scores for 32 queries, their 32 output rows, and each row's running max and sum."""
    return 2 * head_dim * 32 + 32 * 32 + 2 * 32


cdef inline int64_t vx_attn_bwd_scratch_floats(int64_t head_dim) noexcept nogil:
    """Floats of scratch attention_bwd_group needs (one per thread): k and v of a block of 32 keys
    transposed, and the block's P and dS for 32 queries."""
    return 2 * head_dim * 32 + 2 * 32 * 32


ctypedef struct vx_train_table:
    # dx[:, strips] (M, K) = dy (M, N) @ W (N, K)[:, strips], strips = the strip-th .. (strip + span
    # - 1)-th vx_matmul_t_strip columns (span <= vx_matmul_t_span); dy[r, o] at dy[r * dy_row + o *
    # dy_col]; W rows row_bytes apart (group_bytes 0) or interleaved groups of il_rows rows; dq: the
    # table's dequant of wtype; panel: vx_matmul_t_panel_floats(wtype, N) floats of scratch
    void (*matmul_t_strip)(int wtype, vx_dequant_fn dq, int64_t K, const uint8_t *w, int64_t row_bytes,
                           int64_t group_bytes, int il_rows, int64_t N, int64_t strip, int64_t span,
                           const float *dy, int64_t dy_row, int64_t dy_col, int64_t M, float *dx,
                           float *panel) noexcept nogil
    # item r * n_heads + h: out's rows and lse[h, rows] of head h's r-th block of 32 queries from
    # the last; scratch: vx_attn_fwd_scratch_floats(head_dim) floats
    void (*attention_fwd_block)(const vx_attn_train_shape *s, const float *q, const float *k,
                                const float *v, int64_t item, float *scratch, float *out,
                                float *lse) noexcept nogil
    # kv head g of one sequence: dk, dv of head g and dq of its query heads, delta (n_heads, seq) of
    # those heads written on the way; scratch: vx_attn_bwd_scratch_floats(head_dim) floats
    void (*attention_bwd_group)(const vx_attn_train_shape *s, const float *q, const float *k,
                                const float *v, const float *out, const float *dout, const float *lse,
                                int64_t g, float *delta, float *dq, float *dk, float *dv,
                                float *scratch) noexcept nogil
    # one row of V logits: loss, logsumexp and (dx not NULL) dx = scale (softmax - onehot(label))
    void (*cross_entropy_row)(int64_t V, const float *x, int64_t label, float scale, float *dx,
                              float *loss, float *lse) noexcept nogil
    # the same row's dx = scale (exp(x - lse) - onehot(label)) from its saved logsumexp (dx may be x)
    void (*cross_entropy_grad_row)(int64_t V, const float *x, int64_t label, float lse, float scale,
                                   float *dx) noexcept nogil
    # dx (D,) of one RMSNorm row given dL/dy g; returns the row's 1 / rms
    float (*rms_norm_bwd_row)(int64_t D, const float *x, const float *weight, const float *g,
                              float eps, float *dx) noexcept nogil
    # dx (D,) of one LayerNorm row given dL/dy g; writes the row's mean, returns its 1 / std
    float (*layer_norm_bwd_row)(int64_t D, const float *x, const float *weight, const float *g,
                                float eps, float *dx, float *mean) noexcept nogil
    # dx (n,) = dy * gelu'(x) (exact or the tanh form); dx = dy * silu'(x); dx may be dy
    void (*gelu_grad_run)(int64_t n, const float *x, const float *dy, bint tanh_approx, float *dx) noexcept nogil
    void (*silu_grad_run)(int64_t n, const float *x, const float *dy, float *dx) noexcept nogil


# ------------------------------------------------------------------------------------------------
# A tier's table: every kernel the engine calls, by family.
# ------------------------------------------------------------------------------------------------
ctypedef struct vx_table:
    const char *name
    vx_quantize_fn quantize[13]  # [VX_NTYPES]; NULL for f32 / f16
    vx_gemm_fn gemm[13]          # [VX_NTYPES]
    int il_rows                  # rows per interleaved group (0: the tier has no interleaved kernels)
    vx_gemm_fn gemm_il[13]       # [VX_NTYPES] interleaved weights (w: group 0, w_stride: bytes per
                                 # group, n: rows); NULL: the type is not interleaved on this tier
    vx_dequant_fn dequant[13]    # [VX_NTYPES]
    vx_rms_norm_fn rms_norm
    vx_attn_fn attention
    vx_swiglu_fn swiglu
    vx_rope_fn rope
    const vx_conv_table *conv
    const vx_train_table *train
