"""The GPU lowering vocabulary: how an op entry says what a GPU backend runs for it.

An op's ``gpu`` field (registry.OpDef) is a Lowering: the shader kernels it needs, ``check(specs,
params)`` saying why a node must stay on the CPU (None: it can run on the GPU), ``lower(call)``
turning a node with concrete shapes into dispatches whose buffers name the node's ports ("x",
"y0", ...) or executor-provided buffers ("@dummy", "@k_cache", "@v_cache", "@<constant>"), and
``constants(params)``, small per-node tables uploaded once. The backends (volvox/_gpu) and the
GPU executor (runtime/gpu_executor.py) read these; nothing here touches a device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from volvox.ops.codes import BIN, FN, fn_args
from volvox.ops.gpu_weights import LAYOUTS, chunk_words, row_pieces

GEMV_MAX_ROWS = 8                        # gemv_q's M; more rows take matmul_q's tiles
MAX_HEAD_DIM = 128
MAX_GROUPS = 65535                       # workgroups per grid dimension every API guarantees


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
    extra: dict = field(default_factory=dict)           # attention: start (cached tokens), capacity (device cache);
                                                        # "<port>_layout": (dtype, rows a chunk) of a packed weight


@dataclass(frozen=True)
class Lowering:
    """How one op runs on a GPU."""

    kernels: tuple[str, ...]
    lower: Callable[[Call], list[Dispatch]]
    check: Callable[[dict, dict], str | None] = lambda specs, params: None
    constants: Callable[[dict], dict[str, np.ndarray]] = lambda params: {}
    alias: bool = False   # output is the input's buffer (reshape, all rows): no dispatch


def grid_1d(n_groups: int) -> tuple[int, int, int]:
    """``n_groups`` workgroups folded into x and y (shaders index (wid.y * nwg.x + wid.x))."""
    n_groups = max(1, int(n_groups))
    x = min(n_groups, MAX_GROUPS)
    return (x, -(-n_groups // x), 1)


def grid_of(n: int, per: int = 64) -> tuple[int, int, int]:
    """The grid of ``n`` items, ``per`` a workgroup."""
    return grid_1d(-(-n // per))


def float_only(*ports: str) -> Callable[[dict, dict], str | None]:
    """A check keeping a node on the CPU unless ``ports`` are float32."""
    def check(specs, params):
        for p in ports:
            if p in specs and specs[p].dtype != "float32":
                return f"{p} is {specs[p].dtype}"
        return None
    return check


def matmul_dispatch(x: str, w: str, bias: str | None, y: str, m: int, k: int, n: int, w_row: int = 0,
                    act: str = "none", w_n: int | None = None, w_k: int = 1, batch: int = 1,
                    x_batch: int = 0, w_batch: int = 0) -> Dispatch:
    """y (batch, m, n) = act(x (m, k) @ W^T + bias) with W[n, k] = w[(w_row + n) * w_n + k * w_k] (default:
    a row-major (rows, k) weight) and per-batch strides x_batch, w_batch (0: broadcast)."""
    return Dispatch("matmul", [x, w, bias or "@dummy", y], (-(-n // 16), -(-m // 16), batch),
                    dict(M=m, K=k, N=n, w_row=w_row, w_n=k if w_n is None else w_n, w_k=w_k, x_batch=x_batch,
                         w_batch=w_batch, has_bias=int(bias is not None), act=FN[act]))


def float_linear_dispatch(x: str, w: str, bias: str | None, y: str, m: int, k: int, n: int, w_row: int = 0,
                          act: str = "none") -> Dispatch:
    """y (m, n) = act(x (m, k) @ w[w_row:w_row + n]^T + bias) for a float32 weight bound whole: gemv_q
    over its f32 rows for m <= GEMV_MAX_ROWS (decode), else the tiled matmul (prefill)."""
    if m > GEMV_MAX_ROWS:
        return matmul_dispatch(x, w, bias, y, m, k, n, w_row=w_row, act=act)
    return Dispatch("gemv_q", [x, w, bias or "@dummy", y], grid_1d(-(-n // 4)),
                    dict(M=m, K=k, N=n, n0=0, rows=n, w_row=w_row, head_off=0, wtype=LAYOUTS["float32"].code,
                         has_bias=int(bias is not None), act=FN[act]))


def packed_layout(c: Call, port: str) -> tuple[str, int] | None:
    """(dtype, rows a chunk) when the executor bound ``port`` packed in chunks ("<port>.<i>"), else None."""
    return c.extra.get(f"{port}_layout")


def packed_matmul_dispatches(x: str, port: str, bias: str | None, y: str, m: int, k: int, n: int,
                             layout: tuple[str, int], total_rows: int, w_row: int = 0,
                             act: str = "none") -> list[Dispatch]:
    """y (m, n) = act(x (m, k) @ W[w_row:w_row + n]^T + bias) for a weight of ``total_rows`` rows bound
    packed in chunks ``port.0``, ``port.1``, ... (volvox/ops/gpu_weights.py): one dispatch per chunk the
    rows touch; gemv_q for m <= GEMV_MAX_ROWS (decode), else matmul_q's tiles (prefill)."""
    dtype, per_chunk = layout
    kernel = "gemv_q" if m <= GEMV_MAX_ROWS else "matmul_q"
    out = []
    for chunk, chunk_row, col, count in row_pieces(w_row, n, per_chunk):
        head_off = chunk_words(dtype, min(per_chunk, total_rows - chunk * per_chunk), k)[1]
        grid = grid_1d(-(-count // 4)) if kernel == "gemv_q" else (-(-count // 64), -(-m // 16), 1)
        out.append(Dispatch(kernel, [x, f"{port}.{chunk}", bias or "@dummy", y], grid,
                            dict(M=m, K=k, N=n, n0=col, rows=count, w_row=chunk_row, head_off=head_off,
                                 wtype=LAYOUTS[dtype].code, has_bias=int(bias is not None), act=FN[act])))
    return out


def rows_of(shape) -> tuple[int, int]:
    """(rows, last dim) of a shape."""
    return math.prod(shape[:-1]), shape[-1]


def unary_dispatch(op: str, params: dict, x: str | None, y: str, n: int) -> Dispatch:
    """y = op(x) over n elements, with op's params (its function's parameters, gelu's approximation);
    ``x`` None: y = op(y) in place."""
    fn = "gelu_tanh" if op == "gelu" and params.get("approximate", "none") == "tanh" else op
    code, lo, hi = fn_args(fn, params)
    return Dispatch("unary", [x or "@dummy", y], grid_of(n), dict(n=n, op=code, lo=lo, hi=hi, in_place=int(x is None)))


def unary_lowering(op: str) -> "Lowering":
    """The Lowering of an elementwise op the ``unary`` shader runs (its FN code)."""
    def lower(c: Call) -> list[Dispatch]:
        return [unary_dispatch(op, c.params, "x", "y", math.prod(c.shapes["x"]))]
    return Lowering(("unary",), lower, float_only("x"))


def broadcast_strides(shape: tuple, out: tuple) -> list[int]:
    """Element strides of a contiguous ``shape`` read at each index of ``out`` (0 where broadcast), 4 dims."""
    shape = (1,) * (4 - len(shape)) + tuple(shape)
    out = (1,) * (4 - len(out)) + tuple(out)
    strides, step = [0] * 4, 1
    for i in range(3, -1, -1):
        strides[i] = 0 if shape[i] == 1 and out[i] != 1 else step
        step *= shape[i]
    return strides


def check_binary(specs, params):
    if specs["a"].dtype != "float32":
        return f"inputs are {specs['a'].dtype}"
    return None if max(len(specs["a"].shape), len(specs["b"].shape)) <= 4 else "rank above 4"


def binary_dispatch(op: str, a: str | None, b: str, y: str, shapes: dict[str, tuple]) -> Dispatch:
    """y = a (op) b broadcast to ``shapes[y]`` (ports' shapes); ``a`` None: y = y (op) b in place."""
    out = shapes[y]
    dims = (1,) * (4 - len(out)) + tuple(out)
    sa, sb = broadcast_strides(shapes[a] if a else out, out), broadcast_strides(shapes[b], out)
    n = math.prod(out)
    p = dict(n=n, d1=dims[1], d2=dims[2], d3=dims[3], op=BIN[op], relu=0, acc=int(a is None))
    p.update({f"a{i}": s for i, s in enumerate(sa)})
    p.update({f"b{i}": s for i, s in enumerate(sb)})
    return Dispatch("binary", [a or "@dummy", b, y], grid_of(n), p)


def binary_lowering(op: str) -> "Lowering":
    """The Lowering of a broadcasting binary op the ``binary`` shader runs."""
    def lower(c: Call) -> list[Dispatch]:
        return [binary_dispatch(op, "a", "b", "y", c.shapes)]
    return Lowering(("binary",), lower, check_binary)


def copy_dispatch(src: str, dst: str, inner: int, outer: int = 1, planes: int = 1, src_off: int = 0,
                  src_o: int = 0, src_z: int = 0, dst_off: int = 0, dst_o: int = 0, dst_z: int = 0) -> Dispatch:
    """dst[dst_off + z*dst_z + o*dst_o + i] = src[src_off + z*src_z + o*src_o + i]."""
    n = inner * outer * planes
    return Dispatch("copy", [src, dst], grid_of(n), dict(n=n, inner=inner, outer=outer, src_off=src_off, src_o=src_o,
                                                       src_z=src_z, dst_off=dst_off, dst_o=dst_o, dst_z=dst_z))

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
    return Dispatch("gather", ["x", "y"], grid_of(n), p)


def contiguous_strides(shape: tuple) -> list[int]:
    """Element strides of a row-major array of ``shape``."""
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return strides[::-1]


def check_gather(specs, params):
    x = specs["x"]
    if x.dtype != "float32":
        return f"x is {x.dtype}"
    return None if len(x.shape) <= GATHER_RANK else f"rank above {GATHER_RANK}"
