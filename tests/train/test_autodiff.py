"""Reverse-mode autodiff (compile/autodiff.py) and each op's backward, against torch autograd and central
finite differences of the forward graph, on awkward shapes (odd sizes, broadcasting, ignored rows)."""

import numpy as np
import pytest
import torch

from volvox.compile.autodiff import differentiate, grad_name
from volvox.errors import BlueprintError, ShapeError, UnsupportedError
from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.ir.quant_blocks import dequantize_ref, quantize_ref
from volvox.ops import validate
from volvox.ops.context import RunContext
from volvox.runtime.executor import Executor

rng = np.random.default_rng(0)


def spec(name, shape, dtype="float32"):
    return TensorSpec(name, tuple(shape), dtype)


def graph(inputs, nodes, outputs, weights=None):
    """A validated graph of ``nodes`` ((id, op, inputs, outputs, params) tuples)."""
    g = Graph(list(inputs), {w.name: w for w in (weights or [])}, [Node(*n) for n in nodes], list(outputs))
    validate(g)
    return g


def run(g, feeds, weights=None, reference=False):
    return Executor(g, weights or {}, reference=reference).run(RunContext(), feeds)


def torch_grads(feeds, wrt, fn):
    """(loss, {name: dloss/dname}) of ``fn(**tensors)`` by torch autograd, in the feeds' dtypes."""
    ts = {k: torch.tensor(v, requires_grad=k in wrt) for k, v in feeds.items()}
    loss = fn(**ts)
    loss.backward()
    return loss.item(), {k: ts[k].grad.numpy() for k in wrt}


def finite_difference(g, feeds, loss, name, eps, weights=None, samples=12):
    """Central differences of ``loss`` along ``samples`` coordinates of feed ``name``: (indices, values)."""
    x = feeds[name]
    picks = rng.choice(x.size, size=min(samples, x.size), replace=False)
    values = []
    for i in picks:
        shifted = []
        for sign in (1, -1):
            moved = x.copy()
            moved.reshape(-1)[i] += sign * eps
            shifted.append(float(run(g, {**feeds, name: moved}, weights, reference=True)[loss]))
        values.append((shifted[0] - shifted[1]) / (2 * eps))
    return picks, np.array(values)


def rel(a, b):
    return np.linalg.norm(np.asarray(a, np.float64) - b) / max(np.linalg.norm(b), 1e-30)


def check(g, feeds, loss, wrt, torch_fn, tol, eps, fd_tol, weights=None, paths=(False, True)):
    """The joint graph's loss and gradients (per-op fast path and reference path, as ``paths`` says)
    against torch autograd, and against central finite differences of the forward graph."""
    joint = differentiate(g, loss, wrt)
    want_loss, want = torch_grads(feeds, wrt, torch_fn)
    for reference in paths:
        out = run(joint, feeds, weights, reference)
        assert abs(float(out[loss]) - want_loss) <= tol * max(abs(want_loss), 1.0)
        for w in wrt:
            got = out[grad_name(w)]
            assert got.shape == feeds[w].shape and got.dtype == feeds[w].dtype
            assert rel(got, want[w]) < tol, (w, reference, rel(got, want[w]))
    for w in wrt:
        picks, fd = finite_difference(g, feeds, loss, w, eps, weights)
        got = out[grad_name(w)].reshape(-1)[picks]
        assert rel(got, fd) < fd_tol, (w, rel(got, fd))
    return joint


def test_broadcast_add_sub_mul_float64():
    a, b, t = rng.standard_normal((3, 1, 5)), rng.standard_normal((4, 1)), rng.standard_normal((3, 4, 5))
    g = graph([spec("a", a.shape, "float64"), spec("b", b.shape, "float64"), spec("t", t.shape, "float64")],
              [("m", "mul", {"a": "a", "b": "b"}, {"y": "ab"}, {}),
               ("s", "sub", {"a": "ab", "b": "b"}, {"y": "d"}, {}),
               ("p", "add", {"a": "d", "b": "a"}, {"y": "y"}, {}),
               ("l", "mse", {"x": "y", "target": "t"}, {"loss": "loss"}, {})], ["loss"])
    check(g, dict(a=a, b=b, t=t), "loss", ["a", "b", "t"],
          lambda a, b, t: torch.nn.functional.mse_loss(a * b - b + a, t), 1e-12, 1e-6, 1e-8)


def test_matmul_broadcast_batch():
    a = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    b = rng.standard_normal((4, 7)).astype(np.float32)
    t = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    g = graph([spec("a", a.shape), spec("b", b.shape), spec("t", t.shape)],
              [("mm", "matmul", {"a": "a", "b": "b"}, {"y": "y"}, {}),
               ("l", "mse", {"x": "y", "target": "t"}, {"loss": "loss"}, {})], ["loss"])
    check(g, dict(a=a, b=b, t=t), "loss", ["a", "b"],
          lambda a, b, t: torch.nn.functional.mse_loss(a @ b, t), 1e-5, 1e-2, 2e-3)


def test_linear_bias_cross_entropy_with_ignored_rows():
    x = rng.standard_normal((2, 3, 5)).astype(np.float32)
    w = rng.standard_normal((11, 5)).astype(np.float32)
    bias = rng.standard_normal(11).astype(np.float32)
    labels = np.array([[3, -100, 10], [0, 7, -100]], np.int64)
    g = graph([spec("x", x.shape), spec("w", w.shape), spec("bias", bias.shape), spec("labels", labels.shape, "int64")],
              [("fc", "linear", {"x": "x", "weight": "w", "bias": "bias"}, {"y": "logits"}, {}),
               ("ce", "cross_entropy", {"logits": "logits", "labels": "labels"}, {"loss": "loss", "lse": "lse"}, {})],
              ["loss"])

    def reference(x, w, bias, labels):
        logits = (x @ w.T + bias).reshape(-1, 11)
        return torch.nn.functional.cross_entropy(logits, labels.reshape(-1), ignore_index=-100)
    check(g, dict(x=x, w=w, bias=bias, labels=labels), "loss", ["x", "w", "bias"], reference, 1e-5, 1e-2, 2e-3)


def test_frozen_quantized_weight_gives_input_gradient():
    x = rng.standard_normal((3, 64)).astype(np.float32)
    qw = quantize_ref(rng.standard_normal((9, 64)).astype(np.float32), "q8_0")
    t = rng.standard_normal((3, 9)).astype(np.float32)
    g = graph([spec("x", x.shape), spec("t", t.shape)],
              [("fc", "linear", {"x": "x", "weight": "w"}, {"y": "y"}, {}),
               ("l", "mse", {"x": "y", "target": "t"}, {"loss": "loss"}, {})], ["loss"],
              weights=[spec("w", (9, 64), "q8_0")])
    dense = torch.tensor(dequantize_ref(qw))

    def reference(x, t):
        return torch.nn.functional.mse_loss(x @ dense.T, t)
    # the numpy path multiplies the dequantized weight: torch's numbers
    joint = check(g, dict(x=x, t=t), "loss", ["x"], reference, 1e-5, 1e-2, 2e-3, weights={"w": qw}, paths=(True,))
    assert "linear_grad_weight" not in {n.op for n in joint.nodes}  # frozen: no weight gradient computed
    # the kernel path quantizes x to 8 bits per block before the product (as at inference): close, not equal
    check(g, dict(x=x, t=t), "loss", ["x"], reference, 2e-2, 1e-2, 2e-2, weights={"w": qw}, paths=(False,))


def test_reshape_transpose_symbolic_batch():
    x = rng.standard_normal((2, 3, 4))
    t = rng.standard_normal((4, 6))
    g = graph([spec("x", ("batch", 3, 4), "float64"), spec("t", (4, "n"), "float64")],
              [("tr", "transpose", {"x": "x"}, {"y": "xt"}, {"perm": [2, 0, 1]}),
               ("rs", "reshape", {"x": "xt"}, {"y": "xr"}, {"shape": [4, -1]}),
               ("sq", "mul", {"a": "xr", "b": "xr"}, {"y": "y"}, {}),
               ("l", "mse", {"x": "y", "target": "t"}, {"loss": "loss"}, {})], ["loss"])
    check(g, dict(x=x, t=t), "loss", ["x"],
          lambda x, t: torch.nn.functional.mse_loss((x.permute(2, 0, 1).reshape(4, -1)) ** 2, t), 1e-12, 1e-6, 1e-7)


@pytest.mark.parametrize("uses", [3, 11])
def test_tensor_read_many_times_sums_its_gradients(uses):
    x, t = rng.standard_normal((5, 3)), rng.standard_normal((5, 3))
    nodes, last = [], "x"
    for i in range(uses - 1):
        nodes.append((f"m{i}", "mul", {"a": last, "b": "x"}, {"y": f"p{i}"}, {}))
        last = f"p{i}"
    nodes.append(("l", "mse", {"x": last, "target": "t"}, {"loss": "loss"}, {}))
    g = graph([spec("x", x.shape, "float64"), spec("t", t.shape, "float64")], nodes, ["loss"])
    joint = check(g, dict(x=x, t=t), "loss", ["x"], lambda x, t: torch.nn.functional.mse_loss(x ** uses, t),
                  1e-11, 1e-6, 1e-7)
    assert any(n.op == "add_n" for n in joint.nodes) == (uses > 2)


def test_cross_entropy_float64_odd_vocab_and_all_ignored():
    logits = rng.standard_normal((7, 13)) * 3
    labels = np.array([0, 12, -100, 5, 5, -100, 1], np.int32)
    g = graph([spec("logits", logits.shape, "float64"), spec("labels", labels.shape, "int32")],
              [("ce", "cross_entropy", {"logits": "logits", "labels": "labels"}, {"loss": "loss", "lse": "lse"}, {})],
              ["loss"])
    check(g, dict(logits=logits, labels=labels), "loss", ["logits"],
          lambda logits, labels: torch.nn.functional.cross_entropy(logits, labels.long()), 1e-12, 1e-5, 1e-5)
    joint = differentiate(g, "loss", ["logits"])
    out = run(joint, dict(logits=logits, labels=np.full(7, -100, np.int32)))
    assert float(out["loss"]) == 0.0 and not out["grad/logits"].any()


def test_cross_entropy_custom_ignore_index_and_bad_label():
    logits = rng.standard_normal((4, 6)).astype(np.float32)
    labels = np.array([2, 0, 5, 0], np.int64)
    g = graph([spec("logits", logits.shape), spec("labels", labels.shape, "int64")],
              [("ce", "cross_entropy", {"logits": "logits", "labels": "labels"}, {"loss": "loss", "lse": "lse"},
                {"ignore_index": 0})], ["loss"])
    check(g, dict(logits=logits, labels=labels), "loss", ["logits"],
          lambda logits, labels: torch.nn.functional.cross_entropy(logits, labels, ignore_index=0), 1e-6, 1e-2, 2e-3)
    with pytest.raises(ShapeError, match="label 6 is outside"):
        run(g, dict(logits=logits, labels=np.array([2, 6, 1, 1])))


def test_op_without_backward_is_refused_by_name():
    g = graph([spec("x", (3,))], [("acc", "cumsum", {"x": "x"}, {"y": "y"}, {"axis": 0}),
                                   ("l", "mse", {"x": "y", "target": "x"}, {"loss": "loss"}, {})], ["loss"])
    with pytest.raises(UnsupportedError, match=r"node 'acc': op 'cumsum' has no backward"):
        differentiate(g, "loss", ["x"])


def test_unreached_input_gets_zero_gradient_and_off_path_ops_are_skipped():
    x, t, u = (rng.standard_normal(4).astype(np.float32) for _ in range(3))
    g = graph([spec("x", (4,)), spec("t", (4,)), spec("u", (4,))],
              [("side", "cumsum", {"x": "t"}, {"y": "side"}, {"axis": 0}),  # no backward, not on a path from wrt
               ("l", "mse", {"x": "x", "target": "side"}, {"loss": "loss"}, {})], ["loss"])
    out = run(differentiate(g, "loss", ["x", "u"]), dict(x=x, t=t, u=u))
    np.testing.assert_allclose(out["grad/x"], 2 * (x - np.cumsum(t)) / 4, rtol=1e-5)
    assert not out["grad/u"].any() and out["grad/u"].shape == (4,)


# ------------------------------------------------------------------------------ the LLM ops' backward
def _mse_graph(inputs, nodes, out="y"):
    """``nodes`` then mse(out, target t): a scalar loss over every element of ``out``."""
    return graph(inputs, nodes + [("l", "mse", {"x": out, "target": "t"}, {"loss": "loss"}, {})], ["loss"])


def mse(y, t):
    return torch.nn.functional.mse_loss(y, t)


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_norms(op):
    x = rng.standard_normal((2, 3, 7)).astype(np.float32) * 2 + 0.5
    w, b = rng.standard_normal(7).astype(np.float32), rng.standard_normal(7).astype(np.float32)
    t = rng.standard_normal((2, 3, 7)).astype(np.float32)
    ins = {"x": "x", "weight": "w"} | ({"bias": "b"} if op == "layer_norm" else {})
    g = _mse_graph([spec("x", x.shape), spec("w", (7,)), spec("b", (7,)), spec("t", t.shape)],
                   [("n", op, ins, {"y": "y"}, {"eps": 1e-5})])

    def reference(x, w, b, t):
        if op == "layer_norm":
            return mse(torch.nn.functional.layer_norm(x, (7,), w, b, 1e-5), t)
        return mse(x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-5) * w, t)
    wrt = ["x", "w", "b"] if op == "layer_norm" else ["x", "w"]
    check(g, dict(x=x, w=w, b=b, t=t), "loss", wrt, reference, 1e-5, 1e-2, 5e-3)


def _rope_torch(x, positions, head_dim, theta, style):
    inv = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    ang = positions.double()[:, None] * inv[None, :]                       # (seq, hd/2)
    cos, sin = torch.cos(ang).float(), torch.sin(ang).float()
    h = x.reshape(*x.shape[:-1], -1, head_dim)
    cos, sin = cos[:, None, :], sin[:, None, :]
    if style == "half":
        x0, x1 = h[..., :head_dim // 2], h[..., head_dim // 2:]
        out = torch.cat([x0 * cos - x1 * sin, x0 * sin + x1 * cos], -1)
    else:
        x0, x1 = h[..., 0::2], h[..., 1::2]
        out = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], -1).reshape(h.shape)
    return out.reshape(x.shape)


@pytest.mark.parametrize("style", ["half", "interleaved"])
def test_rope(style):
    x = rng.standard_normal((5, 3 * 6)).astype(np.float32)
    positions = np.array([0, 3, 4, 9, 17], np.int32)
    t = rng.standard_normal(x.shape).astype(np.float32)
    params = {"head_dim": 6, "theta": 500.0, "style": style}
    g = _mse_graph([spec("x", x.shape), spec("positions", (5,), "int32"), spec("t", t.shape)],
                   [("r", "rope", {"x": "x", "positions": "positions"}, {"y": "y"}, params)])
    check(g, dict(x=x, positions=positions, t=t), "loss", ["x"],
          lambda x, positions, t: mse(_rope_torch(x, positions, 6, 500.0, style), t), 1e-5, 1e-2, 5e-3)


def _attention_torch(q, k, v, nh, nkv, hd, window):
    b, seq = q.shape[0], q.shape[1]
    qh = q.reshape(b, seq, nh, hd).transpose(1, 2)
    kh = k.reshape(b, seq, nkv, hd).transpose(1, 2).repeat_interleave(nh // nkv, 1)
    vh = v.reshape(b, seq, nkv, hd).transpose(1, 2).repeat_interleave(nh // nkv, 1)
    i, j = torch.arange(seq)[:, None], torch.arange(seq)[None, :]
    visible = (j <= i) & ((j > i - window) if window else True)
    scores = (qh @ kh.transpose(-1, -2)) * hd ** -0.5
    probs = torch.softmax(scores.masked_fill(~visible, float("-inf")), -1)
    return (probs @ vh).transpose(1, 2).reshape(b, seq, nh * hd)


@pytest.mark.parametrize("nh, nkv, window", [(4, 2, 0), (3, 3, 0), (6, 2, 3)])
def test_causal_attention_gqa_window(nh, nkv, window):
    hd, seq, b = 5, 7, 2
    q = rng.standard_normal((b, seq, nh * hd)).astype(np.float32)
    k = rng.standard_normal((b, seq, nkv * hd)).astype(np.float32)
    v = rng.standard_normal((b, seq, nkv * hd)).astype(np.float32)
    t = rng.standard_normal(q.shape).astype(np.float32)
    params = dict(n_heads=nh, n_kv_heads=nkv, head_dim=hd, window=window)
    g = _mse_graph([spec("q", q.shape), spec("k", k.shape), spec("v", v.shape), spec("t", t.shape)],
                   [("a", "causal_attention", {"q": "q", "k": "k", "v": "v"}, {"y": "y", "lse": "lse"}, params)])
    check(g, dict(q=q, k=k, v=v, t=t), "loss", ["q", "k", "v"],
          lambda q, k, v, t: mse(_attention_torch(q, k, v, nh, nkv, hd, window), t), 1e-5, 1e-2, 5e-3)


def test_embedding_scatter_adds_repeated_ids():
    table = rng.standard_normal((9, 4)).astype(np.float32)
    ids = np.array([[1, 8, 1], [0, 1, 3]], np.int32)
    t = rng.standard_normal((2, 3, 4)).astype(np.float32)
    g = _mse_graph([spec("table", table.shape), spec("ids", ids.shape, "int32"), spec("t", t.shape)],
                   [("e", "embedding", {"table": "table", "ids": "ids"}, {"y": "y"}, {})])
    check(g, dict(table=table, ids=ids, t=t), "loss", ["table"],
          lambda table, ids, t: mse(table[ids.long()], t), 1e-6, 1e-2, 2e-3)


@pytest.mark.parametrize("op, params", [("silu", {}), ("gelu", {}), ("gelu", {"approximate": "tanh"})])
def test_activations(op, params):
    x = rng.standard_normal((3, 11)) * 3
    t = rng.standard_normal((3, 11))
    g = _mse_graph([spec("x", x.shape, "float64"), spec("t", t.shape, "float64")],
                   [("a", op, {"x": "x"}, {"y": "y"}, params)])
    fn = {"silu": torch.nn.functional.silu}.get(op) or (
        lambda x: torch.nn.functional.gelu(x, approximate=params.get("approximate", "none")))
    check(g, dict(x=x, t=t), "loss", ["x"], lambda x, t: mse(fn(x), t), 1e-6, 1e-6, 1e-6)


@pytest.mark.parametrize("op, params, fn", [
    ("relu", {}, torch.relu), ("sigmoid", {}, torch.sigmoid), ("tanh", {}, torch.tanh),
    ("softmax", {"axis": 0, "beta": 1.5}, lambda x: torch.softmax(1.5 * x, 0)),
    ("softmax", {}, lambda x: torch.softmax(x, -1)),
    ("clip", {"min": 0.0, "max": 6.0}, lambda x: torch.nn.functional.hardtanh(x, 0.0, 6.0)),
    ("clip", {"min": -1.0}, lambda x: torch.clamp(x, min=-1.0)),
    ("hard_sigmoid", {"alpha": 1 / 6, "beta": 0.5}, torch.nn.functional.hardsigmoid),
    ("hard_swish", {}, torch.nn.functional.hardswish),
    ("leaky_relu", {"alpha": 0.1}, lambda x: torch.nn.functional.leaky_relu(x, 0.1))])
def test_vision_activations(op, params, fn):
    x = (rng.standard_normal((4, 7)) * 4).astype(np.float32)
    for kink in (-3, 3, 6, -1, 0):  # a finite difference across a kink is meaningless: move values off them
        x[np.abs(x - kink) < 0.01] += 0.05
    t = rng.standard_normal((4, 7)).astype(np.float32)
    g = _mse_graph([spec("x", x.shape), spec("t", t.shape)], [("a", op, {"x": "x"}, {"y": "y"}, params)])
    check(g, dict(x=x, t=t), "loss", ["x"], lambda x, t: mse(fn(x), t), 1e-5, 1e-3, 5e-3)


def test_slice_and_concat():
    x = rng.standard_normal((3, 10))
    u = rng.standard_normal((3, 2))
    t = rng.standard_normal((3, 5))
    g = _mse_graph([spec("x", x.shape, "float64"), spec("u", u.shape, "float64"), spec("t", t.shape, "float64")],
                   [("s", "slice", {"x": "x"}, {"y": "xs"}, {"axes": [1], "starts": [1], "ends": [9], "steps": [3]}),
                    ("c", "concat", {"x0": "u", "x1": "xs"}, {"y": "y"}, {"axis": -1})])
    check(g, dict(x=x, u=u, t=t), "loss", ["x", "u"],
          lambda x, u, t: mse(torch.cat([u, x[:, 1:9:3]], -1), t), 1e-12, 1e-6, 1e-7)


# ------------------------------------------------------------------------------ the compiler's fused ops
@pytest.mark.parametrize("activation", ["silu", "gelu_tanh", "relu", "sigmoid"])
def test_linear_act(activation):
    x = rng.standard_normal((2, 3, 5)).astype(np.float32)
    w, b = rng.standard_normal((6, 5)).astype(np.float32), rng.standard_normal(6).astype(np.float32)
    t = rng.standard_normal((2, 3, 6)).astype(np.float32)
    g = _mse_graph([spec("x", x.shape), spec("w", w.shape), spec("b", b.shape), spec("t", t.shape)],
                   [("f", "linear_act", {"x": "x", "weight": "w", "bias": "b"}, {"y": "y"},
                     {"activation": activation})])
    fn = {"silu": torch.nn.functional.silu, "relu": torch.relu, "sigmoid": torch.sigmoid,
          "gelu_tanh": lambda z: torch.nn.functional.gelu(z, approximate="tanh")}[activation]
    check(g, dict(x=x, w=w, b=b, t=t), "loss", ["x", "w", "b"], lambda x, w, b, t: mse(fn(x @ w.T + b), t),
          1e-5, 1e-2, 5e-3)


def test_swiglu_linear_split_add_n():
    x = rng.standard_normal((4, 6)).astype(np.float32)
    w = rng.standard_normal((3 + 8, 6)).astype(np.float32)   # frozen: a merged weight
    u = rng.standard_normal((1, 4)).astype(np.float32)
    t = rng.standard_normal((4, 4)).astype(np.float32)
    g = graph([spec("x", x.shape), spec("u", u.shape), spec("t", t.shape)],
              [("s", "linear_split", {"x": "x", "weight": "w"}, {"y0": "unused", "y1": "gu"}, {"sizes": [3, 8]}),
               ("g", "swiglu", {"x": "gu"}, {"y": "h"}, {}),
               ("n", "add_n", {"x0": "h", "x1": "u", "x2": "h"}, {"y": "y"}, {"activation": "silu"}),
               ("l", "mse", {"x": "y", "target": "t"}, {"loss": "loss"}, {})], ["loss"],
              weights=[spec("w", w.shape)])
    wt = torch.tensor(w)

    def reference(x, u, t):
        gate, up = (x @ wt[3:].T).split(4, -1)
        h = torch.nn.functional.silu(gate) * up
        return mse(torch.nn.functional.silu(h + u + h), t)
    check(g, dict(x=x, u=u, t=t), "loss", ["x", "u"], reference, 1e-5, 1e-2, 5e-3, weights={"w": w})


def test_softcap():
    x = (rng.standard_normal((3, 8)) * 20).astype(np.float32)
    t = rng.standard_normal((3, 8)).astype(np.float32)
    g = _mse_graph([spec("x", x.shape), spec("t", t.shape)], [("c", "softcap", {"x": "x"}, {"y": "y"}, {"cap": 15.0})])
    check(g, dict(x=x, t=t), "loss", ["x"], lambda x, t: mse(torch.tanh(x / 15.0) * 15.0, t), 1e-5, 1e-2, 5e-3)


# ------------------------------------------------------------------------------ more arithmetic and data movement
def test_div_sqrt_scale_broadcast():
    a, b, t = rng.uniform(0.5, 2, (3, 4)), rng.uniform(0.5, 2, (4,)), rng.standard_normal((3, 4))
    g = _mse_graph([spec("a", a.shape, "float64"), spec("b", b.shape, "float64"), spec("t", t.shape, "float64")],
                   [("d", "div", {"a": "a", "b": "b"}, {"y": "q"}, {}),
                    ("r", "sqrt", {"x": "q"}, {"y": "s"}, {}),
                    ("k", "scale", {"x": "s"}, {"y": "y"}, {"factor": -1.5})])
    check(g, dict(a=a, b=b, t=t), "loss", ["a", "b"], lambda a, b, t: mse(-1.5 * torch.sqrt(a / b), t),
          1e-12, 1e-6, 1e-7)


@pytest.mark.parametrize("keepdims", [True, False])
def test_reduce_mean(keepdims):
    x = rng.standard_normal((3, 5, 2))
    t = rng.standard_normal((1, 5, 1) if keepdims else (5,))
    g = _mse_graph([spec("x", x.shape, "float64"), spec("t", t.shape, "float64")],
                   [("m", "reduce_mean", {"x": "x"}, {"y": "y"}, {"axes": [0, -1], "keepdims": keepdims})])
    check(g, dict(x=x, t=t), "loss", ["x"], lambda x, t: mse(x.mean((0, 2), keepdim=keepdims), t), 1e-12, 1e-6, 1e-7)


def test_pad():
    x, t = rng.standard_normal((2, 3)), rng.standard_normal((5, 4))
    g = _mse_graph([spec("x", x.shape, "float64"), spec("t", t.shape, "float64")],
                   [("p", "pad", {"x": "x"}, {"y": "y"}, {"pads": [[1, 2], [0, 1]], "value": 0.5})])
    check(g, dict(x=x, t=t), "loss", ["x"],
          lambda x, t: mse(torch.nn.functional.pad(x, (0, 1, 1, 2), value=0.5), t), 1e-12, 1e-6, 1e-7)


def test_gelu_f16_table_passes_the_tanh_gradient():
    """ggml's fp16 GELU table is a step function of x; its gradient is the tanh GELU's it tabulates."""
    from volvox.ops.elementwise import gelu_f16_table_ref

    x, t = rng.standard_normal((3, 6)).astype(np.float32) * 3, rng.standard_normal((3, 6)).astype(np.float32)
    g = _mse_graph([spec("x", x.shape), spec("t", t.shape)], [("a", "gelu_f16_table", {"x": "x"}, {"y": "y"}, {})])
    out = run(differentiate(g, "loss", ["x"]), dict(x=x, t=t))
    dy = 2 * (gelu_f16_table_ref(None, {}, x) - t) / x.size                      # d mse / d y at the table's y
    xt = torch.tensor(x, requires_grad=True)
    torch.nn.functional.gelu(xt, approximate="tanh").backward(torch.tensor(dy))
    np.testing.assert_allclose(out["grad/x"], xt.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_checkpoints_recompute_what_is_not_kept():
    """With checkpoints, backward nodes read recomputed copies of every other forward activation; the
    gradients are the same bits, and they still match torch."""
    x, w, t = (rng.standard_normal(s).astype(np.float32) for s in ((4, 6), (6, 6), (4, 6)))
    g = graph([spec("x", x.shape), spec("w", w.shape), spec("t", t.shape)],
              [("a", "linear", {"x": "x", "weight": "w"}, {"y": "h1"}, {}),
               ("s", "silu", {"x": "h1"}, {"y": "h2"}, {}),
               ("b", "linear", {"x": "h2", "weight": "w"}, {"y": "h3"}, {}),
               ("n", "rms_norm", {"x": "h3", "weight": "nw"}, {"y": "y"}, {"eps": 1e-5}),
               ("l", "mse", {"x": "y", "target": "t"}, {"loss": "loss"}, {})], ["loss"], weights=[spec("nw", (6,))])
    weights = {"nw": rng.standard_normal(6).astype(np.float32)}
    feeds = dict(x=x, w=w, t=t)
    plain = run(differentiate(g, "loss", ["x", "w"]), feeds, weights)
    joint = differentiate(g, "loss", ["x", "w"], checkpoints=["h2"])
    # h1 (silu_grad's input), h3 (rms_norm_grad's) and y (mse_grad's) are recomputed; h2 is kept, s is not rerun
    assert {n.id for n in joint.nodes if n.id.startswith("recompute.")} == {"recompute.a", "recompute.b", "recompute.n"}
    kept = run(joint, feeds, weights)
    for name in plain:
        np.testing.assert_array_equal(kept[name], plain[name])
    nw = torch.tensor(weights["nw"])

    def reference(x, w, t):
        h3 = torch.nn.functional.silu(x @ w.T) @ w.T
        return mse(h3 * torch.rsqrt((h3 * h3).mean(-1, keepdim=True) + 1e-5) * nw, t)
    want = torch_grads(feeds, ["x", "w"], reference)[1]
    assert rel(kept["grad/w"], want["w"]) < 1e-5 and rel(kept["grad/x"], want["x"]) < 1e-5
    with pytest.raises(BlueprintError, match=r"checkpoints \['nope'\] are not tensors"):
        differentiate(g, "loss", ["x"], checkpoints=["nope"])
