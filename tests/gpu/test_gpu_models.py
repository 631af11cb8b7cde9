"""Whole models on every available GPU backend against the CPU: a tiny LLaMA prefill (and decode steps
over the KV cache it left on the device), a small CNN, one submit per forward, CPU islands, and
the one-line fallback when no driver is found."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpu_helpers import BACKENDS, device_or_none, device_or_skip, nmse
from tiny_gguf import write_tiny_llama
import volvox
from volvox._gpu.devices import GPU_BACKENDS
from volvox.compile import CPU_ONLY, PASSES
from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.model import Model
from volvox.ops.context import RunContext
from volvox.runtime.executor import Executor
from volvox.tasks.generate import Session
from volvox.ops import validate


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    path = tmp_path_factory.mktemp("gpu") / "tiny.gguf"
    write_tiny_llama(path, n_layers=2, dim=64, n_heads=4, n_kv_heads=2, ffn=96, qtype="f32")
    return path


def _gpu_lm(path, backend):
    device = device_or_skip(backend)
    lm = volvox.load(path)  # CPU model, then the same graph on the session's shared device
    gpu = type(lm)(lm.graph, _weights(lm), lm.metadata, lm.source, lm.config, lm.tokenizer, optimize=False,
                   device=device)
    gpu._closers.clear()  # the device is shared by the whole test session
    return lm, gpu


def _weights(model):
    return {name: w for (_, w), name in zip(model.executor.weight_slots, model.graph.weights)}


@BACKENDS
def test_llama_prefill_matches_cpu_one_submit(tiny_llama, backend):
    cpu, gpu = _gpu_lm(tiny_llama, backend)
    assert set(gpu.executor.node_backends().values()) == {backend}, gpu.executor.placement
    ids = np.arange(3, 40, dtype=np.int32)  # (37,)
    want = Session(cpu).forward(ids, all_logits=True)
    before = gpu.executor.device.submits
    sess = Session(gpu)
    got = sess.forward(ids, all_logits=True)
    assert gpu.executor.last_backend == backend
    assert gpu.executor.device.submits - before == 1  # the whole graph on the GPU: one submit per forward
    assert nmse(got, want) < 1e-10 and np.abs(got - want).max() < 1e-4
    ref = Session(volvox.load(tiny_llama, reference=True)).forward(ids, all_logits=True)  # the numpy oracle
    assert nmse(got, ref) < 1e-10


@BACKENDS
def test_llama_gpu_prefill_and_decode_share_the_device_cache(tiny_llama, backend):
    cpu, gpu = _gpu_lm(tiny_llama, backend)
    a, b = Session(cpu), Session(gpu)
    prompt = np.arange(5, 17, dtype=np.int32)
    np.testing.assert_allclose(b.forward(prompt), a.forward(prompt), atol=1e-4)
    for tok in (7, 9, 11):  # single-token decode runs on the GPU too, over the device KV cache
        np.testing.assert_allclose(b.forward([tok]), a.forward([tok]), atol=1e-4)
        assert gpu.executor.last_backend == backend
    second = np.arange(20, 29, dtype=np.int32)
    np.testing.assert_allclose(b.forward(second, all_logits=True), a.forward(second, all_logits=True), atol=1e-4)
    assert gpu.executor.last_backend == backend


def _cnn() -> tuple[Graph, dict]:
    r = np.random.default_rng(3)
    w = lambda *s: r.uniform(-0.5, 0.5, s).astype(np.float32)  # noqa: E731
    weights = {"c1.w": w(8, 3, 3, 3), "c1.b": w(8), "dw.w": w(8, 3, 3, 1), "pw.w": w(12, 1, 1, 8), "pw.b": w(12),
               "fc.w": w(5, 12), "fc.b": w(5)}
    nodes = [
        Node("c1", "conv2d", {"x": "image", "weight": "c1.w", "bias": "c1.b"}, {"y": "a"},
             {"strides": [2, 2], "pads": [0, 0, 1, 1], "activation": "relu6"}),
        Node("dw", "conv2d", {"x": "a", "weight": "dw.w"}, {"y": "b"}, {"groups": 8, "pads": [1, 1, 1, 1], "activation": "relu"}),
        Node("res", "add", {"a": "a", "b": "b"}, {"y": "c"}),
        Node("pw", "conv2d", {"x": "c", "weight": "pw.w", "bias": "pw.b"}, {"y": "d"}),
        Node("pool", "max_pool2d", {"x": "d"}, {"y": "e"}, {"kernel": [2, 2], "strides": [2, 2]}),
        Node("gap", "global_avg_pool", {"x": "e"}, {"y": "f"}),
        Node("flat", "reshape", {"x": "f"}, {"y": "g"}, {"shape": [0, -1]}),
        Node("fc", "linear", {"x": "g", "weight": "fc.w", "bias": "fc.b"}, {"y": "h"}),
        Node("prob", "softmax", {"x": "h"}, {"y": "probs"}),
    ]
    specs = {n: TensorSpec(n, a.shape, "float32") for n, a in weights.items()}
    graph = Graph([TensorSpec("image", (2, 17, 15, 3), "float32")], specs, nodes, ["probs"])
    validate(graph)
    return graph, weights


@BACKENDS
def test_cnn_matches_cpu_one_submit(backend):
    device = device_or_skip(backend)
    graph, weights = _cnn()
    image = np.random.default_rng(4).uniform(0, 1, (2, 17, 15, 3)).astype(np.float32)
    want = Executor(graph, weights, reference=True).run(RunContext(), {"image": image})["probs"]
    model = Model(graph, weights, {}, "cnn", device=device)
    model._closers.clear()
    assert set(model.executor.node_backends().values()) == {backend}
    before = device.submits
    got = model.run({"image": image})["probs"]
    assert device.submits - before == 1
    assert nmse(got, want) < 1e-10


def _island_model(device, profile: bool = False) -> tuple[Model, np.ndarray]:
    """relu -> a mean over the leading axis (which stays on the CPU) -> add of a bias, on ``device``:
    (the model, its bias (5,)); y = mean(relu(x), axis 0) + bias for x (3, 5)."""
    nodes = [Node("a", "relu", {"x": "x"}, {"y": "h"}),
             Node("t", "reduce_mean", {"x": "h"}, {"y": "ht"}, {"axes": [0]}),
             Node("b", "add", {"a": "ht", "b": "bias"}, {"y": "y"})]
    graph = Graph([TensorSpec("x", (3, 5), "float32")], {"bias": TensorSpec("bias", (5,), "float32")}, nodes, ["y"])
    validate(graph)
    bias = np.arange(5, dtype=np.float32)  # (5,)
    model = Model(graph, {"bias": bias}, {}, "island", device=device, profile=profile)
    model._closers.clear()
    return model, bias


@BACKENDS
def test_cpu_island_splits_the_graph(backend):
    """A node the GPU cannot run (a mean over a leading axis) between GPU nodes: download, CPU, upload."""
    device = device_or_skip(backend)
    model, bias = _island_model(device, profile=True)
    assert model.executor.node_backends() == {"a": backend, "t": "cpu", "b": backend}
    x = np.random.default_rng(5).standard_normal((3, 5)).astype(np.float32)
    before = device.submits
    model.profile.reset()
    y = model.run({"x": x})["y"]
    np.testing.assert_allclose(y, np.maximum(x, 0).mean(axis=0, keepdims=True) + bias, rtol=1e-6)
    assert device.submits - before >= 2
    table = model.profile.node_table(model.graph)
    assert backend in table and "cpu" in table


def test_missing_drivers_fall_back_to_cpu(tiny_llama, tmp_path):
    """No Vulkan ICD, no EGL vendor: every GPU backend prints one fallback line and runs on the CPU."""
    script = tmp_path / "fallback.py"
    script.write_text(
        "import json, sys, numpy as np, volvox\n"
        "from volvox.tasks.generate import Session\n"
        "out = {}\n"
        "for b in ('vulkan', 'opengl', 'gles', 'webgpu'):\n"
        "    lm = volvox.load(sys.argv[1], backend=b)\n"
        "    out[b] = [type(lm.executor).__name__, Session(lm).forward(np.arange(3, 20, dtype=np.int32)).tolist()]\n"
        "print(json.dumps(out))\n")
    env = dict(os.environ, VK_ICD_FILENAMES="/nonexistent", VK_DRIVER_FILES="/nonexistent",
               __EGL_VENDOR_LIBRARY_FILENAMES="/nonexistent", LIBGL_ALWAYS_SOFTWARE="0")
    r = subprocess.run([sys.executable, str(script), str(tiny_llama)], capture_output=True, text=True, env=env,
                       timeout=300, cwd=Path(__file__).parent)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("Backend: CPU (")]
    assert [ln.split(" unavailable:")[0] for ln in lines] == [
        "Backend: CPU (Vulkan", "Backend: CPU (OpenGL", "Backend: CPU (OpenGL ES", "Backend: CPU (WebGPU"], r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    want = Session(volvox.load(tiny_llama)).forward(np.arange(3, 20, dtype=np.int32))
    for b, (executor, logits) in out.items():
        assert executor == "Executor", b
        np.testing.assert_allclose(np.array(logits, np.float32), want, atol=1e-5)


def test_auto_takes_a_hardware_gpu_or_quietly_the_cpu(tiny_llama, capsys):
    lm = volvox.load(tiny_llama, backend="auto")
    try:
        on_gpu = hasattr(lm.executor, "device")
        assert not on_gpu or not lm.executor.device.software  # never a software rasterizer
        assert "Backend: CPU" not in capsys.readouterr().err
        ids = np.arange(3, 12, dtype=np.int32)
        np.testing.assert_allclose(Session(lm).forward(ids), Session(volvox.load(tiny_llama)).forward(ids), atol=1e-4)
    finally:
        lm.close()


@pytest.mark.parametrize("description, adapter_type, software", [
    ("llvmpipe (LLVM 15.0.6, 256 bits)", "", True),                 # Mesa llvmpipe (GL) and lavapipe (Vulkan)
    ("llvmpipe (LLVM 15.0.6, 256 bits) via Vulkan", "CPU", True),   # wgpu on lavapipe
    ("Mesa lavapipe", "", True),
    ("softpipe", "", True),
    ("SwiftShader Device (Subzero)", "", True),
    ("Microsoft Basic Render Driver via D3D12", "", True),          # WARP
    ("AMD EPYC 7B13", "cpu", True),                                 # any adapter whose type is CPU
    ("NVIDIA GeForce RTX 4090", "", False),
    ("NVIDIA H200 via Vulkan", "DiscreteGPU", False),
    ("AMD Radeon RX 7900 XTX (RADV NAVI31)", "", False),
    ("Mesa Intel(R) UHD Graphics 620 (KBL GT2)", "", False),
    ("Apple M2 Pro via Metal", "IntegratedGPU", False),
    ("Adreno (TM) 740", "", False),
])
def test_software_adapters_are_told_from_hardware_gpus(description, adapter_type, software):
    from volvox._gpu.backend import software_adapter
    assert software_adapter(description, adapter_type) is software


class _FakeDevice:
    def __init__(self, software):
        self.software, self.closed = software, False

    def close(self):
        self.closed = True


def test_auto_skips_software_adapters_and_takes_the_first_hardware_one(monkeypatch, capsys):
    from volvox._gpu.backend import BackendUnavailable
    from volvox.loader import _select_backend

    opened = {"vulkan": _FakeDevice(True), "gles": _FakeDevice(False), "webgpu": _FakeDevice(False)}

    def fake_open(name):
        if name not in opened:
            raise BackendUnavailable("no driver")
        return opened[name]

    monkeypatch.setattr("volvox._gpu.devices.open_device", fake_open)
    assert _select_backend("auto") is opened["gles"]       # vulkan was a software one, opengl had no driver
    assert opened["vulkan"].closed and not opened["gles"].closed
    opened.update(gles=_FakeDevice(True), webgpu=_FakeDevice(True))
    assert _select_backend("auto") is None                  # only software adapters: the CPU, silently
    assert _select_backend("vulkan") is opened["vulkan"]    # asked by name, a software adapter is used
    assert capsys.readouterr().err == ""


@pytest.mark.slow
@pytest.mark.parametrize("name", ["pp-ocrv4-rec", "blazeface-short-range"])
def test_float_vision_models_run_whole_on_the_gpu(name):
    """Real float CNNs (ONNX PP-OCRv4, TFLite BlazeFace): every node on each GPU backend, one submit,
    outputs equal to the CPU run (itself tested against onnxruntime / TFLite in test_onnx / test_vision_*)."""
    try:  # compiled as for a GPU (a CPU-only pass's fused nodes would stay on the CPU)
        cpu = volvox.load(name, optimize=[p for p in PASSES if p not in CPU_ONLY])
    except volvox.VolvoxError as e:
        pytest.skip(f"{name} unavailable: {e}")
    weights = _weights(cpu)
    r = np.random.default_rng(6)
    feeds = {s.name: r.uniform(0, 1, [d if isinstance(d, int) else 80 for d in s.shape]).astype(s.dtype)
             for s in cpu.graph.inputs}
    want = cpu.run(feeds)
    for backend in GPU_BACKENDS:
        device = device_or_none(backend)
        if device is None:
            continue
        gpu = Model(cpu.graph, weights, cpu.metadata, name, optimize=False, device=device)
        gpu._closers.clear()
        assert set(gpu.executor.node_backends().values()) == {backend}, gpu.executor.describe()
        before = device.submits
        got = gpu.run(feeds)
        assert device.submits - before == 1
        for k in want:
            assert nmse(got[k], want[k]) < 1e-9, (backend, k)
