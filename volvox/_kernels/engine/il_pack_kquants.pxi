# il_pack for the k-quants: each row's GGUF super-blocks decoded once, at load, into the interleaved
# layout of vx.pxd (the 6-bit scales unpacked, q5_K / q6_K's values re-packed in planes, the quants'
# 4-byte lanes of R rows side by side).
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


cdef inline void q5k_value_lanes(const uint8_t *src, uint8_t *out) noexcept nogil:
    """out (8, 5, 4): q5_K's value lanes of vx.pxd from a GGUF super-block src (scales at 4, qh[32] at
    16, qs[128] at 48): sub-block j's values v_w[k] = value 32 j + 4 w + k (the low (j even) or high
    nibble of qs[32 (j / 2) + i], bit j of qh[i] as 16), v_0 .. v_4 in bits 0 .. 4 of planes 0 .. 4,
    v_5 .. v_7 in their bits 5 .. 7 (vx.pxd)."""
    cdef uint8_t v[8]            # (8,) v_0[k] .. v_7[k]
    cdef int j, w, k, i
    cdef uint8_t *p
    for j in range(8):
        for k in range(4):
            for w in range(8):
                i = 4 * w + k
                v[w] = ((src[48 + 32 * (j >> 1) + i] >> (4 * (j & 1))) & 0x0F) | (((src[16 + i] >> j) & 1) << 4)
            p = out + 20 * j + k
            p[0] = v[0] | ((v[5] & 7) << 5)
            p[4] = v[1] | (((v[5] >> 3) & 3) << 5) | ((v[6] & 1) << 7)
            p[8] = v[2] | (((v[6] >> 1) & 7) << 5)
            p[12] = v[3] | ((v[7] & 3) << 5) | (((v[6] >> 4) & 1) << 7)
            p[16] = v[4] | (((v[7] >> 2) & 7) << 5)


cdef inline void q6k_value_lanes(const uint8_t *src, uint8_t *out) noexcept nogil:
    """out (16, 3, 4): q6_K's value lanes of vx.pxd from a GGUF super-block src (ql[128], qh[64]):
    group g's values v_w[k] = value 16 g + 4 w + k (value 128 h + 32 q + i: nibble q / 2 of
    ql[64 h + 32 (q % 2) + i], bits 2 q of qh[32 h + i] as 16, 32), v_0 .. v_2 in bits 0 .. 5 of planes
    0 .. 2, bits 2 t of v_3 in bits 6, 7 of plane t."""
    cdef uint8_t v[4]            # (4,) v_0[k] .. v_3[k]
    cdef int g, w, k, n, h, q, i
    for g in range(16):
        for k in range(4):
            for w in range(4):
                n = 16 * g + 4 * w + k
                h = n >> 7
                q = (n >> 5) & 3
                i = n & 31
                v[w] = (((src[64 * h + 32 * (q & 1) + i] >> (4 * (q >> 1))) & 0x0F)
                        | (((src[128 + 32 * h + i] >> (2 * q)) & 3) << 4))
            for w in range(3):
                out[12 * g + 4 * w + k] = v[w] | (((v[3] >> (2 * w)) & 3) << 6)


cdef void il_pack_kquant_superblock(int wtype, const uint8_t *src, uint8_t *dst, int r, int R) noexcept nogil:
    """Row r's GGUF super-block src into the group super-block dst (vx.pxd's interleaved k-quant layout)."""
    cdef uint8_t sc[8]           # (8,) q4_K / q5_K scales
    cdef uint8_t mn[8]           # (8,) q4_K / q5_K mins
    cdef int8_t sc3[16]          # (16,) q3_K scales - 32
    cdef uint8_t v3[96]          # (8, 3, 4) q3_K value lanes a, b, c of each sub-block (vx.pxd)
    cdef uint8_t v5[160]         # (8, 5, 4) q5_K value lanes of each sub-block (vx.pxd)
    cdef uint8_t v6[192]         # (16, 3, 4) q6_K value lanes of each group (vx.pxd)
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
            q5k_value_lanes(src, v5)
            put_lanes(dst + 20 * R, v5, 40, r, R)
    else:                        # q6_K: ql[128] qh[64] scales[16] d
        memcpy(dst + 2 * r, src + 208, 2)
        put_scales(dst + 2 * R, src + 192, 16, r, R)
        q6k_value_lanes(src, v6)
        put_lanes(dst + 18 * R, v6, 48, r, R)


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
