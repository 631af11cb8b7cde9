"""2-D convolution in NHWC: conv2d (float, any groups, dilation, explicit asymmetric padding).

Weights are laid out (out_channels, kh, kw, in_channels / groups) ("OHWI", TFLite's
layout); importers permute into it once. ``pads`` is [top, left, bottom, right], so
TF "SAME" padding (which puts the odd pixel at the bottom/right) is expressed exactly.

The numpy reference accumulates tap by tap in float64. The fast path is im2col +
a float32 BLAS matmul for dense convs and a tap loop for depthwise ones; both are
shared with the int8 conv (``ops/quantized.py``), which runs them on exact
integer-valued float64 data.
"""

from __future__ import annotations

import numpy as np

from volvox import cpu
from volvox.ir.graph import expect, same_dim
from volvox.ops.registry import OpDef, register
from volvox.ops.gpu import ACT_CODES, Call, Dispatch, Lowering, float_only, grid_of

ACTIVATIONS = ("none", "relu", "relu6")


def conv_out_dim(size, k: int, stride: int, dil: int, pad_before: int, pad_after: int):
    """Output length of one spatial axis; a derived symbol name when ``size`` is symbolic."""
    span = (k - 1) * dil + 1
    if isinstance(size, int):
        return (size + pad_before + pad_after - span) // stride + 1
    if pad_before + pad_after == span - 1 and stride == 1:
        return size
    return f"{size}/{stride}"  # symbolic: matches any size at run time


def same_padding(size: int, k: int, stride: int, dil: int = 1) -> tuple[int, int]:
    """TF/TFLite SAME padding of one axis: (before, after), the odd pixel after."""
    out = -(-size // stride)
    total = max((out - 1) * stride + (k - 1) * dil + 1 - size, 0)
    return total // 2, total - total // 2


def window_params(p: dict) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int, int, int]]:
    """(strides, dilations, pads) of a conv/pool node with their defaults."""
    strides = tuple(int(s) for s in p.get("strides", (1, 1)))
    dil = tuple(int(d) for d in p.get("dilations", (1, 1)))
    pads = tuple(int(v) for v in p.get("pads", (0, 0, 0, 0)))
    expect(len(strides) == 2 and len(dil) == 2 and len(pads) == 4 and min(strides + dil) >= 1 and min(pads) >= 0,
           f"strides/dilations must be 2 positive ints and pads 4 non-negative ints, got {p}")
    return strides, dil, pads


def conv_infer_shape(x, w, p: dict) -> tuple:
    """NHWC output shape of a conv of ``x`` (N, H, W, C) with OHWI weight ``w``; ShapeError on mismatch."""
    expect(len(x.shape) == 4, f"x must be NHWC (4-D), got {x.describe()}")
    expect(len(w.shape) == 4, f"weight must be (out, kh, kw, in/groups), got {w.describe()}")
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = window_params(p)
    groups = int(p.get("groups", 1))
    cout, kh, kw, cin_g = w.shape
    expect(groups >= 1 and cout % groups == 0 and same_dim(x.shape[3], cin_g * groups),
           f"channels: x {x.describe()} vs weight {w.describe()} with groups={groups}")
    oh = conv_out_dim(x.shape[1], kh, sh, dh, pt, pb)
    ow = conv_out_dim(x.shape[2], kw, sw, dw, pl, pr)
    expect(not isinstance(oh, int) or oh > 0, f"kernel {kh}x{kw} does not fit input {x.describe()}")
    expect(not isinstance(ow, int) or ow > 0, f"kernel {kh}x{kw} does not fit input {x.describe()}")
    return (x.shape[0], oh, ow, cout)


def _conv_infer(specs, params):
    x, w = specs["x"], specs["weight"]
    expect(x.dtype == "float32" and w.dtype == "float32", f"x and weight must be float32: {x.describe()}, {w.describe()}")
    if "bias" in specs:
        b = specs["bias"]
        expect(b.shape == (w.shape[0],) and b.dtype == "float32", f"bias must be float32[{w.shape[0]}], got {b.describe()}")
    expect(params.get("activation", "none") in ACTIVATIONS, f"activation must be one of {ACTIVATIONS}")
    return {"y": (conv_infer_shape(x, w, params), "float32")}


def pad_nhwc(x: np.ndarray, pads, value=0) -> np.ndarray:
    """x (N, H, W, C) padded spatially by [top, left, bottom, right] with ``value``."""
    pt, pl, pb, pr = pads
    if not (pt or pl or pb or pr):
        return x
    return np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)), constant_values=value)


def tap(xp: np.ndarray, i: int, j: int, oh: int, ow: int, strides, dil) -> np.ndarray:
    """The (N, oh, ow, C) view of padded input ``xp`` that kernel tap (i, j) reads."""
    (sh, sw), (dh, dw) = strides, dil
    return xp[:, i * dh: i * dh + (oh - 1) * sh + 1: sh, j * dw: j * dw + (ow - 1) * sw + 1: sw, :]


def conv_direct(x: np.ndarray, w: np.ndarray, p: dict, acc_dtype) -> np.ndarray:
    """Reference conv: sum over taps of per-group matmuls, accumulated in ``acc_dtype``. (N, OH, OW, Cout)."""
    strides, dil, pads = window_params(p)
    groups = int(p.get("groups", 1))
    n, h, wd, c = x.shape
    cout, kh, kw, cin_g = w.shape
    oh = (h + pads[0] + pads[2] - (kh - 1) * dil[0] - 1) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - (kw - 1) * dil[1] - 1) // strides[1] + 1
    xp = pad_nhwc(x.astype(acc_dtype), pads)
    wg = w.astype(acc_dtype).reshape(groups, cout // groups, kh, kw, cin_g)  # (g, cout/g, kh, kw, cin/g)
    y = np.zeros((n, oh, ow, groups, cout // groups), acc_dtype)           # (N, OH, OW, g, cout/g)
    for i in range(kh):
        for j in range(kw):
            t = tap(xp, i, j, oh, ow, strides, dil).reshape(n, oh, ow, groups, cin_g)
            y += np.einsum("nhwgc,goc->nhwgo", t, wg[:, :, i, j, :])
    return y.reshape(n, oh, ow, cout)


def conv_fast(x: np.ndarray, w: np.ndarray, p: dict, dtype) -> np.ndarray:
    """Production conv in ``dtype`` (float32, or float64 for exact integer data). (N, OH, OW, Cout).

    Dense (groups=1): im2col + one BLAS matmul (1x1 stride-1 convs skip im2col).
    Depthwise (one input channel per group): a tap loop of broadcast multiply-adds.
    Other grouped convs: one im2col matmul per group.
    """
    strides, dil, pads = window_params(p)
    groups = int(p.get("groups", 1))
    n, h, wd, c = x.shape
    cout, kh, kw, cin_g = w.shape
    oh = (h + pads[0] + pads[2] - (kh - 1) * dil[0] - 1) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - (kw - 1) * dil[1] - 1) // strides[1] + 1
    x = x.astype(dtype, copy=False)
    w = w.astype(dtype, copy=False)
    if groups == 1 and kh == kw == 1 and strides == (1, 1) and not any(pads):
        return (x.reshape(-1, c) @ w.reshape(cout, c).T).reshape(n, oh, ow, cout)
    xp = pad_nhwc(x, pads)
    if cin_g == 1 and groups == c:
        mult = cout // c
        y = np.zeros((n, oh, ow, cout), dtype)  # (N, OH, OW, C*mult)
        for i in range(kh):
            for j in range(kw):
                t = tap(xp, i, j, oh, ow, strides, dil)  # (N, OH, OW, C)
                if mult > 1:
                    t = np.repeat(t, mult, axis=3)
                y += t * w[:, i, j, 0]
        return y
    cols = np.empty((n, oh, ow, kh, kw, c), dtype)  # im2col: (N, OH, OW, kh, kw, C)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, :, i, j, :] = tap(xp, i, j, oh, ow, strides, dil)
    if groups == 1:
        return (cols.reshape(-1, kh * kw * c) @ w.reshape(cout, -1).T).reshape(n, oh, ow, cout)
    cols = cols.reshape(n * oh * ow, kh * kw, groups, cin_g)
    wg = w.reshape(groups, cout // groups, kh * kw * cin_g)  # (g, cout/g, kh*kw*cin/g)
    y = np.empty((n * oh * ow, groups, cout // groups), dtype)
    for g in range(groups):
        y[:, g, :] = cols[:, :, g, :].reshape(-1, kh * kw * cin_g) @ wg[g].T
    return y.reshape(n, oh, ow, cout)


def apply_activation(y: np.ndarray, act: str) -> np.ndarray:
    """Fused float activation in place: none, relu or relu6."""
    if act == "relu":
        np.maximum(y, 0, out=y)
    elif act == "relu6":
        np.clip(y, 0, 6, out=y)
    return y


def conv2d_ref(ctx, p, x, weight, bias=None):
    """NHWC conv, float64 tap-by-tap accumulation, + bias, fused activation."""
    y = conv_direct(x, weight, p, np.float64)
    if bias is not None:
        y += bias
    return apply_activation(y, p.get("activation", "none")).astype(np.float32)


def native_conv(x: np.ndarray, w: np.ndarray, p: dict) -> bool:
    """Whether volvox.cpu runs this conv: dense (groups=1) or depthwise with multiplier 1."""
    groups = int(p.get("groups", 1))
    return groups == 1 or (groups == x.shape[3] == w.shape[0] and w.shape[3] == 1)


def conv_kernel_args(p: dict) -> dict:
    """The geometry keywords of cpu.conv2d / qconv2d from a conv node's params."""
    strides, dil, pads = window_params(p)
    return dict(strides=strides, dilations=dil, pads=pads, groups=int(p.get("groups", 1)))


def conv2d_fast(ctx, p, x, weight, bias=None):
    """NHWC conv through volvox's kernels (packed GEMM, direct depthwise, fused bias +
    activation); other grouped convs through im2col + float32 BLAS per group."""
    if native_conv(x, weight, p):
        return cpu.conv2d(x, weight, bias, activation=p.get("activation", "none"), **conv_kernel_args(p))
    y = conv_fast(x, weight, p, np.float32)
    if bias is not None:
        y += bias
    return apply_activation(y, p.get("activation", "none"))


def conv2d_into(ctx, p, out, x, weight, bias=None):
    """conv2d_fast written into ``out`` (N, OH, OW, cout): by the kernel directly for the convs it runs."""
    if native_conv(x, weight, p):
        return cpu.conv2d(x, weight, bias, activation=p.get("activation", "none"), out=out, **conv_kernel_args(p))
    np.copyto(out, conv2d_fast(ctx, p, x, weight, bias))
    return out


# ------------------------------------------------------------------ GPU lowerings
def _lower_conv(c: Call) -> list[Dispatch]:
    (sh, sw), (dh, dw), (pt, pl, _, _) = window_params(c.params)
    n_, h, w, ch = c.shapes["x"]
    cout, kh, kw, cin_g = c.shapes["weight"]
    _, oh, ow, _ = c.shapes["y"]
    groups = int(c.params.get("groups", 1))
    has_bias = "bias" in c.shapes
    n = n_ * oh * ow * cout
    return [Dispatch("conv2d", ["x", "weight", "bias" if has_bias else "@dummy", "y"], grid_of(n),
                     dict(n=n, H=h, W=w, C=ch, OH=oh, OW=ow, Cout=cout, kh=kh, kw=kw, cin_g=cin_g,
                          cout_g=cout // groups, sh=sh, sw=sw, dh=dh, dw=dw, pt=pt, pl=pl, has_bias=int(has_bias),
                          act=ACT_CODES[c.params.get("activation", "none")]))]


register(OpDef("conv2d", "conv", ("x", "weight", "bias?"), ("y",), _conv_infer, conv2d_ref, conv2d_fast,
               into=conv2d_into,
               gpu=Lowering(("conv2d",), _lower_conv, float_only("x", "weight"))))
