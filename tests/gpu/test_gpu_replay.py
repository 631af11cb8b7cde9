"""Record once, replay: forwards with unchanged shapes resubmit the first forward's native recording
(no new command buffers, descriptor sets, GL dispatch lists or bind groups), still one submit each
and equal to the CPU; a new bound dim records again. Also the pool's determinism that replay rests
on, the CommandGraph's cache on a host-only fake device, and driver failures (out of memory, a lost
device, a hung submit, a tensor over the binding limit) as clear volvox errors."""

from __future__ import annotations

import re

import numpy as np
import pytest

from gpu_helpers import BACKENDS, device_or_skip, nmse
from test_gpu_models import _cnn, _gpu_lm, _island_model, tiny_llama  # noqa: F401  (the module's fixture)
import volvox
from volvox._gpu.backend import Buffer, BufferPool, CommandGraph, Device, DeviceError, Recording
from volvox._gpu.devices import open_device
from volvox.errors import KernelError
from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.model import Model
from volvox.ops.context import RunContext
from volvox.runtime.executor import Executor
from volvox.tasks.generate import Session
from volvox.ops import validate


class _Counts:
    """Deltas of a GPU executor's recording counters and its device's submits since construction."""

    def __init__(self, executor):
        self.ex = executor
        self.start = self._now()

    def _now(self):
        c, d = self.ex.commands, self.ex.device
        return c.recordings, c.replays, d.dispatches_recorded, d.submits

    def since(self):
        return tuple(b - a for a, b in zip(self.start, self._now()))


def _prefill(lm, ids, sess=None):
    return (sess or Session(lm)).forward(np.asarray(ids, np.int32), all_logits=True)


@BACKENDS
def test_llama_prefill_replays_until_the_sequence_length_changes(tiny_llama, backend):  # noqa: F811
    cpu, gpu = _gpu_lm(tiny_llama, backend)
    r = np.random.default_rng(7)
    prompts = [r.integers(0, cpu.config.vocab_size, 37) for _ in range(3)]
    count = _Counts(gpu.executor)
    for i, ids in enumerate(prompts):  # new values, same length: the first forward records, the others replay
        got = _prefill(gpu, ids)
        assert nmse(got, _prefill(cpu, ids)) < 1e-10 and gpu.executor.last_backend == backend
        recordings, replays, dispatches, submits = count.since()
        assert (recordings, replays, submits) == (1, i, i + 1)
        if i == 0:
            first_dispatches = dispatches
            assert first_dispatches > 20  # every node's dispatches, recorded once
        assert dispatches == first_dispatches  # no descriptor set / bind group / dispatch list rebuilt
    # the same session again: attention's cache offset (a param) changes, the recording does not
    a, b = Session(cpu), Session(gpu)
    for ids in prompts[:2]:
        np.testing.assert_allclose(_prefill(gpu, ids, b), _prefill(cpu, ids, a), atol=1e-4)
    assert count.since()[0] == 1
    del a, b  # done: a live session's device-only KV rows would be downloaded (one more submit) when the next takes over
    # a different bound seq: one new recording, correct, one submit; the 37-token one is still cached
    short = r.integers(0, cpu.config.vocab_size, 9)
    assert nmse(_prefill(gpu, short), _prefill(cpu, short)) < 1e-10
    recordings, replays, _, submits = count.since()
    assert (recordings, submits) == (2, replays + 2)
    assert nmse(_prefill(gpu, prompts[0]), _prefill(cpu, prompts[0])) < 1e-10
    assert count.since()[:2] == (2, replays + 1)


def _dynamic_cnn() -> tuple[Graph, dict]:
    graph, weights = _cnn()
    dyn = Graph([TensorSpec("image", ("batch", "h", "w", 3), "float32")], graph.weights, graph.nodes, graph.outputs)
    validate(dyn)
    return dyn, weights


@BACKENDS
def test_cnn_replays_until_the_input_size_changes(backend):
    device = device_or_skip(backend)
    graph, weights = _dynamic_cnn()
    model = Model(graph, weights, {}, "cnn", device=device)
    model._closers.clear()
    assert set(model.executor.node_backends().values()) == {backend}
    ref = Executor(graph, weights, reference=True)
    r = np.random.default_rng(8)
    count = _Counts(model.executor)
    for shape, recordings in (((2, 17, 15, 3), 1), ((2, 17, 15, 3), 1), ((2, 17, 15, 3), 1),
                              ((3, 17, 15, 3), 2), ((1, 12, 20, 3), 3), ((2, 17, 15, 3), 3)):
        image = r.uniform(0, 1, shape).astype(np.float32)
        before = count.since()
        got = model.run({"image": image})["probs"]
        assert nmse(got, ref.run(RunContext(), {"image": image})["probs"]) < 1e-10, shape
        after = count.since()
        assert after[0] == recordings and after[3] - before[3] == 1, (shape, after)


@BACKENDS
def test_cpu_island_segments_replay(backend):
    """Two GPU segments around a CPU node: both recordings replay on the next forward."""
    device = device_or_skip(backend)
    model, bias = _island_model(device)
    count = _Counts(model.executor)
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((3, 5)).astype(np.float32)
        np.testing.assert_allclose(model.run({"x": x})["y"], np.maximum(x, 0).mean(axis=0, keepdims=True) + bias,
                                   rtol=1e-6)
    recordings, replays, _, submits = count.since()
    assert (recordings, replays, submits) == (2, 4, 6)


# -- the pool and the cache, on the host --------------------------------------------------------------
class _HostDevice(Device):
    """A device whose buffers are bytearrays and whose recordings only count: the CommandGraph logic alone."""

    name = "host"

    def __init__(self):
        super().__init__()
        self.submitted: list[tuple] = []   # (recording, params written or None)
        self.discarded: list[Recording] = []

    def _alloc(self, nbytes):
        return Buffer(bytearray(nbytes), nbytes)

    def _write(self, buf, data):
        buf.native[:len(data)] = data

    def _record(self, records, offsets, params_nbytes, reads):
        self.dispatches_recorded += len(records)
        return Recording()

    def _submit(self, rec, params, reads, timeout_ns):
        self.submits += 1
        self.submitted.append((rec, params))
        for r in reads:
            r.data = bytes(r.buffer.native[:r.nbytes])

    def _discard(self, rec):
        self.discarded.append(rec)


def _requests(pool: BufferPool, sizes: list[int], release_every: int = 2) -> list[int]:
    """A forward's worth of acquire/release/end_segment; the serials handed out, in order."""
    got, held = [], []
    for i, n in enumerate(sizes):
        buf = pool.acquire(n, fresh=i % 3 == 0)
        got.append(buf.serial)
        held.append(buf)
        if i % release_every == 1:
            pool.release(held.pop(0))
    for buf in held:
        pool.release(buf)
    pool.end_segment()
    return got


def test_pool_hands_the_same_buffers_to_the_same_requests():
    pool = BufferPool(_HostDevice())
    a = [300, 1000, 300, 5000, 300, 1000, 64, 300]
    first = _requests(pool, a)
    assert _requests(pool, a) == first  # the second forward gets the first one's buffers
    _requests(pool, [300] * 9 + [5000] * 3, release_every=5)  # another shape grows the pool
    assert _requests(pool, a) == first


def test_command_graph_replays_by_structure():
    dev = _HostDevice()
    g = CommandGraph(dev, cache_size=2)
    x, y = dev.alloc(256), dev.alloc(256)

    def run(bufs, grid, n):
        g.begin()
        g.record("copy", bufs, grid, dict(n=n, inner=n, outer=1, src_off=0, src_o=0, src_z=0, dst_off=0, dst_o=0,
                                          dst_z=0))
        g.download(bufs[1], 16)
        g.end()
        return dev.submitted[-1]

    rec1, params = run([x, y], (1, 1, 1), 4)
    assert params is not None and g.recordings == 1
    assert run([x, y], (1, 1, 1), 4) == (rec1, None)     # same structure, same params: nothing rewritten
    rec, params = run([x, y], (1, 1, 1), 8)               # new params only: replayed, params rewritten
    assert rec is rec1 and params[:4] == (8).to_bytes(4, "little") and g.recordings == 1
    assert run([y, x], (1, 1, 1), 8)[0] is not rec1       # other buffers: recorded again
    assert run([x, y], (2, 1, 1), 8)[0] is not rec1       # another grid: again; rec1 evicted (cache of 2)
    assert dev.discarded == [rec1] and g.recordings == 3 and g.replays == 2
    g.invalidate()
    assert len(dev.discarded) == 3


def test_record_rejects_a_buffer_over_the_binding_limit():
    dev = _HostDevice()
    dev.max_binding = 1024
    g = CommandGraph(dev)
    g.begin()
    with pytest.raises(KernelError, match="exceeds host's storage binding limit of 1.0 KiB"):
        g.record("copy", [dev.alloc(256), dev.alloc(2048)], (1, 1, 1), {})


# -- driver failures ---------------------------------------------------------------------------------
@BACKENDS
def test_allocation_beyond_the_device_is_a_device_error(backend):
    device_or_skip(backend)  # skip without a driver
    device = open_device(backend)  # a private device: GL's state is undefined after GL_OUT_OF_MEMORY
    try:
        with pytest.raises(DeviceError, match=rf"^{backend}.*1024.0 GiB"):
            device.alloc(1 << 40)
        x = np.arange(8, dtype=np.float32)
        if backend in ("opengl", "gles"):  # so GL refuses further work
            with pytest.raises(DeviceError, match=r"unusable \(allocating \d+ bytes: out of memory"):
                device.upload(x)
            return
        g = device.graph()  # Vulkan and WebGPU still work
        g.begin()
        r = g.download(device.upload(x), x.nbytes)
        g.end()
        np.testing.assert_array_equal(r.array(np.float32, (8,)), x)
    finally:
        device.close()


@BACKENDS
def test_tensor_over_the_binding_limit(backend, monkeypatch):
    """Static shapes: the node stays on the CPU, saying why. A dynamic shape that turns out too big: a
    KernelError naming the node, before anything runs."""
    device = device_or_skip(backend)
    monkeypatch.setattr(device, "max_binding", 4096)
    nodes = [Node("r", "relu", {"x": "x"}, {"y": "y"})]
    static = Graph([TensorSpec("x", (4, 1024), "float32")], {}, nodes, ["y"])
    validate(static)
    model = Model(static, {}, {}, "static", device=device)
    model._closers.clear()
    where, reason = model.executor.placement["r"]
    assert where == "cpu" and "exceeds" in reason and "binding limit" in reason
    dynamic = Graph([TensorSpec("x", ("n", 1024), "float32")], {}, nodes, ["y"])
    validate(dynamic)
    model = Model(dynamic, {}, {}, "dynamic.json", device=device)
    model._closers.clear()
    x = np.ones((1, 1024), np.float32)
    np.testing.assert_array_equal(model.run({"x": -x})["y"], 0 * x)  # 4 KiB fits
    with pytest.raises(KernelError, match=r"dynamic.json: node 'r' \(relu\): .*binding limit of 4.0 KiB"):
        model.run({"x": np.ones((4, 1024), np.float32)})


def _break_submit(backend: str, device, monkeypatch) -> str:
    """Make the device's next submit fail as a driver would; the words the error must carry."""
    if backend == "vulkan":
        from volvox._gpu import vulkan
        def lost(*args):
            raise vulkan.vk.VkErrorDeviceLost()
        monkeypatch.setattr(vulkan.vk, "vkQueueSubmit", lost)
        return "VkErrorDeviceLost"
    if backend in ("opengl", "gles"):
        monkeypatch.setattr(device.gl, "glClientWaitSync", lambda *a: device.gl.GL_TIMEOUT_EXPIRED)
        return "did not finish within"
    def lost(self, *args):
        raise RuntimeError("Parent device is lost")
    monkeypatch.setattr(type(device.device.queue), "submit", lost)
    return "device is lost"


@BACKENDS
def test_failed_submit_is_a_device_error_and_the_device_refuses_work(tiny_llama, backend, monkeypatch):  # noqa: F811
    device_or_skip(backend)  # skip without a driver
    device = open_device(backend)  # a private device: this test breaks it
    try:
        cpu = volvox.load(tiny_llama)
        weights = {name: w for (_, w), name in zip(cpu.executor.weight_slots, cpu.graph.weights)}
        gpu = type(cpu)(cpu.graph, weights, cpu.metadata, "tiny.gguf", cpu.config, cpu.tokenizer, optimize=False,
                        device=device)
        ids = np.arange(3, 20, dtype=np.int32)
        np.testing.assert_allclose(Session(gpu).forward(ids), Session(cpu).forward(ids), atol=1e-4)
        words = _break_submit(backend, device, monkeypatch)
        with pytest.raises(DeviceError, match=rf"{backend} \(.*\): running \d+ dispatches failed: .*{words}"):
            Session(gpu).forward(ids)
        monkeypatch.undo()  # the driver would work again, but the device state is unknown: refused
        refused = rf"{backend}: the device is unusable \(running \d+ dispatches: .*{words}.*\); load the model again"
        with pytest.raises(DeviceError, match=refused):
            Session(gpu).forward(ids)
        gpu.close()  # closing a failed device is quiet
    finally:
        device.close()



def test_a_real_vulkan_timeout_is_a_device_error(tiny_llama, monkeypatch):  # noqa: F811
    """lavapipe runs a submit on its own thread, so a 1 ns wait expires for real (llvmpipe's GL
    finishes inside glDispatchCompute: GL's timeout path is the injected one above)."""
    device_or_skip("vulkan")
    cpu = volvox.load(tiny_llama)
    weights = {name: w for (_, w), name in zip(cpu.executor.weight_slots, cpu.graph.weights)}
    ids = np.arange(3, 131, dtype=np.int32) % cpu.config.vocab_size  # (128,): ~50 ms of lavapipe work
    messages = []
    for _ in range(3):  # the wait starts microseconds after the submit: retry if this process was descheduled
        device = open_device("vulkan")
        try:
            gpu = type(cpu)(cpu.graph, weights, cpu.metadata, "tiny.gguf", cpu.config, cpu.tokenizer,
                            optimize=False, device=device)
            monkeypatch.setenv("VOLVOX_GPU_TIMEOUT", "1e-9")
            try:
                Session(gpu).forward(ids)
            except DeviceError as e:
                messages.append(str(e))
                assert device.failed
                break
            finally:
                monkeypatch.delenv("VOLVOX_GPU_TIMEOUT")
        finally:
            device.close()  # waits for the work still in flight
    assert messages and re.search(r"vulkan \(.*\): running \d+ dispatches failed: TimeoutError: the GPU did not "
                                  r"finish within 1e-09 s \(VOLVOX_GPU_TIMEOUT\)", messages[0]), messages


@pytest.mark.parametrize("value", ["soon", "0", "-1", "nan"])
def test_a_bad_timeout_setting_is_named_and_harmless(value, monkeypatch):
    dev = _HostDevice()
    g = CommandGraph(dev)
    monkeypatch.setenv("VOLVOX_GPU_TIMEOUT", value)
    g.begin()
    g.download(dev.upload(np.ones(4, np.float32)), 16)
    with pytest.raises(DeviceError, match=f"VOLVOX_GPU_TIMEOUT must be a positive number of seconds, got '{value}'"):
        g.end()
    assert not dev.failed and dev.submits == 0  # refused before submitting anything
    monkeypatch.setenv("VOLVOX_GPU_TIMEOUT", "inf")  # no limit at all is fine
    g.begin()
    g.download(dev.upload(np.ones(4, np.float32)), 16)
    g.end()
    assert dev.submits == 1


def test_weights_that_do_not_fit_the_gpu_fall_back_to_the_cpu(tmp_path, monkeypatch, capsys):
    """A DeviceError while the model is placed (weights uploaded) loads it on the CPU, with one line."""
    from gpu_helpers import device_or_none
    from tiny_gguf import write_tiny_llama
    from volvox._gpu.devices import GPU_BACKENDS

    backend = next((b for b in GPU_BACKENDS if device_or_none(b) is not None), None)
    if backend is None:
        pytest.skip("no GPU backend here")
    path = write_tiny_llama(tmp_path / "tiny.gguf", qtype="f32")

    def out_of_memory(self, *args, **kwargs):
        raise DeviceError(f"{self.name}: out of device memory allocating a buffer")

    monkeypatch.setattr(Device, "upload", out_of_memory)
    with volvox.load(path, backend=backend) as lm:
        assert "Backend: CPU (" in capsys.readouterr().err
        assert type(lm.executor).__name__ == "Executor"
        assert len(lm.logits([1, 2, 3])) == 3
