"""Matrix ops: linear (y = x @ W.T + b, W float or block-quantized) and embedding lookup."""

from __future__ import annotations

import math
import numpy as np

from volvox import cpu
from volvox.ir.graph import expect, same_dim
from volvox.ir.quant_blocks import QuantTensor, SUPPORTED_QTYPES, dequantize_ref, dequantize_rows_ref
from volvox.ops.registry import OpDef, register
from volvox.ops.gpu import FLOAT_WEIGHTS, Call, Dispatch, Lowering, float_only, grid_of, matmul_dispatch

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


# ------------------------------------------------------------------ GPU lowerings
def _check_linear(specs, params):
    w = specs["weight"]
    if w.dtype not in FLOAT_WEIGHTS:
        return f"weight is {w.dtype} (quantized weights run on the CPU)"
    return float_only("x")(specs, params)


def _lower_linear(c: Call) -> list[Dispatch]:
    """linear, and linear_act with its activation in matmul's output write."""
    k, n = c.shapes["weight"][1], c.shapes["weight"][0]
    m = math.prod(c.shapes["x"][:-1])
    return [matmul_dispatch("x", "weight", "bias" if "bias" in c.shapes else None, "y", m, k, n,
                            act=c.params.get("activation", "none"))]


def _check_embedding(specs, params):
    if specs["table"].dtype not in FLOAT_WEIGHTS:
        return f"table is {specs['table'].dtype}"
    return None if specs["ids"].dtype == "int32" else f"ids are {specs['ids'].dtype}"


def _lower_embedding(c: Call) -> list[Dispatch]:
    vocab, dim = c.shapes["table"]
    n = math.prod(c.shapes["ids"]) * dim
    return [Dispatch("embedding", ["table", "ids", "y"], grid_of(n), dict(n=n, dim=dim, vocab=vocab))]


register(OpDef("linear", "matmul", ("x", "weight", "bias?"), ("y",), _linear_infer, linear_ref, linear_fast,
               into=linear_into,
               gpu=Lowering(("matmul",), _lower_linear, _check_linear)))
register(OpDef("embedding", "gather", ("table", "ids"), ("y",), _embedding_infer, embedding_ref, embedding_fast,
               into=embedding_into,
               gpu=Lowering(("embedding",), _lower_embedding, _check_embedding)))
