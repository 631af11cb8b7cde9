# The avx512 tier's GEMVs over interleaved q5_0, q5_1 and iq4_nl weights (vx.pxd's layout, IL_ROWS rows
# per group). Included by kernels/avx512/gemv.pxi after b32_il_tile, whose helpers (act_lane) and
# order they share: per block, lane l's 4 products as an exact int32 times wd * dx into float lane l of
# each row (ggml's AVX2 order), so a row's bits equal the row-by-row kernel's (b32x_row).
#
# Each format is its own C function: the tile takes `const b32x_format *`, a null pointer whose type's
# size is the format's VX_ code, so Cython emits one function per format with its branches folded
# (as kq_format in kernels/gemv_kquants_il.pxi). With the format a runtime value (one tile for every
# 32-block type) GCC kept every format's branches in the loop over a block's lanes.
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint64_t
from libc.string cimport memcpy
from volvox._kernels.vx cimport (
    VX_ALIGN, VX_IQ4_NL, VX_NTYPES, VX_Q5_0, VX_Q5_1, VX_QK, vx_act_corrections, vx_il_block_bytes)

ctypedef struct b32x_q5_0:
    char n[7]                   # [VX_Q5_0]
ctypedef struct b32x_q5_1:
    char n[8]                   # [VX_Q5_1]
ctypedef struct b32x_iq4_nl:
    char n[9]                   # [VX_IQ4_NL]: the levels looked up with pshufb + masks
ctypedef struct b32x_iq4_nl_vbmi:
    char n[22]                  # [VX_IQ4_NL + VX_NTYPES]: with vpermb (AVX-512 VBMI CPUs only)
ctypedef fused b32x_format:
    b32x_q5_0
    b32x_q5_1
    b32x_iq4_nl
    b32x_iq4_nl_vbmi


cdef inline void b32x_il_tile(const b32x_format *F_, const act_rows *MR_, int64_t K, const uint8_t *g,
                              const int8_t **xq, const float **ds, float *out) noexcept nogil:
    """One group's IL_ROWS weight rows against MR (1 or 2) act rows: out[IL_ROWS i + r] = dot(row r,
    act row i), formed as b32_il_tile forms q4_0's: iq4_nl's nibbles select its levels + 128 (vpermb,
    or pshufb + masks), each lane starting from the act row's corr (-128 * its 4 act values' sum);
    q5_0 / q5_1's 5th bits (a mask per lane and half, vx.pxd) add 16 to their nibbles, q5_0's lanes
    starting from its corr (-16 * the sum: its weights are q - 16), q5_1's m-term an FMA chain."""
    cdef int fmt = sizeof(b32x_format) % VX_NTYPES
    cdef bint vbmi = sizeof(b32x_format) > VX_NTYPES
    cdef int MR = sizeof(act_rows)
    cdef int64_t nb = K // VX_QK
    cdef int64_t sb = vx_il_block_bytes(fmt, IL_ROWS)          # bytes per block of the group
    cdef bint has_m = fmt == VX_Q5_1
    cdef bint has_qh = fmt != VX_IQ4_NL
    cdef int qhoff = (4 if has_m else 2) * IL_ROWS             # offset of q5's 5th bits in the block
    cdef int qoff = qhoff + (4 * IL_ROWS if has_qh else 0)     # offset of qs in the block
    cdef __m512i sixteen = _mm512_set1_epi8(16)
    cdef __m512i m4 = _mm512_set1_epi8(0x0F)
    cdef __m512i levels = _mm512_broadcast_i32x4(_mm_xor_si128(_mm_loadu_si128(<const void *>IQ4_NL_LEVELS),
                                                               _mm_set1_epi8(<char>-128)))   # levels + 128
    cdef uint64_t h5[2]          # (half,) lane l's 5th-bit masks: bit 4 r + k, row r's byte k
    cdef __m512 acc[2][8]        # (MR, lane) IL_ROWS rows each
    cdef __m512 accm[2]          # (MR,) q5_1: IL_ROWS m-term chains
    cdef __m512 dd[2]            # (MR,) wd * dx
    cdef __m512 dw, wm
    cdef __m512i p, lo, hi
    cdef const int8_t *xb[2]     # (MR,) the block's 32 act values: lane l's 4 bytes at xb[i] + 4 l
    cdef const int32_t *cs[2]    # (MR,) q5_0 / iq4_nl: the act rows' corr (K/4,)
    cdef const int32_t *c[2]     # (MR,) this block's 8 lane starts
    cdef const uint8_t *blk
    cdef int64_t b
    cdef int i, l
    for i in range(MR):
        accm[i] = _mm512_setzero_ps()
        for l in range(8):
            acc[i][l] = _mm512_setzero_ps()
        cs[i] = vx_act_corrections(xq[i], K)
    for b in range(nb):
        blk = g + b * sb
        for l in range(0, sb, 64):
            _mm_prefetch(<const char *>(blk + IL_PREFETCH + l), _MM_HINT_T1)
        dw = _mm512_cvtph_ps(_mm256_loadu_si256(<const void *>blk))
        for i in range(MR):
            dd[i] = _mm512_mul_ps(dw, _mm512_set1_ps(ds[i][2 * b]))
            xb[i] = xq[i] + b * VX_QK
            c[i] = cs[i] + 8 * b
        for l in range(4):
            p = _mm512_loadu_si512(<const void *>(blk + qoff + 64 * l))
            if fmt == VX_IQ4_NL:
                if vbmi:        # levels (64,) repeats the 16: an index's bits 4, 5 need no mask
                    lo = vx_permb(p, levels)
                    hi = vx_permb(_mm512_srli_epi16(p, 4), levels)
                else:
                    lo = _mm512_shuffle_epi8(levels, _mm512_and_si512(p, m4))
                    hi = _mm512_shuffle_epi8(levels, _mm512_and_si512(_mm512_srli_epi16(p, 4), m4))
            else:               # the bytes whose nibble has its 5th bit: + 16
                memcpy(h5, blk + qhoff + 16 * l, 16)
                lo = _mm512_and_si512(p, m4)
                hi = _mm512_and_si512(_mm512_srli_epi16(p, 4), m4)
                lo = _mm512_mask_add_epi8(lo, <__mmask64>h5[0], lo, sixteen)
                hi = _mm512_mask_add_epi8(hi, <__mmask64>h5[1], hi, sixteen)
            for i in range(MR):
                acc[i][l] = _mm512_fmadd_ps(dd[i], _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(
                    _mm512_setzero_si512() if has_m else _mm512_set1_epi32(c[i][l]), lo,
                    act_lane(xb[i], l))), acc[i][l])
                acc[i][l + 4] = _mm512_fmadd_ps(dd[i], _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(
                    _mm512_setzero_si512() if has_m else _mm512_set1_epi32(c[i][l + 4]), hi,
                    act_lane(xb[i], l + 4))), acc[i][l + 4])
        if has_m:
            wm = _mm512_cvtph_ps(_mm256_loadu_si256(<const void *>(blk + 2 * IL_ROWS)))
            for i in range(MR):
                accm[i] = _mm512_fmadd_ps(wm, _mm512_set1_ps(ds[i][2 * b + 1]), accm[i])
    for i in range(MR):
        _mm512_storeu_ps(out + IL_ROWS * i, _mm512_add_ps(
            _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(acc[i][0], acc[i][4]), _mm512_add_ps(acc[i][2], acc[i][6])),
                          _mm512_add_ps(_mm512_add_ps(acc[i][1], acc[i][5]), _mm512_add_ps(acc[i][3], acc[i][7]))),
            accm[i]))


cdef void gemm_il_q5_0(int64_t K, const uint8_t *w, int64_t gs, int64_t n, const void *a, int64_t as_,
                       int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = act rows a . interleaved q5_0 weights."""
    gemm_il_b32(<const b32x_q5_0 *>NULL, K, w, gs, n, a, as_, m, y, ldy)


cdef void gemm_il_q5_1(int64_t K, const uint8_t *w, int64_t gs, int64_t n, const void *a, int64_t as_,
                       int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = act rows a . interleaved q5_1 weights."""
    gemm_il_b32(<const b32x_q5_1 *>NULL, K, w, gs, n, a, as_, m, y, ldy)


cdef void gemm_il_iq4_nl(int64_t K, const uint8_t *w, int64_t gs, int64_t n, const void *a, int64_t as_,
                         int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = act rows a . interleaved iq4_nl weights (pshufb lookup)."""
    gemm_il_b32(<const b32x_iq4_nl *>NULL, K, w, gs, n, a, as_, m, y, ldy)


cdef void gemm_il_iq4_nl_vbmi(int64_t K, const uint8_t *w, int64_t gs, int64_t n, const void *a, int64_t as_,
                              int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = act rows a . interleaved iq4_nl weights (vpermb lookup: AVX-512 VBMI CPUs only)."""
    gemm_il_b32(<const b32x_iq4_nl_vbmi *>NULL, K, w, gs, n, a, as_, m, y, ldy)
