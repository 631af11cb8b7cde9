"""TFLite conformance: single-operator models written by tools/tflite_writer.py, run by LiteRT's
reference kernels (OpResolverType.BUILTIN_REF) and by volvox on the same inputs.

int8 / int32 results must be bit-exact, float32 results equal within 1e-5. Every case runs through
volvox's numpy references (``reference=True``) and through its production path (fast kernels and
step plans). Shapes are deliberately awkward: odd sizes, broadcasting, SAME / VALID padding,
strides, every fused activation. The cases are listed by ``conformance_cases()`` so that
tools/gen_tflite_conformance.py can report them per op.
"""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

import numpy as np
import pytest

from volvox.errors import UnsupportedError
from volvox.formats.tflite import read_tflite
from volvox.model import Model

litert = pytest.importorskip("ai_edge_litert.interpreter")
ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("tflite_writer", ROOT / "tools" / "tflite_writer.py")
writer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(writer)

ACTS = {"none": 0, "relu": 1, "relu_n1_to_1": 2, "relu6": 3}
Q_IN = dict(scale=0.05, zero_point=3)       # int8 activations: scale 0.05, zero point 3
Q_OUT = dict(scale=0.07, zero_point=-5)
Q16_IN = dict(scale=0.0002, zero_point=0)   # int16 activations (16x8): symmetric
Q16_OUT = dict(scale=0.01, zero_point=0)


class Case:
    """One single-op model: its op (for the report), a name, the .tflite bytes and the inputs; a
    ``refused`` case is one LiteRT runs and volvox knowingly refuses (UnsupportedError at import)."""

    def __init__(self, op: str, name: str, model: bytes, feeds: list[np.ndarray], refused: bool = False):
        self.op, self.name, self.model, self.feeds, self.refused = op, name, model, feeds, refused

    def __repr__(self) -> str:
        return self.name


def rand(rng, shape, dtype="float32") -> np.ndarray:
    """Test inputs: int8 / int16 over the whole range, float32 standard normal (scaled to 3)."""
    if dtype in ("int8", "int16"):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max + 1, size=shape, dtype=dtype)
    return (rng.standard_normal(shape) * 3).astype(np.float32)


def single_op(op: str, in_shapes, out_shapes, dtype="float32", options=None, fields=(), consts=(), version=1,
              q_in=None, q_out=None, out_dtype=None) -> bytes:
    """A model of one ``op``: runtime inputs ``in_shapes``, then constant inputs ``consts`` (arrays, or
    (array, dtype, quant) triples; None for an absent optional input), outputs ``out_shapes``."""
    m = writer.ModelBuilder()
    q_in = q_in if q_in is not None else (Q_IN if dtype == "int8" else {})
    q_out = q_out if q_out is not None else (Q_OUT if (out_dtype or dtype) == "int8" else {})
    ins = [m.input(s, dtype, **q_in) for s in in_shapes]
    for c in consts:
        if c is None:
            ins.append(-1)
        elif isinstance(c, tuple):
            ins.append(m.tensor(c[0].shape, c[1], data=c[0], **c[2]))
        else:
            ins.append(m.tensor(c.shape, c.dtype.name, data=c))
    outs = [m.output(s, out_dtype or dtype, **q_out) for s in out_shapes]
    m.op(op, ins, outs, options, fields, version)
    return m.build()


def conformance_cases() -> list[Case]:
    """Every conformance case, in a fixed order (seeded inputs)."""
    rng = np.random.default_rng(19)
    cases: list[Case] = []

    def add(op, name, model, *shapes_or_arrays, dtype="float32", refused=False):
        feeds = [s if isinstance(s, np.ndarray) else rand(rng, s, dtype) for s in shapes_or_arrays]
        cases.append(Case(op, f"{op}-{name}", model, feeds, refused))

    # ---------------------------------------------------------------- binary elementwise
    shapes = {"same": ((2, 5, 7, 3), (2, 5, 7, 3)), "bcast": ((2, 5, 7, 3), (1, 1, 7, 1)), "rank": ((3,), (2, 3))}
    for op, opt in (("ADD", "AddOptions"), ("SUB", "SubOptions"), ("MUL", "MulOptions"), ("DIV", "DivOptions")):
        for (sname, (sa, sb)), act in itertools.product(shapes.items(), ACTS):
            out = np.broadcast_shapes(sa, sb)
            add(op, f"f32-{sname}-{act}", single_op(op, [sa, sb], [out], options=opt, fields=[("b", ACTS[act])]), sa, sb)
            if op == "DIV":
                continue
            for qname, qb in (("", dict(scale=0.11, zero_point=-20)), ("-smallb", dict(scale=0.013, zero_point=0))):
                m = writer.ModelBuilder()
                a, b = m.input(sa, "int8", **Q_IN), m.input(sb, "int8", **qb)
                y = m.output(out, "int8", **(Q_OUT if op != "MUL" else dict(scale=0.3, zero_point=1)))
                m.op(op, [a, b], [y], opt, [("b", ACTS[act])], version=2)
                add(op, f"int8-{sname}-{act}{qname}", m.build(), sa, sb, dtype="int8")
    const_b = rand(rng, (1, 1, 3))
    add("ADD", "f32-const", single_op("ADD", [(2, 4, 3)], [(2, 4, 3)], options="AddOptions", fields=[("b", 0)],
                                      consts=[const_b]), (2, 4, 3))
    for qname, (qa, qb, qy) in (("", (Q_IN, dict(scale=0.11, zero_point=-20), dict(scale=0.9, zero_point=-128))),
                                ("fine", (dict(scale=0.01, zero_point=0), Q_IN, dict(scale=0.05, zero_point=-100)))):
        m = writer.ModelBuilder()
        a, b = m.input((2, 5, 3), "int8", **qa), m.input((5, 1), "int8", **qb)
        m.op("SQUARED_DIFFERENCE", [a, b], [m.output((2, 5, 3), "int8", **qy)], version=2)
        add("SQUARED_DIFFERENCE", f"int8-bcast{qname}", m.build(), (2, 5, 3), (5, 1), dtype="int8")
    add("SQUARED_DIFFERENCE", "f32-bcast", single_op("SQUARED_DIFFERENCE", [(2, 5, 3), (5, 1)], [(2, 5, 3)]),
        (2, 5, 3), (5, 1))

    # ---------------------------------------------------------------- pooling
    geometries = [((3, 3), (2, 2), 0), ((3, 3), (2, 2), 1), ((2, 2), (1, 1), 0), ((2, 3), (1, 2), 1)]
    for op in ("AVERAGE_POOL_2D", "MAX_POOL_2D", "L2_POOL_2D"):
        for (kernel, strides, padding), act in itertools.product(geometries, ACTS):
            x = (2, 7, 9, 3)
            oh = [-(-x[1 + a] // strides[a]) if padding == 0 else (x[1 + a] - kernel[a]) // strides[a] + 1 for a in (0, 1)]
            fields = [("b", padding), ("i", strides[1]), ("i", strides[0]), ("i", kernel[1]), ("i", kernel[0]),
                      ("b", ACTS[act])]
            pad = "same" if padding == 0 else "valid"
            name = f"k{kernel[0]}x{kernel[1]}-s{strides[0]}x{strides[1]}-{pad}-{act}"
            out = (2, oh[0], oh[1], 3)
            add(op, f"f32-{name}", single_op(op, [x], [out], options="Pool2DOptions", fields=fields), x)
            if op != "L2_POOL_2D":
                add(op, f"int8-{name}", single_op(op, [x], [out], "int8", "Pool2DOptions", fields, q_out=Q_IN,
                                                   version=2), x, dtype="int8")

    # ---------------------------------------------------------------- fully connected / batch matmul
    for (xs, keep, units), act in itertools.product([((3, 10), 0, 4), ((2, 5, 2), 0, 5), ((2, 3, 10), 1, 4)], ACTS):
        out = (*xs[:-1], units) if keep else (int(np.prod(xs)) // 10, units)
        fields = [("b", ACTS[act]), ("b", 0), ("b", keep)]
        w, bias = rand(rng, (units, 10)), rand(rng, (units,))
        name = f"{'x'.join(map(str, xs))}{'-keep' if keep else ''}-{act}"
        add("FULLY_CONNECTED", f"f32-{name}", single_op("FULLY_CONNECTED", [xs], [out], options="FullyConnectedOptions",
                                                         fields=fields, consts=[w, bias], version=5), xs)
        wq = (rng.integers(-127, 128, (units, 10)).astype(np.int8), "int8", dict(scale=0.02, zero_point=0))
        bq = (rng.integers(-3000, 3000, units).astype(np.int32), "int32", dict(scale=0.05 * 0.02, zero_point=0))
        add("FULLY_CONNECTED", f"int8-{name}", single_op("FULLY_CONNECTED", [xs], [out], "int8", "FullyConnectedOptions",
                                                          fields, consts=[wq, bq], version=5), xs, dtype="int8")
    add("FULLY_CONNECTED", "f32-nobias", single_op("FULLY_CONNECTED", [(3, 10)], [(3, 4)], options="FullyConnectedOptions",
                                                    fields=[("b", 0)], consts=[rand(rng, (4, 10)), None]), (3, 10))
    for adj_x, adj_y in itertools.product((0, 1), (0, 1)):
        a = (2, 5, 3) if adj_x else (2, 3, 5)
        b = (2, 4, 5) if adj_y else (2, 5, 4)
        add("BATCH_MATMUL", f"f32-adj{adj_x}{adj_y}", single_op("BATCH_MATMUL", [a, b], [(2, 3, 4)],
                                                               options="BatchMatMulOptions",
                                                               fields=[("b", adj_x), ("b", adj_y)]), a, b)
        add("BATCH_MATMUL", f"int8-adj{adj_x}{adj_y}", single_op("BATCH_MATMUL", [a, b], [(2, 3, 4)], "int8",
                                                                "BatchMatMulOptions", [("b", adj_x), ("b", adj_y)],
                                                                q_out=dict(scale=0.9, zero_point=-3), version=2),
            a, b, dtype="int8")
    add("BATCH_MATMUL", "int8-const-rhs", single_op("BATCH_MATMUL", [(1, 4, 7)], [(1, 4, 5)], "int8", "BatchMatMulOptions",
                                                    [("b", 0), ("b", 0)], q_out=dict(scale=0.6, zero_point=2), version=2,
                                                    consts=[(rng.integers(-128, 128, (1, 7, 5)).astype(np.int8), "int8",
                                                             dict(scale=0.02, zero_point=0))]), (1, 4, 7), dtype="int8")

    for op, w_shape, x_shape, out, options, fields in (
            ("FULLY_CONNECTED", (4, 10), (3, 10), (3, 4), "FullyConnectedOptions", [("b", 1)]),
            ("CONV_2D", (4, 3, 3, 3), (1, 7, 6, 3), (1, 4, 3, 4), "Conv2DOptions", [("b", 0), ("i", 2), ("i", 2), ("b", 3)])):
        m = writer.ModelBuilder()   # float16 weights behind DEQUANTIZE (TFLite's float16 quantization)
        w16 = m.tensor(w_shape, "float16", data=rand(rng, w_shape).astype(np.float16))
        w32 = m.tensor(w_shape)
        b16 = m.tensor(w_shape[:1], "float16", data=rand(rng, w_shape[:1]).astype(np.float16))
        b32 = m.tensor(w_shape[:1])
        x, y = m.input(x_shape), m.output(out)
        m.op("DEQUANTIZE", [w16], [w32], version=3)
        m.op("DEQUANTIZE", [b16], [b32], version=3)
        m.op(op, [x, w32, b32], [y], options, fields)
        add(op, "f16-weights", m.build(), x_shape)

    for name, scale, zps, axis in (("per-tensor", [0.02], [3], 0), ("per-channel", [0.02, 0.05, 0.01, 0.03], [0, 0, 0, 0], 0)):
        m = writer.ModelBuilder()   # int8 weights behind DEQUANTIZE (weight-only quantization)
        w8 = m.tensor((4, 10), "int8", data=rng.integers(-127, 128, (4, 10)), scale=scale, zero_point=zps, axis=axis)
        w32 = m.tensor((4, 10))
        x, y = m.input((3, 10)), m.output((3, 4))
        m.op("DEQUANTIZE", [w8], [w32], version=2)
        m.op("FULLY_CONNECTED", [x, w32, -1], [y], "FullyConnectedOptions", [("b", 0)])
        add("FULLY_CONNECTED", f"int8-weights-dequantized-{name}", m.build(), (3, 10))

    for name, ws, act in (("per-tensor", [0.02], "none"), ("per-channel", [0.02, 0.05, 0.01, 0.03], "relu")):
        w = (rng.integers(-127, 128, (4, 10)).astype(np.int8), "int8", dict(scale=ws, zero_point=[0] * len(ws)))
        add("FULLY_CONNECTED", f"hybrid-{name}-{act}",
            single_op("FULLY_CONNECTED", [(3, 10)], [(3, 4)], options="FullyConnectedOptions",
                      fields=[("b", ACTS[act]), ("b", 0), ("b", 0), ("b", 0)], consts=[w, rand(rng, (4,))], version=9),
            (3, 10))
    wide = rand(rng, (5, 64))
    wide[2] = 0  # a zero row (TFLite's scale-1 case)
    add("FULLY_CONNECTED", "hybrid-wide-nobias",
        single_op("FULLY_CONNECTED", [(5, 64)], [(5, 7)], options="FullyConnectedOptions", fields=[("b", 0)],
                  consts=[(rng.integers(-127, 128, (7, 64)).astype(np.int8), "int8", dict(scale=0.004, zero_point=0)), None],
                  version=9), wide)

    # ---------------------------------------------------------------- convolutions: fused activations, int8
    for act in ACTS:
        w = rand(rng, (4, 3, 3, 3))
        add("CONV_2D", f"f32-{act}", single_op("CONV_2D", [(1, 7, 6, 3)], [(1, 4, 3, 4)], options="Conv2DOptions",
                                               fields=[("b", 0), ("i", 2), ("i", 2), ("b", ACTS[act])],
                                               consts=[w, rand(rng, (4,))]), (1, 7, 6, 3))
    for (op, padding, stride, out), act in itertools.product(
            [("CONV_2D", 0, 2, (1, 8, 7, 6)), ("CONV_2D", 1, 1, (1, 13, 11, 6)),
             ("DEPTHWISE_CONV_2D", 0, 1, (1, 15, 13, 6)), ("DEPTHWISE_CONV_2D", 1, 2, (1, 7, 6, 6))], ACTS):
        cin = 6 if op == "CONV_2D" else 1
        ws = rng.uniform(0.005, 0.03, 6).astype(np.float32)
        w = (rng.integers(-127, 128, (6, 3, 3, cin) if op == "CONV_2D" else (1, 3, 3, 6)).astype(np.int8), "int8",
             dict(scale=list(ws), zero_point=[0] * 6, axis=0 if op == "CONV_2D" else 3))
        b = (rng.integers(-3000, 3000, 6).astype(np.int32), "int32", dict(scale=list(np.float32(0.05) * ws), zero_point=[0] * 6))
        fields = [("b", padding), ("i", stride), ("i", stride)] + ([("i", 1)] if op == "DEPTHWISE_CONV_2D" else []) + \
            [("b", ACTS[act])]
        options = "Conv2DOptions" if op == "CONV_2D" else "DepthwiseConv2DOptions"
        add(op, f"int8-{'same' if padding == 0 else 'valid'}-s{stride}-{act}",
            single_op(op, [(1, 15, 13, 6)], [out], "int8", options, fields, consts=[w, b],
                      q_out=dict(scale=0.15, zero_point=-3), version=3), (1, 15, 13, 6), dtype="int8")

    for dtype, (out, strides, kernel, padding), act in itertools.product(
            ("float32", "int8"), [((1, 8, 10, 2), 2, 3, 0), ((1, 7, 9, 2), 2, 3, 0), ((1, 9, 11, 2), 2, 3, 1),
                                  ((1, 4, 5, 2), 1, 2, 0), ((1, 12, 15, 2), 3, 3, 0)], ("none", "relu6")):
        m = writer.ModelBuilder()
        x_shape = (1, 4, 5, 3)
        shape = m.tensor((4,), "int32", data=np.array(out, np.int32))
        if dtype == "float32":
            w = m.tensor((2, kernel, kernel, 3), data=rand(rng, (2, kernel, kernel, 3)))
            b = m.tensor((2,), data=rand(rng, (2,)))
            x, y = m.input(x_shape), m.output(out)
        else:
            w = m.tensor((2, kernel, kernel, 3), "int8", data=rng.integers(-127, 128, (2, kernel, kernel, 3)),
                         scale=[0.02, 0.03], zero_point=[0, 0])
            b = m.tensor((2,), "int32", data=rng.integers(-900, 900, 2), scale=[0.05 * 0.02, 0.05 * 0.03],
                         zero_point=[0, 0])
            x, y = m.input(x_shape, "int8", **Q_IN), m.output(out, "int8", **Q_OUT)
        m.op("TRANSPOSE_CONV", [shape, w, x, b], [y], "TransposeConvOptions",
             [("b", padding), ("i", strides), ("i", strides), ("b", ACTS[act])], version=4)
        t = "f32" if dtype == "float32" else "int8"
        name = f"{t}-{'x'.join(map(str, out[1:3]))}-s{strides}-k{kernel}-{'same' if padding == 0 else 'valid'}-{act}"
        add("TRANSPOSE_CONV", name, m.build(), x_shape, dtype=dtype)

    for dtype in ("float32", "int8"):  # a depthwise conv with depth multiplier 2
        if dtype == "float32":
            w, b, kw = rand(rng, (1, 3, 3, 8)), rand(rng, (8,)), {}
        else:
            ws = rng.uniform(0.005, 0.03, 8).astype(np.float32)
            w = (rng.integers(-127, 128, (1, 3, 3, 8)).astype(np.int8), "int8", dict(scale=list(ws), zero_point=[0] * 8, axis=3))
            b = (rng.integers(-3000, 3000, 8).astype(np.int32), "int32", dict(scale=list(np.float32(0.05) * ws), zero_point=[0] * 8))
            kw = dict(q_out=dict(scale=0.15, zero_point=-3))
        add("DEPTHWISE_CONV_2D", f"{'f32' if dtype == 'float32' else 'int8'}-multiplier2",
            single_op("DEPTHWISE_CONV_2D", [(1, 7, 6, 4)], [(1, 4, 3, 8)], dtype, "DepthwiseConv2DOptions",
                      [("b", 0), ("i", 2), ("i", 2), ("i", 2), ("b", 0)], consts=[w, b], version=3, **kw),
            (1, 7, 6, 4), dtype=dtype)

    # ---------------------------------------------------------------- activations and unary math
    for op, fields in (("RELU", ()), ("RELU6", ()), ("RELU_N1_TO_1", ()), ("LOGISTIC", ()), ("HARD_SWISH", ()),
                       ("LEAKY_RELU", [("f", 0.15)]), ("TANH", ())):
        options = "LeakyReluOptions" if op == "LEAKY_RELU" else None
        if op != "TANH":
            add(op, "f32", single_op(op, [(2, 5, 7)], [(2, 5, 7)], options=options, fields=fields), (2, 5, 7))
        if op in ("RELU", "RELU6", "RELU_N1_TO_1", "LEAKY_RELU"):
            add(op, "int8", single_op(op, [(2, 128)], [(2, 128)], "int8", options=options, fields=fields,
                                      version=1 if op == "RELU_N1_TO_1" else 2),
                np.arange(-128, 128, dtype=np.int8).reshape(2, 128))
        if op == "HARD_SWISH":
            for qname, q in (("", Q_OUT), ("-wide", dict(scale=0.5, zero_point=-100)), ("-fine", dict(scale=0.004, zero_point=7))):
                add(op, f"int8{qname}", single_op(op, [(2, 128)], [(2, 128)], "int8", q_out=q),
                    np.arange(-128, 128, dtype=np.int8).reshape(2, 128))
            add(op, "int8-fine-input", single_op(op, [(2, 128)], [(2, 128)], "int8", q_in=dict(scale=0.003, zero_point=-9),
                                                 q_out=dict(scale=0.002, zero_point=-20)),
                np.arange(-128, 128, dtype=np.int8).reshape(2, 128))
        if op in ("LOGISTIC", "TANH"):
            q = dict(scale=1 / 256, zero_point=-128) if op == "LOGISTIC" else dict(scale=1 / 128, zero_point=0)
            add(op, "int8", single_op(op, [(2, 128)], [(2, 128)], "int8", q_out=q, version=2),
                np.arange(-128, 128, dtype=np.int8).reshape(2, 128))
    positive = np.abs(rand(rng, (3, 7))) + np.float32(0.01)
    for op in ("SQRT", "RSQRT"):
        add(op, "f32", single_op(op, [(3, 7)], [(3, 7)]), positive)
    for qname, qa in (("", dict(scale=0.01, zero_point=5)), ("-big", dict(scale=0.2, zero_point=-30))):
        alpha = (rng.integers(-128, 128, (1, 1, 3)).astype(np.int8), "int8", qa)
        add("PRELU", f"int8-channel{qname}", single_op("PRELU", [(2, 4, 32, 3)], [(2, 4, 32, 3)], "int8", consts=[alpha],
                                                       version=1), np.arange(-128, 128, dtype=np.int8).reshape(1, 4, 64, 1)
            .repeat(3, axis=3).reshape(2, 4, 32, 3))
    add("PRELU", "f32-channel", single_op("PRELU", [(2, 4, 5, 3)], [(2, 4, 5, 3)], consts=[rand(rng, (1, 1, 3))]),
        (2, 4, 5, 3))
    for beta in (1.0, 0.4):
        add("SOFTMAX", f"f32-beta{beta}", single_op("SOFTMAX", [(3, 11)], [(3, 11)], options="SoftmaxOptions",
                                                    fields=[("f", beta)]), (3, 11))
        add("SOFTMAX", f"int8-beta{beta}", single_op("SOFTMAX", [(3, 11)], [(3, 11)], "int8", "SoftmaxOptions",
                                                     [("f", beta)], q_out=dict(scale=1 / 256, zero_point=-128),
                                                     version=2), (3, 11), dtype="int8")

    # ---------------------------------------------------------------- quantize / dequantize
    add("QUANTIZE", "f32-int8", single_op("QUANTIZE", [(4, 9)], [(4, 9)], out_dtype="int8"), (4, 9))
    add("QUANTIZE", "int8-int8", single_op("QUANTIZE", [(4, 9)], [(4, 9)], "int8", version=2), (4, 9), dtype="int8")
    for src, dst, q_in, q_out in (("uint8", "int8", dict(scale=0.05, zero_point=128), dict(scale=0.05, zero_point=0)),
                                  ("uint8", "int8", dict(scale=0.05, zero_point=131), Q_OUT),
                                  ("int8", "uint8", Q_IN, dict(scale=0.07, zero_point=120))):
        add("QUANTIZE", f"{src}-{dst}-{q_in['zero_point']}",
            single_op("QUANTIZE", [(4, 64)], [(4, 64)], src, q_in=q_in, q_out=q_out, out_dtype=dst, version=2),
            np.arange(256).reshape(4, 64).astype(src) if src == "uint8" else np.arange(-128, 128).reshape(4, 64).astype(np.int8))
    add("DEQUANTIZE", "int8-f32", single_op("DEQUANTIZE", [(4, 9)], [(4, 9)], "int8", out_dtype="float32", q_out={},
                                            version=2), (4, 9), dtype="int8")

    # ---------------------------------------------------------------- data movement (one quantization in and out)
    def movement_cases(dtype: str) -> None:
        """Every data-movement op in ``dtype`` (float32, int8 or int16; one quantization in and out)."""
        q = {"float32": {}, "int8": Q_IN, "int16": Q16_IN}[dtype]
        t = {"float32": "f32", "int8": "int8", "int16": "int16"}[dtype]
        same = dict(q_in=q, q_out=q) if q else {}
        v = 1

        def move(op, name, ins, outs, *feeds, **kw):
            add(op, f"{t}-{name}", single_op(op, ins, outs, dtype, version=v, **same, **kw), *feeds, dtype=dtype)

        add("RESHAPE", f"{t}-3d-2d", single_op("RESHAPE", [(2, 3, 5)], [(6, 5)], dtype, consts=[np.array([6, 5], np.int32)],
                                              **same), (2, 3, 5), dtype=dtype)
        move("SQUEEZE", "axis1", [(2, 1, 5)], [(2, 5)], (2, 1, 5), options="SqueezeOptions",
             fields=[writer.fb_vec("i", [1])])
        add("EXPAND_DIMS", f"{t}-axis-1", single_op("EXPAND_DIMS", [(2, 5)], [(2, 5, 1)], dtype,
                                                    consts=[np.array([-1], np.int32)], **same), (2, 5), dtype=dtype)
        move("TRANSPOSE", "0312", [(2, 3, 4, 5)], [(2, 5, 3, 4)], (2, 3, 4, 5), consts=[np.array([0, 3, 1, 2], np.int32)])
        move("CONCATENATION", "axis-1", [(2, 3, 4), (2, 3, 1), (2, 3, 2)], [(2, 3, 7)], (2, 3, 4), (2, 3, 1),
             (2, 3, 2), options="ConcatenationOptions", fields=[("i", -1), ("b", 0)])
        move("CONCATENATION", "axis0", [(1, 3), (2, 3)], [(3, 3)], (1, 3), (2, 3), options="ConcatenationOptions",
             fields=[("i", 0), ("b", 0)])
        move("PACK", "axis1", [(3, 4), (3, 4)], [(3, 2, 4)], (3, 4), (3, 4), options="PackOptions",
             fields=[("i", 2), ("i", 1)])
        move("UNPACK", "axis2", [(3, 4, 2)], [(3, 4), (3, 4)], (3, 4, 2), options="UnpackOptions",
             fields=[("i", 2), ("i", 2)])
        move("PAD", "hw", [(1, 3, 5, 2)], [(1, 6, 6, 2)], (1, 3, 5, 2), consts=[np.array([[0, 0], [1, 2], [0, 1], [0, 0]], np.int32)])
        fill = np.array([1.5], np.float32) if dtype == "float32" else (np.array([-9], dtype), dtype, q)
        move("PADV2", "value", [(1, 3, 5, 2)], [(1, 4, 8, 2)], (1, 3, 5, 2),
             consts=[np.array([[0, 0], [0, 1], [2, 1], [0, 0]], np.int32), fill])
        move("SLICE", "size-1", [(3, 7, 5)], [(2, 4, 5)], (3, 7, 5),
             consts=[np.array([1, 2, 0], np.int32), np.array([2, 4, -1], np.int32)])
        for name, begin, end, strides, masks, out in (
                ("basic", [0, 1, 0], [3, 7, 5], [1, 2, 2], (0, 0, 0), (3, 3, 3)),
                ("masks", [1, -3, 2], [3, 0, 4], [1, 1, 1], (1, 2, 0), (3, 3, 2)),
                ("negative", [2, -1, 0], [0, 0, 5], [-1, -2, 1], (0, 2, 0), (2, 4, 5)),
                ("shrink", [1, 0, 3], [2, 7, 4], [1, 1, 1], (0, 0, 5), (7,)),
                ("new-axis", [0, 0, 1], [0, 3, 6], [1, 1, 2], (0, 0, 0, 1, 0), (1, 3, 3, 5)),
                ("ellipsis", [0, 1], [0, 4], [1, 1], (0, 0, 0, 0, 1), (3, 7, 3)),
                ("ellipsis-shrink-new-axis", [0, 2, 0], [0, 3, 0], [1, 1, 1], (0, 0, 2, 4, 1), (3, 7, 1))):
            begin_mask, end_mask, shrink, new_axis, ellipsis = masks + (0,) * (5 - len(masks))  # (begin, end, shrink, new axis, ellipsis)
            move("STRIDED_SLICE", name, [(3, 7, 5)], [out], (3, 7, 5), options="StridedSliceOptions",
                 fields=[("i", begin_mask), ("i", end_mask), ("i", ellipsis), ("i", new_axis), ("i", shrink)],
                 consts=[np.array(begin, np.int32), np.array(end, np.int32), np.array(strides, np.int32)])
        m = writer.ModelBuilder()
        axis = m.tensor((), "int32", data=np.array(1, np.int32))
        x = m.input((2, 6, 3), dtype, **q)
        outs = [m.output((2, 2, 3), dtype, **q) for _ in range(3)]
        m.op("SPLIT", [axis, x], outs, "SplitOptions", [("i", 3)], version=v)
        add("SPLIT", f"{t}-axis1", m.build(), (2, 6, 3), dtype=dtype)
        move("SPLIT_V", "sizes", [(2, 6, 3)], [(2, 1, 3), (2, 5, 3)], (2, 6, 3), options="SplitVOptions",
             fields=[("i", 2)], consts=[np.array([1, 5], np.int32), np.array(1, np.int32)])
        if dtype != "int16":   # LiteRT's SPACE_TO_DEPTH / DEPTH_TO_SPACE take no int16
            move("SPACE_TO_DEPTH", "b2", [(1, 4, 6, 3)], [(1, 2, 3, 12)], (1, 4, 6, 3), options="SpaceToDepthOptions",
                 fields=[("i", 2)])
            move("DEPTH_TO_SPACE", "b2", [(1, 2, 3, 8)], [(1, 4, 6, 2)], (1, 2, 3, 8), options="DepthToSpaceOptions",
                 fields=[("i", 2)])
        move("RESIZE_NEAREST_NEIGHBOR", "up", [(1, 3, 5, 2)], [(1, 7, 9, 2)], (1, 3, 5, 2),
             consts=[np.array([7, 9], np.int32)])

    for dtype in ("float32", "int8"):
        movement_cases(dtype)

    for (name, x, size), (align, half) in itertools.product(
            [("up", (1, 3, 5, 2), (6, 9)), ("down", (2, 7, 9, 3), (3, 4)), ("odd", (1, 4, 4, 1), (7, 5))],
            [(0, 0), (1, 0), (0, 1)]):
        mode = "align" if align else "half" if half else "asym"
        add("RESIZE_BILINEAR", f"int8-{name}-{mode}", single_op("RESIZE_BILINEAR", [x], [(x[0], *size, x[3])], "int8",
                                                                "ResizeBilinearOptions", [None, None, ("b", align), ("b", half)],
                                                                consts=[np.array(size, np.int32)], q_out=Q_IN, version=3),
            x, dtype="int8")

    # ---------------------------------------------------------------- reductions
    for (name, x, axes, keep, out), (qname, q) in itertools.product(
            [("hw-keep", (2, 5, 7, 9), [1, 2], 1, (2, 1, 1, 9)), ("hw", (2, 5, 7, 9), [1, 2], 0, (2, 9)),
             ("last", (3, 4, 11), [-1], 0, (3, 4)), ("c-keep", (2, 5, 7, 9), [3], 1, (2, 5, 7, 1)),
             ("big-hw-keep", (1, 17, 19, 4), [2, 1], 1, (1, 1, 1, 4))],
            [("same", Q_IN), ("rescale", Q_OUT), ("fine", dict(scale=0.011, zero_point=-60))]):
        add("MEAN", f"int8-{name}-{qname}", single_op("MEAN", [x], [out], "int8", "ReducerOptions", [("b", keep)],
                                                       consts=[np.array(axes, np.int32)], q_out=q, version=2),
            x, dtype="int8")
    for keep in (0, 1):
        add("MEAN", f"f32-hw-keep{keep}", single_op("MEAN", [(2, 5, 7, 3)], [(2, 1, 1, 3) if keep else (2, 3)],
                                                   options="ReducerOptions", fields=[("b", keep)],
                                                   consts=[np.array([1, 2], np.int32)]), (2, 5, 7, 3))

    # ---------------------------------------------------------------- generic ops (ops/math.py, reduce.py, tensor.py)
    add("TANH", "f32", single_op("TANH", [(2, 5, 7)], [(2, 5, 7)]), (2, 5, 7))
    add("LOG_SOFTMAX", "f32", single_op("LOG_SOFTMAX", [(3, 11)], [(3, 11)]), (3, 11))
    add("L2_NORMALIZATION", "f32", single_op("L2_NORMALIZATION", [(2, 3, 9)], [(2, 3, 9)], options="L2NormOptions",
                                             fields=[("b", 0)]), (2, 3, 9))
    for op in ("MAXIMUM", "MINIMUM"):
        add(op, "f32-bcast", single_op(op, [(2, 5, 3), (5, 1)], [(2, 5, 3)]), (2, 5, 3), (5, 1))
        add(op, "int8-bcast", single_op(op, [(2, 5, 3), (5, 1)], [(2, 5, 3)], "int8", q_out=Q_IN, version=2),
            (2, 5, 3), (5, 1), dtype="int8")
    for op in ("SUM", "REDUCE_MAX"):
        for keep in (0, 1):
            out = (2, 1, 1, 3) if keep else (2, 3)
            add(op, f"f32-hw-keep{keep}", single_op(op, [(2, 5, 7, 3)], [out], options="ReducerOptions",
                                                   fields=[("b", keep)], consts=[np.array([1, 2], np.int32)]), (2, 5, 7, 3))
    add("REDUCE_MAX", "int8-last", single_op("REDUCE_MAX", [(3, 4, 11)], [(3, 4)], "int8", "ReducerOptions", [("b", 0)],
                                             consts=[np.array([-1], np.int32)], q_out=Q_IN, version=2), (3, 4, 11), dtype="int8")
    for dtype, out_type in (("float32", "int32"), ("float32", "int64"), ("int8", "int32")):
        m = writer.ModelBuilder()
        x = m.input((3, 7, 5), dtype, **(Q_IN if dtype == "int8" else {}))
        axis = m.tensor((1,), "int32", data=np.array([1], np.int32))
        m.op("ARG_MAX", [x, axis], [m.output((3, 5), out_type)], "ArgMaxOptions", [("b", writer.TYPE_CODES[out_type])],
             version=2 if dtype == "int8" else 1)
        add("ARG_MAX", f"{'f32' if dtype == 'float32' else 'int8'}-{out_type}", m.build(), (3, 7, 5), dtype=dtype)
    for src, dst in (("float32", "int32"), ("int32", "float32")):
        m = writer.ModelBuilder()
        m.op("CAST", [m.input((4, 6), src)], [m.output((4, 6), dst)], version=1)
        feed = rand(rng, (4, 6)) if src == "float32" else rng.integers(-1000, 1000, (4, 6)).astype(np.int32)
        add("CAST", f"{src}-{dst}", m.build(), feed)
    for dst in ("float32", "int32"):   # a quantized int8 source: LiteRT casts the stored integers
        m = writer.ModelBuilder()
        m.op("CAST", [m.input((4, 6), "int8", **Q_IN)], [m.output((4, 6), dst)], version=5)
        add("CAST", f"int8-{dst}", m.build(), (4, 6), dtype="int8")
    for dtype in ("float32", "int8"):
        q = Q_IN if dtype == "int8" else {}
        m = writer.ModelBuilder()
        x = m.input((3, 7, 4), dtype, **q)
        idx = m.tensor((2, 3), "int32", data=np.array([[6, 0, 2], [1, 1, -1 + 7]], np.int32))
        m.op("GATHER", [x, idx], [m.output((3, 2, 3, 4), dtype, **q)], "GatherOptions", [("i", 1)],
             version=2 if dtype == "int8" else 1)
        add("GATHER", f"{'f32' if dtype == 'float32' else 'int8'}-axis1", m.build(), (3, 7, 4), dtype=dtype)
        m = writer.ModelBuilder()
        x = m.input((3, 7, 4), dtype, **q)
        idx = m.tensor((3, 2), "int32", data=np.array([[6, 0], [1, 1], [5, 2]], np.int32))
        m.op("GATHER", [x, idx], [m.output((3, 2, 4), dtype, **q)], "GatherOptions", [("i", 1), ("i", 1)],
             version=2 if dtype == "int8" else 1)
        add("GATHER", f"{'f32' if dtype == 'float32' else 'int8'}-batch-dims1", m.build(), (3, 7, 4), dtype=dtype)
        for mode, name in ((0, "reflect"), (1, "symmetric")):
            pads = np.array([[0, 0], [2, 1], [1, 3], [0, 0]], np.int32)
            add("MIRROR_PAD", f"{'f32' if dtype == 'float32' else 'int8'}-{name}",
                single_op("MIRROR_PAD", [(1, 4, 5, 2)], [(1, 7, 9, 2)], dtype, "MirrorPadOptions", [("b", mode)],
                          consts=[pads], version=2 if dtype == "int8" else 1, **({"q_out": Q_IN} if dtype == "int8" else {})),
                (1, 4, 5, 2), dtype=dtype)

    # ---------------------------------------------------------------- int8 kernels volvox refuses (LiteRT runs them)
    hybrid_w = (rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8), "int8", dict(scale=[0.02] * 4, zero_point=[0] * 4))
    add("CONV_2D", "hybrid", single_op("CONV_2D", [(1, 7, 6, 3)], [(1, 4, 3, 4)], options="Conv2DOptions",
                                       fields=[("b", 0), ("i", 2), ("i", 2), ("b", 0)], consts=[hybrid_w, rand(rng, (4,))],
                                       version=5), (1, 7, 6, 3))
    add("CONV_2D", "hybrid-valid-relu6-batch2", single_op("CONV_2D", [(2, 7, 6, 3)], [(2, 5, 4, 4)], options="Conv2DOptions",
                                                          fields=[("b", 1), ("i", 1), ("i", 1), ("b", 3)],
                                                          consts=[hybrid_w, rand(rng, (4,))], version=5), (2, 7, 6, 3))
    per_channel_w = (hybrid_w[0], "int8", dict(scale=[0.02, 0.03, 0.01, 0.05], zero_point=[0] * 4))
    add("CONV_2D", "hybrid-per-channel", single_op("CONV_2D", [(1, 7, 6, 3)], [(1, 4, 3, 4)], options="Conv2DOptions",
                                                   fields=[("b", 0), ("i", 2), ("i", 2), ("b", 0)],
                                                   consts=[per_channel_w, rand(rng, (4,))], version=5), (1, 7, 6, 3))
    add("CONV_2D", "hybrid-per-channel-valid-batch3", single_op("CONV_2D", [(3, 7, 6, 3)], [(3, 5, 4, 4)],
                                                                options="Conv2DOptions",
                                                                fields=[("b", 1), ("i", 1), ("i", 1), ("b", 1)],
                                                                consts=[per_channel_w, rand(rng, (4,))], version=5),
        rand(rng, (3, 7, 6, 3)) + np.float32(0.7))
    add("RSQRT", "int8", single_op("RSQRT", [(3, 7)], [(3, 7)], "int8", version=2, q_in=dict(scale=0.05, zero_point=-128)),
        (3, 7), dtype="int8")
    add("RSQRT", "int8-every-value", single_op("RSQRT", [(2, 128)], [(2, 128)], "int8", version=2,
                                               q_in=dict(scale=0.3, zero_point=-128), q_out=dict(scale=0.02, zero_point=-100)),
        np.arange(-128, 128, dtype=np.int8).reshape(2, 128), dtype="int8")
    add("L2_NORMALIZATION", "int8-wide", single_op("L2_NORMALIZATION", [(4, 3, 37)], [(4, 3, 37)], "int8", "L2NormOptions",
                                                   [("b", 0)], q_in=dict(scale=0.1, zero_point=5),
                                                   q_out=dict(scale=1 / 128, zero_point=0), version=2),
        (4, 3, 37), dtype="int8")
    add("LOG_SOFTMAX", "int8", single_op("LOG_SOFTMAX", [(3, 7)], [(3, 7)], "int8", q_out=dict(scale=16 / 256, zero_point=127),
                                         version=2), (3, 7), dtype="int8")
    add("LOG_SOFTMAX", "int8-wide", single_op("LOG_SOFTMAX", [(2, 4, 50)], [(2, 4, 50)], "int8",
                                              q_in=dict(scale=0.25, zero_point=3),
                                              q_out=dict(scale=16 / 256, zero_point=127), version=2),
        (2, 4, 50), dtype="int8")
    add("L2_NORMALIZATION", "int8", single_op("L2_NORMALIZATION", [(3, 7)], [(3, 7)], "int8", "L2NormOptions", [("b", 0)],
                                              q_out=dict(scale=1 / 128, zero_point=0), version=2), (3, 7), dtype="int8")
    movement_cases("int16")
    cases += int16x8_cases(rng)
    # int8 SUM with rescaling: LiteRT 2.3's reference kernel answers mostly -1 whatever the input; volvox refuses
    for name, shape, axes, keep, out in (("hw", (2, 5, 7, 3), [1, 2], 0, (2, 3)), ("last-keep", (3, 4, 11), [-1], 1, (3, 4, 1))):
        cases.append(Case("SUM", f"SUM-int8-rescaled-{name}",
                          single_op("SUM", [shape], [out], "int8", "ReducerOptions", [("b", keep)],
                                    consts=[np.array(axes, np.int32)], q_out=dict(scale=0.9, zero_point=-5), version=2),
                          [rand(rng, shape, "int8")], refused=True))
    return cases


def int16x8_cases(rng) -> list[Case]:
    """16x8 quantization (int16 activations with zero point 0, int8 weights, int64 biases): convolutions and
    fully connected layers over awkward shapes, every fused activation, per-tensor and per-channel filters."""
    cases: list[Case] = []

    def add(op, name, model, *shapes_or_arrays, refused=False):
        feeds = [s if isinstance(s, np.ndarray) else rand(rng, s, "int16") for s in shapes_or_arrays]
        cases.append(Case(op, f"{op}-{name}", model, feeds, refused))

    def filt(shape, axis, per_channel=True, bias_dtype="int64", big_bias=False):
        n = shape[axis]
        ws = rng.uniform(0.005, 0.03, n if per_channel else 1).astype(np.float32)
        w = (rng.integers(-127, 128, shape).astype(np.int8), "int8", dict(scale=list(ws), zero_point=[0] * ws.size, axis=axis))
        bias = rng.integers(-3_000_000, 3_000_000, n)
        if big_bias:
            bias[0], bias[-1] = 1 << 40, -(1 << 40)   # saturates, through the whole int64 path
        b = (bias.astype(bias_dtype), bias_dtype, dict(scale=list(np.float32(Q16_IN["scale"]) * np.resize(ws, n)),
                                                       zero_point=[0] * n))
        return w, b

    for (op, padding, stride, dil, out), act in itertools.product(
            [("CONV_2D", 0, 2, 1, (1, 8, 7, 6)), ("CONV_2D", 1, 1, 2, (1, 11, 9, 6)),
             ("DEPTHWISE_CONV_2D", 0, 1, 1, (1, 15, 13, 6)), ("DEPTHWISE_CONV_2D", 1, 2, 1, (1, 7, 6, 6))], ACTS):
        conv = op == "CONV_2D"
        w, b = filt((6, 3, 3, 5) if conv else (1, 3, 3, 6), 0 if conv else 3)
        fields = [("b", padding), ("i", stride), ("i", stride)] + ([] if conv else [("i", 1)]) + [("b", ACTS[act])] + \
            [("i", dil), ("i", dil)]
        x = (1, 15, 13, 5 if conv else 6)
        add(op, f"int16-{'same' if padding == 0 else 'valid'}-s{stride}-d{dil}-{act}",
            single_op(op, [x], [out], "int16", "Conv2DOptions" if conv else "DepthwiseConv2DOptions", fields,
                      consts=[w, b], q_in=Q16_IN, q_out=Q16_OUT, version=4 if conv else 5), x)
    for name, per_channel, big in (("per-tensor", False, False), ("big-bias", True, True)):  # (LiteRT needs a bias)
        w, b = filt((6, 3, 3, 5), 0, per_channel, big_bias=big)
        add("CONV_2D", f"int16-{name}-batch2",
            single_op("CONV_2D", [(2, 9, 8, 5)], [(2, 7, 6, 6)], "int16", "Conv2DOptions",
                      [("b", 1), ("i", 1), ("i", 1), ("b", 0)], consts=[w, b], q_in=Q16_IN,
                      q_out=Q16_OUT, version=4), (2, 9, 8, 5))
    w, b = filt((1, 3, 3, 8), 3)
    add("DEPTHWISE_CONV_2D", "int16-multiplier2",
        single_op("DEPTHWISE_CONV_2D", [(1, 9, 8, 4)], [(1, 9, 8, 8)], "int16", "DepthwiseConv2DOptions",
                  [("b", 0), ("i", 1), ("i", 1), ("i", 2), ("b", 0)], consts=[w, b], q_in=Q16_IN, q_out=Q16_OUT,
                  version=5), (1, 9, 8, 4))

    for (out, strides, kernel, padding), act in itertools.product(
            [((1, 8, 10, 2), 2, 3, 0), ((1, 7, 9, 2), 2, 3, 0), ((1, 9, 11, 2), 2, 3, 1), ((1, 4, 5, 2), 1, 2, 0),
             ((1, 12, 15, 2), 3, 3, 0)], ("none", "relu6")):
        m = writer.ModelBuilder()
        (wd, wq), (bd, bq) = (lambda f: ((f[0][0], f[0][2]), (f[1][0], f[1][2])))(filt((2, kernel, kernel, 3), 0))
        shape = m.tensor((4,), "int32", data=np.array(out, np.int32))
        wt = m.tensor(wd.shape, "int8", data=wd, **wq)
        bt = m.tensor((2,), "int64", data=bd, **bq)
        x, y = m.input((1, 4, 5, 3), "int16", **Q16_IN), m.output(out, "int16", **Q16_OUT)
        m.op("TRANSPOSE_CONV", [shape, wt, x, bt], [y], "TransposeConvOptions",
             [("b", padding), ("i", strides), ("i", strides), ("b", ACTS[act])], version=3)
        add("TRANSPOSE_CONV", f"int16-{'x'.join(map(str, out[1:3]))}-s{strides}-k{kernel}-"
            f"{'same' if padding == 0 else 'valid'}-{act}", m.build(), (1, 4, 5, 3))

    for (xs, keep, units), act in itertools.product([((3, 10), 0, 4), ((2, 5, 2), 0, 5), ((2, 3, 10), 1, 4)], ACTS):
        out = (*xs[:-1], units) if keep else (int(np.prod(xs)) // 10, units)
        w, b = filt((units, 10), 0, per_channel=False)
        add("FULLY_CONNECTED", f"int16-{'x'.join(map(str, xs))}{'-keep' if keep else ''}-{act}",
            single_op("FULLY_CONNECTED", [xs], [out], "int16", "FullyConnectedOptions",
                      [("b", ACTS[act]), ("b", 0), ("b", keep)], consts=[w, b], q_in=Q16_IN, q_out=Q16_OUT, version=7), xs)
    for name, per_channel, bias, big in (("per-channel", True, True, False), ("nobias", False, False, False),
                                         ("big-bias", False, True, True)):
        w, b = filt((7, 37), 0, per_channel, big_bias=big)
        add("FULLY_CONNECTED", f"int16-{name}",
            single_op("FULLY_CONNECTED", [(40, 37)], [(40, 7)], "int16", "FullyConnectedOptions", [("b", 0)],
                      consts=[w, b if bias else None], q_in=Q16_IN, q_out=Q16_OUT, version=7), (40, 37))

    geometries = [((3, 3), (2, 2), 0), ((3, 3), (2, 2), 1), ((2, 2), (1, 1), 0), ((2, 3), (1, 2), 1)]
    for op, (kernel, strides, padding), act in itertools.product(("AVERAGE_POOL_2D", "MAX_POOL_2D"), geometries, ACTS):
        x = (2, 7, 9, 3)
        oh = [-(-x[1 + a] // strides[a]) if padding == 0 else (x[1 + a] - kernel[a]) // strides[a] + 1 for a in (0, 1)]
        fields = [("b", padding), ("i", strides[1]), ("i", strides[0]), ("i", kernel[1]), ("i", kernel[0]), ("b", ACTS[act])]
        add(op, f"int16-k{kernel[0]}x{kernel[1]}-s{strides[0]}x{strides[1]}-{'same' if padding == 0 else 'valid'}-{act}",
            single_op(op, [x], [(2, oh[0], oh[1], 3)], "int16", "Pool2DOptions", fields, q_in=Q16_IN, q_out=Q16_IN,
                      version=3), x)
    for op, q_out in (("RELU", dict(scale=0.00015, zero_point=0)), ("RELU6", dict(scale=0.0003, zero_point=0)),
                      ("LEAKY_RELU", dict(scale=0.00025, zero_point=0))):   # (LiteRT has no int16 RELU_N1_TO_1)
        opts = dict(options="LeakyReluOptions", fields=[("f", 0.2)]) if op == "LEAKY_RELU" else {}
        add(op, "int16-rescaled", single_op(op, [(3, 5, 7)], [(3, 5, 7)], "int16", q_in=Q16_IN, q_out=q_out,
                                            version=2 if op == "LEAKY_RELU" else 3, **opts), (3, 5, 7))
    add("QUANTIZE", "f32-int16", single_op("QUANTIZE", [(4, 33)], [(4, 33)], q_out=dict(scale=0.0003, zero_point=0),
                                           out_dtype="int16", version=4),
        rand(rng, (4, 33)) * np.float32(4))   # some past int16's range: saturated
    for src, dst, q_in, q_out in (("int16", "int8", Q16_IN, Q_OUT), ("int8", "int16", Q_IN, Q16_OUT),
                                  ("int16", "int16", Q16_IN, dict(scale=0.00035, zero_point=0))):
        m = writer.ModelBuilder()
        m.op("QUANTIZE", [m.input((5, 9), src, **q_in)], [m.output((5, 9), dst, **q_out)], version=4)
        add("QUANTIZE", f"{src}-{dst}", m.build(), rand(rng, (5, 9), src))
    m = writer.ModelBuilder()
    m.op("DEQUANTIZE", [m.input((5, 9), "int16", **Q16_IN)], [m.output((5, 9))], version=4)
    add("DEQUANTIZE", "int16-f32", m.build(), (5, 9))
    for op in ("MAXIMUM", "MINIMUM"):
        add(op, "int16-bcast", single_op(op, [(2, 5, 3), (5, 1)], [(2, 5, 3)], "int16", q_in=Q16_IN, q_out=Q16_IN,
                                         version=4), (2, 5, 3), (5, 1))
    add("REDUCE_MAX", "int16-last", single_op("REDUCE_MAX", [(3, 4, 11)], [(3, 4)], "int16", "ReducerOptions", [("b", 0)],
                                              consts=[np.array([-1], np.int32)], q_in=Q16_IN, q_out=Q16_IN, version=3),
        (3, 4, 11))
    m = writer.ModelBuilder()
    x = m.input((3, 7, 4), "int16", **Q16_IN)
    idx = m.tensor((2, 3), "int32", data=np.array([[6, 0, 2], [1, 1, 6]], np.int32))
    m.op("GATHER", [x, idx], [m.output((3, 2, 3, 4), "int16", **Q16_IN)], "GatherOptions", [("i", 1)], version=7)
    add("GATHER", "int16-axis1", m.build(), (3, 7, 4))

    shapes = {"same": ((2, 5, 7, 3), (2, 5, 7, 3)), "bcast": ((2, 5, 7, 3), (1, 1, 7, 1))}
    general = (dict(scale=0.0002, zero_point=0), dict(scale=0.00031, zero_point=0), dict(scale=0.00045, zero_point=0))
    pot = (dict(scale=2.0 ** -12, zero_point=0), dict(scale=2.0 ** -14, zero_point=0), dict(scale=2.0 ** -12, zero_point=0))
    for op, (sname, (sa, sb)), act in itertools.product(("ADD", "SUB", "MUL"), shapes.items(), ACTS):
        out = np.broadcast_shapes(sa, sb)
        for qname, (qa, qb, qy), pot_flag in (("", general, 1), ("-pot", pot, 1), ("-pot-scales-general", pot, 0)):
            if qname and (op == "MUL" or (sname == "bcast" and pot_flag)):
                continue
            if op == "MUL":
                qy = dict(scale=0.02, zero_point=0)
            m = writer.ModelBuilder()
            a, b = m.input(sa, "int16", **qa), m.input(sb, "int16", **qb)
            m.op(op, [a, b], [m.output(out, "int16", **qy)], {"ADD": "AddOptions", "SUB": "SubOptions", "MUL": "MulOptions"}[op],
                 [("b", ACTS[act])] + ([("b", pot_flag)] if op != "MUL" else []), version={"ADD": 3, "SUB": 3, "MUL": 4}[op])
            add(op, f"int16-{sname}-{act}{qname}", m.build(), sa, sb)

    for name, x, axes, keep, out in (("hw-keep", (2, 5, 7, 3), [1, 2], 1, (2, 1, 1, 3)), ("hw", (2, 5, 7, 3), [1, 2], 0, (2, 3)),
                                     ("last", (3, 4, 11), [-1], 0, (3, 4)), ("all-but-batch", (2, 3, 9, 5), [1, 2, 3], 0, (2,))):
        add("MEAN", f"int16-{name}", single_op("MEAN", [x], [out], "int16", "ReducerOptions", [("b", keep)],
                                               consts=[np.array(axes, np.int32)], q_in=Q16_IN,
                                               q_out=dict(scale=0.00013, zero_point=0), version=3), x)
    for adj_x, adj_y in itertools.product((0, 1), (0, 1)):
        a = (2, 5, 3) if adj_x else (2, 3, 5)
        b = (2, 4, 5) if adj_y else (2, 5, 4)
        add("BATCH_MATMUL", f"int16-adj{adj_x}{adj_y}", single_op("BATCH_MATMUL", [a, b], [(2, 3, 4)], "int16",
                                                                 "BatchMatMulOptions", [("b", adj_x), ("b", adj_y)],
                                                                 q_in=Q16_IN, q_out=dict(scale=0.05, zero_point=0),
                                                                 version=3), a, b)

    # every int16 input through LiteRT's sigmoid table: the power-of-two scales it takes as such (2**-12; TANH also
    # 2**-11), one within CheckedLog2's 1e-3 of 2**-12, the others through its truncated multiplier and shift
    every = np.arange(-32768, 32768, dtype=np.int16).reshape(256, 256)
    for op, (name, scale) in itertools.product(("LOGISTIC", "TANH"), (
            ("pot-12", 2.0 ** -12), ("pot-11", 2.0 ** -11), ("pot-13", 2.0 ** -13), ("near-pot-12", 2.0 ** -12 * 1.0004),
            ("general", 0.0002), ("coarse", 0.01), ("fine", 1e-6), ("wide", 2.0))):
        add(op, f"int16-every-value-{name}", single_op(op, [(256, 256)], [(256, 256)], "int16", q_in=dict(scale=scale, zero_point=0),
                                                       q_out=dict(scale=2.0 ** -15, zero_point=0), version=3), every)
    add("TANH", "int16-every-value-out-near-pot", single_op("TANH", [(256, 256)], [(256, 256)], "int16", q_in=Q16_IN,
                                                            q_out=dict(scale=2.0 ** -15 * 1.0004, zero_point=0), version=3),
        every)   # LiteRT's TANH takes any output scale whose CheckedLog2 is -15 and writes Q0.15 regardless

    for name, shape, scale, beta in (("rows", (3, 11), 0.0002, 1.0), ("wide-beta", (2, 4, 50), 0.0004, 0.7),
                                     ("coarse", (5, 7), 0.002, 1.0), ("fine", (1, 2, 3, 9), 0.00001, 1.0)):
        add("SOFTMAX", f"int16-{name}", single_op("SOFTMAX", [shape], [shape], "int16", "SoftmaxOptions", [("f", beta)],
                                                  q_in=dict(scale=scale, zero_point=0),
                                                  q_out=dict(scale=2.0 ** -15, zero_point=0), version=3), shape)

    for (name, x, size), (align, half) in itertools.product(
            [("up", (1, 3, 5, 2), (6, 9)), ("down", (2, 7, 9, 3), (3, 4)), ("odd", (1, 4, 4, 1), (7, 5))],
            [(0, 0), (1, 0), (0, 1)]):
        mode = "align" if align else "half" if half else "asym"
        add("RESIZE_BILINEAR", f"int16-{name}-{mode}", single_op("RESIZE_BILINEAR", [x], [(x[0], *size, x[3])], "int16",
                                                                 "ResizeBilinearOptions", [None, None, ("b", align), ("b", half)],
                                                                 consts=[np.array(size, np.int32)], q_in=Q16_IN, q_out=Q16_IN,
                                                                 version=4), x)

    # int16 PRELU: LiteRT 2.3's reference answers the negative side with values no prepared multiplier gives
    alpha = (np.array([1000, -2000, 3000], np.int16), "int16", dict(scale=0.0001, zero_point=0))
    add("PRELU", "int16", single_op("PRELU", [(2, 5, 3)], [(2, 5, 3)], "int16", consts=[alpha], q_in=Q16_IN,
                                    q_out=dict(scale=0.0003, zero_point=0)), (2, 5, 3), refused=True)

    w, b = filt((1, 3, 3, 6), 3)
    add("DEPTHWISE_CONV_2D", "int16-valid-s1-d2-relu6",
        single_op("DEPTHWISE_CONV_2D", [(2, 11, 9, 6)], [(2, 7, 5, 6)], "int16", "DepthwiseConv2DOptions",
                  [("b", 1), ("i", 1), ("i", 1), ("i", 1), ("b", ACTS["relu6"]), ("i", 2), ("i", 2)], consts=[w, b],
                  q_in=Q16_IN, q_out=Q16_OUT, version=5), (2, 11, 9, 6))

    w, b = filt((5, 12), 0, per_channel=False)
    b[0][:2] = (1 << 46) - (1 << 30), -(1 << 46) + (1 << 30)   # scaled past int32: LiteRT's cast gives INT32_MIN
    add("FULLY_CONNECTED", "int16-bias-past-int32",
        single_op("FULLY_CONNECTED", [(6, 12)], [(6, 5)], "int16", "FullyConnectedOptions", [("b", 0)], consts=[w, b],
                  q_in=Q16_IN, q_out=Q16_OUT, version=7), (6, 12))

    w, b = filt((4, 1, 1, 3), 0)
    b[0][:2] = (1 << 46) - (1 << 30), -(1 << 46) + (1 << 30)   # rescaled past int32: LiteRT's cast wraps
    add("CONV_2D", "int16-bias-past-int32",
        single_op("CONV_2D", [(1, 3, 4, 3)], [(1, 3, 4, 4)], "int16", "Conv2DOptions", [("b", 1), ("i", 1), ("i", 1), ("b", 0)],
                  consts=[w, b], q_in=Q16_IN, q_out=Q16_OUT, version=4), (1, 3, 4, 3))

    # int32 biases: LiteRT 2.3's reference kernels read a 16x8 bias as int64 whatever its type; volvox refuses
    w, b = filt((6, 3, 3, 5), 0, bias_dtype="int32")
    add("CONV_2D", "int16-int32-bias", single_op("CONV_2D", [(1, 7, 6, 5)], [(1, 5, 4, 6)], "int16", "Conv2DOptions",
                                                 [("b", 1), ("i", 1), ("i", 1), ("b", 0)], consts=[w, b], q_in=Q16_IN,
                                                 q_out=Q16_OUT, version=4), (1, 7, 6, 5), refused=True)
    w, b = filt((4, 10), 0, per_channel=False, bias_dtype="int32")
    add("FULLY_CONNECTED", "int16-int32-bias", single_op("FULLY_CONNECTED", [(3, 10)], [(3, 4)], "int16",
                                                         "FullyConnectedOptions", [("b", 0)], consts=[w, b], q_in=Q16_IN,
                                                         q_out=Q16_OUT, version=7), (3, 10), refused=True)
    return cases


CASES = conformance_cases()


def litert_outputs(model: bytes, feeds: list[np.ndarray]) -> list[np.ndarray]:
    """The outputs of LiteRT's reference kernels on ``feeds``, in the model's order. (Its optimized
    builtin kernels round some int8 fully connected and conv outputs differently, and run int8 means
    over H and W through float multipliers.)"""
    it = litert.Interpreter(model_content=model, experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    for detail, x in zip(it.get_input_details(), feeds):
        it.set_tensor(detail["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


def volvox_outputs(path, feeds: list[np.ndarray], reference: bool) -> list[np.ndarray]:
    """volvox's outputs on ``feeds`` (numpy references, or the production path)."""
    graph, weights, meta = read_tflite(path)
    out = Model(graph, weights, meta, str(path), reference=reference).run(
        {spec.name: x for spec, x in zip(graph.inputs, feeds)})
    return [out[name] for name in graph.outputs]


def compare(ours: np.ndarray, want: np.ndarray, what: str) -> None:
    """Bit-exact for integers, within 1e-5 (relative to the output's magnitude) for float32."""
    assert ours.shape == want.shape and ours.dtype == want.dtype, f"{what}: {ours.dtype}{ours.shape} vs {want.dtype}{want.shape}"
    if want.dtype.kind in "iub":
        np.testing.assert_array_equal(ours, want, err_msg=what)
    else:
        np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(want).max())), err_msg=what)


def litert_tensors(model: bytes, feed: np.ndarray) -> dict[str, np.ndarray]:
    """Every tensor of ``model`` (by name) after LiteRT's reference kernels run it on ``feed``."""
    it = litert.Interpreter(model_content=model, experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF,
                            experimental_preserve_all_tensors=True)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], feed)
    it.invoke()
    return {d["name"]: it.get_tensor(d["index"]) for d in it.get_tensor_details()}


def compare_every_tensor(graph, weights, meta, path, feed, want: dict, what: str) -> None:
    """volvox's value of each of ``graph.outputs`` on ``feed`` equals ``want``'s, through the numpy
    references and the production path."""
    for reference in (True, False):
        ours = Model(graph, weights, meta, str(path), reference=reference).run({graph.inputs[0].name: feed})
        for name in graph.outputs:
            compare(ours[name], want[name], f"{what} {name} ({'reference' if reference else 'production'})")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_single_op_equals_litert(case, tmp_path):
    path = tmp_path / f"{case.name}.tflite"
    path.write_bytes(case.model)
    want = litert_outputs(case.model, case.feeds)
    if case.refused:
        with pytest.raises(UnsupportedError, match=rf"operator 0 \({case.op} v\d+\)"):
            read_tflite(path)
        return
    for reference in (True, False):
        for k, (ours, expected) in enumerate(zip(volvox_outputs(path, case.feeds, reference), want)):
            compare(ours, expected, f"{case.name} output {k} ({'reference' if reference else 'production'})")


def _refused(tmp_path, model: bytes, match: str) -> None:
    path = tmp_path / "refused.tflite"
    path.write_bytes(model)
    with pytest.raises(UnsupportedError, match=match):
        read_tflite(path)


def test_unknown_version_is_refused_naming_op_version_and_index(tmp_path):
    m = writer.ModelBuilder()
    x = m.input((2, 3))
    y = m.tensor((2, 3))
    z = m.output((2, 3))
    m.op("RELU", [x], [y])
    m.op("ADD", [x, y], [z], "AddOptions", [("b", 0)], version=9)
    _refused(tmp_path, m.build(), r"operator 1 \(ADD v9\): version 9 of ADD is not supported")


def test_unsupported_fused_activation_and_types_are_refused(tmp_path):
    tanh = single_op("ADD", [(2, 3), (2, 3)], [(2, 3)], options="AddOptions", fields=[("b", 4)])
    _refused(tmp_path, tanh, r"operator 0 \(ADD v1\): fused activation 4")
    uint16 = single_op("ADD", [(2, 3), (2, 3)], [(2, 3)], "uint16", "AddOptions", [("b", 0)], version=3,
                       q_in=dict(scale=0.1, zero_point=0), q_out=dict(scale=0.1, zero_point=0))
    _refused(tmp_path, uint16, "type uint16")
    div = single_op("DIV", [(2, 3), (2, 3)], [(2, 3)], "int8", "DivOptions", [("b", 0)], version=2)
    _refused(tmp_path, div, r"operator 0 \(DIV v2\): int8 DIV is not supported")
    relu_n1 = single_op("RELU_N1_TO_1", [(2, 3)], [(2, 3)], "int16", q_in=Q16_IN, q_out=Q16_IN)
    _refused(tmp_path, relu_n1, r"operator 0 \(RELU_N1_TO_1 v1\): int16 RELU_N1_TO_1 is not supported")
    concat_relu = single_op("CONCATENATION", [(2, 3), (2, 3)], [(2, 6)], options="ConcatenationOptions",
                            fields=[("i", 1), ("b", 1)])
    _refused(tmp_path, concat_relu, r"operator 0 \(CONCATENATION v1\): fused relu")


def test_int16_sigmoid_table_scales_litert_rejects_or_would_overflow_are_refused(tmp_path):
    """int16 LOGISTIC / TANH: an output scale other than 2**-15 (LiteRT's Prepare fails), a nonzero zero point,
    and an input scale whose table multiplier times an int16 passes int32 (LiteRT would overflow) are refused."""
    q15 = dict(scale=2.0 ** -15, zero_point=0)
    for op, q_in, q_out, match in (
            ("LOGISTIC", Q16_IN, dict(scale=2.0 ** -14, zero_point=0), "needs output scale 2\\*\\*-15"),
            ("TANH", Q16_IN, dict(scale=2.0 ** -15 * 1.01, zero_point=0), "needs output scale 2\\*\\*-15"),
            ("TANH", dict(scale=0.0002, zero_point=3), q15, "needs zero points 0"),
            ("LOGISTIC", dict(scale=6.0, zero_point=0), q15, "input scale 6.0 is too large: its table multiplier 73728")):
        model = single_op(op, [(2, 3)], [(2, 3)], "int16", q_in=q_in, q_out=q_out, version=3)
        _refused(tmp_path, model, rf"operator 0 \({op} v3\): int16 {op} {match}")


def test_int8_residual_block_equals_litert(tmp_path):
    """A small int8 network (conv -> conv + skip ADD with ReLU -> MAX_POOL -> MEAN -> FULLY_CONNECTED ->
    SOFTMAX): volvox's step plan (native qconv / qbinary / qmax_pool steps between the islands) equals
    LiteRT's reference kernels in every output bit."""
    rng = np.random.default_rng(5)
    m = writer.ModelBuilder()
    q = dict(scale=0.06, zero_point=-4)

    def conv(x, cin, cout, act):
        ws = rng.uniform(0.005, 0.02, cout).astype(np.float32)
        w = m.tensor((cout, 3, 3, cin), "int8", data=rng.integers(-127, 128, (cout, 3, 3, cin)), scale=list(ws),
                     zero_point=[0] * cout)
        b = m.tensor((cout,), "int32", data=rng.integers(-500, 500, cout), scale=list(np.float32(0.06) * ws),
                     zero_point=[0] * cout)
        y = m.tensor((1, 9, 11, cout), "int8", **q)
        m.op("CONV_2D", [x, w, b], [y], "Conv2DOptions", [("b", 0), ("i", 1), ("i", 1), ("b", ACTS[act])], version=3)
        return y

    x = m.input((1, 9, 11, 8), "int8", **q)
    h = conv(x, 8, 8, "relu")
    h = conv(h, 8, 8, "none")
    res = m.tensor((1, 9, 11, 8), "int8", scale=0.08, zero_point=-20)
    m.op("ADD", [x, h], [res], "AddOptions", [("b", ACTS["relu"])], version=2)
    pooled = m.tensor((1, 5, 6, 8), "int8", scale=0.08, zero_point=-20)
    m.op("MAX_POOL_2D", [res], [pooled], "Pool2DOptions", [("b", 0), ("i", 2), ("i", 2), ("i", 2), ("i", 2), ("b", 0)],
         version=2)
    mean = m.tensor((1, 8), "int8", scale=0.05, zero_point=-30)
    m.op("MEAN", [pooled, m.tensor((2,), "int32", data=np.array([1, 2], np.int32))], [mean], "ReducerOptions", [("b", 0)],
         version=2)
    logits = m.tensor((1, 5), "int8", scale=0.1, zero_point=3)
    ws = np.float32(0.01)
    m.op("FULLY_CONNECTED", [mean, m.tensor((5, 8), "int8", data=rng.integers(-127, 128, (5, 8)), scale=ws, zero_point=0),
                             m.tensor((5,), "int32", data=rng.integers(-900, 900, 5), scale=np.float32(0.05) * ws,
                                      zero_point=0)],
         [logits], "FullyConnectedOptions", [("b", 0)], version=5)
    probs = m.output((1, 5), "int8", scale=1 / 256, zero_point=-128)
    m.op("SOFTMAX", [logits], [probs], "SoftmaxOptions", [("f", 1.0)], version=2)
    model = m.build()
    path = tmp_path / "residual.tflite"
    path.write_bytes(model)
    graph, weights, meta = read_tflite(path)
    graph.outputs = [o for n in graph.nodes for o in n.outputs.values() if o.startswith("t")]  # the file's tensors
    assert len(graph.outputs) == 7
    for _ in range(3):
        feed = rng.integers(-128, 128, (1, 9, 11, 8)).astype(np.int8)
        want = litert_tensors(model, feed)
        compare_every_tensor(graph, weights, meta, path, feed, want, "residual block tensor")


def test_int16x8_conv_net_equals_litert(tmp_path):
    """A small 16x8 network (CONV_2D relu -> DEPTHWISE_CONV_2D relu6 -> TRANSPOSE_CONV -> RESHAPE ->
    FULLY_CONNECTED, int16 activations, int8 per-channel filters, int64 biases): every tensor volvox computes
    equals LiteRT's reference kernels bit for bit, through the numpy references and the production path."""
    rng = np.random.default_rng(16)
    m = writer.ModelBuilder()
    qs = [dict(scale=s, zero_point=0) for s in (0.0003, 0.002, 0.004, 0.01, 0.05)]

    def filt(shape, axis, in_scale):
        n = shape[axis]
        ws = rng.uniform(0.005, 0.03, n).astype(np.float32)
        w = m.tensor(shape, "int8", data=rng.integers(-127, 128, shape), scale=list(ws), zero_point=[0] * n, axis=axis)
        b = m.tensor((n,), "int64", data=rng.integers(-200_000, 200_000, n), scale=list(np.float32(in_scale) * ws),
                     zero_point=[0] * n)
        return w, b

    x = m.input((1, 9, 11, 4), "int16", **qs[0])
    h1 = m.tensor((1, 9, 11, 8), "int16", **qs[1])
    m.op("CONV_2D", [x, *filt((8, 3, 3, 4), 0, qs[0]["scale"])], [h1], "Conv2DOptions",
         [("b", 0), ("i", 1), ("i", 1), ("b", ACTS["relu"])], version=4)
    h2 = m.tensor((1, 5, 6, 8), "int16", **qs[2])
    m.op("DEPTHWISE_CONV_2D", [h1, *filt((1, 3, 3, 8), 3, qs[1]["scale"])], [h2], "DepthwiseConv2DOptions",
         [("b", 0), ("i", 2), ("i", 2), ("i", 1), ("b", ACTS["relu6"])], version=5)
    h3 = m.tensor((1, 10, 12, 3), "int16", **qs[3])
    w, b = filt((3, 3, 3, 8), 0, qs[2]["scale"])
    m.op("TRANSPOSE_CONV", [m.tensor((4,), "int32", data=np.array([1, 10, 12, 3], np.int32)), w, h2, b], [h3],
         "TransposeConvOptions", [("b", 0), ("i", 2), ("i", 2), ("b", 0)], version=3)
    flat = m.tensor((1, 360), "int16", **qs[3])
    m.op("RESHAPE", [h3, m.tensor((2,), "int32", data=np.array([1, 360], np.int32))], [flat])
    y = m.output((1, 5), "int16", **qs[4])
    m.op("FULLY_CONNECTED", [flat, *filt((5, 360), 0, qs[3]["scale"])], [y], "FullyConnectedOptions", [("b", 0)],
         version=7)
    model = m.build()
    path = tmp_path / "net16.tflite"
    path.write_bytes(model)
    graph, weights, meta = read_tflite(path)
    graph.outputs = [o for n in graph.nodes for o in n.outputs.values() if o[1:].isdigit()]  # the file's tensors
    assert len(graph.outputs) == 5
    for _ in range(3):
        feed = rng.integers(-32768, 32768, (1, 9, 11, 4)).astype(np.int16)
        want = litert_tensors(model, feed)
        assert want[graph.outputs[-1]].std() > 100   # a live signal at the end, not a saturated one
        compare_every_tensor(graph, weights, meta, path, feed, want, "16x8 net tensor")


def test_int16x8_residual_block_equals_litert(tmp_path):
    """A 16x8 residual block from float in to float out (QUANTIZE -> CONV_2D relu -> CONV_2D -> skip ADD relu ->
    MAX_POOL_2D -> MEAN -> FULLY_CONNECTED -> SOFTMAX -> DEQUANTIZE): every tensor equals LiteRT's reference
    kernels (int16 bit for bit, the float output within 1e-5), through the references and the production path."""
    rng = np.random.default_rng(17)
    m = writer.ModelBuilder()
    q = [dict(scale=s, zero_point=0) for s in (0.0002, 0.0015, 0.004, 0.004, 0.0036, 0.003)]

    def conv(x, cin, cout, act, qi, qo):
        ws = rng.uniform(0.005, 0.02, cout).astype(np.float32)
        w = m.tensor((cout, 3, 3, cin), "int8", data=rng.integers(-127, 128, (cout, 3, 3, cin)), scale=list(ws),
                     zero_point=[0] * cout)
        b = m.tensor((cout,), "int64", data=rng.integers(-50_000, 50_000, cout), scale=list(np.float32(qi["scale"]) * ws),
                     zero_point=[0] * cout)
        y = m.tensor((1, 9, 11, cout), "int16", **qo)
        m.op("CONV_2D", [x, w, b], [y], "Conv2DOptions", [("b", 0), ("i", 1), ("i", 1), ("b", ACTS[act])], version=4)
        return y

    x = m.input((1, 9, 11, 6))
    xq = m.tensor((1, 9, 11, 6), "int16", **q[0])
    m.op("QUANTIZE", [x], [xq], version=4)
    h = conv(xq, 6, 6, "relu", q[0], q[1])
    h2 = conv(h, 6, 6, "none", q[1], q[2])
    res = m.tensor((1, 9, 11, 6), "int16", **q[3])
    m.op("ADD", [h, h2], [res], "AddOptions", [("b", ACTS["relu"]), ("b", 0)], version=3)
    pooled = m.tensor((1, 5, 6, 6), "int16", **q[3])
    m.op("MAX_POOL_2D", [res], [pooled], "Pool2DOptions", [("b", 0), ("i", 2), ("i", 2), ("i", 2), ("i", 2), ("b", 0)],
         version=3)
    mean = m.tensor((1, 6), "int16", **q[4])
    m.op("MEAN", [pooled, m.tensor((2,), "int32", data=np.array([1, 2], np.int32))], [mean], "ReducerOptions", [("b", 0)],
         version=3)
    logits = m.tensor((1, 5), "int16", **q[5])
    ws = np.float32(0.001)
    m.op("FULLY_CONNECTED", [mean, m.tensor((5, 6), "int8", data=rng.integers(-127, 128, (5, 6)), scale=ws, zero_point=0),
                             m.tensor((5,), "int64", data=rng.integers(-900, 900, 5), scale=np.float32(q[4]["scale"]) * ws,
                                      zero_point=0)],
         [logits], "FullyConnectedOptions", [("b", 0)], version=7)
    probs = m.tensor((1, 5), "int16", scale=2.0 ** -15, zero_point=0)
    m.op("SOFTMAX", [logits], [probs], "SoftmaxOptions", [("f", 1.0)], version=3)
    m.op("DEQUANTIZE", [probs], [m.output((1, 5))], version=4)
    model = m.build()
    path = tmp_path / "residual16.tflite"
    path.write_bytes(model)
    graph, weights, meta = read_tflite(path)
    graph.outputs = [o for n in graph.nodes for o in n.outputs.values() if o[1:].isdigit()]  # the file's tensors
    assert len(graph.outputs) == 9   # every operator's output
    for _ in range(3):
        feed = (rng.standard_normal((1, 9, 11, 6)) * 2).astype(np.float32)
        want = litert_tensors(model, feed)
        assert np.sort(want[graph.outputs[-2]].ravel())[-2] > 1000   # a second class above 3%: not one-hot
        compare_every_tensor(graph, weights, meta, path, feed, want, "16x8 residual tensor")
