"""`volvox classify|detect|ctc MODEL IMAGE` and `volvox run` on imported vision models."""

import json

import numpy as np
import pytest

from volvox.cli import main

from vision_helpers import model_file, sample_image, text_line

pytest.importorskip("PIL")


@pytest.fixture
def astronaut_png(tmp_path):
    from PIL import Image

    path = tmp_path / "astronaut.png"
    Image.fromarray(sample_image("astronaut")).save(path)
    return str(path)


def test_classify(astronaut_png, capsys):
    assert main(["classify", "mltk-person-detection", astronaut_png, "--top-k", "1"]) == 0
    (top,) = json.loads(capsys.readouterr().out)
    assert top["label"] == "person" and top["index"] == 0


def test_detect(astronaut_png, capsys):
    assert main(["detect", "blazeface-short-range", astronaut_png]) == 0
    (face,) = json.loads(capsys.readouterr().out)
    assert face["label"] == "face" and len(face["keypoints"]) == 6 and face["score"] > 0.5


def test_ctc(tmp_path, capsys):
    path = tmp_path / "line.png"
    text_line("volvox reads text").save(path)
    assert main(["ctc", "pp-ocrv4-rec", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["text"].strip() == "volvox reads text"


def test_run_tflite_file_on_npy(tmp_path, capsys):
    x = np.zeros((1, 128, 128, 3), np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", model_file("blazeface-short-range"), "--input", f"input={tmp_path / 'x.npy'}",
                 "--output", str(tmp_path / "out.npz")]) == 0
    out = np.load(tmp_path / "out.npz")
    assert out["regressors"].shape == (1, 896, 16) and out["classificators"].shape == (1, 896, 1)


def test_wrong_task_and_bad_image_fail_cleanly(tmp_path, capsys):
    bad = tmp_path / "notimage.png"
    bad.write_bytes(b"not an image")
    assert main(["classify", "mltk-person-detection", str(bad)]) == 1
    assert "notimage.png: not an image" in capsys.readouterr().err
    assert main(["ctc", "mltk-person-detection", str(bad)]) == 1
    assert "no ctc()" in capsys.readouterr().err
