"""Object detection with SSD anchors (BlazeFace): decode boxes and keypoints, suppress overlaps
the way MediaPipe does, and map results back to original image pixels.

metadata.detect: anchors (MediaPipe SsdAnchorsCalculator options), boxes / scores (graph
output names), num_keypoints, scale [x, y, w, h], score_clipping, min_score,
nms {algorithm: "weighted" | "regular", iou_threshold}, labels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from volvox.errors import BlueprintError
from volvox.tasks.image import preprocess
from volvox.model import Model


@dataclass(frozen=True)
class Detection:
    """One detection in original-image pixels."""

    box: tuple[float, float, float, float]   # (xmin, ymin, xmax, ymax)
    score: float
    label: str
    keypoints: tuple[tuple[float, float], ...]  # ((x, y), ...)


def ssd_anchors(opt: dict) -> np.ndarray:
    """MediaPipe SsdAnchorsCalculator: (n_anchors, 4) rows of (x_center, y_center, w, h), normalised."""
    n, strides = int(opt["num_layers"]), [int(s) for s in opt["strides"]]
    lo, hi = float(opt["min_scale"]), float(opt["max_scale"])
    scale_at = lambda i: (lo + hi) / 2 if n == 1 else lo + (hi - lo) * i / (n - 1)  # noqa: E731
    in_w, in_h = opt["input_size"]
    off_x, off_y = opt.get("anchor_offset", (0.5, 0.5))
    interp = float(opt.get("interpolated_scale_aspect_ratio", 1.0))
    rows = []
    layer = 0
    while layer < n:
        sizes = []  # (w, h) per anchor of a cell
        last = layer
        while last < n and strides[last] == strides[layer]:
            s = scale_at(last)
            sizes += [(s * math.sqrt(ar), s / math.sqrt(ar)) for ar in opt.get("aspect_ratios", [1.0])]
            if interp > 0:
                s2 = math.sqrt(s * (1.0 if last == n - 1 else scale_at(last + 1)))
                sizes.append((s2 * math.sqrt(interp), s2 / math.sqrt(interp)))
            last += 1
        fh, fw = math.ceil(in_h / strides[layer]), math.ceil(in_w / strides[layer])
        for y in range(fh):
            for x in range(fw):
                for w, h in sizes:
                    if opt.get("fixed_anchor_size", False):
                        w = h = 1.0
                    rows.append(((x + off_x) / fw, (y + off_y) / fh, w, h))
        layer = last
    return np.array(rows, np.float64)


def decode(raw_boxes: np.ndarray, raw_scores: np.ndarray, anchors: np.ndarray, cfg: dict):
    """(boxes (n, 4) xmin ymin xmax ymax, keypoints (n, k, 2), scores (n,)), normalised to the input tensor."""
    sx, sy, sw, sh = (float(v) for v in cfg["scale"])
    ax, ay, aw, ah = anchors.T                                # each (n,)
    r = raw_boxes.astype(np.float64)                          # (n, 4 + 2k)
    xc, yc = r[:, 0] / sx * aw + ax, r[:, 1] / sy * ah + ay
    w, h = r[:, 2] / sw * aw, r[:, 3] / sh * ah
    boxes = np.stack([xc - w / 2, yc - h / 2, xc + w / 2, yc + h / 2], axis=1)
    k = int(cfg.get("num_keypoints", 0))
    kp = r[:, 4:4 + 2 * k].reshape(-1, k, 2)
    kp = np.stack([kp[..., 0] / sx * aw[:, None] + ax[:, None], kp[..., 1] / sy * ah[:, None] + ay[:, None]], axis=-1)
    clip = float(cfg.get("score_clipping", 100.0))
    scores = 1.0 / (1.0 + np.exp(-np.clip(raw_scores.astype(np.float64).reshape(-1), -clip, clip)))
    return boxes, kp, scores


def iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """Intersection over union of one box (4,) with each of boxes (m, 4)."""
    ix = np.clip(np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]), 0, None)
    iy = np.clip(np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]), 0, None)
    inter = ix * iy
    union = (box[2] - box[0]) * (box[3] - box[1]) + (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]) - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def non_max_suppression(boxes, kps, scores, iou_threshold: float, weighted: bool):
    """MediaPipe's NMS over detections sorted by score: each survivor absorbs every remaining box
    overlapping it by more than ``iou_threshold``; weighted NMS replaces it with the score-weighted
    mean of those boxes and keypoints (keeping its own score). Returns a list of (box, kps, score)."""
    order = list(np.argsort(-scores, kind="stable"))
    out = []
    while order:
        top = order[0]
        overlap = iou(boxes[top], boxes[order]) > iou_threshold
        group = [i for i, o in zip(order, overlap) if o]
        order = [i for i, o in zip(order, overlap) if not o]
        box, kp = boxes[top], kps[top]
        if weighted and group:
            wts = scores[group] / scores[group].sum()
            box, kp = wts @ boxes[group], np.tensordot(wts, kps[group], axes=1)
        out.append((box, kp, float(scores[top])))
    return out


class Detector(Model):
    """A detection model: ``detect(image)`` -> detections in original image pixels, best first."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        cfg = self.metadata.get("detect")
        if not isinstance(cfg, dict):
            raise BlueprintError(f"{self.source}: detection models need metadata.detect")
        self.anchors = ssd_anchors(cfg["anchors"])  # (n_anchors, 4)

    def raw(self, image):
        """(prepared input, raw box tensor, raw score tensor) for one image."""
        cfg = self.metadata["detect"]
        prepared = preprocess(image, self.metadata["preprocess"])
        out = self.run({self.graph.inputs[0].name: prepared.tensor})
        return prepared, out[cfg["boxes"]].reshape(len(self.anchors), -1), out[cfg["scores"]].reshape(-1)

    def detect(self, image, min_score: float | None = None) -> list[Detection]:
        """Detections of ``image`` (path, PIL image or RGB array)."""
        cfg = self.metadata["detect"]
        prepared, raw_boxes, raw_scores = self.raw(image)
        return postprocess(raw_boxes, raw_scores, self.anchors, cfg, prepared.padding, prepared.orig_size,
                           cfg.get("min_score", 0.5) if min_score is None else min_score)


def postprocess(raw_boxes, raw_scores, anchors, cfg, padding, orig_size, min_score) -> list[Detection]:
    """Decode, threshold, NMS and undo the letterbox: detections in original-image pixels."""
    boxes, kps, scores = decode(raw_boxes, raw_scores, anchors, cfg)
    keep = scores >= min_score
    nms = cfg.get("nms", {})
    found = non_max_suppression(boxes[keep], kps[keep], scores[keep], float(nms.get("iou_threshold", 0.3)),
                                nms.get("algorithm", "weighted") == "weighted")
    left, top, right, bottom = padding
    w0, h0 = orig_size
    sx, sy = w0 / (1.0 - left - right), h0 / (1.0 - top - bottom)
    label = (cfg.get("labels") or ["object"])[0]
    result = []
    for box, kp, score in found:
        b = ((box[0] - left) * sx, (box[1] - top) * sy, (box[2] - left) * sx, (box[3] - top) * sy)
        k = tuple(((float(x) - left) * sx, (float(y) - top) * sy) for x, y in kp)
        result.append(Detection(tuple(float(v) for v in b), score, label, k))
    return result
