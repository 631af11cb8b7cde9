"""A small FlatBuffers writer and the TFLite tables built with it (tensorflow/lite/schema/schema.fbs).

Used by tools/make_bad_files.py (the tiny TFLite seed and its broken variants), tools/export_tflite.py
(volvox graphs as .tflite files) and the TFLite tests. Nothing here imports volvox: files are built
from the format's specification alone.
"""

from __future__ import annotations

import struct


class FB:
    """A flatbuffer value for ``build_flatbuffer``: "table" (fields by slot), "vector" (scalars of
    struct code ``fmt``, or raw bytes for a ubyte vector), "tables" (a vector of tables) or "string"."""

    def __init__(self, kind: str, value, fmt: str = ""):
        self.kind, self.value, self.fmt = kind, value, fmt


def fb_table(*fields) -> FB:
    """A table; each field is None (absent), (struct code, scalar) or an FB (stored as a uoffset)."""
    return FB("table", fields)


def build_flatbuffer(root_table: FB, ident: bytes) -> tuple[bytes, dict[str, list[int]]]:
    """Serialize front to back (every uoffset points forward); return the bytes and the positions
    of every uoffset, vector/string length and table soffset (for the fuzzers)."""
    out = bytearray(struct.pack("<I", 0) + ident)
    at: dict[str, list[int]] = {"uoffset": [], "length": [], "soffset": []}

    def align(n: int) -> None:
        out.extend(bytes(-len(out) % n))

    def link(slot: int, target: int) -> None:
        struct.pack_into("<I", out, slot, target - slot)
        at["uoffset"].append(slot)

    def write(obj: FB) -> int:
        if obj.kind == "table":
            layout, size = [], 4  # field offsets from the table start; the soffset comes first
            for f in obj.value:
                n = 0 if f is None else 4 if isinstance(f, FB) else struct.calcsize("<" + f[0])
                size += -size % max(n, 1)
                layout.append(size if n else 0)
                size += n
            align(8)
            vtable = len(out)
            out.extend(struct.pack(f"<HH{len(layout)}H", 4 + 2 * len(layout), size, *layout))
            align(8)
            table = len(out)
            out.extend(bytes(size))
            struct.pack_into("<i", out, table, table - vtable)
            at["soffset"].append(table)
            for f, pos in zip(obj.value, layout):
                if f is not None and not isinstance(f, FB):
                    struct.pack_into("<" + f[0], out, table + pos, f[1])
            for f, pos in zip(obj.value, layout):
                if isinstance(f, FB):
                    link(table + pos, write(f))
            return table
        if obj.kind == "string":
            align(4)
            start = len(out)
            at["length"].append(start)
            raw = obj.value.encode()
            out.extend(struct.pack("<I", len(raw)) + raw + b"\0")
            return start
        out.extend(bytes(-(len(out) + 4) % 16))  # vector data 16-byte aligned (TFLite buffers)
        start = len(out)
        at["length"].append(start)
        out.extend(struct.pack("<I", len(obj.value)))
        if obj.kind == "vector":
            raw = obj.value if isinstance(obj.value, bytes) else struct.pack(f"<{len(obj.value)}{obj.fmt}", *obj.value)
            out.extend(raw)
            return start
        out.extend(bytes(4 * len(obj.value)))
        for k, child in enumerate(obj.value):
            link(start + 4 + 4 * k, write(child))
        return start

    link(0, write(root_table))
    return bytes(out), at


def fb_vec(fmt: str, values) -> FB:
    """A vector of scalars of struct code ``fmt``; ``bytes`` values are a ubyte vector stored as they are."""
    return FB("vector", values if isinstance(values, bytes) else list(values), fmt)


def tfl_tensor(name: str, shape, type_code: int, buffer: int) -> FB:
    """A TFLite Tensor: shape, type, buffer, name."""
    return fb_table(fb_vec("i", shape), ("b", type_code), ("I", buffer), FB("string", name))


def tfl_op(opcode: int, ins, outs, options_type: int = 0, options: FB | None = None) -> FB:
    """A TFLite Operator: opcode_index, inputs, outputs, builtin_options_type, builtin_options."""
    return fb_table(("I", opcode), fb_vec("i", ins), fb_vec("i", outs),
                    ("B", options_type) if options else None, options)


def tfl_opcode(code: int, version: int = 1) -> FB:
    """A TFLite OperatorCode: deprecated_builtin_code (capped at 127), custom_code, version, builtin_code."""
    return fb_table(("b", min(code, 127)), None, ("i", version), ("i", code))


def tfl_model(codes: list[FB], tensors: list[FB], inputs, outputs, operators: list[FB], buffers: list[FB],
              description: str) -> FB:
    """A TFLite Model (version 3) with one SubGraph "main"; ``buffers[0]`` must be the empty sentinel."""
    subgraph = fb_table(FB("tables", tensors), fb_vec("i", inputs), fb_vec("i", outputs),
                        FB("tables", operators), FB("string", "main"))
    # Model: version, operator_codes, subgraphs, description, buffers
    return fb_table(("I", 3), FB("tables", codes), FB("tables", [subgraph]), FB("string", description),
                    FB("tables", buffers))
