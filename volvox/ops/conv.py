"""2-D convolution in NHWC: conv2d (float, any groups, dilation, explicit asymmetric padding).

Weights are laid out (out_channels, kh, kw, in_channels / groups) ("OHWI", TFLite's
layout); importers permute into it once. ``pads`` is [top, left, bottom, right], so
TF "SAME" padding (which puts the odd pixel at the bottom/right) is expressed exactly.

The numpy reference accumulates tap by tap in float64. The fast path is im2col +
a float32 BLAS matmul for dense convs and a tap loop for depthwise ones; both are
shared with the int8 conv (``ops/quantized.py``), which runs them on exact
integer-valued float64 data.

Training graphs differentiate conv2d through its grad ops (conv2d_grad_input, conv2d_grad_weight,
conv2d_grad_bias, fused_activation_grad; the backward section below).
"""

from __future__ import annotations

import numpy as np

from volvox import cpu
from volvox.errors import UnsupportedError
from volvox.ir.graph import TensorSpec, expect, same_dim
from volvox.ops.codes import FN
from volvox.ops.registry import OpDef, register
from volvox.ops.elementwise import plan_activation
from volvox.ops.gpu import Call, Dispatch, Lowering, float_only, grid_of

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


def conv_geometry(x: np.ndarray, w: np.ndarray, p: dict) -> tuple:
    """(strides, dilations, pads, groups, OH, OW) of an NHWC conv of x by w (Cout, KH, KW, Cin/g)."""
    strides, dil, pads = window_params(p)
    oh = conv_out_dim(x.shape[1], w.shape[1], strides[0], dil[0], pads[0], pads[2])
    ow = conv_out_dim(x.shape[2], w.shape[2], strides[1], dil[1], pads[1], pads[3])
    return strides, dil, pads, int(p.get("groups", 1)), oh, ow


def conv_direct(x: np.ndarray, w: np.ndarray, p: dict, acc_dtype) -> np.ndarray:
    """Reference conv: sum over taps of per-group matmuls, accumulated in ``acc_dtype``. (N, OH, OW, Cout)."""
    strides, dil, pads, groups, oh, ow = conv_geometry(x, w, p)
    n, h, wd, c = x.shape
    cout, kh, kw, cin_g = w.shape
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
    strides, dil, pads, groups, oh, ow = conv_geometry(x, w, p)
    n, h, wd, c = x.shape
    cout, kh, kw, cin_g = w.shape
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


# ------------------------------------------------------------------- CPU plan lowering
# Conv steps (runtime/plan.py builds the plan; these say what each conv node becomes). The int8 ops
# (ops/int8.py) and the fused depthwise -> 1x1 pairs (ops/dwpw.py) use the same helpers.
CONV_PIXELS = cpu.CONV_PIXELS                  # output pixels per im2col work item
GEMM_TILE = 8                                  # pixels per GEMM register tile (SG_MR, QG_MR)
BLOCKS_PER_THREAD = 4                          # conv blocks per thread on a map of a few
INT8_RANGE = (-128, 127)


def plan_conv_operands(plan, node, x: np.ndarray, check_output: bool = True) -> tuple:
    """(w, packed w, bias, depthwise, window keywords) of a conv node reading ``x``, checked against its
    output's spec (``check_output``: a fused pair's depthwise half has none; the fused node's shape rule
    checked it); counts its multiply-adds."""
    p, w = node.params, plan.input(node, "weight")
    plan.need(node, x.ndim == 4 and w.ndim == 4 and native_conv(x, w, p), "not a dense or depthwise-1 conv")
    args = conv_kernel_args(p)
    dtype, bias_dtype = (np.int8, np.int32) if node.op == "qconv2d" else (np.float32, np.float32)
    _, w, bias, depthwise = cpu._conv_operands(x, w, plan.optional(node, "bias"), args["groups"], dtype, bias_dtype,
                                               node.id)
    geo = cpu._conv_geometry(x, w, args["strides"], args["dilations"], args["pads"], node.id)
    shape = (x.shape[0], geo[0], geo[1], w.shape[0])  # (N, OH, OW, cout)
    plan.need(node, not check_output or tuple(plan.graph.specs[node.outputs["y"]].shape) == shape, "output shape")
    plan.macs += int(np.prod(shape)) * w.shape[1] * w.shape[2] * (1 if depthwise else x.shape[3])
    packed = plan.packed(node.inputs["weight"], depthwise, lambda: cpu.conv_weights(w, depthwise))
    plan.keep(w, bias, packed)
    return w, packed, bias, depthwise, dict(window=tuple(x.shape) + geo, cout=w.shape[0])


def direct_conv(window: tuple, wshape: tuple) -> bool:
    """Whether a dense conv (window: x shape + cpu._conv_geometry) is 1x1, stride 1, unpadded: its GEMM
    reads the input rows themselves."""
    geo = window[4:]
    return wshape[1] == wshape[2] == 1 and geo[4:6] == (1, 1) and geo[8:] == (0, 0) and geo[:2] == window[1:3]


def plan_blocks(plan, pixels: int, cout: int) -> dict:
    """Work items of a CONV_F32 / QCONV step over ``pixels`` output pixels: ``pixels`` per block and
    ``cparts`` per block. One thread takes the fewest blocks of at most CONV_PIXELS, of equal size
    (each block streams all the weights: a 14x14 map as 4 of 49 pixels, not 3 of 64 and one of 4
    that costs nearly as much). A team takes blocks of CONV_PIXELS on a map of many; on a map of a
    few (a 14x14 map is 3 blocks and 4 pixels), blocks of whole GEMM_TILE-pixel GEMM tiles,
    about BLOCKS_PER_THREAD per thread (each thread's share of a 14x14 map at 2 threads: 96 and 100
    pixels, not 128 and 68); a map of one block splits its output channels instead (plan_cparts).
    Each output sums the same products in the same order whatever its block (a GEMM row's dot
    products), so the plan keeps the per-op bits."""
    per = CONV_PIXELS
    if plan.split > 1 and pixels > CONV_PIXELS:
        tiles = -(-pixels // GEMM_TILE)
        per = min(CONV_PIXELS, GEMM_TILE * -(-tiles // (BLOCKS_PER_THREAD * plan.split)))
    elif pixels > CONV_PIXELS:
        per = -(-pixels // -(-pixels // CONV_PIXELS))
    return dict(pixels=per, cparts=plan_cparts(plan.split, -(-pixels // per), cout))


def plan_bands(plan, n: int, oh: int, band: int, cout: int) -> dict:
    """Work items of a CONV_F32 step by row bands (cpu.conv_band's ``band`` output rows each, over n
    images of oh rows): ``band`` and ``cparts``. A team whose threads' shares of ``band``-row items
    would differ (a 28x28 map: 10 bands of 3 rows, the last of 1, static shares of 15 and 13 rows)
    takes the largest narrower band that gives every thread its equal share of rows (2 rows: 7
    bands each), when the items already outnumber 2 per thread; otherwise output-channel parts
    even them out (plan_cparts)."""
    def rows_of_busiest(b: int) -> int:
        items = n * -(-oh // b)
        sizes = [min(b, oh - i % -(-oh // b) * b) for i in range(items)]  # (items,) output rows
        return max(sum(sizes[t * items // plan.split:(t + 1) * items // plan.split]) for t in range(plan.split))
    if plan.split > 1 and n * -(-oh // band) >= 2 * plan.split:
        fair = -(-n * oh // plan.split)
        band = next((b for b in range(band, 0, -1) if rows_of_busiest(b) == fair), band)
    return dict(band=band, cparts=plan_cparts(plan.split, n * -(-oh // band), cout))


def plan_cparts(split: int, items: int, cout: int, per_thread: int = 2) -> int:
    """Output-channel parts per work item (64-pixel block, row, or row band) of a conv step (a
    one-thread run keeps one): ``per_thread`` items per thread when the unsplit ones are fewer (a 7x7
    map is one pixel block, 7 rows). Depthwise -> 1x1 steps ask for one: each part computes its
    depthwise rows again. Parts are whole 32-channel panels; when those would not fall evenly on the
    threads (6 panels in parts of 2: 4 and 2 per thread), each panel is a part."""
    want = per_thread * split
    if items >= want:
        return 1
    panels = -(-cout // 32)
    parts = min(panels, -(-want // items))
    per = -(-panels // parts)
    even = per * -(-panels // per) == panels and -(-panels // per) * items % split == 0
    return parts if even else panels


def plan_requant(plan, node, cout: int, bias) -> tuple:
    """The step requant tuple (bias, multiplier, shift addresses, zp_in, zp_out, lo, hi) of an int8
    node with ``cout`` output channels (cpu.requant_args checks it)."""
    p = node.params
    mult, sh, zps = cpu.requant_args(
        plan.input(node, "multiplier"), plan.input(node, "shift"), cout, int(p["input_zero_point"]),
        int(p["output_zero_point"]), int(p.get("act_min", INT8_RANGE[0])), int(p.get("act_max", INT8_RANGE[1])))
    plan.keep(mult, sh)
    return (cpu.address(bias), cpu.address(mult), cpu.address(sh)) + zps


def plan_fold_zero_point(plan, window: dict, bias, wsum: np.ndarray, zp_in: int) -> np.ndarray | None:
    """cpu.fold_zero_point into the step's requantization bias; returns the row sums the step still
    needs (None once folded)."""
    folded, wsum = cpu.fold_zero_point(bias, wsum, zp_in)
    if wsum is None:
        plan.keep(folded)
        window["requant"] = (cpu.address(folded),) + window["requant"][1:]
    return wsum


def conv_cpu(plan, node) -> None:
    """conv2d / qconv2d as one step: f32 by row bands (cpu.conv_band: the packed GEMM over a padded
    copy of the band's input rows) or im2col + packed GEMM (or the input rows of a 1x1 conv), or the
    direct depthwise kernel; int8 im2col, requantized as TFLite. A float32 step writes a channel
    slice of a wider tensor (runtime/plan.py), and the depthwise and 1x1 ones read one."""
    int8 = node.op == "qconv2d"
    x, y = plan.input(node, "x", strided=True), plan.output(node, strided=True)
    if not (x.ndim == 4 and native_conv(x, plan.input(node, "weight"), node.params)):
        return plan.island(node)  # grouped convs: their numpy fast path
    w, packed, bias, depthwise, window = plan_conv_operands(plan, node, x)
    cout, kk = w.shape[0], w.shape[1] * w.shape[2] * x.shape[3]
    if int8:
        x, y = plan.input(node, "x"), plan.output(node)  # whole pixels
        window["requant"] = plan_requant(plan, node, cout, bias)
        zps = window["requant"][3:]
        if depthwise:
            plan.add("qdwconv", x=cpu.address(x), w=cpu.address(packed), y=cpu.address(y), **window)
            return
        k4 = (kk + 3) // 4 * 4
        scratch = plan.scratch(CONV_PIXELS * k4, np.uint8)  # (split, CONV_PIXELS * k4) im2col rows
        wsum = plan_fold_zero_point(plan, window, bias, packed[1], zps[0])
        plan.add("qconv", x=cpu.address(x), w=cpu.address(packed[0]), wsum=cpu.address(wsum), y=cpu.address(y),
                 scratch=cpu.address(scratch), ldc=k4, per_thread=CONV_PIXELS * k4,
                 **plan_blocks(plan, y.size // cout, cout), **window)
        return
    if depthwise:
        y = plan.output(node)  # whole output rows
        plan.add("dwconv_f32", x=cpu.address(x), w=cpu.address(packed), bias=cpu.address(bias), y=cpu.address(y),
                 act=plan_activation(plan, node), ldx=plan.pixel_stride(x), **window)
        return
    direct = direct_conv(window["window"], w.shape)
    if not direct:
        x = plan.input(node, "x")  # bands and im2col copy whole pixels
    geo = window["window"][4:]
    band = 0 if direct else cpu.conv_band(geo)
    if band:
        items = plan_bands(plan, x.shape[0], geo[0], band, cout)
        per = cpu.conv_band_floats(x.shape, geo, items["band"])
    else:
        per = 0 if direct else CONV_PIXELS * kk
        items = plan_blocks(plan, y.size // cout, cout)
    scratch = plan.scratch(per, np.float32)  # (split, per): a band's padded input rows, or im2col rows
    plan.add("conv_f32", x=cpu.address(x), w=cpu.address(packed), bias=cpu.address(bias), y=cpu.address(y),
             scratch=cpu.address(scratch), ldc=0 if direct else kk, per_thread=per, act=plan_activation(plan, node),
             ldx=plan.pixel_stride(x), ldy=plan.pixel_stride(y), **items, **window)


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
                          act=FN[c.params.get("activation", "none")]))]


# ------------------------------------------------------------------ backward (training)
# conv2d's gradients are three grad ops, each reading only what it needs: conv2d_grad_input (dy and the
# weight), conv2d_grad_weight (the forward input and dy), conv2d_grad_bias (dy); a fused ReLU / ReLU6 is
# first undone by fused_activation_grad on the conv's output. The grad ops carry the forward node's
# params; conv2d_grad_input adds "input_size" [H, W] (strides make it ambiguous from dy's shape) and
# conv2d_grad_weight "kernel" [kh, kw].
GRAD_ACTIVATIONS = ("relu", "relu6")


def _act_grad_infer(specs, params):
    dy, y = specs["dy"], specs["y"]
    expect(dy.dtype == y.dtype == "float32" and len(dy.shape) == len(y.shape)
           and all(same_dim(a, b) for a, b in zip(dy.shape, y.shape)),
           f"dy and y must be float32 of one shape: {dy.describe()}, {y.describe()}")
    expect(params.get("activation") in GRAD_ACTIVATIONS, f"activation must be one of {GRAD_ACTIVATIONS}")
    return {"dx": (dy.shape, "float32")}


def fused_activation_grad_ref(ctx, p, dy, y):
    """dL/d(pre-activation) from dL/dy and the activated output y: dy where y > 0 (ReLU) or 0 < y < 6
    (ReLU6; torch's rule: a clamped value passes no gradient)."""
    keep = (y > 0) if p["activation"] == "relu" else ((y > 0) & (y < 6))
    return np.where(keep, dy, np.float32(0)).astype(np.float32)


def _grad_input_infer(specs, params):
    dy, w = specs["dy"], specs["weight"]
    expect(dy.dtype == w.dtype == "float32" and len(dy.shape) == 4 and len(w.shape) == 4,
           f"dy and weight must be float32 NHWC / OHWI: {dy.describe()}, {w.describe()}")
    h, wd = (int(v) for v in params["input_size"])
    groups = int(params.get("groups", 1))
    x_shape = (dy.shape[0], h, wd, w.shape[3] * groups)
    y_shape = conv_infer_shape(TensorSpec("x", x_shape, "float32"), w, params)
    expect(all(same_dim(a, b) for a, b in zip(y_shape, dy.shape)),
           f"dy {dy.describe()} is not the output of a conv of {x_shape} by {w.describe()}")
    return {"dx": (x_shape, "float32")}


def _grad_weight_infer(specs, params):
    x, dy = specs["x"], specs["dy"]
    expect(x.dtype == dy.dtype == "float32" and len(x.shape) == 4 and len(dy.shape) == 4,
           f"x and dy must be float32 NHWC: {x.describe()}, {dy.describe()}")
    kh, kw = (int(v) for v in params["kernel"])
    groups = int(params.get("groups", 1))
    expect(isinstance(x.shape[3], int) and x.shape[3] % groups == 0, f"x {x.describe()} with groups={groups}")
    w_shape = (dy.shape[3], kh, kw, x.shape[3] // groups)
    y_shape = conv_infer_shape(x, TensorSpec("weight", w_shape, "float32"), params)
    expect(all(same_dim(a, b) for a, b in zip(y_shape, dy.shape)),
           f"dy {dy.describe()} is not the output of a conv of {x.describe()} by {w_shape}")
    return {"dweight": (w_shape, "float32")}


def _grad_bias_infer(specs, params):
    dy = specs["dy"]
    expect(dy.dtype == "float32" and len(dy.shape) == 4, f"dy must be float32 NHWC, got {dy.describe()}")
    return {"dbias": ((dy.shape[3],), "float32")}


def grad_geometry(p: dict, x_shape: tuple, w_shape: tuple) -> tuple:
    """conv_geometry from shapes alone: (strides, dilations, pads, groups, OH, OW)."""
    return conv_geometry(np.empty(x_shape, np.uint8), np.empty(w_shape, np.uint8), p)


def padded_zeros(x_shape: tuple, pads, dtype) -> np.ndarray:
    """A zero (N, H + top + bottom, W + left + right, C) buffer for scatter-adding taps into."""
    n, h, w, c = x_shape
    return np.zeros((n, h + pads[0] + pads[2], w + pads[1] + pads[3], c), dtype)


def crop_pads(xp: np.ndarray, pads) -> np.ndarray:
    """The in-image (N, H, W, C) part of a padded buffer."""
    pt, pl, pb, pr = pads
    return np.ascontiguousarray(xp[:, pt: xp.shape[1] - pb, pl: xp.shape[2] - pr, :])


def conv2d_grad_input_ref(ctx, p, dy, weight):
    """dL/dx of a conv: each tap's per-group dy @ W added back where the tap read, float64. (N, H, W, C)."""
    cout, kh, kw, cin_g = weight.shape
    groups = int(p.get("groups", 1))
    n, oh, ow, _ = dy.shape
    x_shape = (n, int(p["input_size"][0]), int(p["input_size"][1]), cin_g * groups)
    strides, dil, pads, groups, oh, ow = grad_geometry(p, x_shape, weight.shape)
    wg = weight.astype(np.float64).reshape(groups, cout // groups, kh, kw, cin_g)  # (g, cout/g, kh, kw, cin/g)
    dyg = dy.astype(np.float64).reshape(n, oh, ow, groups, cout // groups)     # (N, OH, OW, g, cout/g)
    dxp = padded_zeros(x_shape, pads, np.float64)                               # (N, Hp, Wp, C)
    for i in range(kh):
        for j in range(kw):
            part = np.einsum("nhwgo,goc->nhwgc", dyg, wg[:, :, i, j, :]).reshape(n, oh, ow, groups * cin_g)
            tap(dxp, i, j, oh, ow, strides, dil)[...] += part
    return crop_pads(dxp, pads).astype(np.float32)


def conv2d_grad_weight_ref(ctx, p, x, dy):
    """dL/dW of a conv: per tap and group, the sum over pixels of dy x tap, float64. (cout, kh, kw, C/g)."""
    kh, kw = (int(v) for v in p["kernel"])
    groups = int(p.get("groups", 1))
    n, _, _, c = x.shape
    cout, cin_g = dy.shape[3], c // groups
    strides, dil, pads, groups, oh, ow = grad_geometry(p, x.shape, (cout, kh, kw, cin_g))
    xp = pad_nhwc(x.astype(np.float64), pads)
    dyg = dy.astype(np.float64).reshape(n, oh, ow, groups, cout // groups)  # (N, OH, OW, g, cout/g)
    dw = np.empty((groups, cout // groups, kh, kw, cin_g))                  # (g, cout/g, kh, kw, cin/g)
    for i in range(kh):
        for j in range(kw):
            t = tap(xp, i, j, oh, ow, strides, dil).reshape(n, oh, ow, groups, cin_g)
            dw[:, :, i, j, :] = np.einsum("nhwgo,nhwgc->goc", dyg, t)
    return dw.reshape(cout, kh, kw, cin_g).astype(np.float32)


def conv2d_grad_bias_ref(ctx, p, dy):
    """dL/db of a conv: dy summed over N, OH, OW in float64. (cout,)."""
    return dy.sum(axis=(0, 1, 2), dtype=np.float64).astype(np.float32)


def conv2d_grad_input_fast(ctx, p, dy, weight):
    """dL/dx in float32: dy @ W (one BLAS matmul per group), then col2im (each tap's columns added where it
    read); depthwise convs: volvox's kernel (multiplier 1) or a tap loop."""
    cout, kh, kw, cin_g = weight.shape
    groups = int(p.get("groups", 1))
    n, oh, ow, _ = dy.shape
    x_shape = (n, int(p["input_size"][0]), int(p["input_size"][1]), cin_g * groups)
    strides, dil, pads, groups, oh, ow = grad_geometry(p, x_shape, weight.shape)
    c = x_shape[3]
    dy = np.ascontiguousarray(dy, np.float32)
    weight = np.ascontiguousarray(weight, np.float32)
    if groups == 1 and kh == kw == 1 and strides == (1, 1) and not any(pads):
        return (dy.reshape(-1, cout) @ weight.reshape(cout, c)).reshape(x_shape)
    if cin_g == 1 and groups == c == cout:
        return cpu.depthwise_conv2d_grad_input(dy, weight, x_shape[1:3], strides, dil, pads)
    dxp = padded_zeros(x_shape, pads, np.float32)  # (N, Hp, Wp, C)
    if cin_g == 1 and groups == c:
        mult = cout // c
        dym = dy.reshape(n, oh, ow, c, mult)       # (N, OH, OW, C, mult)
        wm = weight.reshape(c, mult, kh, kw)       # (C, mult, kh, kw)
        for i in range(kh):
            for j in range(kw):
                part = dym[..., 0] * wm[:, 0, i, j] if mult == 1 else (dym * wm[:, :, i, j]).sum(axis=4)
                tap(dxp, i, j, oh, ow, strides, dil)[...] += part
        return crop_pads(dxp, pads)
    # (N*OH*OW, g, kh, kw, cin/g) columns: each pixel's gradient at every input value its window read
    wg = weight.reshape(groups, cout // groups, kh * kw * cin_g)  # (g, cout/g, kh*kw*cin/g)
    dyg = dy.reshape(-1, groups, cout // groups)                 # (N*OH*OW, g, cout/g)
    cols = np.empty((dyg.shape[0], kh, kw, groups, cin_g), np.float32)
    for g in range(groups):
        cols[:, :, :, g, :] = (dyg[:, g, :] @ wg[g]).reshape(-1, kh, kw, cin_g)
    cols = cols.reshape(n, oh, ow, kh, kw, c)
    for i in range(kh):
        for j in range(kw):
            tap(dxp, i, j, oh, ow, strides, dil)[...] += cols[:, :, :, i, j, :]
    return crop_pads(dxp, pads)


def conv2d_grad_weight_fast(ctx, p, x, dy):
    """dL/dW in float32: im2col of x, then dyᵀ @ columns (one BLAS matmul per group); depthwise convs:
    volvox's kernel (multiplier 1) or a tap loop of multiply-sums."""
    kh, kw = (int(v) for v in p["kernel"])
    groups = int(p.get("groups", 1))
    n, _, _, c = x.shape
    cout, cin_g = dy.shape[3], c // groups
    strides, dil, pads, groups, oh, ow = grad_geometry(p, x.shape, (cout, kh, kw, cin_g))
    x = np.asarray(x, np.float32)
    dy = np.ascontiguousarray(dy, np.float32)
    if groups == 1 and kh == kw == 1 and strides == (1, 1) and not any(pads):
        return (dy.reshape(-1, cout).T @ x.reshape(-1, c)).reshape(cout, 1, 1, c)
    if cin_g == 1 and groups == c == cout:
        return cpu.depthwise_conv2d_grad_weight(x, dy, (kh, kw), strides, dil, pads)
    xp = pad_nhwc(x, pads)
    if cin_g == 1 and groups == c:
        mult = cout // c
        dym = dy.reshape(-1, c, mult)                # (N*OH*OW, C, mult)
        dw = np.empty((c, mult, kh, kw), np.float32)  # (C, mult, kh, kw)
        for i in range(kh):
            for j in range(kw):
                t = tap(xp, i, j, oh, ow, strides, dil).reshape(-1, c)  # (N*OH*OW, C)
                dw[:, :, i, j] = np.einsum("pc,pcm->cm", t, dym)
        return dw.reshape(cout, kh, kw, 1)
    cols = np.empty((n, oh, ow, kh, kw, c), np.float32)  # im2col: (N, OH, OW, kh, kw, C)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, :, i, j, :] = tap(xp, i, j, oh, ow, strides, dil)
    cols = cols.reshape(-1, kh * kw, groups, cin_g)           # (N*OH*OW, kh*kw, g, cin/g)
    dyg = dy.reshape(-1, groups, cout // groups)              # (N*OH*OW, g, cout/g)
    dw = np.empty((groups, cout // groups, kh * kw, cin_g), np.float32)
    for g in range(groups):
        dw[g] = (dyg[:, g, :].T @ cols[:, :, g, :].reshape(-1, kh * kw * cin_g)).reshape(-1, kh * kw, cin_g)
    return dw.reshape(cout, kh, kw, cin_g)


register(OpDef("fused_activation_grad", "conv", ("dy", "y"), ("dx",), _act_grad_infer, fused_activation_grad_ref))
register(OpDef("conv2d_grad_input", "conv", ("dy", "weight"), ("dx",), _grad_input_infer, conv2d_grad_input_ref,
               conv2d_grad_input_fast))
register(OpDef("conv2d_grad_weight", "conv", ("x", "dy"), ("dweight",), _grad_weight_infer, conv2d_grad_weight_ref,
               conv2d_grad_weight_fast))
register(OpDef("conv2d_grad_bias", "conv", ("dy",), ("dbias",), _grad_bias_infer, conv2d_grad_bias_ref))


def conv_gradients(g, inputs: dict[str, str], y: str, params: dict, dy: str, wanted: set[str]) -> dict[str, str]:
    """Emit the grad ops of one conv2d application (``inputs``: port -> tensor, ``y``: its output, read
    only to undo a fused activation) for the ``wanted`` input ports; returns port -> gradient tensor."""
    act = params.get("activation", "none")
    if act != "none":
        (dy,) = g.emit("fused_activation_grad", {"dy": dy, "y": y}, {"activation": act}, ("dx",))
    geometry = {k: params[k] for k in ("strides", "dilations", "pads", "groups") if k in params}
    x_shape, w_shape = g.shape(inputs["x"]), g.shape(inputs["weight"])
    grads = {}
    if "x" in wanted:
        size = list(x_shape[1:3])
        if not all(isinstance(d, int) for d in size):
            raise UnsupportedError(f"conv2d backward: the input's spatial size {size} must be static")
        (grads["x"],) = g.emit("conv2d_grad_input", {"dy": dy, "weight": inputs["weight"]},
                               dict(geometry, input_size=size), ("dx",))
    if "weight" in wanted:
        (grads["weight"],) = g.emit("conv2d_grad_weight", {"x": inputs["x"], "dy": dy},
                                    dict(geometry, kernel=list(w_shape[1:3])), ("dweight",))
    if "bias" in wanted:
        (grads["bias"],) = g.emit("conv2d_grad_bias", {"dy": dy}, {}, ("dbias",))
    return grads


def conv2d_backward(g, node) -> None:
    """conv2d's backward: dx, dweight and dbias for the ports that need one."""
    dy = g.grad(node, "y")
    if dy is None:
        return
    wanted = {port for port in node.inputs if g.needs(node, port)}
    for port, grad in conv_gradients(g, node.inputs, node.outputs["y"], node.params, dy, wanted).items():
        g.accumulate(node, port, grad)


register(OpDef("conv2d", "conv", ("x", "weight", "bias?"), ("y",), _conv_infer, conv2d_ref, conv2d_fast, cpu=conv_cpu,
               into=conv2d_into, backward=conv2d_backward,
               gpu=Lowering(("conv2d",), _lower_conv, float_only("x", "weight"))))
