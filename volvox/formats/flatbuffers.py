"""A minimal, bounds-checked FlatBuffers reader (enough for TFLite's schema).

A table starts with an int32 offset back to its vtable; the vtable lists a u16
offset per field (0 = absent, use the default). Offsets to tables, vectors and
strings are uint32 relative to where they are stored. Every read is checked
against the buffer, so a truncated or corrupt file raises ``error`` naming the
field path, never an IndexError or a wild read.
"""

from __future__ import annotations

import struct
from typing import Callable

import numpy as np


class Table:
    """One flatbuffer table at byte ``pos`` of ``buf``; ``where`` names it in error messages."""

    def __init__(self, buf: bytes | memoryview, pos: int, where: str, error: Callable[[str], Exception]):
        self.buf, self.pos, self.where, self.error = buf, pos, where, error
        self._need(pos, 4)
        vt = pos - struct.unpack_from("<i", buf, pos)[0]
        self._need(vt, 4)
        vt_size, _ = struct.unpack_from("<HH", buf, vt)
        self._need(vt, vt_size)
        if vt_size < 4 or vt_size % 2:
            raise error(f"{where}: corrupt vtable (size {vt_size})")
        self.vtable = vt
        self.n_fields = (vt_size - 4) // 2

    def _need(self, pos: int, n: int) -> None:
        if pos < 0 or pos + n > len(self.buf):
            raise self.error(f"{self.where}: offset {pos}+{n} is outside the {len(self.buf)}-byte file (truncated or corrupt)")

    def _field(self, i: int) -> int:
        """Absolute position of field ``i``, or 0 when it is absent."""
        if i >= self.n_fields:
            return 0
        off = struct.unpack_from("<H", self.buf, self.vtable + 4 + 2 * i)[0]
        return self.pos + off if off else 0

    def scalar(self, i: int, fmt: str, default=0):
        """Scalar field ``i`` (struct format such as '<i', '<B', '<f') or its default."""
        at = self._field(i)
        if not at:
            return default
        self._need(at, struct.calcsize(fmt))
        return struct.unpack_from(fmt, self.buf, at)[0]

    def _target(self, i: int) -> int:
        at = self._field(i)
        if not at:
            return 0
        self._need(at, 4)
        return at + struct.unpack_from("<I", self.buf, at)[0]

    def table(self, i: int, name: str) -> "Table | None":
        """Sub-table field ``i`` or None."""
        t = self._target(i)
        return Table(self.buf, t, f"{self.where}.{name}", self.error) if t else None

    def _vector(self, i: int, item: int) -> tuple[int, int]:
        t = self._target(i)
        if not t:
            return 0, 0
        self._need(t, 4)
        n = struct.unpack_from("<I", self.buf, t)[0]
        self._need(t + 4, n * item)
        return t + 4, n

    def array(self, i: int, dtype: str) -> np.ndarray:
        """Vector of scalars as a numpy array (empty if absent); a view into the buffer."""
        dt = np.dtype(dtype)
        start, n = self._vector(i, dt.itemsize)
        return np.frombuffer(self.buf, dt, n, start) if n else np.zeros(0, dt)

    def tables(self, i: int, name: str) -> list["Table"]:
        """Vector of tables (empty if absent)."""
        start, n = self._vector(i, 4)
        out = []
        for k in range(n):
            at = start + 4 * k
            out.append(Table(self.buf, at + struct.unpack_from("<I", self.buf, at)[0], f"{self.where}.{name}[{k}]", self.error))
        return out

    def string(self, i: int, default: str = "") -> str:
        """String field ``i`` (UTF-8) or ``default``."""
        start, n = self._vector(i, 1)
        if not start:
            return default
        try:
            return bytes(self.buf[start:start + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise self.error(f"{self.where}: field {i} is not valid UTF-8") from None


def root(buf: bytes | memoryview, where: str, error: Callable[[str], Exception]) -> Table:
    """The root table of a flatbuffer."""
    if len(buf) < 8:
        raise error(f"{where}: {len(buf)} bytes is too short for a flatbuffer")
    return Table(buf, struct.unpack_from("<I", buf, 0)[0], where, error)
