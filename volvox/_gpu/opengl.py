"""OpenGL backend: desktop GL 4.3+ (GLSL 430 shaders) or GLES 3.1 (GLSL ES 310), through
PyOpenGL and EGL with a surfaceless context (no window, no X server).

PyOpenGL picks its platform at first import, so this module sets ``PYOPENGL_PLATFORM=egl``
before importing OpenGL; a process that already imported OpenGL for GLX cannot use it.
GL executes immediately and has no command buffers, so a recording is a prebuilt dispatch list:
per dispatch its program (when it differs from the previous one), only the storage bindings
that differ from the previous dispatch's, the range of the recording's own params buffer and
the grid. Running it replays the list (glUseProgram / glBindBufferBase / glBindBufferRange /
glDispatchCompute, a glMemoryBarrier after each), then one fence wait; the first dispatch binds
everything, since another recording may have run in between. Downloads use glGetBufferSubData
into a uint8 array on desktop GL (PyOpenGL's float path overruns its temporary) and
glMapBufferRange on GLES, which has no glGetBufferSubData.
"""

from __future__ import annotations

import ctypes
import os

import numpy as np

from volvox._gpu.backend import (PARAM_ALIGN, BackendUnavailable, Buffer, Device, Record, Readback, Recording,
                                 describe_driver_error, glsl_source, kernel_info, software_adapter, timed_out)

os.environ.setdefault("PYOPENGL_PLATFORM", "egl")
try:
    if os.environ["PYOPENGL_PLATFORM"] != "egl":
        raise ImportError(f"PYOPENGL_PLATFORM is {os.environ['PYOPENGL_PLATFORM']!r}, not 'egl'")
    from OpenGL import EGL
    from OpenGL import GL as DESKTOP_GL
    from OpenGL import GLES3
except Exception as e:  # PyOpenGL or libEGL missing
    raise BackendUnavailable(f"PyOpenGL with EGL unavailable: {e}") from None

EGL_PLATFORM_SURFACELESS_MESA = 0x31DD


class _GLRecording(Recording):
    """A dispatch list, per dispatch (program, or 0 when unchanged; [(binding, buffer)] that change;
    the params binding; params offset and size; grid), and the params buffer the offsets point into."""

    def __init__(self, steps: list[tuple], params: Buffer):
        self.steps, self.param_buf = steps, params


def _gl_string(gl, name) -> str:
    """glGetString as text (desktop PyOpenGL returns bytes, its GLES module a pointer)."""
    value = gl.glGetString(name)
    return (value if isinstance(value, bytes) else ctypes.string_at(value)).decode()


class OpenGLDevice(Device):
    """A surfaceless EGL context: ``es=False`` desktop GL 4.3 core, ``es=True`` GLES 3.1."""

    def __init__(self, es: bool = False):
        super().__init__()
        self.es = es
        self.name = "gles" if es else "opengl"
        self.gl = GLES3 if es else DESKTOP_GL  # entry points resolve from libGLESv2 or libOpenGL
        GL = self.gl
        try:
            self._make_context()
            self.description = _gl_string(GL, GL.GL_RENDERER)
            version = _gl_string(GL, GL.GL_VERSION)
        except BackendUnavailable:
            raise
        except Exception as e:  # PyOpenGL errors print their whole call; keep the error and the function
            op = getattr(getattr(e, "baseOperation", None), "__name__", "")
            what = f"{getattr(e, 'err', '')} in {op}" if op else str(e)
            raise BackendUnavailable(f"no EGL/GL driver ({type(e).__name__}: {what})") from None
        self.software = software_adapter(self.description)
        self.max_blocks = int(GL.glGetIntegerv(GL.GL_MAX_COMPUTE_SHADER_STORAGE_BLOCKS))
        self.max_binding = int(GL.glGetIntegerv(GL.GL_MAX_SHADER_STORAGE_BLOCK_SIZE))
        if int(GL.glGetIntegerv(GL.GL_SHADER_STORAGE_BUFFER_OFFSET_ALIGNMENT)) > PARAM_ALIGN:
            raise BackendUnavailable(f"storage buffer offsets must align to more than {PARAM_ALIGN} bytes")
        self.description += f" ({version})"
        self.programs: dict[str, int] = {}

    def _make_context(self) -> None:
        display = EGL.EGL_NO_DISPLAY
        if bool(EGL.eglGetPlatformDisplayEXT):
            display = EGL.eglGetPlatformDisplayEXT(EGL_PLATFORM_SURFACELESS_MESA, EGL.EGL_DEFAULT_DISPLAY, None)
        if display == EGL.EGL_NO_DISPLAY:
            display = EGL.eglGetDisplay(EGL.EGL_DEFAULT_DISPLAY)
        major, minor = EGL.EGLint(), EGL.EGLint()
        if display == EGL.EGL_NO_DISPLAY or not EGL.eglInitialize(display, ctypes.pointer(major), ctypes.pointer(minor)):
            raise BackendUnavailable("EGL has no display (no EGL driver installed?)")
        self.display = display
        api, renderable = ((EGL.EGL_OPENGL_ES_API, 0x0040) if self.es  # EGL_OPENGL_ES3_BIT
                           else (EGL.EGL_OPENGL_API, EGL.EGL_OPENGL_BIT))
        if not EGL.eglBindAPI(api):
            raise BackendUnavailable(f"EGL cannot bind the {'OpenGL ES' if self.es else 'OpenGL'} API")
        config, n = EGL.EGLConfig(), EGL.EGLint()
        attribs = (EGL.EGLint * 5)(EGL.EGL_RENDERABLE_TYPE, renderable, EGL.EGL_SURFACE_TYPE, 0, EGL.EGL_NONE)
        if not EGL.eglChooseConfig(display, attribs, ctypes.pointer(config), 1, ctypes.pointer(n)) or n.value < 1:
            config = None  # surfaceless contexts may need no config (EGL_KHR_no_config_context)
        version = (3, 1) if self.es else (4, 3)
        ctx_attribs = [EGL.EGL_CONTEXT_MAJOR_VERSION, version[0], EGL.EGL_CONTEXT_MINOR_VERSION, version[1]]
        if not self.es:
            ctx_attribs += [EGL.EGL_CONTEXT_OPENGL_PROFILE_MASK, EGL.EGL_CONTEXT_OPENGL_CORE_PROFILE_BIT]
        ctx_attribs = (EGL.EGLint * (len(ctx_attribs) + 1))(*ctx_attribs, EGL.EGL_NONE)
        self.context = EGL.eglCreateContext(display, config, EGL.EGL_NO_CONTEXT, ctx_attribs)
        if self.context == EGL.EGL_NO_CONTEXT:
            raise BackendUnavailable(f"EGL cannot create a {'GLES 3.1' if self.es else 'GL 4.3 core'} context")
        if not EGL.eglMakeCurrent(display, EGL.EGL_NO_SURFACE, EGL.EGL_NO_SURFACE, self.context):
            raise BackendUnavailable("EGL cannot make a surfaceless context current")

    def _current(self) -> None:
        EGL.eglMakeCurrent(self.display, EGL.EGL_NO_SURFACE, EGL.EGL_NO_SURFACE, self.context)

    def _alloc(self, nbytes: int) -> Buffer:
        GL = self.gl
        self._current()
        buf = int(GL.glGenBuffers(1))
        GL.glBindBuffer(GL.GL_SHADER_STORAGE_BUFFER, buf)
        try:
            GL.glBufferData(GL.GL_SHADER_STORAGE_BUFFER, nbytes, None, GL.GL_DYNAMIC_COPY)
        except Exception as e:  # GL_OUT_OF_MEMORY, after which the GL state is undefined: refuse more work
            GL.glDeleteBuffers(1, [buf])
            self.failed = f"allocating {nbytes} bytes: {describe_driver_error(e)}"
            raise
        return Buffer(buf, nbytes)

    def _free(self, buf: Buffer) -> None:
        self._current()
        self.gl.glDeleteBuffers(1, [buf.native])

    def _write(self, buf: Buffer, data) -> None:
        GL = self.gl
        self._current()
        GL.glBindBuffer(GL.GL_SHADER_STORAGE_BUFFER, buf.native)
        GL.glBufferSubData(GL.GL_SHADER_STORAGE_BUFFER, 0, len(data), np.frombuffer(data, dtype=np.uint8))

    def _read(self, buf: Buffer, nbytes: int) -> np.ndarray:
        GL = self.gl
        GL.glBindBuffer(GL.GL_SHADER_STORAGE_BUFFER, buf.native)
        out = np.empty(nbytes, np.uint8)  # (nbytes,)
        if not self.es:
            GL.glGetBufferSubData(GL.GL_SHADER_STORAGE_BUFFER, 0, nbytes, out)
            return out
        ptr = GL.glMapBufferRange(GL.GL_SHADER_STORAGE_BUFFER, 0, nbytes, GL.GL_MAP_READ_BIT)
        ctypes.memmove(out.ctypes.data, ptr, nbytes)
        GL.glUnmapBuffer(GL.GL_SHADER_STORAGE_BUFFER)
        return out

    def supports(self, kernel: str) -> bool:
        """True when the kernel's storage blocks fit the context's limit and its program links."""
        if kernel_info(kernel).n_buffers + 1 > self.max_blocks:
            return False
        try:
            self._program(kernel)
            return True
        except Exception:
            return False

    def _program(self, kernel: str) -> int:
        GL = self.gl
        if kernel in self.programs:
            return self.programs[kernel]
        self._current()
        src = glsl_source(kernel, es=self.es)  # GLSL 430, or GLSL ES 310 derived from it
        shader = GL.glCreateShader(GL.GL_COMPUTE_SHADER)
        GL.glShaderSource(shader, src)
        GL.glCompileShader(shader)
        if not GL.glGetShaderiv(shader, GL.GL_COMPILE_STATUS):
            raise BackendUnavailable(f"{self.name}: shader {kernel} does not compile: {GL.glGetShaderInfoLog(shader)}")
        program = GL.glCreateProgram()
        GL.glAttachShader(program, shader)
        GL.glLinkProgram(program)
        if not GL.glGetProgramiv(program, GL.GL_LINK_STATUS):
            raise BackendUnavailable(f"{self.name}: program {kernel} does not link: {GL.glGetProgramInfoLog(program)}")
        GL.glDeleteShader(shader)
        self.programs[kernel] = program
        return program

    def _record(self, records: list[Record], offsets: list[int], params_nbytes: int,
                reads: list[Readback]) -> _GLRecording:
        steps, program, bound = [], 0, {}  # the state this list has set so far: program, binding -> buffer
        for rec, off in zip(records, offsets):
            prog = self._program(rec.kernel)
            binds = [(i, b.native) for i, b in enumerate(rec.buffers) if bound.get(i) != b.native]
            bound.update(binds)
            p_binding = len(rec.buffers)
            bound[p_binding] = -1  # now a params range, not a buffer
            steps.append((prog if prog != program else 0, binds, p_binding, off, len(rec.params), rec.grid))
            program = prog
        self.dispatches_recorded += len(records)
        return _GLRecording(steps, self._alloc(max(params_nbytes, 16)))

    def _submit(self, rec: _GLRecording, params: bytes | None, reads: list[Readback], timeout_ns: int) -> None:
        GL = self.gl
        self._current()
        if params is not None:
            self._write(rec.param_buf, params)
        barrier = GL.GL_SHADER_STORAGE_BARRIER_BIT | GL.GL_BUFFER_UPDATE_BARRIER_BIT
        ssbo, pbuf = GL.GL_SHADER_STORAGE_BUFFER, rec.param_buf.native
        for program, binds, p_binding, off, size, grid in rec.steps:  # the first step sets its whole state
            if program:
                GL.glUseProgram(program)
            for i, b in binds:
                GL.glBindBufferBase(ssbo, i, b)
            GL.glBindBufferRange(ssbo, p_binding, pbuf, off, size)
            GL.glDispatchCompute(*grid)
            GL.glMemoryBarrier(barrier)
        sync = GL.glFenceSync(GL.GL_SYNC_GPU_COMMANDS_COMPLETE, 0)
        GL.glFlush()
        self.submits += 1
        with self.waiting():
            status = GL.glClientWaitSync(sync, GL.GL_SYNC_FLUSH_COMMANDS_BIT, timeout_ns)
        GL.glDeleteSync(sync)
        if status == GL.GL_TIMEOUT_EXPIRED:
            raise timed_out(timeout_ns)
        if status not in (GL.GL_ALREADY_SIGNALED, GL.GL_CONDITION_SATISFIED):
            raise RuntimeError(f"glClientWaitSync failed ({int(status):#x})")
        for r in reads:
            r.data = self._read(r.buffer, r.nbytes)

    def _discard(self, rec: _GLRecording) -> None:
        if getattr(self, "context", None) is not None:
            self._free(rec.param_buf)

    def close(self) -> None:
        """Destroy the EGL context."""
        if getattr(self, "context", None) is not None:
            EGL.eglMakeCurrent(self.display, EGL.EGL_NO_SURFACE, EGL.EGL_NO_SURFACE, EGL.EGL_NO_CONTEXT)
            EGL.eglDestroyContext(self.display, self.context)
            self.context = None
            self.failed = "it was closed"
