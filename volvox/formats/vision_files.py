"""Vision model files (.tflite, .onnx, .pth recipes) -> the task class their metadata names."""

from __future__ import annotations

from pathlib import Path

from volvox.errors import UnsupportedError
from volvox.model import Model

VISION_TASKS = ("classify", "detect", "ctc")


def task_class(task: str | None) -> type[Model]:
    """The Model subclass serving ``task`` (plain Model for raw graphs)."""
    if task == "classify":
        from volvox.tasks.classify import Classifier
        return Classifier
    if task == "detect":
        from volvox.tasks.detect import Detector
        return Detector
    if task == "ctc":
        from volvox.tasks.ctc import TextRecognizer
        return TextRecognizer
    return Model


def load_vision_file(path: Path, metadata: dict | None, **model_kw) -> Model:
    """Import ``path`` (TFLite by its 'TFL3' identifier, ONNX, or a recipe's PyTorch state dict);
    ``metadata`` (a recipe's) adds the task, labels and preprocessing."""
    with open(path, "rb") as f:
        head = f.read(8)
    if head[4:8] == b"TFL3":
        from volvox.formats.tflite import read_tflite
        graph, weights, meta = read_tflite(path)
    elif path.suffix == ".onnx":
        from volvox.formats.onnx import read_onnx
        graph, weights, meta = read_onnx(path)
    elif path.suffix == ".pth" and metadata and metadata.get("architecture") == "efficientnet-lite0":
        from volvox.architectures.efficientnet_lite import read_efficientnet_lite
        graph, weights, meta = read_efficientnet_lite(path)
    else:
        raise UnsupportedError(f"{path}: not a model file volvox can load (expected GGUF, TFLite, ONNX, "
                               f"a blueprint directory or a model name; file starts with {head[:4]!r})")
    meta.update(metadata or {})
    return task_class(meta.get("task"))(graph, weights, meta, str(path), **model_kw)
