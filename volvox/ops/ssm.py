"""State-space model ops: Mamba's causal depthwise conv1d and selective scan, Mamba-2's SSD scan and
its gated, grouped RMSNorm.

The conv and the scans are stateful: they carry a recurrent state from one run to the next in the
run context's state cache (``ctx.state``, runtime/state_cache.py), at the slot of their ``layer``
param: the conv its last ``kernel - 1`` input rows, a scan its hidden state. A prefill is the same
recurrence as a decode step run over every row in turn (parallel over channels / heads in the CPU
kernel), so the state after a prompt is exactly the state token-by-token decoding reaches. Without
a state cache (``ctx.state`` None: a plain ``Model.run``) a run starts from zeros and keeps nothing.
A BatchContext runs each sequence's rows from its own state.

Conventions shared with the importers: ``A`` is the continuous-time decay, already negative
(``-exp(A_log)``, as GGUF stores it); ``dt`` enters raw and goes through softplus here, with
torch's and ggml's threshold (x > 20: x).
"""

from __future__ import annotations

import numpy as np

from volvox import cpu
from volvox.errors import GenerationError
from volvox.ir.graph import expect, same_dim
from volvox.ops.context import BatchContext
from volvox.ops.registry import OpDef, register

SOFTPLUS_THRESHOLD = 20.0


def softplus_ref(x: np.ndarray) -> np.ndarray:
    """log(1 + exp(x)), x itself above SOFTPLUS_THRESHOLD (float64)."""
    x = np.asarray(x, np.float64)
    return np.where(x > SOFTPLUS_THRESHOLD, x, np.log1p(np.exp(np.minimum(x, SOFTPLUS_THRESHOLD))))


def _silu64(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return x / (1.0 + np.exp(-x))


def _per_sequence(fn, ctx: BatchContext, p: dict, inputs: tuple, rows: tuple) -> np.ndarray:
    """``fn`` run per sequence of a packed batch, the inputs at indices ``rows`` cut to that sequence's
    rows (the others are weights), the results concatenated in row order."""
    out, start = [], 0
    for seq_ctx, n in ctx.parts:
        out.append(fn(seq_ctx, p, *(a[start:start + n] if i in rows and a is not None else a
                                    for i, a in enumerate(inputs))))
        start += n
    return np.concatenate(out)


def _layer_state(ctx, p, kind: str, shape: tuple) -> np.ndarray | None:
    """The state cache's ``kind`` array for this node's layer (checked against ``shape``), or None
    without a state cache."""
    if ctx.state is None:
        return None
    arr = ctx.state.layer(kind, int(p.get("layer", 0)))
    if arr.shape != shape:
        raise GenerationError(f"{kind} state of layer {p.get('layer', 0)} is {arr.shape}, the op needs {shape}")
    return arr


# ------------------------------------------------------------------------------ causal conv1d
def _conv_infer(specs, params):
    x, w = specs["x"], specs["weight"]
    expect(x.dtype == "float32" and len(x.shape) == 2, f"x must be float32 (seq, channels), got {x.describe()}")
    expect(w.dtype == "float32" and len(w.shape) == 2 and same_dim(w.shape[0], x.shape[1]),
           f"weight must be float32 (channels, kernel) of x's channels, got {w.describe()} for {x.describe()}")
    expect(not isinstance(w.shape[1], int) or w.shape[1] >= 1, f"kernel width must be >= 1, got {w.describe()}")
    if "bias" in specs:
        b = specs["bias"]
        expect(b.dtype == "float32" and len(b.shape) == 1 and same_dim(b.shape[0], x.shape[1]),
               f"bias must be float32 (channels,), got {b.describe()}")
    int(params.get("layer", 0))
    return {"y": (x.shape, "float32")}


def causal_conv1d_ref(ctx, p, x, weight, bias=None):
    """Depthwise causal convolution over time: y[t, c] = sum_k weight[c, k] x[t + k - (K-1), c] + bias[c],
    the rows before the first taken from the conv state (the previous run's last K-1 rows), which is
    then replaced by this run's window's last K-1 rows."""
    if isinstance(ctx, BatchContext):
        return _per_sequence(causal_conv1d_ref, ctx, p, (x, weight, bias), rows=(0,))
    seq, channels = x.shape
    kernel = weight.shape[1]
    state = _layer_state(ctx, p, "conv", (kernel - 1, channels))  # (kernel-1, channels) or None
    history = state if state is not None else np.zeros((kernel - 1, channels), np.float32)
    window = np.concatenate([history, x]).astype(np.float64)  # (kernel-1+seq, channels)
    y = np.zeros((seq, channels), np.float64)
    for k in range(kernel):
        y += window[k:k + seq] * weight[:, k].astype(np.float64)
    if bias is not None:
        y += bias
    if state is not None:
        state[:] = window[seq:]
    return y.astype(np.float32)


def causal_conv1d_fast(ctx, p, x, weight, bias=None):
    """causal_conv1d_ref's contract through the CPU kernel (float32, parallel over channels)."""
    if isinstance(ctx, BatchContext):
        return _per_sequence(causal_conv1d_fast, ctx, p, (x, weight, bias), rows=(0,))
    return cpu.causal_conv1d(x, weight, bias, _layer_state(ctx, p, "conv", (weight.shape[1] - 1, x.shape[1])))



# ------------------------------------------------------------------------------ Mamba selective scan
def _scan_infer(specs, params):
    x, dt, a, b, c, d = (specs[k] for k in ("x", "dt", "A", "B", "C", "D"))
    expect(len(x.shape) == 2 and x.dtype == "float32", f"x must be float32 (seq, d_inner), got {x.describe()}")
    expect(dt.shape == x.shape or (len(dt.shape) == 2 and same_dim(dt.shape[1], x.shape[1])),
           f"dt must be (seq, d_inner) like x, got {dt.describe()}")
    expect(len(a.shape) == 2 and same_dim(a.shape[0], x.shape[1]), f"A must be (d_inner, state), got {a.describe()}")
    for t in (b, c):
        expect(len(t.shape) == 2 and same_dim(t.shape[1], a.shape[1]) and same_dim(t.shape[0], x.shape[0]),
               f"{t.name} must be (seq, {a.shape[1]}), got {t.describe()}")
    expect(len(d.shape) == 1 and same_dim(d.shape[0], x.shape[1]), f"D must be (d_inner,), got {d.describe()}")
    if "z" in specs:
        expect(same_dim(specs["z"].shape[1], x.shape[1]), f"z must be (seq, d_inner), got {specs['z'].describe()}")
    for t in (dt, a, b, c, d):
        expect(t.dtype == "float32", f"{t.name} must be float32, got {t.describe()}")
    int(params.get("layer", 0))
    return {"y": (x.shape, "float32")}


def selective_scan_ref(ctx, p, x, dt, A, B, C, D, z=None):
    """Mamba's selective scan, row by row (float64, the state kept in float32 between runs):
    delta = softplus(dt); h = exp(delta A) h + delta B x; y = h C + D x, times silu(z) when z is given.
    Shapes: x, dt, z (seq, d_inner); A (d_inner, N); B, C (seq, N); D (d_inner,); state (d_inner, N)."""
    if isinstance(ctx, BatchContext):
        return _per_sequence(selective_scan_ref, ctx, p, (x, dt, A, B, C, D, z), rows=(0, 1, 3, 4, 6))
    seq, d_inner = x.shape
    state = _layer_state(ctx, p, "ssm", A.shape)  # (d_inner, N) or None
    h = state.astype(np.float64) if state is not None else np.zeros(A.shape, np.float64)
    delta = softplus_ref(dt)  # (seq, d_inner)
    a64, x64 = A.astype(np.float64), x.astype(np.float64)
    y = np.empty((seq, d_inner), np.float64)
    for t in range(seq):
        h = np.exp(delta[t, :, None] * a64) * h + (delta[t] * x64[t])[:, None] * B[t].astype(np.float64)
        y[t] = h @ C[t].astype(np.float64)
    y += x64 * D
    if z is not None:
        y *= _silu64(z)
    if state is not None:
        state[:] = h
    return y.astype(np.float32)


def selective_scan_fast(ctx, p, x, dt, A, B, C, D, z=None):
    """selective_scan_ref's contract through the CPU kernel (float32, parallel over channels)."""
    if isinstance(ctx, BatchContext):
        return _per_sequence(selective_scan_fast, ctx, p, (x, dt, A, B, C, D, z), rows=(0, 1, 3, 4, 6))
    return cpu.selective_scan(x, dt, A, B, C, D, z, _layer_state(ctx, p, "ssm", A.shape))



# ------------------------------------------------------------------------------ Mamba-2 SSD
def _ssd_dims(p) -> tuple[int, int, int, int]:
    return int(p["n_heads"]), int(p["head_dim"]), int(p["n_groups"]), int(p["state_size"])


def _ssd_infer(specs, params):
    nh, hd, ng, n = _ssd_dims(params)
    expect(min(nh, hd, ng, n) > 0 and nh % ng == 0, f"n_heads {nh} must be a positive multiple of n_groups {ng}")
    x = specs["x"]
    expect(len(x.shape) == 2 and same_dim(x.shape[1], nh * hd), f"x must be (seq, {nh * hd}), got {x.describe()}")
    expect(len(specs["dt"].shape) == 2 and same_dim(specs["dt"].shape[1], nh), f"dt must be (seq, {nh})")
    for k in ("dt_bias", "A", "D"):
        s = specs[k]
        expect(len(s.shape) == 1 and same_dim(s.shape[0], nh), f"{k} must be ({nh},), got {s.describe()}")
    for k in ("B", "C"):
        s = specs[k]
        expect(len(s.shape) == 2 and same_dim(s.shape[1], ng * n) and same_dim(s.shape[0], x.shape[0]),
               f"{k} must be (seq, {ng * n}), got {s.describe()}")
    for s in specs.values():
        expect(s.dtype == "float32", f"{s.name} must be float32, got {s.describe()}")
    int(params.get("layer", 0))
    return {"y": (x.shape, "float32")}


def ssd_ref(ctx, p, x, dt, dt_bias, A, B, C, D):
    """Mamba-2's scan (SSD) as its recurrence, row by row (float64, state kept in float32): per head h
    of group g = h // (n_heads / n_groups), delta = softplus(dt + dt_bias), a scalar decay
    exp(delta A[h]), state (head_dim, N) = decay state + delta x[h] B[g]^T, y[h] = state C[g] + D[h] x[h].
    Shapes: x (seq, n_heads*head_dim); dt (seq, n_heads); B, C (seq, n_groups*N); state (n_heads, head_dim, N)."""
    if isinstance(ctx, BatchContext):
        return _per_sequence(ssd_ref, ctx, p, (x, dt, dt_bias, A, B, C, D), rows=(0, 1, 4, 5))
    nh, hd, ng, n = _ssd_dims(p)
    seq = x.shape[0]
    state = _layer_state(ctx, p, "ssm", (nh, hd, n))  # (n_heads, head_dim, N) or None
    h = state.astype(np.float64) if state is not None else np.zeros((nh, hd, n), np.float64)
    delta = softplus_ref(dt.astype(np.float64) + dt_bias)  # (seq, n_heads)
    xh = x.reshape(seq, nh, hd).astype(np.float64)  # (seq, n_heads, head_dim)
    group = np.arange(nh) // (nh // ng)  # (n_heads,) the group of each head
    bh = B.reshape(seq, ng, n).astype(np.float64)[:, group]  # (seq, n_heads, N)
    ch = C.reshape(seq, ng, n).astype(np.float64)[:, group]  # (seq, n_heads, N)
    y = np.empty((seq, nh, hd), np.float64)
    for t in range(seq):
        decay = np.exp(delta[t] * A)  # (n_heads,)
        h = decay[:, None, None] * h + (delta[t][:, None] * xh[t])[:, :, None] * bh[t][:, None, :]
        y[t] = np.einsum("hpn,hn->hp", h, ch[t])
    y += xh * D[:, None]
    if state is not None:
        state[:] = h
    return y.reshape(seq, nh * hd).astype(np.float32)


def ssd_fast(ctx, p, x, dt, dt_bias, A, B, C, D):
    """ssd_ref's contract through the CPU kernel (float32, parallel over heads' state rows)."""
    if isinstance(ctx, BatchContext):
        return _per_sequence(ssd_fast, ctx, p, (x, dt, dt_bias, A, B, C, D), rows=(0, 1, 4, 5))
    nh, hd, ng, n = _ssd_dims(p)
    return cpu.ssd_scan(x, dt, dt_bias, A, B, C, D, nh, ng, _layer_state(ctx, p, "ssm", (nh, hd, n)))



# ------------------------------------------------------------------------------ gated RMSNorm
def _gated_norm_infer(specs, params):
    x, z, w = specs["x"], specs["z"], specs["weight"]
    expect(x.dtype == z.dtype == w.dtype == "float32", "x, z and weight must be float32")
    expect(len(x.shape) == 2 and z.shape == x.shape, f"x and z must be one (seq, dim) shape: {x.describe()}, {z.describe()}")
    expect(len(w.shape) == 1 and same_dim(w.shape[0], x.shape[1]), f"weight must be (dim,), got {w.describe()}")
    g = int(params.get("group_size", 0))
    expect(g >= 0 and (g == 0 or not isinstance(x.shape[1], int) or x.shape[1] % g == 0),
           f"group_size {g} must divide {x.shape[1]}")
    float(params.get("eps", 1e-5))
    return {"y": (x.shape, "float32")}


def gated_rms_norm_ref(ctx, p, x, z, weight):
    """Mamba-2's output norm: g = x * silu(z), each run of ``group_size`` columns (0: the whole row)
    scaled to unit root mean square (+ eps), times weight."""
    seq, dim = x.shape
    group = int(p.get("group_size", 0)) or dim
    g = (x.astype(np.float64) * _silu64(z)).reshape(seq, dim // group, group)
    g = g / np.sqrt(np.mean(g * g, axis=-1, keepdims=True) + float(p.get("eps", 1e-5)))
    return (g.reshape(seq, dim) * weight).astype(np.float32)


register(OpDef("causal_conv1d", "ssm", ("x", "weight", "bias?"), ("y",), _conv_infer, causal_conv1d_ref,
               causal_conv1d_fast, stateful=True))
register(OpDef("selective_scan", "ssm", ("x", "dt", "A", "B", "C", "D", "z?"), ("y",), _scan_infer,
               selective_scan_ref, selective_scan_fast, stateful=True))
register(OpDef("ssd_scan", "ssm", ("x", "dt", "dt_bias", "A", "B", "C", "D"), ("y",), _ssd_infer, ssd_ref,
               ssd_fast, stateful=True))
register(OpDef("gated_rms_norm", "ssm", ("x", "z", "weight"), ("y",), _gated_norm_infer, gated_rms_norm_ref))
