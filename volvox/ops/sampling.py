"""Ops that draw random values: random_uniform, random_normal, bernoulli, multinomial (ONNX's
RandomUniform(Like), RandomNormal(Like), Bernoulli, Multinomial; training-mode Dropout is built from
random_uniform by the importer).

Each draw is a fresh generator per run, as onnx's reference evaluator does it: with ``seed`` a
NumPy ``RandomState(int(seed))`` (a seeded node gives the same values every run, the same values
onnx's reference gives), without one a generator seeded from the OS (new values every run). The
shape comes from input ``x`` when given (the ``Like`` forms), else from ``shape``. They never fold
at import and have no fast kernel: the plan runs their numpy references as islands.
"""

from __future__ import annotations

import numpy as np

from volvox.ir.graph import FLOAT_DTYPES, INT_DTYPES, expect
from volvox.ops.registry import OpDef, register


def _state(p: dict) -> np.random.RandomState:
    """The run's generator: RandomState(int(seed)) when the node has a seed, else one seeded from the OS."""
    seed = p.get("seed")
    return np.random.RandomState() if seed is None else np.random.RandomState(int(seed))


def _fill_infer(specs, params):
    shape = specs["x"].shape if "x" in specs else tuple(int(d) for d in params["shape"])
    expect(params["dtype"] in FLOAT_DTYPES, f"random values of dtype {params['dtype']!r} (float dtypes only)")
    return {"y": (shape, params["dtype"])}


def _shape(p: dict, x) -> tuple:
    return tuple(x.shape) if x is not None else tuple(int(d) for d in p["shape"])


def random_uniform_ref(ctx, p, x=None):
    """Values uniform in [low, high) of x's shape (or ``shape``), dtype ``dtype``."""
    dtype = np.dtype(p["dtype"])
    y = _state(p).rand(*_shape(p, x)).astype(dtype)   # (x's shape)
    y *= p["high"] - p["low"]
    y += p["low"]
    return y.astype(dtype)


def random_normal_ref(ctx, p, x=None):
    """Normal values of mean ``mean`` and standard deviation ``scale``, of x's shape (or ``shape``)."""
    dtype = np.dtype(p["dtype"])
    y = _state(p).randn(*_shape(p, x)).astype(dtype)  # (x's shape)
    y *= p["scale"]
    y += p["mean"]
    return y.astype(dtype)


def _bernoulli_infer(specs, params):
    expect(specs["p"].dtype in FLOAT_DTYPES, f"bernoulli of {specs['p'].describe()} (float probabilities)")
    return {"y": (specs["p"].shape, params["dtype"])}


def bernoulli_ref(ctx, p, probs):
    """1 with probability ``probs`` (elementwise), else 0, in dtype ``dtype``."""
    return _state(p).binomial(1, p=probs).astype(p["dtype"])


def _multinomial_infer(specs, params):
    x = specs["x"]
    expect(len(x.shape) == 2 and x.dtype in FLOAT_DTYPES, f"multinomial of {x.describe()} (batch, classes) floats")
    expect(params["dtype"] in INT_DTYPES, f"multinomial indices of dtype {params['dtype']!r}")
    return {"y": ((x.shape[0], int(params["sample_size"])), params["dtype"])}


def multinomial_ref(ctx, p, x):
    """(batch, sample_size) class indices drawn from each row's softmax of the logits ``x`` (batch, classes)."""
    state = _state(p)
    logits = x.astype(np.float64)
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))              # (batch, classes)
    cdf = np.cumsum(probs, axis=1)                                          # (batch, classes)
    u = state.rand(x.shape[0], int(p["sample_size"])) * cdf[:, -1:]         # (batch, sample_size)
    picks = [np.searchsorted(cdf[b], u[b], side="right") for b in range(x.shape[0])]
    return np.minimum(np.array(picks).reshape(x.shape[0], -1), x.shape[1] - 1).astype(p["dtype"])


register(OpDef("random_uniform", "random", ("x?",), ("y",), _fill_infer, random_uniform_ref))
register(OpDef("random_normal", "random", ("x?",), ("y",), _fill_infer, random_normal_ref))
register(OpDef("bernoulli", "random", ("p",), ("y",), _bernoulli_infer, bernoulli_ref))
register(OpDef("multinomial", "random", ("x",), ("y",), _multinomial_infer, multinomial_ref))
