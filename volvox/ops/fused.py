"""Ops the graph compiler emits when it fuses nodes (volvox/compile/): swiglu, linear_split,
linear_act, concat_act, add_n."""

from __future__ import annotations

import math
from functools import reduce

import numpy as np

from volvox import cpu
from volvox.errors import ShapeError, UnsupportedError
from volvox.ir.graph import Node, expect, same_dim
from volvox.ops.registry import OpDef, register
from volvox.ops.activation import (FUSED_ACTIVATIONS, GRAD_FROM_INPUT, activation_grad, activation_ref,
                                   expect_fused_activation)
from volvox.ops.elementwise import add_ref, binary_cpu, broadcast_shape
from volvox.ops.linear import _linear_infer, linear_cpu, linear_fast, linear_grads, linear_into, linear_ref
from volvox.ops.shape import MAX_CONCAT_INPUTS, _concat_infer, concat_backward, concat_cpu, concat_ref
from volvox.ops.gpu import (Call, Dispatch, Lowering, binary_dispatch, float_linear_dispatch, float_only, grid_of,
                            packed_layout, packed_matmul_dispatches, unary_dispatch)
from volvox.ops.linear import _lower_linear, check_linear
from volvox.ops.shape import _check_concat, _lower_concat

MAX_SPLIT = 4  # outputs of one linear_split node
MAX_ADD_N = 8  # inputs of one add_n node


def _swiglu_infer(specs, params):
    x = specs["x"]
    f = x.shape[-1]
    expect(x.dtype == "float32" and (not isinstance(f, int) or f % 2 == 0),
           f"x must be float32 with an even last dim [gate | up], got {x.describe()}")
    return {"y": (x.shape[:-1] + ((f // 2) if isinstance(f, int) else f"{f}/2",), "float32")}


def swiglu_ref(ctx, p, x):
    """silu(gate) * up for x = [gate | up] along the last axis."""
    half = x.shape[-1] // 2
    gate, up = x[..., :half], x[..., half:]
    return (gate * (0.5 * (1.0 + np.tanh(0.5 * gate))) * up).astype(np.float32)


def swiglu_fast(ctx, p, x):
    """silu(gate) * up through the CPU kernel (ggml's vectorised expf on x86)."""
    return swiglu_into(ctx, p, np.empty(x.shape[:-1] + (x.shape[-1] // 2,), np.float32), x)


def swiglu_into(ctx, p, out, x):
    """swiglu_fast written into ``out`` (x's leading dims, half its last)."""
    cpu.swiglu(x.reshape(-1, x.shape[-1]), out=out.reshape(-1, out.shape[-1]))
    return out


def _linear_split_infer(specs, params):
    x, w = specs["x"], specs["weight"]
    sizes = [int(n) for n in params["sizes"]]
    expect(2 <= len(sizes) <= MAX_SPLIT and all(n > 0 for n in sizes), f"sizes must be 2..{MAX_SPLIT} positive ints, got {sizes}")
    expect(len(w.shape) == 2 and same_dim(w.shape[0], sum(sizes)) and same_dim(x.shape[-1], w.shape[1]),
           f"weight must be (sum(sizes)={sum(sizes)}, in_features), got {w.describe()} for {x.describe()}")
    return {f"y{i}": (x.shape[:-1] + (n,), "float32") for i, n in enumerate(sizes)}


def _split(y, sizes):
    out, start = [], 0
    for n in sizes:
        out.append(y[..., start:start + n])
        start += n
    return tuple(out)


def linear_split_ref(ctx, p, x, weight):
    """x @ weight.T split into column blocks of ``sizes`` (sibling linears merged into one)."""
    return _split(linear_ref(ctx, p, x, weight), p["sizes"])


def linear_split_fast(ctx, p, x, weight):
    """One kernel call, then views of its column blocks."""
    return _split(linear_fast(ctx, p, x, weight), p["sizes"])


def linear_split_into(ctx, p, out, x, weight):
    """One kernel call into ``out`` (rows, sum(sizes)), then views of its column blocks."""
    return _split(linear_into(ctx, p, out, x, weight), p["sizes"])


def _linear_act_infer(specs, params):
    expect_fused_activation(params)
    return _linear_infer(specs, params)


def linear_act_ref(ctx, p, x, weight, bias=None):
    """act(x @ weight.T + bias): linear's reference, then the activation op's."""
    return activation_ref(p["activation"], linear_ref(ctx, p, x, weight, bias))


def linear_act_fast(ctx, p, x, weight, bias=None):
    """The linear kernel, then the activation in place on its output."""
    y = linear_fast(ctx, p, x, weight, bias)  # (..., out_features)
    return FUSED_ACTIVATIONS[p["activation"]].into(y, y)


def linear_act_into(ctx, p, out, x, weight, bias=None):
    """linear_act_fast written into ``out``."""
    y = linear_into(ctx, p, out, x, weight, bias)  # (..., out_features)
    return FUSED_ACTIVATIONS[p["activation"]].into(y, y)


def _concat_act_infer(specs, params):
    expect_fused_activation(params)
    expect(all(s.dtype == "float32" for s in specs.values()), "inputs must be float32")
    return _concat_infer(specs, params)


def concat_act_ref(ctx, p, *xs):
    """act(concat(xs)): concat's reference, then the activation op's."""
    return activation_ref(p["activation"], concat_ref(ctx, p, *xs))


def concat_act_fast(ctx, p, *xs):
    """Each input's activation written straight into its slice of the output (no concatenated temporary)."""
    xs = [x for x in xs if x is not None]
    axis = int(p["axis"]) % xs[0].ndim
    shape = list(xs[0].shape)
    shape[axis] = sum(x.shape[axis] for x in xs)
    y = np.empty(shape, np.float32)  # xs[0]'s shape, concatenated dim summed
    into = FUSED_ACTIVATIONS[p["activation"]].into
    index = [slice(None)] * y.ndim
    start = 0
    for x in xs:
        index[axis] = slice(start, start + x.shape[axis])
        part = y[tuple(index)]  # x's shape, strided unless the leading dims are 1
        if part.flags.c_contiguous:
            into(x, part)
        else:  # kernels write contiguous rows: through a temporary
            part[...] = into(x, np.empty(x.shape, np.float32))
        start += x.shape[axis]
    return y


def _add_n_infer(specs, params):
    parts = list(specs.values())
    expect(all(s.dtype == parts[0].dtype for s in parts), f"dtypes differ: {', '.join(s.describe() for s in parts)}")
    if "activation" in params:  # folded by fuse_add_activation: float32 only, as every fused activation
        expect_fused_activation(params)
        expect(parts[0].dtype == "float32", f"an activation needs float32 inputs, got {parts[0].describe()}")
    return {"y": (reduce(broadcast_shape, (s.shape for s in parts)), parts[0].dtype)}


def add_n_ref(ctx, p, *xs):
    """((x0 + x1) + x2) + ...: the chain of adds it replaces, in the same order (then its activation)."""
    y = reduce(lambda a, b: add_ref(ctx, p, a, b), [x for x in xs if x is not None])
    return activation_ref(p["activation"], y) if "activation" in p else y


def add_n_fast(ctx, p, *xs):
    """The same sums accumulated in place into one fresh buffer (one allocation, not one per add)."""
    xs = [x for x in xs if x is not None]
    y = np.empty(np.broadcast_shapes(*(x.shape for x in xs)), xs[0].dtype)  # broadcast of every input
    return add_n_into(ctx, p, y, *xs)


def add_n_into(ctx, p, out, *xs):
    """The sums accumulated in place into ``out`` (the broadcast of every input)."""
    xs = [x for x in xs if x is not None]
    if out.shape != np.broadcast_shapes(*(x.shape for x in xs)):
        raise ShapeError(f"output buffer {out.shape} is not the broadcast of {[x.shape for x in xs]}")
    np.add(xs[0], xs[1], out=out)
    for x in xs[2:]:
        np.add(out, x, out=out)
    return FUSED_ACTIVATIONS[p["activation"]].into(out, out) if "activation" in p else out


# ------------------------------------------------------------------ GPU lowerings
def _lower_linear_split(c: Call) -> list[Dispatch]:
    """One GEMV / matmul per output over its block of the weight's rows (packed: per chunk the block touches)."""
    rows, k = c.shapes["weight"]
    m = math.prod(c.shapes["x"][:-1])
    layout = packed_layout(c, "weight")
    out, row = [], 0
    for i, n in enumerate(int(s) for s in c.params["sizes"]):
        if f"y{i}" in c.shapes:
            if layout is not None:
                out += packed_matmul_dispatches("x", "weight", None, f"y{i}", m, k, n, layout, rows, w_row=row)
            else:
                out.append(float_linear_dispatch("x", "weight", None, f"y{i}", m, k, n, w_row=row))
        row += n
    return out


def _lower_swiglu(c: Call) -> list[Dispatch]:
    half = c.shapes["x"][-1] // 2
    n = math.prod(c.shapes["x"][:-1]) * half
    return [Dispatch("swiglu", ["x", "y"], grid_of(n), dict(n=n, half=half))]


def _check_add_n(specs, params):
    ranks = [len(s.shape) for s in specs.values()]
    return float_only(*specs)(specs, params) or (None if max(ranks) <= 4 else "rank above 4")


def _lower_add_n(c: Call) -> list[Dispatch]:
    """((x0 + x1) + x2) + ...: the first add writes y at its full (broadcast) shape, each later one adds
    in place, so the sums run in add_n's order; then its activation (if any) over y in place."""
    xs = [p for p in (f"x{i}" for i in range(len(c.shapes))) if p in c.shapes]
    adds = ([binary_dispatch("add", xs[0], xs[1], "y", c.shapes)]
            + [binary_dispatch("add", None, x, "y", c.shapes) for x in xs[2:]])
    if "activation" not in c.params:
        return adds
    act = FUSED_ACTIVATIONS[c.params["activation"]]
    return adds + [unary_dispatch(act.op, act.params, None, "y", math.prod(c.shapes["y"]))]


def _lower_concat_act(c: Call) -> list[Dispatch]:
    """concat's copies into y, then the activation over y in place."""
    act = FUSED_ACTIVATIONS[c.params["activation"]]
    return _lower_concat(c) + [unary_dispatch(act.op, act.params, None, "y", math.prod(c.shapes["y"]))]


# ------------------------------------------------------------------- CPU plan lowering
def swiglu_cpu(plan, node) -> None:
    """silu(gate) * up for each row of x = [gate | up]."""
    x, y = plan.input(node, "x"), plan.output(node)
    plan.need(node, x.dtype == np.float32 and x.ndim == 2 and y.shape == (x.shape[0], x.shape[1] // 2), "float32 rows")
    plan.add("glu", x=cpu.address(x), y=cpu.address(y), F=y.shape[1], gated=True, rows=x.shape[0])


# ------------------------------------------------------------------- backward (compile/autodiff.py)
def _swiglu_grad_infer(specs, params):
    x, dy = specs["x"], specs["dy"]
    expect(x.dtype == dy.dtype == "float32" and len(x.shape) == len(dy.shape), f"x and dy must be float32: {x.describe()}, {dy.describe()}")
    return {"dx": (x.shape, "float32")}


def swiglu_grad_ref(ctx, p, x, dy):
    """dx = [dy * up * s * (1 + gate * (1 - s)) | dy * silu(gate)] for x = [gate | up], s = sigmoid(gate),
    in float64. Ports: x (swiglu's input), dy."""
    half = x.shape[-1] // 2
    gate, up = x[..., :half].astype(np.float64), x[..., half:].astype(np.float64)
    s = 0.5 * (1.0 + np.tanh(0.5 * gate))
    return np.concatenate([dy * up * s * (1.0 + gate * (1.0 - s)), dy * gate * s], axis=-1).astype(np.float32)


def swiglu_grad_fast(ctx, p, x, dy):
    """swiglu_grad_ref's dx in float32 through the SiLU kernels: the gate half cpu.silu_backward(gate,
    dy * up), the up half dy * cpu.silu(gate)."""
    if x.dtype != np.float32 or dy.dtype != np.float32:
        return swiglu_grad_ref(ctx, p, x, dy)
    half = x.shape[-1] // 2
    gate = np.ascontiguousarray(x[..., :half])                 # (..., half)
    dx = np.empty(x.shape, np.float32)                         # (..., 2 * half): [d gate | d up]
    dx[..., :half] = cpu.silu_backward(gate, dy * x[..., half:])
    dx[..., half:] = dy * cpu.silu(gate)
    return dx


def swiglu_backward(g, node) -> None:
    """d(swiglu) through swiglu_grad."""
    g.accumulate(node, "x", g.emit("swiglu_grad", {"x": node.inputs["x"], "dy": g.grad(node, "y")}, outputs=("dx",))[0])


def linear_act_backward(g, node) -> None:
    """d(act(x W^T + b)): the product recomputed (a linear node) when the activation's gradient reads its
    input, the activation's grad op, then linear's gradients."""
    act = FUSED_ACTIVATIONS[node.params["activation"]]
    z = None
    if act.op in GRAD_FROM_INPUT:
        z = g.emit("linear", {p: node.inputs[p] for p in ("x", "weight", "bias") if p in node.inputs})[0]
    dz = activation_grad(g, act.op, act.params, z, node.outputs["y"], g.grad(node, "y"), f"node {node.id!r}")
    linear_grads(g, node, dz)


def linear_split_backward(g, node) -> None:
    """d(linear_split): the outputs' gradients side by side (zeros for an output none reaches), then
    linear_grad_input against the stacked weight (a merged weight is frozen: no weight gradient)."""
    if g.needs(node, "weight"):
        raise UnsupportedError(f"node {node.id!r} (linear_split): its stacked weight cannot train")
    parts = {}
    for i, port in enumerate(p for p in ("y0", "y1", "y2", "y3") if p in node.outputs):
        grad = g.grad(node, port)
        parts[f"x{i}"] = grad if grad is not None else g.emit("fill_like", {"x": node.outputs[port]}, {"value": 0.0})[0]
    dy = g.emit("concat", parts, {"axis": -1})[0]
    linear_grads(g, node, dy)


def add_n_backward(g, node) -> None:
    """d(add_n): dy (through its activation's gradient when it has one) to every input, summed over its
    broadcast axes."""
    dy = g.grad(node, "y")
    if "activation" in node.params:  # the sum recomputed when the activation's gradient reads its input
        act = FUSED_ACTIVATIONS[node.params["activation"]]
        total = g.emit("add_n", dict(node.inputs))[0] if act.op in GRAD_FROM_INPUT else None
        dy = activation_grad(g, act.op, act.params, total, node.outputs["y"], dy, f"node {node.id!r}")
    for port, name in node.inputs.items():
        if g.needs(node, port):
            g.accumulate(node, port, g.reduce_to(dy, g.shape(name)))


def concat_act_backward(g, node) -> None:
    """d(act(concat(xs))): the activation's gradient (the concat recomputed when that reads its input), then
    concat's backward on the node as a plain concat."""
    act = FUSED_ACTIVATIONS[node.params["activation"]]
    params = {k: v for k, v in node.params.items() if k != "activation"}
    z = g.emit("concat", dict(node.inputs), params)[0] if act.op in GRAD_FROM_INPUT else None
    dz = activation_grad(g, act.op, act.params, z, node.outputs["y"], g.grad(node, "y"), f"node {node.id!r}")
    pre = f"{node.id}/pre_activation"
    g.add_gradient(pre, dz)
    concat_backward(g, Node(node.id, "concat", dict(node.inputs), {"y": pre}, params))


register(OpDef("swiglu_grad", "activation", ("x", "dy"), ("dx",), _swiglu_grad_infer, swiglu_grad_ref,
               swiglu_grad_fast))
register(OpDef("linear_split", "matmul", ("x", "weight"), tuple(f"y{i}" if i < 2 else f"y{i}?" for i in range(MAX_SPLIT)),
               _linear_split_infer, linear_split_ref, linear_split_fast, into=linear_split_into, cpu=linear_cpu,
               gpu=Lowering(("matmul", "matmul_q", "gemv_q"), _lower_linear_split, check_linear),
               backward=linear_split_backward))
register(OpDef("swiglu", "activation", ("x",), ("y",), _swiglu_infer, swiglu_ref, swiglu_fast, into=swiglu_into, cpu=swiglu_cpu,
               gpu=Lowering(("swiglu",), _lower_swiglu, float_only("x")), backward=swiglu_backward))
register(OpDef("linear_act", "matmul", ("x", "weight", "bias?"), ("y",), _linear_act_infer, linear_act_ref,
               linear_act_fast, into=linear_act_into, cpu=linear_cpu,
               gpu=Lowering(("matmul", "matmul_q", "gemv_q"), _lower_linear, check_linear),
               backward=linear_act_backward))
register(OpDef("concat_act", "shape", ("x0",) + tuple(f"x{i}?" for i in range(1, MAX_CONCAT_INPUTS)), ("y",),
               _concat_act_infer, concat_act_ref, concat_act_fast, cpu=concat_cpu,
               gpu=Lowering(("copy", "unary"), _lower_concat_act, _check_concat), backward=concat_act_backward))
register(OpDef("add_n", "elementwise", ("x0", "x1") + tuple(f"x{i}?" for i in range(2, MAX_ADD_N)), ("y",),
               _add_n_infer, add_n_ref, add_n_fast, into=add_n_into, cpu=binary_cpu,
               gpu=Lowering(("binary", "unary"), _lower_add_n, _check_add_n), backward=add_n_backward))
