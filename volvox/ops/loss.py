"""Losses: cross_entropy (softmax fused, ignore_index) and mse, with their gradient ops.

cross_entropy's softmax never exists as an array of its own: the forward keeps each row's logsumexp
(output ``lse``) and its gradient op recomputes the probabilities from the logits and that logsumexp,
once. Both losses are means, accumulated in float64, returned as a 0-d array of the logits' dtype.
"""

from __future__ import annotations

import numpy as np

from volvox import cpu
from volvox.errors import ShapeError
from volvox.ir.graph import expect, same_dim
from volvox.ops.registry import OpDef, register

LOSS_DTYPES = ("float32", "float64")
IGNORE_INDEX = -100  # cross_entropy's default ignore_index (torch's)


def _rows(logits: np.ndarray, labels: np.ndarray, ignore_index: int):
    """(logits as (rows, vocab), labels as (rows,), mask of counted rows (rows,), count); ShapeError
    naming the first counted label outside [0, vocab)."""
    vocab = logits.shape[-1]
    x = logits.reshape(-1, vocab)                     # (rows, vocab)
    lab = labels.reshape(-1).astype(np.int64)         # (rows,)
    counted = lab != ignore_index                     # (rows,)
    bad = counted & ((lab < 0) | (lab >= vocab))
    if bad.any():
        raise ShapeError(f"label {int(lab[bad][0])} is outside [0, {vocab}) (and is not ignore_index {ignore_index})")
    return x, lab, counted, int(counted.sum())


def _cross_entropy_infer(specs, params):
    logits, labels = specs["logits"], specs["labels"]
    expect(logits.dtype in LOSS_DTYPES and len(logits.shape) >= 1 and logits.shape[-1] != 0,
           f"logits must be float (..., vocab), got {logits.describe()}")
    expect(labels.dtype in ("int32", "int64"), f"labels must be int32 or int64, got {labels.describe()}")
    expect(len(labels.shape) == len(logits.shape) - 1 and all(same_dim(a, b) for a, b in zip(labels.shape, logits.shape)),
           f"labels must have the logits' shape without the vocab axis: {labels.describe()} vs {logits.describe()}")
    return {"loss": ((), logits.dtype), "lse": (labels.shape, logits.dtype)}


def cross_entropy_ref(ctx, p, logits, labels):
    """(mean over counted rows of logsumexp(row) - row[label], each row's logsumexp). A row counts unless its
    label is ``ignore_index`` (default -100); with no counted row the loss is 0. float64 sums."""
    x, lab, counted, count = _rows(logits, labels, int(p.get("ignore_index", IGNORE_INDEX)))
    x = x.astype(np.float64)
    top = x.max(axis=1)                                               # (rows,)
    lse = top + np.log(np.exp(x - top[:, None]).sum(axis=1))          # (rows,)
    picked = x[np.arange(len(x)), np.where(counted, lab, 0)]          # (rows,)
    loss = (lse - picked)[counted].sum() / max(count, 1)
    return np.asarray(loss, logits.dtype), lse.astype(logits.dtype).reshape(labels.shape)


def cross_entropy_fast(ctx, p, logits, labels):
    """cross_entropy_ref's (loss, lse) through cpu.cross_entropy for float32 logits (the reference for
    float64): one pass per row for the logsumexp, the mean summed in float64."""
    if logits.dtype != np.float32:
        return cross_entropy_ref(ctx, p, logits, labels)
    ignore = int(p.get("ignore_index", IGNORE_INDEX))
    _rows(logits, labels, ignore)  # the reference's ShapeError for a label outside the vocabulary
    loss, _, lse = cpu.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore, grad=False)
    return np.asarray(loss, np.float32), lse.reshape(labels.shape)


def _cross_entropy_grad_infer(specs, params):
    logits = specs["logits"]
    expect(specs["dloss"].shape in ((), (1,)), f"dloss must be a scalar, got {specs['dloss'].describe()}")
    expect(specs["lse"].shape == specs["labels"].shape, f"lse must have the labels' shape, got {specs['lse'].describe()}")
    return {"dlogits": (logits.shape, logits.dtype)}


def cross_entropy_grad_ref(ctx, p, logits, labels, lse, dloss):
    """dlogits = (softmax(row) - onehot(label)) * dloss / count on counted rows, 0 on ignored ones; the
    softmax recomputed as exp(logits - lse). Ports: logits (..., vocab), labels (...), lse (...) from the
    forward, dloss (scalar)."""
    x, lab, counted, count = _rows(logits, labels, int(p.get("ignore_index", IGNORE_INDEX)))
    weight = counted * (float(np.asarray(dloss).reshape(-1)[0]) / max(count, 1))    # (rows,)
    d = np.exp(x.astype(np.float64) - lse.reshape(-1, 1).astype(np.float64))       # (rows, vocab)
    d[np.arange(len(x)), np.where(counted, lab, 0)] -= counted
    d *= weight[:, None]
    return d.astype(logits.dtype).reshape(logits.shape)


def cross_entropy_grad_fast(ctx, p, logits, labels, lse, dloss):
    """cross_entropy_grad_ref's dlogits through cpu.cross_entropy_grad for float32 logits: one pass per
    row from the saved logsumexp (the reference for float64)."""
    if logits.dtype != np.float32:
        return cross_entropy_grad_ref(ctx, p, logits, labels, lse, dloss)
    vocab = logits.shape[-1]
    dlogits = cpu.cross_entropy_grad(logits.reshape(-1, vocab), labels.reshape(-1), lse.reshape(-1),
                                     float(np.asarray(dloss).reshape(-1)[0]), int(p.get("ignore_index", IGNORE_INDEX)))
    return dlogits.reshape(logits.shape)


def cross_entropy_grad_into(ctx, p, out, logits, labels, lse, dloss):
    """cross_entropy_grad_fast written into ``out`` (an arena buffer reused step after step instead of a
    fresh (rows, vocab) array each time)."""
    if logits.dtype != np.float32:
        np.copyto(out, cross_entropy_grad_ref(ctx, p, logits, labels, lse, dloss))
        return out
    vocab = logits.shape[-1]
    cpu.cross_entropy_grad(logits.reshape(-1, vocab), labels.reshape(-1), lse.reshape(-1),
                           float(np.asarray(dloss).reshape(-1)[0]), int(p.get("ignore_index", IGNORE_INDEX)),
                           out=out.reshape(-1, vocab))
    return out


def cross_entropy_backward(g, node) -> None:
    """d(cross_entropy) / d logits through cross_entropy_grad (labels get none)."""
    if g.needs(node, "logits"):
        dlogits = g.emit("cross_entropy_grad", {"logits": node.inputs["logits"], "labels": node.inputs["labels"],
                                                "lse": node.outputs["lse"], "dloss": g.grad(node, "loss")},
                         node.params, outputs=("dlogits",))[0]
        g.accumulate(node, "logits", dlogits)


def _mse_infer(specs, params):
    x, t = specs["x"], specs["target"]
    expect(x.dtype in LOSS_DTYPES and x.dtype == t.dtype and len(x.shape) == len(t.shape)
           and all(same_dim(a, b) for a, b in zip(x.shape, t.shape)),
           f"x and target must be float arrays of one shape: {x.describe()}, {t.describe()}")
    return {"loss": ((), x.dtype)}


def mse_ref(ctx, p, x, target):
    """mean((x - target)^2) over every element, float64 sums."""
    d = x.astype(np.float64) - target
    return np.asarray((d * d).sum() / max(d.size, 1), x.dtype)


def _mse_grad_infer(specs, params):
    x = specs["x"]
    expect(specs["dloss"].shape in ((), (1,)), f"dloss must be a scalar, got {specs['dloss'].describe()}")
    return {"dx": (x.shape, x.dtype), "dtarget": (x.shape, x.dtype)}


def mse_grad_ref(ctx, p, x, target, dloss):
    """(dx, dtarget) = (+, -) 2 (x - target) dloss / size."""
    dx = (x.astype(np.float64) - target) * (2.0 * float(np.asarray(dloss).reshape(-1)[0]) / max(x.size, 1))
    return dx.astype(x.dtype), (-dx).astype(x.dtype)


def mse_backward(g, node) -> None:
    """d(mse) through mse_grad: both ports' gradients from one node."""
    if g.needs(node, "x") or g.needs(node, "target"):
        dx, dtarget = g.emit("mse_grad", {"x": node.inputs["x"], "target": node.inputs["target"],
                                          "dloss": g.grad(node, "loss")}, outputs=("dx", "dtarget"))
        g.accumulate(node, "x", dx)
        g.accumulate(node, "target", dtarget)


register(OpDef("cross_entropy", "loss", ("logits", "labels"), ("loss", "lse"), _cross_entropy_infer, cross_entropy_ref,
               cross_entropy_fast, backward=cross_entropy_backward, fresh=True))
register(OpDef("cross_entropy_grad", "loss", ("logits", "labels", "lse", "dloss"), ("dlogits",), _cross_entropy_grad_infer,
               cross_entropy_grad_ref, cross_entropy_grad_fast, into=cross_entropy_grad_into))
register(OpDef("mse", "loss", ("x", "target"), ("loss",), _mse_infer, mse_ref, backward=mse_backward))
register(OpDef("mse_grad", "loss", ("x", "target", "dloss"), ("dx", "dtarget"), _mse_grad_infer, mse_grad_ref))
