"""Pooling in NHWC: max_pool2d, avg_pool2d (padding excluded from the count, as TFLite and
ONNX count_include_pad=0 do), global_avg_pool (keeps H = W = 1), and their backward for training
graphs (max_pool2d_grad, avg_pool2d_grad, global_avg_pool_grad)."""

from __future__ import annotations

import numpy as np

from volvox import cpu
from volvox.ir.graph import TensorSpec, expect, same_dim
from volvox.errors import UnsupportedError
from volvox.ops.codes import FN
from volvox.ops.registry import OpDef, register
from volvox.ops.conv import ACTIVATIONS, apply_activation, conv_out_dim, pad_nhwc, tap, window_params
from volvox.ops.gpu import Call, Dispatch, Lowering, float_only, grid_of


def pool_out_shape(x, p: dict) -> tuple:
    """NHWC output shape of a kernel=(kh, kw) window op over ``x``."""
    expect(len(x.shape) == 4, f"x must be NHWC (4-D), got {x.describe()}")
    kh, kw = (int(k) for k in p["kernel"])
    (sh, sw), _, (pt, pl, pb, pr) = window_params(p)
    expect(kh >= 1 and kw >= 1 and max(pt, pb) < kh and max(pl, pr) < kw, f"bad pooling window {p}")
    return (x.shape[0], conv_out_dim(x.shape[1], kh, sh, 1, pt, pb), conv_out_dim(x.shape[2], kw, sw, 1, pl, pr), x.shape[3])


def _pool_infer(specs, params):
    x = specs["x"]
    expect(x.dtype == "float32", f"x must be float32, got {x.describe()}")
    expect(params.get("activation", "none") in ACTIVATIONS, f"activation must be one of {ACTIVATIONS}")
    return {"y": (pool_out_shape(x, params), "float32")}


def windows(x: np.ndarray, p: dict, fill) -> np.ndarray:
    """All pooling windows of ``x`` padded with ``fill``: (N, OH, OW, C, kh, kw) (a strided view)."""
    kh, kw = (int(k) for k in p["kernel"])
    (sh, sw), _, pads = window_params(p)
    v = np.lib.stride_tricks.sliding_window_view(pad_nhwc(x, pads, fill), (kh, kw), axis=(1, 2))
    return v[:, ::sh, ::sw]


def max_pool2d_ref(ctx, p, x):
    """Max over each window (padding never wins)."""
    y = windows(x, p, -np.inf).max(axis=(4, 5))
    return apply_activation(np.ascontiguousarray(y), p.get("activation", "none")).astype(np.float32)


def avg_pool2d_ref(ctx, p, x):
    """Mean over the in-image part of each window, float64 sums."""
    v = windows(x.astype(np.float64), p, np.nan)
    y = np.nanmean(v, axis=(4, 5)) if p.get("count_include_pad", False) is False else \
        np.nan_to_num(v).mean(axis=(4, 5))
    return apply_activation(y, p.get("activation", "none")).astype(np.float32)


def pool_taps(x: np.ndarray, p: dict, fill, reduce) -> np.ndarray:
    """Fold ``reduce`` (np.maximum / np.add) over the kernel taps of padded ``x``: (N, OH, OW, C)."""
    kh, kw = (int(k) for k in p["kernel"])
    strides, _, pads = window_params(p)
    oh = conv_out_dim(x.shape[1], kh, strides[0], 1, pads[0], pads[2])
    ow = conv_out_dim(x.shape[2], kw, strides[1], 1, pads[1], pads[3])
    xp = pad_nhwc(x, pads, fill)
    y = tap(xp, 0, 0, oh, ow, strides, (1, 1)).copy()
    for i in range(kh):
        for j in range(kw):
            if i or j:
                reduce(y, tap(xp, i, j, oh, ow, strides, (1, 1)), out=y)
    return y


def valid_counts(shape, p: dict) -> np.ndarray:
    """How many in-image pixels each output window covers: (OH, OW, 1)."""
    ones = np.ones((1, shape[1], shape[2], 1), np.float32)
    return pool_taps(ones, p, 0, np.add)[0]


def max_pool2d_fast(ctx, p, x):
    """Max pooling as a tap loop of np.maximum."""
    return apply_activation(pool_taps(x, p, -np.inf, np.maximum), p.get("activation", "none"))


def avg_pool2d_fast(ctx, p, x):
    """Average pooling as a tap loop of adds, divided by the in-image count."""
    s = pool_taps(x, p, 0, np.add)
    if p.get("count_include_pad", False):
        s /= np.float32(int(p["kernel"][0]) * int(p["kernel"][1]))
    else:
        s /= valid_counts(x.shape, p)
    return apply_activation(s, p.get("activation", "none"))


def _global_infer(specs, params):
    x = specs["x"]
    expect(len(x.shape) == 4 and x.dtype == "float32", f"x must be float32 NHWC, got {x.describe()}")
    return {"y": ((x.shape[0], 1, 1, x.shape[3]), "float32")}


def global_avg_pool_ref(ctx, p, x):
    """Mean over H and W in float64: (N, 1, 1, C)."""
    return x.mean(axis=(1, 2), keepdims=True, dtype=np.float64).astype(np.float32)


# ------------------------------------------------------------------- CPU plan lowering
def plan_window(node, x: np.ndarray, y: np.ndarray) -> tuple:
    """A pooling step's window: (n, h, w, c, oh, ow, kh, kw, sh, sw, 1, 1, pad_top, pad_left)."""
    kh, kw = (int(k) for k in node.params["kernel"])
    (sh, sw), _, (pt, pl, _, _) = window_params(node.params)
    return tuple(x.shape) + (y.shape[1], y.shape[2], kh, kw, sh, sw, 1, 1, pt, pl)


def max_pool2d_cpu(plan, node) -> None:
    """A MAX_POOL step (its output may be a channel slice of a wider tensor: runtime/plan.py)."""
    x, y = plan.input(node, "x"), plan.output(node, strided=True)
    plan.need(node, x.dtype == np.float32 and node.params.get("activation", "none") == "none", "fused activation")
    plan.add("max_pool", x=cpu.address(x), y=cpu.address(y), window=plan_window(node, x, y), ldy=plan.pixel_stride(y))


def avg_pool2d_cpu(plan, node) -> None:
    """An AVG_POOL step (its output may be a channel slice, as max_pool2d's)."""
    x, y = plan.input(node, "x"), plan.output(node, strided=True)
    plan.need(node, x.dtype == np.float32 and node.params.get("activation", "none") == "none", "fused activation")
    plan.add("avg_pool", x=cpu.address(x), y=cpu.address(y), window=plan_window(node, x, y),
             include_pad=bool(node.params.get("count_include_pad", False)), ldy=plan.pixel_stride(y))


def global_avg_pool_cpu(plan, node) -> None:
    x, y = plan.input(node, "x"), plan.output(node)
    plan.need(node, x.dtype == np.float32 and x.ndim == 4, "float32 NHWC")
    plan.add("global_avg", x=cpu.address(x), y=cpu.address(y), N=x.shape[0], HW=x.shape[1] * x.shape[2], C=x.shape[3])


# ------------------------------------------------------------------ GPU lowerings
def _lower_pool(mode: str):
    def lower(c: Call) -> list[Dispatch]:
        n_, h, w, ch = c.shapes["x"]
        _, oh, ow, _ = c.shapes["y"]
        if mode == "global":
            (kh, kw), (sh, sw), (pt, pl), code = (h, w), (1, 1), (0, 0), 1
        else:
            kh, kw = (int(k) for k in c.params["kernel"])
            (sh, sw), _, (pt, pl, _, _) = window_params(c.params)
            code = 0 if mode == "max" else (2 if c.params.get("count_include_pad", False) else 1)
        n = n_ * oh * ow * ch
        return [Dispatch("pool2d", ["x", "y"], grid_of(n),
                         dict(n=n, H=h, W=w, C=ch, OH=oh, OW=ow, kh=kh, kw=kw, sh=sh, sw=sw, pt=pt, pl=pl, mode=code,
                              act=FN[c.params.get("activation", "none")]))]
    return lower


# ------------------------------------------------------------------ backward (training)
# Pool gradients carry the forward node's params plus "input_size" [H, W] where dy's shape leaves it
# ambiguous. A fused ReLU / ReLU6 is undone first by conv.py's fused_activation_grad.
def _grad_infer(specs, params):
    dy = specs["dy"]
    expect(dy.dtype == "float32" and len(dy.shape) == 4, f"dy must be float32 NHWC, got {dy.describe()}")
    h, w = (int(v) for v in params["input_size"])
    x_shape = (dy.shape[0], h, w, dy.shape[3])
    if "x" in specs:
        x = specs["x"]
        expect(x.dtype == "float32" and len(x.shape) == 4 and all(same_dim(a, b) for a, b in zip(x.shape, x_shape)),
               f"x {x.describe()} is not of input_size {[h, w]} with dy {dy.describe()}")
    if "kernel" in params:
        y_shape = pool_out_shape(TensorSpec("x", x_shape, "float32"), params)
    else:
        y_shape = (dy.shape[0], 1, 1, dy.shape[3])
    expect(all(same_dim(a, b) for a, b in zip(y_shape, dy.shape)),
           f"dy {dy.describe()} is not the pooled shape {y_shape} of input {x_shape}")
    return {"dx": (x_shape, "float32")}


def max_pool2d_grad_ref(ctx, p, x, dy):
    """dL/dx of max pooling: each window's dy goes to its first maximum in row-major window order (torch's
    choice among ties), float64 sums where windows overlap. (N, H, W, C)."""
    kh, kw = (int(k) for k in p["kernel"])
    (sh, sw), _, pads = window_params(p)
    v = windows(x, p, -np.inf)                                          # (N, OH, OW, C, kh, kw)
    n, oh, ow, c = v.shape[:4]
    first = v.reshape(n, oh, ow, c, kh * kw).argmax(axis=4)             # (N, OH, OW, C)
    rows = np.arange(oh)[None, :, None, None] * sh + first // kw        # padded row of each maximum
    cols = np.arange(ow)[None, None, :, None] * sw + first % kw
    dxp = np.zeros((n, x.shape[1] + pads[0] + pads[2], x.shape[2] + pads[1] + pads[3], c))  # (N, Hp, Wp, C)
    np.add.at(dxp, (np.arange(n)[:, None, None, None], rows, cols, np.arange(c)), dy.astype(np.float64))
    pt, pl, pb, pr = pads
    return dxp[:, pt: dxp.shape[1] - pb, pl: dxp.shape[2] - pr, :].astype(np.float32)


def max_pool2d_grad_fast(ctx, p, x, dy):
    """max_pool2d_grad through volvox's kernel (one image per thread, the same first-maximum routing)."""
    strides, _, pads = window_params(p)
    return cpu.max_pool2d_grad(x, dy, p["kernel"], strides, pads)


def avg_pool2d_grad_ref(ctx, p, dy):
    """dL/dx of average pooling: each window's dy / count spread over its taps (count as the forward:
    in-image pixels, or kh * kw with count_include_pad), float64. (N, H, W, C)."""
    kh, kw = (int(k) for k in p["kernel"])
    strides, _, pads = window_params(p)
    n, oh, ow, c = dy.shape
    x_shape = (n, int(p["input_size"][0]), int(p["input_size"][1]), c)
    count = np.float64(kh * kw) if p.get("count_include_pad", False) else valid_counts(x_shape, p).astype(np.float64)
    share = dy.astype(np.float64) / count                                        # (N, OH, OW, C)
    dxp = np.zeros((n, x_shape[1] + pads[0] + pads[2], x_shape[2] + pads[1] + pads[3], c))  # (N, Hp, Wp, C)
    for i in range(kh):
        for j in range(kw):
            tap(dxp, i, j, oh, ow, strides, (1, 1))[...] += share
    pt, pl, pb, pr = pads
    return dxp[:, pt: dxp.shape[1] - pb, pl: dxp.shape[2] - pr, :].astype(np.float32)


def global_avg_pool_grad_ref(ctx, p, dy):
    """dL/dx of global average pooling: dy / (H * W) at every pixel. (N, H, W, C)."""
    h, w = (int(v) for v in p["input_size"])
    share = (dy.astype(np.float64) / (h * w)).astype(np.float32)  # (N, 1, 1, C)
    return np.ascontiguousarray(np.broadcast_to(share, (dy.shape[0], h, w, dy.shape[3])))


register(OpDef("max_pool2d_grad", "pool", ("x", "dy"), ("dx",), _grad_infer, max_pool2d_grad_ref, max_pool2d_grad_fast))
register(OpDef("avg_pool2d_grad", "pool", ("dy",), ("dx",), _grad_infer, avg_pool2d_grad_ref))
register(OpDef("global_avg_pool_grad", "pool", ("dy",), ("dx",), _grad_infer, global_avg_pool_grad_ref))


def static_size(g, x: str, op: str) -> list[int]:
    """[H, W] of the NHWC tensor ``x``; UnsupportedError when symbolic (its grad op's shape needs them)."""
    size = list(g.shape(x)[1:3])
    if not all(isinstance(d, int) for d in size):
        raise UnsupportedError(f"{op} backward: the input's spatial size {size} must be static")
    return size


def undo_activation(g, node, dy: str) -> str:
    """dy at the pool's pre-activation output: through conv.py's fused_activation_grad when one is fused."""
    act = node.params.get("activation", "none")
    if act == "none":
        return dy
    return g.emit("fused_activation_grad", {"dy": dy, "y": node.outputs["y"]}, {"activation": act}, ("dx",))[0]


def pool_backward(g, node) -> None:
    """Backward of max_pool2d, avg_pool2d and global_avg_pool: their grad op, the forward params plus the
    input's [H, W]."""
    dy = g.grad(node, "y")
    if dy is None or not g.needs(node, "x"):
        return
    x = node.inputs["x"]
    params = dict(node.params, input_size=static_size(g, x, node.op))
    params.pop("activation", None)
    inputs = {"x": x} if node.op == "max_pool2d" else {}
    (dx,) = g.emit(node.op + "_grad", {**inputs, "dy": undo_activation(g, node, dy)}, params, ("dx",))
    g.accumulate(node, "x", dx)


register(OpDef("max_pool2d", "pool", ("x",), ("y",), _pool_infer, max_pool2d_ref, max_pool2d_fast, cpu=max_pool2d_cpu,
               backward=pool_backward, gpu=Lowering(("pool2d",), _lower_pool("max"), float_only("x"))))
register(OpDef("avg_pool2d", "pool", ("x",), ("y",), _pool_infer, avg_pool2d_ref, avg_pool2d_fast, cpu=avg_pool2d_cpu,
               backward=pool_backward, gpu=Lowering(("pool2d",), _lower_pool("avg"), float_only("x"))))
register(OpDef("global_avg_pool", "pool", ("x",), ("y",), _global_infer, global_avg_pool_ref, cpu=global_avg_pool_cpu,
               backward=pool_backward, gpu=Lowering(("pool2d",), _lower_pool("global"), float_only("x"))))
