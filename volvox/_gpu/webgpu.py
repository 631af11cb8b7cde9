"""WebGPU backend through ``wgpu`` (wgpu-native): the WGSL shaders run as written.

A graph is one command encoder with one compute pass (WebGPU orders dispatches in a pass and
makes each one's storage writes visible to the next), then buffer-to-buffer copies into mappable
staging buffers for the downloads; one queue submit, one wait (mapping the staging buffers; a
4-byte one when nothing is read back). wgpu-native wants ``XDG_RUNTIME_DIR``;
it is pointed at a private temp directory when unset.
"""

from __future__ import annotations

import os
import tempfile

from .backend import SHADER_DIR, BackendUnavailable, Buffer, Device, Record, Readback, kernel_info

if not os.environ.get("XDG_RUNTIME_DIR"):
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="volvox-xdg-")
try:
    import wgpu
except Exception as e:  # the package or its native library is missing
    raise BackendUnavailable(f"python package 'wgpu' unavailable: {e}") from None

STORAGE_USAGE = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST


class WebGPUDevice(Device):
    """The adapter wgpu picks (high performance preferred), with its storage-buffer limits raised to the adapter's."""

    name = "webgpu"

    def __init__(self):
        super().__init__()
        try:
            adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
            if adapter is None:
                raise RuntimeError("no adapter")
            keys = ("max-storage-buffer-binding-size", "max-buffer-size", "max-storage-buffers-per-shader-stage")
            limits = {k: adapter.limits[k] for k in keys if k in adapter.limits}
            self.device = adapter.request_device_sync(required_limits=limits)
        except Exception as e:
            raise BackendUnavailable(f"no WebGPU adapter ({type(e).__name__}: {e})") from None
        info = adapter.info
        self.description = f"{info.get('device', '?')} via {info.get('backend_type', '?')}"
        self.software = info.get("adapter_type", "") == "CPU"
        self.max_buffers = adapter.limits.get("max-storage-buffers-per-shader-stage", 8)
        self.pipelines: dict[str, object] = {}
        self.param_buf: Buffer | None = None

    def _alloc(self, nbytes: int) -> Buffer:
        return Buffer(self.device.create_buffer(size=nbytes, usage=STORAGE_USAGE), nbytes)

    def _write(self, buf: Buffer, data) -> None:
        self.device.queue.write_buffer(buf.native, 0, data)

    def supports(self, kernel: str) -> bool:
        """True when the kernel's buffers fit the device's limit and its pipeline builds."""
        if kernel_info(kernel).n_buffers + 1 > self.max_buffers:
            return False
        try:
            self._pipeline(kernel)
            return True
        except Exception:
            return False

    def _pipeline(self, kernel: str):
        if kernel not in self.pipelines:
            module = self.device.create_shader_module(code=(SHADER_DIR / "wgsl" / f"{kernel}.wgsl").read_text())
            self.pipelines[kernel] = self.device.create_compute_pipeline(
                layout="auto", compute={"module": module, "entry_point": "main"})
        return self.pipelines[kernel]

    def _run(self, records: list[Record], params: bytes, offsets: list[int], reads: list[Readback]) -> None:
        if records:
            if self.param_buf is None or self.param_buf.nbytes < len(params):
                self.param_buf = self._alloc(max(len(params), 4096) * 2)
            self._write(self.param_buf, params)
        encoder = self.device.create_command_encoder()
        if records:
            cpass = encoder.begin_compute_pass()
            for rec, off in zip(records, offsets):
                pipeline = self._pipeline(rec.kernel)
                entries = [{"binding": i, "resource": {"buffer": b.native, "offset": 0, "size": b.nbytes}}
                           for i, b in enumerate(rec.buffers)]
                entries.append({"binding": len(rec.buffers),
                                "resource": {"buffer": self.param_buf.native, "offset": off, "size": len(rec.params)}})
                group = self.device.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=entries)
                cpass.set_pipeline(pipeline)
                cpass.set_bind_group(0, group)
                cpass.dispatch_workgroups(*rec.grid)
            cpass.end()
        if not reads:  # wait by mapping a 4-byte copy (on_submitted_work_done_sync is broken in wgpu 0.32)
            reads = [Readback(self.dummy, 4)]
        staging = []
        for r in reads:
            size = -(-r.nbytes // 4) * 4
            s = self.device.create_buffer(size=size, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
            encoder.copy_buffer_to_buffer(r.buffer.native, 0, s, 0, size)
            staging.append(s)
        self.device.queue.submit([encoder.finish()])
        self.submits += 1
        for r, s in zip(reads, staging):
            s.map_sync(wgpu.MapMode.READ)
            r.data = bytes(s.read_mapped())[:r.nbytes]
            s.unmap()
            s.destroy()

    def close(self) -> None:
        """Drop the device."""
        self.pipelines.clear()
        self.device = None
