"""Opening a GPU backend by name: ``open_device(name)`` returns a ready ``backend.Device`` or raises
``BackendUnavailable`` with the reason. Backends import lazily, so a missing driver or binding never
breaks ``import volvox``.
"""

from __future__ import annotations

GPU_BACKENDS = ("vulkan", "opengl", "gles", "webgpu")
LABELS = {"vulkan": "Vulkan", "opengl": "OpenGL", "gles": "OpenGL ES", "webgpu": "WebGPU"}


def open_device(name: str):
    """A new device of backend ``name`` ("vulkan", "opengl", "gles" or "webgpu")."""
    from volvox._gpu.backend import BackendUnavailable

    try:
        if name == "vulkan":
            from volvox._gpu.vulkan import VulkanDevice
            return VulkanDevice()
        if name in ("opengl", "gles"):
            from volvox._gpu.opengl import OpenGLDevice
            return OpenGLDevice(es=name == "gles")
        if name == "webgpu":
            from volvox._gpu.webgpu import WebGPUDevice
            return WebGPUDevice()
    except BackendUnavailable:
        raise
    except Exception as e:  # a driver failing in a way the backend did not anticipate
        raise BackendUnavailable(f"{type(e).__name__}: {e}") from None
    raise BackendUnavailable(f"unknown GPU backend {name!r} (choose from {', '.join(GPU_BACKENDS)})")
