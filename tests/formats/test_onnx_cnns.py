"""torchvision-style CNNs with random weights (ResNet, DenseNet, Inception, MobileNet v2 / v3, ShuffleNet
v2, SqueezeNet, VGG, EfficientNet: their characteristic blocks, built here in torch at small sizes),
exported by torch.onnx at opsets 7, 9, 13, 17 and 20, run by volvox and by onnxruntime on the same input:
outputs equal within 1e-4 of the largest output. BatchNorm running statistics are random too, so
folding them into the convs is checked. Building and exporting the networks takes ~20 s (slow)."""

import numpy as np
import pytest

import volvox

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
nn = torch.nn
OPSETS = (7, 9, 13, 17, 20)   # the legacy exporter's range, ends and middle


def conv_bn(cin, cout, k=3, stride=1, groups=1, act=nn.ReLU):
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, act()) if act else nn.Sequential(*layers)


class ResNet(nn.Module):
    """Stem (7x7 / 2, max pool), two BasicBlocks (the second downsampling with a 1x1 shortcut), avg pool, fc."""

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.body = nn.Sequential(conv_bn(cin, cout, stride=stride), conv_bn(cout, cout, act=None))
            self.short = conv_bn(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else nn.Identity()

        def forward(self, x):
            return torch.relu(self.body(x) + self.short(x))

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, 8, 7, 2), nn.MaxPool2d(3, 2, 1))
        self.blocks = nn.Sequential(self.Block(8, 8, 1), self.Block(8, 16, 2))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))


class DenseNet(nn.Module):
    """Dense layers (BN-ReLU-conv1x1-BN-ReLU-conv3x3, concatenated), a transition (BN-ReLU-conv-avgpool)."""

    class Layer(nn.Module):
        def __init__(self, cin, growth):
            super().__init__()
            self.body = nn.Sequential(nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, 2 * growth, 1, bias=False),
                                      nn.BatchNorm2d(2 * growth), nn.ReLU(), nn.Conv2d(2 * growth, growth, 3, 1, 1, bias=False))

        def forward(self, x):
            return torch.cat([x, self.body(x)], 1)

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(conv_bn(3, 8, 3, 2), self.Layer(8, 4), self.Layer(12, 4),
                                      nn.BatchNorm2d(16), nn.ReLU(), nn.Conv2d(16, 8, 1, bias=False), nn.AvgPool2d(2, 2),
                                      self.Layer(8, 4), nn.BatchNorm2d(12), nn.ReLU())
        self.fc = nn.Linear(12, 10)

    def forward(self, x):
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


class Inception(nn.Module):
    """An Inception block: 1x1, 1x1-3x3, 1x1-3x3-3x3 and pool-1x1 branches, concatenated."""

    def __init__(self):
        super().__init__()
        self.stem = conv_bn(3, 8, 3, 2)
        self.b1 = conv_bn(8, 4, 1)
        self.b2 = nn.Sequential(conv_bn(8, 4, 1), conv_bn(4, 6))
        self.b3 = nn.Sequential(conv_bn(8, 2, 1), conv_bn(2, 4), conv_bn(4, 4))
        self.b4 = nn.Sequential(nn.MaxPool2d(3, 1, 1), conv_bn(8, 4, 1))
        self.fc = nn.Linear(18, 10)

    def forward(self, x):
        x = self.stem(x)
        y = torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1)
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))


class MobileNetV2(nn.Module):
    """Inverted residuals: 1x1 expand, 3x3 depthwise, 1x1 project, ReLU6, residual where shapes match."""

    class Block(nn.Module):
        def __init__(self, cin, cout, stride, expand):
            super().__init__()
            mid = cin * expand
            self.body = nn.Sequential(conv_bn(cin, mid, 1, act=nn.ReLU6), conv_bn(mid, mid, 3, stride, mid, act=nn.ReLU6),
                                      conv_bn(mid, cout, 1, act=None))
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            return x + self.body(x) if self.residual else self.body(x)

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(conv_bn(3, 8, 3, 2, act=nn.ReLU6), self.Block(8, 8, 1, 4), self.Block(8, 12, 2, 4),
                                 self.Block(12, 12, 1, 4), conv_bn(12, 24, 1, act=nn.ReLU6))
        self.fc = nn.Sequential(nn.Dropout(0.2), nn.Linear(24, 10))

    def forward(self, x):
        return self.fc(nn.functional.adaptive_avg_pool2d(self.net(x), 1).flatten(1))


class MobileNetV3(nn.Module):
    """Hard-swish blocks with squeeze-excitation (avg pool, 1x1 ReLU, 1x1 hard-sigmoid, scale)."""

    class SE(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.fc1, self.fc2 = nn.Conv2d(c, c // 2, 1), nn.Conv2d(c // 2, c, 1)

        def forward(self, x):
            s = nn.functional.adaptive_avg_pool2d(x, 1)
            return x * nn.functional.hardsigmoid(self.fc2(torch.relu(self.fc1(s))))

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(conv_bn(3, 8, 3, 2, act=nn.Hardswish), conv_bn(8, 16, 1, act=nn.Hardswish),
                                 conv_bn(16, 16, 5, 2, 16, act=nn.Hardswish), self.SE(16), conv_bn(16, 8, 1, act=None))
        self.head = nn.Sequential(nn.Linear(8, 16), nn.Hardswish(), nn.Linear(16, 10))

    def forward(self, x):
        return self.head(nn.functional.adaptive_avg_pool2d(self.net(x), 1).flatten(1))


class ShuffleNetV2(nn.Module):
    """Channel split, a branch (1x1, depthwise 3x3, 1x1), concat and channel shuffle (5-D reshape + transpose)."""

    @staticmethod
    def shuffle(x, groups=2):
        n, c, h, w = x.shape
        return x.view(n, groups, c // groups, h, w).transpose(1, 2).reshape(n, c, h, w)

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, 16, 3, 2), nn.MaxPool2d(3, 2, 1))
        self.branch = nn.Sequential(conv_bn(8, 8, 1), conv_bn(8, 8, 3, 1, 8, act=None), conv_bn(8, 8, 1))
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.stem(x)
        a, b = x.chunk(2, dim=1)
        x = self.shuffle(torch.cat([a, self.branch(b)], 1))
        return self.fc(x.mean([2, 3]))


class SqueezeNet(nn.Module):
    """Fire modules (squeeze 1x1, expand 1x1 | 3x3, concatenated), ceil-mode max pools, a conv classifier."""

    class Fire(nn.Module):
        def __init__(self, cin, squeeze, expand):
            super().__init__()
            self.squeeze = nn.Conv2d(cin, squeeze, 1)
            self.e1, self.e3 = nn.Conv2d(squeeze, expand, 1), nn.Conv2d(squeeze, expand, 3, padding=1)

        def forward(self, x):
            s = torch.relu(self.squeeze(x))
            return torch.cat([torch.relu(self.e1(s)), torch.relu(self.e3(s))], 1)

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 16, 3, 2), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True),
                                      self.Fire(16, 4, 8), nn.MaxPool2d(3, 2, ceil_mode=True), self.Fire(16, 4, 8))
        self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(16, 10, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))

    def forward(self, x):
        return torch.flatten(self.classifier(self.features(x)), 1)


class VGG(nn.Module):
    """conv-ReLU stacks and max pools, then a Linear-ReLU-Dropout-Linear classifier on the flattened map."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                                      nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Linear(16 * 8 * 8, 32), nn.ReLU(), nn.Dropout(), nn.Linear(32, 10))

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


class EfficientNet(nn.Module):
    """MBConv blocks with SiLU and squeeze-excitation (SiLU / sigmoid), a residual, a 1x1 head."""

    class MBConv(nn.Module):
        def __init__(self, cin, cout, stride, expand, k):
            super().__init__()
            mid = cin * expand
            self.expand = conv_bn(cin, mid, 1, act=nn.SiLU)
            self.dw = conv_bn(mid, mid, k, stride, mid, act=nn.SiLU)
            self.se1, self.se2 = nn.Conv2d(mid, max(cin // 4, 1), 1), nn.Conv2d(max(cin // 4, 1), mid, 1)
            self.project = conv_bn(mid, cout, 1, act=None)
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            y = self.dw(self.expand(x))
            s = torch.sigmoid(self.se2(nn.functional.silu(self.se1(nn.functional.adaptive_avg_pool2d(y, 1)))))
            y = self.project(y * s)
            return x + y if self.residual else y

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(conv_bn(3, 8, 3, 2, act=nn.SiLU), self.MBConv(8, 8, 1, 4, 3), self.MBConv(8, 12, 2, 4, 5),
                                 conv_bn(12, 32, 1, act=nn.SiLU))
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.net(x), 1), 1))


ARCHITECTURES = {"resnet": ResNet, "densenet": DenseNet, "inception": Inception, "mobilenet_v2": MobileNetV2,
                 "mobilenet_v3": MobileNetV3, "shufflenet_v2": ShuffleNetV2, "squeezenet": SqueezeNet, "vgg": VGG,
                 "efficientnet": EfficientNet}


def randomize_batch_norms(net: nn.Module, gen: torch.Generator) -> None:
    """Random BatchNorm affine parameters and running statistics (fresh ones are the identity)."""
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.weight.data = torch.rand(m.num_features, generator=gen) + 0.5
            m.bias.data = torch.randn(m.num_features, generator=gen) * 0.1
            m.running_mean = torch.randn(m.num_features, generator=gen) * 0.1
            m.running_var = torch.rand(m.num_features, generator=gen) + 0.5


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """{(architecture, opset): .onnx path}, each network built once with seeded random weights."""
    folder = tmp_path_factory.mktemp("cnns")
    paths = {}
    x = torch.zeros(1, 3, 32, 32)
    for name, cls in ARCHITECTURES.items():
        torch.manual_seed(0)
        net = cls()
        randomize_batch_norms(net, torch.Generator().manual_seed(1))
        net.eval()
        for opset in OPSETS:
            path = folder / f"{name}-{opset}.onnx"
            torch.onnx.export(net, (x,), str(path), opset_version=opset, input_names=["x"], output_names=["y"],
                              dynamo=False)
            paths[(name, opset)] = path
    return paths


@pytest.mark.slow
@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_cnn_equals_onnxruntime(exported, name, opset):
    path = exported[(name, opset)]
    x = np.random.default_rng(2).standard_normal((1, 3, 32, 32)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    model = volvox.load(path)
    got = next(iter(model.run({"x": x}).values()))
    assert got.shape == want.shape
    err = np.abs(got - want).max() / np.abs(want).max()
    assert err <= 1e-4, f"{name} opset {opset}: relative error {err:.2e}"
    assert any(node.op in ("conv2d", "dwpw_conv2d", "expand_dwpw_conv2d") for node in model.graph.nodes), \
        "the convolutions run on volvox's conv kernels"


@pytest.mark.slow
@pytest.mark.parametrize("name, copies", [("densenet", 0), ("inception", 0), ("shufflenet_v2", 1), ("squeezenet", 0)])
def test_concat_inputs_are_written_in_place(exported, name, copies):
    """The convs and pools a concat joins write straight into its buffer (runtime/plan.py channel
    slices; ShuffleNet's split half is a slice of another tensor: copied), still onnxruntime's outputs."""
    path = exported[(name, 17)]
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    model = volvox.load(path)
    got = next(iter(model.run({"x": x}).values()))
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()
    plan = model._plan.plan
    assert plan._slices and [op for _, op in plan.step_nodes].count("concat") == copies


QUANTIZED = [("qdq", name, activations) for name in ("resnet", "mobilenet_v2", "efficientnet") for activations in ("uint8", "int8")] + \
            [("qoperator", name, activations) for name in ("vgg", "resnet") for activations in ("uint8", "int8")]


@pytest.mark.slow
@pytest.mark.parametrize("form, name, activations", QUANTIZED)
def test_quantized_cnn_equals_onnxruntime(exported, tmp_path, form, name, activations):
    """onnxruntime's static quantization of the opset-13 export (per-channel int8 weights; QDQ pairs, or
    QLinearConv / QuantizeLinear / DequantizeLinear): volvox runs it as onnxruntime does."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    rng = np.random.default_rng(3)

    class Calibration(quantization.CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"x": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.batches, None)

    path = tmp_path / f"{name}-{form}-{activations}.onnx"
    quantization.quantize_static(
        str(exported[(name, 13)]), str(path), Calibration(), per_channel=True, weight_type=quantization.QuantType.QInt8,
        quant_format=quantization.QuantFormat.QDQ if form == "qdq" else quantization.QuantFormat.QOperator,
        activation_type=quantization.QuantType.QUInt8 if activations == "uint8" else quantization.QuantType.QInt8,
        op_types_to_quantize=None if form == "qdq" else ["Conv", "MaxPool"])
    x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    float_out = ort.InferenceSession(str(exported[(name, 13)]), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = next(iter(volvox.load(path).run({"x": x}).values()))
    scale = np.abs(want).max()
    assert np.abs(got - want).max() / scale <= 1e-4, f"{name} {form} {activations}"
    assert np.abs(float_out - want).max() / scale > 1e-4, "the quantized model differs from the float one"


class Recurrent(nn.Module):
    """A 2-layer bidirectional LSTM, a GRU and a ReLU RNN over its output (a CRNN's sequence head)."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(6, 5, num_layers=2, bidirectional=True)
        self.gru = nn.GRU(10, 4)
        self.rnn = nn.RNN(4, 3, nonlinearity="relu", bidirectional=True)

    def forward(self, x):
        return self.rnn(self.gru(self.lstm(x)[0])[0])[0]


@pytest.mark.parametrize("opset", (9, 14, 20))
def test_recurrent_layers_equal_onnxruntime(tmp_path, opset):
    torch.manual_seed(0)
    net = Recurrent().eval()
    path = tmp_path / f"recurrent-{opset}.onnx"
    torch.onnx.export(net, (torch.zeros(7, 2, 6),), str(path), opset_version=opset, input_names=["x"], output_names=["y"],
                      dynamo=False)
    x = np.random.default_rng(4).standard_normal((7, 2, 6)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = next(iter(volvox.load(path).run({"x": x}).values()))
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-5 * max(np.abs(want).max(), 1.0)


class DenseBlock(nn.Module):
    """torchvision's dense block: each of ``layers`` convs reads the concat of the input and every
    layer before it, the block returns the concat of all (DenseNet-121's last block concatenates 17)."""

    def __init__(self, layers):
        super().__init__()
        self.convs = nn.ModuleList(nn.Sequential(nn.BatchNorm2d(2 + 2 * i), nn.ReLU(), nn.Conv2d(2 + 2 * i, 2, 3, 1, 1))
                                   for i in range(layers))

    def forward(self, x):
        features = [x]
        for conv in self.convs:
            features.append(conv(torch.cat(features, 1)))
        return torch.cat(features, 1)


@pytest.mark.parametrize("layers, opset", [(20, 9), (24, 17), (63, 17)])
def test_wide_concat_equals_onnxruntime(tmp_path, layers, opset):
    torch.manual_seed(0)
    net = DenseBlock(layers)
    randomize_batch_norms(net, torch.Generator().manual_seed(1))
    path = tmp_path / f"dense-{layers}.onnx"
    torch.onnx.export(net.eval(), (torch.zeros(1, 2, 6, 5),), str(path), opset_version=opset, input_names=["x"],
                      output_names=["y"], dynamo=False)
    x = np.random.default_rng(5).standard_normal((1, 2, 6, 5)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    model = volvox.load(path)
    got = model.run({"x": x})["y"]
    assert got.shape == want.shape == (1, 2 + 2 * layers, 6, 5)
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()
    assert model._plan is not None and model._plan.plan is not None, "the block runs as a native step plan"


class Residuals(nn.Module):
    """Residual sums a conv step takes over (the conv's output read by the add alone, the add's other
    input read elsewhere too; with and without the ReLU after) and one it cannot (that output is
    also a graph output)."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 16, 3, padding=1), nn.Conv2d(16, 16, 3, padding=1)
        self.c3, self.c4, self.c5 = nn.Conv2d(16, 24, 1), nn.Conv2d(16, 24, 3, padding=1), nn.Conv2d(24, 24, 1)

    def forward(self, x):
        a = torch.relu(self.c1(x))
        y = torch.relu(self.c2(a) + a)      # a: also c2's input
        z = self.c4(y) + self.c3(y)         # two convs' outputs, no ReLU
        e = self.c5(z)
        return torch.relu(z + e), e         # e: an output too


@pytest.mark.parametrize("opset", [9, 17])
def test_residual_adds_equal_onnxruntime(tmp_path, opset):
    torch.manual_seed(0)
    path = tmp_path / "residuals.onnx"
    torch.onnx.export(Residuals().eval(), (torch.zeros(1, 3, 10, 9),), str(path), opset_version=opset,
                      input_names=["x"], output_names=["y", "e"], dynamo=False)
    x = np.random.default_rng(6).standard_normal((1, 3, 10, 9)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    model = volvox.load(path)
    got = list(model.run({"x": x}).values())  # y, e
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        assert np.abs(g - w).max() <= 1e-4 * np.abs(w).max()
    ops = [op for _, op in model._plan.plan.step_nodes]
    assert ops.count("conv2d") == 5 and ops.count("add") + ops.count("add_n") == 1, ops  # two adds in conv steps


def test_concat_of_more_than_64_inputs_is_refused(tmp_path):
    net = DenseBlock(64)
    path = tmp_path / "dense-64.onnx"
    torch.onnx.export(net.eval(), (torch.zeros(1, 2, 4, 4),), str(path), opset_version=17, input_names=["x"],
                      output_names=["y"], dynamo=False)
    with pytest.raises(volvox.UnsupportedError, match="65 inputs"):
        volvox.load(path)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_cnn_with_a_dynamic_batch_equals_onnxruntime(tmp_path, name):
    """Exported with a symbolic batch: one model, re-planned for batches 1, 3 and 2."""
    torch.manual_seed(0)
    net = ARCHITECTURES[name]()
    randomize_batch_norms(net, torch.Generator().manual_seed(1))
    path = tmp_path / f"{name}-dynamic.onnx"
    torch.onnx.export(net.eval(), (torch.zeros(1, 3, 32, 32),), str(path), opset_version=13, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, dynamo=False)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    model = volvox.load(path)
    assert model.graph.inputs[0].shape[0] == "batch"
    for batch in (1, 3, 2):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 32, 32)).astype(np.float32)
        want = session.run(None, {"x": x})[0]
        got = next(iter(model.run({"x": x}).values()))
        assert got.shape == want.shape and np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


def test_dynamically_quantized_mlp_equals_onnxruntime(tmp_path):
    """onnxruntime's dynamic quantization (DynamicQuantizeLinear, MatMulInteger, int8 weights) of a small MLP."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).eval()
    path, quantized = tmp_path / "mlp.onnx", tmp_path / "mlp-dynamic.onnx"
    torch.onnx.export(net, (torch.zeros(4, 16),), str(path), opset_version=13, input_names=["x"], output_names=["y"],
                      dynamo=False)
    quantization.quantize_dynamic(str(path), str(quantized), weight_type=quantization.QuantType.QInt8)
    x = np.random.default_rng(5).standard_normal((4, 16)).astype(np.float32)
    want = ort.InferenceSession(str(quantized), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = volvox.load(quantized).run({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
