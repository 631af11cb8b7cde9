"""The depthwise conv and max pool backward kernels (volvox/_kernels/kernels/conv_backward.pxi through
volvox.cpu) against the float64 references of ops/conv.py and ops/pool.py (which tests/train/test_cnn_grad.py
holds to torch): odd sizes, stride 2 with asymmetric pads, dilation 2, ties, one and several threads, and the
checks at the boundary."""

import numpy as np
import pytest

from volvox import cpu
from volvox.errors import KernelError, ShapeError
from volvox.ops.conv import conv2d_grad_input_ref, conv2d_grad_weight_ref
from volvox.ops.pool import max_pool2d_grad_ref

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


def test_depthwise_grad_weight_bits_do_not_depend_on_threads():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 16, 15, 40)).astype(np.float32)
    dy = rng.standard_normal((4, 8, 8, 40)).astype(np.float32)
    before = cpu.get_num_threads()
    try:
        runs = []
        for n in (1, 2):
            cpu.set_num_threads(n)
            runs.append(cpu.depthwise_conv2d_grad_weight(x, dy, (3, 3), strides=(2, 2), pads=(1, 1, 1, 1)))
    finally:
        cpu.set_num_threads(before)
    np.testing.assert_array_equal(runs[0], runs[1])


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


POOL_CASES = [
    ((2, 7, 9, 3), (3, 3), dict(strides=(2, 2), pads=(1, 1, 1, 1))),
    ((1, 6, 5, 17), (2, 2), dict(strides=(2, 2), pads=(0, 0, 1, 1))),   # ceil mode's partial windows
    ((3, 5, 6, 4), (3, 2), dict(strides=(1, 1), pads=(1, 0, 1, 1))),   # overlapping windows
    ((4, 16, 15, 40), (3, 3), dict(strides=(2, 2), pads=(1, 1, 1, 1))),
]


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("x_shape, kernel, p", POOL_CASES)
def test_max_pool_grad_matches_reference(x_shape, kernel, p, ties, threads):
    """Distinct values and ties (values in {0, 1}, as after a ReLU): the same first maximum as the reference."""
    rng = np.random.default_rng(1)
    x = (rng.integers(0, 2, x_shape) if ties else rng.standard_normal(x_shape)).astype(np.float32)
    params = dict(kernel=list(kernel), strides=list(p["strides"]), pads=list(p["pads"]), input_size=list(x_shape[1:3]))
    oh = (x_shape[1] + p["pads"][0] + p["pads"][2] - kernel[0]) // p["strides"][0] + 1
    ow = (x_shape[2] + p["pads"][1] + p["pads"][3] - kernel[1]) // p["strides"][1] + 1
    dy = rng.standard_normal((x_shape[0], oh, ow, x_shape[3])).astype(np.float32)
    got = cpu.max_pool2d_grad(x, dy, kernel, **p)
    np.testing.assert_allclose(got, max_pool2d_grad_ref(None, params, x, dy), rtol=0, atol=1e-6)


def test_max_pool_grad_refuses_bad_operands():
    with pytest.raises(KernelError):
        cpu.max_pool2d_grad(np.zeros((1, 4, 4, 2)), np.zeros((1, 2, 2, 2), np.float32), (2, 2), (2, 2))
    with pytest.raises(ShapeError):
        cpu.max_pool2d_grad(np.zeros((1, 4, 4, 2), np.float32), np.zeros((1, 3, 3, 2), np.float32), (2, 2), (2, 2))
