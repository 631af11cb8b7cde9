"""Translations of ONNX's random ops (RandomUniform(Like), RandomNormal(Like), Bernoulli, Multinomial)
and of training-mode Dropout onto volvox's sampling ops (ops/sampling.py): emitted, never folded at
import, so an unseeded node draws new values every run; a seeded one draws what onnx's reference
evaluator draws for its seed."""

from __future__ import annotations

import numpy as np

from volvox.formats.onnx.importer import Importer, output_used
from volvox.formats.onnx.reader import OnnxNode, element_dtype

FLOAT = 1   # ONNX's TensorProto.FLOAT: RandomUniform / RandomNormal's default dtype
INT32 = 6   # TensorProto.INT32: Multinomial's default dtype


def _seed(n: OnnxNode):
    seed = n.attrs.get("seed")
    return None if seed is None else float(seed)


def _like(imp: Importer, n: OnnxNode, where: str) -> tuple[dict, dict]:
    """(inputs, params) giving a Like op's shape: its run-time input, or a constant input's shape."""
    x = n.inputs[0]
    if x in imp.consts:
        return {}, {"shape": list(np.shape(imp.consts[x]))}
    return {"x": imp.logical(x, where)}, {}


def _dtype(imp: Importer, n: OnnxNode, where: str, default) -> str:
    """The node's ``dtype`` attribute as a numpy dtype name; ``default`` (an ONNX code, or a tensor name
    whose dtype it takes) when absent."""
    code = n.attrs.get("dtype")
    if code is None:
        if isinstance(default, int):
            code = default
        else:
            return np.asarray(imp.consts[default]).dtype.name if default in imp.consts else imp.specs[default].dtype
    return element_dtype(code, f"{where}: dtype").name


def random(imp: Importer, n: OnnxNode, where: str) -> None:
    """RandomUniform / RandomNormal and their Like forms."""
    like = n.op.endswith("Like")
    inputs, shape = _like(imp, n, where) if like else ({}, {"shape": [int(d) for d in n.attrs["shape"]]})
    dtype = _dtype(imp, n, where, n.inputs[0] if like else FLOAT)
    if n.op.startswith("RandomUniform"):
        op, params = "random_uniform", {"low": float(n.attrs.get("low", 0.0)), "high": float(n.attrs.get("high", 1.0))}
    else:
        op, params = "random_normal", {"mean": float(n.attrs.get("mean", 0.0)), "scale": float(n.attrs.get("scale", 1.0))}
    imp.emit(op, n.name, inputs, n.outputs[0], dtype=dtype, seed=_seed(n), **shape, **params)


def bernoulli(imp: Importer, n: OnnxNode, where: str) -> None:
    """Bernoulli: 1 with the input's probability, else 0."""
    imp.emit("bernoulli", n.name, {"p": imp.operand(n.inputs[0], where)}, n.outputs[0],
             dtype=_dtype(imp, n, where, n.inputs[0]), seed=_seed(n))


def multinomial(imp: Importer, n: OnnxNode, where: str) -> None:
    """Multinomial: ``sample_size`` class indices per row of unnormalized log-probabilities."""
    imp.emit("multinomial", n.name, {"x": imp.operand(n.inputs[0], where)}, n.outputs[0],
             dtype=_dtype(imp, n, where, INT32), sample_size=int(n.attrs.get("sample_size", 1)), seed=_seed(n))


def training_dropout(imp: Importer, n: OnnxNode, where: str, ratio: float) -> None:
    """Training-mode Dropout of ``ratio`` as onnx's reference computes it: keep = uniform [0, 1) draws
    (float64) >= ratio; y = keep * x * (1 / (1 - ratio)) in x's dtype; the mask output is keep."""
    x = n.inputs[0]
    inputs, shape = _like(imp, n, where)
    dtype = _dtype(imp, n, where, x)
    draws = imp.emit("random_uniform", f"{n.name}.draws", inputs, f"{n.name}.draws", dtype="float64",
                     seed=_seed(n), low=0.0, high=1.0, **shape)
    imp.consts[f"{n.name}.ratio"] = np.array(ratio, np.float64)
    imp.consts[f"{n.name}.scale"] = np.array(1.0 / (1.0 - ratio), dtype)
    keep = n.outputs[1] if output_used(imp, n, 1) else f"{n.name}.keep"
    imp.apply("greater_equal", f"{n.name}.keep", {"a": draws, "b": f"{n.name}.ratio"}, keep, where)
    imp.apply("cast", f"{n.name}.keep_as_x", {"x": keep}, f"{n.name}.keep_as_x", where, to=dtype)
    imp.apply("mul", f"{n.name}.kept", {"a": f"{n.name}.keep_as_x", "b": x}, f"{n.name}.kept", where)
    imp.apply("mul", f"{n.name}.scaled", {"a": f"{n.name}.kept", "b": f"{n.name}.scale"}, n.outputs[0], where)
