"""Mixture-of-experts feed-forward: ``moe``.

A router's logits pick ``top_k`` experts per row (softmax or sigmoid scores, renormalised over the
chosen ones or not); each chosen expert runs its SwiGLU FFN on the row,
``down(silu(gate x) * up x)``, and the row's output is the score-weighted sum of their outputs, in
the order of the scores (highest first). The router itself is an ordinary ``linear`` node before
it. A shared expert that every row runs (Qwen2-MoE) is ordinary nodes before it too; its output
(``shared``) is added last, scaled by ``sigmoid(shared_logit)`` when the model gates it, so that a
token step computes that gate in its routing step and the sum in its combine step.

Expert weights are 3-D stacks ``(n_experts, out, in)``: float arrays, or a QuantTensor whose rows
are the experts' rows one expert after another (a GGUF ``ffn_*_exps`` tensor, kept packed; its spec
may be 3-D, as the file says, or the QuantTensor's own 2-D ``(n_experts * out, in)``).

The CPU runs a prefill by gathering each expert's rows and multiplying them with the expert's
matrices (only experts some row chose run), and a token step (one row) as native steps: route,
the chosen experts' GEMVs (engine/moe.pxi), combine.
"""

from __future__ import annotations

import numpy as np

from volvox import cpu
from volvox.errors import ShapeError, UnsupportedError
from volvox.ir.graph import expect, same_dim
from volvox.ir.quant_blocks import QuantTensor, dequantize_ref
from volvox.ops.linear import WEIGHT_DTYPES
from volvox.ops.registry import OpDef, register

GATINGS = ("softmax", "sigmoid")


def _stack_shape(spec, n_experts) -> tuple:
    """(n_experts, out, in) of an expert stack's spec: 3-D as it is, or 2-D (n_experts * out, in) quantized rows
    (a QuantTensor's own shape)."""
    if len(spec.shape) == 2 and spec.dtype not in ("float32", "float16") and isinstance(n_experts, int):
        rows, cols = spec.shape
        expect(isinstance(rows, int) and rows % n_experts == 0,
               f"{spec.describe()}: {rows} quantized rows do not split into {n_experts} experts")
        return (n_experts, rows // n_experts, cols)
    expect(len(spec.shape) == 3, f"expert weights must be (n_experts, out, in) stacks, got {spec.describe()}")
    return spec.shape


def _moe_infer(specs, params):
    x, logits = specs["x"], specs["logits"]
    expect(x.dtype == "float32" and len(x.shape) == 2, f"x must be float32 (rows, dim), got {x.describe()}")
    expect(logits.dtype == "float32" and len(logits.shape) == 2 and same_dim(logits.shape[0], x.shape[0]),
           f"logits must be float32 (rows, n_experts) with x's rows, got {logits.describe()}")
    for port in ("gate", "up", "down"):
        expect(specs[port].dtype in WEIGHT_DTYPES, f"{port} must be a float or quantized stack, got {specs[port].describe()}")
    gate, up, down = (_stack_shape(specs[port], logits.shape[1]) for port in ("gate", "up", "down"))
    n_experts, ffn, dim = gate
    expect(up == gate and down == (n_experts, dim, ffn) and same_dim(x.shape[1], dim),
           f"expert stacks gate {gate}, up {up}, down {down} do not fit x {x.describe()}")
    expect(same_dim(logits.shape[1], n_experts), f"logits {logits.describe()} must score {n_experts} experts")
    top_k = params["top_k"]
    expect(isinstance(top_k, int) and 1 <= top_k <= n_experts, f"top_k must be 1..{n_experts}, got {top_k!r}")
    if params.get("gating", "softmax") not in GATINGS:
        raise UnsupportedError(f"moe gating {params.get('gating')!r} (supported: {', '.join(GATINGS)})")
    if "shared" in specs:
        sh = specs["shared"]
        expect(sh.dtype == "float32" and len(sh.shape) == 2 and same_dim(sh.shape[0], x.shape[0])
               and same_dim(sh.shape[1], x.shape[1]), f"shared must be float32 like x {x.describe()}, got {sh.describe()}")
    if "shared_logit" in specs:
        g = specs["shared_logit"]
        expect("shared" in specs and g.dtype == "float32" and len(g.shape) == 2 and same_dim(g.shape[0], x.shape[0])
               and g.shape[1] == 1, f"shared_logit must be float32 (rows, 1) beside a shared input, got {g.describe()}")
    return {"y": (x.shape, "float32")}


def route(logits: np.ndarray, top_k: int, gating: str = "softmax", norm_topk: bool = False, dtype=np.float32):
    """(ids (rows, top_k) int64, weights (rows, top_k)): each row's ``top_k`` best experts, highest score
    first (ties: the lower id), and their scores (softmax over all experts, or sigmoid), divided by
    their sum when ``norm_topk``; computed in ``dtype``."""
    z = logits.astype(dtype)
    if gating == "softmax":
        e = np.exp(z - z.max(axis=-1, keepdims=True))
        scores = e / e.sum(axis=-1, keepdims=True)
    else:
        scores = 1 / (1 + np.exp(-z))
    ids = np.argsort(-scores, axis=-1, kind="stable")[:, :top_k]  # (rows, top_k)
    weights = np.take_along_axis(scores, ids, axis=-1)
    if norm_topk:
        weights = weights / weights.sum(axis=-1, keepdims=True)
    return ids.astype(np.int64), weights.astype(dtype)


def expert_matrix_ref(stack, n_experts: int, e: int) -> np.ndarray:
    """Expert ``e``'s float (out, in) matrix of a 3-D stack (dequantized for the reference)."""
    if isinstance(stack, QuantTensor):
        rows = stack.shape[0] // n_experts
        return dequantize_ref(QuantTensor(stack.data[e * rows:(e + 1) * rows], stack.qtype, (rows, stack.shape[1])))
    return np.asarray(stack[e], dtype=np.float32)


def moe_ref(ctx, p, x, logits, gate, up, down, shared=None, shared_logit=None):
    """The oracle: route in float64, every chosen expert's SwiGLU FFN in float64, weighted sum (+ the shared
    expert's output, scaled by the sigmoid of its logit)."""
    ids, weights = route(logits, p["top_k"], p.get("gating", "softmax"), p.get("norm_topk", False), np.float64)
    x64, n_experts = x.astype(np.float64), logits.shape[1]
    y = np.zeros(x.shape, np.float64)                                             # (rows, dim)
    for e in np.unique(ids):
        rows, slots = np.nonzero(ids == e)
        xe = x64[rows]                                                            # (chose e, dim)
        g = xe @ expert_matrix_ref(gate, n_experts, e).astype(np.float64).T       # (chose e, ffn)
        u = xe @ expert_matrix_ref(up, n_experts, e).astype(np.float64).T
        o = (g / (1 + np.exp(-g)) * u) @ expert_matrix_ref(down, n_experts, e).astype(np.float64).T  # (chose e, dim)
        y[rows] += weights[rows, slots][:, None] * o
    if shared is not None:
        scale = 1.0 if shared_logit is None else 1 / (1 + np.exp(-shared_logit.astype(np.float64)))  # (rows, 1)
        y += scale * shared
    return y.astype(np.float32)


def expert_matrices(stack, n_experts: int) -> list:
    """Per-expert (out, in) weights of a 3-D stack for cpu.linear: views of its rows (a QuantTensor per
    expert, made once per stack and kept on it, so that each one's interleaved packing is cached)."""
    if not isinstance(stack, QuantTensor):
        return list(stack)
    cached = getattr(stack, "experts", None)
    if cached is None:
        if stack.shape[0] % n_experts:
            raise ShapeError(f"{stack.shape[0]} quantized rows do not split into {n_experts} experts")
        rows, data = stack.shape[0] // n_experts, stack.data
        cached = [QuantTensor(data[e * rows:(e + 1) * rows], stack.qtype, (rows, stack.shape[1]))
                  for e in range(n_experts)]
        object.__setattr__(stack, "experts", cached)  # (QuantTensor is frozen: a cache, as StackedQuantTensor's)
    return cached


def route_fast(logits: np.ndarray, top_k: int, gating: str = "softmax", norm_topk: bool = False,
               shared: bool = False, shared_logit: np.ndarray | None = None):
    """route() in float32 through the engine's routing step (a token step's bits); with ``shared`` the weights
    get a last column, the shared expert's: sigmoid(shared_logit) (rows, 1), or 1 without one."""
    rows, n_experts = logits.shape
    if n_experts > cpu.engine.MOE_ROUTE_MAX_EXPERTS:
        raise UnsupportedError(f"moe: a router over {n_experts} experts "
                               f"(at most {cpu.engine.MOE_ROUTE_MAX_EXPERTS})")
    ids = np.empty((rows, top_k), np.int64)                    # (rows, top_k)
    weights = np.empty((rows, top_k + shared), np.float32)     # (rows, top_k [+ 1])
    gate = None if shared_logit is None else np.ascontiguousarray(shared_logit, np.float32)
    cpu.engine.moe_route(np.ascontiguousarray(logits, np.float32), ids, weights, gating == "sigmoid", norm_topk, gate)
    return ids, weights


def moe_fast(ctx, p, x, logits, gate, up, down, shared=None, shared_logit=None):
    """Each chosen expert on the rows that chose it (gathered), through cpu.linear; the outputs
    weighted and summed per row in score order, the shared expert's last (a single row: the token
    step's bits)."""
    top_k = p["top_k"]
    ids, weights = route_fast(logits, top_k, p.get("gating", "softmax"), p.get("norm_topk", False),
                              shared is not None, shared_logit)
    gates, ups, downs = (expert_matrices(w, logits.shape[1]) for w in (gate, up, down))
    out = np.empty((x.shape[0], top_k, x.shape[1]), np.float32)  # (rows, top_k, dim) each chosen expert's output
    for e in np.unique(ids):
        rows, slots = np.nonzero(ids == e)
        xe = np.ascontiguousarray(x[rows])                        # (chose e, dim)
        g = cpu.linear(xe, gates[e])                              # (chose e, ffn)
        u = cpu.linear(xe, ups[e])
        h = cpu.silu(g, out=g)
        h *= u
        out[rows, slots] = cpu.linear(h, downs[e])                # (chose e, dim)
    y = weights[:, 0, None] * out[:, 0]                           # (rows, dim)
    for k in range(1, top_k):
        y += weights[:, k, None] * out[:, k]
    if shared is not None:
        y += weights[:, top_k, None] * shared
    return y


def moe_into(ctx, p, out, x, logits, gate, up, down, shared=None, shared_logit=None):
    """moe_fast written into ``out`` (rows, dim)."""
    out[...] = moe_fast(ctx, p, x, logits, gate, up, down, shared, shared_logit)
    return out


# ------------------------------------------------------------------- CPU plan lowering
def _expert_table(plan, node, port: str, n_experts: int) -> tuple[np.ndarray, int, int, int, int, int]:
    """(addresses (n_experts,) uint64 of each expert's weights as the GEMV reads them, wtype, N, K, row_bytes,
    group_bytes) of stack ``port``: quantized experts interleaved for the tier where it has the kernel
    (each expert's packing cached on it, as cpu.linear's), float ones as stored."""
    mats = expert_matrices(plan.weight(node, port), n_experts)
    code, n, k = cpu._weight_meta(mats[0], f"{node.id}.{port}")
    interleave = cpu.engine.act_row_bytes(code, k) and all(cpu._read_only(m) for m in mats)
    packs = [cpu.interleaved_weights(m) if interleave else None for m in mats]
    if packs[0] is not None:
        arrays, group, row_bytes = [p[0] for p in packs], packs[0][1], 0
    else:
        arrays, group = [cpu._weight_bytes(m, f"{node.id}.{port}")[1] for m in mats], 0
        row_bytes = arrays[0].shape[1]
    plan.keep(*arrays)
    table = np.array([cpu.address(a) for a in arrays], np.uint64)  # (n_experts,)
    plan.keep(table)
    return table, code, n, k, row_bytes, group


def moe_cpu(plan, node) -> None:
    """A token step (one row) as native steps: route, the x row quantized for each stack's type, the
    chosen experts' gate and up GEMVs into [gate | up] rows (one step when both stacks are read alike),
    SwiGLU, the down GEMVs, the weighted sum with the shared expert's output last (engine/moe.pxi).
    Several rows (a prefill) run moe_fast as an island (float experts) or leave the graph to the
    per-op executor (quantized ones, as a quantized linear on several rows does)."""
    x, logits, y = plan.input(node, "x"), plan.input(node, "logits"), plan.output(node)
    if x.shape[0] != 1:
        plan.need(node, not any(isinstance(plan.weight(node, w), QuantTensor) for w in ("gate", "up", "down")),
                  "quantized experts on several rows")  # an island reads numpy weights only
        plan.island(node)
        return
    p, n_experts, dim = node.params, logits.shape[1], x.shape[1]
    top_k = p["top_k"]
    plan.need(node, n_experts <= cpu.engine.MOE_ROUTE_MAX_EXPERTS, f"a router over {n_experts} experts")
    gate, up, down = (_expert_table(plan, node, port, n_experts) for port in ("gate", "up", "down"))
    ffn = gate[2]
    plan.macs += top_k * 3 * ffn * dim
    shared, shared_logit = plan.optional(node, "shared"), plan.optional(node, "shared_logit")
    ids = _plan_buffer(plan, node, "ids", top_k, np.int64)  # the chosen experts, best first
    weights = _plan_buffer(plan, node, "weights", top_k + 1, np.float32)  # (top_k [+ 1]) theirs [+ the shared one's]
    gate_up = _plan_buffer(plan, node, "gate_up", top_k * 2 * ffn, np.float32)  # (top_k, 2 ffn)
    h = _plan_buffer(plan, node, "h", top_k * ffn, np.float32)                  # (top_k, ffn)
    outs = _plan_buffer(plan, node, "outs", top_k * dim, np.float32)            # (top_k, dim)
    plan.add("moe_route", logits=cpu.address(logits), ids=cpu.address(ids), weights=cpu.address(weights),
             n_experts=n_experts, top_k=top_k, sigmoid=p.get("gating", "softmax") == "sigmoid",
             norm=bool(p.get("norm_topk", False)), shared=shared is not None, shared_logit=cpu.address(shared_logit))
    act_x = {}  # weight type -> x's act row for it (gate and up share one when their types agree)
    # gate and up as one step into [gate | up] rows when they are read alike, else one step each
    parts = [(np.concatenate([gate[0], up[0]]),) + gate[1:] + (2,)] if gate[1:] == up[1:] else [gate + (1,), up + (1,)]
    plan.keep(*(t[0] for t in parts))
    for column, (table, code, n, k, row_bytes, group, n_parts) in zip((0, ffn), parts):
        act_bytes = cpu.engine.act_row_bytes(code, k)
        if act_bytes and code not in act_x:  # quantized experts read x as an 8-bit act row
            act_x[code] = _plan_buffer(plan, node, f"act_x{code}", act_bytes, np.uint8)
            plan.add("quantize_act", x=cpu.address(x), act=cpu.address(act_x[code]), K=k, wtype=code)
        plan.add("moe_linear", x=cpu.address(act_x.get(code, x)), ids=cpu.address(ids), experts=cpu.address(table),
                 y=cpu.address(gate_up) + 4 * column, K=k, N=n, row_bytes=row_bytes, wtype=code, slots=top_k,
                 x_stride=0, y_stride=2 * ffn, n_experts=n_experts, parts=n_parts, group_bytes=group)
    plan.add("glu", x=cpu.address(gate_up), y=cpu.address(h), F=ffn, gated=True, rows=top_k)
    table, code, n, k, row_bytes, group = down
    act_bytes = cpu.engine.act_row_bytes(code, k)
    hin = h
    if act_bytes:
        hin = _plan_buffer(plan, node, "act_h", top_k * act_bytes, np.uint8)   # (top_k, act row)
        plan.add("quantize_act", x=cpu.address(h), act=cpu.address(hin), K=k, wtype=code, rows=top_k)
    plan.add("moe_linear", x=cpu.address(hin), ids=cpu.address(ids), experts=cpu.address(table),
             y=cpu.address(outs), K=k, N=n, row_bytes=row_bytes, wtype=code, slots=top_k,
             x_stride=act_bytes or 4 * k, y_stride=dim, n_experts=n_experts, group_bytes=group)
    plan.add("moe_combine", x=cpu.address(outs), weights=cpu.address(weights), y=cpu.address(y), dim=dim,
             top_k=top_k, shared=cpu.address(shared))


def _plan_buffer(plan, node, what: str, n: int, dtype) -> np.ndarray:
    """A cache-line-aligned buffer (n,) of the plan's own for ``node``'s ``what`` (both lowerings share it)."""
    return plan.packed(node.id, what, lambda: cpu.aligned_empty(n, dtype))


register(OpDef("moe", "moe", ("x", "logits", "gate", "up", "down", "shared?", "shared_logit?"), ("y",), _moe_infer,
               moe_ref, moe_fast, into=moe_into, cpu=moe_cpu))
