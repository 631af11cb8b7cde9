"""``volvox.load``: a path, GGUF file or model name -> a ready Model / LanguageModel."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from volvox import cpu
from volvox.errors import DeviceError, ModelNotFoundError, UnsupportedError
from volvox.hub import load_recipe, resolve_model_file
from volvox.model import Model

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
         profile: bool = False, reference: bool = False, optimize: bool | list[str] = True) -> Model:
    """Load a blueprint directory, a ``.gguf`` file or a known model name.

    threads: CPU threads for kernels (default: physical cores). profile: time every node
    (see ``model.profile``). reference: run the numpy oracle of every op (slow; for debugging).
    optimize: run the graph compiler's passes (True: all; a list: those; False: none).
    backend: "cpu", or a GPU backend ("vulkan", "opengl", "gles", "webgpu", "auto": the first hardware
    GPU) that runs the nodes it supports (docs/backends.md); an unavailable one falls back to the CPU.
    """
    t0 = time.perf_counter()
    device = _select_backend(backend)
    if threads is not None:
        cpu.set_num_threads(threads)
    path = Path(model)
    kw = dict(reference=reference, profile=profile, optimize=optimize, device=device)
    try:
        result = _load_any(model, path, kw)
    except DeviceError as e:  # e.g. the weights do not fit the GPU's memory: the CPU runs the model
        if device is None:
            raise
        device.close()
        print(f"Backend: CPU ({' '.join(str(e).split())[:200]})", file=sys.stderr)
        result = _load_any(model, path, {**kw, "device": None})
    except BaseException:
        if device is not None:
            device.close()
        raise
    result.load_seconds = time.perf_counter() - t0
    return result


def _load_any(model: str | Path, path: Path, kw: dict) -> Model:
    if path.is_dir():
        result = _load_directory(path, kw)
    elif path.is_file():
        result = _load_file(path, kw)
    elif str(model).endswith((".gguf", ".json", ".safetensors")) or "/" in str(model):
        raise ModelNotFoundError(f"{model}: no such file or directory")
    else:
        recipe = load_recipe(str(model))
        result = _load_file(resolve_model_file(recipe["name"]), kw, recipe.get("metadata"))
    return result


def _load_file(path: Path, kw: dict, metadata: dict | None = None) -> Model:
    with open(path, "rb") as f:
        magic = f.read(8)
    if magic[:4] == b"GGUF":
        from volvox.architectures.from_gguf import load_gguf_lm
        return load_gguf_lm(str(path), **kw)
    if magic[4:8] == b"TFL3" or path.suffix in (".onnx", ".pth"):
        from volvox.formats.vision_files import load_vision_file
        return load_vision_file(path, metadata, **kw)
    raise UnsupportedError(f"{path}: not a model file volvox can load (expected a GGUF file, "
                           f"a blueprint directory or a model name; file starts with {magic[:4]!r})")


def _load_directory(path: Path, kw: dict) -> Model:
    from volvox.formats.blueprint import read_blueprint
    from volvox.architectures.hf import is_hf_folder, load_hf
    from volvox.formats.vision_files import VISION_TASKS, task_class
    from volvox.tasks.from_blueprint import task_model

    if is_hf_folder(path):  # a Hugging Face checkpoint folder (config.json with a model_type)
        return load_hf(path, **kw)
    graph, weights, metadata, st = read_blueprint(path)
    closers = [st.close] if st is not None else []
    try:
        if metadata.get("task") in VISION_TASKS:
            return task_class(metadata["task"])(graph, weights, metadata, str(path), closers=closers, **kw)
        return task_model(graph, weights, metadata, path, closers, **kw)
    except BaseException:
        for close in closers:
            close()
        raise
