"""CNN backward: the conv / pool grad ops against torch autograd and finite differences on awkward
shapes (odd sizes, stride 2 with asymmetric padding, dilation 2, groups 2, depthwise with a multiplier)."""

from __future__ import annotations

import numpy as np
import pytest

from volvox.ops import OPS

torch = pytest.importorskip("torch")
F = torch.nn.functional

# (name, x (N, H, W, C), weight (cout, kh, kw, cin/g), params)
CONV_CASES = [
    ("3x3_s2_pad", (2, 7, 9, 3), (4, 3, 3, 3), dict(strides=[2, 2], pads=[1, 0, 1, 2])),
    ("dilated", (1, 9, 8, 2), (3, 3, 3, 2), dict(dilations=[2, 2], pads=[2, 1, 2, 1])),
    ("groups2", (2, 6, 7, 4), (6, 3, 2, 2), dict(groups=2, strides=[1, 2], pads=[1, 1, 0, 0])),
    ("depthwise", (2, 7, 7, 5), (5, 3, 3, 1), dict(groups=5, strides=[2, 2], pads=[1, 1, 1, 1])),
    ("depthwise_mult2", (1, 6, 5, 3), (6, 3, 3, 1), dict(groups=3, pads=[0, 1, 1, 0])),
    ("pointwise", (2, 5, 3, 6), (4, 1, 1, 6), {}),
    ("pointwise_s2", (1, 5, 5, 3), (2, 1, 1, 3), dict(strides=[2, 2])),
]


def torch_conv(x_nhwc, w_ohwi, b, p):
    """torch's conv of NHWC x by OHWI w with volvox's params (asymmetric pads through F.pad); NHWC out."""
    pt, pl, pb, pr = p.get("pads", (0, 0, 0, 0))
    x = F.pad(x_nhwc.permute(0, 3, 1, 2), (pl, pr, pt, pb))
    y = F.conv2d(x, w_ohwi.permute(0, 3, 1, 2), b, stride=tuple(p.get("strides", (1, 1))),
                 dilation=tuple(p.get("dilations", (1, 1))), groups=p.get("groups", 1))
    return y.permute(0, 2, 3, 1)


def rel(a, b) -> float:
    """Relative error |a - b| / |b| in float64."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def conv_case(x_shape, w_shape, p, seed=0):
    """(x, w, b, dy, torch's dx, dw, db) for a conv case, torch in float64."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    tx, tw, tb = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, w, b))
    y = torch_conv(tx, tw, tb, p)
    dy = rng.standard_normal(tuple(y.shape)).astype(np.float32)
    y.backward(torch.tensor(dy, dtype=torch.float64))
    return x, w, b, dy, tx.grad.numpy(), tw.grad.numpy(), tb.grad.numpy()


def grad_params(p, x_shape, w_shape) -> dict:
    return dict(p, input_size=list(x_shape[1:3]), kernel=list(w_shape[1:3]))


@pytest.mark.parametrize("impl", ["ref", "fast"])
@pytest.mark.parametrize("name,x_shape,w_shape,p", CONV_CASES, ids=[c[0] for c in CONV_CASES])
def test_conv2d_grads_match_torch(name, x_shape, w_shape, p, impl):
    x, w, b, dy, dx_t, dw_t, db_t = conv_case(x_shape, w_shape, p)
    gp = grad_params(p, x_shape, w_shape)

    def run(op, *args):
        fn = getattr(OPS[op], impl) or OPS[op].ref
        return fn(None, gp, *args)

    dx = run("conv2d_grad_input", dy, w)
    dw = run("conv2d_grad_weight", x, dy)
    db = run("conv2d_grad_bias", dy)
    assert dx.dtype == dw.dtype == db.dtype == np.float32
    assert dx.shape == x.shape and dw.shape == w.shape and db.shape == b.shape
    assert rel(dx, dx_t) < 1e-6 and rel(dw, dw_t) < 1e-6 and rel(db, db_t) < 1e-6


@pytest.mark.parametrize("name,x_shape,w_shape,p", CONV_CASES, ids=[c[0] for c in CONV_CASES])
def test_conv2d_grads_are_adjoint_of_forward(name, x_shape, w_shape, p):
    """Finite differences of volvox's own forward (exact for a linear map): <conv(x + v) - conv(x), dy> =
    <v, dx> and the same along a weight direction."""
    rng = np.random.default_rng(1)
    conv = OPS["conv2d"].ref
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    y = conv(None, p, x, w)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    gp = grad_params(p, x_shape, w_shape)
    vx = rng.standard_normal(x_shape).astype(np.float32)
    vw = rng.standard_normal(w_shape).astype(np.float32)
    along_x = np.vdot(conv(None, p, x + vx, w).astype(np.float64) - y, dy)
    along_w = np.vdot(conv(None, p, x, w + vw).astype(np.float64) - y, dy)
    assert along_x == pytest.approx(np.vdot(OPS["conv2d_grad_input"].ref(None, gp, dy, w).astype(np.float64), vx),
                                    rel=1e-4)
    assert along_w == pytest.approx(np.vdot(OPS["conv2d_grad_weight"].ref(None, gp, x, dy).astype(np.float64), vw),
                                    rel=1e-4)


@pytest.mark.parametrize("activation", ["relu", "relu6"])
def test_fused_activation_grad_matches_torch(activation):
    rng = np.random.default_rng(2)
    z = (rng.standard_normal((2, 5, 3, 4)) * 5).astype(np.float32)
    z[0, 0, 0, :2] = (0.0, 6.0)  # the clamp edges pass no gradient, as torch's
    tz = torch.tensor(z, dtype=torch.float64, requires_grad=True)
    ty = F.relu(tz) if activation == "relu" else F.relu6(tz)
    dy = rng.standard_normal(z.shape).astype(np.float32)
    ty.backward(torch.tensor(dy, dtype=torch.float64))
    got = OPS["fused_activation_grad"].ref(None, {"activation": activation}, dy, ty.detach().numpy().astype(np.float32))
    np.testing.assert_array_equal(got, tz.grad.numpy().astype(np.float32))


# (name, x (N, H, W, C), params)
POOL_CASES = [
    ("2x2_s2_odd", (2, 7, 9, 3), dict(kernel=[2, 2], strides=[2, 2])),
    ("3x3_s2_pad", (1, 9, 7, 2), dict(kernel=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("3x2_overlap", (2, 6, 5, 3), dict(kernel=[3, 2], strides=[1, 1], pads=[1, 0, 1, 0])),
]


def torch_pool(kind, x_nhwc, p, include_pad=False):
    pt, pl, _, _ = p.get("pads", (0, 0, 0, 0))
    x = x_nhwc.permute(0, 3, 1, 2)
    args = dict(kernel_size=tuple(p["kernel"]), stride=tuple(p.get("strides", (1, 1))), padding=(pt, pl))
    y = F.max_pool2d(x, **args) if kind == "max" else F.avg_pool2d(x, count_include_pad=include_pad, **args)
    return y.permute(0, 2, 3, 1)


@pytest.mark.parametrize("impl", ["ref", "fast"])
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("name,x_shape,p", POOL_CASES, ids=[c[0] for c in POOL_CASES])
def test_max_pool2d_grad_matches_torch(name, x_shape, p, ties, impl):
    """Distinct values, and ties (values from {0, 1}, as after a ReLU): torch's first maximum gets dy."""
    rng = np.random.default_rng(3)
    x = (rng.integers(0, 2, x_shape) if ties else rng.standard_normal(x_shape)).astype(np.float32)
    tx = torch.tensor(x, requires_grad=True)
    ty = torch_pool("max", tx, p)
    dy = rng.standard_normal(tuple(ty.shape)).astype(np.float32)
    ty.backward(torch.tensor(dy))
    gp = dict(p, input_size=list(x_shape[1:3]))
    dx = (getattr(OPS["max_pool2d_grad"], impl))(None, gp, x, dy)
    assert dx.dtype == np.float32
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_max_pool2d_grad_finite_differences():
    rng = np.random.default_rng(4)
    p = dict(POOL_CASES[1][2], input_size=[9, 7])
    x = rng.standard_normal((1, 9, 7, 2))
    pool = OPS["max_pool2d"].ref
    dy = rng.standard_normal(pool(None, p, x.astype(np.float32)).shape)
    dx = OPS["max_pool2d_grad"].ref(None, p, x.astype(np.float32), dy.astype(np.float32))
    eps = 1e-3
    for idx in [(0, 0, 0, 0), (0, 4, 3, 1), (0, 8, 6, 0), (0, 5, 2, 1)]:
        up, down = x.copy(), x.copy()
        up[idx] += eps
        down[idx] -= eps
        fd = np.vdot(pool(None, p, up) - pool(None, p, down).astype(np.float64), dy) / (2 * eps)
        assert fd == pytest.approx(dx[idx], rel=1e-2, abs=1e-3)


@pytest.mark.parametrize("include_pad", [False, True])
@pytest.mark.parametrize("name,x_shape,p", POOL_CASES, ids=[c[0] for c in POOL_CASES])
def test_avg_pool2d_grad_matches_torch(name, x_shape, p, include_pad):
    rng = np.random.default_rng(5)
    x = rng.standard_normal(x_shape).astype(np.float32)
    tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    ty = torch_pool("avg", tx, p, include_pad)
    dy = rng.standard_normal(tuple(ty.shape)).astype(np.float32)
    ty.backward(torch.tensor(dy, dtype=torch.float64))
    gp = dict(p, input_size=list(x_shape[1:3]), count_include_pad=include_pad)
    dx = OPS["avg_pool2d_grad"].ref(None, gp, dy)
    assert dx.dtype == np.float32 and rel(dx, tx.grad.numpy()) < 1e-6
    # adjoint of volvox's own forward
    v = rng.standard_normal(x_shape).astype(np.float32)
    assert np.vdot(OPS["avg_pool2d"].ref(None, gp, v).astype(np.float64), dy) == pytest.approx(
        np.vdot(dx.astype(np.float64), v), rel=1e-5)


def test_global_avg_pool_grad_matches_torch():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 5, 7, 3))
    tx = torch.tensor(x, requires_grad=True)
    ty = tx.mean(dim=(1, 2), keepdim=True)
    dy = rng.standard_normal(tuple(ty.shape)).astype(np.float32)
    ty.backward(torch.tensor(dy, dtype=torch.float64))
    dx = OPS["global_avg_pool_grad"].ref(None, {"input_size": [5, 7]}, dy)
    assert dx.shape == x.shape and rel(dx, tx.grad.numpy()) < 1e-6


# ------------------------------------------------------------------ a small CNN, end to end
class SmallCNN(torch.nn.Module):
    """Every conv / pool the CNN backward covers: a 3x3 stride-2 conv, a depthwise 3x3 and a 1x1 conv
    (fused into one dwpw_conv2d by the compiler), a dilated grouped conv in a residual (its add and ReLU
    fused into add_n), max pooling (ceil mode: a partial window), average pooling, a global average pool,
    and a two-layer head (linear + ReLU fused into linear_act)."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.conv1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pw = nn.Conv2d(8, 12, 1)
        self.grouped = nn.Conv2d(12, 12, 3, padding=2, dilation=2, groups=2)
        self.pool = nn.MaxPool2d(2, ceil_mode=True)
        self.avg = nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.hidden = nn.Linear(12, 10)
        self.fc = nn.Linear(10, 5)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.pw(F.relu(self.dw(x))))
        x = self.pool(F.relu(self.grouped(x) + x))
        x = self.gap(self.avg(x))
        return self.fc(F.relu(self.hidden(torch.flatten(x, 1))))


BATCH, IMAGE = 4, (15, 13)  # odd sizes: stride 2 drops an edge, the 2x2 pool keeps a partial window


def volvox_name(param: str) -> str:
    """The ONNX importer's name of a torch parameter (``conv1.weight`` -> ``/conv1/Conv.weight``)."""
    module, kind = param.split(".")
    return f"/{module}/{'Gemm' if module in ('hidden', 'fc') else 'Conv'}.{kind}"


def to_volvox_layout(name: str, grad: np.ndarray) -> np.ndarray:
    """A torch conv weight's (out, in, kh, kw) as volvox's (out, kh, kw, in); others as they are."""
    return grad.transpose(0, 2, 3, 1) if grad.ndim == 4 else grad


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    """(torch net, its ONNX file, a batch (x, labels, regression target))."""
    torch.manual_seed(0)
    net = SmallCNN().eval()
    path = tmp_path_factory.mktemp("cnn") / "small_cnn.onnx"
    torch.onnx.export(net, (torch.zeros(BATCH, 3, *IMAGE),), str(path), opset_version=17, input_names=["x"],
                      output_names=["logits"], dynamo=False)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((BATCH, 3, *IMAGE)).astype(np.float32)
    labels = np.array([1, 4, 0, 2], np.int64)
    target = rng.standard_normal((BATCH, 5)).astype(np.float32)
    return net, path, (x, labels, target)


def torch_grads(net, batch, loss: str) -> tuple[float, dict[str, np.ndarray]]:
    """torch's loss and every parameter's gradient (float64 copies of the net) in volvox's names and layouts."""
    x, labels, target = batch
    net64 = type(net)().double()
    net64.load_state_dict(net.state_dict())
    logits = net64(torch.tensor(x, dtype=torch.float64))
    value = F.cross_entropy(logits, torch.tensor(labels)) if loss == "cross_entropy" else \
        F.mse_loss(logits, torch.tensor(target, dtype=torch.float64))
    value.backward()
    return float(value), {volvox_name(n): to_volvox_layout(n, p.grad.numpy()) for n, p in net64.named_parameters()}


def with_loss(graph, loss: str):
    """``graph`` (output ``logits``) with the loss appended: a ``loss`` output over a new ``labels`` (int64
    (batch,)) or ``target`` (float32 (batch, 5)) input."""
    from volvox.ir.graph import Graph, Node, TensorSpec
    from volvox.ops import validate
    if loss == "cross_entropy":
        extra = TensorSpec("labels", (BATCH,), "int64")
        node = Node("loss", "cross_entropy", {"logits": "logits", "labels": "labels"}, {"loss": "loss", "lse": "loss/lse"})
    else:
        extra = TensorSpec("target", (BATCH, 5), "float32")
        node = Node("loss", "mse", {"x": "logits", "target": "target"}, {"loss": "loss"})
    out = Graph(list(graph.inputs) + [extra], dict(graph.weights), list(graph.nodes) + [node], ["loss"])
    validate(out)
    return out


def volvox_grads(path, batch, loss: str, optimize: bool, checkpoints=None) -> tuple[float, dict[str, np.ndarray], set]:
    """volvox's loss, every parameter's gradient, and the ops of the forward graph it differentiated
    (``checkpoints``: differentiate's, the forward tensors kept for the backward)."""
    import volvox
    from volvox.compile.autodiff import differentiate, grad_name
    from volvox.ops.context import RunContext
    from volvox.runtime.executor import Executor
    x, labels, target = batch
    model = volvox.load(path, optimize=optimize)
    weights = {name: w for (_, w), name in zip(model.executor.weight_slots, model.graph.weights)}
    names = list(weights)
    train = differentiate(with_loss(model.graph, loss), "loss", names, checkpoints)
    feeds = {"x": x, **({"labels": labels} if loss == "cross_entropy" else {"target": target})}
    out = Executor(train, weights).run(RunContext(), feeds)
    return float(out["loss"]), {n: out[grad_name(n)] for n in names}, {node.op for node in model.graph.nodes}


@pytest.mark.parametrize("loss", ["cross_entropy", "mse"])
@pytest.mark.parametrize("optimize", [False, True], ids=["as_imported", "compiled"])
def test_small_cnn_gradients_match_torch(cnn, loss, optimize):
    """Every parameter's gradient within 1e-4 relative of torch's, for the graph as imported (separate ReLU
    nodes) and as compiled (ReLU fused into the convs, depthwise + 1x1 fused into one dwpw_conv2d)."""
    net, path, batch = cnn
    want_loss, want = torch_grads(net, batch, loss)
    got_loss, got, ops = volvox_grads(path, batch, loss, optimize)
    assert {"dwpw_conv2d", "add_n", "linear_act"} <= ops if optimize else "relu" in ops
    assert ("relu" in ops) != optimize
    assert got_loss == pytest.approx(want_loss, rel=1e-5)
    assert set(got) == set(want)
    for name in want:
        assert got[name].shape == want[name].shape, name
        assert rel(got[name], want[name]) < 1e-4, f"{name}: relative error {rel(got[name], want[name]):.2e}"


@pytest.mark.parametrize("optimize", [False, True], ids=["as_imported", "compiled"])
def test_small_cnn_recomputed_activations_give_the_same_gradients(cnn, optimize):
    """Checkpointing with no activation kept: every backward read is recomputed from the input and weights,
    and the gradients keep their bits."""
    net, path, batch = cnn
    kept = volvox_grads(path, batch, "cross_entropy", optimize)
    recomputed = volvox_grads(path, batch, "cross_entropy", optimize, checkpoints=[])
    assert kept[0] == recomputed[0]
    for name, grad in kept[1].items():
        np.testing.assert_array_equal(recomputed[1][name], grad, err_msg=name)


def test_small_cnn_sgd_steps_follow_torch(cnn):
    """Full-parameter training: every weight of the compiled CNN made a graph input (trainable_graph), three
    SGD steps that change only the feeds; the losses and the final parameters follow torch's."""
    import volvox
    from volvox.compile.autodiff import differentiate, grad_name
    from volvox.ops.context import RunContext
    from volvox.runtime.executor import Executor
    from volvox.train.graph import trainable_graph
    net, path, (x, labels, _) = cnn
    model = volvox.load(path)
    weights = {name: w for (_, w), name in zip(model.executor.weight_slots, model.graph.weights)}
    names = list(weights)
    graph, frozen = trainable_graph(model.graph, weights, names)
    executor = Executor(differentiate(with_loss(graph, "cross_entropy"), "loss", names), frozen)
    params = {n: np.array(weights[n], np.float32) for n in names}
    net64 = type(net)().double()
    net64.load_state_dict(net.state_dict())
    sgd = torch.optim.SGD(net64.parameters(), lr=0.5)
    lr = np.float32(0.5)
    for _ in range(3):
        out = executor.run(RunContext(), {"x": x, "labels": labels, **params})
        sgd.zero_grad()
        want = F.cross_entropy(net64(torch.tensor(x, dtype=torch.float64)), torch.tensor(labels))
        want.backward()
        sgd.step()
        assert float(out["loss"]) == pytest.approx(float(want), rel=1e-5)
        params = {n: p - lr * out[grad_name(n)] for n, p in params.items()}
    for n, p in net64.named_parameters():
        assert rel(params[volvox_name(n)], to_volvox_layout(n, p.detach().numpy())) < 1e-5, n


class InvertedBottleneck(torch.nn.Module):
    """MobileNetV2's block: a 1x1 expand conv large enough (2 MB out) for the compiler to fuse it with the
    depthwise and project convs into one expand_dwpw_conv2d, ReLU6 after the first two, a residual."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.expand = nn.Conv2d(16, 128, 1)
        self.dw = nn.Conv2d(128, 128, 3, padding=1, groups=128)
        self.project = nn.Conv2d(128, 16, 1)
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        x = self.stem(x)
        x = x + self.project(F.relu6(self.dw(F.relu6(self.expand(x)))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def test_inverted_bottleneck_gradients_match_torch(tmp_path):
    """The compiled graph's expand_dwpw_conv2d (middle tensors recomputed) gives torch's gradients."""
    torch.manual_seed(1)
    net = InvertedBottleneck().eval()
    path = tmp_path / "bottleneck.onnx"
    torch.onnx.export(net, (torch.zeros(4, 3, 32, 32),), str(path), opset_version=13, input_names=["x"],
                      output_names=["logits"], dynamo=False)
    rng = np.random.default_rng(3)
    batch = (rng.standard_normal((4, 3, 32, 32)).astype(np.float32), np.array([0, 3, 1, 4], np.int64), None)
    want_loss, want = torch_grads(net, batch, "cross_entropy")
    got_loss, got, ops = volvox_grads(path, batch, "cross_entropy", optimize=True)
    assert "expand_dwpw_conv2d" in ops
    assert got_loss == pytest.approx(want_loss, rel=1e-5)
    for name in want:
        assert rel(got[name], want[name]) < 1e-4, f"{name}: relative error {rel(got[name], want[name]):.2e}"


# ------------------------------------------------------------------ fused nodes through differentiate
def act(t, name):
    return {"none": lambda v: v, "relu": F.relu, "relu6": F.relu6}[name](t)


def differentiate_one(op: str, inputs: dict[str, np.ndarray], params: dict) -> tuple[dict, np.ndarray]:
    """Every input's gradient of mse(node(inputs), target) through differentiate + the executor, and the
    target used (a fixed random one)."""
    from volvox.compile.autodiff import differentiate, grad_name
    from volvox.ir.graph import Graph, Node, TensorSpec
    from volvox.ops import validate
    from volvox.ops.context import RunContext
    from volvox.runtime.executor import Executor
    specs = [TensorSpec(k, v.shape, "float32") for k, v in inputs.items()]
    probe = Graph(specs, {}, [Node("n", op, {k: k for k in inputs}, {"y": "y"}, params)], ["y"])
    validate(probe)
    y_shape = probe.specs["y"].shape
    target = np.random.default_rng(9).standard_normal(y_shape).astype(np.float32)
    graph = Graph(specs + [TensorSpec("target", y_shape, "float32")], {}, probe.nodes + [
        Node("loss", "mse", {"x": "y", "target": "target"}, {"loss": "loss"})], ["loss"])
    validate(graph)
    out = Executor(differentiate(graph, "loss", list(inputs)), {}).run(RunContext(), {**inputs, "target": target})
    return {k: out[grad_name(k)] for k in inputs}, target


def torch_inputs(inputs):
    return {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in inputs.items()}


def test_dwpw_and_expand_dwpw_backward_match_torch():
    """The compiler's fused depthwise -> 1x1 pair and expand -> depthwise -> 1x1 triple (ReLU6 fused in each
    conv): their backward recomputes the middle tensors and matches torch on the unfused convs."""
    rng = np.random.default_rng(10)
    r = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    expand = dict(activation="relu6")
    depthwise = dict(groups=8, strides=[2, 2], pads=[1, 1, 1, 0], activation="relu6")
    pointwise = dict(activation="relu")
    cases = [
        ("dwpw_conv2d", dict(x=r(2, 7, 6, 8), dw_weight=r(8, 3, 3, 1), dw_bias=r(8), weight=r(5, 1, 1, 8), bias=r(5)),
         dict(pointwise, depthwise=depthwise)),
        ("expand_dwpw_conv2d", dict(x=r(2, 7, 6, 3), ex_weight=r(8, 1, 1, 3), ex_bias=r(8), dw_weight=r(8, 3, 3, 1),
                                    dw_bias=r(8), weight=r(5, 1, 1, 8), bias=r(5)),
         dict(pointwise, depthwise=depthwise, expand=expand)),
    ]
    for op, inputs, params in cases:
        got, target = differentiate_one(op, inputs, params)
        t = torch_inputs(inputs)
        x = t["x"]
        if op == "expand_dwpw_conv2d":
            x = act(torch_conv(x, t["ex_weight"], t["ex_bias"], expand), "relu6")
        mid = act(torch_conv(x, t["dw_weight"], t["dw_bias"], depthwise), "relu6")
        y = act(torch_conv(mid, t["weight"], t["bias"], pointwise), "relu")
        F.mse_loss(y, torch.tensor(target, dtype=torch.float64)).backward()
        for k in inputs:
            assert rel(got[k], t[k].grad.numpy()) < 1e-5, f"{op} {k}: {rel(got[k], t[k].grad.numpy()):.2e}"


@pytest.mark.parametrize("op, params", [
    ("max_pool2d", dict(kernel=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], activation="relu")),
    ("avg_pool2d", dict(kernel=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], activation="relu6", count_include_pad=True)),
    ("global_avg_pool", {}),
    ("clip", dict(min=0.0, max=6.0)),
])
def test_pool_and_clip_backward_match_torch(op, params):
    x = (np.random.default_rng(11).standard_normal((2, 7, 9, 3)) * 4).astype(np.float32)
    got, target = differentiate_one(op, {"x": x}, params)
    t = torch_inputs({"x": x})["x"]
    if op == "global_avg_pool":
        y = t.mean(dim=(1, 2), keepdim=True)
    elif op == "clip":
        y = F.relu6(t)
    else:
        y = act(torch_pool(op[:3], t, params, params.get("count_include_pad", False)), params["activation"])
    F.mse_loss(y, torch.tensor(target, dtype=torch.float64)).backward()
    assert rel(got["x"], t.grad.numpy()) < 1e-5


def test_conv_and_pool_backward_refuse_a_symbolic_image_size():
    """The grad ops record the input's height and width; a symbolic one is refused by name, never guessed."""
    from volvox.compile.autodiff import differentiate
    from volvox.errors import UnsupportedError
    from volvox.ir.graph import Graph, Node, TensorSpec
    from volvox.ops import validate
    for op, inputs, params in [("conv2d", dict(x=(1, "h", "w", 2), weight=(3, 3, 3, 2)), dict(strides=[2, 2])),
                               ("max_pool2d", dict(x=(1, "h", "w", 2)), dict(kernel=[2, 2], strides=[2, 2]))]:
        specs = [TensorSpec(k, s, "float32") for k, s in inputs.items()]
        graph = Graph(specs + [TensorSpec("target", (1, "oh", "ow", 3 if op == "conv2d" else 2), "float32")], {}, [
            Node("n", op, {k: k for k in inputs}, {"y": "y"}, params),
            Node("loss", "mse", {"x": "y", "target": "target"}, {"loss": "loss"})], ["loss"])
        validate(graph)
        with pytest.raises(UnsupportedError, match="spatial size"):
            differentiate(graph, "loss", ["x"])


@pytest.mark.parametrize("activation", ["relu", "relu6", "gelu", "gelu_tanh", "silu"])
def test_fused_activation_nodes_backward_match_torch(activation):
    """The compiler's add_n (a residual's add and ReLU; broadcast inputs), linear_act and concat_act: ReLU6
    taken back from the output, ReLU / SiLU / GELU from the recomputed pre-activation."""
    torch_act = {"relu": F.relu, "relu6": F.relu6, "gelu": F.gelu, "silu": F.silu,
                 "gelu_tanh": lambda v: F.gelu(v, approximate="tanh")}[activation]
    rng = np.random.default_rng(12)
    r = lambda *s: (rng.standard_normal(s) * 3).astype(np.float32)  # noqa: E731
    for op, inputs, params in [("add_n", dict(x0=r(2, 5, 3, 4), x1=r(2, 5, 3, 4), x2=r(4)), {}),
                               ("linear_act", dict(x=r(6, 7), weight=r(5, 7), bias=r(5)), {}),
                               ("concat_act", dict(x0=r(2, 3, 4, 5), x1=r(2, 3, 4, 2)), {"axis": 3})]:
        got, target = differentiate_one(op, inputs, dict(params, activation=activation))
        t = torch_inputs(inputs)
        z = {"add_n": lambda: t["x0"] + t["x1"] + t["x2"], "linear_act": lambda: F.linear(t["x"], t["weight"], t["bias"]),
             "concat_act": lambda: torch.cat([t["x0"], t["x1"]], dim=3)}[op]()
        F.mse_loss(torch_act(z), torch.tensor(target, dtype=torch.float64)).backward()
        for k in inputs:
            assert rel(got[k], t[k].grad.numpy()) < 1e-5, f"{op} {activation} {k}: {rel(got[k], t[k].grad.numpy()):.2e}"


@pytest.mark.parametrize("op, inputs, params", [
    ("conv2d_grad_input", dict(dy=(1, 4, 4, 6), weight=(6, 3, 3, 5)), dict(strides=[2, 2], input_size=[11, 11])),
    ("conv2d_grad_weight", dict(x=(1, 7, 7, 5), dy=(1, 4, 4, 6)), dict(kernel=[3, 3])),
    ("max_pool2d_grad", dict(x=(1, 7, 7, 2), dy=(1, 3, 3, 2)), dict(kernel=[2, 2], strides=[2, 2], input_size=[6, 6])),
    ("avg_pool2d_grad", dict(dy=(1, 3, 3, 2)), dict(kernel=[2, 2], strides=[2, 2], input_size=[8, 8])),
])
def test_grad_ops_refuse_inconsistent_shapes(op, inputs, params):
    """A grad op whose dy is not the forward output of the recorded geometry is a ShapeError naming the node."""
    from volvox.errors import ShapeError
    from volvox.ir.graph import Graph, Node, TensorSpec
    from volvox.ops import validate
    outputs = {"conv2d_grad_weight": "dweight"}.get(op, "dx")
    graph = Graph([TensorSpec(k, s, "float32") for k, s in inputs.items()], {},
                  [Node("bad", op, {k: k for k in inputs}, {outputs: "out"}, params)], ["out"])
    with pytest.raises(ShapeError, match="bad"):
        validate(graph)
