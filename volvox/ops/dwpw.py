"""A depthwise conv and the 1x1 conv that alone reads it, as one node: ``dwpw_conv2d`` (two
float32 conv2d) and ``qdwpw_conv2d`` (two int8 qconv2d), made by the compiler pass
``fuse_depthwise_pointwise`` (compile/fuse_conv.py); and ``expand_dwpw_conv2d``, the float32 1x1
conv that alone feeds such a pair as well (an inverted bottleneck's expand, depthwise and project
convs), made by ``fuse_expand_dwpw``.

Step plans run such a node as one step whose middle tensors stay in a thread's
scratch and never reach memory (runtime/plan.py); the per-op executor and the references
run the convs in turn, so the node computes exactly what they did.

Ports: the 1x1 conv's own (``x`` is the first conv's input), the depthwise conv's prefixed
``dw_``, the expand conv's ``ex_``. Params: the 1x1 conv's, with the depthwise conv's under
``"depthwise"`` and the expand conv's under ``"expand"``.

Their backward recomputes the middle tensors (one conv2d node each) and runs each conv's grad ops
(ops/conv.py), so a compiled graph trains without unfusing.
"""

from __future__ import annotations

import math

import numpy as np

from volvox import cpu
from volvox.ir.graph import Node, TensorSpec
from volvox.ops.registry import OpDef, register
from volvox.ops.conv import (CONV_PIXELS, _conv_infer, conv2d_fast, conv2d_ref, conv_gradients, direct_conv,
                             plan_blocks, plan_conv_operands, plan_cparts, plan_fold_zero_point, plan_requant)
from volvox.ops.elementwise import plan_activation
from volvox.ops.int8 import _qconv_infer, qconv2d_fast, qconv2d_ref

# fused op -> (the conv op it pairs, that op's ports after "x")
PAIRED = {"dwpw_conv2d": ("conv2d", ("weight", "bias")),
          "qdwpw_conv2d": ("qconv2d", ("weight", "bias", "multiplier", "shift"))}


def ports(op: str) -> tuple[str, ...]:
    """The fused op's input ports, optional ones marked '?'."""
    conv_ports = tuple(p + "?" if p == "bias" else p for p in PAIRED[op][1])
    return ("x",) + tuple("dw_" + p for p in conv_ports) + conv_ports


def split(op: str, inputs: dict[str, str], params: dict) -> tuple[tuple[dict, dict], tuple[dict, dict]]:
    """((depthwise inputs, params), (1x1 inputs without x, params)) of a fused node's wiring."""
    names = PAIRED[op][1]
    dw = {"x": inputs["x"], **{p: inputs["dw_" + p] for p in names if "dw_" + p in inputs}}
    pw = {p: inputs[p] for p in names if p in inputs}
    return (dw, params["depthwise"]), (pw, {k: v for k, v in params.items() if k != "depthwise"})


def _infer(op: str, conv_infer):
    """The fused op's shape rule: the paired conv's, on the depthwise conv's output spec."""
    def infer(specs, params):
        (dw_in, dw_params), (pw_in, pw_params) = split(op, {p: p for p in specs}, params)
        mid_shape, mid_dtype = conv_infer({p: specs[n] for p, n in dw_in.items()}, dw_params)["y"]
        mid = TensorSpec("depthwise output", tuple(mid_shape), mid_dtype)
        return conv_infer({"x": mid, **{p: specs[n] for p, n in pw_in.items()}}, pw_params)
    return infer


def _pair(conv, n_ports: int):
    """The fused compute function of two ``conv`` calls (ref or fast), n_ports inputs after x each."""
    def run(ctx, p, x, *args):
        dw_args, pw_args = args[:n_ports], args[n_ports:]
        pw_params = {k: v for k, v in p.items() if k != "depthwise"}
        return conv(ctx, pw_params, conv(ctx, p["depthwise"], x, *dw_args), *pw_args)
    return run


EXPANDED = "expand_dwpw_conv2d"
EXPAND_PORTS = ("ex_weight", "ex_bias?")


def split_expanded(inputs: dict[str, str], params: dict) -> tuple[tuple[dict, dict], str, dict, dict]:
    """((expand conv inputs, params), the name it gives its output, the dwpw_conv2d pair's inputs
    (x: that output), the pair's params) of an expand_dwpw_conv2d node's wiring."""
    ex = {"x": inputs["x"], **{p[3:]: n for p, n in inputs.items() if p.startswith("ex_")}}
    mid = f"{inputs['x']}/expanded"
    pair = {"x": mid, **{p: n for p, n in inputs.items() if p != "x" and not p.startswith("ex_")}}
    return (ex, params["expand"]), mid, pair, {k: v for k, v in params.items() if k != "expand"}


def _expanded_infer(specs, params):
    """The shape rule: dwpw_conv2d's on the expand conv's output spec."""
    (ex_in, ex_params), mid, pair, pair_params = split_expanded({p: p for p in specs}, params)
    shape, dtype = _conv_infer({p: specs[n] for p, n in ex_in.items()}, ex_params)["y"]
    pair_specs = {p: (TensorSpec(mid, tuple(shape), dtype) if p == "x" else specs[n]) for p, n in pair.items()}
    return _infer("dwpw_conv2d", _conv_infer)(pair_specs, pair_params)


def _expanded(conv):
    """The fused compute function: ``conv`` (ref or fast) for the expand conv, then the pair's."""
    pair = _pair(conv, 2)

    def run(ctx, p, x, ex_weight, ex_bias, *args):
        return pair(ctx, {k: v for k, v in p.items() if k != "expand"}, conv(ctx, p["expand"], x, ex_weight, ex_bias),
                    *args)
    return run


# ------------------------------------------------------------------- CPU plan lowering
DWPW_SPLIT_BYTES = 256 << 10    # 1x1 weights past which a float32 pair runs as its two convs' steps
EXPAND_BAND_BYTES = 384 << 10   # expanded rows an EXDWPW band computes (in L2)


def _pair_operands(plan, op: str, inputs: dict, params: dict, node_id: str, x: np.ndarray) -> tuple:
    """(dw node, its packed weights, bias, window keywords, pw node, its OHWI weight, packed weights,
    bias, the depthwise output's shape as an empty array) of a fused depthwise -> 1x1 pair reading
    ``x``, checked."""
    conv = PAIRED[op][0]
    (dw_in, dw_params), (pw_in, pw_params) = split(op, inputs, params)
    dw = Node(node_id, conv, dw_in, {"y": f"{node_id}/depthwise"}, dw_params)
    pw = Node(node_id, conv, {"x": dw.outputs["y"], **pw_in}, {"y": f"{node_id}/pointwise"}, pw_params)
    _, dw_packed, dw_bias, depthwise, window = plan_conv_operands(plan, dw, x, check_output=False)
    plan.need(dw, depthwise, "not a depthwise conv")
    mid = np.empty((x.shape[0],) + window["window"][4:6] + (window["cout"],),  # (N, OH, OW, C) its shape only
                   np.float32 if conv == "conv2d" else np.int8)
    w, packed, bias, _, pw_window = plan_conv_operands(plan, pw, mid, check_output=False)
    plan.need(pw, direct_conv(pw_window["window"], w.shape), "not a 1x1 stride-1 unpadded conv")
    plan.need(pw, conv == "conv2d" or mid.shape[3] % 4 == 0, "int8 channels not a multiple of 4")
    return dw, dw_packed, dw_bias, window, pw, w, packed, bias, mid


def dwpw_cpu(plan, node) -> None:
    """A fused depthwise -> 1x1 pair as one DWPW (float32) or QDWPW (int8) step: depthwise output rows
    go through the thread's scratch into the 1x1 conv's packed GEMM, the same tiles on the same rows
    as the two convs' own steps (a float32 pair with 1x1 weights past DWPW_SPLIT_BYTES: the two convs'
    steps, the middle tensor in a buffer of the plan's; a 1x1 per-channel affine and its 1x1 conv: one
    DWPW step on rows of pixels, whatever its weights). A float32 pair reads and writes channel slices
    of wider tensors (runtime/plan.py)."""
    x = plan.input(node, "x", strided=True)
    dw, dw_packed, dw_bias, window, pw, w, packed, bias, mid = _pair_operands(
        plan, node.op, node.inputs, node.params, node.id, x)
    plan.need(node, tuple(plan.graph.specs[node.outputs["y"]].shape) == mid.shape[:3] + (w.shape[0],),
              "output shape")
    y = plan.output(node, strided=True)
    row, rows = mid.shape[2] * mid.shape[3], mid.shape[0] * mid.shape[1]
    # a 1x1 stride-1 unpadded depthwise conv maps pixels to pixels: the map as rows of up to
    # CONV_PIXELS pixels (a 7x7 map: one row of 49, not 7 of 7), each GEMM as long as a conv step's,
    # when the pixels split into rows at least half that long
    pixels = math.prod(mid.shape[:3])
    per = max(d for d in range(1, min(pixels, CONV_PIXELS) + 1) if pixels % d == 0)
    pixelwise = (PAIRED[node.op][0] == "conv2d" and window["window"][6:] == (1, 1, 1, 1, 1, 1, 0, 0)
                 and 2 * per >= min(pixels, CONV_PIXELS))
    if pixelwise:
        window["window"] = (1, pixels // per, per, x.shape[3], pixels // per, per) + window["window"][6:]
        row, rows = per * mid.shape[3], pixels // per
    if PAIRED[node.op][0] == "conv2d" and w.size * 4 > DWPW_SPLIT_BYTES and not pixelwise:
        # 1x1 weights this large (7x7 maps, 1152 -> 192 channels: 885 KB) would stream from beyond
        # L2 once per depthwise row: two steps instead, the depthwise rows into a buffer of the plan's
        # own, then one GEMM over the map whose channels the threads split
        mid = plan.buffer(node, mid.shape, np.float32)
        plan.add("dwconv_f32", x=cpu.address(x), w=cpu.address(dw_packed), bias=cpu.address(dw_bias),
                 y=cpu.address(mid), act=plan_activation(plan, dw), ldx=plan.pixel_stride(x), **window)
        plan.add("conv_f32", x=cpu.address(mid), w=cpu.address(packed), bias=cpu.address(bias), y=cpu.address(y),
                 scratch=cpu.address(plan.scratch(0, np.float32)), act=plan_activation(plan, pw),
                 ldy=plan.pixel_stride(y),
                 window=mid.shape + mid.shape[1:3] + (1, 1, 1, 1, 1, 1, 0, 0), cout=w.shape[0],
                 **plan_blocks(plan, rows * mid.shape[2], w.shape[0]))
        return
    if PAIRED[node.op][0] == "conv2d":  # a row per item: the most items to balance
        plan.add("dwpw_f32", x=cpu.address(x), w=cpu.address(dw_packed), bias=cpu.address(dw_bias), y=cpu.address(y),
                 scratch=cpu.address(plan.scratch(row, np.float32)), per_thread=row, act=plan_activation(plan, dw),
                 pointwise=(cpu.address(packed), cpu.address(bias), w.shape[0], plan_activation(plan, pw), 0),
                 cparts=plan_cparts(plan.split, rows, w.shape[0], 1), ldx=plan.pixel_stride(x),
                 ldy=plan.pixel_stride(y), **window)
        return
    x, y = plan.input(node, "x"), plan.output(node)  # int8: whole pixels
    # int8: bands of rows, a GEMM on about as many pixels as a QCONV work item (requantization is
    # prepared per GEMM call, and a row of a small map is a few pixels); a map of fewer bands than
    # threads takes one band per thread (a 6x6 map at 2 threads: two of three rows, not one of six
    # whose output channels the threads split, each computing every row)
    band = -(-CONV_PIXELS // mid.shape[2])
    if -(-rows // band) < plan.split:
        band = -(-rows // plan.split)
    window["requant"] = plan_requant(plan, dw, mid.shape[3], dw_bias)
    pw_window = dict(requant=plan_requant(plan, pw, w.shape[0], bias))
    wsum = plan_fold_zero_point(plan, pw_window, bias, packed[1], pw_window["requant"][3])
    plan.add("qdwpw", x=cpu.address(x), w=cpu.address(dw_packed), y=cpu.address(y),
             scratch=cpu.address(plan.scratch(band * row, np.int8)), per_thread=band * row, band=band,
             cparts=plan_cparts(plan.split, -(-rows // band), w.shape[0], 1),
             pointwise=(cpu.address(packed[0]), 0, w.shape[0], 0, cpu.address(wsum)), pw_requant=pw_window["requant"],
             **window)


def expand_dwpw_cpu(plan, node) -> None:
    """An expand_dwpw_conv2d as one EXDWPW_F32 step: bands of depthwise output rows, each computing the
    expanded rows it reads into the thread's scratch (about EXPAND_BAND_BYTES of them), then each
    depthwise row and its 1x1 conv as DWPW does; the expanded tensor never reaches memory."""
    (ex_in, ex_params), mid_name, pair_in, pair_params = split_expanded(node.inputs, node.params)
    ex = Node(node.id, "conv2d", ex_in, {"y": mid_name}, ex_params)
    x = plan.input(ex, "x")
    w_ex, packed_ex, bias_ex, _, ex_window = plan_conv_operands(plan, ex, x, check_output=False)
    plan.need(ex, direct_conv(ex_window["window"], w_ex.shape), "not a 1x1 stride-1 unpadded conv")
    expanded = np.empty(x.shape[:3] + (w_ex.shape[0],), np.float32)  # its shape only
    dw, dw_packed, dw_bias, window, pw, w, packed, bias, mid = _pair_operands(
        plan, "dwpw_conv2d", pair_in, pair_params, node.id, expanded)
    plan.need(node, tuple(plan.graph.specs[node.outputs["y"]].shape) == mid.shape[:3] + (w.shape[0],),
              "output shape")
    n, h, wd, c = expanded.shape
    kh, sh, dh = window["window"][6], window["window"][8], window["window"][10]
    # band: rows whose expanded input rows fit EXPAND_BAND_BYTES (a band recomputes the kh - sh rows it
    # shares with the one before: the more rows, the fewer again)
    fit = max(EXPAND_BAND_BYTES // (wd * c * 4), (kh - 1) * dh + 1)
    band = max(1, min(mid.shape[1], ((fit - (kh - 1) * dh - 1) // sh) + 1))
    band = min(band, -(-mid.shape[1] * n // plan.split))  # a band per thread at least
    per = ((band - 1) * sh + (kh - 1) * dh + 1) * wd * c + mid.shape[2] * c  # (rows, w, C) + (ow, C)
    plan.add("exdwpw_f32", in_channels=x.shape[3], x=cpu.address(x), w=cpu.address(dw_packed),
             bias=cpu.address(dw_bias), y=cpu.address(plan.output(node)),
             scratch=cpu.address(plan.scratch(per, np.float32)), per_thread=per, band=band,
             act=plan_activation(plan, dw),
             pointwise=(cpu.address(packed), cpu.address(bias), w.shape[0], plan_activation(plan, pw), 0),
             expand=(cpu.address(packed_ex), cpu.address(bias_ex), c, plan_activation(plan, ex)), **window)


# ------------------------------------------------------------------ backward (training)
def _wanted(g, node, prefix: str, names) -> set[str]:
    """The conv ports (named as the conv2d's) of one half whose fused-node port needs a gradient."""
    return {p for p in names if prefix + p in node.inputs and g.needs(node, prefix + p)}


def _accumulate(g, node, prefix: str, grads: dict[str, str]) -> None:
    for port, grad in grads.items():
        if port != "x":
            g.accumulate(node, prefix + port, grad)


def dwpw_backward(g, node) -> None:
    """dwpw_conv2d's backward: the depthwise output is recomputed (one conv2d node; the forward never
    stored it), then each conv's grad ops in turn (ops/conv.py)."""
    dy = g.grad(node, "y")
    if dy is None:
        return
    (dw_in, dw_params), (pw_in, pw_params) = split(node.op, node.inputs, node.params)
    dw_wanted = _wanted(g, node, "dw_", ("weight", "bias")) | ({"x"} if g.needs(node, "x") else set())
    pw_wanted = _wanted(g, node, "", ("weight", "bias")) | ({"x"} if dw_wanted else set())
    (mid,) = g.emit("conv2d", dw_in, dw_params, ("y",))
    pw_grads = conv_gradients(g, {"x": mid, **pw_in}, node.outputs["y"], pw_params, dy, pw_wanted)
    _accumulate(g, node, "", pw_grads)
    if dw_wanted:
        dw_grads = conv_gradients(g, dw_in, mid, dw_params, pw_grads["x"], dw_wanted)
        _accumulate(g, node, "dw_", dw_grads)
        if "x" in dw_grads:
            g.accumulate(node, "x", dw_grads["x"])


def expand_dwpw_backward(g, node) -> None:
    """expand_dwpw_conv2d's backward: the expanded and depthwise outputs recomputed, then the three convs'
    grad ops from the last to the first."""
    dy = g.grad(node, "y")
    if dy is None:
        return
    (ex_in, ex_params), _, pair_in, pair_params = split_expanded(node.inputs, node.params)
    (dw_in, dw_params), (pw_in, pw_params) = split("dwpw_conv2d", pair_in, pair_params)
    ex_wanted = _wanted(g, node, "ex_", ("weight", "bias")) | ({"x"} if g.needs(node, "x") else set())
    dw_wanted = _wanted(g, node, "dw_", ("weight", "bias")) | ({"x"} if ex_wanted else set())
    pw_wanted = _wanted(g, node, "", ("weight", "bias")) | ({"x"} if dw_wanted else set())
    (expanded,) = g.emit("conv2d", ex_in, ex_params, ("y",))
    (mid,) = g.emit("conv2d", {**dw_in, "x": expanded}, dw_params, ("y",))
    grads = conv_gradients(g, {"x": mid, **pw_in}, node.outputs["y"], pw_params, dy, pw_wanted)
    _accumulate(g, node, "", grads)
    for prefix, inputs, out, params, wanted in (("dw_", {**dw_in, "x": expanded}, mid, dw_params, dw_wanted),
                                                ("ex_", ex_in, expanded, ex_params, ex_wanted)):
        if not wanted:
            return
        grads = conv_gradients(g, inputs, out, params, grads["x"], wanted)
        _accumulate(g, node, prefix, grads)
    if "x" in grads:
        g.accumulate(node, "x", grads["x"])


register(OpDef("dwpw_conv2d", "conv", ports("dwpw_conv2d"), ("y",), _infer("dwpw_conv2d", _conv_infer),
               _pair(conv2d_ref, 2), _pair(conv2d_fast, 2), cpu=dwpw_cpu,
               backward=dwpw_backward))
register(OpDef("qdwpw_conv2d", "quantized", ports("qdwpw_conv2d"), ("y",), _infer("qdwpw_conv2d", _qconv_infer),
               _pair(qconv2d_ref, 4), _pair(qconv2d_fast, 4), cpu=dwpw_cpu))
register(OpDef(EXPANDED, "conv", ("x",) + EXPAND_PORTS + ports("dwpw_conv2d")[1:], ("y",), _expanded_infer,
               _expanded(conv2d_ref), _expanded(conv2d_fast), cpu=expand_dwpw_cpu,
               backward=expand_dwpw_backward))
