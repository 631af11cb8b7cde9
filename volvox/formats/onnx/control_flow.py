"""ONNX control flow (If, Loop, Scan) as straight-line volvox graph: a sub-graph's nodes are translated
into the importer like the model's own, their names suffixed per use.

- If: a constant condition inlines the chosen branch (the other is never read). A condition computed
  at run time inlines both branches and picks each output with ``where``, which needs the two
  branches' outputs of one shape and dtype (branches have no side effects, so computing both is
  exact); otherwise the condition must be a constant.
- Loop: unrolled at import. The trip count and the condition must be constants, and the body's
  condition output must fold to a constant each iteration (a counted loop); scan outputs are stacked.
- Scan (opset 9+): unrolled over the scan axis, whose length the import knows; ``directions``,
  ``axes`` and the output directions and axes included.

Unrolling keeps every iteration's nodes in the graph, so a loop of many iterations makes a long plan:
``MAX_UNROLL`` bounds it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from volvox.errors import UnsupportedError
from volvox.formats.onnx.generic import dtype_of, shape_of
from volvox.formats.onnx.importer import ConstantRequired, Importer, arg
from volvox.formats.onnx.reader import OnnxModel, OnnxNode

MAX_UNROLL = 1024


def _renamed_graph(graph: OnnxModel, mapping: dict[str, str]) -> OnnxModel:
    """``graph`` with every tensor name in ``mapping`` replaced (nested sub-graphs included)."""
    return dataclasses.replace(graph, nodes=[_renamed_node(node, mapping, "") for node in graph.nodes],
                               outputs=[mapping.get(o, o) for o in graph.outputs])


def _renamed_node(node: OnnxNode, mapping: dict[str, str], prefix: str) -> OnnxNode:
    attrs = {k: _renamed_graph(v, mapping) if isinstance(v, OnnxModel) else v for k, v in node.attrs.items()}
    return OnnxNode(node.op, [mapping.get(i, i) for i in node.inputs], [mapping.get(o, o) for o in node.outputs],
                    attrs, prefix + node.name, node.domain)


def inline(imp: Importer, body: OnnxModel, bindings: list[str], suffix: str, translations: dict) -> list[str]:
    """Translate ``body``'s nodes into ``imp``, its inputs bound in order to the tensors ``bindings``
    names; every name the body defines gets ``suffix``. The names of the body's outputs."""
    defined = set(body.initializers) | {name for name, _, _ in body.inputs} | {
        o for node in body.nodes for o in node.outputs if o}
    mapping = {name: f"{name}{suffix}" for name in defined}
    for (formal, _, _), actual in zip(body.inputs, bindings):
        imp.alias(actual, mapping[formal])
    for name, value in body.initializers.items():
        imp.consts[mapping[name]] = value
    nodes = [_renamed_node(node, mapping, f"{suffix}/") for node in body.nodes]
    outputs = [mapping.get(o, o) for o in body.outputs]
    for node in nodes:
        for i in node.inputs:
            imp.readers[i] = imp.readers.get(i, 0) + 1
    for o in outputs:
        imp.readers[o] = imp.readers.get(o, 0) + 1
    for node in nodes:
        imp.node(node, translations)
    return outputs


def if_(imp: Importer, n: OnnxNode, where: str, translations: dict) -> None:
    """If: the constant condition's branch inlined, or both branches and a ``where`` per output."""
    cond = n.inputs[0]
    branches = n.attrs["then_branch"], n.attrs["else_branch"]
    if cond in imp.consts:
        taken = branches[0] if bool(np.asarray(imp.consts[cond]).reshape(-1)[0]) else branches[1]
        for out, value in zip(n.outputs, inline(imp, taken, [], f"@{n.name}", translations)):
            imp.alias(value, out)
        return
    for branch in branches:
        if any(node.op in ("Loop", "Scan", "If") for node in branch.nodes):
            raise ConstantRequired(f"{where}: the condition ({cond!r}) must be a constant for branches holding "
                                   "control flow", cond)
    then_out = inline(imp, branches[0], [], f"@{n.name}.then", translations)
    else_out = inline(imp, branches[1], [], f"@{n.name}.else", translations)
    for out, a, b in zip(n.outputs, then_out, else_out):
        if shape_of(imp, a) != shape_of(imp, b) or dtype_of(imp, a) != dtype_of(imp, b):
            raise ConstantRequired(f"{where}: the condition ({cond!r}) must be a constant: the branches give "
                                   f"{dtype_of(imp, a)}{list(shape_of(imp, a))} and "
                                   f"{dtype_of(imp, b)}{list(shape_of(imp, b))}", cond)
        imp.apply("where", f"{n.name}.{out}", {"condition": cond, "a": a, "b": b}, out, where)


def _stack(imp: Importer, n: OnnxNode, parts: list[str], out: str, axis: int, where: str) -> None:
    """``parts`` (equal shapes) stacked along a new ``axis`` into ``out``."""
    dims = list(shape_of(imp, parts[0]))
    axis = axis % (len(dims) + 1)
    # symbolic dims before the axis are copied (0); one after it is inferred (-1)
    target = [d if isinstance(d, int) else 0 if i < axis else -1 for i, d in enumerate(dims)]
    target.insert(axis, 1)
    expanded = []
    for k, part in enumerate(parts):
        name = f"{out}.part{k}"
        imp.apply("reshape", f"{n.name}.{out}.expand{k}", {"x": part}, name, where, shape=target)
        expanded.append(name)
    acc = expanded[0]
    for k, part in enumerate(expanded[1:]):
        name = out if k == len(expanded) - 2 else f"{out}.stack{k}"
        imp.apply("concat", f"{n.name}.{out}.concat{k}", {"x0": acc, "x1": part}, name, where, axis=axis)
        acc = name
    if len(expanded) == 1:
        imp.alias(acc, out)


def loop(imp: Importer, n: OnnxNode, where: str, translations: dict) -> None:
    """Loop unrolled at import: a constant trip count and condition, a body whose condition folds."""
    body: OnnxModel = n.attrs["body"]
    trips = int(np.asarray(imp.const(n.inputs[0], where, "the trip count")).reshape(-1)[0]) if arg(n, 0) else None
    running = bool(np.asarray(imp.const(n.inputs[1], where, "the condition")).reshape(-1)[0]) if arg(n, 1) else True
    carried = list(n.inputs[2:])
    scans: list[list[str]] = [[] for _ in range(len(body.outputs) - 1 - len(carried))]
    step = 0
    while running and (trips is None or step < trips):
        if step >= MAX_UNROLL:
            raise UnsupportedError(f"{where}: a Loop of more than {MAX_UNROLL} iterations is not unrolled")
        counter, flag = f"{n.name}.iteration{step}", f"{n.name}.condition{step}"
        imp.consts[counter], imp.consts[flag] = np.array(step, np.int64), np.array(running)
        outs = inline(imp, body, [counter, flag, *carried], f"@{n.name}.{step}", translations)
        if outs[0] not in imp.consts:
            raise UnsupportedError(f"{where}: a Loop whose condition is computed at run time is not supported")
        running = bool(np.asarray(imp.consts[outs[0]]).reshape(-1)[0])
        carried = outs[1:1 + len(carried)]
        for k, value in enumerate(outs[1 + len(carried):]):
            scans[k].append(value)
        step += 1
    for out, value in zip(n.outputs, carried):
        imp.alias(value, out)
    for out, parts in zip(n.outputs[len(carried):], scans):
        if not parts:
            raise UnsupportedError(f"{where}: a Loop of no iterations with scan outputs is not supported")
        _stack(imp, n, parts, out, 0, where)


def scan(imp: Importer, n: OnnxNode, where: str, translations: dict) -> None:
    """Scan (opset 9+) unrolled over its scan axis: each iteration reads one slice of every scan input
    and stacks one slice of every scan output."""
    if imp.opset < 9:
        raise UnsupportedError(f"{where}: opset-8 Scan (batched, with sequence_lens) is not supported")
    body: OnnxModel = n.attrs["body"]
    inputs_count = n.attrs["num_scan_inputs"]
    states = list(n.inputs[:len(n.inputs) - inputs_count])
    scanned = n.inputs[len(states):]
    axes = list(n.attrs.get("scan_input_axes", [0] * inputs_count))
    directions = list(n.attrs.get("scan_input_directions", [0] * inputs_count))
    out_count = len(body.outputs) - len(states)
    out_axes = list(n.attrs.get("scan_output_axes", [0] * out_count))
    out_directions = list(n.attrs.get("scan_output_directions", [0] * out_count))
    lengths = {shape_of(imp, x)[a % len(shape_of(imp, x))] for x, a in zip(scanned, axes)}
    if len(lengths) != 1 or not isinstance(next(iter(lengths)), int):
        raise UnsupportedError(f"{where}: Scan over sequence lengths {sorted(map(str, lengths))}")
    length = lengths.pop()
    if length > MAX_UNROLL:
        raise UnsupportedError(f"{where}: a Scan of more than {MAX_UNROLL} iterations is not unrolled")
    outputs: list[list[str]] = [[] for _ in range(out_count)]
    for step in range(length):
        slices = []
        for k, (x, axis, backwards) in enumerate(zip(scanned, axes, directions)):
            rank = len(shape_of(imp, x))
            at = length - 1 - step if backwards else step
            name = f"{n.name}.in{k}.{step}"
            imp.consts[f"{name}.index"] = np.array(at, np.int64)
            imp.apply("gather", f"{n.name}.slice{k}.{step}", {"x": x, "indices": f"{name}.index"}, name, where,
                      axis=axis % rank)
            slices.append(name)
        outs = inline(imp, body, [*states, *slices], f"@{n.name}.{step}", translations)
        states = outs[:len(states)]
        for k, value in enumerate(outs[len(states):]):
            outputs[k].append(value)
    for out, value in zip(n.outputs, states):
        imp.alias(value, out)
    for out, parts, axis, backwards in zip(n.outputs[len(states):], outputs, out_axes, out_directions):
        _stack(imp, n, parts[::-1] if backwards else parts, out, axis, where)
