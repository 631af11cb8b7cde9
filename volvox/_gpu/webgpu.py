"""WebGPU backend through ``wgpu`` (wgpu-native): the WGSL shaders run as written.

WebGPU command buffers are single-use (a finished encoder submits once), so a recording keeps
everything that costs to make: per dispatch its pipeline and bind group (the bind groups point
into the recording's own params buffer), and a mappable staging buffer per download. Running
it, the first time or on replay, encodes one compute pass from those (WebGPU orders dispatches
in a pass and makes each one's storage writes visible to the next), the copies into the
staging buffers, one queue submit and one wait (mapping the staging buffers; a 4-byte one when
nothing is read back). wgpu-native wants ``XDG_RUNTIME_DIR``; it is pointed at a private temp
directory when unset.
"""

from __future__ import annotations

import os
import tempfile

from volvox._gpu.backend import (BackendUnavailable, Buffer, Device, Record, Readback, Recording, kernel_info,
                                 software_adapter, wgsl_source)

if not os.environ.get("XDG_RUNTIME_DIR"):
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="volvox-xdg-")
try:
    import wgpu
except Exception as e:  # the package or its native library is missing
    raise BackendUnavailable(f"python package 'wgpu' unavailable: {e}") from None

STORAGE_USAGE = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST


class _WGPURecording(Recording):
    """Per dispatch (pipeline, bind group, grid); per download (source, staging buffer, bytes to copy)."""

    def __init__(self, steps: list[tuple], copies: list[tuple], params: Buffer):
        self.steps, self.copies, self.param_buf = steps, copies, params


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
        self.software = software_adapter(self.description, str(info.get("adapter_type", "")))
        self.max_buffers = adapter.limits.get("max-storage-buffers-per-shader-stage", 8)
        self.max_binding = int(self.device.limits["max-storage-buffer-binding-size"])
        self.max_buffer = int(self.device.limits["max-buffer-size"])
        self.pipelines: dict[str, object] = {}

    def _alloc(self, nbytes: int) -> Buffer:
        return Buffer(self.device.create_buffer(size=nbytes, usage=STORAGE_USAGE), nbytes)

    def _free(self, buf: Buffer) -> None:
        buf.native.destroy()

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
            module = self.device.create_shader_module(code=wgsl_source(kernel))
            self.pipelines[kernel] = self.device.create_compute_pipeline(
                layout="auto", compute={"module": module, "entry_point": "main"})
        return self.pipelines[kernel]

    def _record(self, records: list[Record], offsets: list[int], params_nbytes: int,
                reads: list[Readback]) -> _WGPURecording:
        pbuf = self._alloc(max(params_nbytes, 16))  # (params_nbytes,) every dispatch's Params struct
        steps = []
        for rec, off in zip(records, offsets):
            pipeline = self._pipeline(rec.kernel)
            entries = [{"binding": i, "resource": {"buffer": b.native, "offset": 0, "size": b.nbytes}}
                       for i, b in enumerate(rec.buffers)]
            entries.append({"binding": len(rec.buffers),
                            "resource": {"buffer": pbuf.native, "offset": off, "size": len(rec.params)}})
            group = self.device.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=entries)
            steps.append((pipeline, group, rec.grid))
        if not reads:  # wait by mapping a 4-byte copy (on_submitted_work_done_sync is broken in wgpu 0.32)
            reads = [Readback(self.dummy, 4)]
        copies = []
        for r in reads:
            size = -(-r.nbytes // 4) * 4
            staging = self.device.create_buffer(size=size, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
            copies.append((r.buffer.native, staging, size))
        self.dispatches_recorded += len(records)
        return _WGPURecording(steps, copies, pbuf)

    def _submit(self, rec: _WGPURecording, params: bytes | None, reads: list[Readback], timeout_ns: int) -> None:
        """As Device._submit, except that the wait has no timeout (wgpu-py's map_sync takes none)."""
        if params is not None:
            self._write(rec.param_buf, params)
        encoder = self.device.create_command_encoder()
        if rec.steps:
            cpass = encoder.begin_compute_pass()
            bound = None
            for pipeline, group, grid in rec.steps:
                if pipeline is not bound:
                    cpass.set_pipeline(pipeline)
                    bound = pipeline
                cpass.set_bind_group(0, group)
                cpass.dispatch_workgroups(*grid)
            cpass.end()
        for src, staging, size in rec.copies:
            encoder.copy_buffer_to_buffer(src, 0, staging, 0, size)
        self.device.queue.submit([encoder.finish()])
        self.submits += 1
        for i, (_, staging, _) in enumerate(rec.copies):
            with self.waiting():
                staging.map_sync(wgpu.MapMode.READ)
            if i < len(reads):
                reads[i].data = bytes(staging.read_mapped())[:reads[i].nbytes]
            staging.unmap()

    def _discard(self, rec: _WGPURecording) -> None:
        if self.device is not None:
            self._free(rec.param_buf)
            for _, staging, _ in rec.copies:
                staging.destroy()

    def close(self) -> None:
        """Drop the device."""
        self.pipelines.clear()
        self.device = None
        self.failed = "it was closed"
