# il_pack for the k-quants: each row's GGUF super-blocks decoded once, at load, into the interleaved
# layout of vx.pxd (the 6-bit scales unpacked, the quants' 4-byte lanes of R rows side by side).
# Included by engine/per_op.pxi, whose il_pack calls it.
from libc.stdint cimport int8_t, int64_t, uint8_t
from libc.string cimport memcpy, memset
from volvox._kernels.kquant_scales cimport q3k_scales, q4k_scales
from volvox._kernels.vx cimport (
    VX_Q2_K, VX_Q3_K, VX_Q4_K, VX_Q5_K, VX_Q6_K, VX_QK_K, vx_il_superblock_bytes)


cdef inline int64_t kquant_block_bytes(int wtype) noexcept nogil:
    """Bytes of one GGUF super-block of a k-quant (0: not a k-quant)."""
    if wtype == VX_Q2_K:
        return 84
    if wtype == VX_Q3_K:
        return 110
    if wtype == VX_Q4_K:
        return 144
    if wtype == VX_Q5_K:
        return 176
    if wtype == VX_Q6_K:
        return 210
    return 0


cdef inline void put_lanes(uint8_t *dst, const uint8_t *src, int lanes, int r, int R) noexcept nogil:
    """Lanes [lanes][R][4] at dst: row r's lane l = its 4 bytes src[4 l ..]."""
    cdef int l
    for l in range(lanes):
        memcpy(dst + (l * R + r) * 4, src + 4 * l, 4)


cdef inline void put_scales(uint8_t *dst, const uint8_t *values, int count, int r, int R) noexcept nogil:
    """Scales [count][R] at dst: row r's scale i = values[i]."""
    cdef int i
    for i in range(count):
        dst[i * R + r] = values[i]


cdef inline void put_q2k_scale_quads(uint8_t *dst, const uint8_t *scales, int r, int R) noexcept nogil:
    """q2_K scales [4][R][4] at dst: row r's quad i = its groups 4 i, 4 i + 2, 4 i + 1, 4 i + 3 (the pairs
    of sub-blocks 2 i and 2 i + 1 in the 16-bit halves of the bytes 0, 2 and 1, 3)."""
    cdef int i
    for i in range(4):
        dst[(i * R + r) * 4] = scales[4 * i]
        dst[(i * R + r) * 4 + 1] = scales[4 * i + 2]
        dst[(i * R + r) * 4 + 2] = scales[4 * i + 1]
        dst[(i * R + r) * 4 + 3] = scales[4 * i + 3]


cdef inline void put_scale_pairs(uint8_t *dst, const uint8_t *values, int count, int r, int R) noexcept nogil:
    """Scales [count / 2][R][2] at dst: row r's scales 2 j, 2 j + 1 side by side."""
    cdef int j
    for j in range(count // 2):
        memcpy(dst + (j * R + r) * 2, values + 2 * j, 2)


cdef void il_pack_kquant_superblock(int wtype, const uint8_t *src, uint8_t *dst, int r, int R) noexcept nogil:
    """Row r's GGUF super-block src into the group super-block dst (vx.pxd's interleaved k-quant layout)."""
    cdef uint8_t sc[8]           # (8,) q4_K / q5_K scales
    cdef uint8_t mn[8]           # (8,) q4_K / q5_K mins
    cdef int8_t sc3[16]          # (16,) q3_K scales - 32
    cdef uint8_t v3[96]          # (8, 3, 4) q3_K value lanes a, b, c of each sub-block (vx.pxd)
    cdef int j, i, t, v
    if wtype == VX_Q2_K:         # scales[16] qs[64] d dmin
        memcpy(dst + 2 * r, src + 80, 2)
        memcpy(dst + 2 * R + 2 * r, src + 82, 2)
        put_q2k_scale_quads(dst + 4 * R, src, r, R)
        put_lanes(dst + 20 * R, src + 16, 16, r, R)
    elif wtype == VX_Q3_K:       # hmask[32] qs[64] scales[12] d
        memcpy(dst + 2 * r, src + 108, 2)
        q3k_scales(src + 96, sc3)
        put_scale_pairs(dst + 2 * R, <const uint8_t *>sc3, 16, r, R)
        memset(v3, 0, 96)
        for j in range(8):       # value 32 j + i: qs byte 32 (j / 4) + i bits 2 (j % 4), hmask byte i bit j
            for i in range(32):
                v = ((src[32 + 32 * (j >> 2) + i] >> (2 * (j & 3))) & 3) | (((src[i] >> j) & 1) << 2)
                if (i >> 2) & 3 < 3:     # value 16 h + 4 w + k: nibble h of lane w's byte k
                    v3[12 * j + 4 * ((i >> 2) & 3) + (i & 3)] |= v << (4 * (i >> 4))
                else:                    # w = 3: bit t in bit 3 of nibble h of lane t's byte k
                    for t in range(3):
                        v3[12 * j + 4 * t + (i & 3)] |= ((v >> t) & 1) << (4 * (i >> 4) + 3)
        put_lanes(dst + 18 * R, v3, 24, r, R)
    elif wtype == VX_Q4_K or wtype == VX_Q5_K:   # d dmin scales[12] (qh[32]) qs[128]
        memcpy(dst + 2 * r, src, 2)
        memcpy(dst + 2 * R + 2 * r, src + 2, 2)
        q4k_scales(src + 4, sc, mn)
        put_scales(dst + 4 * R, sc, 8, r, R)
        put_scales(dst + 12 * R, mn, 8, r, R)
        if wtype == VX_Q4_K:
            put_lanes(dst + 20 * R, src + 16, 32, r, R)
        else:
            put_lanes(dst + 20 * R, src + 16, 8, r, R)
            put_lanes(dst + 52 * R, src + 48, 32, r, R)
    else:                        # q6_K: ql[128] qh[64] scales[16] d
        memcpy(dst + 2 * r, src + 208, 2)
        put_scales(dst + 2 * R, src + 192, 16, r, R)
        put_lanes(dst + 18 * R, src + 128, 16, r, R)
        put_lanes(dst + 82 * R, src, 32, r, R)


cdef void il_pack_kquant_rows(int wtype, int64_t K, const uint8_t *w, int64_t w_stride, int64_t N, int R,
                              uint8_t *out) noexcept nogil:
    """il_pack's loop for a k-quant: every row's super-blocks into their group's (rows past N zero)."""
    cdef int64_t nb = K // VX_QK_K, bsz = kquant_block_bytes(wtype), sb = vx_il_superblock_bytes(wtype, R)
    cdef int64_t row, b
    memset(out, 0, ((N + R - 1) // R) * nb * sb)
    for row in range(N):
        for b in range(nb):
            il_pack_kquant_superblock(wtype, w + row * w_stride + b * bsz,
                                      out + ((row // R) * nb + b) * sb, <int>(row % R), R)
