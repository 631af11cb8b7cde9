# The C-level API of volvox's CPU kernels (csrc/vx_kernels.h), for cimport by any
# Cython module that wants to call them without Python in between.
from libc.stdint cimport uint8_t, int64_t


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

    ctypedef struct vx_table:
        const char *name
        vx_quantize_fn quantize[7]   # [VX_NTYPES]; NULL for f32 / f16
        vx_gemm_fn gemm[7]
        vx_dequant_fn dequant[7]
        vx_rms_norm_fn rms_norm
        vx_attn_fn attention
        vx_swiglu_fn swiglu
        vx_rope_fn rope

    size_t vx_act_row_bytes(int wtype, int64_t K)
    int vx_tier_count()
    const char *vx_tier_name(int i)
    int vx_tier_supported(const char *name)
    const vx_table *vx_get_table(const char *name)
