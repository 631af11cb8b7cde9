"""Ops whose output shape depends on the input values: nonzero, compress, unique and
non_max_suppression (ONNX's NonZero, Compress, Unique, NonMaxSuppression).

volvox plans every buffer from shapes known at import, so these run at import: the ONNX importer
folds them when their inputs are constants (as exported models usually hold them: a mask or a box
set computed from weights); when an input is computed from graph inputs, the model is planned per
value of those inputs at run time (formats/onnx/value_plans.py), which folds them again. ``infer``
refuses a graph that holds one as a node. ``ref`` is the numpy implementation.
"""

from __future__ import annotations

import numpy as np

from volvox.ir.graph import expect
from volvox.ops.registry import OpDef, register


def _runs_at_import(op: str):
    def infer(specs, params):
        expect(False, f"{op}'s output shape depends on its input values; volvox runs it at import on constants")
    return infer


def nonzero_ref(ctx, p, x):
    """The indices of x's nonzero elements, (rank, count) int64, in row-major order."""
    return np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


def compress_ref(ctx, p, x, condition):
    """The slices of x along ``axis`` (x flattened when absent) where ``condition`` is true; a condition
    shorter than the axis keeps only its length."""
    return np.compress(condition.astype(bool).reshape(-1), x, axis=p.get("axis"))


def unique_ref(ctx, p, x):
    """(unique values or slices along ``axis``, first-occurrence indices, inverse indices, counts):
    sorted ascending (``sorted`` 1) or in order of first occurrence (0)."""
    axis = p.get("axis")
    flat = x.reshape(-1) if axis is None else x
    y, first, inverse, counts = np.unique(flat, return_index=True, return_inverse=True, return_counts=True,
                                          axis=None if axis is None else axis)
    inverse = inverse.reshape(-1)
    if not p.get("sorted", 1):
        order = np.argsort(first, kind="stable")     # unique entries by first occurrence
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        first, counts, inverse = first[order], counts[order], rank[inverse]
        y = np.take(flat, first, axis=0 if axis is None else axis)
    return y, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64)


def _corners(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """(boxes, 4) [y_min, x_min, y_max, x_max] of ONNX boxes: corners in either order, or centre and size."""
    if center_point_box:
        xc, yc, w, h = boxes[:, 0], boxes[:, 1], boxes[:, 2] / 2, boxes[:, 3] / 2
        return np.stack([yc - h, xc - w, yc + h, xc + w], axis=1)
    return np.stack([np.minimum(boxes[:, 0], boxes[:, 2]), np.minimum(boxes[:, 1], boxes[:, 3]),
                     np.maximum(boxes[:, 0], boxes[:, 2]), np.maximum(boxes[:, 1], boxes[:, 3])], axis=1)


def _iou(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    """Intersection over union of one [y_min, x_min, y_max, x_max] box with each of ``others``; 0 where
    they do not overlap or an area is empty."""
    height = np.minimum(box[2], others[:, 2]) - np.maximum(box[0], others[:, 0])
    width = np.minimum(box[3], others[:, 3]) - np.maximum(box[1], others[:, 1])
    inter = np.where((height > 0) & (width > 0), height * width, 0)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    union = area + areas - inter
    valid = (inter > 0) & (area > 0) & (areas > 0) & (union > 0)
    return np.where(valid, inter / np.where(valid, union, 1), 0)


def non_max_suppression_ref(ctx, p, boxes, scores, max_output_boxes_per_class=None, iou_threshold=None,
                            score_threshold=None):
    """(selected, 3) int64 [batch, class, box] rows: per batch and class, boxes by descending score
    (ties: lower index first) above ``score_threshold``, each kept unless its IoU with a kept one
    exceeds ``iou_threshold``, at most ``max_output_boxes_per_class`` (absent: none selected)."""
    limit = 0 if max_output_boxes_per_class is None or np.size(max_output_boxes_per_class) == 0 else \
        max(int(np.asarray(max_output_boxes_per_class).reshape(-1)[0]), 0)
    iou_limit = 0.0 if iou_threshold is None or np.size(iou_threshold) == 0 else np.asarray(iou_threshold).reshape(-1)[0]
    selected = []
    for b in range(boxes.shape[0]):
        corners = _corners(boxes[b], p.get("center_point_box", 0))               # (boxes, 4)
        for c in range(scores.shape[1]):
            s = scores[b, c]
            order = np.lexsort((np.arange(s.size), -s.astype(np.float64)))
            if score_threshold is not None and np.size(score_threshold):
                order = order[s[order] > np.asarray(score_threshold).reshape(-1)[0]]
            kept: list[int] = []
            for i in order:
                if len(kept) >= limit:
                    break
                if not kept or not np.any(_iou(corners[i], corners[kept]) > iou_limit):
                    kept.append(int(i))
            selected += [(b, c, i) for i in kept]
    return np.array(selected, dtype=np.int64).reshape(-1, 3)


register(OpDef("nonzero", "data_dependent", ("x",), ("y",), _runs_at_import("nonzero"), nonzero_ref))
register(OpDef("compress", "data_dependent", ("x", "condition"), ("y",), _runs_at_import("compress"), compress_ref))
register(OpDef("unique", "data_dependent", ("x",), ("y", "indices", "inverse_indices", "counts"),
               _runs_at_import("unique"), unique_ref))
register(OpDef("non_max_suppression", "data_dependent",
               ("boxes", "scores", "max_output_boxes_per_class?", "iou_threshold?", "score_threshold?"), ("selected",),
               _runs_at_import("non_max_suppression"), non_max_suppression_ref))
