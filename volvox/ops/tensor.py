"""Generic tensor ops in every dtype: gathers and scatters, cast, expand, tile, top-k, cumsum,
one-hot, depth / space rearrangement (NCHW), trilu, reflect / edge / wrap padding, reverse_sequence,
ONNX's Resize over any axes (resize_nd) and 2-D grid sampling.

Their semantics are ONNX's (negative indices count from the end; integer and bool tensors pass
through unchanged). numpy is the implementation; a plan runs them as islands.
"""

from __future__ import annotations

import itertools

import numpy as np

from volvox.ir.graph import DTYPES, expect
from volvox.ops.elementwise import broadcast_shape
from volvox.ops.registry import OpDef, register


def _static(shape: tuple, what: str) -> None:
    expect(all(isinstance(d, int) for d in shape), f"{what} needs a static shape, got {shape}")


def _positive_indices(indices: np.ndarray, n: int) -> np.ndarray:
    """Indices into an axis of length ``n`` with negatives counted from the end; ShapeError when out of range."""
    indices = indices.astype(np.int64)
    expect(bool(np.all((indices >= -n) & (indices < n))), f"indices out of range for an axis of {n}")
    return np.where(indices < 0, indices + n, indices)


# ------------------------------------------------------------------ gather / scatter
def _gather_infer(specs, params):
    x, idx = specs["x"], specs["indices"]
    n = len(x.shape)
    axis = int(params.get("axis", 0))
    expect(-n <= axis < n and idx.dtype in ("int32", "int64"), f"bad gather of {x.describe()} by {idx.describe()}")
    axis %= n
    batch = int(params.get("batch_dims", 0))
    expect(0 <= batch <= axis and batch <= len(idx.shape) and x.shape[:batch] == idx.shape[:batch],
           f"gather batch_dims {batch} of {x.describe()} by {idx.describe()} along axis {axis}")
    return {"y": (x.shape[:axis] + idx.shape[batch:] + x.shape[axis + 1:], x.dtype)}


def gather_ref(ctx, p, x, indices):
    """x taken along ``axis`` at ``indices`` (output: x.shape[:axis] + indices.shape + x.shape[axis+1:]);
    with ``batch_dims`` b, the first b dims of x and indices pair up (TFLite's and TensorFlow's gather)."""
    axis, batch = int(p.get("axis", 0)) % x.ndim, int(p.get("batch_dims", 0))
    if batch:
        inner = {"axis": axis - 1, "batch_dims": batch - 1}
        return np.stack([gather_ref(ctx, inner, x[i], indices[i]) for i in range(x.shape[0])])
    return np.take(x, _positive_indices(indices, x.shape[axis]), axis=axis)


def _gather_elements_infer(specs, params):
    x, idx = specs["x"], specs["indices"]
    expect(len(x.shape) == len(idx.shape), f"gather_elements: {x.describe()} and {idx.describe()} differ in rank")
    return {"y": (idx.shape, x.dtype)}


def gather_elements_ref(ctx, p, x, indices):
    """y[i][j][k] = x[indices[i][j][k]][j][k] along ``axis`` (numpy take_along_axis)."""
    axis = int(p.get("axis", 0)) % x.ndim
    return np.take_along_axis(x, _positive_indices(indices, x.shape[axis]), axis=axis)


def _gather_nd_infer(specs, params):
    x, idx = specs["x"], specs["indices"]
    b = int(params.get("batch_dims", 0))
    _static(idx.shape[-1:], "gather_nd's index depth")
    depth = idx.shape[-1]
    expect(b + depth <= len(x.shape), f"gather_nd: index depth {depth} too deep for {x.describe()}")
    return {"y": (idx.shape[:-1] + x.shape[b + depth:], x.dtype)}


def gather_nd_ref(ctx, p, x, indices):
    """Slices of x at the index tuples in ``indices``' last axis, after ``batch_dims`` shared leading axes."""
    b = int(p.get("batch_dims", 0))
    depth = indices.shape[-1]
    batch = int(np.prod(x.shape[:b], dtype=np.int64))
    xs = x.reshape((batch,) + x.shape[b:])                         # (batch, *x.shape[b:])
    idx = indices.reshape((batch, -1, depth)).astype(np.int64)    # (batch, tuples, depth)
    out = []
    for k in range(batch):
        cols = tuple(_positive_indices(idx[k, :, d], xs.shape[1 + d]) for d in range(depth))
        out.append(xs[k][cols])
    return np.stack(out).reshape(indices.shape[:-1] + x.shape[b + depth:])


def _scatter_infer(specs, params):
    x, upd = specs["x"], specs["updates"]
    expect(x.dtype == upd.dtype, f"scatter: {x.describe()} and updates {upd.describe()} differ in dtype")
    return {"y": (x.shape, x.dtype)}


_REDUCE_AT = {"none": None, "add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter_at(y: np.ndarray, where: tuple, values: np.ndarray, reduction: str) -> None:
    expect(reduction in _REDUCE_AT, f"scatter reduction {reduction!r} (known: {', '.join(_REDUCE_AT)})")
    if reduction == "none":
        y[where] = values
    else:
        _REDUCE_AT[reduction].at(y, where, values)


def scatter_elements_ref(ctx, p, x, indices, updates):
    """x with updates written (or reduced) at ``indices`` along ``axis`` (the inverse of gather_elements)."""
    axis = int(p.get("axis", 0)) % x.ndim
    idx = _positive_indices(indices, x.shape[axis])
    where = list(np.indices(idx.shape, sparse=True))
    where[axis] = idx
    y = x.copy()
    _scatter_at(y, tuple(where), updates, p.get("reduction", "none"))
    return y


def scatter_nd_ref(ctx, p, x, indices, updates):
    """x with slices of updates written (or reduced) at the index tuples in ``indices``' last axis."""
    depth = indices.shape[-1]
    idx = indices.reshape(-1, depth)
    y = x.copy()
    where = tuple(_positive_indices(idx[:, d], x.shape[d]) for d in range(depth))
    _scatter_at(y, where, updates.reshape((-1,) + x.shape[depth:]), p.get("reduction", "none"))
    return y


# ------------------------------------------------------------------ cast, expand, tile
def _cast_infer(specs, params):
    expect(params["to"] in DTYPES, f"cast to {params['to']!r} (known: {', '.join(DTYPES)})")
    return {"y": (specs["x"].shape, params["to"])}


SATURATING_FLOAT8 = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
SUB_BYTE_INTS = ("int4", "uint4", "int2", "uint2")


def cast_ref(ctx, p, x):
    """x converted to dtype ``to`` (float to int truncates toward zero, as C casts). ONNX's narrow types:
    a float8 target with ``saturate`` (default 1) clamps to its finite range (inf too; NaN stays NaN),
    else overflows to NaN / inf; float8_e8m0fnu rounds its exponent by ``round_mode`` (up, down,
    nearest), as the onnx package's reference."""
    to = p["to"]
    if to in SATURATING_FLOAT8 and p.get("saturate", 1):
        import ml_dtypes

        info = ml_dtypes.finfo(getattr(ml_dtypes, to))
        return np.clip(x, info.min, info.max).astype(to)
    if to == "float8_e8m0fnu":
        return _to_float8_e8m0(x, bool(p.get("saturate", 1)), p.get("round_mode", "up"))
    return x.astype(to)


def _to_float8_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """float8_e8m0fnu (a bare power-of-two exponent) of x: float32's exponent, rounded up when a
    fraction is left ("up"), to nearest, or truncated ("down"); NaN and inf become 0xFF."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(np.uint16)
    special = exponent == 0xFF
    if round_mode == "nearest":
        guard, rest = (bits & 0x400000) > 0, (bits & 0x3FFFFF) > 0
        round_up = guard & (rest | (exponent > 0)) & ~special
    elif round_mode == "up":
        round_up = ((bits & 0x7FFFFF) > 0) & ~special
    elif round_mode == "down":
        round_up = np.zeros(exponent.shape, bool)
    else:
        raise ValueError(f"float8_e8m0 round_mode {round_mode!r} (up, down, nearest)")
    if saturate:
        round_up &= exponent != 0xFE
    exponent = (exponent + round_up).astype(np.uint8)
    exponent[special] = 0xFF
    return exponent.view("float8_e8m0fnu")


def _bit_width(dtype: str) -> int | None:
    """Bits per element of a dtype; None for the sub-byte types, which numpy stores one per byte."""
    return None if dtype in SUB_BYTE_INTS + ("float4_e2m1fn",) else np.dtype(dtype).itemsize * 8


def _bitcast_infer(specs, params):
    x, to = specs["x"], params["to"]
    expect(to in DTYPES and _bit_width(x.dtype) is not None and _bit_width(x.dtype) == _bit_width(to),
           f"bitcast of {x.describe()} to {to}: both must be whole-byte types of one width")
    return {"y": (x.shape, to)}


def bitcast_ref(ctx, p, x):
    """x's bits read as dtype ``to`` of the same width."""
    return x.view(p["to"]).copy()


def _tensor_scatter_infer(specs, params):
    cache, update = specs["cache"], specs["update"]
    axis = params["axis"]
    expect(len(cache.shape) == len(update.shape) and cache.dtype == update.dtype and 0 < axis < len(cache.shape)
           and all(c == u for i, (c, u) in enumerate(zip(cache.shape, update.shape)) if i != axis),
           f"tensor_scatter: {update.describe()} does not fit {cache.describe()} along axis {axis}")
    return {"y": (cache.shape, cache.dtype)}


def tensor_scatter_ref(ctx, p, cache, update, write_indices=None):
    """ONNX TensorScatter: ``update`` written into a copy of ``cache`` along ``axis`` from each batch
    entry's write index (0 when absent); ``circular`` wraps positions past the end."""
    axis = p["axis"]
    starts = np.zeros(cache.shape[0], np.int64) if write_indices is None else write_indices.astype(np.int64)
    length, positions = cache.shape[axis], np.arange(update.shape[axis])
    y = cache.copy()
    for batch in range(cache.shape[0]):
        at = starts[batch] + positions
        at = at % length if p.get("mode", "linear") == "circular" else at
        target = np.moveaxis(y[batch], axis - 1, 0)     # a view: (positions, ...)
        target[at] = np.moveaxis(update[batch], axis - 1, 0)
    return y


def _expand_infer(specs, params):
    return {"y": (broadcast_shape(specs["x"].shape, tuple(int(d) for d in params["shape"])), specs["x"].dtype)}


def expand_ref(ctx, p, x):
    """x broadcast against ``shape`` (numpy rules, so a 1 in ``shape`` keeps x's dim)."""
    shape = np.broadcast_shapes(x.shape, tuple(int(d) for d in p["shape"]))
    return np.broadcast_to(x, shape).copy()


def _tile_infer(specs, params):
    x, reps = specs["x"], [int(r) for r in params["repeats"]]
    expect(len(reps) == len(x.shape) and min(reps, default=0) >= 0, f"repeats {reps} do not fit {x.describe()}")
    return {"y": (tuple(d * r if isinstance(d, int) else (d if r == 1 else f"{d}*{r}") for d, r in zip(x.shape, reps)),
                  x.dtype)}


def tile_ref(ctx, p, x):
    """x repeated ``repeats[i]`` times along each axis i."""
    return np.tile(x, [int(r) for r in p["repeats"]])


# ------------------------------------------------------------------ top-k, cumsum, one-hot, trilu
def _topk_infer(specs, params):
    x = specs["x"]
    n = len(x.shape)
    axis, k = int(params.get("axis", -1)), int(params["k"])
    expect(-n <= axis < n, f"axis {axis} out of range for {x.describe()}")
    axis %= n
    expect(k >= 0 and (not isinstance(x.shape[axis], int) or k <= x.shape[axis]), f"k={k} too large for {x.describe()}")
    shape = x.shape[:axis] + (k,) + x.shape[axis + 1:]
    return {"values": (shape, x.dtype), "indices": (shape, "int64")}


def topk_ref(ctx, p, x):
    """The k largest (``largest``=1) or smallest values along ``axis``, sorted, ties to the lower index;
    (values, int64 indices)."""
    axis, k = int(p.get("axis", -1)) % x.ndim, int(p["k"])
    key = -x if p.get("largest", 1) else x
    if x.dtype == np.bool_ or x.dtype.kind == "u":
        key = -x.astype(np.int64) if p.get("largest", 1) else x.astype(np.int64)
    order = np.argsort(key, axis=axis, kind="stable")
    index = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, index, axis=axis), index.astype(np.int64)


def cumsum_ref(ctx, p, x):
    """Running sum (``product``=1: product) along ``axis``; ``exclusive`` shifts it by one (starting
    from 0, or 1 for a product), ``reverse`` runs from the end."""
    axis = int(p["axis"]) % x.ndim
    product = bool(p.get("product", 0))
    y = np.flip(x, axis) if p.get("reverse", 0) else x
    y = y.astype(np.float64) if x.dtype.kind == "f" else y
    acc = np.cumprod(y, axis=axis) if product else np.cumsum(y, axis=axis)
    if p.get("exclusive", 0):
        first = np.ones_like if product else np.zeros_like
        acc = np.concatenate([first(np.take(acc, [0], axis=axis)), np.delete(acc, -1, axis=axis)], axis=axis)
    acc = np.flip(acc, axis) if p.get("reverse", 0) else acc
    return np.ascontiguousarray(acc).astype(x.dtype)


def _same_infer(specs, params):
    return {"y": (specs["x"].shape, specs["x"].dtype)}


def _one_hot_infer(specs, params):
    idx, values = specs["indices"], specs["values"]
    n = len(idx.shape) + 1
    axis = int(params.get("axis", -1))
    expect(-n <= axis < n, f"axis {axis} out of range for a one-hot of {idx.describe()}")
    axis %= n
    return {"y": (idx.shape[:axis] + (int(params["depth"]),) + idx.shape[axis:], values.dtype)}


def one_hot_ref(ctx, p, indices, values):
    """values[1] where the position along ``axis`` equals the index (negatives from the end), values[0] elsewhere."""
    depth = int(p["depth"])
    axis = int(p.get("axis", -1)) % (indices.ndim + 1)
    idx = indices.astype(np.int64)
    idx = np.where(idx < 0, idx + depth, idx)
    positions = np.arange(depth).reshape((depth,) + (1,) * (indices.ndim - axis))
    hot = np.expand_dims(idx, axis) == positions
    return np.where(hot, values[1], values[0]).astype(values.dtype)


def trilu_ref(ctx, p, x):
    """The upper (``upper``=1) or lower triangle of the last two axes from diagonal ``k``, zeros elsewhere."""
    k = int(p.get("k", 0))
    return np.triu(x, k) if p.get("upper", 1) else np.tril(x, k)


# ------------------------------------------------------------------ depth / space, padding
def _depth_space_infer(specs, params):
    x, b = specs["x"], int(params["blocksize"])
    expect(len(x.shape) == 4, f"needs a 4-D NCHW input, got {x.describe()}")
    _static(x.shape[1:], "a depth / space rearrangement")
    n, c, h, w = x.shape
    if params["direction"] == "to_space":
        expect(c % (b * b) == 0, f"channels of {x.describe()} not divisible by blocksize {b}^2")
        return {"y": ((n, c // (b * b), h * b, w * b), x.dtype)}
    expect(h % b == 0 and w % b == 0, f"H, W of {x.describe()} not divisible by blocksize {b}")
    return {"y": ((n, c * b * b, h // b, w // b), x.dtype)}


def depth_space_ref(ctx, p, x):
    """DepthToSpace (``direction``="to_space") or SpaceToDepth ("to_depth"), ``mode`` DCR or CRD, NCHW."""
    b = int(p["blocksize"])
    n, c, h, w = x.shape
    if p["direction"] == "to_space":
        if p.get("mode", "DCR") == "DCR":
            y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
        else:
            y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
        return np.ascontiguousarray(y.reshape(n, c // (b * b), h * b, w * b))
    if p.get("mode", "DCR") == "DCR":
        y = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    else:
        y = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 1, 3, 5, 2, 4)
    return np.ascontiguousarray(y.reshape(n, c * b * b, h // b, w // b))


def _mirror_pad_infer(specs, params):
    x = specs["x"]
    pads = params["pads"]
    expect(params["mode"] in ("reflect", "edge", "wrap"), f"padding mode {params['mode']!r}")
    expect(len(pads) == len(x.shape) and all(len(pa) == 2 for pa in pads), f"pads {pads} do not fit {x.describe()}")
    _static(x.shape, "reflect / edge / wrap padding")
    for d, (a, b) in zip(x.shape, pads):
        expect(d + a + b >= 0 and (params["mode"] != "reflect" or max(a, b) < d or a + b <= 0),
               f"pads {pads} too large for {x.describe()} in mode {params['mode']}")
    return {"y": (tuple(d + a + b for d, (a, b) in zip(x.shape, pads)), x.dtype)}


def mirror_pad_ref(ctx, p, x):
    """x padded by ``pads`` [[before, after], ...] per axis in ``mode`` reflect / edge / wrap (negative: crop)."""
    crop = tuple(slice(max(-a, 0), d - max(-b, 0)) for d, (a, b) in zip(x.shape, p["pads"]))
    grow = [(max(a, 0), max(b, 0)) for a, b in p["pads"]]
    return np.pad(x[crop], grow, mode={"reflect": "reflect", "edge": "edge", "wrap": "wrap"}[p["mode"]])


def _reverse_sequence_infer(specs, params):
    x, lengths = specs["x"], specs["lengths"]
    expect(len(x.shape) >= 2 and lengths.dtype in ("int32", "int64") and len(lengths.shape) == 1,
           f"reverse_sequence needs x of rank 2+ and 1-D lengths: {x.describe()}, {lengths.describe()}")
    return {"y": (x.shape, x.dtype)}


def reverse_sequence_ref(ctx, p, x, lengths):
    """Per batch entry b (along ``batch_axis``), the first lengths[b] steps along ``time_axis`` reversed."""
    batch_axis, time_axis = int(p.get("batch_axis", 1)), int(p.get("time_axis", 0))
    y = x.copy()
    for b, length in enumerate(lengths.astype(np.int64)):
        expect(0 <= length <= x.shape[time_axis], f"sequence length {length} out of range")
        index = [slice(None)] * x.ndim
        index[batch_axis], index[time_axis] = b, slice(0, int(length))
        src = x[tuple(index)]
        y[tuple(index)] = np.flip(src, axis=time_axis - (batch_axis < time_axis))
    return y


register(OpDef("gather", "tensor", ("x", "indices"), ("y",), _gather_infer, gather_ref))
register(OpDef("gather_elements", "tensor", ("x", "indices"), ("y",), _gather_elements_infer, gather_elements_ref))
register(OpDef("gather_nd", "tensor", ("x", "indices"), ("y",), _gather_nd_infer, gather_nd_ref))
register(OpDef("scatter_elements", "tensor", ("x", "indices", "updates"), ("y",), _scatter_infer, scatter_elements_ref))
register(OpDef("scatter_nd", "tensor", ("x", "indices", "updates"), ("y",), _scatter_infer, scatter_nd_ref))
register(OpDef("cast", "tensor", ("x",), ("y",), _cast_infer, cast_ref))
register(OpDef("tensor_scatter", "tensor", ("cache", "update", "write_indices?"), ("y",), _tensor_scatter_infer,
               tensor_scatter_ref))
register(OpDef("bitcast", "tensor", ("x",), ("y",), _bitcast_infer, bitcast_ref))
register(OpDef("expand", "tensor", ("x",), ("y",), _expand_infer, expand_ref))
register(OpDef("tile", "tensor", ("x",), ("y",), _tile_infer, tile_ref))
register(OpDef("topk", "tensor", ("x",), ("values", "indices"), _topk_infer, topk_ref))
register(OpDef("cumsum", "tensor", ("x",), ("y",), _same_infer, cumsum_ref))
register(OpDef("one_hot", "tensor", ("indices", "values"), ("y",), _one_hot_infer, one_hot_ref))
register(OpDef("trilu", "tensor", ("x",), ("y",), _same_infer, trilu_ref))
register(OpDef("depth_space", "tensor", ("x",), ("y",), _depth_space_infer, depth_space_ref))
register(OpDef("reverse_sequence", "tensor", ("x", "lengths"), ("y",), _reverse_sequence_infer, reverse_sequence_ref))
register(OpDef("mirror_pad", "tensor", ("x",), ("y",), _mirror_pad_infer, mirror_pad_ref))


# ------------------------------------------------------------------ N-D resize (ONNX Resize in full)
RESIZE_COORDINATES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                      "tf_crop_and_resize")
RESIZE_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _source_coordinates(mode: str, length: int, out: int, scale: float, roi: tuple) -> np.ndarray:
    """The input coordinate of every output index along one axis, by coordinate_transformation_mode."""
    x = np.arange(out, dtype=np.float64)
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adjustment = out / (scale * length)
        return length / 2 * (1 - adjustment) + (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if out > 1 else np.zeros(out)
    if mode == "align_corners":
        return x * (length - 1) / (out - 1) if out > 1 else np.zeros(out)
    if mode == "asymmetric":
        return x / scale
    start, end = roi   # tf_crop_and_resize
    if out > 1:
        return start * (length - 1) + x * (end - start) * (length - 1) / (out - 1)
    return np.full(out, 0.5 * (start + end) * (length - 1))


def _nearest_index(coords: np.ndarray, mode: str) -> np.ndarray:
    if mode == "floor":
        return np.floor(coords)
    if mode == "ceil":
        return np.ceil(coords)
    tie = np.isclose(coords - np.floor(coords), 0.5)
    rounded = np.floor(coords + 0.5)
    return np.where(tie, np.floor(coords) if mode == "round_prefer_floor" else np.ceil(coords), rounded)


def _cubic_weights(t: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution weights of the taps at offsets -1, 0, 1, 2 from floor(x), t = x - floor(x)."""
    d = np.stack([t + 1, t, 1 - t, 2 - t], axis=-1)        # (out, 4) distances
    near = ((a + 2) * d - (a + 3)) * d * d + 1              # |d| <= 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a         # 1 < |d| < 2
    return np.where(d <= 1, near, far)


def _antialias_taps(coords: np.ndarray, scale: float, mode: str, a: float) -> tuple[np.ndarray, np.ndarray]:
    """(taps, weights), each (out, taps), of a downsampling antialiased resize: the linear (triangle) or
    cubic kernel stretched by 1 / scale over the input, normalized to sum 1, as onnx's reference
    (a source coordinate on an input index counts as the right end of the interval before it)."""
    start = int(np.floor((-1 if mode == "linear" else -2) / scale) + 1)
    offsets = np.arange(start, 2 - start)                                   # (taps,)
    base = np.where(coords == np.floor(coords), coords - 1, np.floor(coords))
    distance = np.abs((offsets[None, :] - (coords - base)[:, None]) * scale)   # (out, taps)
    if mode == "linear":
        weights = np.clip(1 - distance, 0, 1)
    else:
        near = ((a + 2) * distance - (a + 3)) * distance * distance + 1
        far = ((a * distance - 5 * a) * distance + 8 * a) * distance - 4 * a
        weights = np.where(distance <= 1, near, np.where(distance < 2, far, 0.0))
    return base[:, None] + offsets[None, :], weights / weights.sum(axis=1, keepdims=True)


def _resize_axis(x: np.ndarray, axis: int, out: int, scale: float, roi: tuple, p: dict) -> np.ndarray:
    """x resized along one axis (float64): each output a weighted sum of input taps (edge-padded)."""
    length = x.shape[axis]
    coords = _source_coordinates(p.get("coordinate", "half_pixel"), length, out, scale, roi)
    mode = p.get("mode", "nearest")
    if p.get("antialias", 0) and mode in ("linear", "cubic") and scale < 1:
        taps, weights = _antialias_taps(coords, scale, mode, float(p.get("cubic_coeff_a", -0.75)))
        if p.get("exclude_outside", 0):
            weights = np.where((taps >= 0) & (taps < length), weights, 0.0)
            weights = weights / weights.sum(axis=1, keepdims=True)
    elif mode == "nearest":
        taps = _nearest_index(coords, p.get("nearest_mode", "round_prefer_floor"))[:, None]
        weights = np.ones((out, 1))
    elif mode == "linear":
        base = np.floor(coords)
        taps = np.stack([base, base + 1], axis=-1)
        weights = np.stack([1 - (coords - base), coords - base], axis=-1)
    else:
        base = np.floor(coords)
        taps = base[:, None] + np.arange(-1, 3)
        weights = _cubic_weights(coords - base, float(p.get("cubic_coeff_a", -0.75)))
        if p.get("exclude_outside", 0):
            weights = np.where((taps >= 0) & (taps < length), weights, 0.0)
            weights = weights / weights.sum(axis=1, keepdims=True)
    index = np.clip(taps, 0, length - 1).astype(np.int64)                     # (out, taps)
    gathered = np.take(x, index.reshape(-1), axis=axis)
    shape = list(x.shape)
    shape[axis:axis + 1] = [out, index.shape[1]]
    gathered = gathered.reshape(shape)                                        # (..., out, taps, ...)
    w_shape = [1] * len(shape)
    w_shape[axis:axis + 2] = list(weights.shape)
    y = (gathered * weights.reshape(w_shape)).sum(axis=axis + 1)
    if p.get("coordinate") == "tf_crop_and_resize":
        outside = (coords < 0) | (coords > length - 1)
        mask_shape = [1] * y.ndim
        mask_shape[axis] = out
        y = np.where(outside.reshape(mask_shape), float(p.get("extrapolation_value", 0.0)), y)
    return y


def _resize_nd_infer(specs, params):
    x = specs["x"]
    expect(x.dtype in ("float32", "float16", "float64", "int8", "uint8", "int32", "int64"), f"resize of {x.describe()}")
    _static(x.shape, "resize_nd")
    expect(len(params["sizes"]) == len(x.shape) and min(params["sizes"]) > 0, f"resize sizes {params['sizes']} for {x.describe()}")
    expect(params.get("mode", "nearest") in ("nearest", "linear", "cubic"), f"resize mode {params.get('mode')!r}")
    expect(params.get("coordinate", "half_pixel") in RESIZE_COORDINATES, f"resize coordinate {params.get('coordinate')!r}")
    expect(params.get("nearest_mode", "round_prefer_floor") in RESIZE_NEAREST_MODES,
           f"resize nearest_mode {params.get('nearest_mode')!r}")
    return {"y": (tuple(int(s) for s in params["sizes"]), x.dtype)}


def resize_nd_ref(ctx, p, x):
    """ONNX Resize over every axis whose size changes: ``sizes`` (the output shape), ``scales`` (per axis),
    ``mode`` nearest / linear / cubic, ``coordinate``, ``nearest_mode``, ``cubic_coeff_a``,
    ``exclude_outside``, ``antialias`` (a downsampling linear / cubic filter widened by 1 / scale), ``roi``
    and ``extrapolation_value`` (tf_crop_and_resize); one axis at a time."""
    y = x.astype(np.float64)
    roi = p.get("roi") or [0.0] * x.ndim + [1.0] * x.ndim
    for axis, (out, scale) in enumerate(zip(p["sizes"], p["scales"])):
        if out != x.shape[axis] or scale != 1.0 or p.get("coordinate") == "tf_crop_and_resize":
            y = _resize_axis(y, axis, int(out), float(scale), (roi[axis], roi[axis + x.ndim]), p)
    if x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        return np.clip(np.round(y), info.min, info.max).astype(x.dtype)
    return y.astype(x.dtype)


register(OpDef("resize_nd", "tensor", ("x",), ("y",), _resize_nd_infer, resize_nd_ref))


# ------------------------------------------------------------------ grid sampling (2-D)
def _reflect(coord: np.ndarray, low: float, high: float) -> np.ndarray:
    """Coordinates reflected into [low, high] as many times as needed."""
    span = high - low
    if span <= 0:
        return np.zeros_like(coord)
    offset = np.abs(coord - low) % (2 * span)
    flips = np.floor(np.abs(coord - low) / span)
    return np.where(flips % 2 == 0, low + offset, high - (offset - span))


def _grid_sample_infer(specs, params):
    x, grid = specs["x"], specs["grid"]
    rank = len(x.shape) - 2
    expect(rank in (2, 3) and len(grid.shape) == rank + 2 and grid.shape[-1] == rank
           and x.dtype in ("float32", "float16", "float64"),
           f"grid_sample needs (N, C, *spatial) x and an (N, *out, spatial rank) grid: {x.describe()}, {grid.describe()}")
    expect(params.get("mode", "linear") in ("linear", "nearest", "cubic") and
           params.get("padding_mode", "zeros") in ("zeros", "border", "reflection")
           and (rank == 2 or params.get("mode", "linear") != "cubic"), f"grid_sample params {params} of rank {rank}")
    return {"y": ((x.shape[0], x.shape[1]) + tuple(grid.shape[1:-1]), x.dtype)}


def grid_sample_ref(ctx, p, x, grid):
    """x (N, C, *spatial: 2-D or 3-D) sampled at the grid's normalized points in [-1, 1] (the last grid
    value indexes the last spatial axis): ``mode`` linear / nearest / cubic (2-D), ``padding_mode``
    zeros / border / reflection, ``align_corners`` (float64)."""
    spatial = x.shape[2:]
    rank = len(spatial)
    align, padding, mode = int(p.get("align_corners", 0)), p.get("padding_mode", "zeros"), p.get("mode", "linear")
    g = grid.astype(np.float64)

    def unnormalize(v, size):
        return (v + 1) / 2 * (size - 1) if align else ((v + 1) * size - 1) / 2

    def reflect(v, size):
        return _reflect(v, 0, size - 1) if align else _reflect(v, -0.5, size - 0.5)

    coords = [unnormalize(g[..., rank - 1 - d], spatial[d]) for d in range(rank)]   # per axis (N, *out)
    if mode == "cubic":
        pass   # cubic pads each of its taps (in tap), not the sample point
    elif padding == "border":
        coords = [np.clip(c, 0, size - 1) for c, size in zip(coords, spatial)]
    elif padding == "reflection":
        coords = [reflect(c, size) if align else np.clip(reflect(c, size), 0, size - 1) for c, size in zip(coords, spatial)]
    x64 = x.astype(np.float64)
    batch = np.arange(x.shape[0]).reshape((-1,) + (1,) * (g.ndim - 2))

    def tap(index):
        """x at integer points (N, C, *out): zeros outside for padding zeros, reflected or the nearest edge
        point otherwise."""
        if padding == "reflection":
            index = [np.round(reflect(i, size)).astype(np.int64) for i, size in zip(index, spatial)]
        inside = np.logical_and.reduce([(i >= 0) & (i < size) for i, size in zip(index, spatial)])
        values = x64[(batch, slice(None)) + tuple(np.clip(i, 0, size - 1) for i, size in zip(index, spatial))]
        if padding == "zeros":
            values = values * inside[..., None]                                   # (N, *out, C)
        return np.moveaxis(values, -1, 1)

    if mode == "nearest":
        return np.ascontiguousarray(tap([np.round(c).astype(np.int64) for c in coords])).astype(x.dtype)
    lows = [np.floor(c) for c in coords]
    if mode == "linear":
        offsets = (0, 1)
        weights = [[1 - (c - lo), c - lo] for c, lo in zip(coords, lows)]
    else:
        offsets = (-1, 0, 1, 2)
        weights = [list(np.moveaxis(_cubic_weights(c - lo, -0.75), -1, 0)) for c, lo in zip(coords, lows)]
    lows = [lo.astype(np.int64) for lo in lows]
    y = 0.0
    for corner in itertools.product(range(len(offsets)), repeat=rank):
        weight = np.prod([weights[d][k] for d, k in enumerate(corner)], axis=0)[:, None]   # (N, 1, *out)
        y = y + weight * tap([lo + offsets[k] for lo, k in zip(lows, corner)])
    return np.ascontiguousarray(y).astype(x.dtype)


register(OpDef("grid_sample", "tensor", ("x", "grid"), ("y",), _grid_sample_infer, grid_sample_ref))
