"""Normalisation ops: RMSNorm and LayerNorm over the last axis; their grad ops."""

from __future__ import annotations

import numpy as np

from volvox import cpu
from volvox.errors import WeightsError
from volvox.ir.graph import expect, same_dim
from volvox.ops.registry import OpDef, register
from volvox.ops.gpu import Call, Dispatch, Lowering, float_only, grid_1d, rows_of


def _norm_infer(specs, params):
    x, w = specs["x"], specs["weight"]
    expect(x.dtype == "float32", f"x must be float32, got {x.describe()}")
    expect(w.dtype == "float32", f"weight must be float32, got {w.describe()}")
    expect(len(w.shape) == 1 and same_dim(w.shape[0], x.shape[-1]),
           f"weight must be 1-D of x's last dim: {w.describe()} vs {x.describe()}")
    if "bias" in specs:
        expect(specs["bias"].shape == w.shape, f"bias must match weight: {specs['bias'].describe()}")
    float(params.get("eps", 1e-5))
    return {"y": (x.shape, "float32")}


def rms_norm_ref(ctx, p, x, weight):
    """x / sqrt(mean(x^2) + eps) * weight (mean in float64, like ggml)."""
    ms = np.mean(np.square(x, dtype=np.float64), axis=-1, keepdims=True)
    return (x * (1.0 / np.sqrt(ms + p.get("eps", 1e-5))).astype(np.float32) * weight).astype(np.float32)


def rms_norm_fast(ctx, p, x, weight):
    """RMSNorm through the CPU kernel."""
    return cpu.rms_norm(x.reshape(-1, x.shape[-1]), weight, p.get("eps", 1e-5)).reshape(x.shape)


def rms_norm_into(ctx, p, out, x, weight):
    """rms_norm_fast written into ``out`` (x's shape)."""
    cpu.rms_norm(x.reshape(-1, x.shape[-1]), weight, p.get("eps", 1e-5), out=out.reshape(-1, x.shape[-1]))
    return out


def layer_norm_ref(ctx, p, x, weight, bias=None):
    """(x - mean) / sqrt(var + eps) * weight + bias."""
    x64 = x.astype(np.float64)
    mu = x64.mean(axis=-1, keepdims=True)
    var = np.square(x64 - mu).mean(axis=-1, keepdims=True)
    y = (x64 - mu) / np.sqrt(var + p.get("eps", 1e-5)) * weight
    if bias is not None:
        y += bias
    return y.astype(np.float32)


def _all_f32(*arrays) -> bool:
    """Whether every given operand (None: absent) is float32, the only dtype the kernel takes."""
    return all(a is None or a.dtype == np.float32 for a in arrays)


def layer_norm_fast(ctx, p, x, weight, bias=None):
    """LayerNorm through the CPU kernel (statistics in double, like the reference)."""
    if not _all_f32(x, weight, bias):
        return layer_norm_ref(ctx, p, x, weight, bias)
    return layer_norm_into(ctx, p, np.empty(x.shape, np.float32), x, weight, bias)


def layer_norm_into(ctx, p, out, x, weight, bias=None):
    """layer_norm_fast written into ``out`` (x's shape)."""
    if not _all_f32(x, weight, bias):
        np.copyto(out, layer_norm_ref(ctx, p, x, weight, bias))
        return out
    cpu.layer_norm(x.reshape(-1, x.shape[-1]), weight, bias, p.get("eps", 1e-5), out=out.reshape(-1, x.shape[-1]))
    return out


def check_norm_weights(graph, weights: dict, where: str) -> None:
    """Refuse NaN / inf in the weights and biases of norm nodes (checked at load: they are small,
    and one bad value would silently turn every activation after it into NaN)."""
    for node in graph.nodes:
        if node.op not in ("rms_norm", "layer_norm"):
            continue
        for port in ("weight", "bias"):
            value = weights.get(node.inputs.get(port))
            if isinstance(value, np.ndarray) and value.dtype.kind == "f" and not np.isfinite(value).all():
                raise WeightsError(f"{where}: tensor {node.inputs[port]!r} ({port} of node {node.id!r}, "
                                   f"{node.op}) holds NaN or inf")


# ------------------------------------------------------------------- CPU plan lowering
def norm_cpu(plan, node) -> None:
    """rms_norm / layer_norm over the rows of x, each the weight's size."""
    x, w, y = plan.input(node, "x"), plan.input(node, "weight"), plan.output(node)
    b = plan.optional(node, "bias")
    plan.need(node, x.dtype == w.dtype == np.float32 and w.ndim == 1 and x.shape[-1] == w.size and y.size == x.size
              and (b is None or (b.dtype == np.float32 and b.shape == w.shape)), "float32 rows of the weight's size")
    fields = dict(x=cpu.address(x), weight=cpu.address(w), y=cpu.address(y), dim=w.size,
                  eps=float(node.params.get("eps", 1e-5)), rows=x.size // w.size)
    if node.op == "layer_norm":
        plan.add("layer_norm", bias=cpu.address(b), **fields)
    else:
        plan.add("rms_norm", **fields)


# ------------------------------------------------------------------ GPU lowerings
def _lower_rms(c: Call) -> list[Dispatch]:
    rows, n = rows_of(c.shapes["x"])
    return [Dispatch("rms_norm", ["x", "weight", "y"], grid_1d(rows), dict(rows=rows, n=n, eps=float(c.params.get("eps", 1e-5))))]


def _lower_layer_norm(c: Call) -> list[Dispatch]:
    rows, n = rows_of(c.shapes["x"])
    has_bias = "bias" in c.shapes
    return [Dispatch("layer_norm", ["x", "weight", "bias" if has_bias else "@dummy", "y"], grid_1d(rows),
                     dict(rows=rows, n=n, eps=float(c.params.get("eps", 1e-5)), has_bias=int(has_bias)))]


# ------------------------------------------------------------------- backward (compile/autodiff.py)
def _norm_grad_infer(specs, params):
    x, w = specs["x"], specs["weight"]
    expect(x.dtype == w.dtype == specs["dy"].dtype == "float32" and specs["dy"].shape == x.shape,
           f"x, weight and dy must be float32 with dy shaped like x: {x.describe()}, {specs['dy'].describe()}")
    return {"dx": (x.shape, "float32"), "dweight": (w.shape, "float32"), "dbias": (w.shape, "float32")}


def rms_norm_grad_ref(ctx, p, x, weight, dy):
    """(dx, dweight) of y = x * r * weight, r = 1 / sqrt(mean(x^2) + eps) per row, in float64:
    dx = r * g - x * r^3 * mean(g * x) with g = dy * weight; dweight = sum over rows of dy * x * r.
    Ports: x, weight (the forward's inputs), dy."""
    x64 = x.astype(np.float64).reshape(-1, x.shape[-1])                               # (rows, dim)
    dy64 = dy.astype(np.float64).reshape(-1, x.shape[-1])                             # (rows, dim)
    r = 1.0 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + p.get("eps", 1e-5))  # (rows, 1)
    g = dy64 * weight
    dx = r * g - x64 * r ** 3 * np.mean(g * x64, axis=-1, keepdims=True)
    dweight = (dy64 * x64 * r).sum(axis=0)
    return dx.astype(np.float32).reshape(x.shape), dweight.astype(np.float32)


def rms_norm_grad_fast(ctx, p, x, weight, dy):
    """rms_norm_grad_ref's (dx, dweight) through cpu.rms_norm_backward (float32, each row's sums in
    double)."""
    dim = x.shape[-1]
    dx, dweight = cpu.rms_norm_backward(x.reshape(-1, dim), weight, dy.reshape(-1, dim), p.get("eps", 1e-5))
    return dx.reshape(x.shape), dweight


def layer_norm_grad_ref(ctx, p, x, weight, dy):
    """(dx, dweight, dbias) of y = xhat * weight + bias, xhat = (x - mean) * r, in float64:
    dx = r * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * weight. Ports: x, weight, dy."""
    x64 = x.astype(np.float64).reshape(-1, x.shape[-1])                               # (rows, dim)
    dy64 = dy.astype(np.float64).reshape(-1, x.shape[-1])                             # (rows, dim)
    centered = x64 - x64.mean(axis=-1, keepdims=True)
    r = 1.0 / np.sqrt(np.mean(centered * centered, axis=-1, keepdims=True) + p.get("eps", 1e-5))  # (rows, 1)
    xhat = centered * r
    g = dy64 * weight
    dx = r * (g - g.mean(axis=-1, keepdims=True) - xhat * np.mean(g * xhat, axis=-1, keepdims=True))
    return (dx.astype(np.float32).reshape(x.shape), (dy64 * xhat).sum(axis=0).astype(np.float32),
            dy64.sum(axis=0).astype(np.float32))


def layer_norm_grad_fast(ctx, p, x, weight, dy):
    """layer_norm_grad_ref's (dx, dweight, dbias) through cpu.layer_norm_backward (float32, each row's
    statistics and the weight's and bias's sums in double)."""
    dim = x.shape[-1]
    dx, dweight, dbias = cpu.layer_norm_backward(x.reshape(-1, dim), weight, dy.reshape(-1, dim), p.get("eps", 1e-5))
    return dx.reshape(x.shape), dweight, dbias


def norm_backward(g, node) -> None:
    """d(rms_norm / layer_norm) through its grad op: dx, dweight (and layer_norm's dbias) from one node."""
    ports = ("dx", "dweight") if node.op == "rms_norm" else ("dx", "dweight", "dbias")
    grads = g.emit(node.op + "_grad", {"x": node.inputs["x"], "weight": node.inputs["weight"], "dy": g.grad(node, "y")},
                   node.params, outputs=ports)
    for port, grad in zip(("x", "weight", "bias"), grads):
        g.accumulate(node, port, grad)


def _rms_norm_grad_infer(specs, params):
    out = _norm_grad_infer(specs, params)
    del out["dbias"]
    return out


register(OpDef("rms_norm_grad", "norm", ("x", "weight", "dy"), ("dx", "dweight"), _rms_norm_grad_infer, rms_norm_grad_ref,
               rms_norm_grad_fast, fresh=True))
register(OpDef("layer_norm_grad", "norm", ("x", "weight", "dy"), ("dx", "dweight", "dbias"), _norm_grad_infer,
               layer_norm_grad_ref, layer_norm_grad_fast))
register(OpDef("rms_norm", "norm", ("x", "weight"), ("y",), _norm_infer, rms_norm_ref, rms_norm_fast,
               into=rms_norm_into, cpu=norm_cpu,
               gpu=Lowering(("rms_norm",), _lower_rms, float_only("x")), backward=norm_backward))
register(OpDef("layer_norm", "norm", ("x", "weight", "bias?"), ("y",), _norm_infer, layer_norm_ref, layer_norm_fast,
               into=layer_norm_into, cpu=norm_cpu,
               gpu=Lowering(("layer_norm",), _lower_layer_norm, float_only("x")), backward=norm_backward))
