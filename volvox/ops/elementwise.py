"""Elementwise ops with numpy broadcasting: add, mul, silu, gelu (and ggml's fp16-table GELU), fill_like;
their backward."""

from __future__ import annotations

import functools
import math

import numpy as np

from volvox import cpu
from volvox.errors import ShapeError
from volvox.ir.graph import expect, same_dim
from volvox.ops.codes import BIN, FN, fn_args
from volvox.ops.registry import OpDef, register
from volvox.ops.gpu import binary_lowering, unary_lowering


def broadcast_shape(a: tuple, b: tuple) -> tuple:
    """numpy broadcasting over possibly-symbolic dims; ShapeError when incompatible."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        if da == 1:
            out.append(db)
        elif db == 1:
            out.append(da)
        else:
            expect(same_dim(da, db), f"shapes {a} and {b} do not broadcast")
            out.append(da if isinstance(da, int) else db)
    return tuple(reversed(out))


def _binary_infer(specs, params):
    a, b = specs["a"], specs["b"]
    expect(a.dtype == b.dtype, f"dtypes differ: {a.describe()} vs {b.describe()}")
    return {"y": (broadcast_shape(a.shape, b.shape), a.dtype)}


def _unary_infer(specs, params):
    return {"y": (specs["x"].shape, specs["x"].dtype)}


def add_ref(ctx, p, a, b):
    """a + b."""
    return a + b


def mul_ref(ctx, p, a, b):
    """a * b."""
    return a * b


def binary_into(ufunc):
    """into(ctx, p, out, a, b) of a broadcasting ufunc (ShapeError unless ``out`` has the broadcast shape)."""
    def into(ctx, p, out, a, b):
        if out.shape != a.shape and out.shape != b.shape and out.shape != np.broadcast_shapes(a.shape, b.shape):
            raise ShapeError(f"output buffer {out.shape} is not the broadcast of {a.shape} and {b.shape}")
        return ufunc(a, b, out=out)
    return into


def silu_ref(ctx, p, x):
    """x * sigmoid(x)."""
    return x * (0.5 * (1.0 + np.tanh(0.5 * x))).astype(x.dtype)  # sigmoid without exp overflow


def silu_fast(ctx, p, x):
    """SiLU through the CPU kernel (the arithmetic of the fused swiglu, so fusing changes no bits)."""
    return cpu.silu(x) if x.dtype == np.float32 else silu_ref(ctx, p, x)


def silu_into(ctx, p, out, x):
    """silu_fast written into ``out``."""
    if x.dtype != np.float32:
        np.copyto(out, silu_ref(ctx, p, x))
        return out
    return cpu.silu(x, out=out)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu_ref(ctx, p, x):
    """GELU, exact (erf) or tanh approximation (params: approximate='none'|'tanh')."""
    x64 = x.astype(np.float64)
    if p.get("approximate", "none") == "tanh":
        y = 0.5 * x64 * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x64 + 0.044715 * x64 ** 3)))
    else:
        y = 0.5 * x64 * (1.0 + _erf(x64 / math.sqrt(2.0)))
    return y.astype(x.dtype)


@functools.cache
def _gelu_f16_table() -> np.ndarray:
    """(65536,) float32: ggml's GELU table, the tanh form in float32 of every fp16 value, rounded to fp16."""
    x = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)  # every fp16 value
    with np.errstate(invalid="ignore", over="ignore"):
        inner = np.float32(0.7978845608028654) * x * (np.float32(1.0) + np.float32(0.044715) * x * x)
        y = np.float32(0.5) * x * (np.float32(1.0) + np.tanh(inner))
    return y.astype(np.float16).astype(np.float32)


def gelu_f16_table_ref(ctx, p, x):
    """GELU as ggml's CPU backend computes it for GGUF models: x rounded to fp16 and looked up in the
    fp16 table of the tanh form; 0 below -10, x above 10. Differs from ``gelu`` (tanh) by fp16
    rounding, which 8-bit activation quantization after it would otherwise turn into other codes."""
    x = np.asarray(x, np.float32)
    table = _gelu_f16_table()[x.astype(np.float16).view(np.uint16)]
    return np.where(x <= -10, np.float32(0.0), np.where(x >= 10, x, table)).astype(np.float32)


# ------------------------------------------------------------------- CPU plan lowering
def plan_activation(plan, node) -> int:
    """The engine's code of a node's fused activation (a conv's, add_n's: none, relu, relu6), else
    Unsupported."""
    act = node.params.get("activation", "none")
    plan.need(node, act in ("none", "relu", "relu6"), f"activation {act!r}")
    return FN[act]


def broadcast_plan(plan, node, bshape: tuple, yshape: tuple) -> tuple[int, int]:
    """(b_count, b_div) of a binary step: element i of y reads b[(i // b_div) % b_count] (b_count 0: b[i])."""
    full = (1,) * (len(yshape) - len(bshape)) + tuple(bshape)
    plan.need(node, len(full) == len(yshape), "operand rank")
    if full == tuple(yshape):
        return 0, 1
    axes = [i for i, d in enumerate(full) if d != 1]
    if not axes:
        return 1, 1
    lo, hi = axes[0], axes[-1] + 1
    plan.need(node, all(full[i] == yshape[i] for i in range(lo, hi)), "a broadcast other than one block of axes")
    return int(np.prod(full[lo:hi])), int(np.prod(yshape[hi:], dtype=np.int64))


def binary_cpu(plan, node) -> None:
    """add / mul / sub / div (the second operand may broadcast over a block of axes; add and mul swap
    a broadcast first operand) and add_n, left to right in place, its ReLU / ReLU6 (fuse_add_activation)
    applied by the last step as it writes."""
    ports = ("a", "b") if node.op in BIN else tuple(p for p in node.inputs)
    xs, y = [plan.input(node, p) for p in ports], plan.output(node)
    plan.need(node, y.dtype == np.float32 and all(x.dtype == np.float32 for x in xs), "dtype")
    a, b = xs[0], xs[1]
    if a.shape != y.shape and node.op in ("add", "mul"):
        a, b = b, a
    plan.need(node, a.shape == y.shape and all(x.shape == y.shape for x in xs[2:]), "a broadcast first operand")
    b_count, b_div = broadcast_plan(plan, node, b.shape, y.shape)
    act = plan_activation(plan, node)
    if len(xs) == 2 and plan.fold_residual(node, act):  # a residual add: into the conv step before it
        return
    plan.add("binary", a=cpu.address(a), b=cpu.address(b), y=cpu.address(y), count=y.size, op=BIN.get(node.op, BIN["add"]),
             b_count=b_count, b_div=b_div, act=0 if xs[2:] else act)
    for k, x in enumerate(xs[2:], 3):  # add_n: left to right, in place
        plan.add("binary", a=cpu.address(y), b=cpu.address(x), y=cpu.address(y), count=y.size, op=BIN["add"],
                 act=act if k == len(xs) else 0)


def unary_cpu(fn: str, port: str = "x"):
    """The lowering of an elementwise op the engine's unary step runs (function ``fn`` of ops/codes.py)."""
    def lower(plan, node) -> None:
        x, y = plan.input(node, port), plan.output(node)
        plan.need(node, x.dtype == np.float32 and x.shape == y.shape, "dtype or broadcasting")
        code, alpha, beta = fn_args(fn, node.params)
        if port == "x" and plan.fold_activation(node, code):  # hard_swish: into the conv step before it
            return
        plan.add("unary", x=cpu.address(x), y=cpu.address(y), count=x.size, fn=code, alpha=alpha, beta=beta)
    return lower


def unary_kernels(fn: str) -> dict:
    """An elementwise op's kernels when the engine's unary step and the unary shader compute its
    function ``fn`` (ops/codes.py): its ``fast``, ``into``, ``cpu`` and ``gpu`` fields, to pass to
    OpDef. The per-op path and a step plan then run the same kernel, so their bits agree."""
    def into(ctx, p, out, x):
        code, alpha, beta = fn_args(fn, p)
        return cpu.unary(x, code, alpha, beta, out=out)

    def fast(ctx, p, x):
        return into(ctx, p, np.empty_like(x), x)

    return dict(fast=fast, into=into, cpu=unary_cpu(fn), gpu=unary_lowering(fn))


def silu_cpu(plan, node) -> None:
    """silu with swiglu's arithmetic, row by row along the last axis (as cpu.silu)."""
    x, y = plan.input(node, "x"), plan.output(node)
    plan.need(node, x.dtype == np.float32 and x.shape == y.shape, "float32")
    if plan.fold_activation(node, FN["silu"]):  # into the conv step before it
        return
    width = max(x.shape[-1], 1) if x.ndim else 1
    plan.add("glu", x=cpu.address(x), y=cpu.address(y), F=width, gated=False, rows=x.size // width)


def gelu_cpu(plan, node) -> None:
    x, y = plan.input(node, "x"), plan.output(node)
    plan.need(node, x.dtype == np.float32 and x.size == y.size, "float32")
    plan.add("gelu", x=cpu.address(x), y=cpu.address(y), count=x.size, tanh=node.params.get("approximate", "none") == "tanh")


# ------------------------------------------------------------------- backward (compile/autodiff.py)
def _fill_like_infer(specs, params):
    return {"y": (specs["x"].shape, specs["x"].dtype)}


def fill_like_ref(ctx, p, x):
    """An array of x's shape and dtype filled with ``value`` (a gradient seed, or a zero gradient)."""
    return np.full(x.shape, p["value"], x.dtype)


def constant_backward(g, node) -> None:
    """d(fill_like): none; its output does not depend on x's values."""


def add_backward(g, node) -> None:
    """d(a + b): dy to each operand, summed over the axes it was broadcast along."""
    dy = g.grad(node, "y")
    for port in ("a", "b"):
        if g.needs(node, port):
            g.accumulate(node, port, g.reduce_to(dy, g.shape(node.inputs[port])))


def mul_backward(g, node) -> None:
    """d(a * b): da = dy * b, db = dy * a, each summed over its broadcast axes."""
    dy = g.grad(node, "y")
    for port, other in (("a", "b"), ("b", "a")):
        if g.needs(node, port):
            prod = g.emit("mul", {"a": dy, "b": node.inputs[other]})[0]
            g.accumulate(node, port, g.reduce_to(prod, g.shape(node.inputs[port])))


def _unary_grad_infer(specs, params):
    x, dy = specs["x"], specs["dy"]
    expect(x.dtype == dy.dtype and x.shape == dy.shape, f"dy must be shaped like x: {dy.describe()} vs {x.describe()}")
    return {"dx": (x.shape, x.dtype)}


def silu_grad_ref(ctx, p, x, dy):
    """dx = dy * s * (1 + x * (1 - s)), s = sigmoid(x), in float64. Ports: x (silu's input), dy."""
    x64 = x.astype(np.float64)
    s = 0.5 * (1.0 + np.tanh(0.5 * x64))
    return (dy * (s * (1.0 + x64 * (1.0 - s)))).astype(x.dtype)


GELU_TANH_C = math.sqrt(2.0 / math.pi)


def gelu_grad_ref(ctx, p, x, dy):
    """dx of GELU, exact (Phi(x) + x phi(x)) or tanh form (params: approximate), in float64. Ports: x, dy."""
    x64 = x.astype(np.float64)
    if p.get("approximate", "none") == "tanh":
        t = np.tanh(GELU_TANH_C * (x64 + 0.044715 * x64 ** 3))
        d = 0.5 * (1.0 + t) + 0.5 * x64 * (1.0 - t * t) * GELU_TANH_C * (1.0 + 3 * 0.044715 * x64 * x64)
    else:
        d = 0.5 * (1.0 + _erf(x64 / math.sqrt(2.0))) + x64 * np.exp(-0.5 * x64 * x64) / math.sqrt(2.0 * math.pi)
    return (dy * d).astype(x.dtype)


def silu_grad_fast(ctx, p, x, dy):
    """silu_grad_ref's dx through cpu.silu_backward (float32)."""
    if x.dtype != np.float32 or dy.dtype != np.float32:
        return silu_grad_ref(ctx, p, x, dy)
    return cpu.silu_backward(x, dy)


def silu_grad_into(ctx, p, out, x, dy):
    """silu_grad_fast written into ``out``."""
    if x.dtype != np.float32 or dy.dtype != np.float32:
        np.copyto(out, silu_grad_ref(ctx, p, x, dy))
        return out
    return cpu.silu_backward(x, dy, out=out)


def gelu_grad_fast(ctx, p, x, dy):
    """gelu_grad_ref's dx through cpu.gelu_backward (float32; exact or the tanh form)."""
    if x.dtype != np.float32 or dy.dtype != np.float32:
        return gelu_grad_ref(ctx, p, x, dy)
    return cpu.gelu_backward(x, dy, p.get("approximate", "none"))


def gelu_grad_into(ctx, p, out, x, dy):
    """gelu_grad_fast written into ``out``."""
    if x.dtype != np.float32 or dy.dtype != np.float32:
        np.copyto(out, gelu_grad_ref(ctx, p, x, dy))
        return out
    return cpu.gelu_backward(x, dy, p.get("approximate", "none"), out=out)


def unary_backward(g, node) -> None:
    """d(silu / gelu) through its grad op (``<op>_grad``: x, dy -> dx)."""
    g.accumulate(node, "x", g.emit(node.op + "_grad", {"x": node.inputs["x"], "dy": g.grad(node, "y")}, node.params,
                                   outputs=("dx",))[0])


register(OpDef("silu_grad", "activation", ("x", "dy"), ("dx",), _unary_grad_infer, silu_grad_ref, silu_grad_fast,
               into=silu_grad_into))
register(OpDef("gelu_grad", "activation", ("x", "dy"), ("dx",), _unary_grad_infer, gelu_grad_ref, gelu_grad_fast,
               into=gelu_grad_into))
register(OpDef("fill_like", "elementwise", ("x",), ("y",), _fill_like_infer, fill_like_ref, backward=constant_backward))
register(OpDef("add", "elementwise", ("a", "b"), ("y",), _binary_infer, add_ref, into=binary_into(np.add), cpu=binary_cpu,
               gpu=binary_lowering("add"), backward=add_backward))
register(OpDef("mul", "elementwise", ("a", "b"), ("y",), _binary_infer, mul_ref, into=binary_into(np.multiply),
               cpu=binary_cpu,
               gpu=binary_lowering("mul"), backward=mul_backward))
register(OpDef("silu", "activation", ("x",), ("y",), _unary_infer, silu_ref, silu_fast, into=silu_into, cpu=silu_cpu,
               gpu=unary_lowering("silu"), backward=unary_backward))
def gelu_fast(ctx, p, x):
    """GELU through the CPU kernel (float32; exact through erfc, or the tanh form)."""
    if x.dtype != np.float32:
        return gelu_ref(ctx, p, x)
    return cpu.gelu(x, p.get("approximate", "none"))


def gelu_into(ctx, p, out, x):
    """gelu_fast written into ``out``."""
    if x.dtype != np.float32:
        np.copyto(out, gelu_ref(ctx, p, x))
        return out
    return cpu.gelu(x, p.get("approximate", "none"), out=out)


register(OpDef("gelu", "activation", ("x",), ("y",), _unary_infer, gelu_ref, gelu_fast, into=gelu_into, cpu=gelu_cpu,
               gpu=unary_lowering("gelu"), backward=unary_backward))
def gelu_f16_table_backward(g, node) -> None:
    """d(gelu_f16_table): the gradient of the tanh GELU it tabulates (the table itself is a step function of
    x's fp16 rounding; its rounding passes gradients straight through)."""
    g.accumulate(node, "x", g.emit("gelu_grad", {"x": node.inputs["x"], "dy": g.grad(node, "y")},
                                   {"approximate": "tanh"}, outputs=("dx",))[0])


register(OpDef("gelu_f16_table", "activation", ("x",), ("y",), _unary_infer, gelu_f16_table_ref,
               backward=gelu_f16_table_backward))
