"""Step plans of image models (runtime/plan.py): a whole image model run natively in one call gives the
per-op executor's outputs bit for bit, for the real models and for small graphs that use every
vision step kind, at 1 and 2 threads; graphs it does not lower keep the per-op executor. Also
the C fast paths of the small int8 ops against their numpy references (TFLite's arithmetic)."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import volvox
from volvox import cpu
from volvox.errors import ShapeError
from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.tasks.image import preprocess
from volvox.model import Model
from volvox.ops import get_op
from volvox.ops.codes import FN
from volvox.ops.int8 import quantize_multiplier
from volvox.ops.context import RunContext
from volvox.runtime.plan import PLANS_PER_GRAPH

from vision_helpers import model_file, text_line
from volvox.ops import validate

rng = np.random.default_rng(7)




def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def plan_and_per_op(model: Model, feeds: dict) -> tuple[dict, dict]:
    """(outputs through Model.run, outputs of the per-op executor) for the same feeds; the plan
    runs on every thread of cpu.get_num_threads(), however small its work."""
    model.run(feeds)  # lowers the graph on the first call
    if model._plan.plan is not None:
        plan = model._plan.plan
        plan.useful_threads = cpu.get_num_threads()
        plan.pacer.solo_runs, plan.pacer.pace = 0, lambda threads, seconds: None  # no stall back-off either
    return model.run(feeds), model.executor.run(RunContext(), feeds)


# ------------------------------------------------------------------------- small int8 fast paths
def fast_and_ref(op: str, params: dict, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    o = get_op(op)
    return o.fast(None, params, x), o.ref(None, params, x)


@pytest.mark.parametrize("scale,zp", [(1.0, -128), (0.37, 3), (0.5, 0), (0.02, 127)])
def test_quantize_fast_is_the_reference(scale, zp):
    x = (rng.standard_normal((3, 50, 7)) * 100).astype(np.float32)
    x.flat[:20] = [np.nan, np.inf, -np.inf, 0.5, -0.5, 1.5, 2.5, -2.5, 1e20, -1e20, 3e9, 127.5,
                   np.nextafter(np.float32(0.5), 0), -np.nextafter(np.float32(0.5), 0),  # |v| + 0.5 rounds up in f32
                   2**24 + 2, 2**31 - 128, 2**31, -2**31, 9.3e18, -9.3e18]
    x.flat[20:26] = [v * scale for v in (0.49999997, -0.49999997, 2**31 - 128, -2**31 + 128, 2.0**31, 1e19)]
    with np.errstate(invalid="ignore"):
        fast, ref = fast_and_ref("quantize", dict(scale=scale, zero_point=zp), x)
    assert same_bits(fast, ref)


@pytest.mark.parametrize("scale", [1.0, 2.0**-7, 0.37, 1 / 255])
@pytest.mark.parametrize("signed", [False, True])
def test_quantize_fixed_point_vectors_are_the_reference(scale, signed):
    """Whole vectors of |x / scale| < 256 (the kernel's fixed-point path; a power-of-two scale
    multiplies by its reciprocal): halves, their float neighbours and values up to the edges."""
    k = np.arange(-255 if signed else 0, 256, dtype=np.float32)
    halves = k + np.float32(0.5)
    v = np.concatenate([k, halves, np.nextafter(halves, -np.inf), np.nextafter(halves, np.inf),
                        [np.float32(255.99998)], rng.uniform(-255.9 if signed else 0, 255.9, 4000).astype(np.float32)])
    v = v[np.abs(v) < 256]
    x = (v * np.float32(scale)).astype(np.float32)
    x = np.concatenate([x, np.zeros(-x.size % 16, np.float32)])  # whole 16-lane vectors only
    for zp in (-128, 0, 127):
        fast, ref = fast_and_ref("quantize", dict(scale=scale, zero_point=zp), x)
        assert same_bits(fast, ref), (zp, np.flatnonzero(fast != ref)[:5])


def test_dequantize_fast_is_the_reference():
    q = rng.integers(-128, 128, (2, 9, 5, 3), dtype=np.int8)
    assert same_bits(*fast_and_ref("dequantize", dict(scale=0.0371, zero_point=-5), q))


@pytest.mark.parametrize("params", [
    dict(kernel=[3, 3], strides=[3, 3], pads=[0, 0, 0, 0]),
    dict(kernel=[3, 2], strides=[1, 2], pads=[1, 1, 1, 0], act_min=-100, act_max=90),
    dict(kernel=[2, 2], strides=[2, 2]),
])
def test_qavg_pool_fast_is_the_reference(params):
    q = rng.integers(-128, 128, (2, 7, 9, 11), dtype=np.int8)
    assert same_bits(*fast_and_ref("qavg_pool2d", params, q))


@pytest.mark.parametrize("shape,kernel", [((1, 9, 9, 130), 7), ((1, 16, 16, 67), 16), ((1, 256, 256, 2), 256)])
def test_qavg_pool_large_windows_are_the_reference(shape, kernel):
    """Sums of 49 and 256 taps over channel runs past one pass of 64 (float32 division of
    the sums), the extremes, and 65536 taps (past that: int64 division)."""
    q = rng.integers(-128, 128, shape, dtype=np.int8)
    q[0, :, :, 0], q[0, :, :, 1] = -128, 127
    params = dict(kernel=[kernel, kernel], strides=[1, 1])
    assert same_bits(*fast_and_ref("qavg_pool2d", params, q))


@pytest.mark.parametrize("shape", [(1, 2), (4, 37), (2, 3, 1000)])
def test_qsoftmax_fast_is_the_reference(shape):
    p = dict(beta=1.0, input_scale=0.0678, output_scale=1 / 256, output_zero_point=-128)
    assert same_bits(*fast_and_ref("qsoftmax", p, rng.integers(-128, 128, shape, dtype=np.int8)))


def test_small_kernels_refuse_bad_arguments():
    with pytest.raises(ShapeError, match="qavg_pool2d"):
        cpu.qavg_pool2d(np.zeros((1, 2, 2, 3), np.int8), (3, 3), (1, 1), (0, 0, 0, 0))
    with pytest.raises(ShapeError, match="table"):
        cpu.qsoftmax(np.zeros((2, 3), np.int8), np.zeros(10, np.float32), 1 / 256, -128)


@pytest.mark.parametrize("xs,cout", [((2, 5, 6, 5), 7), ((1, 6, 4, 12), 40)])
def test_qconv_1x1_rows_are_the_reference(tier, xs, cout):
    """im2col_u8's 1x1 shortcut (rows padded to 4 bytes when C is not), and 16-or-fewer-channel tiles."""
    x, w = rng.integers(-128, 128, xs, dtype=np.int8), rng.integers(-127, 128, (cout, 1, 1, xs[3]), dtype=np.int8)
    b = rng.integers(-500, 500, cout, dtype=np.int32)
    pairs = [quantize_multiplier(r) for r in rng.uniform(1e-3, 1e-2, cout)]
    m, sh = np.array([p[0] for p in pairs], np.int32), np.array([p[1] for p in pairs], np.int32)
    p = dict(input_zero_point=3, output_zero_point=-4)
    y = cpu.qconv2d(x, w, b, m, sh, 3, -4)
    assert same_bits(y, get_op("qconv2d").ref(None, p, x, w, b, m, sh))


# ------------------------------------------------------------------------- synthetic graphs
class GraphMaker:
    """Nodes, weights and specs of a small test graph, one node at a time."""

    def __init__(self, **inputs):
        self.inputs = [TensorSpec(n, s, d) for n, (s, d) in inputs.items()]
        self.nodes: list[Node] = []
        self.weights: dict[str, np.ndarray] = {}

    def w(self, name: str, a: np.ndarray) -> str:
        a.setflags(write=False)  # as a model's weights are (the kernels cache their packings)
        self.weights[name] = a
        return name

    def node(self, op: str, params=None, **inputs) -> str:
        out = f"t{len(self.nodes)}"
        self.nodes.append(Node(f"n{len(self.nodes)}_{op}", op, inputs, {"y": out}, params or {}))
        return out

    def model(self, outputs: list[str], optimize: bool = False) -> Model:
        specs = {n: TensorSpec(n, a.shape, a.dtype.name) for n, a in self.weights.items()}
        g = Graph(self.inputs, specs, self.nodes, outputs)
        validate(g)
        return Model(g, dict(self.weights), {}, "synthetic", optimize=optimize)


def requant(m: GraphMaker, name: str, n: int, lo: float, hi: float) -> dict:
    pairs = [quantize_multiplier(r) for r in rng.uniform(lo, hi, n)]
    return dict(multiplier=m.w(f"{name}_m", np.array([p[0] for p in pairs], np.int32)),
                shift=m.w(f"{name}_s", np.array([p[1] for p in pairs], np.int32)))


def float_graph() -> Model:
    """Every float32 step kind: im2col / 1x1 / depthwise convs with bias and activations, channel
    pad, relu, max pool, add / mul / add_n, concat (+ ReLU), global average pool, reshape,
    linear (+ ReLU)."""
    m = GraphMaker(x=((1, 21, 19, 5), "float32"))
    f = lambda *s: (rng.standard_normal(s) * 0.5).astype(np.float32)  # noqa: E731
    a = m.node("conv2d", dict(strides=[2, 2], pads=[1, 1, 0, 1], activation="relu6"), x="x",
               weight=m.w("c1", f(20, 3, 3, 5)), bias=m.w("b1", f(20)))                       # (1, 11, 10, 20)
    b = m.node("conv2d", dict(groups=20, pads=[1, 1, 1, 1], activation="relu"), x=a,
               weight=m.w("dw", f(20, 3, 3, 1)), bias=m.w("bdw", f(20)))                        # depthwise
    c = m.node("conv2d", {}, x=b, weight=m.w("pw", f(36, 1, 1, 20)))                            # 1x1 direct
    d = m.node("pad", dict(pads=[[0, 0], [0, 0], [0, 0], [0, 4]]), x=c)                         # (1, 11, 10, 40)
    e = m.node("relu", x=d)
    p = m.node("max_pool2d", dict(kernel=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), x=e)     # (1, 6, 5, 40)
    q = m.node("conv2d", dict(groups=40, pads=[0, 1, 2, 1], strides=[1, 1]), x=p, weight=m.w("dw2", f(40, 3, 3, 1)))
    s = m.node("add", a=p, b=q)
    t = m.node("mul", a=s, b=p)
    u = m.node("add_n", x0=t, x1=s, x2=q)
    v = m.node("concat_act", dict(axis=3, activation="relu"), x0=u, x1=p)                     # (1, 6, 5, 80)
    cat = m.node("concat", dict(axis=1), x0=v, x1=v)                                           # (1, 12, 5, 80)
    g = m.node("global_avg_pool", x=cat)                                                        # (1, 1, 1, 80)
    r = m.node("reshape", dict(shape=[1, 80]), x=g)
    h = m.node("linear_act", dict(activation="relu"), x=r, weight=m.w("l1", f(24, 80)), bias=m.w("lb1", f(24)))
    out = m.node("linear", x=h, weight=m.w("l2", f(7, 24)), bias=m.w("lb2", f(7)))
    return m.model([out, cat])


@pytest.mark.parametrize("n", [1, 7, 16, 37, 4099])
def test_hard_swish_is_numpy_on_every_tier(tier, n):
    """The tier's hard_swish (the unary step, and what conv steps fold) against numpy's float32
    (x * clip(x + 3, 0, 6)) / 6, bit for bit: both clip ends, signed zeros, infinities, NaN, a partial vector."""
    x = (rng.standard_normal(n) * 4).astype(np.float32)
    x[:8] = [-3.0, 3.0, -0.0, 0.0, np.inf, -np.inf, np.nan, -2.9999998][:n]
    want = (x * np.clip(x + np.float32(3), np.float32(0), np.float32(6))) / np.float32(6)
    assert same_bits(cpu.unary(x, FN["hard_swish"]), want)


POOL_CASES = [  # (x shape, params): odd sizes, tails of every tier's vectors, padded windows, kernels past the stride
    ((1, 7, 7, 3), dict(kernel=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((2, 9, 11, 17), dict(kernel=[3, 2], strides=[2, 3], pads=[1, 0, 2, 1])),       # bottom pad 2: windows half padding
    ((1, 6, 5, 69), dict(kernel=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1])),        # ceil_mode's extra pads
    ((1, 5, 8, 64), dict(kernel=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2])),
    ((1, 4, 4, 1), dict(kernel=[4, 4], strides=[1, 1], pads=[3, 3, 0, 0])),         # windows of 1 in-image tap
]


@pytest.mark.parametrize("op", ["max_pool2d", "avg_pool2d", "avg_pool2d_incl"])
@pytest.mark.parametrize("shape,params", POOL_CASES)
def test_pool_steps_are_numpy_on_every_tier(tier, op, shape, params):
    """The tier's max / avg pool kernels (the plan's steps) against numpy's fast paths (the per-op
    executor) bit for bit, and the float64 reference; with NaN, infinities and signed zeros."""
    x = rng.standard_normal(shape).astype(np.float32)
    x.flat[::7] = x.flat[3::7]  # ties
    params = dict(params, count_include_pad=True) if op == "avg_pool2d_incl" else params
    op = op.replace("_incl", "")
    specials = [np.nan, -np.inf, np.inf] if op == "max_pool2d" else [np.inf]  # avg_pool2d_ref takes NaN for padding
    x.flat[:6] = (specials + [-0.0, 0.0, -0.0])[:x.size]
    m = GraphMaker(x=(shape, "float32"))
    model = m.model([m.node(op, params, x="x")])
    (planned,), (per_op,) = (list(r.values()) for r in plan_and_per_op(model, {"x": x}))
    assert model._plan.plan is not None
    assert same_bits(planned, per_op)
    ref = get_op(op).ref(None, params, x)
    np.testing.assert_allclose(planned, ref, rtol=1e-6, atol=1e-6)  # NaN and infinities where ref has them


def reference_model(model: Model) -> Model:
    """``model``'s compiled graph and weights run by the numpy references (no plan)."""
    weights = {n: w for (_, w), n in zip(model.executor.weight_slots, model.graph.weights)}
    return Model(model.graph, weights, {}, "synthetic", reference=True, optimize=False)


def int8_graph() -> Model:
    """Every int8 step kind: quantize, dense / depthwise / 1x1 qconv with requantization and a
    clamp, average pool, reshape, qlinear, qsoftmax, dequantize."""
    m = GraphMaker(x=((1, 17, 15, 3), "float32"))
    i8 = lambda *s: rng.integers(-127, 128, s, dtype=np.int8)  # noqa: E731
    i32 = lambda n: rng.integers(-2000, 2000, n, dtype=np.int32)  # noqa: E731
    q = m.node("quantize", dict(scale=0.02, zero_point=-3), x="x")
    a = m.node("qconv2d", dict(pads=[1, 1, 1, 1], input_zero_point=-3, output_zero_point=5), x=q,
               weight=m.w("c1", i8(16, 3, 3, 3)), bias=m.w("b1", i32(16)), **requant(m, "r1", 16, 1e-3, 5e-3))
    b = m.node("qconv2d", dict(groups=16, strides=[2, 2], pads=[1, 1, 1, 1], input_zero_point=5,
                               output_zero_point=-2, act_min=-2, act_max=127), x=a,
               weight=m.w("dw", i8(16, 3, 3, 1)), bias=m.w("bdw", i32(16)), **requant(m, "r2", 16, 5e-3, 2e-2))
    c = m.node("qconv2d", dict(input_zero_point=-2, output_zero_point=1), x=b,
               weight=m.w("pw", i8(24, 1, 1, 16)), **requant(m, "r3", 24, 1e-3, 4e-3))        # (1, 9, 8, 24)
    p = m.node("qavg_pool2d", dict(kernel=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], act_min=-100), x=c)  # (1, 5, 4, 24)
    r = m.node("reshape", dict(shape=[20, 24]), x=p)
    lin = m.node("qlinear", dict(input_zero_point=1, output_zero_point=0), x=r, weight=m.w("fc", i8(10, 24)),
                 bias=m.w("fcb", i32(10)), **requant(m, "r4", 1, 2e-3, 3e-3))
    s = m.node("qsoftmax", dict(beta=1.0, input_scale=0.07, output_scale=1 / 256, output_zero_point=-128), x=lin)
    out = m.node("dequantize", dict(scale=1 / 256, zero_point=-128), x=s)
    return m.model([out, p])


def sequence_graph(width) -> Model:
    """The step kinds of a text recogniser with a symbolic width: transpose, hard_swish, average
    pools (padded, count_include_pad), a squeeze-excite (global pool, hard_sigmoid, per-channel
    mul), slice, linear over many and few rows, a layer norm (reduce_mean, sub, pow 2, add, sqrt,
    div: per-row and per-channel broadcasts), attention-like matmul / softmax, sigmoid."""
    m = GraphMaker(x=((1, 6, 4, "W"), "float32"))
    f = lambda *s: (rng.standard_normal(s) * 0.5).astype(np.float32)  # noqa: E731
    a = m.node("transpose", dict(perm=[0, 2, 3, 1]), x="x")                                    # (1, 4, W, 6)
    a = m.node("conv2d", dict(pads=[1, 1, 1, 1]), x=a, weight=m.w("c1", f(16, 3, 3, 6)), bias=m.w("b1", f(16)))
    a = m.node("hard_swish", x=a)
    p = m.node("avg_pool2d", dict(kernel=[3, 3], strides=[1, 2], pads=[1, 1, 1, 1]), x=a)      # (1, 4, W/2, 16)
    q = m.node("avg_pool2d", dict(kernel=[2, 2], strides=[2, 1], pads=[0, 1, 0, 0], count_include_pad=True), x=p)
    g = m.node("global_avg_pool", x=q)
    h = m.node("hard_sigmoid", dict(alpha=0.1666667, beta=0.5), x=g)
    se = m.node("mul", a=h, b=q)                                                                # broadcast first
    sl = m.node("slice", dict(axes=[1], starts=[1], ends=[2], steps=[1]), x=se)                # (1, 1, T, 16)
    r = m.node("reshape", dict(shape=[1, -1, 16]), x=sl)                                        # (1, T, 16)
    mu = m.node("reduce_mean", dict(axes=[-1]), x=r)
    d = m.node("sub", a=r, b=mu)
    var = m.node("reduce_mean", dict(axes=[-1]), x=m.node("pow", a=d, b=m.w("two", np.array([2.0], np.float32))))
    sd = m.node("sqrt", x=m.node("add", a=var, b=m.w("eps", np.array([1e-5], np.float32))))
    n = m.node("add", a=m.node("mul", a=m.node("div", a=d, b=sd), b=m.w("gam", f(16))), b=m.w("bet", f(16)))
    qk = m.node("linear", x=n, weight=m.w("wq", f(16, 16)), bias=m.w("bq", f(16)))             # packed GEMM or rows
    at = m.node("softmax", dict(axis=-1), x=m.node("matmul", a=qk, b=m.node("transpose", dict(perm=[0, 2, 1]), x=n)))
    o = m.node("matmul", a=at, b=n)
    out = m.node("sigmoid", x=m.node("linear", x=o, weight=m.w("wo", f(5, 16))))
    return m.model([out, p])


@pytest.mark.parametrize("widths", [(44, 9, 44), (70, 4, 20, 36, 52, 70)])  # 16+ rows and fewer; LRU eviction
def test_symbolic_width_plans_are_the_per_op_executor(widths, threads):
    model = sequence_graph("W")
    for w in widths:
        x = rng.standard_normal((1, 6, 4, w)).astype(np.float32)
        x.flat[:6] = [np.nan, -3.0, -0.0, 3.0, np.inf, -np.inf]  # clip's NaN, hard_swish's zero signs
        with np.errstate(invalid="ignore"):  # inf * 0 in hard_swish
            native, per_op = plan_and_per_op(model, {"x": x})
        assert model._plan.plan is not None, model._plan.why
        assert model._plan.plan.graph.inputs[0].shape == (1, 6, 4, w)
        for name in per_op:
            assert same_bits(native[name], per_op[name]), (w, name)
    assert len(model._plan.plans) == min(len(set(widths)), PLANS_PER_GRAPH)
    assert next(reversed(model._plan.plans)) == ((1, 6, 4, widths[-1]),)


def test_sequence_graph_plan_is_close_to_the_reference():
    model = sequence_graph("W")
    ref = reference_model(model)
    x = rng.standard_normal((1, 6, 4, 40)).astype(np.float32)
    native, oracle = model.run({"x": x}), ref.run({"x": x})
    assert model._plan.plan is not None
    for n in oracle:
        np.testing.assert_allclose(native[n], oracle[n], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("make", [float_graph, int8_graph])
def test_synthetic_graph_plan_is_the_per_op_executor(make, threads):
    model = make()
    x = rng.standard_normal(model.graph.inputs[0].shape).astype(np.float32)
    for _ in range(2):  # later runs reuse the arena
        native, per_op = plan_and_per_op(model, {"x": x})
        assert model._plan.plan is not None, model._plan.why
        for name in per_op:
            assert same_bits(native[name], per_op[name]), name
    assert model._plan.plan.runs == 4


def test_int8_graph_plan_is_the_reference():
    model = int8_graph()
    ref = reference_model(model)
    x = rng.standard_normal((1, 17, 15, 3)).astype(np.float32)
    native, oracle = model.run({"x": x}), ref.run({"x": x})
    assert all(same_bits(native[n], oracle[n]) for n in oracle)
    assert ref._plan is None


def test_float_graph_plan_is_close_to_the_reference():
    model = float_graph()
    ref = reference_model(model)
    x = rng.standard_normal((1, 21, 19, 5)).astype(np.float32)
    native, oracle = model.run({"x": x}), ref.run({"x": x})
    for n in oracle:
        np.testing.assert_allclose(native[n], oracle[n], rtol=1e-4, atol=1e-4)


def fused_pairs(model: Model) -> dict[str, str]:
    """1x1 conv node id -> the input of its depthwise conv, for each pair the compiler fused."""
    return {n.id: n.inputs["x"] for n in model.graph.nodes
            if n.op in ("dwpw_conv2d", "qdwpw_conv2d", "expand_dwpw_conv2d")}


def dwpw_graph(stride: int, optimize: bool) -> Model:
    """Depthwise -> 1x1 pairs: one the plan fuses (3x3 depthwise at ``stride`` with bias and
    ReLU6, then a 1x1 with bias and ReLU; 36 and 20 channels: vector tails; an odd output width:
    GEMM row tails), and three it must not: a 1x1 with stride 2, a middle tensor that is a graph
    output, one read twice."""
    m = GraphMaker(x=((2, 13, 19, 36), "float32"))
    f = lambda *s: (rng.standard_normal(s) * 0.5).astype(np.float32)  # noqa: E731

    def dw(x: str, c: int, **p) -> str:  # 3x3 depthwise, bias, ReLU6
        i = len(m.nodes)
        return m.node("conv2d", dict(groups=c, pads=[1, 1, 1, 1], activation="relu6", **p), x=x,
                      weight=m.w(f"dw{i}", f(c, 3, 3, 1)), bias=m.w(f"bdw{i}", f(c)))

    def pw(x: str, c: int, cout: int, **p) -> str:  # 1x1, no bias
        return m.node("conv2d", p, x=x, weight=m.w(f"pw{len(m.nodes)}", f(cout, 1, 1, c)))

    a = dw("x", 36, strides=[stride, stride])
    b = m.node("conv2d", dict(activation="relu"), x=a, weight=m.w("pw", f(20, 1, 1, 36)), bias=m.w("bpw", f(20)))
    c = pw(dw(b, 20), 20, 24, strides=[2, 2])                                    # not 1x1 stride 1
    d = dw(c, 24)                                                                # a graph output
    e = dw(pw(d, 24, 24), 24)                                                    # read twice
    y = m.node("add", a=pw(e, 24, 24), b=e)
    return m.model([y, d], optimize=optimize)


@pytest.mark.parametrize("stride", [1, 2])
def test_fused_dwpw_plan_is_the_per_op_executor(stride, tier, threads):
    """A DWPW step runs the 1x1 conv's GEMM on one depthwise row (ow pixels) per call, the per-op
    kernel on blocks of 64 pixels: each element still sums in the same order, on every tier."""
    model = dwpw_graph(stride, optimize=True)
    x = rng.standard_normal(model.graph.inputs[0].shape).astype(np.float32)
    native, per_op = plan_and_per_op(model, {"x": x})
    assert fused_pairs(model) == {"n1_conv2d": "x"}
    for name in per_op:
        assert same_bits(native[name], per_op[name]), name


def qdwpw_graph(stride: int, shape: tuple = (2, 11, 13, 12)) -> Model:
    """int8 depthwise -> 1x1 pairs: one the plan fuses into a QDWPW step (12 channels, a clamp on
    the depthwise output, odd widths) and one it must not (6 channels: not whole GEMM rows)."""
    m = GraphMaker(x=(shape, "float32"))
    i8 = lambda *s: rng.integers(-127, 128, s, dtype=np.int8)  # noqa: E731
    i32 = lambda n: rng.integers(-3000, 3000, n, dtype=np.int32)  # noqa: E731
    q = m.node("quantize", dict(scale=0.03, zero_point=4), x="x")
    a = m.node("qconv2d", dict(groups=12, strides=[stride, stride], pads=[1, 1, 1, 1], input_zero_point=4,
                               output_zero_point=-6, act_min=-6, act_max=100), x=q,
               weight=m.w("dw1", i8(12, 3, 3, 1)), bias=m.w("bdw1", i32(12)), **requant(m, "r1", 12, 4e-3, 2e-2))
    b = m.node("qconv2d", dict(input_zero_point=-6, output_zero_point=3), x=a, weight=m.w("pw1", i8(6, 1, 1, 12)),
               bias=m.w("bpw1", i32(6)), **requant(m, "r2", 6, 1e-3, 4e-3))
    c = m.node("qconv2d", dict(groups=6, pads=[1, 1, 1, 1], input_zero_point=3, output_zero_point=0), x=b,
               weight=m.w("dw2", i8(6, 3, 3, 1)), bias=m.w("bdw2", i32(6)), **requant(m, "r3", 6, 4e-3, 2e-2))
    d = m.node("qconv2d", dict(input_zero_point=0, output_zero_point=-1), x=c, weight=m.w("pw2", i8(8, 1, 1, 6)),
               **requant(m, "r4", 8, 1e-3, 4e-3))
    return m.model([m.node("dequantize", dict(scale=0.05, zero_point=-1), x=d)], optimize=True)


@pytest.mark.parametrize("stride", [1, 2])
def test_fused_qdwpw_plan_is_the_per_op_executor(stride, tier, threads):
    """A QDWPW step requantizes each depthwise row into scratch and runs the int8 1x1 GEMM on it:
    exact integers, so bit for bit the per-op executor's on every tier."""
    model = qdwpw_graph(stride)
    x = (rng.standard_normal(model.graph.inputs[0].shape) * 2).astype(np.float32)
    native, per_op = plan_and_per_op(model, {"x": x})
    assert fused_pairs(model) == {"n2_qconv2d": "t0"}
    for name in per_op:
        assert same_bits(native[name], per_op[name]), name
        assert len(np.unique(per_op[name])) > 10


def test_small_maps_split_output_channels_across_threads(threads):
    """A map of one 64-pixel block, or of a row or two, is too few work items for a team: conv
    and depthwise -> 1x1 steps then split their output channels into whole-panel parts (the
    last part shorter); every part's outputs are the per-op executor's bits."""
    m = GraphMaker(x=((1, 1, 9, 36), "float32"))
    f = lambda *s: (rng.standard_normal(s) * 0.5).astype(np.float32)  # noqa: E731
    a = m.node("conv2d", dict(groups=36, pads=[1, 1, 1, 1], activation="relu6"), x="x",
               weight=m.w("dw", f(36, 3, 3, 1)), bias=m.w("bdw", f(36)))
    b = m.node("conv2d", dict(activation="relu"), x=a, weight=m.w("pw", f(70, 1, 1, 36)), bias=m.w("bpw", f(70)))
    c = m.node("conv2d", dict(pads=[1, 1, 1, 1]), x=b, weight=m.w("c", f(100, 3, 3, 70)), bias=m.w("bc", f(100)))
    model = m.model([c], optimize=True)
    x = rng.standard_normal((1, 1, 9, 36)).astype(np.float32)
    native, per_op = plan_and_per_op(model, {"x": x})
    assert len(fused_pairs(model)) == 1
    assert same_bits(native[c], per_op[c])


def test_silu_and_hard_swish_fold_into_the_conv_step_before_them(tier, threads):
    """An f32 conv or depthwise conv step applies the silu / hard_swish after it to each block it
    writes (no step of their own), bit for bit the per-op executor's conv then activation, on
    every tier, 70 and 37 channels (not whole vectors); an activation whose input has a second
    reader stays a step."""
    m = GraphMaker(x=((1, 9, 11, 13), "float32"))
    f = lambda *s: (rng.standard_normal(s) * 0.5).astype(np.float32)  # noqa: E731
    a = m.node("conv2d", dict(pads=[1, 1, 1, 1]), x="x", weight=m.w("c1", f(70, 3, 3, 13)), bias=m.w("b1", f(70)))
    b = m.node("silu", x=a)                                                                    # folds (im2col)
    c = m.node("conv2d", dict(groups=70, strides=[2, 2], pads=[1, 1, 1, 1]), x=b, weight=m.w("dw", f(70, 3, 3, 1)),
               bias=m.w("bdw", f(70)))
    d = m.node("hard_swish", x=c)                                                              # folds (depthwise)
    e = m.node("conv2d", {}, x=d, weight=m.w("pw", f(37, 1, 1, 70)), bias=m.w("bpw", f(37)))
    g = m.node("silu", x=e)                                                                    # folds (1x1 rows)
    h = m.node("conv2d", {}, x=g, weight=m.w("pw2", f(37, 1, 1, 37)))
    k = m.node("hard_swish", x=h)                                                              # h read twice: a step
    model = m.model([m.node("add", a=k, b=h)])
    x = rng.standard_normal((1, 9, 11, 13)).astype(np.float32)
    native, per_op = plan_and_per_op(model, {"x": x})
    assert [op for _, op in model._plan.plan.step_nodes] == ["conv2d"] * 4 + ["hard_swish", "add"]
    for name in per_op:
        assert same_bits(native[name], per_op[name]), name
    oracle = reference_model(model).run({"x": x})
    for name in oracle:
        np.testing.assert_allclose(native[name], oracle[name], rtol=1e-4, atol=1e-4 * np.abs(oracle[name]).max())


def test_residual_adds_fold_into_the_conv_step_before_them(tier, threads):
    """A two-input add (a residual block's sum; with its ReLU, an add_n) whose one input an f32 conv
    writes and it alone reads runs in that conv's step, each block summed and activated as it is
    written (no step of its own), bit for bit the per-op executor's conv then add, on every tier, 20
    and 37 channels (not whole vectors), im2col and 1x1 convs; the add's other input may have other
    readers. An add whose conv output has a second reader, or whose conv applies its own activation,
    stays a step (run in place)."""
    m = GraphMaker(x=((1, 9, 11, 13), "float32"))
    f = lambda *s: (rng.standard_normal(s) * 0.5).astype(np.float32)  # noqa: E731
    a = m.node("conv2d", dict(pads=[1, 1, 1, 1], activation="relu"), x="x", weight=m.w("c1", f(20, 3, 3, 13)))
    b = m.node("conv2d", dict(pads=[1, 1, 1, 1]), x=a, weight=m.w("c2", f(20, 3, 3, 20)), bias=m.w("b2", f(20)))
    r1 = m.node("relu", x=m.node("add", a=b, b=a))            # folds into b (a: read by b too)
    c = m.node("conv2d", dict(pads=[1, 1, 1, 1]), x=r1, weight=m.w("c3", f(37, 3, 3, 20)))
    d = m.node("conv2d", {}, x=r1, weight=m.w("c4", f(37, 1, 1, 20)), bias=m.w("b4", f(37)))
    s2 = m.node("add", a=c, b=d)                              # folds into d (the later conv), no activation
    e = m.node("conv2d", {}, x=s2, weight=m.w("c5", f(37, 1, 1, 37)))
    s3 = m.node("add", a=s2, b=e)                             # e is an output too: a step
    g = m.node("conv2d", dict(activation="relu6"), x=s3, weight=m.w("c6", f(37, 1, 1, 37)))
    s4 = m.node("relu", x=m.node("add", a=s3, b=g))           # g's own ReLU6 first: a step, in place
    model = m.model([s4, e], optimize=True)
    x = rng.standard_normal((1, 9, 11, 13)).astype(np.float32)
    native, per_op = plan_and_per_op(model, {"x": x})
    assert [op for _, op in model._plan.plan.step_nodes] == ["conv2d"] * 5 + ["add", "conv2d", "add_n"]
    for name in per_op:
        assert same_bits(native[name], per_op[name]), name
    oracle = reference_model(model).run({"x": x})
    for name in oracle:
        np.testing.assert_allclose(native[name], oracle[name], rtol=1e-4, atol=1e-4 * np.abs(oracle[name]).max())


def test_residual_adds_fold_into_dwpw_and_expand_dwpw_steps(threads):
    """MobileNetV2's inverted residuals: the add after a fused depthwise -> 1x1 pair (a DWPW step)
    or expand -> depthwise -> 1x1 chain (an EXDWPW step, the expanded tensor over 2 MB) runs in that
    step, each output row summed as it is written, bit for bit the unfused graph's convs then adds;
    an add whose other input is the graph's input (the caller's array) stays a step."""
    m = GraphMaker(x=((2, 30, 53, 24), "float32"))
    f = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)  # noqa: E731
    x0 = m.node("conv2d", dict(activation="relu"), x="x", weight=m.w("c0", f(24, 1, 1, 24)))
    e = m.node("conv2d", dict(activation="relu6"), x=x0, weight=m.w("e", f(176, 1, 1, 24)), bias=m.w("eb", f(176)))
    d = m.node("conv2d", dict(groups=176, pads=[1, 1, 1, 1], activation="relu6"), x=e,
               weight=m.w("d", f(176, 3, 3, 1)), bias=m.w("db", f(176)))
    p = m.node("conv2d", {}, x=d, weight=m.w("p", f(24, 1, 1, 176)), bias=m.w("pb", f(24)))
    s1 = m.node("add", a=x0, b=p)                                      # into the EXDWPW step
    s2 = m.node("conv2d", dict(activation="relu"), x=s1, weight=m.w("c", f(24, 1, 1, 24)))
    d2 = m.node("conv2d", dict(groups=24, pads=[1, 1, 1, 1], activation="relu6"), x=s2,
                weight=m.w("d2", f(24, 3, 3, 1)), bias=m.w("db2", f(24)))
    p2 = m.node("conv2d", {}, x=d2, weight=m.w("p2", f(24, 1, 1, 24)), bias=m.w("pb2", f(24)))
    s3 = m.node("add", a=p2, b=s1)                                     # into the DWPW step
    p3 = m.node("conv2d", {}, x=s3, weight=m.w("p3", f(24, 1, 1, 24)))
    s4 = m.node("add", a="x", b=p3)                                    # the caller's x: a step
    fused, unfused = m.model([s4], optimize=True), m.model([s4], optimize=False)
    assert [n.op for n in fused.graph.nodes] == ["conv2d", "expand_dwpw_conv2d", "add", "conv2d", "dwpw_conv2d",
                                                 "add", "conv2d", "add"]
    x = rng.standard_normal((2, 30, 53, 24)).astype(np.float32)
    native, per_op = plan_and_per_op(fused, {"x": x})
    assert [op for _, op in fused._plan.plan.step_nodes] == ["conv2d", "expand_dwpw_conv2d", "conv2d", "dwpw_conv2d",
                                                             "conv2d", "add"]
    assert same_bits(native[s4], per_op[s4])
    assert same_bits(native[s4], unfused.run({"x": x})[s4])


def test_dwpw_with_large_pointwise_weights_runs_as_two_steps(threads):
    """A float32 depthwise -> 1x1 pair whose 1x1 weights pass DWPW_SPLIT_BYTES (512 -> 160
    channels: 320 KB) runs as a depthwise step into a buffer of the plan's and one GEMM step over
    the map (5 panels: one per part on 2 threads), not a GEMM per row; outputs are the per-op
    executor's."""
    from volvox.ops.dwpw import DWPW_SPLIT_BYTES
    assert 160 * 512 * 4 > DWPW_SPLIT_BYTES
    m = GraphMaker(x=((1, 5, 6, 512), "float32"))
    f = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)  # noqa: E731
    a = m.node("conv2d", dict(groups=512, pads=[1, 1, 1, 1], activation="relu6"), x="x",
               weight=m.w("dw", f(512, 3, 3, 1)), bias=m.w("bdw", f(512)))
    y = m.node("conv2d", {}, x=a, weight=m.w("pw", f(160, 1, 1, 512)), bias=m.w("bpw", f(160)))
    model = m.model([y], optimize=True)
    x = rng.standard_normal((1, 5, 6, 512)).astype(np.float32)
    native, per_op = plan_and_per_op(model, {"x": x})
    assert len(fused_pairs(model)) == 1 and len(model._plan.plan.steps) == 2
    assert same_bits(native[y], per_op[y])


@pytest.mark.parametrize("stride,k,pads,dilation", [(2, 3, [0, 0, 1, 1], 1), (1, 5, [2, 2, 2, 2], 1),
                                                   (2, 3, [1, 1, 1, 1], 1), (1, 3, [2, 2, 2, 2], 2)])
def test_expand_dwpw_step_is_the_per_op_executor(stride, k, pads, dilation, threads):
    """An EXDWPW step (1x1 expand with ReLU6 -> depthwise -> 1x1, the expanded tensor 2.1 MB)
    computes each band's expanded rows in scratch; its outputs are the per-op executor's, and
    the unfused graph's, bit for bit (2 images; bands recompute the rows they share; a dilated
    depthwise conv reads rows two apart)."""
    from volvox.ops.dwpw import EXPAND_BAND_BYTES
    m = GraphMaker(x=((2, 30, 53, 8), "float32"))
    f = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)  # noqa: E731
    e = m.node("conv2d", dict(activation="relu6"), x="x", weight=m.w("e", f(176, 1, 1, 8)), bias=m.w("eb", f(176)))
    d = m.node("conv2d", dict(groups=176, strides=[stride, stride], pads=pads, dilations=[dilation, dilation],
                              activation="relu6"), x=e,
               weight=m.w("d", f(176, k, k, 1)), bias=m.w("db", f(176)))
    y = m.node("conv2d", {}, x=d, weight=m.w("p", f(24, 1, 1, 176)), bias=m.w("pb", f(24)))
    fused, unfused = m.model([y], optimize=True), m.model([y], optimize=False)
    assert [n.op for n in fused.graph.nodes] == ["expand_dwpw_conv2d"]
    assert 30 * 53 * 176 * 4 > 2 * EXPAND_BAND_BYTES  # several bands per image
    x = rng.standard_normal((2, 30, 53, 8)).astype(np.float32)
    native, per_op = plan_and_per_op(fused, {"x": x})
    assert fused._plan.plan is not None, fused._plan.why
    assert same_bits(native[y], per_op[y])
    assert same_bits(native[y], unfused.run({"x": x})[y])
    assert len(np.unique(native[y])) > 1000


@pytest.mark.parametrize("shape", [(2, 5, 3, 300), (1, 1, 1, 37), (1, 13, 13, 1000), (1, 7, 7, 33)])
def test_global_avg_pool_step_is_the_reference(threads, tier, shape):
    """GLOBAL_AVG items are runs of 256 channels of an image (2 images x 2 runs; 4 runs, the last of
    232), each channel summed over the pixels in order in float64, as numpy's mean, by the tier's
    kernel: blocks of 32 channels, then the rest (300 = 256 + 32 + 12; 37; 33 = 32 + 1)."""
    m = GraphMaker(x=(shape, "float32"))
    y = m.node("global_avg_pool", x="x")
    model = m.model([y])
    x = (rng.standard_normal(shape) * 100).astype(np.float32)
    native, per_op = plan_and_per_op(model, {"x": x})
    assert model._plan.plan is not None
    assert same_bits(native[y], per_op[y])
    assert same_bits(native[y], get_op("global_avg_pool").ref(None, {}, x))


@pytest.mark.parametrize("shape", [(1, 3, 6, 12), (1, 6, 6, 12)])
def test_small_int8_maps_take_a_band_per_thread(shape, threads):
    """A QDWPW step on a map of fewer 64-pixel bands than threads takes one band of rows per
    thread (3 and 6 rows at 2 threads: bands of 2 and 3 rows); outputs are the per-op executor's."""
    model = qdwpw_graph(1, shape)
    x = (rng.standard_normal(shape) * 2).astype(np.float32)
    native, per_op = plan_and_per_op(model, {"x": x})
    assert len(fused_pairs(model)) == 1
    for name in per_op:
        assert same_bits(native[name], per_op[name]), name
        assert len(np.unique(per_op[name])) > 10


def test_output_channel_parts_fall_evenly_on_the_threads():
    """A one-block map on 2 threads wants 4 parts of whole 32-channel panels: 36 panels make 4
    parts of 9; 6 panels (parts of 2 would give one thread 4 panels, the other 2) and 10 make one
    part per panel; enough items need no parts."""
    from volvox.ops.conv import plan_cparts
    assert [plan_cparts(2, 1, cout) for cout in (1152, 192, 320)] == [4, 6, 10]
    assert plan_cparts(2, 4, 192) == 1


def test_row_bands_fall_evenly_on_the_threads(threads):
    """At 2 threads a 27-row map in cpu.conv_band's bands of 4 rows (7 items) would give the threads
    12 and 15 rows: plan_bands takes bands of 2 (14 and 13 rows); a map of few bands splits output
    channels instead; one thread keeps the band. The plan's conv (bands of 2 at 2 threads) is the
    per-op executor's, bit for bit, and the float64 reference's."""
    from volvox.ops.conv import conv2d_ref, plan_bands

    class Team:
        split = 2
    assert plan_bands(Team, 1, 27, 4, 64) == dict(band=2, cparts=1)
    assert plan_bands(Team, 1, 28, 3, 64) == dict(band=2, cparts=1)
    assert plan_bands(Team, 2, 28, 3, 64) == dict(band=3, cparts=1)  # 10 bands, one image, per thread
    assert plan_bands(Team, 1, 14, 5, 256) == dict(band=5, cparts=2)
    Team.split = 1
    assert plan_bands(Team, 1, 27, 4, 64) == dict(band=4, cparts=1)
    m = GraphMaker(x=((1, 27, 20, 8), "float32"))
    w, b = rng.standard_normal((40, 3, 3, 8)).astype(np.float32), rng.standard_normal(40).astype(np.float32)
    params = dict(pads=[1, 1, 1, 1], activation="relu")
    y = m.node("conv2d", params, x="x", weight=m.w("c", w), bias=m.w("b", b))
    x = rng.standard_normal((1, 27, 20, 8)).astype(np.float32)
    native, per_op = plan_and_per_op(m.model([y]), {"x": x})
    assert same_bits(native[y], per_op[y])
    ref = conv2d_ref(None, dict(params, strides=[1, 1], dilations=[1, 1], groups=1), x, w, b)
    np.testing.assert_allclose(native[y], ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_maps_of_a_few_blocks_split_into_tile_blocks(dtype, threads):
    """A 14x14 map is 3 blocks of 64 pixels and one of 4: on 2 threads conv steps take blocks of
    whole 8-pixel GEMM tiles instead (ops/conv.py's plan_blocks: 32 pixels, 7 blocks): a 3x3 by row
    bands (3 of 5 rows, in output-channel parts) and a direct 1x1 conv (f32) or two im2col convs
    (int8); outputs are the per-op executor's."""
    m = GraphMaker(x=((1, 14, 14, 20), "float32"))
    f = lambda *s: (rng.standard_normal(s) * 0.5).astype(np.float32)  # noqa: E731
    i8 = lambda *s: rng.integers(-127, 128, s, dtype=np.int8)  # noqa: E731
    if dtype == "float32":
        a = m.node("conv2d", dict(pads=[1, 1, 1, 1], activation="relu"), x="x", weight=m.w("c", f(40, 3, 3, 20)))
        y = m.node("conv2d", {}, x=a, weight=m.w("pw", f(70, 1, 1, 40)), bias=m.w("b", f(70)))
    else:
        q = m.node("quantize", dict(scale=0.03, zero_point=4), x="x")
        a = m.node("qconv2d", dict(pads=[1, 1, 1, 1], input_zero_point=4, output_zero_point=-6), x=q,
                   weight=m.w("c", i8(40, 3, 3, 20)), **requant(m, "r1", 40, 1e-4, 4e-4))
        b = m.node("qconv2d", dict(input_zero_point=-6, output_zero_point=3), x=a, weight=m.w("pw", i8(70, 1, 1, 40)),
                   **requant(m, "r2", 70, 1e-3, 4e-3))
        y = m.node("dequantize", dict(scale=0.05, zero_point=3), x=b)
    model = m.model([y])
    x = rng.standard_normal((1, 14, 14, 20)).astype(np.float32)
    native, per_op = plan_and_per_op(model, {"x": x})
    assert same_bits(native[y], per_op[y])
    assert len(np.unique(per_op[y])) > 50  # not a constant (saturated) map


def test_steps_read_the_callers_input_array_in_place():
    """A run points the steps that read a graph input (here a conv's a and an add's b) at the
    caller's array, each run's own, so the arena copy is skipped (it stays NaN); an unaligned
    array, an input an island reads (tanh) or one that is also an output (through a reshape)
    is copied in. Outputs are the per-op executor's every time."""
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731

    def model_of(extra: str | None) -> tuple[Model, str]:
        m = GraphMaker(x=((1, 9, 8, 4), "float32"))
        a = m.node("conv2d", dict(pads=[1, 1, 1, 1]), x="x", weight=m.w("c", f(4, 3, 3, 4)))
        y = m.node("add", a=a, b=m.node("tanh", x="x") if extra == "island" else "x")
        outputs = [y, m.node("reshape", dict(shape=[9, 32]), x="x")] if extra == "output" else [y]
        return m.model(outputs), y

    for extra in (None, "island", "output"):
        model, y = model_of(extra)
        model.run({"x": f(1, 9, 8, 4)})  # lowers the graph
        for k in range(3):
            x = f(1, 9, 8, 4)
            if k == 2:  # a float32 view one byte into a buffer
                x = np.frombuffer(bytearray(x.nbytes + 1), np.uint8, x.nbytes, 1).view(np.float32).reshape(x.shape)
                assert not x.flags.aligned
                x[...] = f(1, 9, 8, 4)
            model._plan.plan.inputs[0][...] = np.nan
            native, per_op = plan_and_per_op(model, {"x": x})
            assert same_bits(native[y], per_op[y]) and not np.isnan(native[y]).any()
            copied = extra is not None or k == 2
            assert np.isnan(model._plan.plan.inputs[0]).all() != copied, (extra, k)


def test_dwpw_fusion_drops_a_step_and_the_middle_tensor():
    """One step fewer per fused pair, a smaller arena, and no fusion in a model loaded with
    optimize=False."""
    x = {"x": rng.standard_normal((2, 13, 19, 36)).astype(np.float32)}
    plans = []
    for optimize in (True, False):
        model = dwpw_graph(1, optimize)
        model.run(x)
        plans.append(model._plan.plan)
    fused, unfused = plans
    assert [n.op for n in fused.graph.nodes].count("dwpw_conv2d") == 1
    assert "dwpw_conv2d" not in {n.op for n in unfused.graph.nodes}
    assert len(unfused.steps) - len(fused.steps) == 1
    assert fused.arena_bytes < unfused.arena_bytes


def test_unlowered_graphs_and_profiling_keep_the_per_op_executor():
    m = GraphMaker(x=((2, 3), "int64"))
    y = m.node("add", a="x", b="x")  # int64 tensors: no plan holds them
    model = m.model([y])
    x = rng.integers(-5, 5, (2, 3))
    assert np.array_equal(model.run({"x": x})[y], model.executor.run(RunContext(), {"x": x})[y])
    assert model._plan.plan is None and "int64" in model._plan.why
    graph = int8_graph().graph
    weights = {n: w for n, w in zip(graph.weights, [w for _, w in int8_graph().executor.weight_slots])}
    assert Model(graph, weights, {}, "p", profile=True, optimize=False)._plan is None


@pytest.mark.parametrize("threads", [2], indirect=True)
def test_stalled_multi_thread_runs_back_off_to_one_thread(threads):
    """A run on several threads slower than JITTER x the fastest one-thread run of the latest
    one-thread period (a descheduled thread held the team) sends the next runs to one thread;
    back-offs double while stalls recur; the first multi-thread run after one-thread runs (it
    wakes the team) is not judged (runtime/pacing.py, as the plan runs it). A plan whose team is
    one thread (too little work, or one kernel thread) is not paced at all."""
    from volvox.runtime.pacing import BACKOFF_RUNS, SOLO_FIRST
    model = int8_graph()
    x = {"x": np.zeros((1, 17, 15, 3), np.float32)}
    model.run(x)
    plan = model._plan.plan
    pacer = plan.pacer
    assert plan.useful_threads == 1 and pacer.solo_runs == SOLO_FIRST  # not paced
    plan.useful_threads = 2
    model.run(x)
    assert pacer.solo_runs == SOLO_FIRST - 1  # the first runs measure one thread
    pacer.solo_runs, pacer._fastest = 0, [1e-3, 0.6e-3]
    pacer.pace(2, 9e-3)  # wakes the team: not judged
    assert pacer.solo_runs == 0
    pacer.pace(2, 0.7e-3)
    assert pacer.solo_runs == 0
    pacer.pace(2, 1.2e-3)  # a little slower than one thread: jitter
    assert pacer.solo_runs == 0
    pacer.pace(2, 1.4e-3)  # slower than JITTER x one thread
    assert pacer.solo_runs == BACKOFF_RUNS[0]
    model.run(x)
    assert pacer.solo_runs == BACKOFF_RUNS[0] - 1
    pacer.solo_runs, pacer._fastest = 0, [1e-3, 0.6e-3]  # forget the real run's time
    pacer.pace(2, 5e-3)  # wakes the team
    pacer.pace(2, 2e-3)  # STALL x the fastest multi-thread run
    assert pacer.solo_runs == 2 * BACKOFF_RUNS[0]
    pacer.solo_runs = 0
    pacer.pace(2, 0.6e-3)  # a good run halves the next back-off
    pacer.pace(2, 5e-3)
    assert pacer.solo_runs == 2 * BACKOFF_RUNS[0]
    pacer.pace(1, 2e-3)  # a new one-thread period: its runs are the yardstick (a decode step slows
    pacer.pace(1, 3e-3)  # as its context grows), not the fastest one ever
    assert pacer.solo_runs == 2 * BACKOFF_RUNS[0] - 2 and pacer._fastest[0] == 2e-3


@pytest.mark.parametrize("threads", [2], indirect=True)
def test_the_pacer_times_the_native_steps_only(threads):
    """The pacer judges a team by its native step ranges: a numpy island's time (a garbage
    collection it starts; here a 30 ms sleep) is the calling thread's own, not a team stall."""
    import time
    m = GraphMaker(x=((1, 9, 8, 4), "float32"))
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    a = m.node("conv2d", dict(pads=[1, 1, 1, 1]), x="x", weight=m.w("c", f(4, 3, 3, 4)))
    y = m.node("conv2d", dict(pads=[1, 1, 1, 1]), x=m.node("tanh", x=a), weight=m.w("d", f(4, 3, 3, 4)))
    model = m.model([y])
    x = {"x": f(1, 9, 8, 4)}
    want = model.run(x)[y]
    plan = model._plan.plan
    stop, fn, params, args, out = plan.islands[0]
    plan.islands[0] = (stop, lambda *a: (time.sleep(0.03), fn(*a))[1], params, args, out)
    paced = []
    plan.useful_threads, plan.pacer.solo_runs = 2, 0
    plan.pacer.pace = lambda threads, seconds: paced.append((threads, seconds))
    for _ in range(3):
        assert same_bits(model.run(x)[y], want)
    assert [t for t, _ in paced] == [2, 2, 2] and max(s for _, s in paced) < 0.03


def test_a_team_smaller_than_asked_runs_every_item():
    """Each thread of a step runner first takes its own share of a step's items, then the rest
    of the others' shares (the engine's runner): when OpenMP gives the region fewer threads than asked
    (here OMP_THREAD_LIMIT=1 under 3 kernel threads), the threads that came run the missing
    ones' shares, and the outputs are still the per-op executor's (a lost share would hang the
    next step's wait, or leave outputs unwritten)."""
    code = textwrap.dedent("""
        import numpy as np
        from volvox import cpu
        import test_vision_plan as t
        cpu.set_num_threads(3)
        for make in (t.float_graph, t.int8_graph, lambda: t.dwpw_graph(1, True), lambda: t.qdwpw_graph(1)):
            model = make()
            x = t.rng.standard_normal(model.graph.inputs[0].shape).astype(np.float32)
            native, per_op = t.plan_and_per_op(model, {"x": x})
            assert model._plan.plan is not None
            assert all(t.same_bits(native[n], per_op[n]) for n in per_op), make
        print("every item ran")
    """)
    here = os.path.dirname(os.path.abspath(__file__))
    path = [here, os.path.join(os.path.dirname(here), "support"), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, OMP_THREAD_LIMIT="1", PYTHONPATH=os.pathsep.join(filter(None, path)))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          cwd=here)
    assert done.returncode == 0 and "every item ran" in done.stdout, done.stderr


def test_plan_checks_feeds_like_the_executor():
    model = int8_graph()
    with pytest.raises(ShapeError, match="synthetic"):
        model.run({"x": np.zeros((1, 17, 16, 3), np.float32)})
    model.run({"x": np.zeros((1, 17, 15, 3), np.float32)})
    with pytest.raises(ShapeError, match="synthetic"):
        model.run({"x": np.zeros((1, 17, 16, 3), np.float32)})
    # a planned shape's feed skips check_feeds only as an ndarray of the input's dtype, C-contiguous
    x = rng.standard_normal((1, 17, 15, 3)).astype(np.float32)
    want = reference_model(model).run({"x": x})
    for feed in (x, np.asfortranarray(x), x.astype(np.float64), x.tolist()):
        got = model.run({"x": feed})
        assert all(same_bits(got[n], want[n]) for n in want)
    for bad in ({"x": x, "y": x}, {"y": x}, {"x": x[..., :2]}, {"x": x.astype(np.complex64)}):
        with pytest.raises(ShapeError, match="synthetic"):
            model.run(bad)


# ------------------------------------------------------------------------- the real models
def load_or_skip(name: str) -> Model:
    try:
        model_file(name)
    except Exception as e:  # not cached and not fetchable here
        pytest.skip(f"{name}: {e}")
    return volvox.load(name)


@pytest.mark.parametrize("name,lowers,pairs", [("mltk-person-detection", True, 13), ("blazeface-short-range", True, 16),
                                               ("efficientnet-lite0", True, 16), ("pp-ocrv4-rec", True, 0)])
def test_model_plan_is_the_per_op_executor(name, lowers, pairs, threads):
    """Every real model's plan (``pairs`` depthwise -> 1x1 pairs fused into DWPW / QDWPW steps) gives the
    per-op executor's outputs bit for bit."""
    model = load_or_skip(name)
    cpu.set_num_threads(threads)  # load() sets its own default
    image = text_line("The quick brown fox 2026") if name == "pp-ocrv4-rec" else \
        rng.integers(0, 256, (300, 400, 3), dtype=np.uint8)  # any photo-sized RGB image
    feeds = {model.graph.inputs[0].name: preprocess(image, model.metadata["preprocess"]).tensor}
    native, per_op = plan_and_per_op(model, feeds)
    assert (model._plan.plan is not None) == lowers, model._plan.why
    assert len(fused_pairs(model)) == pairs
    for name_ in per_op:
        assert same_bits(native[name_], per_op[name_]), name_


@pytest.mark.parametrize("shape,perm", [((1, 3, 40, 200), (0, 2, 3, 1)),   # NCHW -> NHWC: items start mid-row
                                        ((2, 30, 25, 3), (0, 3, 1, 2)),    # NHWC -> NCHW
                                        ((5, 700, 3), (2, 0, 1)), ((300, 70), (1, 0)), ((4, 50, 60), (0, 2, 1))])
def test_transpose_steps_copy_every_element(shape, perm, threads):
    m = GraphMaker(x=(shape, "float32"))
    y = m.node("relu", x=m.node("transpose", dict(perm=list(perm)), x="x"))
    model = m.model([y])
    x = rng.standard_normal(shape).astype(np.float32)
    native, per_op = plan_and_per_op(model, {"x": x})
    assert model._plan.plan is not None, model._plan.why
    assert same_bits(native[y], np.maximum(x.transpose(perm), 0)) and same_bits(native[y], per_op[y])


# ------------------------------------------------------------------ concats as channel slices
def dense_graph() -> Model:
    """DenseNet-shaped blocks whose concats the plan turns into channel slices of one buffer per block
    (compile/memory.channel_slices): max pools and 3x3 convs write their slices; depthwise (a 1x1
    per-channel affine, a 3x3), 1x1 and depthwise -> 1x1 steps read a block's growing prefixes; 3x3
    convs reading a prefix and a slice (whole pixels only: that concat and that input keep their
    copies); a slice and a strided concat among the graph outputs. 13 and 37 channels: vector tails."""
    m = GraphMaker(x=((1, 9, 11, 5), "float32"))
    f = lambda *s: (rng.standard_normal(s) * 0.5).astype(np.float32)  # noqa: E731
    stem = m.node("conv2d", dict(pads=[1, 1, 1, 1], activation="relu"), x="x", weight=m.w("stem", f(13, 3, 3, 5)))
    feats = [m.node("max_pool2d", dict(kernel=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]), x=stem)]  # (1, 9, 11, 13)
    cats = []
    for k in range(3):
        cats.append(m.node("concat", dict(axis=3), **{f"x{i}": t for i, t in enumerate(feats)}))
        c = 13 + 6 * k
        bn = m.node("conv2d", dict(groups=c, activation="relu"), x=cats[-1], weight=m.w(f"bn_s{k}", f(c, 1, 1, 1)),
                    bias=m.w(f"bn_t{k}", f(c)))                                                       # 1x1 depthwise
        mid = m.node("conv2d", dict(activation="relu"), x=bn, weight=m.w(f"w1_{k}", f(8, 1, 1, c)))
        feats.append(m.node("conv2d", dict(pads=[1, 1, 1, 1]), x=mid, weight=m.w(f"w3_{k}", f(6, 3, 3, 8))))
    block = m.node("concat", dict(axis=3), **{f"x{i}": t for i, t in enumerate(feats)})            # (1, 9, 11, 31)
    direct = m.node("conv2d", {}, x=cats[1], weight=m.w("w_direct", f(7, 1, 1, 19)))               # 1x1 on a prefix
    im2col = m.node("conv2d", dict(pads=[1, 1, 1, 1]), x=cats[2], weight=m.w("w_im2col", f(4, 3, 3, 25)))  # refuses one
    dw = m.node("conv2d", dict(groups=19, pads=[1, 1, 1, 1], activation="relu6"), x=cats[1],
                weight=m.w("dw", f(19, 3, 3, 1)), bias=m.w("dwb", f(19)))
    pair = m.node("conv2d", dict(activation="relu"), x=dw, weight=m.w("pw", f(10, 1, 1, 19)))     # fused: DWPW
    down = m.node("avg_pool2d", dict(kernel=[2, 2], strides=[2, 2]), x=m.node("conv2d", {}, x=block,
                  weight=m.w("w_trans", f(37, 1, 1, 31))))                                              # (1, 4, 5, 37)
    grow = m.node("conv2d", dict(pads=[1, 1, 1, 1]), x=down, weight=m.w("w_grow", f(5, 3, 3, 37)))
    pool = m.node("max_pool2d", dict(kernel=[2, 2], strides=[2, 2]), x=block)                       # (1, 4, 5, 31)
    out = m.node("concat", dict(axis=3), x0=down, x1=grow, x2=pool)                                 # (1, 4, 5, 73)
    head = m.node("global_avg_pool", x=m.node("conv2d", dict(groups=73, activation="relu"), x=out,
                                                 weight=m.w("bn_s", f(73, 1, 1, 1)), bias=m.w("bn_t", f(73))))
    return m.model([head, cats[1], feats[2], direct, im2col, pair], optimize=True)


def test_concats_become_channel_slices_of_one_buffer(tier, threads):
    """The dense graph's producers write straight into their concat's buffer and its readers read
    strided prefixes of it: bit for bit the per-op executor (numpy concatenates), on every tier. What
    a 3x3 conv reads stays whole (its im2col copies whole pixels): the concat it reads keeps a buffer
    of its own and its copies, and the average pool's output, which another 3x3 conv reads, is copied
    into the last concat; nothing else is."""
    model = dense_graph()
    x = rng.standard_normal(model.graph.inputs[0].shape).astype(np.float32)
    native, per_op = plan_and_per_op(model, {"x": x})
    plan = model._plan.plan
    assert plan is not None, model._plan.why
    for name in per_op:
        assert same_bits(native[name], per_op[name]), name
    cats = [n.outputs["y"] for n in model.graph.nodes if n.op == "concat"]
    # each layer's per-channel affine -> 1x1 pair (DWPW on rows of pixels), and the 3x3 depthwise one
    assert sorted(fused_pairs(model).values()) == sorted(cats[:3] + [cats[1]])
    assert set(cats) - set(plan._slices) == {cats[2]}    # read by the 3x3 conv: a buffer of its own
    ops = [op for _, op in plan.step_nodes]
    assert ops.count("concat") == 4, ops                 # cats[2] copies its three inputs, the last concat one


def test_channel_slices_are_close_to_the_reference():
    model = dense_graph()
    ref = reference_model(model)
    x = rng.standard_normal(model.graph.inputs[0].shape).astype(np.float32)
    native, oracle = model.run({"x": x}), ref.run({"x": x})
    assert model._plan.plan._slices
    for name in oracle:
        np.testing.assert_allclose(native[name], oracle[name], rtol=1e-4, atol=1e-4)


def test_a_concat_read_through_a_view_stays_whole(threads):
    """ShuffleNet v2: a concat's output reshaped (a view, no step) for its channel shuffle. Its
    inputs are still written in place, the concat's buffer unpadded and whole, read through the view."""
    m = GraphMaker(x=((1, 6, 7, 5), "float32"))
    f = lambda *s: (rng.standard_normal(s) * 0.5).astype(np.float32)  # noqa: E731
    a = m.node("conv2d", dict(pads=[1, 1, 1, 1]), x="x", weight=m.w("wa", f(6, 3, 3, 5)))
    b = m.node("conv2d", dict(activation="relu"), x="x", weight=m.w("wb", f(6, 1, 1, 5)))
    cat = m.node("concat", dict(axis=3), x0=a, x1=b)                                             # (1, 6, 7, 12)
    shuffled = m.node("transpose", dict(perm=[0, 1, 2, 4, 3]), x=m.node("reshape", dict(shape=[1, 6, 7, 2, 6]), x=cat))
    model = m.model([m.node("relu", x=shuffled)])
    x = rng.standard_normal(model.graph.inputs[0].shape).astype(np.float32)
    native, per_op = plan_and_per_op(model, {"x": x})
    plan = model._plan.plan
    assert plan is not None, model._plan.why
    assert {name: sl.width for name, sl in plan._slices.items()} == {a: 12, b: 12, cat: 12}
    assert [op for _, op in plan.step_nodes].count("concat") == 0
    for name in per_op:
        assert same_bits(native[name], per_op[name]), name
