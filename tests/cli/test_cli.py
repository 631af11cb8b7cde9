"""The volvox command line, run as a user would (python -m volvox ...)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from tiny_gguf import write_tiny_llama


def volvox_cli(*args, env=None):
    # cwd outside the source tree, so the installed package (with its compiled kernels) is the one run
    return subprocess.run([sys.executable, "-m", "volvox", *map(str, args)], capture_output=True, text=True,
                          timeout=600, env=env, cwd=Path(__file__).parent)


def test_generate_default_model_with_debug(smollm2_gguf_path):
    r = volvox_cli("generate", smollm2_gguf_path, "--prompt", "The capital of France is", "--max-new-tokens", "12", "--debug")
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout
    for needle in ("load:", "prefill:", "decode:", "tok/s", "linear", "attention"):
        assert needle in r.stderr


def test_chat_one_message(smollm2_gguf_path):
    r = volvox_cli("chat", smollm2_gguf_path, "--message", "What is 2+2?", "--max-new-tokens", "24")
    assert r.returncode == 0, r.stderr
    assert "4" in r.stdout


def test_info_reports_kernels_and_model(tmp_path):
    path = write_tiny_llama(tmp_path / "tiny.gguf")
    r = volvox_cli("info", path)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["isa"] in info["isas_available"]
    assert info["model"]["config"]["n_layers"] == 2
    assert info["model"]["outputs"] == ["logits: float32[out_seq, 263]"]


def test_run_blueprint_graph(tmp_path):
    from volvox.formats.safetensors import save_safetensors

    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    (tmp_path / "config.json").write_text(json.dumps({
        "format": "volvox-blueprint", "version": 1,
        "inputs": [{"name": "x", "shape": ["n", 4], "dtype": "float32"}],
        "nodes": [{"id": "fc", "op": "linear", "inputs": {"x": "x", "weight": "w"}, "outputs": {"y": "y"}}],
        "outputs": ["y"]}))
    save_safetensors(tmp_path / "model.safetensors", {"w": w})
    x = np.ones((2, 4), np.float32)
    np.save(tmp_path / "x.npy", x)
    r = volvox_cli("run", tmp_path, "--input", f"x={tmp_path / 'x.npy'}", "--output", tmp_path / "out.npz")
    assert r.returncode == 0, r.stderr
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["y"], x @ w.T, rtol=1e-5)


def test_errors_are_one_line(tmp_path):
    r = volvox_cli("generate", tmp_path / "nope.gguf", "--prompt", "hi")
    assert r.returncode == 1
    assert r.stderr.startswith("volvox: error:") and "nope.gguf" in r.stderr and "Traceback" not in r.stderr
    r = volvox_cli("generate", write_tiny_llama(tmp_path / "t.gguf"), "--prompt", "hi", "--max-new-tokens", "-2")
    assert r.returncode == 1 and "max_new_tokens" in r.stderr


def test_info_reports_machine_tiers_openmp_and_gpu_backends():
    import os
    import platform

    from gpu_helpers import device_or_none
    from volvox._gpu.devices import GPU_BACKENDS

    r = volvox_cli("info", env={**os.environ, "VOLVOX_ISA": "generic", "VOLVOX_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["machine"] == platform.machine()
    assert info["isa"] == "generic" and info["threads"] == 1
    assert set(info["isas_available"]) <= set(info["isas_built"]) and "generic" in info["isas_available"]
    assert isinstance(info["openmp"], bool)
    assert list(info["gpu_backends"]) == list(GPU_BACKENDS)
    for name, entry in info["gpu_backends"].items():  # agrees with opening each backend in this process
        assert entry["available"] == (device_or_none(name) is not None), (name, entry)
        assert entry["device"] if entry["available"] else entry["reason"]
