# The C-level API of volvox's CPU kernels (csrc/vx_kernels.h), for cimport by any
# Cython module that wants to call them without Python in between.
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t


cdef extern from "vx_kernels.h" nogil:
    enum:
        VX_Q4_0
        VX_Q4_1
        VX_Q8_0
        VX_Q4_K
        VX_Q6_K
        VX_F32
        VX_F16
        VX_NTYPES
        VX_QK
        VX_QK_K

    # ggml block layouts (byte for byte what a GGUF file holds).
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
    # n rounded up to a multiple of 64 (offsets inside an act row)
    size_t VX_ALIGN(size_t n)

    # Quantize one activation row of K floats into an 8-bit act row.
    ctypedef void (*vx_quantize_fn)(int64_t K, const float *x, void *act) noexcept nogil
    # y[i*ldy + r] = dot(weight row r, activation row i) for r < n, i < m.
    ctypedef void (*vx_gemm_fn)(int64_t K, const uint8_t *w, int64_t w_stride, int64_t n,
                                const void *a, int64_t a_stride, int64_t m,
                                float *y, int64_t ldy) noexcept nogil
    ctypedef void (*vx_dequant_fn)(int64_t K, const uint8_t *w, float *y) noexcept nogil
    ctypedef void (*vx_rms_norm_fn)(int64_t D, const float *x, const float *weight, float eps,
                                    float *y) noexcept nogil

    ctypedef struct vx_attn_shape:
        int64_t seq, start, n_heads, n_kv_heads, head_dim, kv_head_stride, window
        float scale
    size_t vx_attn_scratch_floats(int64_t total, int64_t head_dim)
    # One (head, query row) item of causal GQA attention over a KV cache.
    ctypedef void (*vx_attn_fn)(const vx_attn_shape *s, const float *q, const float *kc,
                                const float *vc, int64_t item, float *scratch,
                                float *out) noexcept nogil
    ctypedef void (*vx_swiglu_fn)(int64_t F, const float *gate, const float *up, float *y) noexcept nogil
    ctypedef void (*vx_rope_fn)(int64_t n_heads, int64_t head_dim, int64_t rope_dim,
                                int interleaved, int64_t pos, float base, float freq_scale,
                                const float *x, float *y) noexcept nogil

    # Vision kernels (vx_conv.c): packed f32 GEMM, f32 / int8 NHWC convolutions.
    enum:
        VX_ACT_NONE
        VX_ACT_RELU
        VX_ACT_RELU6
    ctypedef struct vx_conv_shape:
        int64_t n, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl
    ctypedef struct vx_requant:
        const int32_t *bias
        const int32_t *mult
        const int32_t *shift
        int32_t zp_in, zp_out, lo, hi
    size_t vx_sgemm_packed_floats(int64_t K, int64_t n)
    size_t vx_qgemm_packed_bytes(int64_t K, int64_t n)
    ctypedef struct vx_conv_table:
        void (*sgemm_pack)(int64_t K, const uint8_t *w, int64_t w_stride, int64_t n,
                           float *packed) noexcept nogil
        void (*sgemm)(int64_t K, const float *packed, int64_t n, const float *a, int64_t lda,
                      int64_t m, float *y, int64_t ldy, const float *bias, int act) noexcept nogil
        void (*conv_f32)(const vx_conv_shape *s, const float *x, int64_t p0, int64_t np,
                         const float *packed, int64_t n, const float *bias, int act, float *cols,
                         float *y, int64_t ldy) noexcept nogil
        void (*dwconv_f32)(const vx_conv_shape *s, const float *x, const float *w,
                           const float *bias, int act, int64_t item, float *y) noexcept nogil
        void (*qgemm_pack)(int64_t K, const int8_t *w, int64_t n, int8_t *packed,
                           int32_t *wsum) noexcept nogil
        void (*im2col_u8)(const vx_conv_shape *s, const int8_t *x, int64_t p0, int64_t np,
                          uint8_t pad_u8, uint8_t *cols, int64_t ldc) noexcept nogil
        void (*qgemm)(int64_t K4, const int8_t *packed, const int32_t *wsum, int64_t n,
                      const uint8_t *a, int64_t lda, int64_t m, const vx_requant *rq, int8_t *y,
                      int64_t ldy) noexcept nogil
        void (*qdwconv)(const vx_conv_shape *s, const int8_t *x, const int16_t *w,
                        const vx_requant *rq, int64_t item, int64_t rows, int8_t *y) noexcept nogil
        void (*quantize_i8)(int64_t n, const float *x, float scale, int32_t zp, int8_t *y) noexcept nogil

    ctypedef struct vx_table:
        const char *name
        vx_quantize_fn quantize[7]   # [VX_NTYPES]; NULL for f32 / f16
        vx_gemm_fn gemm[7]
        vx_dequant_fn dequant[7]
        vx_rms_norm_fn rms_norm
        vx_attn_fn attention
        vx_swiglu_fn swiglu
        vx_rope_fn rope
        const vx_conv_table *conv

    size_t vx_act_row_bytes(int wtype, int64_t K)
