"""A depthwise conv and the 1x1 conv that alone reads it, as one node: ``dwpw_conv2d`` (two
float32 conv2d) and ``qdwpw_conv2d`` (two int8 qconv2d), made by the compiler pass
``fuse_depthwise_pointwise`` (compile/fuse_conv.py); and ``expand_dwpw_conv2d``, the float32 1x1
conv that alone feeds such a pair as well (an inverted bottleneck's expand, depthwise and project
convs), made by ``fuse_expand_dwpw``.

The native vision plans run such a node as one step whose middle tensors stay in a thread's
scratch and never reach memory (runtime/vision_plan.py); the per-op executor and the references
run the convs in turn, so the node computes exactly what they did.

Ports: the 1x1 conv's own (``x`` is the first conv's input), the depthwise conv's prefixed
``dw_``, the expand conv's ``ex_``. Params: the 1x1 conv's, with the depthwise conv's under
``"depthwise"`` and the expand conv's under ``"expand"``.
"""

from __future__ import annotations

from volvox.ir.graph import TensorSpec
from volvox.ops.registry import OpDef, register
from volvox.ops.conv import _conv_infer, conv2d_fast, conv2d_ref
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


register(OpDef("dwpw_conv2d", "conv", ports("dwpw_conv2d"), ("y",), _infer("dwpw_conv2d", _conv_infer),
               _pair(conv2d_ref, 2), _pair(conv2d_fast, 2)))
register(OpDef("qdwpw_conv2d", "quantized", ports("qdwpw_conv2d"), ("y",), _infer("qdwpw_conv2d", _qconv_infer),
               _pair(qconv2d_ref, 4), _pair(qconv2d_fast, 4)))
register(OpDef(EXPANDED, "conv", ("x",) + EXPAND_PORTS + ports("dwpw_conv2d")[1:], ("y",), _expanded_infer,
               _expanded(conv2d_ref), _expanded(conv2d_fast)))
