"""Data movement: reshape, transpose, concat, pad, slice (and reshape_like, slice_grad); their backward. numpy is already
the fast path."""

from __future__ import annotations

import math

import numpy as np

from volvox import cpu
from volvox.errors import UnsupportedError
from volvox.ir.graph import expect
from volvox.ops.codes import FN
from volvox.ops.registry import OpDef, register
from volvox.ops.gpu import Call, Dispatch, Lowering, check_gather, contiguous_strides, copy_dispatch, float_only, gather_dispatch


def reshape_target(in_shape: tuple, target) -> tuple:
    """Resolve ONNX-style reshape dims (0 = copy the input dim, -1 = infer) against ``in_shape``."""
    target = [int(d) for d in target]
    expect(target.count(-1) <= 1 and all(d >= -1 for d in target), f"bad reshape target {target}")
    out = [in_shape[i] if d == 0 else d for i, d in enumerate(target)]
    if -1 in out:
        known = [d for d in out if d != -1]
        if all(isinstance(d, int) for d in list(in_shape) + known):
            total, rest = math.prod(in_shape), math.prod(known)
            expect(rest > 0 and total % rest == 0, f"cannot reshape {in_shape} to {target}")
            out[out.index(-1)] = total // rest
        else:
            out[out.index(-1)] = "reshape(" + ",".join(map(str, in_shape)) + ")"  # symbolic
    elif all(isinstance(d, int) for d in list(in_shape) + out):
        expect(math.prod(in_shape) == math.prod(out), f"cannot reshape {in_shape} to {target}")
    return tuple(out)


def _reshape_infer(specs, params):
    x = specs["x"]
    return {"y": (reshape_target(x.shape, params["shape"]), x.dtype)}


def reshape_ref(ctx, p, x):
    """x viewed with shape ``params.shape`` (0 copies an input dim, -1 is inferred)."""
    return x.reshape(reshape_target(x.shape, p["shape"]))


def _transpose_infer(specs, params):
    x = specs["x"]
    perm = [int(i) for i in params["perm"]]
    expect(sorted(perm) == list(range(len(x.shape))), f"perm {perm} does not fit {x.describe()}")
    return {"y": (tuple(x.shape[i] for i in perm), x.dtype)}


def transpose_ref(ctx, p, x):
    """x with axes permuted by ``perm`` (made contiguous)."""
    return np.ascontiguousarray(x.transpose([int(i) for i in p["perm"]]))


def _concat_infer(specs, params):
    parts = [specs[f"x{i}"] for i in range(len(specs))]
    first = parts[0]
    n = len(first.shape)
    axis = int(params["axis"])
    expect(-n <= axis < n, f"axis {axis} out of range for {first.describe()}")
    axis %= n
    for s in parts[1:]:
        expect(s.dtype == first.dtype and len(s.shape) == n and all(
            i == axis or a == b or isinstance(a, str) or isinstance(b, str) for i, (a, b) in enumerate(zip(s.shape, first.shape))),
            f"cannot concatenate {s.describe()} with {first.describe()} on axis {axis}")
    dims = [s.shape[axis] for s in parts]
    total = sum(dims) if all(isinstance(d, int) for d in dims) else "+".join(map(str, dims))
    return {"y": (first.shape[:axis] + (total,) + first.shape[axis + 1:], first.dtype)}


def concat_ref(ctx, p, *xs):
    """Concatenation along ``axis`` of every wired input."""
    return np.concatenate([x for x in xs if x is not None], axis=int(p["axis"]))


def _pad_infer(specs, params):
    x = specs["x"]
    pads = params["pads"]
    expect(len(pads) == len(x.shape) and all(len(pa) == 2 and min(pa) >= 0 for pa in pads),
           f"pads must be one non-negative [before, after] per axis of {x.describe()}, got {pads}")
    shape = tuple(d + a + b if isinstance(d, int) else (d if a + b == 0 else f"{d}+{a + b}")
                  for d, (a, b) in zip(x.shape, pads))
    return {"y": (shape, x.dtype)}


def pad_ref(ctx, p, x):
    """Constant padding: ``pads`` [[before, after], ...] per axis, ``value`` (default 0)."""
    return np.pad(x, [tuple(pa) for pa in p["pads"]], constant_values=p.get("value", 0))


def slice_bounds(n: int, start: int, end: int, step: int) -> range:
    """ONNX/numpy slice of an axis of length n, clamped."""
    return range(*slice(start, end, step).indices(n))


def _slice_infer(specs, params):
    x = specs["x"]
    shape = list(x.shape)
    for axis, start, end, step in zip(params["axes"], params["starts"], params["ends"], params.get("steps", [1] * len(params["axes"]))):
        expect(-len(shape) <= axis < len(shape) and step != 0, f"bad slice on axis {axis} of {x.describe()}")
        d = shape[axis]
        shape[axis] = len(slice_bounds(d, start, end, step)) if isinstance(d, int) else f"{d}[{start}:{end}:{step}]"
    return {"y": (tuple(shape), x.dtype)}


def slice_ref(ctx, p, x):
    """x[starts:ends:steps] on ``axes``."""
    index = [slice(None)] * x.ndim
    for axis, start, end, step in zip(p["axes"], p["starts"], p["ends"], p.get("steps", [1] * len(p["axes"]))):
        index[axis] = slice(start, end, step)
    return np.ascontiguousarray(x[tuple(index)])


MAX_CONCAT_INPUTS = 64  # DenseNet-201's widest dense block concatenates 49

# ------------------------------------------------------------------ GPU lowerings
def _lower_transpose(c: Call) -> list[Dispatch]:
    st = contiguous_strides(c.shapes["x"])
    return [gather_dispatch(c.shapes["y"], [st[int(i)] for i in c.params["perm"]])]


def _lower_slice(c: Call) -> list[Dispatch]:
    shape = c.shapes["x"]
    st = contiguous_strides(shape)
    strides, off = list(st), 0
    steps = c.params.get("steps", [1] * len(c.params["axes"]))
    for axis, start, end, step in zip(c.params["axes"], c.params["starts"], c.params["ends"], steps):
        axis = int(axis) % len(shape)
        r = slice_bounds(shape[axis], int(start), int(end), int(step))
        off += (r.start if len(r) else 0) * st[axis]
        strides[axis] = st[axis] * int(step)
    return [gather_dispatch(c.shapes["y"], strides, off)]


def _lower_pad(c: Call) -> list[Dispatch]:
    x = c.shapes["x"]
    return [gather_dispatch(c.shapes["y"], contiguous_strides(x), lo=[int(p[0]) for p in c.params["pads"]],
                            extent=list(x), value=float(c.params.get("value", 0)))]


def _check_concat(specs, params):
    return float_only(*specs)(specs, params)


def _lower_concat(c: Call) -> list[Dispatch]:
    out = c.shapes["y"]
    axis = int(c.params["axis"]) % len(out)
    outer, inner_out = math.prod(out[:axis]), math.prod(out[axis:])
    calls, off = [], 0
    for i in range(len(c.shapes) - 1):
        if f"x{i}" not in c.shapes:
            continue
        part = math.prod(c.shapes[f"x{i}"][axis:])
        if part:
            calls.append(copy_dispatch(f"x{i}", "y", inner=part, outer=outer, src_o=part, dst_off=off, dst_o=inner_out))
        off += part
    return calls


# ------------------------------------------------------------------- CPU plan lowering
def reshape_cpu(plan, node) -> None:
    """A reshape of an activation is a view (OpDef.view: no step); of a weight, the plan does not lower it."""
    plan.need(node, False, "reshape of a weight")


def gather_cpu(plan, node) -> None:
    """transpose and slice: a contiguous copy of the input's strided view."""
    x, y, p = plan.input(node, "x"), plan.output(node), node.params
    plan.need(node, x.dtype == np.float32 and y.size > 0, "dtype or size")
    if node.op == "transpose":
        view = x.transpose([int(a) for a in p["perm"]])
    else:
        index = [slice(None)] * x.ndim
        for axis, start, end, step in zip(p["axes"], p["starts"], p["ends"], p.get("steps", [1] * len(p["axes"]))):
            index[axis] = slice(start, end, step)
        view = x[tuple(index)]
    plan.need(node, view.shape == y.shape, "output shape")
    desc = np.array([view.ndim, *view.shape, *(st // 4 for st in view.strides)], np.int64)  # (1 + 2 ndim,)
    plan.keep(desc)
    start = (view.__array_interface__["data"][0] - cpu.address(x)) // 4 if view.size else 0
    plan.add("gather", x=cpu.address(x) + 4 * start, view=cpu.address(desc), y=cpu.address(y), rows=y.size // y.shape[-1])


def pad_cpu(plan, node) -> None:
    """Zero padding of the last axis (channel padding) as row copies; other pads run as an island."""
    pads, x, y = node.params["pads"], plan.input(node, "x"), plan.output(node)
    if not all(tuple(pa) == (0, 0) for pa in pads[:-1]) or node.params.get("value", 0):
        return plan.island(node)
    item = x.itemsize
    plan.add("copy_rows", src=cpu.address(x), dst=cpu.address(y), rows=x.size // x.shape[-1], row_bytes=x.shape[-1] * item,
             src_stride=x.shape[-1] * item, dst_stride=y.shape[-1] * item, dst_offset=int(pads[-1][0]) * item,
             zero_rest=True)


def _row_stride(a: np.ndarray, axis: int) -> int:
    """Bytes from one row of ``a`` (an index of the dims before ``axis``) to the next (a channel
    slice's: its pixel stride)."""
    if a.flags.c_contiguous or axis == 0:
        return int(np.prod(a.shape[axis:], dtype=np.int64)) * a.itemsize
    return a.strides[axis - 1]


def concat_cpu(plan, node) -> None:
    """Each input's rows copied into its columns of the output (concat_act: then its ReLU in place),
    but for an input the plan placed there already (a channel slice of the output's buffer: the node
    that wrote it wrote it in place, runtime/plan.py), which has no step; inputs and output may be
    channel slices (rows a stride apart)."""
    y = plan.output(node, strided=True)
    axis = int(node.params["axis"]) % y.ndim
    rows = int(np.prod(y.shape[:axis], dtype=np.int64))
    offset = 0
    for port in node.inputs:
        x = plan.input(node, port, strided=True)
        plan.need(node, x.dtype == y.dtype, "dtypes differ")
        width = x.size // max(rows, 1) * x.itemsize
        src_stride, dst_stride = _row_stride(x, axis), _row_stride(y, axis)
        if width and not (cpu.address(x) == cpu.address(y) + offset and src_stride == dst_stride):
            plan.add("copy_rows", src=cpu.address(x), dst=cpu.address(y), rows=rows, row_bytes=width,
                     src_stride=src_stride, dst_stride=dst_stride, dst_offset=offset)
        offset += width
    if "activation" in node.params:
        plan.need(node, node.params["activation"] == "relu", f"activation {node.params['activation']!r}")
        plan.add("unary", x=cpu.address(y), y=cpu.address(y), count=y.size, fn=FN["relu"])


# ------------------------------------------------------------------- backward (compile/autodiff.py)
def _reshape_like_infer(specs, params):
    x, like = specs["x"], specs["like"]
    keep = int(params.get("keep", 0))
    expect(0 <= keep <= len(x.shape), f"keep {keep} does not fit {x.describe()}")
    return {"y": (like.shape + x.shape[len(x.shape) - keep:], x.dtype)}


def reshape_like_ref(ctx, p, x, like):
    """x viewed with ``like``'s shape followed by x's last ``keep`` dims (default 0): a reshape's gradient
    back to its input's shape, or rows split into (batch, seq, ...) like a token batch, symbolic dims
    included."""
    keep = int(p.get("keep", 0))
    return x.reshape(like.shape + x.shape[x.ndim - keep:])


def reshape_backward(g, node) -> None:
    """d(reshape / reshape_like): dy viewed with the input's shape."""
    g.accumulate(node, "x", g.emit("reshape_like", {"x": g.grad(node, "y"), "like": node.inputs["x"]})[0])


def transpose_backward(g, node) -> None:
    """d(transpose): dy transposed by the inverse permutation."""
    perm = [int(i) for i in node.params["perm"]]
    inverse = [perm.index(i) for i in range(len(perm))]
    g.accumulate(node, "x", g.emit("transpose", {"x": g.grad(node, "y")}, {"perm": inverse})[0])


def _slice_grad_infer(specs, params):
    x = specs["x"]
    expect(specs["dy"].dtype == x.dtype, f"dy must be {x.dtype}, got {specs['dy'].describe()}")
    return {"dx": (x.shape, x.dtype)}


def slice_grad_ref(ctx, p, dy, x):
    """dx: zeros of x's shape with dy written where slice (same params) read x. Ports: dy, x (for its shape)."""
    dx = np.zeros(x.shape, dy.dtype)
    index = [slice(None)] * x.ndim
    for axis, start, end, step in zip(p["axes"], p["starts"], p["ends"], p.get("steps", [1] * len(p["axes"]))):
        index[axis] = slice(start, end, step)
    dx[tuple(index)] = dy
    return dx


def slice_backward(g, node) -> None:
    """d(slice): dy scattered back into zeros of the input's shape (slice_grad)."""
    g.accumulate(node, "x", g.emit("slice_grad", {"dy": g.grad(node, "y"), "x": node.inputs["x"]}, node.params,
                                   outputs=("dx",))[0])


def pad_backward(g, node) -> None:
    """d(constant pad): the unpadded window of dy (a slice)."""
    pads = node.params["pads"]
    axes = list(range(len(pads)))
    ends = [-int(after) if int(after) else np.iinfo(np.int64).max for _, after in pads]
    g.accumulate(node, "x", g.emit("slice", {"x": g.grad(node, "y")},
                                   {"axes": axes, "starts": [int(before) for before, _ in pads], "ends": ends})[0])


def concat_backward(g, node) -> None:
    """d(concat): each input's columns of dy, sliced out (sizes along the axis must be known)."""
    dy = g.grad(node, "y")
    axis = int(node.params["axis"]) % len(g.shape(dy))
    offset = 0
    for port in sorted(node.inputs, key=lambda p: int(p[1:])):
        size = g.shape(node.inputs[port])[axis]
        if not isinstance(size, int):
            raise UnsupportedError(f"node {node.id!r} (concat): cannot differentiate a concat of symbolic size {size!r}")
        if g.needs(node, port):
            g.accumulate(node, port, g.emit("slice", {"x": dy}, {"axes": [axis], "starts": [offset],
                                                                 "ends": [offset + size]})[0])
        offset += size


register(OpDef("reshape_like", "shape", ("x", "like"), ("y",), _reshape_like_infer, reshape_like_ref,
               backward=reshape_backward))
register(OpDef("slice_grad", "shape", ("dy", "x"), ("dx",), _slice_grad_infer, slice_grad_ref))
register(OpDef("reshape", "shape", ("x",), ("y",), _reshape_infer, reshape_ref, cpu=reshape_cpu, view=True,
               gpu=Lowering((), lambda c: [], alias=True), backward=reshape_backward))
register(OpDef("transpose", "shape", ("x",), ("y",), _transpose_infer, transpose_ref, cpu=gather_cpu,
               gpu=Lowering(("gather",), _lower_transpose, check_gather), backward=transpose_backward))
register(OpDef("concat", "shape", ("x0",) + tuple(f"x{i}?" for i in range(1, MAX_CONCAT_INPUTS)), ("y",),
               _concat_infer, concat_ref, cpu=concat_cpu,
               gpu=Lowering(("copy",), _lower_concat, _check_concat), backward=concat_backward))
register(OpDef("pad", "shape", ("x",), ("y",), _pad_infer, pad_ref, cpu=pad_cpu,
               gpu=Lowering(("gather",), _lower_pad, check_gather), backward=pad_backward))
register(OpDef("slice", "shape", ("x",), ("y",), _slice_infer, slice_ref, cpu=gather_cpu,
               gpu=Lowering(("gather",), _lower_slice, check_gather), backward=slice_backward))
