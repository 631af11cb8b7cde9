"""Convolutions the NHWC kernels do not cover, in ONNX's NCHW layout with numpy: the transposed
(fractionally strided) convolution and the exact integer convolution of zero-point-shifted
int8 / uint8 tensors (ConvInteger; QLinearConv requantizes its int32 result).

Both loop over the kernel taps, each tap one batched product: float64 sums for the transposed
convolution, int64 (exact) for the integer one. They run as numpy islands in a plan.
"""

from __future__ import annotations

import numpy as np

from volvox.ir.graph import expect
from volvox.ops.registry import OpDef, register


def _window(params: dict) -> tuple:
    """(strides, dilations, [top, left, bottom, right] pads, groups) of a 2-D window op."""
    return (tuple(int(s) for s in params.get("strides", (1, 1))), tuple(int(d) for d in params.get("dilations", (1, 1))),
            tuple(int(p) for p in params.get("pads", (0, 0, 0, 0))), int(params.get("groups", 1)))


def conv_transpose_dims(hw: tuple, kernel: tuple, params: dict) -> tuple:
    """Output (H, W) of a transposed convolution: stride * (in - 1) + output_padding + dilated kernel - pads."""
    strides, dilations, pads, _ = _window(params)
    extra = params.get("output_padding", (0, 0))
    return tuple(s * (d - 1) + int(e) + (k - 1) * dil + 1 - pads[i] - pads[i + 2]
                 for i, (d, k, s, dil, e) in enumerate(zip(hw, kernel, strides, dilations, extra)))


def _conv_transpose_infer(specs, params):
    x, w = specs["x"], specs["weight"]
    _, _, _, groups = _window(params)
    expect(len(x.shape) == 4 and len(w.shape) == 4 and x.dtype == w.dtype and x.dtype in ("float32", "float16", "float64"),
           f"conv_transpose needs NCHW x and (Cin, Cout / groups, kh, kw) weight of one float dtype: "
           f"{x.describe()}, {w.describe()}")
    expect(all(isinstance(d, int) for d in x.shape[1:]) and x.shape[1] == w.shape[0] and w.shape[0] % groups == 0,
           f"conv_transpose: {x.describe()} does not fit weight {w.describe()} in {groups} groups")
    hw = conv_transpose_dims(x.shape[2:], w.shape[2:], params)
    expect(min(hw) > 0, f"conv_transpose of {x.describe()} gives an empty output {hw}")
    if "bias" in specs:
        expect(specs["bias"].shape == (w.shape[1] * groups,), f"bias must have {w.shape[1] * groups} values")
    return {"y": ((x.shape[0], w.shape[1] * groups) + hw, x.dtype)}


def conv_transpose_ref(ctx, p, x, weight, bias=None):
    """Transposed convolution, NCHW: every input pixel scatters its kernel-weighted values into the
    output (float64 sums), then ``pads`` crop it. Weight (Cin, Cout / groups, kh, kw)."""
    strides, dilations, pads, groups = _window(p)
    n, cin, h, w = x.shape
    _, cout_g, kh, kw = weight.shape
    (sh, sw), (dh, dw) = strides, dilations
    extra = [int(e) for e in p.get("output_padding", (0, 0))]
    full = (sh * (h - 1) + (kh - 1) * dh + 1 + extra[0], sw * (w - 1) + (kw - 1) * dw + 1 + extra[1])
    out = np.zeros((n, groups, cout_g) + full)                                        # (N, G, Cout/G, H', W')
    xg = x.astype(np.float64).reshape(n, groups, cin // groups, h, w)                # (N, G, Cin/G, H, W)
    wg = weight.astype(np.float64).reshape(groups, cin // groups, cout_g, kh, kw)    # (G, Cin/G, Cout/G, kh, kw)
    for i in range(kh):
        for j in range(kw):
            contribution = np.einsum("ngchw,gco->ngohw", xg, wg[:, :, :, i, j])
            out[:, :, :, i * dh: i * dh + sh * (h - 1) + 1: sh, j * dw: j * dw + sw * (w - 1) + 1: sw] += contribution
    out = out.reshape((n, groups * cout_g) + full)[:, :, pads[0]: full[0] - pads[2], pads[1]: full[1] - pads[3]]
    if bias is not None:
        out = out + bias.reshape(1, -1, 1, 1)
    return np.ascontiguousarray(out.astype(x.dtype))


def _conv_integer_infer(specs, params):
    x, w = specs["x"], specs["weight"]
    strides, dilations, pads, groups = _window(params)
    expect(len(x.shape) == 4 and len(w.shape) == 4 and x.dtype in ("int8", "uint8") and w.dtype in ("int8", "uint8"),
           f"conv_integer needs NCHW int8 / uint8 x and weight: {x.describe()}, {w.describe()}")
    expect(all(isinstance(d, int) for d in x.shape[1:]) and x.shape[1] == w.shape[1] * groups and w.shape[0] % groups == 0,
           f"conv_integer: {x.describe()} does not fit weight {w.describe()} in {groups} groups")
    hw = tuple((d + pads[i] + pads[i + 2] - (k - 1) * dil - 1) // s + 1
               for i, (d, k, s, dil) in enumerate(zip(x.shape[2:], w.shape[2:], strides, dilations)))
    expect(min(hw) > 0, f"conv_integer of {x.describe()} by {w.describe()} gives an empty output")
    return {"y": ((x.shape[0], w.shape[0]) + hw, "int32")}


def conv_integer_ref(ctx, p, x, weight, x_zero_point=None, w_zero_point=None):
    """sum (x - x_zero_point) * (w - w_zero_point) over each window, exactly (int64), as int32; the
    zero point of w per output channel or per tensor; padding adds shifted zeros."""
    strides, dilations, pads, groups = _window(p)
    xs = x.astype(np.int64) - (0 if x_zero_point is None else np.int64(np.asarray(x_zero_point).reshape(-1)[0]))
    ws = weight.astype(np.int64)
    if w_zero_point is not None:
        ws = ws - np.asarray(w_zero_point, np.int64).reshape(-1, 1, 1, 1)
    xs = np.pad(xs, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    n, cin, h, w = xs.shape
    cout, cin_g, kh, kw = ws.shape
    (sh, sw), (dh, dw) = strides, dilations
    oh, ow = (h - (kh - 1) * dh - 1) // sh + 1, (w - (kw - 1) * dw - 1) // sw + 1
    xg = xs.reshape(n, groups, cin_g, h, w)                        # (N, G, Cin/G, H, W)
    wg = ws.reshape(groups, cout // groups, cin_g, kh, kw)         # (G, Cout/G, Cin/G, kh, kw)
    acc = np.zeros((n, groups, cout // groups, oh, ow), np.int64)  # (N, G, Cout/G, OH, OW)
    for i in range(kh):
        for j in range(kw):
            tap = xg[:, :, :, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]
            acc += np.einsum("ngchw,goc->ngohw", tap, wg[:, :, :, i, j])
    return acc.reshape(n, cout, oh, ow).astype(np.int32)


register(OpDef("conv_transpose", "conv", ("x", "weight", "bias?"), ("y",), _conv_transpose_infer, conv_transpose_ref))
register(OpDef("conv_integer", "conv", ("x", "weight", "x_zero_point?", "w_zero_point?"), ("y",), _conv_integer_infer,
               conv_integer_ref))
