"""Convolutions and pools the NHWC kernels do not cover, in ONNX's NCHW layout with numpy: the transposed
(fractionally strided) convolution, the exact integer convolution of zero-point-shifted
int8 / uint8 tensors (ConvInteger; QLinearConv requantizes its int32 result), convolution over any
number of spatial axes in any float dtype (conv_nd), the deformable convolution, Col2Im, RoiAlign,
and max / average / Lp
pooling over any number of spatial axes with dilations, ceil_mode and MaxPool's indices.

Both loop over the kernel taps, each tap one batched product: float64 sums for the transposed
convolution, int64 (exact) for the integer one. They run as numpy islands in a plan.
"""

from __future__ import annotations

import numpy as np

from volvox.ir.graph import expect
from volvox.ops.registry import OpDef, register


def _window(params: dict) -> tuple:
    """(strides, dilations, [top, left, bottom, right] pads, groups) of a 2-D window op."""
    return (tuple(int(s) for s in params.get("strides", (1, 1))), tuple(int(d) for d in params.get("dilations", (1, 1))),
            tuple(int(p) for p in params.get("pads", (0, 0, 0, 0))), int(params.get("groups", 1)))


def conv_transpose_dims(spatial: tuple, kernel: tuple, params: dict) -> tuple:
    """Output spatial dims of a transposed convolution: stride * (in - 1) + output_padding + dilated
    kernel - pads (any number of spatial axes)."""
    rank = len(spatial)
    strides = params.get("strides", (1,) * rank)
    dilations = params.get("dilations", (1,) * rank)
    pads = params.get("pads", (0,) * 2 * rank)
    extra = params.get("output_padding", (0,) * rank)
    return tuple(int(strides[i]) * (spatial[i] - 1) + int(extra[i]) + (kernel[i] - 1) * int(dilations[i]) + 1
                 - int(pads[i]) - int(pads[i + rank]) for i in range(rank))


def _conv_transpose_infer(specs, params):
    x, w = specs["x"], specs["weight"]
    groups = int(params.get("groups", 1))
    expect(len(x.shape) == len(w.shape) >= 3 and x.dtype == w.dtype and x.dtype in ("float32", "float16", "float64"),
           f"conv_transpose needs (N, C, *spatial) x and (Cin, Cout / groups, *kernel) weight of one float dtype: "
           f"{x.describe()}, {w.describe()}")
    expect(all(isinstance(d, int) for d in x.shape[1:]) and x.shape[1] == w.shape[0] and w.shape[0] % groups == 0,
           f"conv_transpose: {x.describe()} does not fit weight {w.describe()} in {groups} groups")
    dims = conv_transpose_dims(x.shape[2:], w.shape[2:], params)
    expect(min(dims) > 0, f"conv_transpose of {x.describe()} gives an empty output {dims}")
    if "bias" in specs:
        expect(specs["bias"].shape == (w.shape[1] * groups,), f"bias must have {w.shape[1] * groups} values")
    return {"y": ((x.shape[0], w.shape[1] * groups) + dims, x.dtype)}


def conv_transpose_ref(ctx, p, x, weight, bias=None):
    """Transposed convolution, NC...: every input point scatters its kernel-weighted values into the
    output (float64 sums), then ``pads`` crop it. Weight (Cin, Cout / groups, *kernel)."""
    spatial, kernel = x.shape[2:], weight.shape[2:]
    rank = len(spatial)
    strides = [int(v) for v in p.get("strides", (1,) * rank)]
    dilations = [int(v) for v in p.get("dilations", (1,) * rank)]
    pads = [int(v) for v in p.get("pads", (0,) * 2 * rank)]
    extra = [int(e) for e in p.get("output_padding", (0,) * rank)]
    groups = int(p.get("groups", 1))
    n, cin = x.shape[:2]
    cout_g = weight.shape[1]
    full = tuple(strides[d] * (spatial[d] - 1) + (kernel[d] - 1) * dilations[d] + 1 + extra[d] for d in range(rank))
    out = np.zeros((n, groups, cout_g) + full)                                          # (N, G, Cout/G, *full)
    xg = x.astype(np.float64).reshape((n, groups, cin // groups) + spatial)             # (N, G, Cin/G, *spatial)
    wg = weight.astype(np.float64).reshape((groups, cin // groups, cout_g) + kernel)    # (G, Cin/G, Cout/G, *kernel)
    for tap in np.ndindex(*kernel):
        window = tuple(slice(t * dil, t * dil + s * (size - 1) + 1, s)
                       for t, dil, s, size in zip(tap, dilations, strides, spatial))
        out[(slice(None),) * 3 + window] += np.einsum("ngc...,gco->ngo...", xg, wg[(slice(None),) * 3 + tap])
    crop = tuple(slice(pads[d], full[d] - pads[rank + d]) for d in range(rank))
    out = out.reshape((n, groups * cout_g) + full)[(slice(None), slice(None)) + crop]
    if bias is not None:
        out = out + bias.reshape((1, -1) + (1,) * rank)
    return np.ascontiguousarray(out.astype(x.dtype))


def _conv_integer_infer(specs, params):
    x, w = specs["x"], specs["weight"]
    strides, dilations, pads, groups = _window(params)
    expect(len(x.shape) == 4 and len(w.shape) == 4 and x.dtype in ("int8", "uint8") and w.dtype in ("int8", "uint8"),
           f"conv_integer needs NCHW int8 / uint8 x and weight: {x.describe()}, {w.describe()}")
    expect(all(isinstance(d, int) for d in x.shape[1:]) and x.shape[1] == w.shape[1] * groups and w.shape[0] % groups == 0,
           f"conv_integer: {x.describe()} does not fit weight {w.describe()} in {groups} groups")
    hw = tuple((d + pads[i] + pads[i + 2] - (k - 1) * dil - 1) // s + 1
               for i, (d, k, s, dil) in enumerate(zip(x.shape[2:], w.shape[2:], strides, dilations)))
    expect(min(hw) > 0, f"conv_integer of {x.describe()} by {w.describe()} gives an empty output")
    return {"y": ((x.shape[0], w.shape[0]) + hw, "int32")}


def conv_integer_ref(ctx, p, x, weight, x_zero_point=None, w_zero_point=None):
    """sum (x - x_zero_point) * (w - w_zero_point) over each window, exactly (int64), as int32; the
    zero point of w per output channel or per tensor; padding adds shifted zeros."""
    strides, dilations, pads, groups = _window(p)
    xs = x.astype(np.int64) - (0 if x_zero_point is None else np.int64(np.asarray(x_zero_point).reshape(-1)[0]))
    ws = weight.astype(np.int64)
    if w_zero_point is not None:
        ws = ws - np.asarray(w_zero_point, np.int64).reshape(-1, 1, 1, 1)
    xs = np.pad(xs, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    n, cin, h, w = xs.shape
    cout, cin_g, kh, kw = ws.shape
    (sh, sw), (dh, dw) = strides, dilations
    oh, ow = (h - (kh - 1) * dh - 1) // sh + 1, (w - (kw - 1) * dw - 1) // sw + 1
    xg = xs.reshape(n, groups, cin_g, h, w)                        # (N, G, Cin/G, H, W)
    wg = ws.reshape(groups, cout // groups, cin_g, kh, kw)         # (G, Cout/G, Cin/G, kh, kw)
    acc = np.zeros((n, groups, cout // groups, oh, ow), np.int64)  # (N, G, Cout/G, OH, OW)
    for i in range(kh):
        for j in range(kw):
            tap = xg[:, :, :, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]
            acc += np.einsum("ngchw,goc->ngohw", tap, wg[:, :, :, i, j])
    return acc.reshape(n, cout, oh, ow).astype(np.int32)


def _conv_nd_dims(spatial: tuple, kernel: tuple, params: dict) -> tuple:
    rank = len(kernel)
    strides, dilations, pads = params["strides"], params["dilations"], params["pads"]
    return tuple((spatial[d] + pads[d] + pads[rank + d] - dilations[d] * (kernel[d] - 1) - 1) // strides[d] + 1
                 for d in range(rank))


def _conv_nd_infer(specs, params):
    x, w = specs["x"], specs["weight"]
    groups = int(params.get("groups", 1))
    expect(len(x.shape) == len(w.shape) >= 3 and x.dtype == w.dtype and x.dtype in ("float32", "float16", "float64"),
           f"conv_nd needs (N, C, *spatial) x and (Cout, C / groups, *kernel) weight of one float dtype: "
           f"{x.describe()}, {w.describe()}")
    expect(all(isinstance(d, int) for d in x.shape[1:] + w.shape) and x.shape[1] == w.shape[1] * groups
           and w.shape[0] % groups == 0, f"conv_nd: {x.describe()} does not fit weight {w.describe()} in {groups} groups")
    dims = _conv_nd_dims(x.shape[2:], w.shape[2:], params)
    expect(min(dims) > 0, f"conv_nd of {x.describe()} by {w.describe()} gives an empty output {dims}")
    return {"y": ((x.shape[0], w.shape[0]) + dims, x.dtype)}


def conv_nd_ref(ctx, p, x, weight, bias=None):
    """Convolution over any number of spatial axes, NC...: ``strides``, ``dilations``, ``pads`` (all
    begins, then all ends), ``groups``; one batched product per kernel tap, summed in float64."""
    rank = x.ndim - 2
    kernel = weight.shape[2:]
    strides, dilations, pads, groups = p["strides"], p["dilations"], p["pads"], int(p.get("groups", 1))
    out_dims = _conv_nd_dims(x.shape[2:], kernel, p)
    padded = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(pads[d], pads[rank + d]) for d in range(rank)])
    n, cin = x.shape[:2]
    cout = weight.shape[0]
    xg = padded.reshape((n, groups, cin // groups) + padded.shape[2:])                      # (N, G, C/G, *padded)
    wg = weight.astype(np.float64).reshape((groups, cout // groups, cin // groups) + kernel)  # (G, Cout/G, C/G, *kernel)
    acc = np.zeros((n, groups, cout // groups) + out_dims)                                   # (N, G, Cout/G, *out)
    for tap in np.ndindex(*kernel):
        window = tuple(slice(t * dil, t * dil + s * (o - 1) + 1, s)
                       for t, dil, s, o in zip(tap, dilations, strides, out_dims))
        acc += np.einsum("ngc...,goc->ngo...", xg[(slice(None),) * 3 + window], wg[(slice(None),) * 3 + tap])
    y = acc.reshape((n, cout) + out_dims)
    if bias is not None:
        y = y + bias.astype(np.float64).reshape((1, cout) + (1,) * rank)
    return y.astype(x.dtype)


def _deform_conv_infer(specs, params):
    x, w, offset = specs["x"], specs["weight"], specs["offset"]
    groups, offset_groups = int(params.get("groups", 1)), int(params.get("offset_groups", 1))
    kernel = tuple(w.shape[2:])
    expect(len(x.shape) == 4 and len(w.shape) == 4 and len(offset.shape) == 4 and x.dtype in ("float32", "float16", "float64")
           and x.shape[1] == w.shape[1] * groups and x.shape[1] % offset_groups == 0
           and offset.shape[1] == offset_groups * 2 * int(np.prod(kernel)),
           f"deform_conv: {x.describe()}, weight {w.describe()}, offset {offset.describe()} in {groups} groups and "
           f"{offset_groups} offset groups")
    return {"y": ((x.shape[0], w.shape[0]) + tuple(offset.shape[2:]), x.dtype)}


def deform_conv_ref(ctx, p, x, weight, offset, bias=None, mask=None):
    """ONNX DeformConv (2-D): each kernel tap reads x at its regular position plus its learned offset
    (per offset group and output point), bilinearly (zeros outside), scaled by ``mask`` when given,
    then the grouped convolution sums; float64."""
    n, channels, height, width = x.shape
    kh, kw = weight.shape[2:]
    out_h, out_w = offset.shape[2:]
    (sh, sw), (dh, dw), pads = p["strides"], p["dilations"], p["pads"]
    groups, offset_groups = int(p.get("groups", 1)), int(p.get("offset_groups", 1))
    shifts = offset.astype(np.float64).reshape(n, offset_groups, kh, kw, 2, out_h, out_w)
    rows = (np.arange(out_h) * sh - pads[0])[None, :] + (np.arange(kh) * dh)[:, None]     # (kh, OH)
    cols = (np.arange(out_w) * sw - pads[1])[None, :] + (np.arange(kw) * dw)[:, None]     # (kw, OW)
    ys = rows[None, None, :, None, :, None] + shifts[:, :, :, :, 0]                        # (N, OG, kh, kw, OH, OW)
    xs = cols[None, None, None, :, None, :] + shifts[:, :, :, :, 1]
    grouped = x.astype(np.float64).reshape(n, offset_groups, channels // offset_groups, height, width)
    batch = np.arange(n).reshape(n, 1, 1, 1, 1, 1)
    group = np.arange(offset_groups).reshape(1, offset_groups, 1, 1, 1, 1)
    y0, x0 = np.floor(ys), np.floor(xs)
    sampled = 0.0
    for yy, wy in ((y0, 1 - (ys - y0)), (y0 + 1, ys - y0)):
        for xx, wx in ((x0, 1 - (xs - x0)), (x0 + 1, xs - x0)):
            inside = (yy >= 0) & (yy < height) & (xx >= 0) & (xx < width)
            iy, ix = np.clip(yy, 0, height - 1).astype(np.int64), np.clip(xx, 0, width - 1).astype(np.int64)
            values = grouped[batch, group, :, iy, ix]                        # (N, OG, kh, kw, OH, OW, C / OG)
            sampled = sampled + (wy * wx * inside)[..., None] * values
    if mask is not None:
        sampled = sampled * mask.astype(np.float64).reshape(n, offset_groups, kh, kw, out_h, out_w)[..., None]
    columns = np.moveaxis(sampled, -1, 2).reshape(n, groups, channels // groups, kh, kw, out_h, out_w)
    wg = weight.astype(np.float64).reshape(groups, weight.shape[0] // groups, channels // groups, kh, kw)
    y = np.einsum("ngcabhw,gocab->ngohw", columns, wg).reshape(n, weight.shape[0], out_h, out_w)
    if bias is not None:
        y = y + bias.astype(np.float64).reshape(1, -1, 1, 1)
    return y.astype(x.dtype)


def _col2im_blocks(params: dict) -> tuple:
    image, kernel = params["image"], params["kernel"]
    rank = len(kernel)
    strides, dilations, pads = params["strides"], params["dilations"], params["pads"]
    return tuple((image[d] + pads[d] + pads[rank + d] - dilations[d] * (kernel[d] - 1) - 1) // strides[d] + 1
                 for d in range(rank))


def _col2im_infer(specs, params):
    x = specs["x"]
    taps = int(np.prod(params["kernel"]))
    expect(len(x.shape) == 3 and all(isinstance(d, int) for d in x.shape) and x.shape[1] % taps == 0
           and x.shape[2] == int(np.prod(_col2im_blocks(params))),
           f"col2im: {x.describe()} is not (N, C * {taps} taps, {int(np.prod(_col2im_blocks(params)))} blocks)")
    return {"y": ((x.shape[0], x.shape[1] // taps) + tuple(int(d) for d in params["image"]), x.dtype)}


def col2im_ref(ctx, p, x):
    """ONNX Col2Im: each column of (N, C * prod(kernel), blocks) summed back into its window of the
    (N, C, *image) image (windows by ``strides``, ``dilations``, ``pads``), overlaps added."""
    kernel, image = tuple(p["kernel"]), tuple(p["image"])
    rank = len(kernel)
    strides, dilations, pads = p["strides"], p["dilations"], p["pads"]
    blocks = _col2im_blocks(p)
    n, channels = x.shape[0], x.shape[1] // int(np.prod(kernel))
    columns = x.reshape((n, channels) + kernel + blocks)                                   # (N, C, *kernel, *blocks)
    padded = np.zeros((n, channels) + tuple(image[d] + pads[d] + pads[rank + d] for d in range(rank)), x.dtype)
    for tap in np.ndindex(*kernel):
        window = tuple(slice(t * dil, t * dil + s * (b - 1) + 1, s) for t, dil, s, b in zip(tap, dilations, strides, blocks))
        padded[(slice(None), slice(None)) + window] += columns[(slice(None), slice(None)) + tap]
    return np.ascontiguousarray(padded[(slice(None), slice(None)) + tuple(slice(pads[d], pads[d] + image[d])
                                                                            for d in range(rank))])


def pool_nd_dims(spatial: tuple, params: dict) -> tuple:
    """Output spatial dims of pool_nd: (in + pads - dilated kernel) / stride + 1, floored, or with
    ``ceil_mode`` ceiled unless the last window would start inside the end padding (PyTorch's and
    onnxruntime's rule)."""
    rank = len(spatial)
    kernel, strides, dilations, pads = (params["kernel"], params["strides"], params["dilations"], params["pads"])
    out = []
    for d in range(rank):
        span = spatial[d] + pads[d] + pads[rank + d] - dilations[d] * (kernel[d] - 1) - 1
        size = (-(-span // strides[d]) if params.get("ceil_mode", 0) else span // strides[d]) + 1
        if params.get("ceil_mode", 0) and (size - 1) * strides[d] >= spatial[d] + pads[d]:
            size -= 1
        out.append(size)
    return tuple(out)


def _pool_nd_infer(specs, params):
    x = specs["x"]
    rank = len(params["kernel"])
    expect(len(x.shape) == rank + 2 and all(isinstance(d, int) for d in x.shape[2:]),
           f"pool_nd over {rank} spatial axes needs a static (N, C, {rank} dims) x, got {x.describe()}")
    expect(x.dtype in ("float32", "float16", "float64") or params["mode"] == "max" and x.dtype in ("int8", "uint8"),
           f"pool_nd {params['mode']} of {x.describe()}")
    dims = pool_nd_dims(x.shape[2:], params)
    expect(min(dims) > 0, f"pool_nd of {x.describe()} gives an empty output {dims}")
    out = tuple(x.shape[:2]) + dims
    expect(not params.get("with_indices", 0) or params["mode"] == "max", "only max pooling gives indices")
    return {"y": (out, x.dtype), "indices": (out, "int64")}


def _pool_taps(x: np.ndarray, params: dict, out_dims: tuple):
    """(values, inside, in_pads, flat index) per kernel tap, each (taps, N, C, *out): the input value
    under the tap (0 outside), whether it lies on the input, whether it lies within the explicit pads,
    and its row-major offset in one (N, C) image."""
    rank = len(out_dims)
    kernel, strides, dilations, pads = params["kernel"], params["strides"], params["dilations"], params["pads"]
    spatial = x.shape[2:]
    offsets = [np.arange(k) * dil for k, dil in zip(kernel, dilations)]
    values, inside, in_pads, flat = [], [], [], []
    for tap in np.ndindex(*kernel):
        coords = [np.arange(out_dims[d]) * strides[d] - pads[d] + offsets[d][tap[d]] for d in range(rank)]
        grids = np.meshgrid(*coords, indexing="ij")                                  # rank x (*out)
        on_input = np.logical_and.reduce([(g >= 0) & (g < spatial[d]) for d, g in enumerate(grids)])
        padded = np.logical_and.reduce([(g >= -pads[d]) & (g < spatial[d] + pads[rank + d]) for d, g in enumerate(grids)])
        clipped = [np.clip(g, 0, spatial[d] - 1) for d, g in enumerate(grids)]
        values.append(x[(slice(None), slice(None), *clipped)])                      # (N, C, *out)
        inside.append(on_input)
        in_pads.append(padded)
        flat.append(np.ravel_multi_index(clipped, spatial))
    return np.stack(values), np.stack(inside), np.stack(in_pads), np.stack(flat)


def pool_nd_ref(ctx, p, x):
    """Max / average / Lp pooling of NCHW... x over every spatial axis: ``kernel``, ``strides``,
    ``dilations``, ``pads`` (all begins, then all ends), ``ceil_mode``; average divides by the taps on
    the input, or (``count_include_pad``) by those within the explicit pads; Lp is (sum |x|^p)^(1/p).
    Max with ``with_indices`` also gives each maximum's flat index in its (N, C) image offset by the
    image's start (``storage_order`` 1: column-major), the first of equal maxima, as onnxruntime."""
    out_dims = pool_nd_dims(x.shape[2:], p)
    values, inside, in_pads, flat = _pool_taps(x, p, out_dims)            # (taps, N, C, *out) / (taps, *out)
    inside_b = np.broadcast_to(inside[:, None, None], values.shape)
    mode = p["mode"]
    if mode == "max":
        low = np.finfo(np.float64).min if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        wide = np.where(inside_b, values.astype(np.float64), -np.inf if x.dtype.kind == "f" else low)
        wide = np.where(np.isnan(wide), -np.inf, wide) if x.dtype.kind == "f" else wide
        best = np.argmax(wide, axis=0)                                          # (N, C, *out)
        y = np.take_along_axis(values, best[None], axis=0)[0]
        tap_flat = np.broadcast_to(flat[:, None, None], values.shape)
        index = np.take_along_axis(tap_flat, best[None], axis=0)[0]
        if p.get("storage_order", 0):
            coords = np.unravel_index(index, x.shape[2:])
            index = np.ravel_multi_index(coords[::-1], x.shape[2:][::-1])
        image = np.arange(x.shape[0] * x.shape[1]).reshape(x.shape[:2] + (1,) * len(out_dims))
        if not p.get("with_indices", 0):
            return y.astype(x.dtype)
        return y.astype(x.dtype), (index + image * int(np.prod(x.shape[2:]))).astype(np.int64)
    wide = np.where(inside_b, values.astype(np.float64), 0.0)
    if mode == "lp":
        power = float(p.get("p", 2))
        y = np.sum(np.abs(wide) ** power, axis=0) ** (1.0 / power)
    else:
        count = (in_pads if p.get("count_include_pad", 0) else inside).sum(axis=0)   # (*out)
        y = wide.sum(axis=0) / count
    return y.astype(x.dtype)


def _roi_align_infer(specs, params):
    x, rois, batch = specs["x"], specs["rois"], specs["batch_indices"]
    expect(len(x.shape) == 4 and x.dtype in ("float32", "float16", "float64") and len(rois.shape) == 2
           and rois.shape[1] == 4 and len(batch.shape) == 1,
           f"roi_align needs NCHW x, (R, 4) rois and (R,) batch indices: {x.describe()}, {rois.describe()}, {batch.describe()}")
    return {"y": ((rois.shape[0], x.shape[1], int(params["output_height"]), int(params["output_width"])), x.dtype)}


def _roi_samples(start: float, size: float, bins: int, grid: int, limit: int):
    """Bilinear taps along one axis of a ROI's bins: (low, high, low weight, high weight, valid), each
    (bins * grid,), sample points at (i + 0.5) / grid of each bin, clamped to the image as onnxruntime."""
    points = start + (np.arange(bins)[:, None] * size / bins + (np.arange(grid)[None, :] + 0.5) * size / bins / grid)
    points = points.reshape(-1)
    valid = (points >= -1.0) & (points <= limit)
    points = np.maximum(points, 0)
    low = np.floor(points).astype(np.int64)
    edge = low >= limit - 1
    low = np.where(edge, limit - 1, low)
    high = np.where(edge, limit - 1, low + 1)
    points = np.where(edge, low, points)
    frac = points - low
    return low, high, 1.0 - frac, frac, valid


def roi_align_ref(ctx, p, x, rois, batch_indices):
    """ONNX RoiAlign: each ROI (x1, y1, x2, y2, times ``spatial_scale``; ``half_pixel`` shifts by -0.5)
    cut into output_height x output_width bins, each the average (``mode`` avg) or maximum of
    ``sampling_ratio``^2 (0: adaptive) bilinear samples; max takes the largest weighted corner of each
    sample, as onnxruntime."""
    height, width = x.shape[2:]
    out_h, out_w = int(p["output_height"]), int(p["output_width"])
    half_pixel = p.get("coordinate_transformation_mode", "half_pixel") == "half_pixel"
    scale, ratio = float(p.get("spatial_scale", 1.0)), int(p.get("sampling_ratio", 0))
    y = np.zeros((rois.shape[0], x.shape[1], out_h, out_w))
    for r, (box, image) in enumerate(zip(rois.astype(np.float64), batch_indices)):
        x1, y1, x2, y2 = box * scale - (0.5 if half_pixel else 0.0)
        roi_w, roi_h = x2 - x1, y2 - y1
        if not half_pixel:
            roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
        grid_h = ratio if ratio > 0 else int(np.ceil(roi_h / out_h))
        grid_w = ratio if ratio > 0 else int(np.ceil(roi_w / out_w))
        ylo, yhi, wyl, wyh, yok = _roi_samples(y1, roi_h, out_h, grid_h, height)
        xlo, xhi, wxl, wxh, xok = _roi_samples(x1, roi_w, out_w, grid_w, width)
        plane = x[int(image)].astype(np.float64)                                   # (C, H, W)
        valid = (yok[:, None] & xok[None, :])                                      # (out_h * gh, out_w * gw)
        corners = [w_y[:, None] * w_x[None, :] * plane[:, iy[:, None], ix[None, :]]   # (C, samples_h, samples_w)
                   for iy, w_y in ((ylo, wyl), (yhi, wyh)) for ix, w_x in ((xlo, wxl), (xhi, wxh))]
        corners = [c * valid for c in corners]
        shape = (x.shape[1], out_h, grid_h, out_w, grid_w)
        if p.get("mode", "avg") == "avg":
            y[r] = sum(corners).reshape(shape).sum(axis=(2, 4)) / max(grid_h * grid_w, 1)
        else:
            y[r] = np.maximum.reduce(corners).reshape(shape).max(axis=(2, 4))
    return y.astype(x.dtype)


def _max_unpool_infer(specs, params):
    x, indices = specs["x"], specs["indices"]
    expect(x.shape == indices.shape and indices.dtype == "int64", f"max_unpool: {x.describe()} with {indices.describe()}")
    return {"y": (tuple(x.shape[:2]) + tuple(int(d) for d in params["output_dims"]), x.dtype)}


def max_unpool_ref(ctx, p, x, indices):
    """Zeros of (N, C, *output_dims) with x's values written at ``indices`` (flat over the whole tensor,
    as MaxPool gives them)."""
    y = np.zeros(tuple(x.shape[:2]) + tuple(int(d) for d in p["output_dims"]), x.dtype)
    y.reshape(-1)[indices.reshape(-1)] = x.reshape(-1)
    return y


register(OpDef("conv_nd", "conv", ("x", "weight", "bias?"), ("y",), _conv_nd_infer, conv_nd_ref))
register(OpDef("deform_conv", "conv", ("x", "weight", "offset", "bias?", "mask?"), ("y",), _deform_conv_infer,
               deform_conv_ref))
register(OpDef("col2im", "conv", ("x",), ("y",), _col2im_infer, col2im_ref))
register(OpDef("pool_nd", "conv", ("x",), ("y", "indices?"), _pool_nd_infer, pool_nd_ref))
register(OpDef("roi_align", "conv", ("x", "rois", "batch_indices"), ("y",), _roi_align_infer, roi_align_ref))
register(OpDef("max_unpool", "conv", ("x", "indices"), ("y",), _max_unpool_infer, max_unpool_ref))
register(OpDef("conv_transpose", "conv", ("x", "weight", "bias?"), ("y",), _conv_transpose_infer, conv_transpose_ref))
register(OpDef("conv_integer", "conv", ("x", "weight", "x_zero_point?", "w_zero_point?"), ("y",), _conv_integer_infer,
               conv_integer_ref))
