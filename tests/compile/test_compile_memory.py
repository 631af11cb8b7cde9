"""The arena plan: tensors alive at the same time never share bytes, views share their base's
buffer, and the arena is no larger than it must be on graphs where the optimum is known."""

import json

import numpy as np
import pytest

from volvox.cli import main
from volvox.compile.memory import ALIGNMENT, bind_dims, lifetimes, plan_arena
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
