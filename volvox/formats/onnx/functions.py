"""ONNX ops that volvox has no translation for but the ONNX standard defines as a function of other ops
(Attention, RotaryEmbedding, SwiGLU, SoftmaxCrossEntropyLoss, the window functions, ...): the node is
replaced by its function body, taken from the ``onnx`` package's operator schemas at the model's
opset (a context-dependent body built for the node's input types), and the body's nodes are
translated like the model's own. Without the ``onnx`` package, or for an op with no body, the op is
refused as before.

The body is the operator's definition, so its result is the op's; what the body's ops cannot do (a
dtype, a run-time shape) is refused by them, naming the inner node.
"""

from __future__ import annotations

import numpy as np

from volvox.formats.onnx.generic import dtype_of, shape_of
from volvox.formats.onnx.importer import Importer
from volvox.formats.onnx.reader import GRAPH_ATTRIBUTE, OnnxModel, OnnxNode, read_graph


def _schema(op: str, opset: int):
    try:
        import onnx.defs
    except ImportError:
        return None
    try:
        return onnx.defs.get_schema(op, opset, "")
    except onnx.defs.SchemaError:
        return None


def defined_by_function(op: str, opset: int) -> bool:
    """Whether the ONNX standard defines ``op`` at ``opset`` as a function of other ops (onnx installed)."""
    schema = _schema(op, opset)
    return schema is not None and bool(list(schema.function_opset_versions) +
                                        list(schema.context_dependent_function_opset_versions))


def _node_proto(n: OnnxNode):
    """``n`` back as a NodeProto (None when an attribute cannot be re-encoded: a sub-graph)."""
    from onnx import helper, numpy_helper

    attrs = []
    for name, value in n.attrs.items():
        if value is GRAPH_ATTRIBUTE or isinstance(value, OnnxModel) or (isinstance(value, list) and not value):
            return None
        attrs.append(helper.make_attribute(name, numpy_helper.from_array(value) if isinstance(value, np.ndarray)
                                           else value))
    node = helper.make_node(n.op, n.inputs, n.outputs, name=n.name)
    node.attribute.extend(attrs)
    return node


def _type_proto(imp: Importer, name: str):
    from onnx import helper

    if not name:
        return helper.make_tensor_type_proto(0, None)
    dims = [d if isinstance(d, int) else str(d) for d in shape_of(imp, name)]
    return helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(dtype_of(imp, name)), dims)


def _body(schema, imp: Importer, n: OnnxNode, node):
    """The FunctionProto defining ``n`` at the importer's opset, None when there is none."""
    from onnx import FunctionProto

    versions = [v for v in schema.function_opset_versions if v <= imp.opset]
    dependent = [v for v in schema.context_dependent_function_opset_versions if v <= imp.opset]
    body = FunctionProto()
    if dependent and (not versions or max(dependent) >= max(versions)):
        types = [_type_proto(imp, i).SerializeToString() for i in n.inputs]
        body.ParseFromString(schema.get_context_dependent_function_with_opset_version(
            max(dependent), node.SerializeToString(), types))
    elif versions:
        body.ParseFromString(schema.get_function_with_opset_version(max(versions)))
    else:
        return None
    return body


def _expanded_nodes(schema, body, node, prefix: str) -> list:
    """The body's nodes with the node's inputs, outputs and attributes in place of the formal ones
    (an attribute the node leaves out takes the schema's or the function's default, else the inner op's own)."""
    from onnx import AttributeProto, NodeProto

    names = {formal: (node.input[k] if k < len(node.input) else "") for k, formal in enumerate(body.input)}
    names.update({formal: node.output[k] for k, formal in enumerate(body.output)
                  if k < len(node.output) and node.output[k]})
    attributes = {name: a.default_value for name, a in schema.attributes.items() if a.default_value.type}
    attributes.update({a.name: a for a in body.attribute_proto})
    attributes.update({a.name: a for a in node.attribute})
    rename = lambda name: names.get(name, prefix + name if name else "")  # noqa: E731
    nodes = []
    for k, inner in enumerate(body.node):
        expanded = NodeProto()
        expanded.CopyFrom(inner)
        del expanded.input[:], expanded.output[:], expanded.attribute[:]
        expanded.input.extend(rename(i) for i in inner.input)
        expanded.output.extend(rename(o) for o in inner.output)
        expanded.name = f"{prefix}{k}.{inner.name or inner.op_type}"
        for attr in inner.attribute:
            if attr.ref_attr_name:
                if attr.ref_attr_name in attributes:
                    bound = AttributeProto()
                    bound.CopyFrom(attributes[attr.ref_attr_name])
                    bound.name = attr.name
                    expanded.attribute.append(bound)
            else:
                expanded.attribute.append(attr)
                if attr.type == AttributeProto.GRAPH:
                    _rename_graph(expanded.attribute[-1].g, rename)
        nodes.append(expanded)
    return nodes


def _rename_graph(graph, rename) -> None:
    """Every tensor name in a sub-graph (its own and the outer ones it reads) through ``rename``, in place."""
    for value in list(graph.input) + list(graph.output) + list(graph.value_info):
        value.name = rename(value.name)
    for tensor in graph.initializer:
        tensor.name = rename(tensor.name)
    for node in graph.node:
        renamed_inputs, renamed_outputs = [rename(i) for i in node.input], [rename(o) for o in node.output]
        del node.input[:], node.output[:]
        node.input.extend(renamed_inputs)
        node.output.extend(renamed_outputs)
        for attr in node.attribute:
            if attr.g.ByteSize():
                _rename_graph(attr.g, rename)


def expand(imp: Importer, n: OnnxNode, where: str, translations: dict) -> bool:
    """Translate ``n`` through its ONNX function body; False when the op has none (or onnx is missing)."""
    schema = _schema(n.op, imp.opset)
    if schema is None or n.domain not in ("", "ai.onnx"):
        return False
    node = _node_proto(n)
    if node is None:
        return False
    body = _body(schema, imp, n, node)
    if body is None or any(d.domain not in ("", "ai.onnx") for d in body.node):
        return False
    from onnx import helper

    graph = helper.make_graph(_expanded_nodes(schema, body, node, f"{n.name}/"), n.name, [], [])
    inner = read_graph(imp.path, graph.SerializeToString(), imp.opset)
    for each in inner.nodes:
        for i in each.inputs:
            imp.readers[i] = imp.readers.get(i, 0) + 1
    for each in inner.nodes:
        imp.node(each, translations)
    return True
