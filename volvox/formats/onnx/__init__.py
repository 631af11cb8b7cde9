"""Import an ONNX model into a volvox graph, NHWC inside for convolutions: opset 7 and later directly,
older files after the onnx package's version converter took them to opset 7.

``reader`` decodes the protobuf (external data memory-mapped), ``importer`` holds the translation
state (layout, constants, folding), ``vision`` maps the CNN ops onto the fast NHWC kernels and
``generic`` the rest of the standard operators. ``TRANSLATIONS`` is the one list of the ONNX ops
volvox reads; anything else raises UnsupportedError naming the op, the opset and the node.

Graph inputs keep ONNX's layout and dtype. Symbolic dims (batch, sequence, image size) stay symbols
the executor binds at each run (re-planning when they change); where a model's shape arithmetic
mixes the batch with another unknown dim, the batch is bound to 1 (metadata "batch_bound_to_1"). Shape subgraphs
(Shape, Gather, Concat, Slice, arithmetic on constants ...) are evaluated at import.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from volvox.errors import UnsupportedError
from volvox.ir.graph import Graph, TensorSpec
from volvox.ops import validate_file
from volvox.formats.onnx import control_flow, functions, generic, sampling, vision
from volvox.formats.onnx.importer import ConstantRequired, Importer, output_used
from volvox.formats.onnx.reader import ONNXError, OnnxModel, OnnxNode, element_dtype, read_model, read_model_upgraded

__all__ = ["ConstantRequired", "ONNXError", "TRANSLATIONS", "MIN_OPSET", "read_onnx", "load_onnx", "plan_per_value",
           "op_report"]

MIN_OPSET = 7


def _float32_or(fast, other):
    """Translate through ``fast`` when the node's first input is float32, else through ``other``."""
    def translate(imp: Importer, n: OnnxNode, where: str) -> None:
        operands = [i for i in n.inputs[:2] if i]
        dtypes = {np.asarray(imp.consts[i]).dtype if i in imp.consts else np.dtype(imp.specs[i].dtype) for i in operands
                  if i in imp.consts or i in imp.specs}
        runtime = [i for i in operands if i not in imp.consts]
        if dtypes == {np.dtype(np.float32)} and runtime:
            fast(imp, n, where)
        else:
            other(imp, n, where)
    return translate


def _arithmetic(imp: Importer, n: OnnxNode, where: str) -> None:
    vision.float_binary(imp, vision.ARITHMETIC[n.op], n, where)


def _resize(imp: Importer, n: OnnxNode, where: str) -> None:
    """Resize / Upsample on the NHWC kernel where it applies (4-D float32 over H and W, its modes), else
    the numpy resize_nd over any axes and modes."""
    try:
        vision.resize(imp, n, where)
    except ConstantRequired:
        raise
    except UnsupportedError:
        generic.resize_nd(imp, n, where)


def _matmul(imp: Importer, n: OnnxNode, where: str) -> None:
    """MatMul of float32 with a run-time left operand on volvox's linear / matmul; else matmul_general."""
    if n.inputs[0] in imp.consts:
        generic.matmul_general(imp, n, where)
    else:
        _float32_or(vision.matmul, generic.matmul_general)(imp, n, where)


def _batch_norm(imp: Importer, n: OnnxNode, where: str) -> None:
    """Inference BatchNormalization (folded into its conv where it can be), else the training-mode one."""
    if n.attrs.get("training_mode", 0) or any(output_used(imp, n, i) for i in range(1, 5)):
        generic.batch_norm_training(imp, n, where)
    else:
        vision.batch_norm(imp, n, where)


def _conv(imp: Importer, n: OnnxNode, where: str) -> None:
    """Conv on the NHWC kernels where they apply (1-D / 2-D float32, constant weight), else the numpy conv_nd."""
    if generic.needs_general_conv(imp, n):
        generic.conv_nd(imp, n, where)
    else:
        vision.one_dimensional(vision.conv)(imp, n, where)


def _pool(imp: Importer, n: OnnxNode, where: str) -> None:
    """MaxPool / AveragePool on the NHWC kernels where they apply (1-D / 2-D float32, int8 MaxPool), else
    the numpy pool_nd over any spatial rank, dilations, ceil_mode and indices."""
    if generic.needs_general_pool(imp, n):
        generic.pool_nd(imp, n, where)
    else:
        vision.one_dimensional(vision.pool)(imp, n, where)


def _refuse(why: str):
    def translate(imp: Importer, n: OnnxNode, where: str) -> None:
        raise UnsupportedError(f"{where}: op {n.op} is not supported at opset {imp.opset}: {why}")
    return translate


TRANSLATIONS = {
    "Constant": generic.constant, "Shape": generic.shape, "Size": generic.size,
    "ConstantOfShape": generic.constant_of_shape, "Range": generic.range_, "EyeLike": generic.eye_like,
    "Identity": generic.identity, "Dropout": generic.dropout, "Cast": generic.cast, "CastLike": generic.cast_like,
    "BitCast": generic.bitcast, "DFT": generic.dft, "STFT": generic.stft, "MelWeightMatrix": generic.mel_weight_matrix,
    "Col2Im": generic.col2im, "TensorScatter": generic.tensor_scatter, "Det": generic.det,
    "RoiAlign": generic.roi_align, "DeformConv": generic.deform_conv,
    "Reshape": vision.reshape, "Flatten": generic.flatten, "Squeeze": generic.squeeze, "Unsqueeze": generic.unsqueeze,
    "Transpose": vision.transpose, "Slice": vision.slice_, "Split": generic.split, "Pad": generic.pad,
    "Concat": vision.concat,
    **{op: generic.unary for op in generic.UNARY},
    **{op: generic.binary for op in generic.BINARY},
    **{op: _float32_or(_arithmetic, generic.binary) for op in vision.ARITHMETIC},
    **{op: generic.variadic for op in generic.VARIADIC},
    "Where": generic.where_,
    **{op: _float32_or(vision.activation, generic.relu_any if op == "Relu" else _refuse("float32 only"))
       for op in vision.ACTIVATIONS},
    "Clip": _float32_or(vision.activation, generic.clip),
    "Softmax": generic.softmax, "LogSoftmax": generic.softmax, "Hardmax": generic.softmax,
    **{op: generic.reduce for op in generic.REDUCE},
    "ArgMax": generic.arg_reduce, "ArgMin": generic.arg_reduce,
    "Gather": generic.gather, "GatherElements": generic.gather_elements, "GatherND": generic.gather_nd,
    "CumProd": generic.cumsum, "MatMulInteger": generic.matmul_integer,
    "QLinearMatMul": generic.qlinear_matmul, "InstanceNormalization": generic.instance_norm,
    "GroupNormalization": generic.group_norm, "RMSNormalization": generic.rms_norm, "Swish": generic.swish,
    "ScatterElements": generic.scatter_elements, "Scatter": generic.scatter_elements, "ScatterND": generic.scatter_nd,
    "Expand": generic.expand, "Tile": generic.tile, "TopK": generic.topk, "CumSum": generic.cumsum,
    "OneHot": generic.one_hot, "Trilu": generic.trilu, "DepthToSpace": generic.depth_space,
    "SpaceToDepth": generic.depth_space,
    "Conv": _conv, "BatchNormalization": _batch_norm,
    "MaxPool": _pool, "AveragePool": _pool, "LpPool": generic.pool_nd, "GlobalLpPool": generic.global_lp_pool,
    "MaxUnpool": generic.max_unpool, "NonZero": generic.nonzero, "Compress": generic.compress,
    "Unique": generic.unique, "NonMaxSuppression": generic.non_max_suppression,
    "GlobalAveragePool": vision.pool, "GlobalMaxPool": generic.global_max_pool,
    "MatMul": _matmul,
    "Gemm": vision.gemm, "Resize": _resize, "Upsample": _resize,
    "LayerNormalization": _float32_or(generic.layer_norm, generic.layer_norm_parts),
    "ConvTranspose": vision.one_dimensional(vision.conv_transpose), "ConvInteger": vision.one_dimensional(vision.conv_integer),
    "QLinearConv": lambda imp, n, where: generic.qlinear_conv(imp, n, where, vision.conv_integer), "LRN": generic.lrn,
    "Einsum": generic.einsum, "LpNormalization": generic.lp_normalization, "ReverseSequence": generic.reverse_sequence,
    "GridSample": generic.grid_sample, "DynamicQuantizeLinear": generic.dynamic_quantize_linear,
    "MeanVarianceNormalization": generic.mean_variance_normalization, "RNN": generic.recurrent, "GRU": generic.recurrent, "LSTM": generic.recurrent,
    "QuantizeLinear": generic.quantize_linear, "DequantizeLinear": generic.dequantize_linear,
    **{op: sampling.random for op in ("RandomUniform", "RandomUniformLike", "RandomNormal", "RandomNormalLike")},
    "Bernoulli": sampling.bernoulli, "Multinomial": sampling.multinomial,
}


TRANSLATIONS.update({
    "If": lambda imp, n, where: control_flow.if_(imp, n, where, TRANSLATIONS),
    "Loop": lambda imp, n, where: control_flow.loop(imp, n, where, TRANSLATIONS),
    "Scan": lambda imp, n, where: control_flow.scan(imp, n, where, TRANSLATIONS),
})


def op_report(path: str | Path) -> dict:
    """What ``volvox info`` says of an .onnx file before importing it: its opset, {op type: node count},
    and the ops volvox has no translation or ONNX function body for (an op it has may still refuse
    some attribute or dtype)."""
    model = read_model(str(path))
    counts: dict[str, int] = {}
    for n in model.nodes:
        key = n.op if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op}"
        counts[key] = counts.get(key, 0) + 1
    return {"opset": model.opset, "ops": dict(sorted(counts.items())),
            "missing": sorted(op for op in counts if op not in TRANSLATIONS
                              and not functions.defined_by_function(op, model.opset))}


def read_onnx(path: str | Path) -> tuple[Graph, dict[str, np.ndarray], dict]:
    """(validated graph, weights, metadata incl. the model's metadata_props) of an .onnx file."""
    path = str(path)
    model = read_model(path)
    if model.opset < MIN_OPSET and model.opset >= 1:
        model = read_model_upgraded(path, MIN_OPSET)
    try:
        return _import_checked(model, path)
    except ConstantRequired as e:   # the model it was raised on, for load_onnx to plan per value
        e.model = model
        raise


def load_onnx(path: str | Path, **model_kw):
    """A runnable model of the .onnx file at ``path`` (``model_kw``: Model's keywords): a compiled Model,
    or, when operands that fix shapes are computed from graph inputs at run time, a ValuePlannedModel
    that plans per value of those inputs (value_plans.py)."""
    from volvox.model import Model

    path = str(path)
    try:
        graph, weights, metadata = read_onnx(path)
    except ConstantRequired as e:
        return plan_per_value(e, path, **model_kw)
    return Model(graph, weights, metadata, path, **model_kw)


def plan_per_value(error: ConstantRequired, path: str, **model_kw):
    """The ValuePlannedModel of the model ``read_onnx`` raised ``error`` on, planned per value of the
    tensors that resolve it (value_plans.values_needed); ``error`` itself when none do."""
    from volvox.formats.onnx.value_plans import ValuePlannedModel, values_needed

    model = getattr(error, "model", None)
    needed = None if model is None else values_needed(model, error)
    if needed is None:
        raise error
    return ValuePlannedModel(model, str(path), needed, _import_checked, **model_kw)


def _import_checked(model: OnnxModel, path: str) -> tuple[Graph, dict[str, np.ndarray], dict]:
    """``_import`` with a malformed model's lookup errors reported as ONNXError (as read_onnx does)."""
    try:
        return _import(model, path)
    except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError, OverflowError, AttributeError) as e:
        raise ONNXError(f"{path}: malformed ONNX model ({type(e).__name__}: {e})") from None


def _import(model: OnnxModel, path: str) -> tuple[Graph, dict[str, np.ndarray], dict]:
    """The graph with every symbolic input dim kept; when the model's shape arithmetic cannot be planned
    with a symbolic batch (a reshape whose target mixes it with another unknown), the batch bound to 1."""
    if model.opset < 1:
        raise UnsupportedError(f"{path}: opset {model.opset}; volvox imports ONNX opset {MIN_OPSET} and later")
    try:
        return _translate(model, path, bind_batch=False)
    except ConstantRequired:
        raise
    except UnsupportedError:
        if not any(dims and isinstance(dims[0], str) for _, _, dims in model.inputs):
            raise
        return _translate(model, path, bind_batch=True)


def _translate(model: OnnxModel, path: str, bind_batch: bool) -> tuple[Graph, dict[str, np.ndarray], dict]:
    imp = Importer(path, model.opset)
    imp.expand = functions.expand
    imp.consts.update(model.initializers)
    for n in model.nodes:
        for i in n.inputs:
            imp.readers[i] = imp.readers.get(i, 0) + 1
    for name in model.outputs:
        imp.readers[name] = imp.readers.get(name, 0) + 1
    inputs = []
    for name, elem, dims in model.inputs:
        dtype = element_dtype(elem, f"{path}: input {name!r}")
        dims = [1 if bind_batch and i == 0 and isinstance(d, str) else d for i, d in enumerate(dims)]
        spec = TensorSpec(name, tuple(dims), dtype.name)
        inputs.append(spec)
        imp.specs[name], imp.shapes[name], imp.sources[name] = spec, spec.shape, frozenset([name])
    for n in model.nodes:
        imp.node(n, TRANSLATIONS)
    outputs = []
    for name in model.outputs:
        if name in imp.consts and name not in imp.shapes:
            value = np.asarray(imp.consts[name])
            if value.dtype == object:
                raise UnsupportedError(f"{path}: output {name!r} is a shape holding symbolic dims")
            # an output computed from constants only: a weight the graph hands back through a view
            imp.emit("reshape", f"{name}.constant", {"x": imp.const_operand(name)}, name, shape=[0] * value.ndim)
        outputs.append(imp.logical(name, f"{path}: output {name!r}"))
    used = {n for node in imp.nodes for n in node.inputs.values()}
    graph = Graph(inputs, {n: imp.specs[n] for n in imp.weights if n in used}, imp.nodes, outputs)
    validate_file(graph, path)
    weights = {n: imp.weights[n] for n in graph.weights}
    return graph, weights, {"format": "onnx", "opset": model.opset, "onnx_metadata": model.metadata,
                            "batch_bound_to_1": bind_batch}
