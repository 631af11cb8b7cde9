"""Activations for vision graphs: relu, clip, sigmoid, hard_sigmoid, hard_swish, leaky_relu, softmax;
and the activations the graph compiler folds into the op before them (``FUSED_ACTIVATIONS``); their grad
ops, and activation_grad, which the fused ops' backward shares.

References compute in float64; numpy float32 is the fast path where it differs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from volvox import cpu
from volvox.errors import UnsupportedError
from volvox.ir.graph import expect
from volvox.ops.codes import FN
from volvox.ops.registry import OpDef, get_op, register
from volvox.ops.elementwise import _unary_infer, unary_cpu, unary_kernels
from volvox.ops.gpu import Call, Dispatch, Lowering, grid_1d, rows_of, unary_lowering


def _float_unary_infer(specs, params):
    expect(specs["x"].dtype == "float32", f"x must be float32, got {specs['x'].describe()}")
    return _unary_infer(specs, params)


def relu_ref(ctx, p, x):
    """max(x, 0)."""
    return np.maximum(x, np.float32(0))


def relu_into(x, out):
    """out = max(x, 0)."""
    return np.maximum(x, np.float32(0), out=out)


def clip_ref(ctx, p, x):
    """min(max(x, lo), hi) (params: min, max; either may be absent)."""
    lo, hi = p.get("min"), p.get("max")
    return np.clip(x, -np.inf if lo is None else lo, np.inf if hi is None else hi).astype(np.float32)


def sigmoid_ref(ctx, p, x):
    """1 / (1 + exp(-x)) in float64."""
    return (0.5 * (1.0 + np.tanh(0.5 * x.astype(np.float64)))).astype(np.float32)


def sigmoid_into(x, out):
    """out = 1 / (1 + exp(-x)) in float32 through the engine's unary step (the sigmoid op's kernel, so a
    fused sigmoid changes no bits); ``out`` may be ``x``."""
    return cpu.unary(x, FN["sigmoid"], out=out)


def hard_sigmoid_ref(ctx, p, x):
    """clip(alpha * x + beta, 0, 1) (ONNX defaults alpha=0.2, beta=0.5)."""
    y = p.get("alpha", 0.2) * x.astype(np.float64) + p.get("beta", 0.5)
    return np.clip(y, 0.0, 1.0).astype(np.float32)


def hard_swish_ref(ctx, p, x):
    """x * relu6(x + 3) / 6."""
    x64 = x.astype(np.float64)
    return (x64 * np.clip(x64 + 3.0, 0.0, 6.0) / 6.0).astype(np.float32)


def hard_swish_into(x, out):
    """out = x * relu6(x + 3) / 6 through the engine's unary step; ``out`` may be ``x``."""
    return cpu.unary(x, FN["hard_swish"], out=out)


def leaky_relu_ref(ctx, p, x):
    """x where x >= 0, else alpha * x (ONNX's default alpha 0.01)."""
    x64 = x.astype(np.float64)
    return np.where(x64 >= 0, x64, np.float32(p.get("alpha", 0.01)) * x64).astype(np.float32)


def tanh_ref(ctx, p, x):
    """tanh(x) in float64."""
    return np.tanh(x.astype(np.float64)).astype(np.float32)


def unary_into(write):
    """The op-level ``into(ctx, p, out, x)`` of an activation computed by ``write(x, out)``."""
    def into(ctx, p, out, x):
        return write(x, out)
    return into


def _softmax_infer(specs, params):
    x = specs["x"]
    expect(x.dtype == "float32" and len(x.shape) >= 1, f"x must be float32, got {x.describe()}")
    axis = int(params.get("axis", -1))
    expect(-len(x.shape) <= axis < len(x.shape), f"axis {axis} out of range for {x.describe()}")
    return {"y": (x.shape, "float32")}


def softmax_ref(ctx, p, x):
    """exp(beta * (x - max)) / sum over ``axis`` (default -1), float64."""
    axis = int(p.get("axis", -1))
    z = p.get("beta", 1.0) * x.astype(np.float64)
    e = np.exp(z - z.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(np.float32)


def softmax_fast(ctx, p, x):
    """softmax in float32."""
    axis = int(p.get("axis", -1))
    z = x * np.float32(p.get("beta", 1.0)) if p.get("beta", 1.0) != 1.0 else x
    e = np.exp(z - z.max(axis=axis, keepdims=True))
    e /= e.sum(axis=axis, keepdims=True)
    return e


# ------------------------------------------------------------------ GPU lowerings
def _check_softmax(specs, params):
    axis = int(params.get("axis", -1))
    return None if axis in (-1, len(specs["x"].shape) - 1) else f"softmax over axis {axis} (GPU: last axis only)"


def _lower_softmax(c: Call) -> list[Dispatch]:
    rows, n = rows_of(c.shapes["x"])
    return [Dispatch("softmax", ["x", "y"], grid_1d(rows), dict(rows=rows, n=n, beta=float(c.params.get("beta", 1.0))))]


# ------------------------------------------------------------------- backward (compile/autodiff.py)
def _grad_infer(specs, params):
    a, dy = specs.get("x") or specs["y"], specs["dy"]
    expect(a.dtype == dy.dtype and a.shape == dy.shape, f"dy must be shaped like {a.name}: {dy.describe()} vs {a.describe()}")
    return {"dx": (a.shape, a.dtype)}


def relu_grad_ref(ctx, p, x, dy):
    """dx = dy where x > 0, else 0. Ports: x (relu's input), dy."""
    return np.where(x > 0, dy, 0).astype(dy.dtype)


def clip_grad_ref(ctx, p, x, dy):
    """dx = dy where min < x < max, else 0 (params: clip's min, max). Ports: x, dy."""
    lo, hi = p.get("min"), p.get("max")
    inside = (x > (-np.inf if lo is None else lo)) & (x < (np.inf if hi is None else hi))
    return np.where(inside, dy, 0).astype(dy.dtype)


def hard_sigmoid_grad_ref(ctx, p, x, dy):
    """dx = dy * alpha where 0 < alpha * x + beta < 1, else 0. Ports: x, dy."""
    alpha = p.get("alpha", 0.2)
    z = alpha * x.astype(np.float64) + p.get("beta", 0.5)
    return np.where((z > 0) & (z < 1), dy * alpha, 0).astype(dy.dtype)


def hard_swish_grad_ref(ctx, p, x, dy):
    """dx = dy * (0 below -3, (2x + 3) / 6 up to 3, 1 above), torch's hardswish gradient. Ports: x, dy."""
    x64 = x.astype(np.float64)
    return (dy * np.where(x64 < -3, 0.0, np.where(x64 <= 3, (2 * x64 + 3) / 6, 1.0))).astype(dy.dtype)


def leaky_relu_grad_ref(ctx, p, x, dy):
    """dx = dy where x > 0, else alpha * dy. Ports: x, dy."""
    return np.where(x > 0, dy, dy * np.float32(p.get("alpha", 0.01))).astype(dy.dtype)


def sigmoid_grad_ref(ctx, p, y, dy):
    """dx = dy * y * (1 - y) from sigmoid's output y, in float64. Ports: y, dy."""
    y64 = y.astype(np.float64)
    return (dy * y64 * (1.0 - y64)).astype(dy.dtype)


def tanh_grad_ref(ctx, p, y, dy):
    """dx = dy * (1 - y^2) from tanh's output y, in float64. Ports: y, dy."""
    y64 = y.astype(np.float64)
    return (dy * (1.0 - y64 * y64)).astype(dy.dtype)


def softmax_grad_ref(ctx, p, y, dy):
    """dx = beta * y * (dy - sum(dy * y)) over softmax's ``axis``, from its output y, in float64. Ports: y, dy."""
    axis = int(p.get("axis", -1))
    y64 = y.astype(np.float64)
    inner = (dy * y64).sum(axis=axis, keepdims=True)
    return (p.get("beta", 1.0) * y64 * (dy - inner)).astype(dy.dtype)


GRAD_FROM_INPUT = ("relu", "silu", "gelu", "clip", "hard_sigmoid", "hard_swish", "leaky_relu")  # <op>_grad(x, dy)
GRAD_FROM_OUTPUT = ("sigmoid", "tanh", "softmax")    # <op>_grad(y, dy)


def activation_grad(g, op: str, params: dict, x: str | None, y: str, dy: str, where: str) -> str:
    """Emit the gradient of activation ``op`` (its node's ``params``) with respect to its input ``x``, given
    its output ``y`` and dy; returns dx's name. UnsupportedError names ``where`` for an activation without one."""
    if op in GRAD_FROM_INPUT:
        return g.emit(op + "_grad", {"x": x, "dy": dy}, params, outputs=("dx",))[0]
    if op in GRAD_FROM_OUTPUT:
        return g.emit(op + "_grad", {"y": y, "dy": dy}, params, outputs=("dx",))[0]
    raise UnsupportedError(f"{where}: activation {op!r} has no backward")


def activation_backward(g, node) -> None:
    """d(activation) through its grad op: ``<op>_grad(x, dy)`` (relu, silu, gelu) or ``<op>_grad(y, dy)`` (sigmoid,
    tanh, softmax: their gradient is a function of their output)."""
    g.accumulate(node, "x", activation_grad(g, node.op, node.params, node.inputs["x"], node.outputs["y"],
                                            g.grad(node, "y"), f"node {node.id!r}"))


register(OpDef("relu_grad", "activation", ("x", "dy"), ("dx",), _grad_infer, relu_grad_ref))
register(OpDef("clip_grad", "activation", ("x", "dy"), ("dx",), _grad_infer, clip_grad_ref))
register(OpDef("hard_sigmoid_grad", "activation", ("x", "dy"), ("dx",), _grad_infer, hard_sigmoid_grad_ref))
register(OpDef("hard_swish_grad", "activation", ("x", "dy"), ("dx",), _grad_infer, hard_swish_grad_ref))
register(OpDef("leaky_relu_grad", "activation", ("x", "dy"), ("dx",), _grad_infer, leaky_relu_grad_ref))
register(OpDef("sigmoid_grad", "activation", ("y", "dy"), ("dx",), _grad_infer, sigmoid_grad_ref))
register(OpDef("tanh_grad", "activation", ("y", "dy"), ("dx",), _grad_infer, tanh_grad_ref))
register(OpDef("softmax_grad", "activation", ("y", "dy"), ("dx",), _grad_infer, softmax_grad_ref))
register(OpDef("relu", "activation", ("x",), ("y",), _float_unary_infer, relu_ref, into=unary_into(relu_into),
               cpu=unary_cpu("relu"),
               gpu=unary_lowering("relu"), backward=activation_backward))
register(OpDef("clip", "activation", ("x",), ("y",), _float_unary_infer, clip_ref,
               gpu=unary_lowering("clip"), backward=activation_backward))
register(OpDef("sigmoid", "activation", ("x",), ("y",), _float_unary_infer, sigmoid_ref,
               **unary_kernels("sigmoid"), backward=activation_backward))
register(OpDef("tanh", "activation", ("x",), ("y",), _float_unary_infer, tanh_ref, backward=activation_backward))
register(OpDef("hard_sigmoid", "activation", ("x",), ("y",), _float_unary_infer, hard_sigmoid_ref,
               **unary_kernels("hard_sigmoid"), backward=activation_backward))
register(OpDef("hard_swish", "activation", ("x",), ("y",), _float_unary_infer, hard_swish_ref,
               **unary_kernels("hard_swish"), backward=activation_backward))
register(OpDef("leaky_relu", "activation", ("x",), ("y",), _float_unary_infer, leaky_relu_ref,
               **unary_kernels("leaky_relu"), backward=activation_backward))
register(OpDef("softmax", "activation", ("x",), ("y",), _softmax_infer, softmax_ref, softmax_fast,
               gpu=Lowering(("softmax",), _lower_softmax, _check_softmax), backward=activation_backward))


# ------------------------------------------------------------------------------ fused activations
# An activation the graph compiler folds into the node before it (linear_act, concat_act): the
# fused node's reference runs the standalone op's ``ref``; its fast path writes act(x) into the
# node's own output buffer with ``into`` (float32; out may be x).

def relu6_into(x, out):
    """out = min(max(x, 0), 6)."""
    return np.clip(x, 0, 6, out=out)


def silu_into(x, out):
    """out = x * sigmoid(x) through silu's CPU kernel; ``out`` may be ``x``."""
    return cpu.silu(x, out=out)


def gelu_tanh_into(x, out):
    """out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) through gelu's CPU kernel; ``out`` may be ``x``."""
    return cpu.gelu(x, "tanh", out=out)


def gelu_into(x, out):
    """out = x Phi(x) (exact GELU, through erfc) with gelu's CPU kernel; ``out`` may be ``x``."""
    return cpu.gelu(x, "none", out=out)


@dataclass(frozen=True)
class FusedActivation:
    """An activation a fused node applies: the standalone op (and params) it stands for, and its kernel."""

    op: str
    params: dict
    into: Callable  # into(x, out) writes act(x) into out (float32; out may be x)


FUSED_ACTIVATIONS: dict[str, FusedActivation] = {
    "relu": FusedActivation("relu", {}, relu_into),
    "relu6": FusedActivation("clip", {"min": 0, "max": 6}, relu6_into),
    "sigmoid": FusedActivation("sigmoid", {}, sigmoid_into),
    "silu": FusedActivation("silu", {}, silu_into),
    "gelu": FusedActivation("gelu", {"approximate": "none"}, gelu_into),
    "gelu_tanh": FusedActivation("gelu", {"approximate": "tanh"}, gelu_tanh_into),
    "hard_swish": FusedActivation("hard_swish", {}, hard_swish_into),
}


def activation_name(op: str, params: dict) -> str | None:
    """The FUSED_ACTIVATIONS name of a node computing ``op`` with ``params``, or None."""
    if op == "clip":
        return {None: "relu", 6: "relu6"}.get(params.get("max")) if params.get("min") == 0 else None
    if op == "gelu":
        return "gelu_tanh" if params.get("approximate", "none") == "tanh" else "gelu"
    return op if op in ("relu", "sigmoid", "silu", "hard_swish") else None


def expect_fused_activation(params: dict) -> str:
    """The ``activation`` param of a fused node; ShapeError unless it names a FUSED_ACTIVATIONS entry."""
    act = params.get("activation")
    expect(act in FUSED_ACTIVATIONS, f"activation must be one of {sorted(FUSED_ACTIVATIONS)}, got {act!r}")
    return act


def activation_ref(name: str, x: np.ndarray) -> np.ndarray:
    """The reference of fused activation ``name``: its standalone op's ``ref``."""
    act = FUSED_ACTIVATIONS[name]
    return get_op(act.op).ref(None, act.params, x)
