"""``volvox.load``: a model name, file or folder -> its importer (formats/, architectures/) -> the
model of its task (TASKS), compiled and ready to run. The one place that tells kinds of files apart."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import importlib

from volvox import cpu
from volvox.errors import DeviceError, ModelNotFoundError, UnsupportedError
from volvox.formats.imported import Imported
from volvox.hub import load_recipe, parse_hub_name, resolve_hub_model, resolve_model_file
from volvox.model import Model

# Readers and task classes are imported when a model needs them (below), so that ``import volvox``
# does not load every format's parser, tokenizer and template engine (616 -> ~250 ms).

BACKENDS = ("cpu", "auto", "vulkan", "opengl", "gles", "webgpu")


def _select_backend(backend: str):
    """The GPU device that will run (None: the CPU). A GPU request that cannot be met falls back to
    the CPU with one line saying why; "auto" takes the first hardware GPU, silently the CPU if none."""
    if backend not in BACKENDS:
        raise UnsupportedError(f"unknown backend {backend!r} (choose from {', '.join(BACKENDS)})")
    if backend == "cpu":
        return None
    from volvox._gpu.devices import GPU_BACKENDS, LABELS, open_device
    from volvox._gpu.backend import BackendUnavailable

    for name in (GPU_BACKENDS if backend == "auto" else (backend,)):
        try:
            device = open_device(name)
        except BackendUnavailable as e:
            if backend != "auto":
                reason = " ".join(str(e).split())
                print(f"Backend: CPU ({LABELS[name]} unavailable: {reason[:200]})", file=sys.stderr)
            continue
        if backend == "auto" and device.software:  # a CPU rasterizer is slower than the CPU kernels
            device.close()
            continue
        return device
    return None


def load(model: str | Path, *, threads: int | None = None, backend: str = "cpu",
         profile: bool = False, reference: bool = False, optimize: bool | list[str] = True,
         adapter: str | Path | None = None) -> Model:
    """Load a blueprint directory, a ``.gguf`` file, a known model name or a Hugging Face Hub repo
    (``org/repo`` or ``hf://org/repo[/file.gguf][@revision]``, through huggingface_hub's cache).

    threads: CPU threads for kernels (default: physical cores). profile: time every node
    (see ``model.profile``). reference: run the numpy oracle of every op (slow; for debugging).
    optimize: run the graph compiler's passes (True: all; a list: those; False: none).
    backend: "cpu", or a GPU backend ("vulkan", "opengl", "gles", "webgpu", "auto": the first hardware
    GPU) that runs the nodes it supports (docs/backends.md); an unavailable one falls back to the CPU.
    adapter: a LoRA adapter folder (PEFT's adapter_config.json + adapter_model.safetensors) applied
    beside the model's projections (docs/training.md).
    """
    t0 = time.perf_counter()
    device = _select_backend(backend)
    if threads is not None:
        cpu.set_num_threads(threads)
    path = Path(model)
    kw = dict(reference=reference, profile=profile, optimize=optimize, device=device)
    try:
        result = _load_any(model, path, kw, adapter)
    except DeviceError as e:  # e.g. the weights do not fit the GPU's memory: the CPU runs the model
        if device is None:
            raise
        device.close()
        print(f"Backend: CPU ({' '.join(str(e).split())[:200]})", file=sys.stderr)
        result = _load_any(model, path, {**kw, "device": None}, adapter)
    except BaseException:
        if device is not None:
            device.close()
        raise
    result.load_seconds = time.perf_counter() - t0
    return result


def _load_any(model: str | Path, path: Path, kw: dict, adapter: str | Path | None = None) -> Model:
    recipe_metadata = None
    if not path.exists() and parse_hub_name(str(model)) is not None:  # org/repo or hf://org/repo[/file][@rev]
        path = resolve_hub_model(str(model))
    elif not path.exists():
        if str(model).endswith((".gguf", ".json", ".safetensors")) or "/" in str(model):
            raise ModelNotFoundError(f"{model}: no such file or directory")
        recipe = load_recipe(str(model))
        path, recipe_metadata = resolve_model_file(recipe["name"]), recipe.get("metadata")
    try:
        imported = import_model(path, recipe_metadata)
    except UnsupportedError as e:   # an ONNX graph whose shapes follow input values: planned per value at run time
        if path.suffix != ".onnx" or adapter is not None or (recipe_metadata or {}).get("task"):
            raise
        from volvox.formats.onnx import ConstantRequired, plan_per_value

        if not isinstance(e, ConstantRequired):
            raise
        return plan_per_value(e, str(path), **kw)
    try:
        if adapter is not None:
            from volvox.architectures.lora import apply_adapter

            imported.graph, imported.weights = apply_adapter(imported.graph, imported.weights, adapter)
            imported.metadata = {**imported.metadata, "adapter": str(adapter)}
        return task_class(imported.metadata.get("task")).from_imported(imported, **kw)
    except BaseException:
        imported.close()
        raise


# A model's ``metadata["task"]`` -> "module:class" of the class that serves it (anything else: a plain
# Model, run()).
TASKS: dict[str, str] = {
    "generate": "volvox.tasks.generate:LanguageModel", "embed": "volvox.tasks.embed:Encoder",
    "classify": "volvox.tasks.classify:Classifier", "detect": "volvox.tasks.detect:Detector",
    "ctc": "volvox.tasks.ctc:TextRecognizer", "seq2seq": "volvox.tasks.seq2seq:Seq2SeqModel",
    "transcribe": "volvox.tasks.transcribe:SpeechToText",
}


def task_class(task: str | None) -> type[Model]:
    """The class TASKS names for ``task`` (its module imported now), or Model for any other task."""
    if task not in TASKS:
        return Model
    module, name = TASKS[task].split(":")
    return getattr(importlib.import_module(module), name)


def import_model(path: Path, recipe_metadata: dict | None = None) -> Imported:
    """What the file or folder at ``path`` holds, through the reader its kind asks for: a blueprint,
    Hugging Face or CTranslate2 folder, or a file recognised by its magic bytes (GGUF, TFLite) or suffix (ONNX, a
    recipe's PyTorch state dict). ``recipe_metadata`` (a model name's recipe) adds the task, labels
    and preprocessing."""
    path = Path(path)
    if path.is_dir():
        from volvox.formats.hf_folder import is_hf_folder

        if is_hf_folder(path):
            from volvox.architectures.hf import import_hf

            return import_hf(path)
        from volvox.formats.ctranslate2 import is_ct2_folder

        if is_ct2_folder(path):
            from volvox.architectures.whisper import import_ct2

            return import_ct2(path)
        from volvox.formats.blueprint import import_blueprint

        return import_blueprint(path)
    with open(path, "rb") as f:
        head = f.read(8)
    if head[:4] == b"GGUF":
        from volvox.architectures.from_gguf import import_gguf

        return import_gguf(str(path))
    recipe = recipe_metadata or {}
    if head[4:8] == b"TFL3":
        from volvox.formats.tflite import read_tflite

        graph, weights, metadata = read_tflite(path)
    elif path.suffix == ".onnx":
        from volvox.formats.onnx import read_onnx

        graph, weights, metadata = read_onnx(path)
    elif path.suffix == ".pth" and recipe.get("architecture") == "efficientnet-lite0":
        from volvox.architectures.efficientnet_lite import read_efficientnet_lite

        graph, weights, metadata = read_efficientnet_lite(path)
    else:
        raise UnsupportedError(f"{path}: not a model file volvox can load (expected a GGUF, TFLite or ONNX file, "
                               f"a blueprint or Hugging Face folder, or a model name; file starts with {head[:4]!r})")
    return Imported(graph, weights, {**metadata, **recipe}, str(path))
