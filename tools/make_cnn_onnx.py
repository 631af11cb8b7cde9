"""Write torchvision-shaped CNNs with seeded random weights as .onnx files, for tools/bench_vision.py.

    python tools/make_cnn_onnx.py OUT_DIR [--opset 17] [--models resnet18 mobilenet_v2 squeezenet1_1]

The networks are torchvision's ResNet-18, MobileNetV2 and SqueezeNet 1.1 layer for layer (built here
in torch, since torchvision's wheels do not load beside every torch), at 224 x 224, batch 1, with
random BatchNorm statistics. Weights are random: these files time the runtime, not a classifier.
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


MODELS = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2, "squeezenet1_1": squeezenet1_1}


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
