"""BlazeFace detection: volvox's vectorised decode + weighted NMS on its own outputs against an
independent scalar reimplementation of MediaPipe's calculators fed by the TFLite interpreter."""

import math

import numpy as np
import pytest

import volvox
from volvox.tasks.image import preprocess

from vision_helpers import SAMPLES, model_file, sample_image

litert = pytest.importorskip("ai_edge_litert.interpreter")


def mediapipe_anchors():
    """SsdAnchorsCalculator for face_detection_short_range (fixed anchor size): 2 anchors per
    cell of the 16x16 stride-8 map, 6 per cell of the 8x8 stride-16 map."""
    out = []
    for grid, per_cell in ((16, 2), (8, 6)):
        for y in range(grid):
            for x in range(grid):
                out += [((x + 0.5) / grid, (y + 0.5) / grid)] * per_cell
    return out


def mediapipe_detections(raw_boxes, raw_scores, padding, size):
    """TensorsToDetections (sigmoid, clip 100, threshold 0.5) -> weighted NMS (IoU 0.3) ->
    letterbox removal, one detection at a time."""
    dets = []
    for (ax, ay), r, s in zip(mediapipe_anchors(), raw_boxes, raw_scores):
        score = 1 / (1 + math.exp(-max(-100.0, min(100.0, float(s)))))
        if score < 0.5:
            continue
        xc, yc, w, h = r[0] / 128 + ax, r[1] / 128 + ay, r[2] / 128, r[3] / 128
        kps = [(r[4 + 2 * k] / 128 + ax, r[5 + 2 * k] / 128 + ay) for k in range(6)]
        dets.append((score, [xc - w / 2, yc - h / 2, xc + w / 2, yc + h / 2], kps))
    dets.sort(key=lambda d: -d[0])

    def iou(a, b):
        ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
        iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
        union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - ix * iy
        return ix * iy / union if union > 0 else 0.0

    kept = []
    while dets:
        score, box, _ = dets[0]
        group = [d for d in dets if iou(box, d[1]) > 0.3]
        dets = [d for d in dets if iou(box, d[1]) <= 0.3]
        total = sum(d[0] for d in group)
        box = [sum(d[0] * d[1][i] for d in group) / total for i in range(4)]
        kps = [tuple(sum(d[0] * d[2][k][j] for d in group) / total for j in range(2)) for k in range(6)]
        kept.append((score, box, kps))
    left, top, right, bottom = padding
    w0, h0 = size
    fx = lambda x: (x - left) / (1 - left - right) * w0  # noqa: E731
    fy = lambda y: (y - top) / (1 - top - bottom) * h0  # noqa: E731
    return [(s, [fx(b[0]), fy(b[1]), fx(b[2]), fy(b[3])], [(fx(x), fy(y)) for x, y in k]) for s, b, k in kept]


def box_iou(a, b):
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    return ix * iy / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - ix * iy)


def test_anchors_match_mediapipe_layout():
    model = volvox.load("blazeface-short-range")
    assert model.anchors.shape == (896, 4)
    np.testing.assert_allclose(model.anchors[:, :2], mediapipe_anchors())
    assert np.all(model.anchors[:, 2:] == 1.0)


@pytest.mark.parametrize("name", SAMPLES)
def test_detections_match_reimplementation_on_interpreter_outputs(name):
    model = volvox.load("blazeface-short-range")
    img = sample_image(name)
    prepared = preprocess(img, model.metadata["preprocess"])
    it = litert.Interpreter(model_path=model_file("blazeface-short-range"))
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], prepared.tensor)
    it.invoke()
    out = {d["name"]: it.get_tensor(d["index"]) for d in it.get_output_details()}
    want = mediapipe_detections(out["regressors"][0], out["classificators"][0, :, 0], prepared.padding, prepared.orig_size)
    got = model.detect(img)
    assert len(got) == len(want)
    for g, (score, box, kps) in zip(got, want):
        assert box_iou(g.box, box) >= 0.99
        assert g.score == pytest.approx(score, abs=1e-4)
        np.testing.assert_allclose(g.keypoints, kps, atol=0.5)
    if name == "astronaut":  # one face, where the photo has it
        assert len(got) == 1 and got[0].label == "face"
        x0, y0, x1, y1 = got[0].box
        assert 150 < x0 < x1 < 300 and 50 < y0 < y1 < 200
