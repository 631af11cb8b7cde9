"""The depthwise conv backward kernels (volvox/_kernels/kernels/conv_backward.pxi through volvox.cpu)
against ops/conv.py's float64 references (which tests/train/test_cnn_grad.py holds to torch): odd sizes,
stride 2 with asymmetric pads, dilation 2, one and several threads, and the checks at the boundary."""

import numpy as np
import pytest

from volvox import cpu
from volvox.errors import KernelError, ShapeError
from volvox.ops.conv import conv2d_grad_input_ref, conv2d_grad_weight_ref

# (x (N, H, W, C), (kh, kw), params)
CASES = [
    ((2, 7, 9, 5), (3, 3), dict(strides=[2, 2], pads=[1, 0, 1, 2])),
    ((1, 9, 8, 17), (3, 3), dict(dilations=[2, 2], pads=[2, 1, 2, 1])),
    ((3, 6, 5, 4), (5, 3), dict(strides=[1, 2], pads=[2, 1, 2, 1])),
    ((1, 1, 1, 3), (1, 1), {}),
    ((4, 16, 15, 40), (3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),  # big enough to split across threads
]


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    before = cpu.get_num_threads()
    cpu.set_num_threads(request.param)
    yield request.param
    cpu.set_num_threads(before)


@pytest.mark.parametrize("x_shape, kernel, p", CASES)
def test_depthwise_grads_match_reference(x_shape, kernel, p, threads):
    rng = np.random.default_rng(0)
    c = x_shape[3]
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal((c, *kernel, 1)).astype(np.float32)
    gp = dict(p, groups=c, input_size=list(x_shape[1:3]), kernel=list(kernel))
    oh = (x_shape[1] + sum(gp.get("pads", [0] * 4)[0::2]) - (kernel[0] - 1) * gp.get("dilations", [1, 1])[0] - 1) \
        // gp.get("strides", [1, 1])[0] + 1
    ow = (x_shape[2] + sum(gp.get("pads", [0] * 4)[1::2]) - (kernel[1] - 1) * gp.get("dilations", [1, 1])[1] - 1) \
        // gp.get("strides", [1, 1])[1] + 1
    dy = rng.standard_normal((x_shape[0], oh, ow, c)).astype(np.float32)
    args = dict(strides=gp.get("strides", (1, 1)), dilations=gp.get("dilations", (1, 1)), pads=gp.get("pads", (0,) * 4))
    dx = cpu.depthwise_conv2d_grad_input(dy, w, x_shape[1:3], **args)
    dw = cpu.depthwise_conv2d_grad_weight(x, dy, kernel, **args)
    want_dx, want_dw = conv2d_grad_input_ref(None, gp, dy, w), conv2d_grad_weight_ref(None, gp, x, dy)
    assert dx.shape == x.shape and dw.shape == w.shape
    np.testing.assert_allclose(dx, want_dx, rtol=0, atol=1e-5 * max(1.0, float(np.abs(want_dx).max())))
    np.testing.assert_allclose(dw, want_dw, rtol=0, atol=1e-5 * max(1.0, float(np.abs(want_dw).max())))


def test_depthwise_grads_refuse_bad_operands():
    dy = np.zeros((1, 3, 3, 4), np.float32)
    w = np.zeros((4, 3, 3, 1), np.float32)
    with pytest.raises(KernelError):
        cpu.depthwise_conv2d_grad_input(dy.astype(np.float64), w, (5, 5))
    with pytest.raises(KernelError):
        cpu.depthwise_conv2d_grad_input(dy, np.zeros((4, 3, 3, 2), np.float32), (5, 5))
    with pytest.raises(ShapeError):
        cpu.depthwise_conv2d_grad_input(dy, w, (9, 9))  # dy is not that conv's output
    with pytest.raises(ShapeError):
        cpu.depthwise_conv2d_grad_weight(np.zeros((1, 5, 5, 3), np.float32), dy, (3, 3))
    with pytest.raises(ShapeError):
        cpu.depthwise_conv2d_grad_weight(np.zeros((1, 6, 5, 4), np.float32), dy, (3, 3))
