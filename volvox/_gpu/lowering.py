"""Lowering: which volvox ops a GPU runs, and the kernel dispatches each becomes.

``LOWERINGS[op]`` is the single list of GPU-capable ops (docs/ops.md's GPU columns come from
it). ``check(...)`` says why a node must stay on the CPU (None: it can run on the GPU) from its
static specs; ``lower(...)`` turns a node with concrete shapes into dispatches whose buffers
name the node's ports ("x", "y0", ...) or executor-provided buffers ("@dummy", "@k_cache",
"@v_cache", "@<constant>"); ``constants(params)`` are small per-node tables uploaded once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from volvox.errors import KernelError
from volvox.ops.activation import FUSED_ACTIVATIONS
from volvox.ops.attention import llama3_inv_freq
from volvox.ops.conv import window_params
from volvox.ops.resize import NEAREST_MODES, axis_scales, axis_transform
from volvox.ops.shape import slice_bounds
from volvox._gpu.backend import MAX_GROUPS, grid_1d

FLOAT_WEIGHTS = ("float32", "float16")   # quantized weights stay on the CPU (see docs/backends.md)
MAX_HEAD_DIM = 128
ACT_CODES = {"none": 0, "relu": 1, "relu6": 2}
# matmul's ``act`` codes: every FUSED_ACTIVATIONS entry, applied as the tile is written
MATMUL_ACTS = {"none": 0, "relu": 1, "relu6": 2, "silu": 3, "gelu": 4, "sigmoid": 5, "gelu_tanh": 6, "hard_swish": 7}


@dataclass
class Dispatch:
    """One kernel launch: buffers by port / executor name, grid, Params values."""

    kernel: str
    buffers: list[str]
    grid: tuple[int, int, int]
    params: dict


@dataclass
class Call:
    """What a lowering sees: the node's params, concrete shapes per port, and run-time extras."""

    params: dict
    shapes: dict[str, tuple[int, ...]]                  # input and output ports -> shape
    extra: dict = field(default_factory=dict)           # attention: start (cached tokens), capacity (device cache)


@dataclass(frozen=True)
class Lowering:
    """How one op runs on a GPU."""

    kernels: tuple[str, ...]
    lower: Callable[[Call], list[Dispatch]]
    check: Callable[[dict, dict], str | None] = lambda specs, params: None
    constants: Callable[[dict], dict[str, np.ndarray]] = lambda params: {}
    alias: bool = False   # output is the input's buffer (reshape, all rows): no dispatch


LOWERINGS: dict[str, Lowering] = {}


def _register(op: str, lowering: Lowering) -> None:
    LOWERINGS[op] = lowering


def _groups(n: int, per: int = 64) -> tuple[int, int, int]:
    return grid_1d(-(-n // per))


def _float_only(*ports: str) -> Callable[[dict, dict], str | None]:
    def check(specs, params):
        for p in ports:
            if p in specs and specs[p].dtype != "float32":
                return f"{p} is {specs[p].dtype}"
        return None
    return check


# -- matmul ----------------------------------------------------------------------------------
def _check_linear(specs, params):
    w = specs["weight"]
    if w.dtype not in FLOAT_WEIGHTS:
        return f"weight is {w.dtype} (quantized weights run on the CPU)"
    return _float_only("x")(specs, params)


def matmul_dispatch(x: str, w: str, bias: str | None, y: str, m: int, k: int, n: int, w_row: int = 0,
                    act: str = "none", w_n: int | None = None, w_k: int = 1, batch: int = 1,
                    x_batch: int = 0, w_batch: int = 0) -> Dispatch:
    """y (batch, m, n) = act(x (m, k) @ W^T + bias) with W[n, k] = w[(w_row + n) * w_n + k * w_k] (default:
    a row-major (rows, k) weight) and per-batch strides x_batch, w_batch (0: broadcast)."""
    return Dispatch("matmul", [x, w, bias or "@dummy", y], (-(-n // 16), -(-m // 16), batch),
                    dict(M=m, K=k, N=n, w_row=w_row, w_n=k if w_n is None else w_n, w_k=w_k, x_batch=x_batch,
                         w_batch=w_batch, has_bias=int(bias is not None), act=MATMUL_ACTS[act]))


def _lower_linear(c: Call) -> list[Dispatch]:
    """linear, and linear_act with its activation in matmul's output write."""
    k, n = c.shapes["weight"][1], c.shapes["weight"][0]
    m = math.prod(c.shapes["x"][:-1])
    return [matmul_dispatch("x", "weight", "bias" if "bias" in c.shapes else None, "y", m, k, n,
                            act=c.params.get("activation", "none"))]


def _lower_linear_split(c: Call) -> list[Dispatch]:
    k = c.shapes["weight"][1]
    m = math.prod(c.shapes["x"][:-1])
    out, row = [], 0
    for i, n in enumerate(int(s) for s in c.params["sizes"]):
        if f"y{i}" in c.shapes:
            out.append(matmul_dispatch("x", "weight", None, f"y{i}", m, k, n, w_row=row))
        row += n
    return out


_register("linear", Lowering(("matmul",), _lower_linear, _check_linear))
_register("linear_act", Lowering(("matmul",), _lower_linear, _check_linear))
_register("linear_split", Lowering(("matmul",), _lower_linear_split, _check_linear))


def _check_matmul(specs, params):
    a, b = specs["a"].shape[:-2], specs["b"].shape[:-2]
    if a and b and (len(a) != len(b) or any(isinstance(x, int) and isinstance(y, int) and x != y for x, y in zip(a, b))):
        return "batch dims broadcast partially"
    return None


def _lower_matmul(c: Call) -> list[Dispatch]:
    """Batched a (..., m, k) @ b (..., k, n): b read as W^T through strides; a 2-D operand is broadcast."""
    a, b, out = c.shapes["a"], c.shapes["b"], c.shapes["y"]
    m, k, n = a[-2], a[-1], b[-1]
    batch = math.prod(out[:-2])
    na, nb = math.prod(a[:-2]), math.prod(b[:-2])
    if na not in (1, batch) or nb not in (1, batch) or batch > MAX_GROUPS:
        raise KernelError(f"matmul {a} @ {b}: batch dims broadcast partially or exceed {MAX_GROUPS}")
    return [matmul_dispatch("a", "b", None, "y", m, k, n, w_n=1, w_k=n, batch=batch,
                            x_batch=m * k if na > 1 else 0, w_batch=k * n if nb > 1 else 0)]


_register("matmul", Lowering(("matmul",), _lower_matmul, lambda specs, params: _float_only("a", "b")(specs, params)
                             or _check_matmul(specs, params)))


def _check_embedding(specs, params):
    if specs["table"].dtype not in FLOAT_WEIGHTS:
        return f"table is {specs['table'].dtype}"
    return None if specs["ids"].dtype == "int32" else f"ids are {specs['ids'].dtype}"


def _lower_embedding(c: Call) -> list[Dispatch]:
    vocab, dim = c.shapes["table"]
    n = math.prod(c.shapes["ids"]) * dim
    return [Dispatch("embedding", ["table", "ids", "y"], _groups(n), dict(n=n, dim=dim, vocab=vocab))]


_register("embedding", Lowering(("embedding",), _lower_embedding, _check_embedding))


# -- norms, softmax, activations ----------------------------------------------------------------
def _rows(shape) -> tuple[int, int]:
    return math.prod(shape[:-1]), shape[-1]


def _lower_rms(c: Call) -> list[Dispatch]:
    rows, n = _rows(c.shapes["x"])
    return [Dispatch("rms_norm", ["x", "weight", "y"], grid_1d(rows), dict(rows=rows, n=n, eps=float(c.params.get("eps", 1e-5))))]


def _lower_layer_norm(c: Call) -> list[Dispatch]:
    rows, n = _rows(c.shapes["x"])
    has_bias = "bias" in c.shapes
    return [Dispatch("layer_norm", ["x", "weight", "bias" if has_bias else "@dummy", "y"], grid_1d(rows),
                     dict(rows=rows, n=n, eps=float(c.params.get("eps", 1e-5)), has_bias=int(has_bias)))]


_register("rms_norm", Lowering(("rms_norm",), _lower_rms, _float_only("x")))
_register("layer_norm", Lowering(("layer_norm",), _lower_layer_norm, _float_only("x")))


def _check_softmax(specs, params):
    axis = int(params.get("axis", -1))
    return None if axis in (-1, len(specs["x"].shape) - 1) else f"softmax over axis {axis} (GPU: last axis only)"


def _lower_softmax(c: Call) -> list[Dispatch]:
    rows, n = _rows(c.shapes["x"])
    return [Dispatch("softmax", ["x", "y"], grid_1d(rows), dict(rows=rows, n=n, beta=float(c.params.get("beta", 1.0))))]


_register("softmax", Lowering(("softmax",), _lower_softmax, _check_softmax))

UNARY = {"relu": 0, "sigmoid": 1, "silu": 2, "gelu": 3, "clip": 5, "hard_sigmoid": 6, "hard_swish": 7, "sqrt": 8}


def unary_dispatch(op: str, params: dict, x: str | None, y: str, n: int) -> Dispatch:
    """y = op(x) over n elements, with op's params (clip bounds, hard_sigmoid alpha / beta, gelu's
    approximation); ``x`` None: y = op(y) in place."""
    code, lo, hi = UNARY[op], 0.0, 0.0
    if op == "gelu" and params.get("approximate", "none") == "tanh":
        code = 4
    if op == "clip":
        lo = -3.4e38 if params.get("min") is None else float(params["min"])
        hi = 3.4e38 if params.get("max") is None else float(params["max"])
    if op == "hard_sigmoid":
        lo, hi = float(params.get("alpha", 0.2)), float(params.get("beta", 0.5))
    return Dispatch("unary", [x or "@dummy", y], _groups(n), dict(n=n, op=code, lo=lo, hi=hi, in_place=int(x is None)))


def _lower_unary(op: str) -> Callable[[Call], list[Dispatch]]:
    def lower(c: Call) -> list[Dispatch]:
        return [unary_dispatch(op, c.params, "x", "y", math.prod(c.shapes["x"]))]
    return lower


for _op in UNARY:
    _register(_op, Lowering(("unary",), _lower_unary(_op), _float_only("x")))


def _lower_swiglu(c: Call) -> list[Dispatch]:
    half = c.shapes["x"][-1] // 2
    n = math.prod(c.shapes["x"][:-1]) * half
    return [Dispatch("swiglu", ["x", "y"], _groups(n), dict(n=n, half=half))]


_register("swiglu", Lowering(("swiglu",), _lower_swiglu, _float_only("x")))

# -- elementwise binary -------------------------------------------------------------------------
BINARY = {"add": 0, "mul": 1, "sub": 2, "div": 3, "pow": 4}


def broadcast_strides(shape: tuple, out: tuple) -> list[int]:
    """Element strides of a contiguous ``shape`` read at each index of ``out`` (0 where broadcast), 4 dims."""
    shape = (1,) * (4 - len(shape)) + tuple(shape)
    out = (1,) * (4 - len(out)) + tuple(out)
    strides, step = [0] * 4, 1
    for i in range(3, -1, -1):
        strides[i] = 0 if shape[i] == 1 and out[i] != 1 else step
        step *= shape[i]
    return strides


def _check_binary(specs, params):
    if specs["a"].dtype != "float32":
        return f"inputs are {specs['a'].dtype}"
    return None if max(len(specs["a"].shape), len(specs["b"].shape)) <= 4 else "rank above 4"


def binary_dispatch(op: str, a: str | None, b: str, y: str, shapes: dict[str, tuple]) -> Dispatch:
    """y = a (op) b broadcast to ``shapes[y]`` (ports' shapes); ``a`` None: y = y (op) b in place."""
    out = shapes[y]
    dims = (1,) * (4 - len(out)) + tuple(out)
    sa, sb = broadcast_strides(shapes[a] if a else out, out), broadcast_strides(shapes[b], out)
    n = math.prod(out)
    p = dict(n=n, d1=dims[1], d2=dims[2], d3=dims[3], op=BINARY[op], relu=0, acc=int(a is None))
    p.update({f"a{i}": s for i, s in enumerate(sa)})
    p.update({f"b{i}": s for i, s in enumerate(sb)})
    return Dispatch("binary", [a or "@dummy", b, y], _groups(n), p)


def _lower_binary(op: str) -> Callable[[Call], list[Dispatch]]:
    def lower(c: Call) -> list[Dispatch]:
        return [binary_dispatch(op, "a", "b", "y", c.shapes)]
    return lower


for _op in BINARY:
    _register(_op, Lowering(("binary",), _lower_binary(_op), _check_binary))


def _check_add_n(specs, params):
    ranks = [len(s.shape) for s in specs.values()]
    return _float_only(*specs)(specs, params) or (None if max(ranks) <= 4 else "rank above 4")


def _lower_add_n(c: Call) -> list[Dispatch]:
    """((x0 + x1) + x2) + ...: the first add writes y at its full (broadcast) shape, each later one adds
    in place, so the sums run in add_n's order; then its activation (if any) over y in place."""
    xs = [p for p in (f"x{i}" for i in range(len(c.shapes))) if p in c.shapes]
    adds = ([binary_dispatch("add", xs[0], xs[1], "y", c.shapes)]
            + [binary_dispatch("add", None, x, "y", c.shapes) for x in xs[2:]])
    if "activation" not in c.params:
        return adds
    act = FUSED_ACTIVATIONS[c.params["activation"]]
    return adds + [unary_dispatch(act.op, act.params, None, "y", math.prod(c.shapes["y"]))]


_register("add_n", Lowering(("binary", "unary"), _lower_add_n, _check_add_n))


# -- sequence ops -----------------------------------------------------------------------------------
def _check_rope(specs, params):
    return None if specs["positions"].dtype == "int32" else f"positions are {specs['positions'].dtype}"


def rope_inv_freq(p: dict) -> np.ndarray:
    """Per-pair inverse frequencies (rope_dim/2,) as float32, LLaMA-3.1 scaling applied (as ops.attention)."""
    rd = int(p.get("rope_dim", p["head_dim"]))
    inv = float(p.get("theta", 10000.0)) ** (-np.arange(0, rd, 2, dtype=np.float64) / rd)  # (rd/2,)
    if "llama3" in p:
        inv = llama3_inv_freq(inv, **{k: float(v) for k, v in p["llama3"].items()})
    return inv.astype(np.float32)


def _lower_rope(c: Call) -> list[Dispatch]:
    seq, row = c.shapes["x"]
    hd = int(c.params["head_dim"])
    n = seq * row
    return [Dispatch("rope", ["x", "positions", "@inv_freq", "y"], _groups(n),
                     dict(n=n, head_dim=hd, row=row, rope_dim=int(c.params.get("rope_dim", hd)),
                          style=int(c.params.get("style", "half") == "interleaved"),
                          inv_scale=1.0 / float(c.params.get("scale", 1.0))))]


_register("rope", Lowering(("rope",), _lower_rope, _check_rope, lambda p: {"inv_freq": rope_inv_freq(p)}))


def copy_dispatch(src: str, dst: str, inner: int, outer: int = 1, planes: int = 1, src_off: int = 0,
                  src_o: int = 0, src_z: int = 0, dst_off: int = 0, dst_o: int = 0, dst_z: int = 0) -> Dispatch:
    """dst[dst_off + z*dst_z + o*dst_o + i] = src[src_off + z*src_z + o*src_o + i]."""
    n = inner * outer * planes
    return Dispatch("copy", [src, dst], _groups(n), dict(n=n, inner=inner, outer=outer, src_off=src_off, src_o=src_o,
                                                       src_z=src_z, dst_off=dst_off, dst_o=dst_o, dst_z=dst_z))


def _check_attention(specs, params):
    hd = int(params["head_dim"])
    return None if hd <= MAX_HEAD_DIM else f"head_dim {hd} > {MAX_HEAD_DIM}"


def _lower_attention(c: Call) -> list[Dispatch]:
    """Append k, v to the device KV cache at ``start``, then attend over positions 0 .. start+seq."""
    p = c.params
    nh, nkv, hd = int(p["n_heads"]), int(p["n_kv_heads"]), int(p["head_dim"])
    seq = c.shapes["q"][0]
    start, cap = c.extra["start"], c.extra["capacity"]
    # (seq, nkv*hd) -> cache (nkv, cap, hd) rows start..start+seq: plane z = kv head, outer o = token
    append = dict(inner=hd, outer=seq, planes=nkv, src_o=nkv * hd, src_z=hd, dst_off=start * hd, dst_o=hd, dst_z=cap * hd)
    return [copy_dispatch("k", "@k_cache", **append), copy_dispatch("v", "@v_cache", **append),
            Dispatch("attention", ["q", "@k_cache", "@v_cache", "y"], (nh, seq, 1),
                     dict(seq=seq, start=start, n_heads=nh, n_kv_heads=nkv, head_dim=hd, capacity=cap,
                          causal=int(bool(p.get("causal", True))), window=int(p.get("window", 0)),
                          scale=float(p.get("scale", hd ** -0.5))))]


_register("attention", Lowering(("copy", "attention"), _lower_attention, _check_attention))


def _lower_output_rows(c: Call) -> list[Dispatch]:
    seq, dim = c.shapes["x"]
    return [copy_dispatch("x", "y", inner=dim, src_off=(seq - 1) * dim)]  # only reached for "last"


_register("output_rows", Lowering(("copy",), _lower_output_rows))
_register("reshape", Lowering((), lambda c: [], alias=True))


GATHER_RANK = 6


def gather_dispatch(out: tuple, strides: list[int], off: int = 0, lo: list[int] | None = None,
                    extent: list[int] | None = None, value: float = 0.0) -> Dispatch:
    """y (out) from x through per-dim strides and offset, with ``lo`` padding and a readable ``extent`` (<= 6 dims)."""
    pad = GATHER_RANK - len(out)
    dims = (1,) * pad + tuple(out)
    strides = [0] * pad + list(strides)
    lo = [0] * GATHER_RANK if lo is None else [0] * pad + list(lo)
    extent = list(dims) if extent is None else [1] * pad + list(extent)
    n = math.prod(dims)
    p = dict(n=n, off=off, value=float(value))
    for i in range(GATHER_RANK):
        p[f"s{i}"], p[f"lo{i}"], p[f"in{i}"] = strides[i], lo[i], extent[i]
        if i:
            p[f"d{i}"] = dims[i]
    return Dispatch("gather", ["x", "y"], _groups(n), p)


def contiguous_strides(shape: tuple) -> list[int]:
    """Element strides of a row-major array of ``shape``."""
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return strides[::-1]


def _check_gather(specs, params):
    x = specs["x"]
    if x.dtype != "float32":
        return f"x is {x.dtype}"
    return None if len(x.shape) <= GATHER_RANK else f"rank above {GATHER_RANK}"


def _lower_transpose(c: Call) -> list[Dispatch]:
    st = contiguous_strides(c.shapes["x"])
    return [gather_dispatch(c.shapes["y"], [st[int(i)] for i in c.params["perm"]])]


def _lower_slice(c: Call) -> list[Dispatch]:
    shape = c.shapes["x"]
    st = contiguous_strides(shape)
    strides, off = list(st), 0
    steps = c.params.get("steps", [1] * len(c.params["axes"]))
    for axis, start, end, step in zip(c.params["axes"], c.params["starts"], c.params["ends"], steps):
        axis = int(axis) % len(shape)
        r = slice_bounds(shape[axis], int(start), int(end), int(step))
        off += (r.start if len(r) else 0) * st[axis]
        strides[axis] = st[axis] * int(step)
    return [gather_dispatch(c.shapes["y"], strides, off)]


def _lower_pad(c: Call) -> list[Dispatch]:
    x = c.shapes["x"]
    return [gather_dispatch(c.shapes["y"], contiguous_strides(x), lo=[int(p[0]) for p in c.params["pads"]],
                            extent=list(x), value=float(c.params.get("value", 0)))]


def _check_reduce_mean(specs, params):
    x = specs["x"]
    n = len(x.shape)
    axes = sorted({int(a) % n for a in params["axes"]}) if n else []
    if x.dtype != "float32":
        return f"x is {x.dtype}"
    return None if axes and axes == list(range(n - len(axes), n)) else f"axes {params['axes']} are not the trailing ones"


def _lower_reduce_mean(c: Call) -> list[Dispatch]:
    x = c.shapes["x"]
    k = len({int(a) % len(x) for a in c.params["axes"]})
    rows, n = math.prod(x[:len(x) - k]), math.prod(x[len(x) - k:])
    return [Dispatch("reduce_mean", ["x", "y"], grid_1d(rows), dict(rows=rows, n=n))]


_register("reduce_mean", Lowering(("reduce_mean",), _lower_reduce_mean, _check_reduce_mean))
_register("transpose", Lowering(("gather",), _lower_transpose, _check_gather))
_register("slice", Lowering(("gather",), _lower_slice, _check_gather))
_register("pad", Lowering(("gather",), _lower_pad, _check_gather))


def _check_concat(specs, params):
    return _float_only(*specs)(specs, params)


def _lower_concat(c: Call) -> list[Dispatch]:
    out = c.shapes["y"]
    axis = int(c.params["axis"]) % len(out)
    outer, inner_out = math.prod(out[:axis]), math.prod(out[axis:])
    calls, off = [], 0
    for i in range(len(c.shapes) - 1):
        if f"x{i}" not in c.shapes:
            continue
        part = math.prod(c.shapes[f"x{i}"][axis:])
        if part:
            calls.append(copy_dispatch(f"x{i}", "y", inner=part, outer=outer, src_o=part, dst_off=off, dst_o=inner_out))
        off += part
    return calls


_register("concat", Lowering(("copy",), _lower_concat, _check_concat))


def _lower_concat_act(c: Call) -> list[Dispatch]:
    """concat's copies into y, then the activation over y in place."""
    act = FUSED_ACTIVATIONS[c.params["activation"]]
    return _lower_concat(c) + [unary_dispatch(act.op, act.params, None, "y", math.prod(c.shapes["y"]))]


_register("concat_act", Lowering(("copy", "unary"), _lower_concat_act, _check_concat))


# -- vision ---------------------------------------------------------------------------------------
def _lower_conv(c: Call) -> list[Dispatch]:
    (sh, sw), (dh, dw), (pt, pl, _, _) = window_params(c.params)
    n_, h, w, ch = c.shapes["x"]
    cout, kh, kw, cin_g = c.shapes["weight"]
    _, oh, ow, _ = c.shapes["y"]
    groups = int(c.params.get("groups", 1))
    has_bias = "bias" in c.shapes
    n = n_ * oh * ow * cout
    return [Dispatch("conv2d", ["x", "weight", "bias" if has_bias else "@dummy", "y"], _groups(n),
                     dict(n=n, H=h, W=w, C=ch, OH=oh, OW=ow, Cout=cout, kh=kh, kw=kw, cin_g=cin_g,
                          cout_g=cout // groups, sh=sh, sw=sw, dh=dh, dw=dw, pt=pt, pl=pl, has_bias=int(has_bias),
                          act=ACT_CODES[c.params.get("activation", "none")]))]


def _lower_pool(mode: str) -> Callable[[Call], list[Dispatch]]:
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
        return [Dispatch("pool2d", ["x", "y"], _groups(n),
                         dict(n=n, H=h, W=w, C=ch, OH=oh, OW=ow, kh=kh, kw=kw, sh=sh, sw=sw, pt=pt, pl=pl, mode=code,
                              act=ACT_CODES[c.params.get("activation", "none")]))]
    return lower


_register("conv2d", Lowering(("conv2d",), _lower_conv, _float_only("x", "weight")))
_register("max_pool2d", Lowering(("pool2d",), _lower_pool("max"), _float_only("x")))
_register("avg_pool2d", Lowering(("pool2d",), _lower_pool("avg"), _float_only("x")))
_register("global_avg_pool", Lowering(("pool2d",), _lower_pool("global"), _float_only("x")))


def _lower_resize(c: Call) -> list[Dispatch]:
    """One ``resize`` dispatch; each axis's (a, num, den, b) comes from ops.resize, so the CPU and GPU share the rule."""
    n_, h, w, ch = c.shapes["x"]
    _, oh, ow, _ = c.shapes["y"]
    sy, sx = axis_scales(c.params) or (None, None)
    coord = c.params["coordinate"]
    ay, numy, deny, by = (float(v) for v in axis_transform(coord, h, oh, sy))
    ax, numx, denx, bx = (float(v) for v in axis_transform(coord, w, ow, sx))
    n = n_ * oh * ow * ch
    return [Dispatch("resize", ["x", "y"], _groups(n),
                     dict(n=n, H=h, W=w, C=ch, OH=oh, OW=ow, mode=int(c.params["mode"] == "bilinear"),
                          rounding=NEAREST_MODES.index(c.params.get("nearest_mode", "round_prefer_floor")),
                          ay=ay, numy=numy, deny=deny, by=by, ax=ax, numx=numx, denx=denx, bx=bx))]


_register("resize", Lowering(("resize",), _lower_resize, _float_only("x")))
