# Backward kernels of the training path (volvox.cpu's training functions, engine/backward.pxi runs
# them over OpenMP work items). One body for every tier: the tier's vector layer (vf_*), its
# dot_vec_f32 and exp8 (kernels/<tier>/attention.pxi) and its dequantizers (the table's dequant).
#   matmul_t_strip       dx = dy @ W on a frozen weight as inference holds it (any weight type, rows as
#                        stored or in any interleaved layout of vx.pxd): up to 128 of W's input columns
#                        (one or more strips of 32; one of 256 for k-quants) are dequantized block by
#                        block, 256 of W's rows at a time, into a panel in thread scratch, then
#                        multiplied in register tiles of 8 dy rows (AVX-512; 4 on the other tiers) x
#                        32 columns. The hot spot of LoRA over a quantized base.
#   attention_fwd_block  one block of 32 query rows of one head of causal GQA attention over the whole
#                        sequence (flash-attention's forward: blocks of 32 keys, the scores in register
#                        tiles, a running max and sum per row), with each row's logsumexp (what the
#                        backward recomputes probabilities from)
#   attention_bwd_group  flash-attention-2's backward for one kv head of one sequence in one pass: per
#                        query head of the group and block of 32 queries x 32 keys, the scores and
#                        probabilities recomputed once from the saved logsumexp, then dv, dk and dq
#                        accumulated from the block's P and dS (register tiles of 4 rows)
#   cross_entropy_row    one row's loss, logsumexp and dlogits in three passes over the logits, the
#                        gradient written over the logits when the caller allows it
#   cross_entropy_grad_row   dlogits alone from the forward's saved logsumexp: one pass
#   rms_norm_bwd_row     dx of one RMSNorm row (the weight's gradient is summed by the engine)
#   layer_norm_bwd_row   dx of one LayerNorm row, and the row's mean and 1 / std (the engine sums the
#                        weight's and bias's gradients from them)
#   gelu_grad_run        dx = dy gelu'(x) (exact or tanh form), silu_grad_run dx = dy silu'(x): eight
#                        lanes at a time through the tier's exp8, the rest plain loops that vectorise
# No kernel here holds a (seq, seq) matrix: attention keeps one 32 x 32 block of scores per thread.
from libc.math cimport INFINITY, expf, fabsf, log, logf, sqrt, sqrtf
from libc.stdint cimport int8_t, int64_t, uint8_t
from libc.string cimport memset
from volvox._kernels.vx cimport (
    VX_F16, VX_F32, VX_IQ4_NL, VX_Q2_K, VX_Q3_K, VX_Q4_0, VX_Q4_1, VX_Q4_K, VX_Q5_0, VX_Q5_1, VX_Q5_K, VX_Q6_K,
    VX_Q8_0,
    vx_attn_train_shape, vx_block_q2_K, vx_block_q3_K, vx_block_q4_0, vx_block_q4_1, vx_block_q4_K,
    vx_block_q5_0, vx_block_q5_1, vx_block_q5_K, vx_block_q6_K, vx_block_q8_0, vx_dequant_fn, vx_f16,
    vx_il_block_bytes, vx_il_superblock_bytes, vx_is_kquant, vx_matmul_t_strip, vx_train_table,
    VX_MATMUL_T_ROWS)

cdef enum:
    BW_MR = 4 + 4 * (VL / 16)  # dy rows per register tile of the transposed product: 8 on AVX-512 (16 of
                               # its 32 registers accumulate), 4 on the other tiers
    BW_NC = 32          # panel columns per register tile
    BW_NV = BW_NC / VL  # vectors per tile row
    BW_KEYS = 32        # keys per block of the attention backward (= BW_NC: one register tile wide)
    BW_QUERIES = 32     # queries per block of the attention backward


cdef inline int64_t bw_strip_bytes(int wtype, int64_t S) noexcept nogil:
    """Bytes of S consecutive values of one weight row (S: the type's strip, vx_matmul_t_strip)."""
    if wtype == VX_F32:
        return 4 * S
    if wtype == VX_F16:
        return 2 * S
    if wtype == VX_Q4_1:
        return sizeof(vx_block_q4_1)
    if wtype == VX_Q8_0:
        return sizeof(vx_block_q8_0)
    if wtype == VX_Q5_0:
        return sizeof(vx_block_q5_0)
    if wtype == VX_Q5_1:
        return sizeof(vx_block_q5_1)
    if wtype == VX_Q4_K:
        return sizeof(vx_block_q4_K)
    if wtype == VX_Q6_K:
        return sizeof(vx_block_q6_K)
    if wtype == VX_Q2_K:
        return sizeof(vx_block_q2_K)
    if wtype == VX_Q3_K:
        return sizeof(vx_block_q3_K)
    if wtype == VX_Q5_K:
        return sizeof(vx_block_q5_K)
    return sizeof(vx_block_q4_0)      # q4_0, iq4_nl


cdef inline uint8_t il_byte(const uint8_t *lanes, int R, int64_t r, int i) noexcept nogil:
    """Byte i of row r's field stored as lanes [L][R][4] (vx.pxd: lane l holds the field's bytes 4 l ..)."""
    return lanes[((i >> 2) * R + r) * 4 + (i & 3)]


cdef inline float il_f16(const uint8_t *p, int64_t r) noexcept nogil:
    """Row r's fp16 of an array [R] of them at p, as a float."""
    return vx_f16_to_f32((<const vx_f16 *>p)[r])


cdef inline int il_mask_bit(const uint8_t *mask, int64_t i) noexcept nogil:
    """Bit i of a little-endian bit mask."""
    return (mask[i >> 3] >> (i & 7)) & 1


cdef inline void bw_il_decode(int wtype, int R, const uint8_t *group, int64_t b, int64_t r,
                              float *out) noexcept nogil:
    """out (32,) = block b of row r of an interleaved group of R rows of a 32-block type (vx.pxd's
    layout), as floats."""
    cdef const uint8_t *blk = group + b * vx_il_block_bytes(wtype, R)
    cdef bint has_m = wtype == VX_Q4_1 or wtype == VX_Q5_1
    cdef bint has_qh = wtype == VX_Q5_0 or wtype == VX_Q5_1
    cdef const uint8_t *qh = blk + (4 if has_m else 2) * R              # (4, 2, R/2) the 5th-bit masks
    cdef const uint8_t *qs = blk + (4 if has_m else 2) * R + (4 * R if has_qh else 0)   # (L, R, 4)
    cdef float d = il_f16(blk, r), m
    cdef int lo, hi
    cdef uint8_t byte
    cdef int j
    if wtype == VX_Q8_0:
        for j in range(32):
            out[j] = d * <float>(<int8_t>(il_byte(qs, R, r, j) ^ 0x80))
        return
    m = il_f16(blk + 2 * R, r) if has_m else (<float>-8.0 * d if wtype == VX_Q4_0 else <float>0.0)
    for j in range(16):
        byte = il_byte(qs, R, r, j)
        lo = byte & 0x0F
        hi = byte >> 4
        if has_qh:
            lo |= il_mask_bit(qh + (2 * (j >> 2)) * (R // 2), 4 * r + (j & 3)) << 4
            hi |= il_mask_bit(qh + (2 * (j >> 2) + 1) * (R // 2), 4 * r + (j & 3)) << 4
        if wtype == VX_IQ4_NL:
            out[j] = d * <float>IQ4_NL_LEVELS[lo]
            out[j + 16] = d * <float>IQ4_NL_LEVELS[hi]
        else:
            if wtype == VX_Q5_0:
                lo -= 16
                hi -= 16
            out[j] = d * <float>lo + m
            out[j + 16] = d * <float>hi + m


cdef inline int il_q5k_value(const uint8_t *planes, int R, int64_t r, int j, int i) noexcept nogil:
    """Value i (0 .. 31, 5 bits) of sub-block j of row r of interleaved q5_K planes (vx.pxd)."""
    cdef int w = i >> 2, k = i & 3
    cdef int p0 = il_byte(planes, R, r, 20 * j + k), p1 = il_byte(planes, R, r, 20 * j + 4 + k)
    cdef int p3 = il_byte(planes, R, r, 20 * j + 12 + k)
    if w < 5:
        return il_byte(planes, R, r, 20 * j + 4 * w + k) & 0x1F
    if w == 5:
        return (p0 >> 5) | (((p1 >> 5) & 3) << 3)
    if w == 6:
        return (p1 >> 7) | ((il_byte(planes, R, r, 20 * j + 8 + k) >> 5) << 1) | ((p3 >> 7) << 4)
    return ((p3 >> 5) & 3) | ((il_byte(planes, R, r, 20 * j + 16 + k) >> 5) << 2)


cdef inline int il_q6k_value(const uint8_t *planes, int R, int64_t r, int g, int i) noexcept nogil:
    """Value i (0 .. 15, 6 bits) of group g of row r of interleaved q6_K planes (vx.pxd)."""
    cdef int w = i >> 2, k = i & 3
    if w < 3:
        return il_byte(planes, R, r, 12 * g + 4 * w + k) & 0x3F
    return ((il_byte(planes, R, r, 12 * g + k) >> 6) | ((il_byte(planes, R, r, 12 * g + 4 + k) >> 6) << 2)
            | ((il_byte(planes, R, r, 12 * g + 8 + k) >> 6) << 4))


cdef inline void bw_il_decode_kquant(int wtype, int R, const uint8_t *group, int64_t b, int64_t r,
                                     float *out) noexcept nogil:
    """out (256,) = super-block b of row r of an interleaved k-quant group of R rows (vx.pxd's layout),
    as floats: ggml's dequantize_row_<type> on the unpacked scales."""
    cdef const uint8_t *blk = group + b * vx_il_superblock_bytes(wtype, R)
    cdef const int8_t *sc8 = <const int8_t *>(blk + 2 * R)   # (16, R) q3_K / q6_K scales
    cdef bint has_min = wtype == VX_Q2_K or wtype == VX_Q4_K or wtype == VX_Q5_K
    cdef float d = il_f16(blk, r), dmin = il_f16(blk + 2 * R, r) if has_min else <float>0.0
    cdef int h, s, l, j, g, q
    cdef uint8_t sm
    if wtype == VX_Q2_K:         # value 128 h + 32 s + l: bits 2 s of qs byte 32 h + l, group 8 h + 2 s + l / 16
        for h in range(2):
            for s in range(4):
                for l in range(32):
                    g = 8 * h + 2 * s + l // 16
                    sm = blk[4 * R + (g >> 2) * 4 * R + 4 * r + ((g & 1) << 1 | (g >> 1) & 1)]   # quad g / 4
                    out[128 * h + 32 * s + l] = (d * <float>(sm & 0x0F) * <float>((il_byte(blk + 20 * R, R, r, 32 * h + l) >> (2 * s)) & 3)
                                                 - dmin * <float>(sm >> 4))
    elif wtype == VX_Q3_K:       # value 32 j + l: 3 bits of sub-block j's lanes a, b, c (vx.pxd), minus 4
        for j in range(8):
            for l in range(32):
                g = 2 * j + l // 16
                if (l >> 2) & 3 < 3:     # value 16 h + 4 w + k: nibble h of lane w's byte k, bits 0 .. 2
                    q = (il_byte(blk + 18 * R, R, r, 12 * j + 4 * ((l >> 2) & 3) + (l & 3)) >> (4 * (l >> 4))) & 7
                else:                    # w = 3: bit s of the value in bit 3 of nibble h of lane s's byte k
                    q = 0
                    for s in range(3):
                        q |= ((il_byte(blk + 18 * R, R, r, 12 * j + 4 * s + (l & 3)) >> (4 * (l >> 4) + 3)) & 1) << s
                out[32 * j + l] = d * <float>sc8[(g >> 1) * 2 * R + 2 * r + (g & 1)] * <float>(q - 4)
    elif wtype == VX_Q4_K:       # value 64 j + l: low nibble of qs byte 32 j + l, + 32: high
        for j in range(4):
            for l in range(32):
                q = il_byte(blk + 20 * R, R, r, 32 * j + l)
                out[64 * j + l] = (d * <float>blk[4 * R + 2 * j * R + r] * <float>(q & 0x0F)
                                   - dmin * <float>blk[12 * R + 2 * j * R + r])
                out[64 * j + 32 + l] = (d * <float>blk[4 * R + (2 * j + 1) * R + r] * <float>(q >> 4)
                                        - dmin * <float>blk[12 * R + (2 * j + 1) * R + r])
    elif wtype == VX_Q5_K:       # value 32 j + l: sub-block j's planes
        for j in range(8):
            for l in range(32):
                out[32 * j + l] = (d * <float>blk[4 * R + j * R + r] * <float>il_q5k_value(blk + 20 * R, R, r, j, l)
                                   - dmin * <float>blk[12 * R + j * R + r])
    else:                        # q6_K: value 16 g + l: group g's planes, minus 32
        for g in range(16):
            for l in range(16):
                out[16 * g + l] = d * <float>sc8[g * R + r] * <float>(il_q6k_value(blk + 18 * R, R, r, g, l) - 32)


cdef inline void bw_tile(int64_t N, const float *dy, int64_t dy_row, int64_t dy_col, int64_t rows,
                         const float *panel, int64_t S, int64_t cols, bint accumulate, float *dx,
                         int64_t ldx) noexcept nogil:
    """dx[r * ldx + c] (+)= sum_{o < N} dy[r * dy_row + o * dy_col] * panel[o * S + c] for r < rows (<= BW_MR),
    c < cols (<= BW_NC), added to dx's values when accumulate; the panel's BW_NC columns are all
    readable (zero padded)."""
    cdef vf acc[BW_MR * BW_NV]                 # (BW_MR rows, vectors of the 32 columns)
    cdef vf wv[BW_NV]                          # panel row o's 32 columns
    cdef float out[BW_MR * BW_NC]              # (BW_MR rows, 32): a partial tile on its way to dx
    cdef vf a
    cdef int64_t o, c
    cdef int r, v
    for v in range(BW_MR * BW_NV):
        acc[v] = vf_zero()
    if rows == BW_MR:
        for o in range(N):
            for v in range(BW_NV):
                wv[v] = vf_load(panel + o * S + v * VL)
            for r in range(BW_MR):
                a = vf_set1(dy[r * dy_row + o * dy_col])
                for v in range(BW_NV):
                    acc[r * BW_NV + v] = vf_fma(a, wv[v], acc[r * BW_NV + v])
    else:
        for o in range(N):
            for v in range(BW_NV):
                wv[v] = vf_load(panel + o * S + v * VL)
            for r in range(rows):
                a = vf_set1(dy[r * dy_row + o * dy_col])
                for v in range(BW_NV):
                    acc[r * BW_NV + v] = vf_fma(a, wv[v], acc[r * BW_NV + v])
    if cols == BW_NC:  # a whole tile: straight from the accumulators into dx
        for r in range(rows):
            for v in range(BW_NV):
                if accumulate:
                    vf_store(dx + r * ldx + v * VL, vf_add(vf_load(dx + r * ldx + v * VL), acc[r * BW_NV + v]))
                else:
                    vf_store(dx + r * ldx + v * VL, acc[r * BW_NV + v])
        return
    for r in range(rows):
        for v in range(BW_NV):
            vf_store(out + r * BW_NC + v * VL, acc[r * BW_NV + v])
        if accumulate:
            for c in range(cols):
                dx[r * ldx + c] = dx[r * ldx + c] + out[r * BW_NC + c]
        else:
            for c in range(cols):
                dx[r * ldx + c] = out[r * BW_NC + c]


cdef void matmul_t_strip(int wtype, vx_dequant_fn dq, int64_t K, const uint8_t *w, int64_t row_bytes,
                         int64_t group_bytes, int il_rows, int64_t N, int64_t strip, int64_t span,
                         const float *dy, int64_t dy_row, int64_t dy_col, int64_t M, float *dx,
                         float *panel) noexcept nogil:
    """Columns strip * S .. (strip + span) * S - 1 (fewer in the last strip of float weights) of dx (M, K)
    = dy (M, N) @ W (N, K), dy[r, o] at dy[r * dy_row + o * dy_col] (dy_col 1 as stored, dy_row 1 when
    dy is read as the transpose of a stored (N, M) array); W's rows row_bytes apart, or interleaved groups of il_rows rows group_bytes
    apart when group_bytes > 0. W's rows are taken VX_MATMUL_T_ROWS at a time (a panel that stays in
    cache however large N is), their products summed into dx; each tile of dy rows runs over the
    panel's whole width while those rows are in L1, so dy streams in once per span, not per strip.
    panel: vx_matmul_t_panel_floats floats."""
    cdef int64_t S = vx_matmul_t_strip(wtype), P = span * S, c0 = strip * S
    cdef int64_t cols = K - c0 if K - c0 < P else P, sb = bw_strip_bytes(wtype, S)
    cdef int64_t o0, n, o, c, i, s, sc
    o0 = 0
    while o0 < N:
        n = N - o0 if N - o0 < VX_MATMUL_T_ROWS else VX_MATMUL_T_ROWS
        for o in range(n):  # the (n, P) panel of W's rows o0 .., one block at a time
            for s in range(span):
                if group_bytes > 0:
                    if vx_is_kquant(wtype):
                        bw_il_decode_kquant(wtype, il_rows, w + ((o0 + o) // il_rows) * group_bytes, strip + s,
                                            (o0 + o) % il_rows, panel + o * P + s * S)
                    else:
                        bw_il_decode(wtype, il_rows, w + ((o0 + o) // il_rows) * group_bytes, strip + s,
                                     (o0 + o) % il_rows, panel + o * P + s * S)
                else:
                    sc = cols - s * S if cols - s * S < S else S
                    dq(sc, w + (o0 + o) * row_bytes + (strip + s) * sb, panel + o * P + s * S)
                    if sc < S:
                        memset(panel + o * P + s * S + sc, 0, <size_t>(S - sc) * sizeof(float))
        i = 0
        while i < M:
            c = 0
            while c < cols:
                bw_tile(n, dy + i * dy_row + o0 * dy_col, dy_row, dy_col, M - i if M - i < BW_MR else BW_MR, panel + c, P,
                        cols - c if cols - c < BW_NC else BW_NC, o0 > 0, dx + i * K + c0 + c, K)
                c += BW_NC
            i += BW_MR
        o0 += n
    if N == 0:  # dy has no columns: dx is zero
        for i in range(M):
            memset(dx + i * K + c0, 0, <size_t>cols * sizeof(float))


cdef inline void bw_key_panel(int64_t D, int64_t nk, float scale, const float *x, int64_t ldx,
                              float *panel) noexcept nogil:
    """panel (D, BW_KEYS) = scale * the block's nk rows of x (ld ldx apart, D values each) transposed,
    its columns past nk zero: the operand bw_block_scores multiplies query rows by."""
    cdef int64_t d, c
    for d in range(D):
        for c in range(BW_KEYS):
            panel[d * BW_KEYS + c] = scale * x[c * ldx + d] if c < nk else <float>0.0


cdef inline int64_t bw_first_key(const vx_attn_train_shape *s, int64_t i) noexcept nogil:
    """The first key query row i sees (causal, within the window)."""
    return i - s.window + 1 if s.window > 0 and i - s.window + 1 > 0 else 0


cdef void attention_fwd_block(const vx_attn_train_shape *s, const float *q, const float *k, const float *v,
                              int64_t item, float *scratch, float *y, float *lse) noexcept nogil:
    """Item r * n_heads + h: head h's block of BW_QUERIES query rows, the r-th block from the last (so the
    costliest come first), of y = softmax(scale q k^T) v over the keys each row sees, and lse[h * seq +
    i] = each row's logsumexp: flash-attention's forward over blocks of BW_KEYS keys, the scores in
    register tiles, a running max and sum per row rescaling the block's output rows. q, y (seq, n_heads
    * head_dim); k, v (seq, n_kv_heads * head_dim); scratch: vx_attn_fwd_scratch_floats(head_dim)."""
    cdef int64_t D = s.head_dim, T = s.seq, h = item % s.n_heads
    cdef int64_t i0 = ((T + BW_QUERIES - 1) // BW_QUERIES - 1 - item // s.n_heads) * BW_QUERIES
    cdef int64_t nq = T - i0 if T - i0 < BW_QUERIES else BW_QUERIES
    cdef int64_t g = h // (s.n_heads // s.n_kv_heads), qw = s.n_heads * D, kw = s.n_kv_heads * D
    cdef float *kt = scratch                          # (D, BW_KEYS) scale k^T of the key block, zero padded
    cdef float *pb = kt + D * BW_KEYS                 # (BW_QUERIES, BW_KEYS) scores, then P
    cdef float *ob = pb + BW_QUERIES * BW_KEYS        # (BW_QUERIES, D) the block's unnormalised output rows
    cdef float *mx = ob + BW_QUERIES * D              # (BW_QUERIES,) running max of each row's scores
    cdef float *total = mx + BW_QUERIES               # (BW_QUERIES,) running sum of exp(score - mx)
    cdef int64_t j0, nk, r, c, d, i, lo, hi
    cdef float m, alpha, row_sum
    for r in range(nq):
        mx[r] = -INFINITY
        total[r] = 0.0
    memset(ob, 0, <size_t>(nq * D) * sizeof(float))
    j0 = (bw_first_key(s, i0) // BW_KEYS) * BW_KEYS
    while j0 < i0 + nq:
        nk = T - j0 if T - j0 < BW_KEYS else BW_KEYS
        bw_key_panel(D, nk, s.scale, k + j0 * kw + g * D, kw, kt)
        bw_block_scores(D, q + i0 * qw + h * D, qw, nq, kt, pb)
        for r in range(nq):
            i = i0 + r
            lo = bw_first_key(s, i) - j0
            if lo < 0:
                lo = 0
            hi = i - j0 + 1 if i - j0 + 1 < nk else nk
            if hi <= lo:  # no key of this block is seen by row i
                for c in range(BW_KEYS):
                    pb[r * BW_KEYS + c] = 0.0
                continue
            m = mx[r]
            for c in range(lo, hi):
                if pb[r * BW_KEYS + c] > m:
                    m = pb[r * BW_KEYS + c]
            for c in range(BW_KEYS // 8):
                exp8(pb + r * BW_KEYS + 8 * c, m, pb + r * BW_KEYS + 8 * c)
            row_sum = 0.0
            for c in range(BW_KEYS):
                if c < lo or c >= hi:
                    pb[r * BW_KEYS + c] = 0.0
                row_sum = row_sum + pb[r * BW_KEYS + c]
            alpha = expf(mx[r] - m)  # 0 on the row's first block (mx -inf)
            total[r] = total[r] * alpha + row_sum
            mx[r] = m
            if alpha != <float>1.0:
                for d in range(D):
                    ob[r * D + d] = ob[r * D + d] * alpha
        bw_block_axpy(nq, D, nk, pb, BW_KEYS, 1, v + j0 * kw + g * D, kw, ob, D)
        j0 += BW_KEYS
    for r in range(nq):
        for d in range(D):
            y[(i0 + r) * qw + h * D + d] = ob[r * D + d] / total[r]
        lse[h * T + i0 + r] = mx[r] + logf(total[r])


cdef inline void bw_rows_axpy(const int JR, int64_t D, int64_t n, const float *a, int64_t a_row, int64_t a_col,
                              const float *b, int64_t ldb, float *y, int64_t ldy) noexcept nogil:
    """y[r * ldy + c] += sum_{t < n} a[r * a_row + t * a_col] b[t * ldb + c] for r < JR (<= 4), c < D:
    JR rows of y held in registers one vector of columns at a time."""
    cdef vf acc[4]                             # (JR rows) one vector of y's columns
    cdef vf bv
    cdef vf_mask m
    cdef int64_t c = 0, t
    cdef int r
    while c + VL <= D:
        for r in range(JR):
            acc[r] = vf_load(y + r * ldy + c)
        for t in range(n):
            bv = vf_load(b + t * ldb + c)
            for r in range(JR):
                acc[r] = vf_fma(vf_set1(a[r * a_row + t * a_col]), bv, acc[r])
        for r in range(JR):
            vf_store(y + r * ldy + c, acc[r])
        c += VL
    if c < D:
        m = vf_lanes(D - c)
        for r in range(JR):
            acc[r] = vf_load_part(m, y + r * ldy + c)
        for t in range(n):
            bv = vf_load_part(m, b + t * ldb + c)
            for r in range(JR):
                acc[r] = vf_fma(vf_set1(a[r * a_row + t * a_col]), bv, acc[r])
        for r in range(JR):
            vf_store_part(m, y + r * ldy + c, acc[r])


cdef inline void bw_block_axpy(int64_t rows, int64_t D, int64_t n, const float *a, int64_t a_row, int64_t a_col,
                               const float *b, int64_t ldb, float *y, int64_t ldy) noexcept nogil:
    """bw_rows_axpy over rows rows of y, four at a time."""
    cdef int64_t r = 0
    while r + 4 <= rows:
        bw_rows_axpy(4, D, n, a + r * a_row, a_row, a_col, b, ldb, y + r * ldy, ldy)
        r += 4
    while r < rows:
        bw_rows_axpy(1, D, n, a + r * a_row, a_row, a_col, b, ldb, y + r * ldy, ldy)
        r += 1


cdef inline void bw_block_scores(int64_t D, const float *x, int64_t ldx, int64_t rows, const float *panel,
                                 float *out) noexcept nogil:
    """out (rows, BW_KEYS) = x (rows, D; rows ldx apart) @ panel (D, BW_KEYS), BW_MR rows at a time."""
    cdef int64_t r = 0, n
    while r < rows:
        n = rows - r if rows - r < BW_MR else BW_MR
        bw_tile(D, x + r * ldx, ldx, 1, n, panel, BW_KEYS, BW_KEYS, False, out + r * BW_KEYS, BW_KEYS)
        r += n


cdef void attention_bwd_group(const vx_attn_train_shape *s, const float *q, const float *k, const float *v,
                              const float *out, const float *dout, const float *lse, int64_t g, float *delta,
                              float *dq, float *dk, float *dv, float *scratch) noexcept nogil:
    """kv head g of one sequence: dk, dv (seq, n_kv_heads * head_dim) of head g and dq (seq, n_heads *
    head_dim) of the group's query heads, in one pass over blocks of BW_QUERIES queries x BW_KEYS keys
    per query head h: S = scale q k^T, P = exp(S - lse[h]) (zero where unseen), dv += P^T do, dP = do v^T,
    dS = scale P (dP - delta[h]), dq += dS k, dk += dS^T q, with delta[h, i] = do_i . out_i written
    first. q, out, dout (seq, n_heads * head_dim); lse, delta (n_heads, seq); scratch:
    vx_attn_bwd_scratch_floats(head_dim) floats."""
    cdef int64_t D = s.head_dim, T = s.seq, group = s.n_heads // s.n_kv_heads
    cdef int64_t qw = s.n_heads * D, kw = s.n_kv_heads * D
    cdef float *kt = scratch                          # (D, BW_KEYS) scale k^T of the key block, zero padded
    cdef float *vt = kt + D * BW_KEYS                 # (D, BW_KEYS) v^T of the key block, zero padded
    cdef float *pb = vt + D * BW_KEYS                 # (BW_QUERIES, BW_KEYS) P of the block
    cdef float *dsb = pb + BW_QUERIES * BW_KEYS       # (BW_QUERIES, BW_KEYS) dP, then dS
    cdef int64_t h, i, j, j0, nk, i0, i_end, nq, r, c, lo, hi, d
    cdef float L, dl
    cdef double acc
    for h in range(g * group, g * group + group):
        for i in range(T):
            acc = 0.0
            for d in range(D):
                acc = acc + <double>dout[i * qw + h * D + d] * <double>out[i * qw + h * D + d]
            delta[h * T + i] = <float>acc
            memset(dq + i * qw + h * D, 0, <size_t>D * sizeof(float))
    for j in range(T):
        memset(dk + j * kw + g * D, 0, <size_t>D * sizeof(float))
        memset(dv + j * kw + g * D, 0, <size_t>D * sizeof(float))
    j0 = 0
    while j0 < T:
        nk = T - j0 if T - j0 < BW_KEYS else BW_KEYS
        bw_key_panel(D, nk, s.scale, k + j0 * kw + g * D, kw, kt)
        bw_key_panel(D, nk, <float>1.0, v + j0 * kw + g * D, kw, vt)
        i_end = T if s.window <= 0 or j0 + nk - 1 + s.window > T else j0 + nk - 1 + s.window
        for h in range(g * group, g * group + group):
            i0 = j0
            while i0 < i_end:
                nq = i_end - i0 if i_end - i0 < BW_QUERIES else BW_QUERIES
                bw_block_scores(D, q + i0 * qw + h * D, qw, nq, kt, pb)
                bw_block_scores(D, dout + i0 * qw + h * D, qw, nq, vt, dsb)
                for r in range(nq):
                    i = i0 + r
                    L = lse[h * T + i]
                    dl = delta[h * T + i]
                    for c in range(BW_KEYS // 8):
                        exp8(pb + r * BW_KEYS + 8 * c, L, pb + r * BW_KEYS + 8 * c)
                    lo = bw_first_key(s, i) - j0
                    hi = i - j0 + 1 if i - j0 + 1 < nk else nk
                    for c in range(BW_KEYS):
                        if c < lo or c >= hi:
                            pb[r * BW_KEYS + c] = 0.0
                    for c in range(BW_KEYS):
                        dsb[r * BW_KEYS + c] = s.scale * pb[r * BW_KEYS + c] * (dsb[r * BW_KEYS + c] - dl)
                bw_block_axpy(nk, D, nq, pb, 1, BW_KEYS, dout + i0 * qw + h * D, qw, dv + j0 * kw + g * D, kw)
                bw_block_axpy(nk, D, nq, dsb, 1, BW_KEYS, q + i0 * qw + h * D, qw, dk + j0 * kw + g * D, kw)
                bw_block_axpy(nq, D, nk, dsb, BW_KEYS, 1, k + j0 * kw + g * D, kw, dq + i0 * qw + h * D, qw)
                i0 += BW_QUERIES
        j0 += BW_KEYS


cdef void cross_entropy_row(int64_t V, const float *x, int64_t label, float scale, float *dx,
                            float *loss, float *lse) noexcept nogil:
    """One row of logits x (V,) with its label (0 <= label < V): loss[0] = logsumexp(x) - x[label],
    lse[0] = logsumexp(x), and, unless dx is NULL, dx (V,) = scale (softmax(x) - onehot(label)). dx may
    be x itself: every logit is read before its gradient is written."""
    cdef float mx = -INFINITY, l
    cdef float lanes[8]
    cdef double total = 0.0
    cdef int64_t j = 0
    for j in range(V):
        if x[j] > mx:
            mx = x[j]
    j = 0
    while j + 8 <= V:
        total += <double>exp8(x + j, mx, lanes)
        j += 8
    while j < V:
        total += <double>expf(x[j] - mx)
        j += 1
    l = mx + <float>log(total)
    loss[0] = l - x[label]
    lse[0] = l
    if dx != NULL:
        cross_entropy_grad_row(V, x, label, l, scale, dx)


cdef void cross_entropy_grad_row(int64_t V, const float *x, int64_t label, float lse, float scale,
                                 float *dx) noexcept nogil:
    """dx (V,) = scale (exp(x - lse) - onehot(label)) for one row of logits x (V,) whose logsumexp is
    lse (the forward's): one pass. dx may be x itself."""
    cdef float lanes[8]
    cdef int64_t j = 0
    while j + 8 <= V:
        exp8(x + j, lse, lanes)
        bw_scale8(lanes, scale, dx + j)
        j += 8
    while j < V:
        dx[j] = expf(x[j] - lse) * scale
        j += 1
    dx[label] = dx[label] - scale


cdef inline void bw_scale8(const float *src, float scale, float *dst) noexcept nogil:
    """dst[l] = src[l] * scale for 8 lanes."""
    cdef int l
    for l in range(8):
        dst[l] = src[l] * scale


cdef float rms_norm_bwd_row(int64_t D, const float *x, const float *weight, const float *g, float eps,
                            float *dx) noexcept nogil:
    """dx (D,) of y = x r weight, r = 1 / sqrt(mean(x^2) + eps), given g = dL/dy (D,):
    dx = r g weight - x r^3 / D sum(g weight x). Returns r (sums in double, as the forward)."""
    cdef double ss = 0.0, c = 0.0
    cdef int64_t j
    for j in range(D):
        ss += <double>(x[j] * x[j])
    cdef float r = <float>1.0 / sqrtf(<float>(ss / <double>D) + eps)
    for j in range(D):
        c += <double>g[j] * <double>weight[j] * <double>x[j]
    cdef float coef = <float>(c * <double>r * <double>r * <double>r / <double>D)
    for j in range(D):
        dx[j] = r * g[j] * weight[j] - coef * x[j]
    return r


cdef inline double bw_lanes_sum(vf v) noexcept nogil:
    """v's VL lanes summed in double, lane 0 first."""
    cdef float lanes[VL]                  # (VL,) v
    cdef double total = 0.0
    cdef int l
    vf_store(lanes, v)
    for l in range(VL):
        total += <double>lanes[l]
    return total


cdef float layer_norm_bwd_row(int64_t D, const float *x, const float *weight, const float *g, float eps,
                              float *dx, float *mean) noexcept nogil:
    """dx (D,) of y = xhat weight + bias, xhat = (x - mean) r, r = 1 / sqrt(var + eps), given g = dL/dy (D,):
    dx = r (g weight - mean(g weight) - xhat mean(g weight xhat)). Writes the row's mean to ``mean`` and
    returns r. Two passes of VL-lane float sums (each lane's sum taken in double at the end): x's, then
    (x - mean)^2's, g weight's and g weight (x - mean)'s together."""
    cdef vf sx = vf_zero(), sq_v = vf_zero(), sg_v = vf_zero(), sgx_v = vf_zero(), xc, gw, mu_v
    cdef vf minus_one = vf_set1(<float>-1.0)
    cdef double total, sq, sg, sgx, c, mu
    cdef int64_t j = 0, tail = D - D % VL
    while j < tail:
        sx = vf_add(sx, vf_load(x + j))
        j += VL
    total = bw_lanes_sum(sx)
    for j in range(tail, D):
        total += x[j]
    mu = total / <double>D
    mu_v = vf_set1(<float>mu)
    j = 0
    while j < tail:
        xc = vf_fma(minus_one, mu_v, vf_load(x + j))                       # x - mean
        gw = vf_fma(vf_load(g + j), vf_load(weight + j), vf_zero())         # g weight
        sq_v = vf_fma(xc, xc, sq_v)
        sg_v = vf_add(sg_v, gw)
        sgx_v = vf_fma(gw, xc, sgx_v)
        j += VL
    sq, sg, sgx = bw_lanes_sum(sq_v), bw_lanes_sum(sg_v), bw_lanes_sum(sgx_v)
    for j in range(tail, D):
        c = <double>(x[j] - <float>mu)
        sq += c * c
        sg += <double>(g[j] * weight[j])
        sgx += <double>(g[j] * weight[j]) * c
    cdef double r = 1.0 / sqrt(sq / <double>D + <double>eps)
    cdef float rf = <float>r, muf = <float>mu
    cdef float mg = <float>(sg / <double>D), mgx = <float>(sgx * r / <double>D)   # mean(g w), mean(g w xhat)
    cdef float xhat
    for j in range(D):
        xhat = (x[j] - muf) * rf
        dx[j] = rf * (g[j] * weight[j] - mg - xhat * mgx)
    mean[0] = muf
    return rf


cdef void gelu_grad_run(int64_t n, const float *x, const float *dy, bint tanh_approx, float *dx) noexcept nogil:
    """dx (n,) = dy gelu'(x); dx may be dy. Exact: Phi(x) + x phi(x), Phi through the forward's erfc fit
    (erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z / 2), z = |x| / sqrt 2); tanh form: with u = c (x +
    0.044715 x^3), e = exp(-2 |u|): 0.5 (1 + tanh u) = 1 / (1 + e) (u >= 0) or e / (1 + e), 1 - tanh^2 u =
    4 e / (1 + e)^2, gelu' = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) c (1 + 3 0.044715 x^2)."""
    cdef float v[8]                       # (8,) x, zero past the end
    cdef float a[8]                       # (8,) exp's argument, then exp of it
    cdef float b[8]                       # (8,) exact: exp(-z^2)
    cdef float t[8]                       # (8,) exact: 1 / (1 + z / 2)
    cdef float c = <float>0.7978845608028654, inv_sqrt_2pi = <float>0.3989422804014327
    cdef float p, z, e, half, d
    cdef int64_t i0
    cdef int l, m
    for i0 in range(0, n, 8):
        m = <int>(n - i0) if n - i0 < 8 else 8
        for l in range(8):
            v[l] = x[i0 + l] if l < m else <float>0.0
        if tanh_approx:
            for l in range(8):
                a[l] = <float>-2.0 * fabsf(c * (v[l] + <float>0.044715 * v[l] * v[l] * v[l]))
            exp8(a, <float>0.0, a)
            for l in range(m):
                e = a[l]
                half = (<float>1.0 if v[l] >= <float>0.0 else e) / (<float>1.0 + e)   # u has x's sign
                d = half + <float>2.0 * v[l] * e / ((<float>1.0 + e) * (<float>1.0 + e)) * c * (
                    <float>1.0 + <float>0.134145 * v[l] * v[l])
                dx[i0 + l] = dy[i0 + l] * d
            continue
        for l in range(8):
            z = fabsf(v[l]) * <float>0.70710678118654752
            t[l] = <float>1.0 / (<float>1.0 + <float>0.5 * z)
            p = <float>0.17087277
            p = p * t[l] - <float>0.82215223
            p = p * t[l] + <float>1.48851587
            p = p * t[l] - <float>1.13520398
            p = p * t[l] + <float>0.27886807
            p = p * t[l] - <float>0.18628806
            p = p * t[l] + <float>0.09678418
            p = p * t[l] + <float>0.37409196
            p = p * t[l] + <float>1.00002368
            p = p * t[l] - <float>1.26551223
            a[l] = p - z * z
            b[l] = -z * z
        exp8(a, <float>0.0, a)
        exp8(b, <float>0.0, b)
        for l in range(m):
            half = <float>0.5 * t[l] * a[l]                  # Phi(-|x|)
            d = (half if v[l] < <float>0.0 else <float>1.0 - half) + v[l] * b[l] * inv_sqrt_2pi
            dx[i0 + l] = dy[i0 + l] * d


cdef void silu_grad_run(int64_t n, const float *x, const float *dy, float *dx) noexcept nogil:
    """dx (n,) = dy s (1 + x (1 - s)), s = sigmoid(x) = 1 / (1 + exp(-x)); dx may be dy."""
    cdef float a[8]                       # (8,) -x, then exp(-x)
    cdef float s
    cdef int64_t i0
    cdef int l, m
    for i0 in range(0, n, 8):
        m = <int>(n - i0) if n - i0 < 8 else 8
        for l in range(8):
            a[l] = -x[i0 + l] if l < m else <float>0.0
        exp8(a, <float>0.0, a)
        for l in range(m):
            s = <float>1.0 / (<float>1.0 + a[l])
            dx[i0 + l] = dy[i0 + l] * (s * (<float>1.0 + x[i0 + l] * (<float>1.0 - s)))


cdef void fill_backward(vx_train_table *t) noexcept:
    """Point t's entries at this tier's backward kernels."""
    t.matmul_t_strip = matmul_t_strip
    t.attention_fwd_block = attention_fwd_block
    t.attention_bwd_group = attention_bwd_group
    t.cross_entropy_row = cross_entropy_row
    t.cross_entropy_grad_row = cross_entropy_grad_row
    t.rms_norm_bwd_row = rms_norm_bwd_row
    t.layer_norm_bwd_row = layer_norm_bwd_row
    t.gelu_grad_run = gelu_grad_run
    t.silu_grad_run = silu_grad_run
