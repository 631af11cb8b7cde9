"""Matrix ops: linear (y = x @ W.T + b, W float or block-quantized) and embedding lookup; their backward
(linear_grad_input, linear_grad_weight)."""

from __future__ import annotations

import math
import numpy as np

from volvox import cpu
from volvox.ir.graph import expect, same_dim
from volvox.ir.quant_blocks import QuantTensor, SUPPORTED_QTYPES, dequantize_ref, dequantize_rows_ref
from volvox.ops.codes import FN
from volvox.ops.registry import OpDef, register
from volvox.ops.conv import plan_blocks
from volvox.ops.gpu import (Call, Dispatch, Lowering, float_linear_dispatch, float_only, grid_of, packed_layout,
                            packed_matmul_dispatches)
from volvox.ops.gpu_weights import LAYOUTS, check_weight, chunk_spans, chunk_words

WEIGHT_DTYPES = ("float32", "float16") + SUPPORTED_QTYPES


def _linear_infer(specs, params):
    x, w = specs["x"], specs["weight"]
    expect(x.dtype == "float32", f"x must be float32, got {x.describe()}")
    expect(w.dtype in WEIGHT_DTYPES and len(w.shape) == 2, f"weight must be a 2-D float or quantized matrix, got {w.describe()}")
    expect(len(x.shape) >= 1 and same_dim(x.shape[-1], w.shape[1]),
           f"x's last dim must equal weight's in_features: {x.describe()} vs {w.describe()}")
    if "bias" in specs:
        b = specs["bias"]
        expect(b.shape == (w.shape[0],) and b.dtype == "float32", f"bias must be float32[{w.shape[0]}], got {b.describe()}")
    return {"y": (x.shape[:-1] + (w.shape[0],), "float32")}


def dense_weight(w) -> np.ndarray:
    """A weight as float32 (N, K): dequantized if block-quantized (reference path only)."""
    return dequantize_ref(w) if isinstance(w, QuantTensor) else np.asarray(w, dtype=np.float32)


def linear_ref(ctx, p, x, weight, bias=None):
    """y = x @ weight.T (+ bias), in float64 for a clean oracle."""
    y = x.astype(np.float64) @ dense_weight(weight).astype(np.float64).T
    if bias is not None:
        y += bias
    return y.astype(np.float32)


def linear_fast(ctx, p, x, weight, bias=None):
    """y = x @ weight.T (+ bias) through the CPU kernel (packed weights read directly)."""
    y = cpu.linear(x.reshape(-1, x.shape[-1]), weight).reshape(x.shape[:-1] + (-1,))
    if bias is not None:
        y += bias
    return y


def linear_into(ctx, p, out, x, weight, bias=None):
    """linear_fast written into ``out`` (x's leading dims, out_features)."""
    cpu.linear(x.reshape(-1, x.shape[-1]), weight, out=out.reshape(-1, out.shape[-1]))
    if bias is not None:
        out += bias
    return out


def _embedding_infer(specs, params):
    t, ids = specs["table"], specs["ids"]
    expect(t.dtype in WEIGHT_DTYPES and len(t.shape) == 2, f"table must be a 2-D float or quantized matrix, got {t.describe()}")
    expect(ids.dtype in ("int32", "int64"), f"ids must be int32 or int64, got {ids.describe()}")
    return {"y": (ids.shape + (t.shape[1],), "float32")}


def embedding_ref(ctx, p, table, ids):
    """Rows of ``table`` at ``ids`` as float32."""
    flat = ids.reshape(-1)
    if isinstance(table, QuantTensor):
        rows = dequantize_rows_ref(table, flat)
    else:
        rows = np.asarray(table[flat], dtype=np.float32)
    return rows.reshape(ids.shape + (rows.shape[-1],))


def embedding_fast(ctx, p, table, ids):
    """Rows of ``table`` at ``ids`` through the CPU kernel (bounds-checked)."""
    return cpu.embedding(table, ids.reshape(-1)).reshape(ids.shape + (-1,))


def embedding_into(ctx, p, out, table, ids):
    """embedding_fast written into ``out`` (ids' shape, the table's row length)."""
    cpu.embedding(table, ids.reshape(-1), out=out.reshape(-1, out.shape[-1]))
    return out


# ------------------------------------------------------------------- CPU plan lowering
def linear_cpu(plan, node) -> None:
    """linear, linear_act and linear_split as cpu.linear computes them: quantized weights on one row as
    an 8-bit activation row (QUANTIZE_ACT) then the GEMV over the weight's blocks; float32 weights on
    cpu.SGEMM_MIN_ROWS rows or more through the packed GEMM (a 1x1 conv step); else the weight rows
    streamed against every activation row. linear_split's outputs are the column blocks of one row;
    linear_act's activation runs in place on the output."""
    x = plan.input(node, "x")
    weight = plan.weight(node, "weight")
    code, n, k = cpu._weight_meta(weight, f"{node.id}.weight")
    bias = plan.optional(node, "bias")
    m = x.size // max(k, 1)
    y = plan.outputs_row(node) if node.op == "linear_split" else plan.output(node)
    plan.need(node, x.dtype == np.float32 and x.shape[-1] == k and y.size == m * n, "float32 rows of the weight's width")
    plan.need(node, bias is None or (bias.dtype == np.float32 and bias.size == n), "bias")
    plan.need(node, node.op != "linear_split" or m == 1, "split outputs of several rows")
    plan.keep(bias)
    plan.macs += m * n * k
    act_bytes = cpu.engine.act_row_bytes(code, k)
    # read-only quantized weights: the tier's GEMV over rows interleaved once (vx.pxd; shared with cpu.linear)
    il = (plan.packed(node.inputs["weight"], "interleaved", lambda: cpu.interleaved_weights(weight))
          if act_bytes and cpu._read_only(weight) else None)
    if il is not None:
        plan.keep(il[0])
    else:
        wb = cpu._weight_bytes(weight, f"{node.id}.weight")[1]  # (n, row bytes)
        plan.keep(wb)
    if act_bytes:  # quantized weights: quantize the row once, then the matrix rows
        plan.need(node, m == 1, "quantized weights on several rows")
        act = plan.act_row(node, act_bytes)
        plan.add("quantize_act", x=cpu.address(x), act=cpu.address(act), K=k, wtype=code)
        if il is not None:
            plan.add("linear", x=cpu.address(act), w=cpu.address(il[0]), bias=cpu.address(bias), y=cpu.address(y),
                     K=k, N=n, row_bytes=0, wtype=code, group_bytes=il[1])
        else:
            plan.add("linear", x=cpu.address(act), w=cpu.address(wb), bias=cpu.address(bias), y=cpu.address(y),
                     K=k, N=n, row_bytes=wb.shape[1], wtype=code)
    elif m >= cpu.SGEMM_MIN_ROWS and code == cpu._F32:
        packed = plan.packed(node.inputs["weight"], False, lambda: cpu.linear_weights(weight))  # (n/32, k, 32) panels
        plan.keep(packed)
        plan.add("conv_f32", x=cpu.address(x), w=cpu.address(packed), bias=cpu.address(bias), y=cpu.address(y),
                 scratch=cpu.address(plan.scratch(0, np.float32)), window=(1, m, 1, k, m, 1) + (1,) * 6 + (0, 0),
                 cout=n, **plan_blocks(plan, m, n))
    else:
        plan.add("linear", x=cpu.address(x), w=cpu.address(wb), bias=cpu.address(bias), y=cpu.address(y), K=k, N=n,
                 row_bytes=wb.shape[1], wtype=code, rows=m)
    if node.op == "linear_act":  # the activation in place on the output
        act = node.params["activation"]
        plan.need(node, act in ("relu", "hard_swish", "silu", "gelu", "gelu_tanh"), f"activation {act!r}")
        if act in ("relu", "hard_swish"):  # the engine's unary step, as linear_act_fast applies them
            plan.add("unary", x=cpu.address(y), y=cpu.address(y), count=y.size, fn=FN[act])
        elif act == "silu":
            plan.add("glu", x=cpu.address(y), y=cpu.address(y), F=n, gated=False, rows=m)
        else:
            plan.add("gelu", x=cpu.address(y), y=cpu.address(y), count=y.size, tanh=act == "gelu_tanh")


def embedding_cpu(plan, node) -> None:
    """A token step's embedding row: the run's token (or position: a learned position table, which
    bounds the positions the plan runs)."""
    ids = plan.run_input(node, "ids")
    plan.need(node, ids is not None, "ids other than the run's tokens or positions")
    code, tb, v, d = cpu._weight_bytes(plan.weight(node, "table"), f"{node.id}.table")
    y = plan.output(node)
    plan.need(node, y.size == d and y.dtype == np.float32, "one float32 row")
    plan.keep(tb)
    if ids == "tokens":
        plan.vocab = v
    else:  # learned position embeddings: positions past the table are refused at run time
        plan.max_positions = min(plan.max_positions, v)
    plan.add("embed", table=cpu.address(tb), y=cpu.address(y), dim=d, row_bytes=tb.shape[1], vocab=v, wtype=code,
             by_position=ids == "positions")


# ------------------------------------------------------------------ GPU lowerings
def check_linear(specs, params):
    """Why a linear-family node stays on the CPU: x not float32, or a weight type no shader reads."""
    return check_weight(specs["weight"].dtype, "weight") or float_only("x")(specs, params)


def _lower_linear(c: Call) -> list[Dispatch]:
    """linear, and linear_act with its activation in the output write: for a float32 weight gemv_q
    (decode rows) or matmul, the packed kernels for a weight bound in its stored type."""
    n, k = c.shapes["weight"]
    m = math.prod(c.shapes["x"][:-1])
    bias = "bias" if "bias" in c.shapes else None
    act = c.params.get("activation", "none")
    layout = packed_layout(c, "weight")
    if layout is not None:
        return packed_matmul_dispatches("x", "weight", bias, "y", m, k, n, layout, n, act=act)
    return [float_linear_dispatch("x", "weight", bias, "y", m, k, n, act=act)]


def _check_embedding(specs, params):
    return check_weight(specs["table"].dtype, "table") or (
        None if specs["ids"].dtype == "int32" else f"ids are {specs['ids'].dtype}")


def _lower_embedding(c: Call) -> list[Dispatch]:
    """embedding for a float32 table, embedding_q (one dispatch per chunk) for a packed one."""
    vocab, dim = c.shapes["table"]
    n = math.prod(c.shapes["ids"]) * dim
    layout = packed_layout(c, "table")
    if layout is None:
        return [Dispatch("embedding", ["table", "ids", "y"], grid_of(n), dict(n=n, dim=dim, vocab=vocab))]
    dtype, per_chunk = layout
    return [Dispatch("embedding_q", [f"table.{i}", "ids", "y"], grid_of(n // 4 if dim % 4 == 0 else n),
                     dict(n=n, K=dim, r0=r0, rows=r1 - r0, head_off=chunk_words(dtype, r1 - r0, dim)[1],
                          wtype=LAYOUTS[dtype].code))
            for i, (r0, r1) in enumerate(chunk_spans(vocab, per_chunk))]


# ------------------------------------------------------------------- backward (compile/autodiff.py)
def _linear_grad_input_infer(specs, params):
    dy, w = specs["dy"], specs["weight"]
    expect(dy.dtype == "float32", f"dy must be float32, got {dy.describe()}")
    expect(w.dtype in WEIGHT_DTYPES and len(w.shape) == 2, f"weight must be a 2-D float or quantized matrix, got {w.describe()}")
    expect(len(dy.shape) >= 1 and same_dim(dy.shape[-1], w.shape[0]),
           f"dy's last dim must equal weight's out_features: {dy.describe()} vs {w.describe()}")
    return {"dx": (dy.shape[:-1] + (w.shape[1],), "float32")}


def linear_grad_input_ref(ctx, p, dy, weight):
    """dx = dy @ weight: the gradient of linear's input (weight (N, K) of any stored type), float64."""
    return (dy.astype(np.float64) @ dense_weight(weight).astype(np.float64)).astype(np.float32)


def linear_grad_input_fast(ctx, p, dy, weight):
    """dx = dy @ weight through cpu.matmul_t: the weight as inference holds it (block-quantized, the tier's
    interleaved packing, f16 or f32), dequantized one strip at a time, never widened."""
    dx = cpu.matmul_t(dy.reshape(-1, dy.shape[-1]), weight)     # (rows, in_features)
    return dx.reshape(dy.shape[:-1] + (dx.shape[1],))


def linear_grad_input_into(ctx, p, out, dy, weight):
    """linear_grad_input_fast written into ``out``."""
    cpu.matmul_t(dy.reshape(-1, dy.shape[-1]), weight, out=out.reshape(-1, out.shape[-1]))
    return out


def _linear_grad_weight_infer(specs, params):
    x, dy = specs["x"], specs["dy"]
    expect(x.dtype == dy.dtype == "float32" and len(x.shape) >= 1 and len(x.shape) == len(dy.shape),
           f"x and dy must be float32 of the same rank: {x.describe()}, {dy.describe()}")
    return {"dw": ((dy.shape[-1], x.shape[-1]), "float32")}


def linear_grad_weight_ref(ctx, p, x, dy):
    """dw = dy^T @ x over every leading position: the gradient of linear's weight (N, K), float64."""
    x2, dy2 = x.reshape(-1, x.shape[-1]), dy.reshape(-1, dy.shape[-1])
    return (dy2.T.astype(np.float64) @ x2.astype(np.float64)).astype(np.float32)


def linear_grad_weight_fast(ctx, p, x, dy):
    """dw = dy^T @ x through cpu.weight_grad (linear's packed f32 GEMM on the transposed operands)."""
    return cpu.weight_grad(dy.reshape(-1, dy.shape[-1]), x.reshape(-1, x.shape[-1]))


def linear_backward(g, node) -> None:
    """d(x @ W^T + b) through linear_grads."""
    linear_grads(g, node, g.grad(node, "y"))


def linear_grads(g, node, dy: str) -> None:
    """The gradients of a linear-like node's x, weight and bias given dy, the gradient of its product
    x @ W^T + b: dx = dy @ W (W of any stored type: a frozen weight gives only dx), dW = dy^T x,
    db = dy summed over every leading axis."""
    if g.needs(node, "x"):
        g.accumulate(node, "x", g.emit("linear_grad_input", {"dy": dy, "weight": node.inputs["weight"]},
                                       outputs=("dx",))[0])
    if g.needs(node, "weight"):
        g.accumulate(node, "weight", g.emit("linear_grad_weight", {"x": node.inputs["x"], "dy": dy}, outputs=("dw",))[0])
    if g.needs(node, "bias"):
        g.accumulate(node, "bias", g.reduce_to(dy, g.shape(node.inputs["bias"])))


def _embedding_grad_infer(specs, params):
    t, ids, dy = specs["table"], specs["ids"], specs["dy"]
    expect(dy.dtype == "float32" and dy.shape == ids.shape + (t.shape[1],),
           f"dy must be float32 (ids' shape, row length): {dy.describe()} for {ids.describe()}, {t.describe()}")
    return {"dtable": (t.shape, "float32")}


def embedding_grad_ref(ctx, p, table, ids, dy):
    """dtable: each row of dy added into the table row its id names (a scatter-add; rows no id names are
    0), float64 sums. Ports: table (for its shape), ids, dy (ids' shape, row length)."""
    out = np.zeros(table.shape, np.float64)                             # (vocab, dim)
    np.add.at(out, ids.reshape(-1), dy.reshape(-1, table.shape[1]))
    return out.astype(np.float32)


def embedding_grad_fast(ctx, p, table, ids, dy):
    """embedding_grad_ref's scatter-add through cpu.embedding_backward (float32 sums, each row added in
    order)."""
    return cpu.embedding_backward(ids.reshape(-1), dy.reshape(-1, table.shape[1]), table.shape[0])


def embedding_backward(g, node) -> None:
    """d(embedding) / d table through embedding_grad (ids get none)."""
    if g.needs(node, "table"):
        g.accumulate(node, "table", g.emit("embedding_grad", {"table": node.inputs["table"], "ids": node.inputs["ids"],
                                                              "dy": g.grad(node, "y")}, outputs=("dtable",))[0])


register(OpDef("embedding_grad", "gather", ("table", "ids", "dy"), ("dtable",), _embedding_grad_infer, embedding_grad_ref,
               embedding_grad_fast))
register(OpDef("linear_grad_input", "matmul", ("dy", "weight"), ("dx",), _linear_grad_input_infer, linear_grad_input_ref,
               linear_grad_input_fast, into=linear_grad_input_into))
register(OpDef("linear_grad_weight", "matmul", ("x", "dy"), ("dw",), _linear_grad_weight_infer, linear_grad_weight_ref,
               linear_grad_weight_fast, fresh=True))
register(OpDef("linear", "matmul", ("x", "weight", "bias?"), ("y",), _linear_infer, linear_ref, linear_fast, cpu=linear_cpu,
               into=linear_into,
               gpu=Lowering(("matmul", "matmul_q", "gemv_q"), _lower_linear, check_linear), backward=linear_backward))
register(OpDef("embedding", "gather", ("table", "ids"), ("y",), _embedding_infer, embedding_ref, embedding_fast,
               cpu=embedding_cpu,
               into=embedding_into,
               gpu=Lowering(("embedding", "embedding_q"), _lower_embedding, _check_embedding),
               backward=embedding_backward))
