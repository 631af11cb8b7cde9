"""ggml's reference quantizers for the k-quants (q2_K .. q6_K) and iq4_nl, in numpy.

Each follows ggml-quants.c's quantize_row_<type>_ref (iq4_nl: quantize_iq4_nl, what llama.cpp's
model quantizer writes without an importance matrix) operation for operation in float32: the
same sequential sums, the same scale searches, nearest_int's bit trick, so the bytes equal
llama.cpp's (ggml-base is built without FMA contraction, so no fused products to emulate).
The searches run group by group in ggml; here every group of a tensor advances together and the
element loops stay sequential (ggml's summation order).

Entry point: ``quantize_blocks(x, qtype)``: float32 (rows, cols) -> uint8 (rows, row bytes).
"""

from __future__ import annotations

import numpy as np

F = np.float32
GROUP_MAX_EPS = F(1e-15)
IQ4_NL_LEVELS = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int8)


def nearest_int(v: np.ndarray) -> np.ndarray:
    """ggml's nearest_int: the low mantissa bits of v + 1.5 * 2^23 (round half to even for
    |v| < 2^22; the same bits as ggml beyond that, where its assert is compiled out)."""
    t = (np.asarray(v, F) + F(12582912.0)).astype(F)
    return (t.view(np.int32) & 0x007FFFFF) - 0x00400000


def _f16_bits(v: np.ndarray) -> np.ndarray:
    """(..., ) float32 -> (..., 2) uint8: GGML_FP32_TO_FP16 (round to nearest even)."""
    return np.ascontiguousarray(np.asarray(v, F).astype(np.float16)).view(np.uint8).reshape(*np.shape(v), 2)


def _f16_round(v: np.ndarray) -> np.ndarray:
    """GGML_FP16_TO_FP32(GGML_FP32_TO_FP16(v))."""
    return np.asarray(v, F).astype(np.float16).astype(F)


def _first_abs_max(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(amax, max) over the last axis: the largest |x| and the first x that has it."""
    i = np.abs(x).argmax(axis=-1)[..., None]
    mx = np.take_along_axis(x, i, axis=-1)[..., 0]
    return np.abs(mx), mx


def _errstate():
    return np.errstate(divide="ignore", invalid="ignore", over="ignore")


# --------------------------------------------------------------------------- scale searches
def make_qkx2_quants(x, weights, nmax, rmin, rdelta, nstep, use_mad):
    """ggml's make_qkx2_quants for every group (row of x (G, n)): (scale (G,), the_min (G,),
    L uint8 (G, n)) fitting x ~ scale * L - the_min with L in 0..nmax."""
    g, n = x.shape
    with _errstate():
        mn = x[:, 0].copy()
        mx = x[:, 0].copy()
        sum_w = weights[:, 0].copy()
        sum_x = (sum_w * x[:, 0]).astype(F)
        for i in range(1, n):
            mn = np.where(x[:, i] < mn, x[:, i], mn)
            mx = np.where(x[:, i] > mx, x[:, i], mx)
            sum_w = sum_w + weights[:, i]
            sum_x = sum_x + weights[:, i] * x[:, i]
        mn = np.where(mn > 0, F(0), mn)
        flat = mx == mn
        span = (mx - mn).astype(F)
        iscale = (F(nmax) / span).astype(F)
        scale = (F(1) / iscale).astype(F)
        L = np.clip(nearest_int(iscale[:, None] * (x - mn[:, None])), 0, nmax)
        best = np.zeros(g, F)
        for i in range(n):
            diff = scale * L[:, i].astype(F) + mn - x[:, i]
            diff = np.abs(diff) if use_mad else diff * diff
            best = best + weights[:, i] * diff
        for step in range(nstep + 1):
            # min is the best fit so far: each step scales from it (as ggml does)
            iscale = ((F(rmin) + F(rdelta) * F(step) + F(nmax)) / (mx - mn)).astype(F)
            laux = np.clip(nearest_int(iscale[:, None] * (x - mn[:, None])), 0, nmax)
            lf = laux.astype(F)
            sum_l = np.zeros(g, F)
            sum_l2 = np.zeros(g, F)
            sum_xl = np.zeros(g, F)
            for i in range(n):
                wl = weights[:, i] * lf[:, i]
                sum_l = sum_l + wl
                sum_l2 = sum_l2 + wl * lf[:, i]
                sum_xl = sum_xl + wl * x[:, i]
            D = sum_w * sum_l2 - sum_l * sum_l
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / D
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D
            positive = this_min > 0
            this_min = np.where(positive, F(0), this_min)
            this_scale = np.where(positive, sum_xl / sum_l2, this_scale)
            cur = np.zeros(g, F)
            for i in range(n):
                diff = this_scale * lf[:, i] + this_min - x[:, i]
                diff = np.abs(diff) if use_mad else diff * diff
                cur = cur + weights[:, i] * diff
            better = (D > 0) & (cur < best)
            L = np.where(better[:, None], laux, L)
            best = np.where(better, cur, best)
            scale = np.where(better, this_scale, scale)
            mn = np.where(better, this_min, mn)
    L = np.where(flat[:, None], 0, L)
    scale = np.where(flat, F(0), scale)
    return scale.astype(F), (-mn).astype(F), L.astype(np.uint8)


def make_q3_quants(x, nmax):
    """ggml's make_q3_quants with do_rmse for every group (row of x (G, n)): (scale (G,),
    L int (G, n) in 0 .. 2 nmax - 1)."""
    g, n = x.shape
    amax, mx = _first_abs_max(x)
    zero = amax < GROUP_MAX_EPS
    with _errstate():
        iscale = (F(-nmax) / mx).astype(F)
        L = np.clip(nearest_int(iscale[:, None] * x), -nmax, nmax - 1)
        w = (x * x).astype(F)
        sumlx = np.zeros(g, F)
        suml2 = np.zeros(g, F)
        for i in range(n):
            lf = L[:, i].astype(F)
            sumlx = sumlx + w[:, i] * x[:, i] * lf
            suml2 = suml2 + w[:, i] * lf * lf
        active = ~zero
        for _ in range(5):
            changed = np.zeros(g, bool)
            for i in range(n):
                lf = L[:, i].astype(F)
                slx = sumlx - w[:, i] * x[:, i] * lf
                sl2 = suml2 - w[:, i] * lf * lf
                new_l = np.clip(nearest_int(x[:, i] * sl2 / slx), -nmax, nmax - 1)
                nf = new_l.astype(F)
                slx2 = slx + w[:, i] * x[:, i] * nf
                sl22 = sl2 + w[:, i] * nf * nf
                take = (active & (slx > 0) & (new_l != L[:, i]) & (sl22 > 0)
                        & (slx2 * slx2 * suml2 > sumlx * sumlx * sl22))
                L[:, i] = np.where(take, new_l, L[:, i])
                sumlx = np.where(take, slx2, sumlx)
                suml2 = np.where(take, sl22, suml2)
                changed |= take
            active &= changed
            if not active.any():
                break
        scale = np.where(suml2 > 0, sumlx / suml2, F(0)).astype(F)
    return np.where(zero, F(0), scale), np.where(zero[:, None], 0, L + nmax)


def make_qx_quants(x, nmax):
    """ggml's make_qx_quants with rmse_type 1 and no importance weights for every group (row of
    x (G, n)): (scale (G,), L int (G, n) in 0 .. 2 nmax - 1)."""
    g, n = x.shape
    amax, mx = _first_abs_max(x)
    zero = amax < GROUP_MAX_EPS
    w = (x * x).astype(F)

    def sums(iscale):
        ls = np.clip(nearest_int(iscale[:, None] * x), -nmax, nmax - 1)
        sumlx = np.zeros(g, F)
        suml2 = np.zeros(g, F)
        for i in range(n):
            lf = ls[:, i].astype(F)
            sumlx = sumlx + w[:, i] * x[:, i] * lf
            suml2 = suml2 + w[:, i] * lf * lf
        return ls, sumlx, suml2

    with _errstate():
        iscale = (F(-nmax) / mx).astype(F)
        ls, sumlx, suml2 = sums(iscale)
        L = ls + nmax
        scale = np.where(suml2 != 0, sumlx / suml2, F(0)).astype(F)
        best = (scale * sumlx).astype(F)
        for step in range(-9, 10):
            if step == 0:
                continue
            iscale = (-(F(nmax) + F(0.1) * F(step)) / mx).astype(F)
            ls, sumlx, suml2 = sums(iscale)
            take = (suml2 > 0) & (sumlx * sumlx > best * suml2)
            L = np.where(take[:, None], ls + nmax, L)
            scale = np.where(take, sumlx / suml2, scale)
            best = np.where(take, scale * sumlx, best)
    return np.where(zero, F(0), scale).astype(F), np.where(zero[:, None], 0, L)


# --------------------------------------------------------------------------- block packers
def _pack_2bit(L: np.ndarray) -> np.ndarray:
    """(B, 256) values 0..3 -> (B, 64) bytes: qs[32 h + l] holds values 128 h + 32 s + l at bits 2 s."""
    q = L.reshape(-1, 2, 4, 32).astype(np.uint8)
    return (q[:, :, 0] | (q[:, :, 1] << 2) | (q[:, :, 2] << 4) | (q[:, :, 3] << 6)).reshape(-1, 64)


def _pack_k4_scales(ls: np.ndarray, lm: np.ndarray) -> np.ndarray:
    """(B, 8) 6-bit scales and mins -> (B, 12) bytes (the layout get_scale_min_k4 reads)."""
    s = np.zeros((ls.shape[0], 12), np.uint8)
    s[:, 0:4] = ls[:, 0:4] | ((ls[:, 4:8] >> 4) << 6)
    s[:, 4:8] = lm[:, 0:4] | ((lm[:, 4:8] >> 4) << 6)
    s[:, 8:12] = (ls[:, 4:8] & 0x0F) | ((lm[:, 4:8] & 0x0F) << 4)
    return s


def _requantize(x, d, offset, lo, hi, L):
    """ggml's second pass: L = clamp(nearest_int((x + offset) / d), lo, hi) where d != 0 (groups
    with d == 0 keep L). x (G, n); d, offset (G,)."""
    with _errstate():
        l = np.clip(nearest_int((x + offset[:, None]) / d[:, None]), lo, hi)
    return np.where((d != 0)[:, None], l, L)


def quantize_q2_k(x: np.ndarray) -> np.ndarray:
    """quantize_row_q2_K_ref on (B, 256) super-blocks -> (B, 84) blocks."""
    b = x.shape[0]
    xg = x.reshape(b * 16, 16)
    scales, mins, L = make_qkx2_quants(xg, np.abs(xg), 3, -0.5, 0.1, 15, True)
    scales, mins = scales.reshape(b, 16), mins.reshape(b, 16)
    max_scale = np.maximum(scales.max(axis=1), F(0))
    max_min = np.maximum(mins.max(axis=1), F(0))
    with _errstate():
        sc = np.where((max_scale > 0)[:, None], nearest_int((F(15) / max_scale)[:, None] * scales), 0)
        mn = np.where((max_min > 0)[:, None], nearest_int((F(15) / max_min)[:, None] * mins), 0)
    packed = ((sc & 0xFF) | ((mn << 4) & 0xFF)).astype(np.uint8)                       # (B, 16)
    d = np.where(max_scale > 0, (max_scale / F(15)).astype(F), F(0))
    dmin = np.where(max_min > 0, (max_min / F(15)).astype(F), F(0))
    dl = (_f16_round(d)[:, None] * (packed & 0x0F).astype(F)).reshape(-1)
    ml = (_f16_round(dmin)[:, None] * (packed >> 4).astype(F)).reshape(-1)
    L = _requantize(xg, dl, ml, 0, 3, L.astype(np.int64)).reshape(b, 256)
    return np.concatenate([packed, _pack_2bit(L), _f16_bits(d), _f16_bits(dmin)], axis=1)


def quantize_q3_k(x: np.ndarray) -> np.ndarray:
    """quantize_row_q3_K_ref on (B, 256) super-blocks -> (B, 110) blocks."""
    b = x.shape[0]
    xg = x.reshape(b * 16, 16)
    scales, L = make_q3_quants(xg, 4)
    scales = scales.reshape(b, 16)
    _, max_scale = _first_abs_max(scales)
    with _errstate():
        iscale = (F(-32) / max_scale).astype(F)
        l = np.clip(nearest_int(iscale[:, None] * scales).astype(np.int8), -32, 31).astype(np.int64) + 32
    l = np.where((max_scale != 0)[:, None], l, 0)                                       # (B, 16) 0..63
    packed = np.zeros((b, 12), np.uint8)
    packed[:, 0:8] = (l[:, 0:8] & 0x0F) | ((l[:, 8:16] & 0x0F) << 4)
    for j in range(16):
        packed[:, 8 + j % 4] |= ((l[:, j] >> 4) << (2 * (j // 4))).astype(np.uint8)
    with _errstate():
        d = np.where(max_scale != 0, (F(1) / iscale).astype(F), F(0))
    sc = np.where((max_scale != 0)[:, None], l - 32, 0)
    dl = (_f16_round(d)[:, None] * sc.astype(F)).reshape(-1)
    L = _requantize(xg, dl, np.zeros_like(dl), -4, 3, L - 4) + 4                         # 0..7
    L = L.reshape(b, 256)
    high = L > 3
    hmask = np.zeros((b, 32), np.uint8)
    for j in range(8):                                                                  # values 32 j .. 32 j + 31
        hmask |= (high[:, 32 * j:32 * j + 32].astype(np.uint8) << j)
    L = np.where(high, L - 4, L)
    return np.concatenate([hmask, _pack_2bit(L), packed, _f16_bits(d)], axis=1)


def _quantize_q45_k(x: np.ndarray, nmax: int, rmin: float, nstep: int):
    """The q4_K / q5_K scale fit: (scales bytes (B, 12), d, dmin (B,), L (B, 256) in 0..nmax)."""
    b = x.shape[0]
    xg = x.reshape(b * 8, 32)
    sum_x2 = np.zeros(b * 8, F)
    for i in range(32):
        sum_x2 = sum_x2 + xg[:, i] * xg[:, i]
    av_x = np.sqrt(sum_x2 / F(32)).astype(F)
    weights = (av_x[:, None] + np.abs(xg)).astype(F)
    scales, mins, L = make_qkx2_quants(xg, weights, nmax, rmin, 0.1, nstep, False)
    scales, mins = scales.reshape(b, 8), mins.reshape(b, 8)
    max_scale = np.maximum(scales.max(axis=1), F(0))
    max_min = np.maximum(mins.max(axis=1), F(0))
    with _errstate():
        inv_scale = np.where(max_scale > 0, F(63) / max_scale, F(0)).astype(F)
        inv_min = np.where(max_min > 0, F(63) / max_min, F(0)).astype(F)
    ls = np.minimum(nearest_int(inv_scale[:, None] * scales) & 0xFF, 63).astype(np.uint8)
    lm = np.minimum(nearest_int(inv_min[:, None] * mins) & 0xFF, 63).astype(np.uint8)
    d = (max_scale / F(63)).astype(F)
    dmin = (max_min / F(63)).astype(F)
    dl = (_f16_round(d)[:, None] * ls.astype(F)).reshape(-1)
    ml = (_f16_round(dmin)[:, None] * lm.astype(F)).reshape(-1)
    L = _requantize(xg, dl, ml, 0, nmax, L.astype(np.int64)).reshape(b, 256)
    return _pack_k4_scales(ls, lm), d, dmin, L


def quantize_q4_k(x: np.ndarray) -> np.ndarray:
    """quantize_row_q4_K_ref on (B, 256) super-blocks -> (B, 144) blocks."""
    scales, d, dmin, L = _quantize_q45_k(x, 15, -1.0, 20)
    q = L.reshape(-1, 4, 2, 32).astype(np.uint8)
    qs = (q[:, :, 0] | (q[:, :, 1] << 4)).reshape(-1, 128)
    return np.concatenate([_f16_bits(d), _f16_bits(dmin), scales, qs], axis=1)


def quantize_q5_k(x: np.ndarray) -> np.ndarray:
    """quantize_row_q5_K_ref on (B, 256) super-blocks -> (B, 176) blocks."""
    scales, d, dmin, L = _quantize_q45_k(x, 31, -0.5, 15)
    q = L.reshape(-1, 8, 32).astype(np.uint8)                                 # (B, sub-block, l)
    qh = np.zeros((q.shape[0], 32), np.uint8)
    for j in range(8):
        qh |= (q[:, j] >> 4) << j
    low = (q & 0x0F).reshape(-1, 4, 2, 32)
    qs = (low[:, :, 0] | (low[:, :, 1] << 4)).reshape(-1, 128)
    return np.concatenate([_f16_bits(d), _f16_bits(dmin), scales, qh, qs], axis=1)


def quantize_q6_k(x: np.ndarray) -> np.ndarray:
    """quantize_row_q6_K_ref on (B, 256) super-blocks -> (B, 210) blocks."""
    b = x.shape[0]
    xg = x.reshape(b * 16, 16)
    scales, L = make_qx_quants(xg, 32)
    scales = scales.reshape(b, 16)
    amax, max_scale = _first_abs_max(scales)
    zero = amax < GROUP_MAX_EPS
    with _errstate():
        iscale = (F(-128) / max_scale).astype(F)
        d = np.where(zero, F(0), (F(1) / iscale).astype(F))
        sc = np.minimum(127, nearest_int(iscale[:, None] * scales)).astype(np.int8)
    sc = np.where(zero[:, None], np.int8(0), sc)
    dl = (_f16_round(d)[:, None] * sc.astype(F)).reshape(-1)
    L = _requantize(xg, dl, np.zeros_like(dl), -32, 31, L - 32) + 32
    L = np.where(np.repeat(zero, 16)[:, None], 0, L).reshape(b, 2, 4, 32).astype(np.uint8)  # (B, half, s, l)
    ql = np.concatenate([L[:, :, 0] & 0x0F | ((L[:, :, 2] & 0x0F) << 4),
                         L[:, :, 1] & 0x0F | ((L[:, :, 3] & 0x0F) << 4)], axis=2).reshape(b, 128)
    qh = ((L[:, :, 0] >> 4) | ((L[:, :, 1] >> 4) << 2) | ((L[:, :, 2] >> 4) << 4)
          | ((L[:, :, 3] >> 4) << 6)).reshape(b, 64)
    return np.concatenate([ql, qh, sc.view(np.uint8), _f16_bits(d)], axis=1)


def _best_index(v: np.ndarray) -> np.ndarray:
    """ggml's best_index_int8 over the iq4_nl levels: the nearest level's index (the upper on a
    tie only when strictly nearer), for float32 v."""
    vals = IQ4_NL_LEVELS.astype(F)
    mu = np.clip(np.searchsorted(vals, v, side="right"), 1, 15)
    lower = (v - vals[mu - 1]) < (vals[mu] - v)
    idx = np.where(lower, mu - 1, mu)
    return np.where(v <= vals[0], 0, np.where(v >= vals[15], 15, idx))


def quantize_iq4_nl(x: np.ndarray) -> np.ndarray:
    """quantize_iq4_nl (ntry 7, no importance weights) on (B, 32) blocks -> (B, 18) blocks."""
    g, n = x.shape
    vals = IQ4_NL_LEVELS.astype(F)
    w = (x * x).astype(F)
    amax, mx = _first_abs_max(x)
    zero = amax < GROUP_MAX_EPS

    def sums(iscale):
        q = vals[_best_index((iscale[:, None] * x).astype(F))]
        sumqx = np.zeros(g, F)
        sumq2 = np.zeros(g, F)
        for j in range(n):
            wq = w[:, j] * q[:, j]
            sumqx = sumqx + wq * x[:, j]
            sumq2 = sumq2 + wq * q[:, j]
        return sumqx, sumq2

    with _errstate():
        d = (-mx / F(-127)).astype(F)
        sumqx, sumq2 = sums((F(1) / d).astype(F))
        d = np.where(sumq2 > 0, sumqx / sumq2, F(0)).astype(F)
        best = (d * sumqx).astype(F)
        for itry in range(-7, 8):
            sumqx, sumq2 = sums((F(itry - 127) / mx).astype(F))
            take = (sumq2 > 0) & (sumqx * sumqx > best * sumq2)
            d = np.where(take, sumqx / sumq2, d)
            best = np.where(take, d * sumqx, best)
        d = np.where(zero, F(0), d)
        inv = np.where(d != 0, F(1) / d, F(0)).astype(F)
    L = _best_index((inv[:, None] * x).astype(F)).astype(np.uint8)
    return np.concatenate([_f16_bits(d), L[:, :16] | (L[:, 16:] << 4)], axis=1)


QUANTIZERS = {"q2_k": quantize_q2_k, "q3_k": quantize_q3_k, "q4_k": quantize_q4_k,
              "q5_k": quantize_q5_k, "q6_k": quantize_q6_k, "iq4_nl": quantize_iq4_nl}


def quantize_blocks(x: np.ndarray, qtype: str, block_size: int) -> np.ndarray:
    """float32 (rows, cols) -> uint8 (rows, cols / block_size * type size) in `qtype` (a key of
    QUANTIZERS), block by block."""
    rows, cols = x.shape
    blocks = QUANTIZERS[qtype](np.ascontiguousarray(x, F).reshape(-1, block_size))
    return np.ascontiguousarray(blocks.reshape(rows, -1))
