"""Each new compiler pass on small synthetic graphs: what it rewrites, what it must leave alone,
and that the rewritten graph computes what the original did (fast paths; reference paths exact)."""

import math

import numpy as np
import pytest

from volvox import cpu
from volvox.compile import compile_graph
from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.model import Model
from volvox.ops.activation import FUSED_ACTIVATIONS, activation_ref
from volvox.ops.context import RunContext
from volvox.runtime.executor import Executor
from volvox.ops import validate

rng = np.random.default_rng(7)


def graph_of(inputs: dict, weights: dict, nodes: list, outputs: list) -> Graph:
    """A validated graph over numpy ``inputs`` (name -> example array) and ``weights``."""
    g = Graph([TensorSpec(n, a.shape, a.dtype.name) for n, a in inputs.items()],
              {n: TensorSpec(n, w.shape, w.dtype.name) for n, w in weights.items()}, nodes, outputs)
    validate(g)
    return g


def outputs(graph, weights, feeds, reference=False):
    return Executor(graph, weights, reference=reference).run(RunContext(), feeds)


def compiled(graph, weights, passes):
    g, w, _ = compile_graph(graph, weights, passes)
    return g, w


# ------------------------------------------------------------------------------------ add chains
def test_add_chain_becomes_one_add_n_with_the_same_sums():
    x = {n: rng.standard_normal((5, 4)).astype(np.float32) for n in "abcd"}
    x["e"] = rng.standard_normal((1, 4)).astype(np.float32)  # broadcast into the chain
    nodes = [Node("s1", "add", {"a": "a", "b": "b"}, {"y": "t1"}),
             Node("s2", "add", {"a": "e", "b": "t1"}, {"y": "t2"}),  # inner sum on port b
             Node("s3", "add", {"a": "t2", "b": "c"}, {"y": "t3"}),
             Node("s4", "add", {"a": "t3", "b": "d"}, {"y": "out"})]
    g = graph_of(x, {}, nodes, ["out"])
    fused, w = compiled(g, {}, ["fuse_add_chains"])
    assert [(n.op, list(n.inputs.values())) for n in fused.nodes] == [("add_n", ["a", "b", "e", "c", "d"])]
    want = outputs(g, {}, x)["out"]
    np.testing.assert_array_equal(outputs(fused, w, x)["out"], want)  # same float sums, same order
    np.testing.assert_array_equal(outputs(fused, w, x, reference=True)["out"], outputs(g, {}, x, reference=True)["out"])


def test_add_chain_stops_at_shared_sums_outputs_and_trees():
    x = {n: rng.integers(-50, 50, (3, 4)).astype(np.int8) for n in "abcd"}
    nodes = [Node("s1", "add", {"a": "a", "b": "b"}, {"y": "t1"}),
             Node("s2", "add", {"a": "c", "b": "d"}, {"y": "t2"}),
             Node("s3", "add", {"a": "t1", "b": "t2"}, {"y": "t3"}),   # a tree: absorbs t1 only
             Node("s4", "add", {"a": "t3", "b": "a"}, {"y": "t4"}),    # t3 is also a graph output
             Node("s5", "add", {"a": "t4", "b": "t4"}, {"y": "out"})]  # t4 read twice by s5 (one node)
    g = graph_of(x, {}, nodes, ["t3", "out"])
    fused, w = compiled(g, {}, ["fuse_add_chains"])
    assert [(n.op, list(n.inputs.values())) for n in fused.nodes] == [
        ("add", ["c", "d"]), ("add_n", ["a", "b", "t2"]), ("add", ["t3", "a"]), ("add", ["t4", "t4"])]
    got, want = outputs(fused, w, x), outputs(g, {}, x)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def test_add_chain_is_capped():
    from volvox.ops.fused import MAX_ADD_N
    n = MAX_ADD_N + 3
    x = {f"x{i}": rng.standard_normal(6).astype(np.float32) for i in range(n)}
    nodes, prev = [], "x0"
    for i in range(1, n):
        nodes.append(Node(f"s{i}", "add", {"a": prev, "b": f"x{i}"}, {"y": f"t{i}"}))
        prev = f"t{i}"
    g = graph_of(x, {}, nodes, [prev])
    fused, w = compiled(g, {}, ["fuse_add_chains"])
    assert [len(n.inputs) for n in fused.nodes] == [MAX_ADD_N, n - MAX_ADD_N + 1]  # the rest start a new chain
    np.testing.assert_array_equal(outputs(fused, w, x)[prev], outputs(g, {}, x)[prev])


# ------------------------------------------------------------------------------ linear bias / act
def _linear_graph(bias_shape, extra_reader=False):
    w = {"w": rng.standard_normal((6, 5)).astype(np.float32), "b": rng.standard_normal(bias_shape).astype(np.float32)}
    x = {"x": rng.standard_normal((2, 3, 5)).astype(np.float32)}
    nodes = [Node("mm", "linear", {"x": "x", "weight": "w"}, {"y": "m"}),
             Node("bias", "add", {"a": "b", "b": "m"}, {"y": "out"})]
    if extra_reader:
        nodes.append(Node("other", "relu", {"x": "m"}, {"y": "r"}))
    return graph_of(x, w, nodes, ["out"] + (["r"] if extra_reader else [])), w, x


@pytest.mark.parametrize("bias_shape", [(6,), (1, 1, 6)])
def test_bias_add_folds_into_the_linear(bias_shape):
    g, w, x = _linear_graph(bias_shape)
    fused, fw = compiled(g, w, ["fold_linear_bias"])
    (node,) = fused.nodes
    assert node.op == "linear" and node.outputs == {"y": "out"}
    assert fw[node.inputs["bias"]].shape == (6,) and set(fused.weights) == {"w", node.inputs["bias"]}
    np.testing.assert_array_equal(outputs(fused, fw, x)["out"], outputs(g, w, x)["out"])  # y += b, as the add did


@pytest.mark.parametrize("bias_shape,extra", [((3, 6), False), ((6,), True)])
def test_bias_not_folded_when_it_is_not_a_bias(bias_shape, extra):
    g, w, x = _linear_graph(bias_shape, extra_reader=extra)  # a (3, 6) addend varies by row; m has two readers
    fused, _ = compiled(g, w, ["fold_linear_bias"])
    assert [n.op for n in fused.nodes] == [n.op for n in g.nodes]


ACTIVATION_NODES = {  # fused name -> (op, params) of a standalone node computing it
    "relu": [("relu", {}), ("clip", {"min": 0})],
    "relu6": [("clip", {"min": 0, "max": 6})],
    "sigmoid": [("sigmoid", {})],
    "silu": [("silu", {})],
    "gelu": [("gelu", {}), ("gelu", {"approximate": "none"})],
    "gelu_tanh": [("gelu", {"approximate": "tanh"})],
    "hard_swish": [("hard_swish", {})],
}


@pytest.mark.parametrize("name,op,params", [(k, op, p) for k, v in ACTIVATION_NODES.items() for op, p in v])
def test_linear_bias_activation_is_one_node(name, op, params):
    w = {"w": rng.standard_normal((7, 5)).astype(np.float32), "b": rng.standard_normal(7).astype(np.float32)}
    x = {"x": (3 * rng.standard_normal((4, 5))).astype(np.float32)}
    nodes = [Node("fc", "linear", {"x": "x", "weight": "w"}, {"y": "m"}),
             Node("bias", "add", {"a": "m", "b": "b"}, {"y": "mb"}),
             Node("act", op, {"x": "mb"}, {"y": "out"}, params)]
    g = graph_of(x, w, nodes, ["out"])
    fused, fw = compiled(g, w, ["fold_linear_bias", "fuse_linear_activation"])
    (node,) = fused.nodes
    assert (node.op, node.params["activation"], sorted(node.inputs)) == ("linear_act", name, ["bias", "weight", "x"])
    want = outputs(g, w, x, reference=True)["out"]
    np.testing.assert_allclose(outputs(fused, fw, x)["out"], want, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(outputs(fused, fw, x, reference=True)["out"], want, rtol=1e-6, atol=1e-6)


def test_activation_with_a_second_reader_is_not_folded():
    w = {"w": rng.standard_normal((4, 4)).astype(np.float32)}
    nodes = [Node("fc", "linear", {"x": "x", "weight": "w"}, {"y": "m"}),
             Node("act", "gelu", {"x": "m"}, {"y": "g"}),
             Node("res", "add", {"a": "m", "b": "g"}, {"y": "out"})]
    g = graph_of({"x": np.zeros((2, 4), np.float32)}, w, nodes, ["out"])
    fused, _ = compiled(g, w, ["fuse_linear_activation"])
    assert [n.op for n in fused.nodes] == ["linear", "gelu", "add"]


@pytest.mark.parametrize("name", sorted(FUSED_ACTIVATIONS))
def test_fused_activation_kernels_match_their_ops(name):
    x = np.concatenate([np.linspace(-12, 12, 2001), rng.standard_normal(999) * 4]).astype(np.float32).reshape(30, 100)
    want = activation_ref(name, x.astype(np.float64))  # the op's reference, run in float64 throughout
    into = FUSED_ACTIVATIONS[name].into
    got = into(x, np.empty_like(x))
    np.testing.assert_allclose(got, want, rtol=3e-6, atol=1e-7)
    inplace = x.copy()
    np.testing.assert_array_equal(into(inplace, inplace), got)  # out may be x


def test_exact_gelu_has_no_cancellation_in_the_tail():
    x = np.linspace(-9, 9, 3601).astype(np.float32)
    want = np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x.astype(np.float64)])  # no cancellation
    got = FUSED_ACTIVATIONS["gelu"].into(x, np.empty_like(x)).astype(np.float64)
    nz = want != 0
    assert np.max(np.abs(got[nz] - want[nz]) / np.abs(want[nz])) < 1e-5  # 1 + erf(x) as 1 - erf would be ~100% off


# ------------------------------------------------------------------------------ concat + activation
@pytest.mark.parametrize("axis", [-1, 1])
@pytest.mark.parametrize("act", ["sigmoid", "gelu", "silu"])
def test_concat_activation_writes_straight_into_the_output(axis, act):
    x = {"a": rng.standard_normal((2, 3, 4)).astype(np.float32), "b": rng.standard_normal((2, 3, 4)).astype(np.float32),
         "c": (10 * rng.standard_normal((2, 3, 4))).astype(np.float32)}
    nodes = [Node("cat", "concat", {"x0": "a", "x1": "b", "x2": "c"}, {"y": "t"}, {"axis": axis}),
             Node("act", act, {"x": "t"}, {"y": "scores"})]
    g = graph_of(x, {}, nodes, ["scores"])
    fused, w = compiled(g, {}, ["fuse_concat_activation"])
    assert [(n.op, n.params) for n in fused.nodes] == [("concat_act", {"axis": axis, "activation": act})]
    want = outputs(g, {}, x)["scores"]
    if act == "sigmoid":  # sigmoid's own arithmetic, slice by slice
        np.testing.assert_array_equal(outputs(fused, w, x)["scores"], want)
    np.testing.assert_allclose(outputs(fused, w, x)["scores"], want, rtol=2e-6, atol=1e-6)
    np.testing.assert_array_equal(outputs(fused, w, x, reference=True)["scores"],
                                  outputs(g, {}, x, reference=True)["scores"])


def test_concat_with_a_second_reader_keeps_its_sigmoid():
    x = {"a": np.ones((2, 2), np.float32), "b": np.ones((2, 2), np.float32)}
    nodes = [Node("cat", "concat", {"x0": "a", "x1": "b"}, {"y": "t"}, {"axis": 0}),
             Node("sig", "sigmoid", {"x": "t"}, {"y": "s"})]
    g = graph_of(x, {}, nodes, ["s", "t"])
    fused, _ = compiled(g, {}, ["fuse_concat_activation"])
    assert [n.op for n in fused.nodes] == ["concat", "sigmoid"]


# ------------------------------------------------------------------------------ prepacking
def _conv_graph():
    """Float dense + depthwise convs and int8 dense + depthwise convs."""
    r = np.random.default_rng(11)
    w = {"cw": r.standard_normal((8, 3, 3, 4)).astype(np.float32), "cb": r.standard_normal(8).astype(np.float32),
         "dw": r.standard_normal((8, 3, 3, 1)).astype(np.float32),
         "qw": r.integers(-127, 128, (6, 1, 1, 8)).astype(np.int8), "qdw": r.integers(-127, 128, (6, 3, 3, 1)).astype(np.int8),
         "qb": r.integers(-500, 500, 6).astype(np.int32), "m": np.full(6, 1 << 30, np.int32), "s": np.full(6, -6, np.int32)}
    q = dict(input_zero_point=3, output_zero_point=-2)
    nodes = [Node("c", "conv2d", {"x": "x", "weight": "cw", "bias": "cb"}, {"y": "a"}, {"pads": [1, 1, 1, 1]}),
             Node("d", "conv2d", {"x": "a", "weight": "dw"}, {"y": "b"}, {"groups": 8, "pads": [1, 0, 1, 0], "dilations": [2, 1]}),
             Node("q", "quantize", {"x": "b"}, {"y": "bq"}, {"scale": 0.1, "zero_point": 3}),
             Node("qc", "qconv2d", {"x": "bq", "weight": "qw", "bias": "qb", "multiplier": "m", "shift": "s"}, {"y": "e"}, q),
             Node("qd", "qconv2d", {"x": "e", "weight": "qdw", "multiplier": "m", "shift": "s"}, {"y": "f"},
                  {"groups": 6, "strides": [2, 2], "input_zero_point": -2, "output_zero_point": 0})]
    x = {"x": r.standard_normal((1, 9, 8, 4)).astype(np.float32)}
    return graph_of(x, w, nodes, ["b", "f"]), w, x


def test_conv_weights_are_packed_at_load_not_on_the_first_run(monkeypatch):
    packs = []
    real = cpu._packed
    monkeypatch.setattr(cpu, "_packed", lambda w, kind, make: real(w, kind, lambda: (packs.append(kind), make())[1]))
    g, w, x = _conv_graph()
    model = Model(g, w, {}, "convs")
    assert sorted(packs) == ["dw", "f32", "i8", "qdw"]  # each conv weight, once, at compile time
    packs.clear()
    got = model.run(x)
    assert packs == []  # the first run packs nothing
    np.testing.assert_array_equal(model.executor.run(RunContext(), x)["f"], got["f"])
    assert packs == []  # nor does the per-op executor
    unpacked = Model(g, w, {}, "convs", optimize=False)
    want = unpacked.run(x)
    assert sorted(packs) == ["dw", "f32", "i8", "qdw"]  # writeable weights: packed on every call
    np.testing.assert_array_equal(got["b"], want["b"])
    np.testing.assert_array_equal(got["f"], want["f"])
    assert all(a.flags.writeable for a in w.values())  # the caller's arrays are left as they were
    assert not any(a.flags.writeable for _, a in model.executor.weight_slots)


# ------------------------------------------------------------------------------ affines into convs
def _affine_graph(groups: int, pads: list, const_shapes: dict, second_reader: str | None = None):
    """x -> mul(s_in) -> add(t_in) -> conv -> mul(s_out) -> add(t_out) -> out (NHWC float32)."""
    r = np.random.default_rng(5)
    cin, cout = 4, 4 if groups > 1 else 6
    w = {"w": r.standard_normal((cout, 3, 3, cin // groups)).astype(np.float32), "b": r.standard_normal(cout).astype(np.float32)}
    for name, shape in const_shapes.items():
        w[name] = r.uniform(0.5, 2, shape).astype(np.float32)
    nodes = [Node("m_in", "mul", {"a": "x", "b": "s_in"}, {"y": "xs"}),
             Node("a_in", "add", {"a": "t_in", "b": "xs"}, {"y": "xa"}),
             Node("conv", "conv2d", {"x": "xa", "weight": "w", "bias": "b"}, {"y": "c"}, {"groups": groups, "pads": pads}),
             Node("m_out", "mul", {"a": "c", "b": "s_out"}, {"y": "cs"}),
             Node("a_out", "add", {"a": "cs", "b": "t_out"}, {"y": "out"})]
    outs = ["out"]
    if second_reader:
        nodes.append(Node("other", "relu", {"x": second_reader}, {"y": "r"}))
        outs.append("r")
    x = {"x": r.standard_normal((1, 7, 6, cin)).astype(np.float32)}
    return graph_of(x, w, nodes, outs), w, x


CONSTS = {"s_in": (4,), "t_in": (1, 1, 1, 4), "s_out": (1,), "t_out": (6,)}


@pytest.mark.parametrize("groups", [1, 4])
def test_affines_fold_into_an_unpadded_conv_on_both_sides(groups):
    consts = {**CONSTS, "t_out": (4,) if groups > 1 else (6,)}
    g, w, x = _affine_graph(groups, [0, 0, 0, 0], consts)
    fused, fw = compiled(g, w, ["fold_conv_output_affine", "fold_conv_input_affine"])
    (conv,) = fused.nodes
    assert conv.inputs["x"] == "x" and conv.outputs == {"y": "out"} and set(fused.weights) == {conv.inputs["weight"], conv.inputs["bias"]}
    want = outputs(g, w, x, reference=True)["out"]
    np.testing.assert_allclose(outputs(fused, fw, x)["out"], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    assert all(a.flags.writeable for a in w.values()) and np.array_equal(w["w"], _affine_graph(groups, [0] * 4, consts)[1]["w"])


def test_input_affine_stays_before_a_padded_conv():
    g, w, x = _affine_graph(1, [1, 1, 1, 1], CONSTS)  # border taps read zeros, not t_in
    fused, fw = compiled(g, w, ["fold_conv_output_affine", "fold_conv_input_affine"])
    assert [n.op for n in fused.nodes] == ["mul", "add", "conv2d"]
    want = outputs(g, w, x, reference=True)["out"]
    np.testing.assert_allclose(outputs(fused, fw, x)["out"], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("consts,reader,left", [
    ({**CONSTS, "s_out": (5, 1, 1)}, None, ["conv2d", "mul", "add"]),  # varies over H: not per channel
    (CONSTS, "cs", ["conv2d", "add", "relu"]),  # the scaled output has a second reader: only the mul folds
    (CONSTS, "xs", ["mul", "conv2d", "relu"]),  # xs is read twice: only the add folds into the input side
])
def test_affine_not_folded_when_it_is_not_per_channel_or_shared(consts, reader, left):
    g, w, x = _affine_graph(1, [0, 0, 0, 0], consts, second_reader=reader)
    fused, fw = compiled(g, w, ["fold_conv_output_affine", "fold_conv_input_affine"])
    assert [n.op for n in fused.nodes] == left
    got, want = outputs(fused, fw, x), outputs(g, w, x, reference=True)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5 * np.abs(want[k]).max())


# ------------------------------------------------------------------------------ hard_swish
def _hard_swish_graph(three=3.0, six=6.0, swap=False, shared=False):
    w = {"three": np.array([three], np.float32), "six": np.array([six], np.float32)}
    nodes = [Node("p3", "add", {"a": "three", "b": "x"} if swap else {"a": "x", "b": "three"}, {"y": "s"}),
             Node("c", "clip", {"x": "s"}, {"y": "r"}, {"min": 0.0, "max": 6.0}),
             Node("m", "mul", {"a": "r", "b": "x"} if swap else {"a": "x", "b": "r"}, {"y": "xr"}),
             Node("d", "div", {"a": "xr", "b": "six"}, {"y": "out"})]
    x = {"x": np.linspace(-5, 5, 60, dtype=np.float32).reshape(1, 3, 4, 5)}
    return graph_of(x, w, nodes, ["out"] + (["s"] if shared else [])), w, x


@pytest.mark.parametrize("swap", [False, True])
def test_spelled_out_hard_swish_is_one_op(swap):
    g, w, x = _hard_swish_graph(swap=swap)
    fused, fw = compiled(g, w, ["recognize_hard_swish"])
    assert [(n.op, n.inputs) for n in fused.nodes] == [("hard_swish", {"x": "x"})] and not fused.weights
    np.testing.assert_array_equal(outputs(fused, fw, x)["out"], outputs(g, w, x)["out"])  # the same four float32 steps


@pytest.mark.parametrize("kw", [dict(three=2.0), dict(six=5.0), dict(shared=True)])
def test_other_arithmetic_is_not_hard_swish(kw):
    g, w, _ = _hard_swish_graph(**kw)
    fused, _ = compiled(g, w, ["recognize_hard_swish"])
    assert [n.op for n in fused.nodes] == ["add", "clip", "mul", "div"]


# ------------------------------------------------------------------------------ channel affine
def _affine_chain_graph(second_reader=False, per_channel=True):
    x = {"x": rng.standard_normal((1, 5, 6, 7)).astype(np.float32)}
    w = {"s": (rng.uniform(0.5, 2, 7 if per_channel else (6, 7))).astype(np.float32),
         "t": rng.standard_normal(7).astype(np.float32)}
    nodes = [Node("m", "mul", {"a": "x", "b": "s"}, {"y": "xs"}),
             Node("a", "add", {"a": "t", "b": "xs"}, {"y": "xst"}),
             Node("r", "relu", {"x": "xst"}, {"y": "out"})]
    return graph_of(x, w, nodes, ["out"] + (["xs"] if second_reader else [])), w, x


def test_channel_affine_between_other_nodes_is_one_depthwise_conv_with_its_relu():
    g, w, x = _affine_chain_graph()
    fused, fw = compiled(g, w, ["channel_affine_to_depthwise", "fuse_conv_activation"])
    assert [(n.op, n.params) for n in fused.nodes] == [("conv2d", {"groups": 7, "activation": "relu"})]
    want = np.maximum(x["x"].astype(np.float64) * w["s"] + w["t"], 0)  # numpy, not the ops
    np.testing.assert_allclose(outputs(fused, fw, x)["out"], want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kw", [dict(second_reader=True), dict(per_channel=False)])
def test_shared_or_spatial_affines_stay_mul_and_add(kw):
    g, w, _ = _affine_chain_graph(**kw)
    fused, _ = compiled(g, w, ["channel_affine_to_depthwise"])
    assert [n.op for n in fused.nodes] == ["mul", "add", "relu"]


# ------------------------------------------------------------------------------ silu
def _silu_graph(swap=False, shared=False, other=False):
    x = {"x": np.linspace(-30, 30, 60, dtype=np.float32).reshape(1, 3, 4, 5),
         "z": rng.standard_normal((1, 3, 4, 5)).astype(np.float32)}
    nodes = [Node("s", "sigmoid", {"x": "z" if other else "x"}, {"y": "g"}),
             Node("m", "mul", {"a": "g", "b": "x"} if swap else {"a": "x", "b": "g"}, {"y": "out"})]
    return graph_of(x, {}, nodes, ["out"] + (["g"] if shared else [])), x


@pytest.mark.parametrize("swap", [False, True])
def test_x_times_its_sigmoid_is_one_silu(swap):
    g, x = _silu_graph(swap=swap)
    fused, fw = compiled(g, {}, ["recognize_silu"])
    assert [(n.id, n.op, n.inputs) for n in fused.nodes] == [("m", "silu", {"x": "x"})]
    want = x["x"].astype(np.float64) / (1 + np.exp(-x["x"].astype(np.float64)))  # independent of both ops
    np.testing.assert_allclose(outputs(fused, fw, x)["out"], want, rtol=1e-6, atol=1e-30)


@pytest.mark.parametrize("kw", [dict(shared=True), dict(other=True)])
def test_other_sigmoid_products_are_not_silu(kw):
    g, _ = _silu_graph(**kw)
    fused, _ = compiled(g, {}, ["recognize_silu"])
    assert [n.op for n in fused.nodes] == ["sigmoid", "mul"]


def test_fused_ops_refuse_bad_params_naming_the_node():
    from volvox.errors import ShapeError
    g = Graph([TensorSpec("x", (2, 3), "float32")], {"w": TensorSpec("w", (4, 3), "float32")},
              [Node("fc", "linear_act", {"x": "x", "weight": "w"}, {"y": "y"}, {"activation": "tanh"})], ["y"])
    with pytest.raises(ShapeError, match=r"node 'fc' \(linear_act\): activation must be one of"):
        validate(g)


# ---------------------------------------------------------------------- depthwise -> pointwise
def _dwpw_graph(channels: int, int8: bool):
    """x -> depthwise 3x3 -> 1x1 (fuses), then pairs that must not: a 1x1 with stride 2, a depthwise
    output read twice, one that is a graph output, a channel multiplier of 2."""
    c = channels
    dt = np.int8 if int8 else np.float32
    op = "qconv2d" if int8 else "conv2d"
    w = {}

    def weight(name, *shape):
        w[name] = rng.integers(-127, 128, shape, dtype=np.int8) if int8 else \
            (rng.standard_normal(shape) * 0.3).astype(np.float32)
        if int8:  # per-channel requantization and an int32 bias
            w[name + ".m"] = np.full(shape[0], 1 << 30, np.int32)
            w[name + ".s"] = np.full(shape[0], -8, np.int32)
        return name

    def conv(nid, x, wname, y, **params):
        inputs = {"x": x, "weight": wname}
        if int8:
            inputs |= {"multiplier": wname + ".m", "shift": wname + ".s"}
            params |= {"input_zero_point": 3, "output_zero_point": -2}
        return Node(nid, op, inputs, {"y": y}, params)

    dw = dict(groups=c, pads=[1, 1, 1, 1])
    nodes = [conv("dw1", "x", weight("w1", c, 3, 3, 1), "m1", **dw, **({} if int8 else {"activation": "relu6"})),
             conv("pw1", "m1", weight("w2", c, 1, 1, c), "a"),                            # fuses
             conv("dw2", "a", weight("w3", c, 3, 3, 1), "m2", **dw),
             conv("pw2", "m2", weight("w4", c, 1, 1, c), "b", strides=[2, 2]),            # strided 1x1
             conv("dw3", "b", weight("w5", c, 3, 3, 1), "m3", **dw),
             conv("pw3", "m3", weight("w6", c, 1, 1, c), "d"),
             Node("reader2", "add" if not int8 else "qconv2d", {"a": "m3", "b": "d"} if not int8 else
                  {"x": "m3", "weight": weight("w7", c, 1, 1, c), "multiplier": "w7.m", "shift": "w7.s"},
                  {"y": "e"}, {} if not int8 else {"input_zero_point": 3, "output_zero_point": -2}),  # m3 read twice
             conv("dw4", "e", weight("w8", 2 * c, 3, 3, 1), "m4", groups=c, pads=[1, 1, 1, 1]),  # multiplier 2
             conv("pw4", "m4", weight("w9", c, 1, 1, 2 * c), "f"),
             conv("dw5", "f", weight("w10", c, 3, 3, 1), "m5", **dw),                   # a graph output
             conv("pw5", "m5", weight("w11", c, 1, 1, c), "g")]
    x = rng.integers(-128, 128, (1, 9, 7, c), dtype=np.int8) if int8 else rng.standard_normal((1, 9, 7, c)).astype(dt)
    return graph_of({"x": x}, w, nodes, ["g", "m5"]), w, {"x": x}


@pytest.mark.parametrize("int8", [False, True])
def test_depthwise_pointwise_pairs_fuse_into_one_node(int8):
    """Only the plain pair fuses; the per-op executor computes exactly the pair's outputs (the
    fused op runs the same two convs), and so do the references."""
    g, w, feeds = _dwpw_graph(8, int8)
    fused, fw = compiled(g, w, ["fuse_depthwise_pointwise"])
    op = "qdwpw_conv2d" if int8 else "dwpw_conv2d"
    assert [(n.id, n.op) for n in fused.nodes if n.op == op] == [("pw1", op)]
    assert "dw1" not in {n.id for n in fused.nodes} and len(fused.nodes) == len(g.nodes) - 1
    node = next(n for n in fused.nodes if n.id == "pw1")
    assert node.inputs["x"] == "x" and node.inputs["dw_weight"] == "w1" and node.params["depthwise"]["groups"] == 8
    for reference in (False, True):
        got, want = outputs(fused, fw, feeds, reference), outputs(g, w, feeds, reference)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])


@pytest.mark.parametrize("dw_params, pairs", [({}, True), (dict(strides=[2, 2]), False),
                                               (dict(pads=[1, 1, 1, 1]), False)])
def test_a_per_channel_affine_pairs_with_its_1x1_conv_when_it_maps_pixels_to_pixels(dw_params, pairs):
    """DenseNet's pre-activation BatchNorm (a 1x1 depthwise conv and its ReLU) before a 1x1 conv fuses
    when it is stride 1 and unpadded (the DWPW step then runs rows of pixels); not strided or padded."""
    w = {"s": rng.uniform(0.5, 2, (6, 1, 1, 1)).astype(np.float32), "t": rng.standard_normal(6).astype(np.float32),
         "p": rng.standard_normal((5, 1, 1, 6)).astype(np.float32)}
    nodes = [Node("bn", "conv2d", {"x": "x", "weight": "s", "bias": "t"}, {"y": "m"},
                  dict(groups=6, activation="relu", **dw_params)),
             Node("pw", "conv2d", {"x": "m", "weight": "p"}, {"y": "y"})]
    x = {"x": rng.standard_normal((1, 7, 9, 6)).astype(np.float32)}
    g = graph_of(x, w, nodes, ["y"])
    fused, fw = compiled(g, w, ["fuse_depthwise_pointwise"])
    assert [n.op for n in fused.nodes] == (["dwpw_conv2d"] if pairs else ["conv2d", "conv2d"])
    np.testing.assert_array_equal(outputs(fused, fw, x)["y"], outputs(g, w, x)["y"])


def test_int8_pairs_need_channels_in_fours_and_gpu_models_skip_the_pass():
    g, w, _ = _dwpw_graph(6, True)  # 6 channels: the 1x1 GEMM could not read the rows as its own
    assert "qdwpw_conv2d" not in {n.op for n in compiled(g, w, ["fuse_depthwise_pointwise"])[0].nodes}
    g, w, _ = _dwpw_graph(8, False)
    assert "dwpw_conv2d" in {n.op for n in compile_graph(g, w)[0].nodes}
    assert "dwpw_conv2d" not in {n.op for n in compile_graph(g, w, cpu=False)[0].nodes}


def _expand_graph(h: int, w: int, expand_stride: int = 1, expand_kernel: int = 1):
    """x (1, h, w, 8) -> 1x1 expand conv (ReLU6) to 176 channels -> 3x3 depthwise (stride 2, TF
    SAME) -> 1x1 project to 24: the expanded tensor is h*w*176*4 bytes."""
    wts = {"e": (rng.standard_normal((176, expand_kernel, expand_kernel, 8)) * 0.3).astype(np.float32),
           "eb": rng.standard_normal(176).astype(np.float32),
           "d": (rng.standard_normal((176, 3, 3, 1)) * 0.3).astype(np.float32),
           "p": (rng.standard_normal((24, 1, 1, 176)) * 0.3).astype(np.float32)}
    nodes = [Node("ex", "conv2d", {"x": "x", "weight": "e", "bias": "eb"}, {"y": "m1"},
                  dict(activation="relu6", strides=[expand_stride] * 2)),
             Node("dw", "conv2d", {"x": "m1", "weight": "d"}, {"y": "m2"}, dict(groups=176, strides=[2, 2], pads=[0, 0, 1, 1])),
             Node("pw", "conv2d", {"x": "m2", "weight": "p"}, {"y": "y"})]
    x = rng.standard_normal((1, h, w, 8)).astype(np.float32)
    return graph_of({"x": x}, wts, nodes, ["y"]), wts, {"x": x}


def test_an_expand_conv_joins_its_depthwise_pointwise_pair():
    """A 1x1 conv whose output (at least EXPAND_FUSE_BYTES) only a dwpw_conv2d reads joins it: one
    expand_dwpw_conv2d computing exactly the three convs' outputs (per-op and references); a
    smaller expanded tensor, a strided or a 3x3 first conv stays apart."""
    from volvox.compile.fuse_conv import EXPAND_FUSE_BYTES
    passes = ["fuse_depthwise_pointwise", "fuse_expand_dwpw"]
    g, w, feeds = _expand_graph(40, 80)
    assert 40 * 80 * 176 * 4 >= EXPAND_FUSE_BYTES
    fused, fw = compiled(g, w, passes)
    assert [(n.id, n.op) for n in fused.nodes] == [("pw", "expand_dwpw_conv2d")]
    node = fused.nodes[0]
    assert node.inputs == {"x": "x", "ex_weight": "e", "ex_bias": "eb", "dw_weight": "d", "weight": "p"}
    assert node.params["expand"]["activation"] == "relu6" and node.params["depthwise"]["groups"] == 176
    for reference in (False, True):
        np.testing.assert_array_equal(outputs(fused, fw, feeds, reference)["y"], outputs(g, w, feeds, reference)["y"])
    for small in (_expand_graph(20, 20), _expand_graph(120, 120, expand_stride=2), _expand_graph(40, 80, expand_kernel=3)):
        assert "expand_dwpw_conv2d" not in {n.op for n in compiled(small[0], small[1], passes)[0].nodes}
    assert "expand_dwpw_conv2d" not in {n.op for n in compile_graph(g, w, cpu=False)[0].nodes}


# ---------------------------------------------------------------------------- add + activation
@pytest.mark.parametrize("act,params", [("relu", {}), ("clip", {"min": 0, "max": 6})])
def test_add_then_relu_is_one_add_n_with_the_same_bits(act, params):
    """A residual add (or an add chain) read only by a ReLU / ReLU6 becomes one add_n applying it."""
    x = {n: rng.standard_normal((2, 5, 6)).astype(np.float32) for n in "abc"}
    nodes = [Node("s1", "add", {"a": "a", "b": "b"}, {"y": "t1"}), Node("s2", "add", {"a": "t1", "b": "c"}, {"y": "t2"}),
             Node("r", act, {"x": "t2"}, {"y": "out"}, params)]
    g = graph_of(x, {}, nodes, ["out"])
    fused, w = compiled(g, {}, ["fuse_add_chains", "fuse_add_activation"])
    want_act = "relu" if act == "relu" else "relu6"
    assert [(n.op, n.params.get("activation")) for n in fused.nodes] == [("add_n", want_act)]
    for reference in (False, True):
        np.testing.assert_array_equal(outputs(fused, w, x, reference)["out"], outputs(g, {}, x, reference)["out"])


def test_add_whose_sum_has_another_reader_keeps_its_relu():
    x = {n: rng.standard_normal((4, 3)).astype(np.float32) for n in "ab"}
    nodes = [Node("s", "add", {"a": "a", "b": "b"}, {"y": "t"}), Node("r", "relu", {"x": "t"}, {"y": "out"})]
    g = graph_of(x, {}, nodes, ["out", "t"])
    assert [n.op for n in compiled(g, {}, ["fuse_add_activation"])[0].nodes] == ["add", "relu"]
