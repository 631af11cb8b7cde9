"""More arithmetic for imported graphs: sub, div, pow, sqrt, reduce_mean, matmul (two activations); sum_to
and scale (gradients), and the backward of sub, div, sqrt, reduce_mean, matmul and scale."""

from __future__ import annotations

import math
import numpy as np

from volvox import cpu
from volvox.errors import KernelError, UnsupportedError
from volvox.ir.graph import expect, same_dim
from volvox.ops.registry import OpDef, register
from volvox.ops.elementwise import _binary_infer, _unary_infer, binary_cpu, binary_into, broadcast_shape, unary_cpu
from volvox.ops.gpu import MAX_GROUPS, Call, Dispatch, Lowering, binary_lowering, float_only, grid_1d, matmul_dispatch, unary_lowering


def sub_ref(ctx, p, a, b):
    """a - b."""
    return a - b


def div_ref(ctx, p, a, b):
    """a / b (float)."""
    return (a.astype(np.float64) / b).astype(a.dtype)


def div_fast(ctx, p, a, b):
    """a / b in the input dtype."""
    return a / b


def pow_ref(ctx, p, a, b):
    """a ** b (float)."""
    return np.power(a.astype(np.float64), b).astype(a.dtype)


def pow_fast(ctx, p, a, b):
    """a ** b; a square when b is the scalar 2."""
    if b.size == 1 and b.ndim <= a.ndim and float(b.reshape(-1)[0]) == 2.0:
        return np.square(a)
    return np.power(a, b)


def sqrt_ref(ctx, p, x):
    """sqrt(x)."""
    return np.sqrt(x)


def _reduce_infer(specs, params):
    x = specs["x"]
    n = len(x.shape)
    axes = sorted({int(a) % n for a in params["axes"]}) if n else []
    expect(all(-n <= int(a) < n for a in params["axes"]), f"axes {params['axes']} out of range for {x.describe()}")
    keep = bool(params.get("keepdims", True))
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes)
    return {"y": (shape, x.dtype)}


def reduce_mean_ref(ctx, p, x):
    """Mean over ``axes`` (keepdims default true), float64 sums."""
    axes = tuple(int(a) for a in p["axes"])
    return x.mean(axis=axes, keepdims=bool(p.get("keepdims", True)), dtype=np.float64).astype(x.dtype)


def reduce_mean_fast(ctx, p, x):
    """Mean over ``axes`` in the input dtype."""
    return x.mean(axis=tuple(int(a) for a in p["axes"]), keepdims=bool(p.get("keepdims", True)))


def _matmul_infer(specs, params):
    a, b = specs["a"], specs["b"]
    expect(a.dtype == b.dtype == "float32" and len(a.shape) >= 2 and len(b.shape) >= 2,
           f"a and b must be float32 matrices (or stacks): {a.describe()}, {b.describe()}")
    expect(same_dim(a.shape[-1], b.shape[-2]), f"inner dims differ: {a.describe()} @ {b.describe()}")
    return {"y": (broadcast_shape(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]), "float32")}


def matmul_ref(ctx, p, a, b):
    """Batched a @ b (numpy broadcasting over leading dims), float64."""
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)


def matmul_fast(ctx, p, a, b):
    """Batched a @ b in float32 (BLAS)."""
    return a @ b


# ------------------------------------------------------------------ GPU lowerings
def _check_matmul(specs, params):
    a, b = specs["a"].shape[:-2], specs["b"].shape[:-2]
    if a and b and (len(a) != len(b) or any(isinstance(x, int) and isinstance(y, int) and x != y for x, y in zip(a, b))):
        return "batch dims broadcast partially"
    return None


def _lower_matmul(c: Call) -> list[Dispatch]:
    """Batched a (..., m, k) @ b (..., k, n): b read as W^T through strides; a 2-D operand is broadcast."""
    a, b, out = c.shapes["a"], c.shapes["b"], c.shapes["y"]
    m, k, n = a[-2], a[-1], b[-1]
    batch = math.prod(out[:-2])
    na, nb = math.prod(a[:-2]), math.prod(b[:-2])
    if na not in (1, batch) or nb not in (1, batch) or batch > MAX_GROUPS:
        raise KernelError(f"matmul {a} @ {b}: batch dims broadcast partially or exceed {MAX_GROUPS}")
    return [matmul_dispatch("a", "b", None, "y", m, k, n, w_n=1, w_k=n, batch=batch,
                            x_batch=m * k if na > 1 else 0, w_batch=k * n if nb > 1 else 0)]


def _check_reduce_mean(specs, params):
    x = specs["x"]
    n = len(x.shape)
    axes = sorted({int(a) % n for a in params["axes"]}) if n else []
    if x.dtype != "float32":
        return f"x is {x.dtype}"
    return None if axes and axes == list(range(n - len(axes), n)) else f"axes {params['axes']} are not the trailing ones"


def _lower_reduce_mean(c: Call) -> list[Dispatch]:
    x = c.shapes["x"]
    k = len({int(a) % len(x) for a in c.params["axes"]})
    rows, n = math.prod(x[:len(x) - k]), math.prod(x[len(x) - k:])
    return [Dispatch("reduce_mean", ["x", "y"], grid_1d(rows), dict(rows=rows, n=n))]


# ------------------------------------------------------------------- CPU plan lowering
def pow_cpu(plan, node) -> None:
    """pow by the constant 2 as numpy's float32 square (other exponents run as an island)."""
    x, e = plan.input(node, "a"), plan.weights.get(node.inputs["b"])
    if isinstance(e, np.ndarray) and e.size == 1 and e.ndim <= x.ndim and float(e.reshape(-1)[0]) == 2.0:
        unary_cpu("square", "a")(plan, node)
    else:
        plan.island(node)


# ------------------------------------------------------------------- backward (compile/autodiff.py)
def _sum_to_infer(specs, params):
    x = specs["x"]
    lead, axes = int(params["lead"]), [int(a) for a in params["axes"]]
    rest = x.shape[lead:]
    expect(0 <= lead <= len(x.shape) and all(0 <= a < len(rest) for a in axes),
           f"lead {lead} / axes {axes} do not fit {x.describe()}")
    return {"y": (tuple(1 if i in axes else d for i, d in enumerate(rest)), x.dtype)}


def sum_to_ref(ctx, p, x):
    """x summed over its ``lead`` leading axes (dropped) and over ``axes`` of the rest (kept as 1): the
    gradient of an operand numpy broadcast to x's shape. float64 sums."""
    lead = int(p["lead"])
    y = x.sum(axis=tuple(range(lead)), dtype=np.float64) if lead else x.astype(np.float64)
    if p["axes"]:
        y = y.sum(axis=tuple(int(a) for a in p["axes"]), keepdims=True)
    return np.asarray(y, dtype=x.dtype)


def sum_to_fast(ctx, p, x):
    """sum_to_ref through cpu.column_sums when only leading axes are summed (a bias's gradient: float32,
    double sums, rows in order); the reference otherwise."""
    lead = int(p["lead"])
    if x.dtype != np.float32 or p["axes"] or not lead or x.ndim == lead:
        return sum_to_ref(ctx, p, x)
    rest = x.shape[lead:]
    return cpu.column_sums(np.ascontiguousarray(x).reshape(-1, math.prod(rest))).reshape(rest)


def scale_ref(ctx, p, x):
    """x * ``factor`` (a constant)."""
    return (x * np.asarray(p["factor"], x.dtype)).astype(x.dtype)


def sub_backward(g, node) -> None:
    """d(a - b): da = dy, db = -dy, each summed over its broadcast axes."""
    dy = g.grad(node, "y")
    if g.needs(node, "a"):
        g.accumulate(node, "a", g.reduce_to(dy, g.shape(node.inputs["a"])))
    if g.needs(node, "b"):
        neg = g.emit("scale", {"x": dy}, {"factor": -1.0})[0]
        g.accumulate(node, "b", g.reduce_to(neg, g.shape(node.inputs["b"])))


def scale_backward(g, node) -> None:
    """d(x * factor): dy * factor."""
    g.accumulate(node, "x", g.emit("scale", {"x": g.grad(node, "y")}, node.params)[0])


def div_backward(g, node) -> None:
    """d(a / b): da = dy / b, db = -(dy / b) * y, each summed over its broadcast axes."""
    dy_b = g.emit("div", {"a": g.grad(node, "y"), "b": node.inputs["b"]})[0]
    if g.needs(node, "a"):
        g.accumulate(node, "a", g.reduce_to(dy_b, g.shape(node.inputs["a"])))
    if g.needs(node, "b"):
        prod = g.emit("mul", {"a": dy_b, "b": node.outputs["y"]})[0]
        g.accumulate(node, "b", g.reduce_to(g.emit("scale", {"x": prod}, {"factor": -1.0})[0], g.shape(node.inputs["b"])))


def sqrt_backward(g, node) -> None:
    """d(sqrt x): dy / (2 y)."""
    ratio = g.emit("div", {"a": g.grad(node, "y"), "b": node.outputs["y"]})[0]
    g.accumulate(node, "x", g.emit("scale", {"x": ratio}, {"factor": 0.5})[0])


def reduce_mean_backward(g, node) -> None:
    """d(mean over axes): dy / n spread back over the reduced axes (their sizes must be known)."""
    x = g.shape(node.inputs["x"])
    axes = sorted({int(a) % len(x) for a in node.params["axes"]})
    if not all(isinstance(x[a], int) for a in axes):
        raise UnsupportedError(f"node {node.id!r} (reduce_mean): cannot differentiate a mean over symbolic axes")
    dy = g.grad(node, "y")
    if not node.params.get("keepdims", True):  # the reduced axes back as 1s
        kept = [1 if i in axes else d for i, d in enumerate(x)]
        if not all(isinstance(d, int) for d in kept):
            raise UnsupportedError(f"node {node.id!r} (reduce_mean): keepdims=0 over a symbolic shape")
        dy = g.emit("reshape", {"x": dy}, {"shape": kept})[0]
    share = g.emit("fill_like", {"x": node.inputs["x"]}, {"value": 1.0 / math.prod(x[a] for a in axes)})[0]
    g.accumulate(node, "x", g.emit("mul", {"a": share, "b": dy})[0])


def swap_last_two(g, name: str) -> str:
    """A transpose node swapping ``name``'s last two axes."""
    n = len(g.shape(name))
    return g.emit("transpose", {"x": name}, {"perm": list(range(n - 2)) + [n - 1, n - 2]})[0]


def matmul_backward(g, node) -> None:
    """d(a @ b): da = dy @ b^T, db = a^T @ dy, each summed over the batch axes it was broadcast along."""
    dy = g.grad(node, "y")
    a, b = node.inputs["a"], node.inputs["b"]
    if g.needs(node, "a"):
        da = g.emit("matmul", {"a": dy, "b": swap_last_two(g, b)})[0]
        g.accumulate(node, "a", g.reduce_to(da, g.shape(a)))
    if g.needs(node, "b"):
        db = g.emit("matmul", {"a": swap_last_two(g, a), "b": dy})[0]
        g.accumulate(node, "b", g.reduce_to(db, g.shape(b)))


register(OpDef("sum_to", "reduce", ("x",), ("y",), _sum_to_infer, sum_to_ref, sum_to_fast))
register(OpDef("scale", "elementwise", ("x",), ("y",), _unary_infer, scale_ref, backward=scale_backward))
register(OpDef("sub", "elementwise", ("a", "b"), ("y",), _binary_infer, sub_ref, into=binary_into(np.subtract), cpu=binary_cpu,
               gpu=binary_lowering("sub"), backward=sub_backward))
register(OpDef("div", "elementwise", ("a", "b"), ("y",), _binary_infer, div_ref, div_fast, cpu=binary_cpu,
               gpu=binary_lowering("div"), backward=div_backward))
register(OpDef("pow", "elementwise", ("a", "b"), ("y",), _binary_infer, pow_ref, pow_fast, cpu=pow_cpu,
               gpu=binary_lowering("pow")))
register(OpDef("sqrt", "elementwise", ("x",), ("y",), _unary_infer, sqrt_ref, cpu=unary_cpu("sqrt"),
               gpu=unary_lowering("sqrt"), backward=sqrt_backward))
register(OpDef("reduce_mean", "reduce", ("x",), ("y",), _reduce_infer, reduce_mean_ref, reduce_mean_fast,
               gpu=Lowering(("reduce_mean",), _lower_reduce_mean, _check_reduce_mean), backward=reduce_mean_backward))
register(OpDef("matmul", "matmul", ("a", "b"), ("y",), _matmul_infer, matmul_ref, matmul_fast,
               gpu=Lowering(("matmul",), _lower_matmul, lambda specs, params: float_only("a", "b")(specs, params) or _check_matmul(specs, params)),
               backward=matmul_backward))
