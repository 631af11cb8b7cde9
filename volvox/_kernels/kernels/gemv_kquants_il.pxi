# The x86 tiers' GEMVs over interleaved k-quant weights (vx.pxd: q2_K .. q6_K, VI_ROWS rows per group),
# written once over the tier's integer vector layer (simd/ivec_<tier>.pxd: one int32 lane per weight
# row) and included by kernels/avx2/gemv.pxi and kernels/avx512/gemv.pxi.
#
# Per super-block and act row, every row's integer sums are exact: the quants' 4-byte lanes of all the
# group's rows are unpacked to unsigned bytes (q3_K's taken + 4) and multiplied with 4 broadcast act
# values (vi_dot: VNNI's dpbusd, or maddubs + madd), summed per group of 16 (sub-block of 32) and times
# the rows' unpacked scales:
#   isum = sum_g sc_g dot_g                 (q2_K, q4_K, q5_K; the mins' msum = sum_g mn_g bsum_g)
#   isum = sum_g sc_g (dot_g - off bsum_g)  (q3_K: off 4, q6_K: off 32; no mins)
# then in float, one FMA per super-block: acc += (d xd) isum, accm += (dmin xd) msum; a row's result
# is acc - accm. Cheaper steps to the same integers: q2_K's bit pairs are masked where they lie
# (q2k_pair_shift), the factor taken back once per pair of group dots or per sum, and one quad of scale
# bytes per two sub-blocks gives their scales and mins as pairs; q3_K's 3-bit values are packed
# at load in nibbles (vx.pxd: 8 lanes of values from 3 loads, masked where they lie, the high nibbles'
# factor 16 dropped in the pack of the two group sums; not its 2-bit and 1-bit fields shifted and
# merged); q3_K / q6_K's chains start at -off bsum_g instead of subtracting it; products of two int16-range
# factors are multiplied and added to their sum in one vi_dot16x2 (VNNI's dpwssd), the two groups of a
# q2_K / q3_K sub-block together (their dots, scales, mins and bsums paired in 16-bit halves). The x86 row kernels (gemm_q4_K / gemm_q6_K in kernels/gemv.pxi, kq_row) take the same
# integer and float steps: a weight gives the same bits read as stored or interleaved.
# q5_K's 5-bit and q6_K's 6-bit values are re-packed at load in planes (vx.pxd) whose low bits hold
# whole values (one AND each) and whose top bits gather into the last lanes of a sub-block / group
# (shifts, two selects, one AND): fewer instructions than nibbles merged with high bits kept apart.
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t
from libc.string cimport memcpy
from volvox._kernels.vx cimport (
    VX_Q2_K, VX_Q3_K, VX_Q4_K, VX_Q5_K, VX_Q6_K, VX_QK_K, vx_il_superblock_bytes, vx_table)

# A k-quant as a type: kq_il_group takes `const kq_format *`, a null pointer whose type's size is the
# format's VX_ code, so Cython emits one function per format with its branches folded (as act_rows
# in kernels/gemv_counts.pxi does for counts).
ctypedef struct kq_q2_K:
    char n[10]                  # [VX_Q2_K]
ctypedef struct kq_q3_K:
    char n[11]                  # [VX_Q3_K]
ctypedef struct kq_q4_K:
    char n[3]                   # [VX_Q4_K]
ctypedef struct kq_q5_K:
    char n[12]                  # [VX_Q5_K]
ctypedef struct kq_q6_K:
    char n[4]                   # [VX_Q6_K]
ctypedef fused kq_format:
    kq_q2_K
    kq_q3_K
    kq_q4_K
    kq_q5_K
    kq_q6_K

cdef enum:
    KQ_IL_PREFETCH = 8192       # bytes ahead of the super-block being read that a group asks into L2
    LANE = 4 * VI_ROWS          # bytes of one lane of a group (4 bytes of each row)


cdef inline vi bits_at(vi v, int src, int dst, char mask) noexcept nogil:
    """Each byte of v shifted so that its bit src lands on bit dst, then masked (src, dst constants
    once inlined). The 16-bit shifts carry a neighbour byte's bits into the top (right shift) or
    bottom (left shift) |src - dst| bits of each byte: every caller's mask lies outside them."""
    if src > dst:
        return vi_and(vi_shr16(v, src - dst), vi_bytes(mask))
    if src < dst:
        return vi_and(vi_shl16(v, dst - src), vi_bytes(mask))
    return vi_and(v, vi_bytes(mask))


# Each sums function below spells out the positions its shifts depend on (q2k_quad(.., 0, ..),
# q2k_quad(.., 2, ..)): inlined with constants, every shift is an immediate and every dot chain a
# register (a loop over them kept the chains on the stack).
cdef inline int q2k_pair_shift(int s) noexcept nogil:
    """log2 of the factor a q2_K group dot of bit pair s carries: each pair masked where it lies (times
    4 ** s), except pair 3 on a tier whose vi_dot takes unsigned weights below 64 only (AVX2's maddubs
    sums two products in int16): there it is shifted to bits 4-5 (times 16)."""
    return 2 * s if s < 3 or VI_DOT_U8_MAX >= 0xC0 else 4


cdef inline vi q2k_pair(vi lane, int s) noexcept nogil:
    """q2_K: bit pair s of each byte of lane, times 2 ** q2k_pair_shift(s)."""
    if q2k_pair_shift(s) == 2 * s:
        return vi_and(lane, vi_bytes(<char>(3 << (2 * s))))
    return bits_at(lane, 2 * s, 4, 0x30)


cdef inline vi q2k_dot_pair(vi a, vi b, int k) noexcept nogil:
    """Two group dots times 2 ** k as a vi_dot16x2 pair: a's in the low 16 bits, b's in the high, each
    divided by 16 when k >= 4 (the dots then are multiples of 16), so the pair carries 2 ** (k % 4)
    and both halves fit in int16 (|dot| <= 16 * 3 * 127, times 4)."""
    if k >= 4:
        return vi_pack16_sixteenth(vi_sra32(a, 4), b)
    return vi_pack16(a, b)


cdef inline void q2k_quad(const uint8_t *blk, int h, int s, const int8_t *x, const int32_t *bspair, vi *si1,
                          vi *si4, vi *sm1, vi *sm16) noexcept nogil:
    """q2_K: sub-blocks j = 4 h + s and j + 1 (s even; groups 2 j .. 2 j + 3; values 128 h + 32 s + ..:
    bit pairs s, s + 1 of chunk h's 8 lanes) into si1 / si4 (sc dot, the pair's factor 1 / 4) and sm1 /
    sm16 (mn bsum, times 1 / 16). The four group dots in one pass over the lanes, their chains
    interleaved; the quad of scale bytes (vx.pxd) gives each sub-block's pair of scales and mins in
    int16 halves with one mask or shift (sub-block j's mins masked where they lie: times 16)."""
    cdef int j = 4 * h + s
    cdef int k0 = q2k_pair_shift(s)
    cdef int k1 = q2k_pair_shift(s + 1)
    cdef const uint8_t *lanes = blk + 20 * VI_ROWS + 8 * h * LANE     # qs lanes of chunk h
    cdef const int8_t *xj = x + 32 * j
    cdef vi quad = vi_load(blk + 4 * VI_ROWS + (2 * h + s // 2) * LANE)   # [R][4] scale | min << 4
    cdef vi a0 = vi_zero()       # group 2 j
    cdef vi b0 = vi_zero()       # group 2 j + 1
    cdef vi a1 = vi_zero()       # group 2 j + 2
    cdef vi b1 = vi_zero()       # group 2 j + 3
    cdef vi va, vb, p0, p1
    cdef int l
    for l in range(4):
        va = vi_load(lanes + l * LANE)
        vb = vi_load(lanes + (4 + l) * LANE)
        a0 = vi_dot(a0, q2k_pair(va, s), vi_bcast4(xj + 4 * l))
        b0 = vi_dot(b0, q2k_pair(vb, s), vi_bcast4(xj + 16 + 4 * l))
        a1 = vi_dot(a1, q2k_pair(va, s + 1), vi_bcast4(xj + 32 + 4 * l))
        b1 = vi_dot(b1, q2k_pair(vb, s + 1), vi_bcast4(xj + 48 + 4 * l))
    p0 = q2k_dot_pair(a0, b0, k0)
    p1 = q2k_dot_pair(a1, b1, k1)
    if k0 % 4 == 0:
        si1[0] = vi_dot16x2(si1[0], p0, vi_and(quad, vi_set1(0x000F000F)))
    else:
        si4[0] = vi_dot16x2(si4[0], p0, vi_and(quad, vi_set1(0x000F000F)))
    if k1 % 4 == 0:
        si1[0] = vi_dot16x2(si1[0], p1, vi_and(vi_shr16(quad, 8), vi_set1(0x000F000F)))
    else:
        si4[0] = vi_dot16x2(si4[0], p1, vi_and(vi_shr16(quad, 8), vi_set1(0x000F000F)))
    sm16[0] = vi_dot16x2(sm16[0], vi_and(quad, vi_set1(0x00F000F0)), vi_set1(bspair[j]))
    sm1[0] = vi_dot16x2(sm1[0], vi_shr16(quad, 12), vi_set1(bspair[j + 1]))


cdef inline void q2k_il_sums(const uint8_t *blk, const int8_t *x, const int32_t *bspair, vi *isum,
                             vi *msum) noexcept nogil:
    """q2_K: isum, msum of one group super-block against 256 act values (module comment; bspair:
    kq_il_group's)."""
    cdef vi si1 = vi_zero()      # sc dot pairs of factor 1
    cdef vi si4 = vi_zero()      # sc dot pairs of factor 4
    cdef vi sm1 = vi_zero()      # mn bsum
    cdef vi sm16 = vi_zero()     # 16 mn bsum
    q2k_quad(blk, 0, 0, x, bspair, &si1, &si4, &sm1, &sm16)
    q2k_quad(blk, 0, 2, x, bspair, &si1, &si4, &sm1, &sm16)
    q2k_quad(blk, 1, 0, x, bspair, &si1, &si4, &sm1, &sm16)
    q2k_quad(blk, 1, 2, x, bspair, &si1, &si4, &sm1, &sm16)
    isum[0] = vi_add(si1, vi_sra32(si4, 2))
    msum[0] = vi_add(sm1, vi_sra32(sm16, 4))


cdef inline vi q3k_dot16(int32_t start, vi u0, vi u1, vi u2, vi u3, const int8_t *x) noexcept nogil:
    """q3_K: start + one group of 16 (the 4 unpacked lanes u0 .. u3) . x[0:16]."""
    return vi_dot(vi_dot(vi_dot(vi_dot(vi_set1(start), u0, vi_bcast4(x)), u1, vi_bcast4(x + 4)),
                         u2, vi_bcast4(x + 8)), u3, vi_bcast4(x + 12))


cdef inline vi q3k_sub(vi acc, const uint8_t *blk, int j, const int8_t *x, const int32_t *start) noexcept nogil:
    """q3_K: acc + sub-block j's sc (dot - 4 bsum) over its two groups (start: kq_il_group's, the second
    group's times 16): its 3 lanes a, b, c (vx.pxd) as 8 lanes of values, those of nibble 0 (group 2 j)
    masked to bits 0 .. 2, those of nibble 1 (group 2 j + 1) to bits 4 .. 6 (16 v: the group's sum
    comes out 16 times, and its 16th is what the pack keeps); the 4th lanes of both gathered from the
    nibbles' bit 3 of a, b, c. The two groups' sums packed into the halves of a lane and multiplied
    with the pair of int8 scales and added to acc in one vi_dot16x2."""
    cdef const uint8_t *lanes = blk + 18 * VI_ROWS + 3 * j * LANE     # lanes a, b, c of sub-block j
    cdef vi lo3 = vi_bytes(0x07)
    cdef vi hi3 = vi_bytes(0x70)
    cdef vi a = vi_load(lanes)
    cdef vi b = vi_load(lanes + LANE)
    cdef vi c = vi_load(lanes + 2 * LANE)
    # bits 3 and 7 of a, b, c at bits 0 .. 2 and 4 .. 6 (a 16-bit shift by n carries the next byte's
    # bits into the top n bits of each byte: none of the bits kept)
    cdef vi top = vi_select(vi_bytes(0x33), vi_select(vi_bytes(0x11), vi_shr16(a, 3), vi_shr16(b, 2)),
                            vi_shr16(c, 1))
    return vi_dot16x2(acc, vi_pack16_sixteenth(
                          q3k_dot16(start[2 * j], vi_and(a, lo3), vi_and(b, lo3), vi_and(c, lo3), vi_and(top, lo3),
                                    x + 32 * j),
                          q3k_dot16(start[2 * j + 1], vi_and(a, hi3), vi_and(b, hi3), vi_and(c, hi3),
                                    vi_and(top, hi3), x + 32 * j + 16)),
                      vi_s8x2(blk + 2 * VI_ROWS + 2 * j * VI_ROWS))   # [R][2] int8 scales as int16 halves


cdef inline vi q3k_il_sums(const uint8_t *blk, const int8_t *x, const int32_t *start) noexcept nogil:
    """q3_K: isum of one group super-block against 256 act values (module comment): two chains of
    vi_dot16x2, even and odd sub-blocks."""
    cdef vi even = q3k_sub(vi_zero(), blk, 0, x, start)
    cdef vi odd = q3k_sub(vi_zero(), blk, 1, x, start)
    even = q3k_sub(even, blk, 2, x, start)
    odd = q3k_sub(odd, blk, 3, x, start)
    even = q3k_sub(even, blk, 4, x, start)
    odd = q3k_sub(odd, blk, 5, x, start)
    even = q3k_sub(even, blk, 6, x, start)
    odd = q3k_sub(odd, blk, 7, x, start)
    return vi_add(even, odd)


cdef inline vi q4k_dot16(const uint8_t *lanes, int half, const int8_t *x) noexcept nogil:
    """q4_K: 16 values of a sub-block (4 lanes' low (half 0) or high nibbles) . x[0:16]."""
    cdef vi t = vi_zero()
    cdef vi v, u
    cdef int l
    for l in range(4):
        v = vi_load(lanes + l * LANE)
        u = bits_at(v, 4, 0, 0x0F) if half else vi_and(v, vi_bytes(0x0F))
        t = vi_dot(t, u, vi_bcast4(x + 4 * l))
    return t


cdef inline vi q4k_sub(const uint8_t *blk, int p, int half, const int8_t *x) noexcept nogil:
    """q4_K: sub-block j = 2 p + half's sc dot."""
    cdef int j = 2 * p + half
    cdef const uint8_t *lanes = blk + 20 * VI_ROWS + 8 * p * LANE     # qs lanes of pair p
    cdef const int8_t *xs = x + 64 * p + 32 * half
    return vi_mul(vi_add(q4k_dot16(lanes, half, xs), q4k_dot16(lanes + 4 * LANE, half, xs + 16)),
                  vi_u8(blk + 4 * VI_ROWS + j * VI_ROWS))


cdef inline vi q5k_sub(const uint8_t *blk, int j, const int8_t *x) noexcept nogil:
    """q5_K: sub-block j's sc dot: its 5 planes (vx.pxd) hold values 0 .. 4 of each row's 4-value lanes
    in bits 0 .. 4 and lanes 5 .. 7 in bits 5 .. 7, gathered by shifts that bring each field's bits
    from their own byte (a 16-bit shift by n carries the next byte's bits into the top n bits only)."""
    cdef const uint8_t *lanes = blk + 20 * VI_ROWS + 5 * j * LANE     # planes 0 .. 4 of sub-block j
    cdef const int8_t *xs = x + 32 * j
    cdef vi m5 = vi_bytes(0x1F)
    cdef vi p0 = vi_load(lanes)
    cdef vi p1 = vi_load(lanes + LANE)
    cdef vi p2 = vi_load(lanes + 2 * LANE)
    cdef vi p3 = vi_load(lanes + 3 * LANE)
    cdef vi p4 = vi_load(lanes + 4 * LANE)
    cdef vi t = vi_dot(vi_zero(), vi_and(p0, m5), vi_bcast4(xs))
    t = vi_dot(t, vi_and(p1, m5), vi_bcast4(xs + 4))
    t = vi_dot(t, vi_and(p2, m5), vi_bcast4(xs + 8))
    t = vi_dot(t, vi_and(p3, m5), vi_bcast4(xs + 12))
    t = vi_dot(t, vi_and(p4, m5), vi_bcast4(xs + 16))
    t = vi_dot(t, vi_and(vi_select(vi_bytes(0x07), vi_shr16(p0, 5), vi_shr16(p1, 2)), m5),     # lane 5
               vi_bcast4(xs + 20))
    t = vi_dot(t, vi_and(vi_select(vi_bytes(0x01), vi_shr16(p1, 7),                            # lane 6
                                   vi_select(vi_bytes(0x0E), vi_shr16(p2, 4), vi_shr16(p3, 3))), m5),
               vi_bcast4(xs + 24))
    t = vi_dot(t, vi_and(vi_select(vi_bytes(0x03), vi_shr16(p3, 5), vi_shr16(p4, 3)), m5),     # lane 7
               vi_bcast4(xs + 28))
    return vi_mul(t, vi_u8(blk + 4 * VI_ROWS + j * VI_ROWS))


cdef inline void q45k_il_sums(bint has_qh, const uint8_t *blk, const int8_t *x, const int32_t *bs, vi *isum,
                              vi *msum) noexcept nogil:
    """q4_K (has_qh 0) / q5_K (1): isum, msum of one group super-block against 256 act values."""
    cdef const uint8_t *mn = blk + 12 * VI_ROWS                # [8][R]
    cdef vi sm = vi_zero()
    cdef int j
    cdef vi si
    if has_qh:
        si = vi_zero()
        for j in range(8):
            si = vi_add(si, q5k_sub(blk, j, x))
        isum[0] = si
    else:
        isum[0] = vi_add(vi_add(vi_add(q4k_sub(blk, 0, 0, x), q4k_sub(blk, 0, 1, x)),
                                vi_add(q4k_sub(blk, 1, 0, x), q4k_sub(blk, 1, 1, x))),
                         vi_add(vi_add(q4k_sub(blk, 2, 0, x), q4k_sub(blk, 2, 1, x)),
                                vi_add(q4k_sub(blk, 3, 0, x), q4k_sub(blk, 3, 1, x))))
    for j in range(8):
        sm = vi_dot16x2(sm, vi_set1(bs[2 * j] + bs[2 * j + 1]), vi_u8(mn + j * VI_ROWS))  # |bsums| < 2 ** 12
    msum[0] = sm


cdef inline vi q6k_group(const uint8_t *blk, int g, const int8_t *x, const int32_t *start) noexcept nogil:
    """q6_K: group g's sc (dot - 32 bsum) (start: kq_il_group's): its 3 planes (vx.pxd) hold values
    0 .. 11 of each row's 16 in bits 0 .. 5 and, 2 bits in each plane's bits 6, 7, values 12 .. 15
    (gathered as q5k_sub gathers its lanes 5 .. 7)."""
    cdef const uint8_t *lanes = blk + 18 * VI_ROWS + 3 * g * LANE     # planes 0 .. 2 of group g
    cdef const int8_t *xs = x + 16 * g
    cdef vi m6 = vi_bytes(0x3F)
    cdef vi p0 = vi_load(lanes)
    cdef vi p1 = vi_load(lanes + LANE)
    cdef vi p2 = vi_load(lanes + 2 * LANE)
    cdef vi t = vi_dot(vi_set1(start[g]), vi_and(p0, m6), vi_bcast4(xs))
    t = vi_dot(t, vi_and(p1, m6), vi_bcast4(xs + 4))
    t = vi_dot(t, vi_and(p2, m6), vi_bcast4(xs + 8))
    t = vi_dot(t, vi_and(vi_select(vi_bytes(0x0F), vi_select(vi_bytes(0x03), vi_shr16(p0, 6), vi_shr16(p1, 4)),
                                   vi_shr16(p2, 2)), m6),
               vi_bcast4(xs + 12))
    return vi_mul(t, vi_s8(blk + 2 * VI_ROWS + g * VI_ROWS))


cdef inline vi q6k_il_sums(const uint8_t *blk, const int8_t *x, const int32_t *start) noexcept nogil:
    """q6_K: isum of one group super-block against 256 act values (module comment)."""
    cdef vi si = vi_zero()
    cdef int g
    for g in range(16):
        si = vi_add(si, q6k_group(blk, g, x, start))
    return si


cdef void kq_il_group(const kq_format *F_, int64_t K, const uint8_t *grp, const int8_t *xq, const float *xd,
                      const int32_t *bsums, float *out) noexcept nogil:
    """One group's VI_ROWS weight rows of format sizeof(kq_format) against one q8_K act row (xq, its d
    per super-block xd, its sums of 16 bsums): out[r] = dot(row r, act row)."""
    cdef int fmt = sizeof(kq_format)
    cdef int64_t nb = K // VX_QK_K
    cdef int64_t sb = vx_il_superblock_bytes(fmt, VI_ROWS)     # bytes per super-block of the group
    cdef vf acc = vf_zero()      # (VI_ROWS,) sum of d xd isum
    cdef vf accm = vf_zero()     # (VI_ROWS,) sum of dmin xd msum
    cdef vf dx
    cdef vi isum, msum
    cdef int32_t start[16]       # (16,) q3_K / q6_K: each group dot's start, - off bsum (q3_K's odd groups: times 16)
    cdef int32_t bspair[8]       # (8,) q2_K: bsums 2 j, 2 j + 1 as the low, high 16 bits
    cdef int16_t bs16[16]        # (16,) q2_K: the bsums truncated to 16 bits (|bsum| <= 16 * 128)
    cdef int g
    cdef const uint8_t *blk
    cdef const int8_t *x
    cdef const int32_t *bs
    cdef int64_t b, off
    for b in range(nb):
        blk = grp + b * sb
        off = 0
        while off < sb:          # 4 lines a turn: the loop's own instructions cost the GEMV where it is compute-bound
            _mm_prefetch(<const char *>(blk + KQ_IL_PREFETCH + off), _MM_HINT_T1)
            _mm_prefetch(<const char *>(blk + KQ_IL_PREFETCH + off + 64), _MM_HINT_T1)
            _mm_prefetch(<const char *>(blk + KQ_IL_PREFETCH + off + 128), _MM_HINT_T1)
            _mm_prefetch(<const char *>(blk + KQ_IL_PREFETCH + off + 192), _MM_HINT_T1)
            off += 256
        x = xq + VX_QK_K * b
        bs = bsums + 16 * b
        dx = vf_set1(xd[b])
        if fmt == VX_Q3_K:
            for g in range(0, 16, 2):        # (one vector multiply once unrolled)
                start[g] = -4 * bs[g]
                start[g + 1] = -64 * bs[g + 1]
            isum = q3k_il_sums(blk, x, start)
        elif fmt == VX_Q6_K:
            for g in range(16):
                start[g] = -32 * bs[g]
            isum = q6k_il_sums(blk, x, start)
        else:
            if fmt == VX_Q2_K:
                for g in range(16):          # bsums 2 j, 2 j + 1 as int16 halves (one vpmovdw)
                    bs16[g] = <int16_t>bs[g]
                memcpy(bspair, bs16, sizeof(bs16))
                q2k_il_sums(blk, x, bspair, &isum, &msum)
            else:
                q45k_il_sums(fmt == VX_Q5_K, blk, x, bs, &isum, &msum)
            accm = vf_fma(vi_fmul(vi_f16(blk + 2 * VI_ROWS), dx), vi_float(msum), accm)
        acc = vf_fma(vi_fmul(vi_f16(blk), dx), vi_float(isum), acc)
    vf_store(out, vi_fsub(acc, accm))


cdef inline void gemm_il_kq(const kq_format *F_, int64_t K, const uint8_t *w, int64_t group_bytes, int64_t n, const void *a,
                            int64_t a_stride, int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = q8_K act rows a . interleaved k-quant weights w (groups of VI_ROWS rows, group_bytes
    apart), each group against the act rows one at a time."""
    cdef int64_t g, i, r, rows
    cdef vx_actK x
    cdef float out[16]           # (VI_ROWS,)
    for g in range((n + VI_ROWS - 1) // VI_ROWS):
        rows = n - g * VI_ROWS if n - g * VI_ROWS < VI_ROWS else VI_ROWS
        for i in range(m):
            x = actK_row(a, a_stride, i, K)
            kq_il_group(F_, K, w + g * group_bytes, x.qs, x.d, x.bsums, out)
            for r in range(rows):
                y[i * ldy + g * VI_ROWS + r] = out[r]


cdef void gemm_il_q2_K(int64_t K, const uint8_t *w, int64_t gs, int64_t n, const void *a, int64_t as_,
                       int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = q8_K act rows a . interleaved q2_K weights."""
    gemm_il_kq(<const kq_q2_K *>NULL, K, w, gs, n, a, as_, m, y, ldy)


cdef void gemm_il_q3_K(int64_t K, const uint8_t *w, int64_t gs, int64_t n, const void *a, int64_t as_,
                       int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = q8_K act rows a . interleaved q3_K weights."""
    gemm_il_kq(<const kq_q3_K *>NULL, K, w, gs, n, a, as_, m, y, ldy)


cdef void gemm_il_q4_K(int64_t K, const uint8_t *w, int64_t gs, int64_t n, const void *a, int64_t as_,
                       int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = q8_K act rows a . interleaved q4_K weights."""
    gemm_il_kq(<const kq_q4_K *>NULL, K, w, gs, n, a, as_, m, y, ldy)


cdef void gemm_il_q5_K(int64_t K, const uint8_t *w, int64_t gs, int64_t n, const void *a, int64_t as_,
                       int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = q8_K act rows a . interleaved q5_K weights."""
    gemm_il_kq(<const kq_q5_K *>NULL, K, w, gs, n, a, as_, m, y, ldy)


cdef void gemm_il_q6_K(int64_t K, const uint8_t *w, int64_t gs, int64_t n, const void *a, int64_t as_,
                       int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = q8_K act rows a . interleaved q6_K weights."""
    gemm_il_kq(<const kq_q6_K *>NULL, K, w, gs, n, a, as_, m, y, ldy)


cdef void fill_gemv_kquants_il(vx_table *t) noexcept:
    """The interleaved k-quant GEMVs (the tier's il_rows must be VI_ROWS)."""
    t.gemm_il[VX_Q2_K] = gemm_il_q2_K
    t.gemm_il[VX_Q3_K] = gemm_il_q3_K
    t.gemm_il[VX_Q4_K] = gemm_il_q4_K
    t.gemm_il[VX_Q5_K] = gemm_il_q5_K
    t.gemm_il[VX_Q6_K] = gemm_il_q6_K
