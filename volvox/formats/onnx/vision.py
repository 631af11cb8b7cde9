"""Translations of the ops CNNs are made of onto volvox's fast NHWC kernels: Conv (BatchNormalization
folded in), pools, Resize / Upsample, float32 activations and arithmetic that keep the NHWC layout,
MatMul / Gemm as linear, Concat and Slice on a remapped axis, and the channel shuffle (ShuffleNet's
Reshape -> Transpose -> Reshape) as one transpose of channel groups in the NHWC layout."""

from __future__ import annotations

import numpy as np

from volvox.errors import ShapeError, UnsupportedError
from volvox.ops.codes import FN_PARAMS
from volvox.ops.resize import ONNX_COORDINATES, ONNX_NEAREST_MODES
from volvox.ops.shape import MAX_CONCAT_INPUTS, reshape_target
from volvox.formats.onnx import generic
from volvox.formats.onnx.importer import CLAMP, TO_NHWC, Importer, arg, is_symbolic, output_used
from volvox.formats.onnx.reader import OnnxNode

# ONNX float32 activations -> volvox ops; their attributes are the function's parameters (ops/codes.py)
ACTIVATIONS = {"Relu": "relu", "Sigmoid": "sigmoid", "HardSwish": "hard_swish", "HardSigmoid": "hard_sigmoid",
               "LeakyRelu": "leaky_relu"}
ARITHMETIC = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow"}


def same_pads(imp: Importer, x: str, kernel, strides, dilations, mode: str, where: str) -> list[int]:
    """Explicit [top, left, bottom, right] pads of auto_pad SAME_UPPER / SAME_LOWER / VALID on a static input."""
    if mode == "VALID":
        return [0, 0, 0, 0]
    hw = imp.shapes[x][2:]
    if not all(isinstance(d, int) for d in hw):
        raise UnsupportedError(f"{where}: auto_pad {mode} on a symbolic size {hw} is not supported")
    before, after = [], []
    for d, k, s, dil in zip(hw, kernel, strides, dilations):
        total = max((-(-d // s) - 1) * s + (k - 1) * dil + 1 - d, 0)
        small, large = total // 2, total - total // 2
        before.append(large if mode == "SAME_LOWER" else small)
        after.append(small if mode == "SAME_LOWER" else large)
    return before + after


def window_pads(imp: Importer, n: OnnxNode, x: str, kernel, strides, dilations, where: str) -> list[int]:
    """A conv's or pool's [top, left, bottom, right] pads from ``pads`` or ``auto_pad``."""
    mode = n.attrs.get("auto_pad", "NOTSET")
    if mode in ("", "NOTSET"):
        return list(n.attrs.get("pads", [0, 0, 0, 0]))
    if mode not in ("SAME_UPPER", "SAME_LOWER", "VALID"):
        raise UnsupportedError(f"{where}: auto_pad {mode!r} is not supported")
    return same_pads(imp, x, kernel, strides, dilations, mode, where)


def one_dimensional(translate):
    """A 2-D conv / pool translation that also runs the 1-D op, as the 2-D one over (N, C, 1, L)."""
    def translate_any(imp: Importer, n: OnnxNode, where: str) -> None:
        x = n.inputs[0]
        if x not in imp.shapes or len(imp.shapes[x]) != 3:
            translate(imp, n, where)
            return
        widen = {"kernel_shape": lambda v: [1, *v], "strides": lambda v: [1, *v], "dilations": lambda v: [1, *v],
                 "pads": lambda v: [0, v[0], 0, v[1]], "output_padding": lambda v: [0, *v],
                 "output_shape": lambda v: [1, *v[-1:]]}
        attrs = {k: widen[k](v) if k in widen else v for k, v in n.attrs.items()}
        inputs = [imp.emit("reshape", f"{n.name}.as_2d", {"x": imp.logical(x, where)}, f"{n.name}.as_2d", shape=[0, 0, 1, -1]),
                  *n.inputs[1:]]
        if len(inputs) > 1 and inputs[1] in imp.consts and np.ndim(imp.consts[inputs[1]]) == 3:
            imp.consts[f"{n.name}.weight_2d"] = np.expand_dims(imp.consts[inputs[1]], 2)
            inputs[1] = f"{n.name}.weight_2d"
        wide = f"{n.name}.out_2d"
        translate(imp, OnnxNode(n.op, inputs, [wide, *n.outputs[1:]], attrs, f"{n.name}.2d", n.domain), where)
        imp.emit("reshape", n.name, {"x": imp.logical(wide, where)}, n.outputs[0], shape=[0, 0, -1])
    return translate_any


def conv(imp: Importer, n: OnnxNode, where: str) -> None:
    """Conv (2-D, float32): NHWC output, weight permuted once to (out, kh, kw, in / groups)."""
    w = imp.const(n.inputs[1], where, "the weight")
    if w.ndim != 4 or w.dtype != np.float32:
        raise UnsupportedError(f"{where}: volvox runs 2-D float32 convolutions; this one has a {w.dtype} "
                               f"weight of rank {w.ndim}")
    strides, dilations = n.attrs.get("strides", [1, 1]), n.attrs.get("dilations", [1, 1])
    imp.float32(n.inputs[0], where)
    pads = window_pads(imp, n, n.inputs[0], w.shape[2:], strides, dilations, where)
    x = imp.laid_nhwc(n.inputs[0], where)
    inputs = {"x": x, "weight": imp.weight(f"{n.name}.weight", w.transpose(0, 2, 3, 1))}
    if arg(n, 2):
        inputs["bias"] = imp.weight(f"{n.name}.bias", imp.const(n.inputs[2], where, "the bias").astype(np.float32))
    imp.emit("conv2d", n.name, inputs, n.outputs[0], nhwc=True, strides=list(strides), dilations=list(dilations),
             pads=list(pads), groups=n.attrs.get("group", 1))
    imp.conv_of[n.outputs[0]] = imp.nodes[-1]


def batch_norm(imp: Importer, n: OnnxNode, where: str) -> None:
    """Inference BatchNormalization: folded into the conv before it, else a per-channel mul / add."""
    if any(output_used(imp, n, i) for i in range(1, 5)) or n.attrs.get("training_mode", 0):
        raise UnsupportedError(f"{where}: training-mode BatchNormalization (running statistics outputs) is not supported")
    if not n.attrs.get("spatial", 1):
        raise UnsupportedError(f"{where}: BatchNormalization spatial=0 is not supported")
    src, out = n.inputs[0], n.outputs[0]
    gamma, beta, mean, var = (imp.const(i, where, "BatchNormalization parameters").astype(np.float64) for i in n.inputs[1:5])
    scale = gamma / np.sqrt(var + n.attrs.get("epsilon", 1e-5))   # (C,)
    shift = beta - mean * scale                                    # (C,)
    conv_node = imp.conv_of.get(src)
    if conv_node is not None and imp.readers.get(src, 0) == 1:
        # fold: y = conv(x, w * scale) + (b * scale + shift)
        w = imp.weights[conv_node.inputs["weight"]].astype(np.float64)
        b = imp.weights[conv_node.inputs["bias"]].astype(np.float64) if "bias" in conv_node.inputs else 0.0
        conv_node.inputs["weight"] = imp.weight(conv_node.inputs["weight"], (w * scale[:, None, None, None]).astype(np.float32))
        conv_node.inputs["bias"] = imp.weight(f"{conv_node.id}.bias", (b * scale + shift).astype(np.float32))
        conv_node.outputs["y"] = out
        imp.specs[out] = type(imp.specs[src])(out, imp.specs[src].shape, "float32")
        imp.shapes[out] = imp.shapes[src]
        imp.nhwc.add(out)
        return
    imp.float32(src, where)
    rank = len(imp.shapes[src])
    if rank == 4:
        x, lay = imp.laid_nhwc(src, where), (lambda v: v)
    else:
        x, lay = imp.logical(src, where), (lambda v: v.reshape((-1,) + (1,) * (rank - 2)))
    m = imp.emit("mul", f"{n.name}.scale", {"a": x, "b": imp.weight(f"{n.name}.scale", lay(scale.astype(np.float32)))},
                 f"{n.name}.scaled", nhwc=rank == 4)
    imp.emit("add", n.name, {"a": m, "b": imp.weight(f"{n.name}.shift", lay(shift.astype(np.float32)))}, out, nhwc=rank == 4)


def activation(imp: Importer, n: OnnxNode, where: str) -> None:
    """Relu / Sigmoid / HardSwish / HardSigmoid / LeakyRelu / Clip on float32, keeping the layout."""
    x = n.inputs[0]
    imp.float32(x, where)
    if n.op == "Clip":
        if imp.opset < 11:
            lo, hi = n.attrs.get("min"), n.attrs.get("max")
        else:
            lo = float(imp.const(n.inputs[1], where, "min")) if arg(n, 1) else None
            hi = float(imp.const(n.inputs[2], where, "max")) if arg(n, 2) else None
        name, params = "clip", {"min": lo, "max": hi}
    else:
        name = ACTIVATIONS[n.op]
        params = {key: float(n.attrs[key]) for key, _ in FN_PARAMS.get(name, ()) if key in n.attrs}
    imp.emit(name, n.name, {"x": x}, n.outputs[0], logical=imp.shapes[x], nhwc=x in imp.nhwc, **params)


def float_binary(imp: Importer, op: str, n: OnnxNode, where: str) -> None:
    """A float32 broadcasting binary op; an NHWC-laid operand keeps its layout (constants are permuted to it)."""
    ins, out = n.inputs[:2], n.outputs[0]
    runtime = [i for i in ins if i not in imp.consts]
    laid = any(i in imp.nhwc for i in runtime)
    operands = {}
    for port, name in zip(("a", "b"), ins):
        if name in imp.consts:
            c = np.asarray(imp.consts[name], np.float32)
            if laid and c.ndim >= 2:  # broadcast against NCHW logically -> permute into NHWC
                c = c.reshape((1,) * (4 - c.ndim) + c.shape).transpose(TO_NHWC)
            operands[port] = imp.weight(f"{n.name}.{port}", c)
        elif laid and name not in imp.nhwc and int(np.prod([d if isinstance(d, int) else 2 for d in imp.shapes[name]])) != 1:
            operands[port] = imp.laid_nhwc(name, where)
        else:
            imp.float32(name, where)
            operands[port] = name
    shapes = tuple(imp.specs[operands["a"]].shape), tuple(imp.specs[operands["b"]].shape)
    imp.emit(op, n.name, operands, out, nhwc=laid and max(len(s) for s in shapes) == 4)


def ceil_pads(hw, kernel, strides, pads: list[int], where: str) -> list[int]:
    """Pads giving ceil_mode's output size: the bottom / right pads grown so the last partial window
    counts, unless it would start beyond the input and its leading pad (ONNX's rule)."""
    if not all(isinstance(d, int) for d in hw):
        raise UnsupportedError(f"{where}: ceil_mode on a symbolic size {hw} is not supported")
    out = list(pads)
    for axis, (d, k, s) in enumerate(zip(hw, kernel, strides)):
        begin, end = pads[axis], pads[axis + 2]
        count = -(-(d + begin + end - k) // s) + 1
        if (count - 1) * s >= d + begin:
            count -= 1
        out[axis + 2] = end + max((count - 1) * s + k - (d + begin + end), 0)
        if out[axis + 2] >= k:
            raise UnsupportedError(f"{where}: ceil_mode pads {out} reach a whole window")
    return out


def pool(imp: Importer, n: OnnxNode, where: str) -> None:
    """GlobalAveragePool, AveragePool, MaxPool (2-D, float32) on the NHWC layout; an int8 / uint8 MaxPool
    through float32 (every such value is exact in it, and so is their maximum)."""
    src = n.inputs[0]
    if n.op == "MaxPool" and src in imp.specs and imp.specs[src].dtype in ("int8", "uint8"):
        dtype = imp.specs[src].dtype
        wide = imp.emit("cast", f"{n.name}.widen", {"x": imp.logical(src, where)}, f"{n.name}.float", to="float32")
        pooled = f"{n.name}.pooled"
        pool(imp, OnnxNode(n.op, [wide, *n.inputs[1:]], [pooled, *n.outputs[1:]], n.attrs, f"{n.name}.float_pool", n.domain),
             where)
        imp.emit("cast", n.name, {"x": imp.logical(pooled, where)}, n.outputs[0], to=dtype)
        return
    if n.op == "MaxPool" and output_used(imp, n, 1):
        raise UnsupportedError(f"{where}: MaxPool's Indices output is not supported (opset {imp.opset})")
    if len(imp.shapes.get(n.inputs[0], ())) != 4:
        raise UnsupportedError(f"{where}: volvox pools 4-D NCHW tensors, got shape {imp.shapes.get(n.inputs[0])}")
    if n.op == "GlobalAveragePool":
        imp.emit("global_avg_pool", n.name, {"x": imp.laid_nhwc(n.inputs[0], where)}, n.outputs[0], nhwc=True)
        return
    kernel = n.attrs["kernel_shape"]
    strides, dilations = n.attrs.get("strides", [1, 1]), n.attrs.get("dilations", [1, 1])
    if any(d != 1 for d in dilations) or n.attrs.get("storage_order", 0):
        raise UnsupportedError(f"{where}: dilated pooling and storage_order are not supported (opset {imp.opset})")
    imp.float32(n.inputs[0], where)
    pads = window_pads(imp, n, n.inputs[0], kernel, strides, dilations, where)
    include_pad = bool(n.attrs.get("count_include_pad", 0))
    if n.attrs.get("ceil_mode", 0):
        pads = ceil_pads(imp.shapes[n.inputs[0]][2:], kernel, strides, pads, where)
        if include_pad and pads != window_pads(imp, n, n.inputs[0], kernel, strides, dilations, where) and n.op == "AveragePool":
            raise UnsupportedError(f"{where}: ceil_mode with count_include_pad=1 is not supported")
    params = dict(kernel=list(kernel), strides=list(strides), pads=pads)
    if n.op == "AveragePool":
        params["count_include_pad"] = include_pad
    imp.emit("avg_pool2d" if n.op == "AveragePool" else "max_pool2d", n.name, {"x": imp.laid_nhwc(n.inputs[0], where)},
             n.outputs[0], nhwc=True, **params)


def matmul(imp: Importer, n: OnnxNode, where: str) -> None:
    """MatMul of float32: a constant 2-D right operand makes a linear, two activations a matmul; a 1-D
    operand is a row (left) or column (right) vector whose axis the result drops, as numpy's matmul."""
    a, b = n.inputs
    imp.float32(a, where)
    if b in imp.consts and imp.consts[b].ndim == 2 and imp.consts[b].dtype == np.float32 and len(imp.shapes[a]) >= 2:
        w = imp.weight(f"{n.name}.weight", imp.consts[b].T)  # (out, in)
        imp.emit("linear", n.name, {"x": imp.logical(a, where), "weight": w}, n.outputs[0])
        return
    left, right = imp.logical(a, where), imp.operand(b, where)
    if imp.specs[right].dtype != "float32":
        raise UnsupportedError(f"{where}: MatMul of float32 by {imp.specs[right].dtype} (opset {imp.opset})")
    vector_a, vector_b = len(imp.specs[left].shape) == 1, len(imp.specs[right].shape) == 1
    if vector_a:
        left = imp.emit("reshape", f"{n.name}.row", {"x": left}, f"{n.name}.row", shape=[1, -1])
    if vector_b:
        right = imp.emit("reshape", f"{n.name}.column", {"x": right}, f"{n.name}.column", shape=[-1, 1])
    if not (vector_a or vector_b):
        imp.emit("matmul", n.name, {"a": left, "b": right}, n.outputs[0])
        return
    y = imp.emit("matmul", f"{n.name}.product", {"a": left, "b": right}, f"{n.name}.product")
    dims = list(imp.specs[y].shape)
    drop = ([len(dims) - 2] if vector_a else []) + ([len(dims) - 1] if vector_b else [])
    imp.emit("reshape", n.name, {"x": y}, n.outputs[0], shape=[0 if isinstance(d, str) else d
                                                                for i, d in enumerate(dims) if i not in drop])


def gemm(imp: Importer, n: OnnxNode, where: str) -> None:
    """Gemm, alpha * A' B' + beta * C: a linear when B is constant (a constant row C its bias), else a matmul;
    alpha and C applied after it as ONNX orders them."""
    a, b, c = n.inputs[0], n.inputs[1], arg(n, 2)
    alpha, beta = float(n.attrs.get("alpha", 1.0)), float(n.attrs.get("beta", 1.0))
    c = None if beta == 0 else c
    imp.float32(a, where)
    x = imp.logical(a, where)
    if n.attrs.get("transA", 0):
        x = imp.emit("transpose", f"{n.name}.a_t", {"x": x}, f"{n.name}.a_t", perm=[1, 0])
    if b in imp.consts and imp.consts[b].dtype == np.float32:
        w = imp.consts[b] if n.attrs.get("transB", 0) else imp.consts[b].T   # (out, in)
        ports = {"x": x, "weight": imp.weight(f"{n.name}.weight", w)}
        if c is not None and c in imp.consts and alpha == 1 and np.asarray(imp.consts[c]).ndim <= 1:
            bias = np.asarray(imp.consts[c], np.float32) * np.float32(beta)
            ports["bias"], c = imp.weight(f"{n.name}.bias", np.broadcast_to(bias, (w.shape[0],))), None
        done = alpha == 1 and c is None
        y = imp.emit("linear", n.name if done else f"{n.name}.ab", ports, n.outputs[0] if done else f"{n.name}.ab")
    else:
        wb = imp.operand(b, where)
        if n.attrs.get("transB", 0):
            wb = imp.emit("transpose", f"{n.name}.b_t", {"x": wb}, f"{n.name}.b_t", perm=[1, 0])
        done = alpha == 1 and c is None
        y = imp.emit("matmul", n.name if done else f"{n.name}.ab", {"a": x, "b": wb}, n.outputs[0] if done else f"{n.name}.ab")
    if done:
        return
    if alpha != 1:
        scale = imp.weight(f"{n.name}.alpha", np.array(alpha, np.float32))
        y = imp.emit("mul", f"{n.name}.scaled", {"a": y, "b": scale}, n.outputs[0] if c is None else f"{n.name}.scaled")
    if c is None:
        return
    cc = imp.operand(c, where, np.float32)
    if beta != 1:
        cc = imp.emit("mul", f"{n.name}.c", {"a": cc, "b": imp.weight(f"{n.name}.beta", np.array(beta, np.float32))},
                      f"{n.name}.c")
    imp.emit("add", n.name, {"a": y, "b": cc}, n.outputs[0])


def concat(imp: Importer, n: OnnxNode, where: str) -> None:
    """Concat: on the NHWC layout when every input has it (the axis remapped), else in logical layout."""
    ins = [i for i in n.inputs if i]
    if len(ins) > MAX_CONCAT_INPUTS:
        raise UnsupportedError(f"{where}: {len(ins)} inputs (at most {MAX_CONCAT_INPUTS})")
    axis = n.attrs["axis"]
    if all(i in imp.nhwc for i in ins):
        imp.emit("concat", n.name, {f"x{k}": i for k, i in enumerate(ins)}, n.outputs[0], nhwc=True,
                 axis=TO_NHWC.index(axis % 4))
    else:
        imp.apply("concat", n.name, {f"x{k}": i for k, i in enumerate(ins)}, n.outputs[0], where, axis=axis)


def resize(imp: Importer, n: OnnxNode, where: str) -> None:
    """Resize / Upsample of a 4-D float32 NCHW tensor over H and W, from constant scales or sizes."""
    attrs = n.attrs
    mode = attrs.get("mode", "nearest")
    if n.op == "Upsample" or imp.opset < 11:   # opset 7-10: asymmetric coordinates, nearest rounds down
        coordinate, nearest_mode = "asymmetric", "floor"
        if mode == "bilinear":
            mode = "linear"
    else:
        coordinate = attrs.get("coordinate_transformation_mode", "half_pixel")
        nearest_mode = attrs.get("nearest_mode", "round_prefer_floor")
    for attr, value, known in (("mode", mode, ("nearest", "linear")),
                               ("coordinate_transformation_mode", coordinate, ONNX_COORDINATES),
                               ("nearest_mode", nearest_mode, ONNX_NEAREST_MODES), ("antialias", attrs.get("antialias", 0), (0,)),
                               ("keep_aspect_ratio_policy", attrs.get("keep_aspect_ratio_policy", "stretch"), ("stretch",)),
                               ("exclude_outside", attrs.get("exclude_outside", 0), (0,))):
        if value not in known:
            raise UnsupportedError(f"{where}: attribute {attr}={value!r} is not supported at opset {imp.opset} "
                                   f"(volvox: {', '.join(map(str, known))})")
    if mode == "linear" and coordinate == "tf_crop_and_resize":
        raise UnsupportedError(f"{where}: tf_crop_and_resize is not supported")
    params = {"mode": "bilinear" if mode == "linear" else "nearest", "coordinate": coordinate, "nearest_mode": nearest_mode}
    imp.float32(n.inputs[0], where)
    logical = list(imp.shapes[n.inputs[0]])  # (N, C, H, W)
    if len(logical) != 4:
        raise UnsupportedError(f"{where}: volvox resizes 4-D NCHW tensors, got shape {logical}")
    if n.op == "Upsample" and imp.opset < 9:
        sizes, scales = np.zeros(0), np.asarray(attrs["scales"], np.float32)
    elif n.op == "Upsample" or imp.opset < 11:
        sizes, scales = np.zeros(0), imp.const(n.inputs[1], where, "scales")
    else:
        sizes = imp.const(n.inputs[3], where, "sizes") if arg(n, 3) else np.zeros(0)
        scales = imp.const(n.inputs[2], where, "scales") if arg(n, 2) else np.zeros(0)
    if sizes.size:
        key, values, full = "size", [int(v) for v in sizes.tolist()], list(logical)
    elif scales.size:
        key, values, full = "scales", scales.astype(np.float32).tolist(), [1.0] * 4
    else:
        raise UnsupportedError(f"{where}: needs constant scales or sizes")
    axes = [int(a) % 4 for a in attrs.get("axes", range(len(values)))]
    if len(axes) != len(values):
        raise UnsupportedError(f"{where}: {key} {values} do not match the axes of a 4-D input")
    unchanged = full[:2]
    for a, v in zip(axes, values):
        full[a] = v
    if full[:2] != unchanged:
        raise UnsupportedError(f"{where}: {key} {values} resize batch or channels; volvox resizes H and W")
    if key == "size" and not all(isinstance(v, int) for v in full[2:]):
        raise UnsupportedError(f"{where}: sizes {values} are not static")
    params[key] = full[2:]
    imp.emit("resize", n.name, {"x": imp.laid_nhwc(n.inputs[0], where)}, n.outputs[0], nhwc=True, **params)


def conv_transpose(imp: Importer, n: OnnxNode, where: str) -> None:
    """ConvTranspose (2-D or 3-D, float): volvox's NCHW conv_transpose; pads from ``pads``, ``auto_pad`` or
    ``output_shape`` as the ONNX specification derives them."""
    x, w = n.inputs[0], imp.const(n.inputs[1], where, "the weight")
    rank = w.ndim - 2
    if rank not in (2, 3):
        raise UnsupportedError(f"{where}: volvox runs 1-D to 3-D transposed convolutions, not rank {rank}")
    imp.runtime(x, where)
    attrs = n.attrs
    strides, dilations = list(attrs.get("strides", [1] * rank)), list(attrs.get("dilations", [1] * rank))
    extra = list(attrs.get("output_padding", [0] * rank))
    pads = list(attrs.get("pads", [0] * 2 * rank))
    mode = attrs.get("auto_pad", "NOTSET")
    hw = imp.shapes[x][2:]
    if "output_shape" in attrs or mode in ("SAME_UPPER", "SAME_LOWER"):
        if not all(isinstance(d, int) for d in hw):
            raise UnsupportedError(f"{where}: output_shape / auto_pad on a symbolic size {hw}")
        target = list(attrs["output_shape"])[-rank:] if "output_shape" in attrs else [d * s for d, s in zip(hw, strides)]
        totals = [s * (d - 1) + e + (k - 1) * dil + 1 - t
                  for d, s, e, k, dil, t in zip(hw, strides, extra, w.shape[2:], dilations, target)]
        extra = [e - min(t, 0) for e, t in zip(extra, totals)]   # a larger output_shape grows at the end
        totals = [max(t, 0) for t in totals]
        first = [t // 2 if mode == "SAME_UPPER" else t - t // 2 for t in totals]
        pads = first + [t - f for t, f in zip(totals, first)]
    elif mode not in ("NOTSET", "VALID", ""):
        raise UnsupportedError(f"{where}: auto_pad {mode!r} is not supported")
    ports = {"x": imp.operand(x, where), "weight": imp.weight(f"{n.name}.weight", w)}
    if arg(n, 2):
        ports["bias"] = imp.weight(f"{n.name}.bias", imp.const(n.inputs[2], where, "the bias").astype(w.dtype))
    imp.emit("conv_transpose", n.name, ports, n.outputs[0], strides=strides, dilations=dilations, pads=pads,
             output_padding=extra, groups=attrs.get("group", 1))


def conv_integer(imp: Importer, n: OnnxNode, where: str, out: str | None = None) -> str:
    """ConvInteger (2-D): the exact int32 convolution of zero-point-shifted int8 / uint8 tensors."""
    x, w = n.inputs[0], imp.const(n.inputs[1], where, "the weight")
    imp.runtime(x, where)
    if w.ndim != 4:
        raise UnsupportedError(f"{where}: volvox runs 1-D and 2-D integer convolutions, not rank {w.ndim - 2}")
    strides, dilations = n.attrs.get("strides", [1, 1]), n.attrs.get("dilations", [1, 1])
    ports = {"x": imp.operand(x, where), "weight": imp.weight(f"{n.name}.weight", w)}
    for port, i in (("x_zero_point", 2), ("w_zero_point", 3)):
        if arg(n, i):
            ports[port] = imp.weight(f"{n.name}.{port}", np.asarray(imp.const(n.inputs[i], where, "a zero point")))
    return imp.emit("conv_integer", n.name if out is None else f"{n.name}.acc", ports, n.outputs[0] if out is None else out,
                    strides=list(strides), dilations=list(dilations), groups=n.attrs.get("group", 1),
                    pads=window_pads(imp, n, x, w.shape[2:], strides, dilations, where))


# ------------------------------------------------------------------ channel shuffle in NHWC
# ShuffleNet's shuffle of an NCHW tensor is Reshape (N, G, C/G, H, W) -> Transpose [0, 2, 1, 3, 4] ->
# Reshape (N, C, H, W). On an NHWC-laid tensor the same values are a reshape of its channels into
# (G, C/G) (a view), one transpose of those two axes (a strided copy) and a reshape back (a view),
# instead of a transpose to NCHW, a 5-D transpose and a transpose back to NHWC.
def _reshape_dims(imp: Importer, n: OnnxNode, where: str) -> list | None:
    """A Reshape's target shape resolved against its input's logical shape (0 copies a dim, -1 is
    inferred), or None when it is not a plain static reshape of a run-time tensor."""
    x = n.inputs[0]
    if x in imp.consts or n.attrs.get("allowzero", 0) or n.inputs[1] not in imp.consts:
        return None
    in_shape, target = imp.shapes[x], np.asarray(imp.consts[n.inputs[1]])
    if is_symbolic(target) or not all(isinstance(d, int) for d in in_shape):
        return None
    try:
        return list(reshape_target(in_shape, target.reshape(-1)))
    except (ShapeError, IndexError):  # left to generic.reshape, which names what is wrong
        return None


def reshape(imp: Importer, n: OnnxNode, where: str) -> None:
    """Reshape; an NHWC-laid (N, C, H, W) to (N, G, C/G, H, W) keeps the layout as channel groups
    (N, H, W, G, C/G), and channel groups back to (N, C, H, W) are NHWC again (both views)."""
    x, dims = n.inputs[0], _reshape_dims(imp, n, where)
    shape = imp.shapes.get(x)
    if dims is not None and x in imp.nhwc and len(dims) == 5 and dims[0] == shape[0] and dims[3:] == list(shape[2:]):
        imp.emit("reshape", n.name, {"x": x}, n.outputs[0], logical=tuple(dims), shape=[0, 0, 0, dims[1], dims[2]])
        imp.grouped.add(n.outputs[0])
    elif (dims is not None and x in imp.grouped and len(dims) == 4 and dims[0] == shape[0]
          and dims[2:] == list(shape[3:])):
        imp.emit("reshape", n.name, {"x": x}, n.outputs[0], nhwc=True, shape=[0, 0, 0, -1])
    else:
        generic.reshape(imp, n, where)


def transpose(imp: Importer, n: OnnxNode, where: str) -> None:
    """Transpose; swapping the two channel-group axes of a channel-grouped tensor ([0, 2, 1, 3, 4]) is
    the transpose of its last two axes in the NHWC layout."""
    x = n.inputs[0]
    if x in imp.grouped and list(n.attrs.get("perm", [])) == [0, 2, 1, 3, 4]:
        n_, a, b, h, w = imp.shapes[x]
        imp.emit("transpose", n.name, {"x": x}, n.outputs[0], logical=(n_, b, a, h, w), perm=[0, 1, 2, 4, 3])
        imp.grouped.add(n.outputs[0])
    else:
        generic.transpose(imp, n, where)


def slice_(imp: Importer, n: OnnxNode, where: str) -> None:
    """Slice; of an NHWC-laid tensor, on its remapped axes (the layout kept)."""
    x = n.inputs[0]
    if x not in imp.nhwc or imp.opset < 10:
        generic.slice_(imp, n, where)
        return
    starts, ends = generic.int_list(imp, n, 1, where, "starts"), generic.int_list(imp, n, 2, where, "ends")
    axes, steps = generic.int_list(imp, n, 3, where, "axes"), generic.int_list(imp, n, 4, where, "steps")
    axes = list(range(len(starts))) if axes is None else [a % 4 for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    if 0 in steps:
        raise UnsupportedError(f"{where}: Slice step 0")
    clamp = lambda v: int(max(min(v, CLAMP), -CLAMP))  # noqa: E731
    imp.emit("slice", n.name, {"x": x}, n.outputs[0], nhwc=True, axes=[TO_NHWC.index(a) for a in axes],
             starts=[clamp(s) for s in starts], ends=[clamp(e) for e in ends], steps=list(steps))
