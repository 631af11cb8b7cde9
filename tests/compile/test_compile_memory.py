"""The arena plan: tensors alive at the same time never share bytes, views share their base's
buffer, and the arena is no larger than it must be on graphs where the optimum is known."""

import json

import numpy as np
import pytest

from volvox.cli import main
from volvox.compile.memory import (ALIGNMENT, ChannelSlice, bind_dims, channel_slices, lifetimes, pixel_pitch,
                                   plan_arena)
from volvox.errors import ShapeError
from volvox.ir.graph import Graph, Node, TensorSpec
from tiny_gguf import write_tiny_llama
from volvox.ops import validate


def assert_no_overlap(plan):
    """No two buffers alive at one step overlap in the arena, and every buffer fits inside it."""
    bufs = plan.buffers
    for b in bufs:
        assert 0 <= plan.offsets[b.name] and plan.offsets[b.name] + b.size <= plan.arena_bytes
        assert plan.offsets[b.name] % ALIGNMENT == 0
    for i, a in enumerate(bufs):
        for b in bufs[i + 1:]:
            if a.overlaps_in_time(b):
                lo, hi = sorted([a, b], key=lambda t: plan.offsets[t.name])
                assert plan.offsets[lo.name] + lo.size <= plan.offsets[hi.name], (a, b)
    assert plan.peak_bytes <= plan.arena_bytes <= sum(-(-b.size // ALIGNMENT) * ALIGNMENT for b in bufs)


def random_graph(seed: int) -> Graph:
    """A random DAG of unary / binary / concat nodes over (n, k) float32 tensors of assorted widths."""
    r = np.random.default_rng(seed)
    tensors = {"x": 8}
    nodes = []
    for i in range(40):
        names = list(tensors)
        kind = r.integers(3)
        a = names[r.integers(max(0, len(names) - 6), len(names))]  # mostly recent tensors: varied lifetimes
        if kind == 0:
            nodes.append(Node(f"n{i}", "relu", {"x": a}, {"y": f"t{i}"}))
            tensors[f"t{i}"] = tensors[a]
        elif kind == 1:
            same = [n for n in names if tensors[n] == tensors[a]]
            nodes.append(Node(f"n{i}", "add", {"a": a, "b": same[r.integers(len(same))]}, {"y": f"t{i}"}))
            tensors[f"t{i}"] = tensors[a]
        else:
            b = names[r.integers(len(names))]
            nodes.append(Node(f"n{i}", "concat", {"x0": a, "x1": b}, {"y": f"t{i}"}, {"axis": 1}))
            tensors[f"t{i}"] = tensors[a] + tensors[b]
    outs = [f"t{i}" for i in r.choice(40, 3, replace=False)]
    g = Graph([TensorSpec("x", ("n", 8), "float32")], {}, nodes, outs)
    validate(g)
    return g


@pytest.mark.parametrize("seed", range(8))
def test_random_graphs_never_overlap_live_tensors(seed):
    plan = plan_arena(random_graph(seed), {"n": 5})
    assert_no_overlap(plan)
    assert plan.arena_bytes < plan.naive_bytes


def test_chain_needs_two_buffers():
    # x -> a -> b -> c -> out, each (n, 16) float32: two live at once, reused alternately
    nodes = [Node(f"n{i}", "relu", {"x": src}, {"y": dst}) for i, (src, dst) in
             enumerate([("x", "a"), ("a", "b"), ("b", "c"), ("c", "out")])]
    g = Graph([TensorSpec("x", ("n", 16), "float32")], {}, nodes, ["out"])
    validate(g)
    plan = plan_arena(g, {"n": 10})
    assert plan.naive_bytes == 4 * 640 and plan.peak_bytes == plan.arena_bytes == 2 * 640
    assert plan.offsets["a"] == plan.offsets["c"] != plan.offsets["b"] == plan.offsets["out"]


def test_views_share_and_extend_their_base():
    w = {"w": TensorSpec("w", (12, 4), "float32")}
    nodes = [Node("mm", "linear_split", {"x": "x", "weight": "w"}, {"y0": "q", "y1": "k", "y2": "v"}, {"sizes": [4, 4, 4]}),
             Node("r", "reshape", {"x": "v"}, {"y": "v2"}, {"shape": [-1, 2, 2]}),
             Node("a", "relu", {"x": "q"}, {"y": "h"}),
             Node("b", "relu", {"x": "h"}, {"y": "h2"}),
             Node("c", "add", {"a": "h2", "b": "k"}, {"y": "h3"}),
             Node("d", "relu", {"x": "v2"}, {"y": "out"})]
    g = Graph([TensorSpec("x", (3, 4), "float32")], w, nodes, ["out", "h3"])
    validate(g)
    bufs, alias = lifetimes(g, {})
    assert alias == {"k": "q", "v": "q", "v2": "q"}
    (qkv,) = [b for b in bufs if b.name == "q"]
    assert (qkv.size, qkv.first, qkv.last) == (3 * 12 * 4, 0, 5)  # one (3, 12) result, alive until v2's reader
    plan = plan_arena(g, {})
    assert_no_overlap(plan)
    assert plan.offset_of("v2") == plan.offsets["q"]


def test_bind_dims_infers_derived_dims_and_names_bad_ones():
    w = {"w": TensorSpec("w", (4, 3, 3, 2), "float32")}
    nodes = [Node("c", "conv2d", {"x": "x", "weight": "w"}, {"y": "y"}, {"strides": [2, 2]})]
    g = Graph([TensorSpec("x", (1, "h", "w", 2), "float32")], w, nodes, ["y"])
    validate(g)
    assert g.specs["y"].shape[1] == "h/2"
    assert bind_dims(g, {"h": 9, "w": 7}).specs["y"].shape == (1, 4, 3, 4)
    with pytest.raises(ShapeError, match=r"input dims \['h', 'w'\] bound to \[1, 7\].*--dims"):
        bind_dims(g, {"w": 7})


def test_info_plan_reports_nodes_arena_and_weights(tmp_path, capsys):
    path = write_tiny_llama(tmp_path / "t.gguf", n_layers=2)
    assert main(["info", str(path), "--plan", "--dims", "seq=16"]) == 0
    plan = json.loads(capsys.readouterr().out)["model"]["plan"]
    assert plan["nodes_before"] > plan["nodes_after"] == plan["passes"][-1]["nodes_after"]
    assert plan["dims"]["seq"] == 16 and plan["weight_bytes"] > 0
    assert 0 < plan["peak_activation_bytes"] <= plan["arena_bytes"] < plan["naive_activation_bytes"]


# ---------------------------------------------------------------------------- channel slices
def concat_graph(nodes: list[tuple], inputs: dict[str, int], outputs: list[str], rows: int = 3) -> Graph:
    """(rows, k) float32 graph from (op, output, inputs[, axis]) tuples: relu of one input, its first
    channels ("first", the count for axis), or concat."""
    made = []
    for i, (op, out, xs, *axis) in enumerate(nodes):
        if op == "relu":
            made.append(Node(f"n{i}", "relu", {"x": xs}, {"y": out}))
        elif op == "first":
            made.append(Node(f"n{i}", "slice", {"x": xs}, {"y": out}, {"axes": [1], "starts": [0], "ends": axis}))
        else:
            made.append(Node(f"n{i}", "concat", {f"x{j}": x for j, x in enumerate(xs)}, {"y": out},
                             {"axis": axis[0] if axis else -1}))
    g = Graph([TensorSpec(n, (rows, k), "float32") for n, k in inputs.items()], {}, made, outputs)
    validate(g)
    return g


def relu_outputs(g: Graph):
    """can_place for concat_graph: what a relu or slice writes (a graph input or a concat's output is not placed)."""
    written = {n.outputs["y"] for n in g.nodes if n.op != "concat"}
    return lambda name: name in written


def simulate(g: Graph, slices: dict, seed: int = 0) -> None:
    """Run ``g`` with every member of ``slices`` stored in its buffer (what a placed node writes goes
    there; a concat copies only the inputs not already at their place) and every other tensor on its
    own, and check each value read against numpy's evaluation of the graph."""
    r = np.random.default_rng(seed)
    truth = {s.name: r.standard_normal(s.shape).astype(np.float32) for s in g.inputs}
    for n in g.nodes:
        xs = [truth[x] for x in n.inputs.values()]
        truth[n.outputs["y"]] = (np.maximum(xs[0], 0) if n.op == "relu" else xs[0][:, :n.params["ends"][0]]
                                 if n.op == "slice" else np.concatenate(xs, axis=int(n.params["axis"])))
    rows = g.specs[g.outputs[0]].shape[0]
    buffers = {sl.buffer: np.full((rows, sl.width), np.nan, np.float32) for sl in slices.values()}
    own = {s.name: truth[s.name].copy() for s in g.inputs}

    def view(name):
        sl = slices.get(name)
        return own[name] if sl is None else buffers[sl.buffer][:, sl.offset:sl.offset + g.specs[name].shape[-1]]

    for n in g.nodes:
        y = n.outputs["y"]
        for x in n.inputs.values():
            np.testing.assert_array_equal(view(x), truth[x], err_msg=f"{x} read by {n.id}")
        if y not in slices:
            own[y] = np.empty(g.specs[y].shape, np.float32)
        out = view(y)
        if n.op != "concat":
            out[...] = np.maximum(view(n.inputs["x"]), 0) if n.op == "relu" else view(n.inputs["x"])[:, :out.shape[1]]
            continue
        at = 0
        for x in n.inputs.values():
            width = g.specs[x].shape[-1]
            src, dst = view(x), out[:, at:at + width]
            if not np.shares_memory(src, dst) or src.__array_interface__ != dst.__array_interface__:
                dst[...] = src
            at += width
    for name in g.outputs:
        np.testing.assert_array_equal(view(name), truth[name])


def test_dense_block_concats_share_one_buffer_of_prefixes():
    """DenseNet: each layer reads the concat of the block's input and every layer before it; every
    concat is a prefix of the last one's buffer and no input is copied but the graph input."""
    nodes, feats = [("relu", "x0", "x")], ["x0"]
    for k in range(4):
        nodes += [("concat", f"cat{k}", list(feats)), ("first", f"f{k}", f"cat{k}", 4)]
        feats.append(f"f{k}")
    nodes.append(("concat", "out", list(feats)))
    g = concat_graph(nodes, {"x": 4}, ["out"])
    slices = channel_slices(g, relu_outputs(g), lambda name: True)
    assert {sl.buffer for sl in slices.values()} == {"cat0"} and {sl.width for sl in slices.values()} == {48}
    assert slices["x0"].offset == 0 and [slices[f"f{k}"].offset for k in range(4)] == [4, 8, 12, 16]
    assert all(slices[f"cat{k}"].offset == 0 for k in range(4)) and slices["out"] == ChannelSlice("cat0", 0, 48)
    unpadded = channel_slices(g, relu_outputs(g), lambda name: name != "out")  # "out" must stay whole
    assert {sl.width for sl in unpadded.values()} == {20}
    simulate(g, unpadded)
    simulate(g, slices)


def test_nested_concats_join_one_buffer():
    g = concat_graph([("relu", "a", "x"), ("relu", "b", "x"), ("relu", "c", "x"), ("concat", "ab", ["a", "b"]),
                      ("concat", "abc", ["ab", "c"]), ("relu", "d", "abc")], {"x": 3}, ["d"])
    slices = channel_slices(g, relu_outputs(g), lambda name: True)
    assert {n: (sl.offset, sl.width) for n, sl in slices.items()} == {
        "a": (0, 16), "b": (3, 16), "c": (6, 16), "ab": (0, 16), "abc": (0, 16)}
    simulate(g, slices)


@pytest.mark.parametrize("second, placed", [
    (["b", "a"], {"a", "b", "ab"}),           # a and b again at other offsets: the second concat copies
    (["a", "c"], {"a", "b", "ab"}),           # c would overwrite b's channels: copies
    (["a", "a"], {"a", "b", "ab"}),           # one input twice: copies
    (["x", "c"], {"a", "b", "ab", "c", "xc"}),  # a graph input is copied into its slice, c placed
])
def test_concats_that_cannot_share_copy(second, placed):
    y2 = "xc" if second[0] == "x" else "y2"
    g = concat_graph([("relu", "a", "x"), ("relu", "b", "x"), ("relu", "c", "x"), ("concat", "ab", ["a", "b"]),
                      ("concat", y2, second)], {"x": 3}, ["ab", y2])
    slices = channel_slices(g, relu_outputs(g), lambda name: True)
    assert set(slices) == placed
    simulate(g, slices)


@pytest.mark.parametrize("channels, pitch", [(1, 16), (16, 16), (17, 48), (256, 272), (512, 528), (1024, 1040),
                                             (1040, 1040), (31, 48)])
def test_shared_buffers_take_an_odd_number_of_cache_lines_per_pixel(channels, pitch):
    assert pixel_pitch(channels) == pitch


def test_slices_leave_out_other_axes_strided_refusals_and_unplaceable_inputs():
    g = concat_graph([("relu", "a", "x"), ("relu", "b", "x"), ("concat", "rows", ["a", "b"], 0),
                      ("concat", "ab", ["a", "b"]), ("concat", "xx", ["x", "x"])], {"x": 3}, ["rows", "ab", "xx"])
    assert set(channel_slices(g, relu_outputs(g), lambda name: True)) == {"a", "b", "ab"}
    assert channel_slices(g, lambda name: False, lambda name: True) == {}
    # a concat whose output would be a strided view its readers cannot take keeps a buffer of its own
    g = concat_graph([("relu", "a", "x"), ("relu", "b", "x"), ("concat", "ab", ["a", "b"]), ("relu", "c", "x"),
                      ("concat", "abc", ["ab", "c"])], {"x": 3}, ["abc"])
    slices = channel_slices(g, relu_outputs(g), lambda name: name != "ab")
    assert "ab" not in slices and set(slices) == {"c", "abc"}
    simulate(g, slices)


@pytest.mark.parametrize("seed", range(24))
def test_random_concat_graphs_read_what_numpy_computes(seed):
    """Random DAGs of relu and channel concats (inputs shared between concats, repeated, nested, graph
    inputs and outputs among them): every value read through the slices is numpy's."""
    r = np.random.default_rng(seed)
    widths, nodes, outs = {"x": 2, "z": 3}, [], []
    for i in range(40):
        names = list(widths)
        if r.random() < 0.45:  # mostly of 2 channels, so that concats can put two tensors at one place
            x = names[r.integers(len(names))]
            nodes.append(("first", f"t{i}", x, 2) if r.random() < 0.7 else ("relu", f"t{i}", x))
            widths[f"t{i}"] = 2 if nodes[-1][0] == "first" else widths[x]
        else:
            xs = [names[j] for j in r.integers(max(0, len(names) - 5), len(names), r.integers(1, 4))]
            if sum(widths[x] for x in xs) > 64:
                continue
            nodes.append(("concat", f"t{i}", xs))
            widths[f"t{i}"] = sum(widths[x] for x in xs)
        if r.random() < 0.2:
            outs.append(f"t{i}")
    outs.append(nodes[-1][1])
    g = concat_graph(nodes, {"x": 2, "z": 3}, sorted(set(outs)))
    stride = set(r.choice(sorted(widths), len(widths) // 2, replace=False).tolist())
    slices = channel_slices(g, relu_outputs(g), lambda name: name in stride)
    for name, sl in slices.items():
        assert g.specs[name].shape[-1] == sl.width or name in stride or name not in {n.outputs["y"] for n in g.nodes
                                                                                      if n.op == "concat"}
    simulate(g, slices, seed)
