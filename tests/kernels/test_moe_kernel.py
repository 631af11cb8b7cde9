"""The moe op's CPU paths against its numpy oracle (ops/moe.py moe_ref, float64 over dequantized experts):
the native token step (engine/moe.pxi, run through a step plan) and the gathered prefill path (moe_fast),
on every tier, for float and quantized expert stacks, softmax and sigmoid routing, normalised or not,
without a shared expert, with an ungated one and with a sigmoid-gated one; the token step's result
must be the per-op path's bit for bit.

Quantized experts multiply 8-bit activations, so they are held to test_kernels.py's NMSE bound for
quantized linears (2e-4); float experts to 1e-10.
"""

import numpy as np
import pytest

from volvox.errors import ShapeError, UnsupportedError
from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.ir.quant_blocks import QuantTensor, quantize_ref
from volvox.ops import validate
from volvox.ops.moe import moe_fast, moe_ref, route, route_fast
from volvox.runtime.plan import Plan

E, DIM, FFN = 6, 64, 96
NMSE = {"f32": 1e-10, "f16": 1e-10, "q8_0": 2e-4, "q4_0": 2e-4, "q4_1": 2e-4}
ROUTINGS = [dict(top_k=2, gating="softmax", norm_topk=True), dict(top_k=3, gating="softmax", norm_topk=False),
            dict(top_k=1, gating="sigmoid", norm_topk=False), dict(top_k=E, gating="sigmoid", norm_topk=True)]
SHARED = [(), ("shared",), ("shared", "shared_logit")]  # no shared expert, an ungated one, a sigmoid-gated one


def stack(rng, wtype, out, inp):
    """A random (E, out, in) expert stack as the op reads it: float32 / float16 arrays, or a QuantTensor of
    (E * out, in) rows."""
    w = (rng.standard_normal((E, out, inp)) / np.sqrt(inp)).astype(np.float32)
    if wtype == "f32":
        return w
    if wtype == "f16":
        return w.astype(np.float16)
    qt = quantize_ref(w.reshape(E * out, inp), wtype)
    qt.data.flags.writeable = False  # a model's weights are read-only mmaps: the interleaved packing is cached
    return qt


def graph_of(weights, params, rows=1, shared=()):
    specs = {name: TensorSpec(name, (E, w.shape[0] // E, w.shape[1]), w.qtype) if isinstance(w, QuantTensor)
             else TensorSpec(name, w.shape, w.dtype.name) for name, w in weights.items()}
    inputs = [TensorSpec("x", (rows, DIM), "float32"), TensorSpec("logits", (rows, E), "float32")]
    inputs += [TensorSpec(n, (rows, DIM if n == "shared" else 1), "float32") for n in shared]
    node = Node("moe", "moe", {**{t.name: t.name for t in inputs}, "gate": "gate", "up": "up", "down": "down"},
                {"y": "y"}, params)
    g = Graph(inputs, specs, [node], ["y"])
    validate(g)
    return g


def feeds(rng, rows, shared):
    """x, logits and the shared expert's inputs of ``rows`` tokens."""
    return [rng.standard_normal((rows, n)).astype(np.float32) for n in (DIM, E) + tuple(DIM if s == "shared" else 1
                                                                                        for s in shared)]


def nmse(got, want):
    return float(((got.astype(np.float64) - want) ** 2).sum() / (want.astype(np.float64) ** 2).sum())


@pytest.mark.parametrize("wtype", sorted(NMSE))
def test_token_step_and_prefill_match_reference(tier, wtype):
    rng = np.random.default_rng(7)
    weights = {"gate": stack(rng, wtype, FFN, DIM), "up": stack(rng, wtype, FFN, DIM), "down": stack(rng, wtype, DIM, FFN)}
    for params, shared in zip(ROUTINGS * 3, SHARED * 4):
        x, logits, *extra = feeds(rng, 1, shared)
        want = moe_ref(None, params, x, logits, *weights.values(), *extra).astype(np.float64)
        plan = Plan(graph_of(weights, params, 1, shared), weights)
        assert [kind for _, kind in plan.step_nodes] == ["moe"] * len(plan.steps) and not plan.islands  # native
        got = plan.run([x, logits, *extra])["y"]
        assert nmse(got, want) <= NMSE[wtype], (params, shared, nmse(got, want))
        per_op = moe_fast(None, params, x, logits, *weights.values(), *extra)
        assert np.array_equal(got, per_op), (params, shared)  # the per-op path's bits
        xs, ls, *extra = feeds(rng, 5, shared)                    # a prefill: rows gathered per expert
        want = moe_ref(None, params, xs, ls, *weights.values(), *extra)
        assert nmse(moe_fast(None, params, xs, ls, *weights.values(), *extra), want) <= NMSE[wtype], (params, shared)


@pytest.mark.parametrize("routing", [route, route_fast])
def test_route_orders_and_normalises(routing):
    logits = np.array([[0.0, 2.0, 1.0, 2.0], [3.0, -1.0, 0.5, 0.0]], np.float32)
    ids, w = routing(logits, 3, "softmax", False)
    assert ids.tolist() == [[1, 3, 2], [0, 2, 3]]                  # ties: the lower id first
    p = np.exp(logits.astype(np.float64))
    p /= p.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(w, np.take_along_axis(p, ids, axis=1), rtol=1e-6)
    ids, w = routing(logits, 2, "sigmoid", True)
    assert ids[0].tolist() == [1, 3] and np.allclose(w[0], 0.5)
    np.testing.assert_allclose(w.sum(axis=1), 1.0, rtol=1e-6)


def test_route_fast_weighs_the_shared_expert():
    logits = np.zeros((2, 4), np.float32)
    _, w = route_fast(logits, 2, shared=True, shared_logit=np.array([[0.0], [np.log(3.0)]], np.float32))
    np.testing.assert_allclose(w, [[0.25, 0.25, 0.5], [0.25, 0.25, 0.75]], rtol=1e-6)
    _, w = route_fast(logits, 1, shared=True)
    np.testing.assert_allclose(w[:, 1], 1.0)


def test_bad_graphs_are_refused():
    rng = np.random.default_rng(0)
    weights = {"gate": stack(rng, "f32", FFN, DIM), "up": stack(rng, "f32", FFN, DIM), "down": stack(rng, "f32", DIM, FFN)}
    with pytest.raises(ShapeError, match="top_k"):
        graph_of(weights, dict(top_k=E + 1))
    with pytest.raises(UnsupportedError, match="gating 'relu'"):
        graph_of(weights, dict(top_k=2, gating="relu"))
    weights["down"] = weights["down"][:, :, :FFN - 1]
    with pytest.raises(ShapeError, match="expert stacks"):
        graph_of(weights, dict(top_k=2))


def test_gate_and_up_of_different_types(tier):
    """Stacks read differently (q8_0 gate, f16 up, q4_1 down: a GGUF file may mix types) each get their step."""
    rng = np.random.default_rng(11)
    weights = {"gate": stack(rng, "q8_0", FFN, DIM), "up": stack(rng, "f16", FFN, DIM), "down": stack(rng, "q4_1", DIM, FFN)}
    params = dict(top_k=2, norm_topk=True)
    x, logits = feeds(rng, 1, ())
    plan = Plan(graph_of(weights, params), weights)
    got = plan.run([x, logits])["y"]
    assert nmse(got, moe_ref(None, params, x, logits, *weights.values()).astype(np.float64)) <= 2e-4
    assert np.array_equal(got, moe_fast(None, params, x, logits, *weights.values()))
