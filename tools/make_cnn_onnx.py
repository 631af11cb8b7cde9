"""Write torchvision-shaped CNNs with seeded random weights as .onnx files, for tools/bench_vision.py.

    python tools/make_cnn_onnx.py OUT_DIR [--opset 17] [--models resnet18 mobilenet_v2 squeezenet1_1 ...]

The networks are torchvision's ResNet-18, MobileNetV2, SqueezeNet 1.1, DenseNet-121, GoogLeNet
(Inception v1), MobileNetV3-Large, ShuffleNetV2 x1.0, VGG-11 and EfficientNet-B0 layer for layer
(built here in torch, since torchvision's wheels do not load beside every torch), at 224 x 224,
batch 1, in eval mode (dropout and GoogLeNet's auxiliary heads drop out), with random BatchNorm
statistics. Weights are random: these files time the runtime, not a classifier.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch import nn


def conv_bn(cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1, act=nn.ReLU) -> nn.Sequential:
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, act(inplace=True)) if act else nn.Sequential(*layers)


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(conv_bn(cin, cout, stride=stride), conv_bn(cout, cout, act=None))
        self.short = conv_bn(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x):
        return torch.relu(self.body(x) + self.short(x))


def resnet18() -> nn.Module:
    """ResNet-18: 7x7 stem, four stages of two BasicBlocks (64-128-256-512), average pool, fc 1000."""
    layers, cin = [conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)], 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
        cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        mid = cin * expand
        layers = [conv_bn(cin, mid, 1, act=nn.ReLU6)] if expand != 1 else []
        self.body = nn.Sequential(*layers, conv_bn(mid, mid, 3, stride, mid, act=nn.ReLU6), conv_bn(mid, cout, 1, act=None))
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


def mobilenet_v2() -> nn.Module:
    """MobileNetV2 (width 1.0): the 17 inverted residual blocks of torchvision's table, 1280-wide head."""
    table = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))
    layers, cin = [conv_bn(3, 32, 3, 2, act=nn.ReLU6)], 32
    for expand, cout, repeats, stride in table:
        for i in range(repeats):
            layers.append(InvertedResidual(cin, cout, stride if i == 0 else 1, expand))
            cin = cout
    return nn.Sequential(*layers, conv_bn(cin, 1280, 1, act=nn.ReLU6), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(1280, 1000))


class Fire(nn.Module):
    def __init__(self, cin: int, squeeze: int, expand: int):
        super().__init__()
        self.squeeze = nn.Sequential(nn.Conv2d(cin, squeeze, 1), nn.ReLU(inplace=True))
        self.e1 = nn.Sequential(nn.Conv2d(squeeze, expand, 1), nn.ReLU(inplace=True))
        self.e3 = nn.Sequential(nn.Conv2d(squeeze, expand, 3, padding=1), nn.ReLU(inplace=True))

    def forward(self, x):
        s = self.squeeze(x)
        return torch.cat([self.e1(s), self.e3(s)], 1)


def squeezenet1_1() -> nn.Module:
    """SqueezeNet 1.1: 3x3 / 2 stem, eight Fire modules between ceil-mode max pools, a conv classifier."""
    pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)  # noqa: E731
    return nn.Sequential(nn.Conv2d(3, 64, 3, 2), nn.ReLU(inplace=True), pool(), Fire(64, 16, 64), Fire(128, 16, 64), pool(),
                         Fire(128, 32, 128), Fire(256, 32, 128), pool(), Fire(256, 48, 192), Fire(384, 48, 192),
                         Fire(384, 64, 256), Fire(512, 64, 256), nn.Conv2d(512, 1000, 1), nn.ReLU(inplace=True),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten())


def dense_layer(cin: int, growth: int = 32, bottleneck: int = 4) -> nn.Sequential:
    mid = bottleneck * growth
    return nn.Sequential(nn.BatchNorm2d(cin), nn.ReLU(inplace=True), nn.Conv2d(cin, mid, 1, bias=False),
                         nn.BatchNorm2d(mid), nn.ReLU(inplace=True), nn.Conv2d(mid, growth, 3, 1, 1, bias=False))


class DenseBlock(nn.Module):
    def __init__(self, cin: int, repeats: int, growth: int = 32):
        super().__init__()
        self.layers = nn.ModuleList(dense_layer(cin + i * growth) for i in range(repeats))

    def forward(self, x):
        features = [x]
        for layer in self.layers:  # as torchvision: each layer reads the concat of all before it
            features.append(layer(torch.cat(features, 1)))
        return torch.cat(features, 1)


def densenet121() -> nn.Module:
    """DenseNet-121: growth 32, dense blocks of 6-12-24-16 layers (pre-activation BN-ReLU-conv) with
    halving transitions, final BN-ReLU, average pool, fc 1000."""
    layers, c = [conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)], 64
    for i, repeats in enumerate((6, 12, 24, 16)):
        layers.append(DenseBlock(c, repeats))
        c += 32 * repeats
        if i < 3:
            layers += [nn.BatchNorm2d(c), nn.ReLU(inplace=True), nn.Conv2d(c, c // 2, 1, bias=False), nn.AvgPool2d(2, 2)]
            c //= 2
    return nn.Sequential(*layers, nn.BatchNorm2d(c), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(c, 1000))


class Inception(nn.Module):
    def __init__(self, cin: int, c1: int, c3r: int, c3: int, c5r: int, c5: int, pool: int):
        super().__init__()
        self.b1 = conv_bn(cin, c1, 1)
        self.b2 = nn.Sequential(conv_bn(cin, c3r, 1), conv_bn(c3r, c3, 3))
        self.b3 = nn.Sequential(conv_bn(cin, c5r, 1), conv_bn(c5r, c5, 3))  # torchvision's "5x5" branch is 3x3
        self.b4 = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), conv_bn(cin, pool, 1))

    def forward(self, x):
        return torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1)


def googlenet() -> nn.Module:
    """GoogLeNet (Inception v1) as torchvision builds it: BN convs, nine Inception modules between
    ceil-mode max pools, no LRN, no auxiliary heads (eval), average pool, fc 1000."""
    pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)  # noqa: E731
    return nn.Sequential(
        conv_bn(3, 64, 7, 2), pool(), conv_bn(64, 64, 1), conv_bn(64, 192, 3), pool(),
        Inception(192, 64, 96, 128, 16, 32, 32), Inception(256, 128, 128, 192, 32, 96, 64), pool(),
        Inception(480, 192, 96, 208, 16, 48, 64), Inception(512, 160, 112, 224, 24, 64, 64),
        Inception(512, 128, 128, 256, 24, 64, 64), Inception(512, 112, 144, 288, 32, 64, 64),
        Inception(528, 256, 160, 320, 32, 128, 128), nn.MaxPool2d(2, 2, ceil_mode=True),
        Inception(832, 256, 160, 320, 32, 128, 128), Inception(832, 384, 192, 384, 48, 128, 128),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1024, 1000))


def make_divisible(v: float, divisor: int = 8) -> int:
    """torchvision's _make_divisible: round to a multiple of divisor, never below 90% of v."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


class SqueezeExcite(nn.Module):
    def __init__(self, c: int, squeeze: int, act=nn.ReLU, gate=nn.Hardsigmoid):
        super().__init__()
        self.body = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(c, squeeze, 1), act(inplace=True),
                                  nn.Conv2d(squeeze, c, 1), gate())

    def forward(self, x):
        return x * self.body(x)


class MobileV3Block(nn.Module):
    def __init__(self, cin: int, k: int, mid: int, cout: int, se: bool, act, stride: int):
        super().__init__()
        layers = [conv_bn(cin, mid, 1, act=act)] if mid != cin else []
        layers.append(conv_bn(mid, mid, k, stride, mid, act=act))
        if se:
            layers.append(SqueezeExcite(mid, make_divisible(mid // 4)))
        self.body = nn.Sequential(*layers, conv_bn(mid, cout, 1, act=None))
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


def mobilenet_v3_large() -> nn.Module:
    """MobileNetV3-Large: torchvision's 15-block table (3x3 / 5x5 depthwise, hard-sigmoid SE, ReLU /
    hardswish), 960-wide last conv, a 1280-wide hardswish classifier."""
    re, hs = nn.ReLU, nn.Hardswish
    table = ((3, 16, 16, False, re, 1), (3, 64, 24, False, re, 2), (3, 72, 24, False, re, 1),
             (5, 72, 40, True, re, 2), (5, 120, 40, True, re, 1), (5, 120, 40, True, re, 1),
             (3, 240, 80, False, hs, 2), (3, 200, 80, False, hs, 1), (3, 184, 80, False, hs, 1),
             (3, 184, 80, False, hs, 1), (3, 480, 112, True, hs, 1), (3, 672, 112, True, hs, 1),
             (5, 672, 160, True, hs, 2), (5, 960, 160, True, hs, 1), (5, 960, 160, True, hs, 1))
    layers, cin = [conv_bn(3, 16, 3, 2, act=hs)], 16
    for k, mid, cout, se, act, stride in table:
        layers.append(MobileV3Block(cin, k, mid, cout, se, act, stride))
        cin = cout
    return nn.Sequential(*layers, conv_bn(cin, 960, 1, act=hs), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(960, 1280), nn.Hardswish(inplace=True), nn.Linear(1280, 1000))


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    n, c, h, w = x.shape
    return x.view(n, groups, c // groups, h, w).transpose(1, 2).reshape(n, c, h, w)


class ShuffleBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        half = cout // 2
        self.stride = stride
        if stride > 1:
            self.left = nn.Sequential(conv_bn(cin, cin, 3, stride, cin, act=None), conv_bn(cin, half, 1))
        self.right = nn.Sequential(conv_bn(cin if stride > 1 else half, half, 1),
                                   conv_bn(half, half, 3, stride, half, act=None), conv_bn(half, half, 1))

    def forward(self, x):
        if self.stride == 1:
            a, b = x.chunk(2, dim=1)
            out = torch.cat([a, self.right(b)], 1)
        else:
            out = torch.cat([self.left(x), self.right(x)], 1)
        return channel_shuffle(out, 2)


class SpatialMean(nn.Module):
    def forward(self, x):
        return x.mean([2, 3])  # torchvision's ShuffleNetV2 head: ReduceMean, not a pool


def shufflenet_v2_x1_0() -> nn.Module:
    """ShuffleNetV2 x1.0: 3x3 / 2 stem and max pool, stages of 4-8-4 blocks (116-232-464 channels;
    split, concat, channel shuffle as reshape / transpose), 1024-wide last conv, spatial mean, fc 1000."""
    layers, cin = [conv_bn(3, 24, 3, 2), nn.MaxPool2d(3, 2, 1)], 24
    for cout, repeats in ((116, 4), (232, 8), (464, 4)):
        for i in range(repeats):
            layers.append(ShuffleBlock(cin, cout, 2 if i == 0 else 1))
            cin = cout
    return nn.Sequential(*layers, conv_bn(cin, 1024, 1), SpatialMean(), nn.Linear(1024, 1000))


def vgg11() -> nn.Module:
    """VGG-11 (configuration A, no BN): eight 3x3 convs between five max pools, 7x7 average pool,
    three fc layers 4096-4096-1000."""
    layers, cin = [], 3
    for v in (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"):
        if v == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers += [nn.Conv2d(cin, v, 3, padding=1), nn.ReLU(inplace=True)]
            cin = v
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(7), nn.Flatten(), nn.Linear(512 * 49, 4096), nn.ReLU(inplace=True),
                         nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Linear(4096, 1000))


class MBConv(nn.Module):
    def __init__(self, cin: int, cout: int, k: int, stride: int, expand: int):
        super().__init__()
        mid = cin * expand
        layers = [conv_bn(cin, mid, 1, act=nn.SiLU)] if expand != 1 else []
        layers += [conv_bn(mid, mid, k, stride, mid, act=nn.SiLU),
                   SqueezeExcite(mid, max(1, cin // 4), act=nn.SiLU, gate=nn.Sigmoid), conv_bn(mid, cout, 1, act=None)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


def efficientnet_b0() -> nn.Module:
    """EfficientNet-B0: SiLU stem, the seven MBConv stages (3x3 / 5x5 depthwise, sigmoid SE at a quarter
    of the block's input width; no stochastic depth in eval), 1280-wide head, fc 1000."""
    table = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3),
             (6, 5, 2, 192, 4), (6, 3, 1, 320, 1))
    layers, cin = [conv_bn(3, 32, 3, 2, act=nn.SiLU)], 32
    for expand, k, stride, cout, repeats in table:
        for i in range(repeats):
            layers.append(MBConv(cin, cout, k, stride if i == 0 else 1, expand))
            cin = cout
    return nn.Sequential(*layers, conv_bn(cin, 1280, 1, act=nn.SiLU), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(1280, 1000))


MODELS = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2, "squeezenet1_1": squeezenet1_1,
          "densenet121": densenet121, "googlenet": googlenet, "mobilenet_v3_large": mobilenet_v3_large,
          "shufflenet_v2_x1_0": shufflenet_v2_x1_0, "vgg11": vgg11, "efficientnet_b0": efficientnet_b0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    a = ap.parse_args()
    a.out_dir.mkdir(parents=True, exist_ok=True)
    for name in a.models:
        torch.manual_seed(0)
        net = MODELS[name]()
        gen = torch.Generator().manual_seed(1)
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean = torch.randn(m.num_features, generator=gen) * 0.1
                m.running_var = torch.rand(m.num_features, generator=gen) + 0.5
        path = a.out_dir / f"{name}-opset{a.opset}.onnx"
        torch.onnx.export(net.eval(), (torch.zeros(1, 3, 224, 224),), str(path), opset_version=a.opset,
                          input_names=["x"], output_names=["y"], dynamo=False)
        print(path)


if __name__ == "__main__":
    main()
