"""Reductions over axes: sum, max, min, prod, L1 / L2 norms, log-sum(-exp), sum of squares; argmax /
argmin. (reduce_mean, which the vision kernels run, is in arith.py and shares the shape rule.)

Params: ``axes`` (a list; empty reduces every axis) and ``keepdims`` (default true); argmax / argmin
take one ``axis``, ``keepdims`` and ``select_last_index``. Float sums run in float64.
"""

from __future__ import annotations

import numpy as np

from volvox.ir.graph import expect
from volvox.ops.registry import OpDef, register


def reduce_axes(ndim: int, axes) -> tuple[int, ...]:
    """The axes a reduction covers, each in [0, ndim): every axis when ``axes`` is empty."""
    return tuple(sorted({int(a) % ndim for a in axes})) if len(axes) else tuple(range(ndim))


def _reduce_infer(specs, params):
    x = specs["x"]
    n = len(x.shape)
    expect(all(-n <= int(a) < max(n, 1) for a in params["axes"]), f"axes {params['axes']} out of range for {x.describe()}")
    axes = reduce_axes(n, params["axes"])
    keep = bool(params.get("keepdims", True))
    return {"y": (tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes), x.dtype)}


def _float_acc(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64) if x.dtype.kind == "f" else x


# name -> function of (x, axes, keepdims): computed in float64 for floats, cast back to x's dtype
REDUCTIONS = {
    "reduce_sum": lambda x, a, k: np.sum(_float_acc(x), axis=a, keepdims=k),
    "reduce_max": lambda x, a, k: np.max(x, axis=a, keepdims=k, initial=_lowest(x.dtype)),
    "reduce_min": lambda x, a, k: np.min(x, axis=a, keepdims=k, initial=_highest(x.dtype)),
    "reduce_prod": lambda x, a, k: np.prod(_float_acc(x), axis=a, keepdims=k),
    "reduce_l1": lambda x, a, k: np.sum(np.abs(_float_acc(x)), axis=a, keepdims=k),
    "reduce_l2": lambda x, a, k: np.sqrt(np.sum(np.square(_float_acc(x)), axis=a, keepdims=k)),
    "reduce_sum_square": lambda x, a, k: np.sum(np.square(_float_acc(x)), axis=a, keepdims=k),
    "reduce_log_sum": lambda x, a, k: np.log(np.sum(_float_acc(x), axis=a, keepdims=k)),
    "reduce_log_sum_exp": lambda x, a, k: _log_sum_exp(_float_acc(x), a, k),
}


def _lowest(dtype: np.dtype):
    """The identity of max in ``dtype`` (an empty max is it, as ONNX defines)."""
    return False if dtype == np.bool_ else -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _highest(dtype: np.dtype):
    """The identity of min in ``dtype``."""
    return True if dtype == np.bool_ else np.inf if dtype.kind == "f" else np.iinfo(dtype).max


def _log_sum_exp(x, axes, keep):
    peak = np.max(x, axis=axes, keepdims=True) if x.size else np.zeros([1] * x.ndim)
    peak = np.where(np.isfinite(peak), peak, 0)
    out = np.log(np.sum(np.exp(x - peak), axis=axes, keepdims=True)) + peak
    return out if keep else np.squeeze(out, axis=axes)


def _reduction_reference(name: str, fn):
    def ref(ctx, p, x):
        axes = reduce_axes(x.ndim, p["axes"])
        with np.errstate(divide="ignore"):
            return np.asarray(fn(x, axes, bool(p.get("keepdims", True)))).astype(x.dtype)
    ref.__doc__ = f"{name} over ``axes`` (every axis when empty), ``keepdims``."
    return ref


def _arg_infer(specs, params):
    x = specs["x"]
    n = len(x.shape)
    axis = int(params.get("axis", 0))
    expect(-n <= axis < n, f"axis {axis} out of range for {x.describe()}")
    axis %= n
    keep = bool(params.get("keepdims", True))
    return {"y": (tuple(1 if i == axis else d for i, d in enumerate(x.shape) if keep or i != axis), "int64")}


def _arg_reference(pick):
    def ref(ctx, p, x):
        axis = int(p.get("axis", 0)) % x.ndim
        if p.get("select_last_index", 0):
            flipped = np.flip(x, axis)
            index = x.shape[axis] - 1 - pick(flipped, axis=axis)
        else:
            index = pick(x, axis=axis)
        index = index.astype(np.int64)
        return np.expand_dims(index, axis) if p.get("keepdims", True) else index
    return ref


argmax_ref = _arg_reference(np.argmax)
argmax_ref.__doc__ = "Index of the largest value along ``axis`` (first, or last with select_last_index), int64."
argmin_ref = _arg_reference(np.argmin)
argmin_ref.__doc__ = "Index of the smallest value along ``axis`` (first, or last with select_last_index), int64."

for _name, _fn in REDUCTIONS.items():
    register(OpDef(_name, "reduce", ("x",), ("y",), _reduce_infer, _reduction_reference(_name, _fn)))
register(OpDef("argmax", "reduce", ("x",), ("y",), _arg_infer, argmax_ref))
register(OpDef("argmin", "reduce", ("x",), ("y",), _arg_infer, argmin_ref))
