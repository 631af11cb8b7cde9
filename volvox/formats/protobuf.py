"""A minimal protobuf wire-format reader (enough for ONNX's ModelProto), bounds-checked.

``parse(buf)`` returns {field_number: [values]}: ints for varint / fixed fields,
memoryviews for length-delimited ones (sub-messages, strings, bytes, packed
arrays), decoded lazily by the caller that knows the schema.
"""

from __future__ import annotations

import struct
from typing import Callable

import numpy as np


def _varint(buf: memoryview, pos: int, error) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise error("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise error("varint longer than 10 bytes")


def parse(buf: memoryview, error: Callable[[str], Exception]) -> dict[int, list]:
    """Fields of one message: {number: [int | memoryview, ...]} in file order."""
    fields: dict[int, list] = {}
    pos, n = 0, len(buf)
    while pos < n:
        key, pos = _varint(buf, pos, error)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos, error)
        elif wire == 1:
            if pos + 8 > n:
                raise error("truncated 64-bit field")
            value, pos = struct.unpack_from("<Q", buf, pos)[0], pos + 8
        elif wire == 2:
            length, pos = _varint(buf, pos, error)
            if pos + length > n:
                raise error(f"field {number}: {length} bytes announced, {n - pos} left (truncated)")
            value, pos = buf[pos:pos + length], pos + length
        elif wire == 5:
            if pos + 4 > n:
                raise error("truncated 32-bit field")
            value, pos = struct.unpack_from("<I", buf, pos)[0], pos + 4
        else:
            raise error(f"field {number}: unknown wire type {wire}")
        fields.setdefault(number, []).append(value)
    return fields


def signed(v: int) -> int:
    """A varint as a two's-complement int64."""
    return v - (1 << 64) if v >= 1 << 63 else v


def ints(values: list, error) -> list[int]:
    """A repeated int64/int32 field, packed or not."""
    out = []
    for v in values:
        if isinstance(v, int):
            out.append(signed(v))
        else:
            pos = 0
            while pos < len(v):
                x, pos = _varint(v, pos, error)
                out.append(signed(x))
    return out


def floats(values: list) -> list[float]:
    """A repeated float field, packed or not."""
    out = []
    for v in values:
        if isinstance(v, int):
            out.append(struct.unpack("<f", struct.pack("<I", v))[0])
        else:
            out.extend(np.frombuffer(v, "<f4").tolist())
    return out


def text(v) -> str:
    """A string field; TypeError for a varint in its place (bytes(n) would allocate n bytes)."""
    if isinstance(v, int):
        raise TypeError(f"a varint ({v}) where a string field was expected")
    return bytes(v).decode("utf-8", errors="replace")
