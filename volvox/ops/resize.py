"""Spatial resize of NHWC images: ``resize`` (nearest, bilinear), with ONNX's and TFLite's coordinate rules.

Each output index ``o`` of an axis (input length ``n_in``, output ``n_out``) reads source coordinate

    src = (o + a) * num / den - b          evaluated in float32, in exactly this order

with (a, num, den, b) from ``coordinate`` (s: the axis scale, given or n_out / n_in; r: TFLite's
n_in / n_out, or (n_in - 1) / (n_out - 1) for align_corners, both divided in float32):

    half_pixel            (0.5, 1, s, 0.5)          ONNX: (o + 0.5) / s - 0.5
    pytorch_half_pixel    as half_pixel; src = 0 when n_out == 1
    align_corners         (0, n_in - 1, n_out - 1, 0); src = 0 when n_out == 1
    asymmetric            (0, 1, s, 0)              ONNX: o / s
    tf_half_pixel_for_nn  (0.5, 1, s, 0)            ONNX: (o + 0.5) / s
    tflite_asymmetric     (0, r, 1, 0)              TFLite, no flags: o * r
    tflite_half_pixel     (0.5, r, 1, 0.5)          TFLite bilinear, half_pixel_centers
    tflite_half_pixel_for_nn (0.5, r, 1, 0)         TFLite nearest, half_pixel_centers
    tflite_align_corners  (0, r, 1, 0)              TFLite, align_corners (r = (n_in-1)/(n_out-1))

One form reproduces both runtimes' float32 operations (onnxruntime divides by the scale, TFLite
multiplies by its ratio; they differ in the last bit often enough to move a nearest pick), so
nearest picks the pixel they pick. Nearest rounds ``src`` by ``nearest_mode`` and clamps it into
the image:

    round_prefer_floor / round_prefer_ceil   ONNX: round half down / up, where a coordinate within
                                             1e-6 of k + 0.5 counts as the tie (as onnxruntime 1.32
                                             does, so a float32 14.499999 for the exact 14.5 of
                                             (4 + 0.5) * 20 / 6 - 0.5 still rounds as a tie)
    floor, ceil                              exact
    round_half_up                            TFLite align_corners (TfLiteRound): exact ties up

Bilinear clamps ``src`` to [0, n_in - 1] and blends pixels floor(src) and floor(src) + 1 (clamped)
by the fraction, as onnxruntime and TFLite do.

Params: mode, coordinate, nearest_mode (default round_prefer_floor), and the output size as
``size`` [h, w] or ``scales`` [sh, sw] (output = floor(n_in * s) in float32; the given scales
then also drive the coordinates, as ONNX says). int8 runs nearest only (a gather keeps the
quantization); int8 bilinear is TFLite fixed-point arithmetic volvox does not implement.
"""

from __future__ import annotations

import numpy as np

from volvox.errors import UnsupportedError
from volvox.ir.graph import expect
from volvox.ops.registry import OpDef, register
from volvox.ops.gpu import Call, Dispatch, Lowering, float_only, grid_of

MODES = ("nearest", "bilinear")
ONNX_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
NEAREST_MODES = ONNX_NEAREST_MODES + ("round_half_up",)
TIE = np.float32(1e-6)  # onnxruntime's tolerance for a coordinate at k + 0.5 (round_prefer_*)
ONNX_COORDINATES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn")
TFLITE_COORDINATES = ("tflite_asymmetric", "tflite_half_pixel", "tflite_half_pixel_for_nn", "tflite_align_corners")
COORDINATES = ONNX_COORDINATES + TFLITE_COORDINATES
f32 = np.float32


def check_params(p: dict, dtype: str) -> None:
    """UnsupportedError naming the attribute when mode / coordinate / nearest_mode / dtype is not implemented."""
    for name, value, known in (("mode", p.get("mode"), MODES), ("coordinate", p.get("coordinate"), COORDINATES),
                               ("nearest_mode", p.get("nearest_mode", "round_prefer_floor"), NEAREST_MODES)):
        if value not in known:
            raise UnsupportedError(f"resize: {name}={value!r} is not supported (choose from {', '.join(known)})")
    if dtype in ("int8", "int16") and p["mode"] != "nearest":
        raise UnsupportedError(f"resize: {dtype} bilinear (TFLite's fixed-point arithmetic) is not supported; "
                               f"{dtype} runs mode='nearest'")


def axis_scales(p: dict) -> tuple | None:
    """The given (sh, sw) as float32, or None when the node gives ``size``."""
    return None if "size" in p else tuple(f32(s) for s in p["scales"])


def output_size(hw: tuple, p: dict) -> tuple:
    """(OH, OW) for input (H, W): ``size``, or floor(n_in * scale) in float32; a derived symbol for a symbolic dim."""
    if "size" in p:
        return tuple(int(d) for d in p["size"])
    return tuple(int(np.floor(f32(n) * s)) if isinstance(n, int) else f"{n}*{float(s):g}"
                 for n, s in zip(hw, axis_scales(p)))


def axis_transform(coordinate: str, n_in: int, n_out: int, scale) -> tuple:
    """(a, num, den, b) float32 with src = (o + a) * num / den - b for one axis (see the module docstring)."""
    if coordinate in TFLITE_COORDINATES:
        r = f32(n_in - 1) / f32(n_out - 1) if coordinate == "tflite_align_corners" and n_out > 1 else f32(n_in) / f32(n_out)
        table = {"tflite_asymmetric": (0, r, 1, 0), "tflite_half_pixel": (0.5, r, 1, 0.5),
                 "tflite_half_pixel_for_nn": (0.5, r, 1, 0), "tflite_align_corners": (0, r, 1, 0)}
    elif n_out == 1 and coordinate in ("pytorch_half_pixel", "align_corners"):
        table = {coordinate: (0, 0, 1, 0)}  # src = 0
    else:
        s = f32(n_out) / f32(n_in) if scale is None else f32(scale)
        table = {"half_pixel": (0.5, 1, s, 0.5), "pytorch_half_pixel": (0.5, 1, s, 0.5), "asymmetric": (0, 1, s, 0),
                 "tf_half_pixel_for_nn": (0.5, 1, s, 0), "align_corners": (0, n_in - 1, n_out - 1, 0)}
    return tuple(f32(v) for v in table[coordinate])


def source_coords(coordinate: str, n_in: int, n_out: int, scale) -> np.ndarray:
    """Source coordinate of every output index of one axis: (n_out,) float32."""
    a, num, den, b = axis_transform(coordinate, n_in, n_out, scale)
    o = np.arange(n_out, dtype=f32)  # (n_out,)
    return (o + a) * num / den - b


def nearest_index(src: np.ndarray, nearest_mode: str, n_in: int) -> np.ndarray:
    """The pixel each source coordinate picks, clamped into [0, n_in - 1]: (n_out,) int64."""
    below = np.floor(src)                                 # (n_out,)
    rounded = np.floor(src + f32(0.5))                    # round half up
    tie = np.abs(src - below - f32(0.5)) <= TIE
    picked = {"round_prefer_floor": np.where(tie, below, rounded), "round_prefer_ceil": np.where(tie, below + 1, rounded),
              "floor": below, "ceil": np.ceil(src), "round_half_up": rounded}[nearest_mode]
    return np.clip(picked, 0, n_in - 1).astype(np.int64)


def linear_taps(src: np.ndarray, n_in: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(i0, i1, w1) of one axis: pixels floor(src) and its right neighbour (clamped), weight of i1. (n_out,) each."""
    c = np.clip(src, f32(0), f32(n_in - 1))  # (n_out,)
    i0 = np.floor(c).astype(np.int64)
    return i0, np.minimum(i0 + 1, n_in - 1), c - i0.astype(f32)


def _tables(x: np.ndarray, p: dict) -> list:
    """Per spatial axis (H, W): the nearest indices, or the bilinear (i0, i1, w1)."""
    out = output_size(x.shape[1:3], p)
    scales = axis_scales(p) or (None, None)
    tables = []
    for n_in, n_out, s in zip(x.shape[1:3], out, scales):
        src = source_coords(p["coordinate"], n_in, n_out, s)
        tables.append(nearest_index(src, p.get("nearest_mode", "round_prefer_floor"), n_in)
                      if p["mode"] == "nearest" else linear_taps(src, n_in))
    return tables


def _resize_infer(specs, params):
    x = specs["x"]
    expect(len(x.shape) == 4, f"x must be NHWC (4-D), got {x.describe()}")
    expect(x.dtype in ("float32", "int8", "int16"), f"x must be float32, int8 or int16, got {x.describe()}")
    check_params(params, x.dtype)
    expect(("size" in params) != ("scales" in params), f"resize needs exactly one of size [h, w] and scales [sh, sw], got {params}")
    given = params.get("size", params.get("scales"))
    expect(len(given) == 2 and all(v > 0 for v in given), f"size / scales must be 2 positive numbers, got {given}")
    oh, ow = output_size(x.shape[1:3], params)
    expect(not isinstance(oh, int) or oh > 0, f"scales {params.get('scales')} give an empty output for {x.describe()}")
    expect(not isinstance(ow, int) or ow > 0, f"scales {params.get('scales')} give an empty output for {x.describe()}")
    return {"y": ((x.shape[0], oh, ow, x.shape[3]), x.dtype)}


def resize_ref(ctx, p, x):
    """Each output pixel from its source pixel (nearest) or its four neighbours' float64 blend (bilinear)."""
    if p["mode"] == "nearest":
        iy, ix = _tables(x, p)
        return x[:, iy[:, None], ix[None, :], :]  # (N, OH, OW, C)
    (y0, y1, wy), (x0, x1, wx) = _tables(x, p)
    wy, wx = wy.astype(np.float64)[:, None, None], wx.astype(np.float64)[None, :, None]  # (OH, 1, 1), (1, OW, 1)
    v = x.astype(np.float64)
    y = ((1 - wy) * (1 - wx) * v[:, y0[:, None], x0[None, :]] + (1 - wy) * wx * v[:, y0[:, None], x1[None, :]]
         + wy * (1 - wx) * v[:, y1[:, None], x0[None, :]] + wy * wx * v[:, y1[:, None], x1[None, :]])
    return y.astype(np.float32)  # (N, OH, OW, C)


def resize_fast(ctx, p, x):
    """Separable float32 passes over precomputed tables: rows, then columns (nearest: two gathers)."""
    if p["mode"] == "nearest":
        iy, ix = _tables(x, p)
        return np.take(np.take(x, iy, axis=1), ix, axis=2)  # (N, OH, OW, C)
    (y0, y1, wy), (x0, x1, wx) = _tables(x, p)
    rows = np.take(x, y0, axis=1)                          # (N, OH, W, C)
    rows += (np.take(x, y1, axis=1) - rows) * wy[:, None, None]
    y = np.take(rows, x0, axis=2)                          # (N, OH, OW, C)
    y += (np.take(rows, x1, axis=2) - y) * wx[:, None]
    return y


# ------------------------------------------------------------------ GPU lowerings
def _lower_resize(c: Call) -> list[Dispatch]:
    """One ``resize`` dispatch; each axis's (a, num, den, b) comes from ops.resize, so the CPU and GPU share the rule."""
    n_, h, w, ch = c.shapes["x"]
    _, oh, ow, _ = c.shapes["y"]
    sy, sx = axis_scales(c.params) or (None, None)
    coord = c.params["coordinate"]
    ay, numy, deny, by = (float(v) for v in axis_transform(coord, h, oh, sy))
    ax, numx, denx, bx = (float(v) for v in axis_transform(coord, w, ow, sx))
    n = n_ * oh * ow * ch
    return [Dispatch("resize", ["x", "y"], grid_of(n),
                     dict(n=n, H=h, W=w, C=ch, OH=oh, OW=ow, mode=int(c.params["mode"] == "bilinear"),
                          rounding=NEAREST_MODES.index(c.params.get("nearest_mode", "round_prefer_floor")),
                          ay=ay, numy=numy, deny=deny, by=by, ax=ax, numx=numx, denx=denx, bx=bx))]


register(OpDef("resize", "resize", ("x",), ("y",), _resize_infer, resize_ref, resize_fast,
               gpu=Lowering(("resize",), _lower_resize, float_only("x"))))
