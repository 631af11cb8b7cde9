"""ONNX control flow (If, Loop, Scan) as straight-line volvox graph: a sub-graph's nodes are translated
into the importer like the model's own, their names suffixed per use.

- If: a constant condition inlines the chosen branch (the other is never read). A condition computed
  at run time inlines both branches and picks each output with ``where``, which needs the two
  branches' outputs of one shape and dtype (branches have no side effects, so computing both is
  exact); otherwise the condition must be a constant.
- Loop: unrolled at import. The trip count and the condition must be constants, and the body's
  condition output must fold to a constant each iteration (a counted loop); scan outputs are stacked.
- Scan: unrolled over the scan axis, whose length the import knows; ``directions``, ``axes`` and the
  output directions and axes included; opset 8's batched form per batch entry.

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
                                   "control flow", cond, tuple(sorted(imp.sources.get(cond, ()))))
    then_out = inline(imp, branches[0], [], f"@{n.name}.then", translations)
    else_out = inline(imp, branches[1], [], f"@{n.name}.else", translations)
    for out, a, b in zip(n.outputs, then_out, else_out):
        if shape_of(imp, a) != shape_of(imp, b) or dtype_of(imp, a) != dtype_of(imp, b):
            raise ConstantRequired(f"{where}: the condition ({cond!r}) must be a constant: the branches give "
                                   f"{dtype_of(imp, a)}{list(shape_of(imp, a))} and "
                                   f"{dtype_of(imp, b)}{list(shape_of(imp, b))}", cond,
                                   tuple(sorted(imp.sources.get(cond, ()))))
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


def _take(imp: Importer, n: OnnxNode, x: str, index: int, axis: int, name: str, where: str) -> str:
    """Slice ``index`` of ``x`` along ``axis`` (the axis dropped) into ``name``."""
    imp.consts[f"{name}.index"] = np.array(index, np.int64)
    imp.apply("gather", f"{n.name}.{name}", {"x": x, "indices": f"{name}.index"}, name, where,
              axis=axis % len(shape_of(imp, x)))
    return name


def _scan_steps(imp: Importer, n: OnnxNode, body: OnnxModel, states: list, scanned: list, axes: list, directions: list,
                prefix: str, where: str, translations: dict) -> tuple[list, list]:
    """The body unrolled over the scan axis: (final states, per scan output the names of its slices)."""
    lengths = {shape_of(imp, x)[a % len(shape_of(imp, x))] for x, a in zip(scanned, axes)}
    if len(lengths) != 1 or not isinstance(next(iter(lengths)), int):
        raise UnsupportedError(f"{where}: Scan over sequence lengths {sorted(map(str, lengths))}")
    length = lengths.pop()
    if length > MAX_UNROLL:
        raise UnsupportedError(f"{where}: a Scan of more than {MAX_UNROLL} iterations is not unrolled")
    outputs: list[list[str]] = [[] for _ in range(len(body.outputs) - len(states))]
    for step in range(length):
        slices = [_take(imp, n, x, length - 1 - step if backwards else step, axis, f"{prefix}.in{k}.{step}", where)
                  for k, (x, axis, backwards) in enumerate(zip(scanned, axes, directions))]
        outs = inline(imp, body, [*states, *slices], f"@{prefix}.{step}", translations)
        states = outs[:len(states)]
        for k, value in enumerate(outs[len(states):]):
            outputs[k].append(value)
    return states, outputs


def scan(imp: Importer, n: OnnxNode, where: str, translations: dict) -> None:
    """Scan unrolled over its scan axis: each iteration reads one slice of every scan input and stacks
    one slice of every scan output. Opset 8's batched Scan (batch axis 0, scan axis 1, every
    ``sequence_lens`` the full length) runs the same per batch entry, stacked back."""
    body: OnnxModel = n.attrs["body"]
    inputs_count = n.attrs["num_scan_inputs"]
    if imp.opset < 9:
        _scan_batched(imp, n, body, inputs_count, where, translations)
        return
    states = list(n.inputs[:len(n.inputs) - inputs_count])
    out_count = len(body.outputs) - len(states)
    states, outputs = _scan_steps(imp, n, body, states, n.inputs[len(states):],
                                  list(n.attrs.get("scan_input_axes", [0] * inputs_count)),
                                  list(n.attrs.get("scan_input_directions", [0] * inputs_count)), n.name, where,
                                  translations)
    for out, value in zip(n.outputs, states):
        imp.alias(value, out)
    for out, parts, axis, backwards in zip(n.outputs[len(states):], outputs,
                                           n.attrs.get("scan_output_axes", [0] * out_count),
                                           n.attrs.get("scan_output_directions", [0] * out_count)):
        _stack(imp, n, parts[::-1] if backwards else parts, out, axis, where)


def _scan_batched(imp: Importer, n: OnnxNode, body: OnnxModel, inputs_count: int, where: str, translations: dict) -> None:
    """Opset-8 Scan: inputs (sequence_lens?, states (batch, ...), scan inputs (batch, sequence, ...))."""
    states = list(n.inputs[1:len(n.inputs) - inputs_count])
    scanned = n.inputs[len(n.inputs) - inputs_count:]
    batch = shape_of(imp, scanned[0])[0]
    if not isinstance(batch, int):
        raise UnsupportedError(f"{where}: opset-8 Scan over a symbolic batch {batch!r}")
    if arg(n, 0):
        lengths = np.asarray(imp.const(n.inputs[0], where, "sequence_lens")).reshape(-1)
        if np.any(lengths != shape_of(imp, scanned[0])[1]):
            raise UnsupportedError(f"{where}: Scan sequence_lens {lengths.tolist()} shorter than the sequence")
    directions = list(n.attrs.get("directions", [0] * inputs_count))
    finals: list[list[str]] = [[] for _ in states]
    stacked: list[list[str]] = [[] for _ in range(len(body.outputs) - len(states))]
    for b in range(batch):
        entry = f"{n.name}.batch{b}"
        own_states = [_take(imp, n, x, b, 0, f"{entry}.state{k}", where) for k, x in enumerate(states)]
        own_inputs = [_take(imp, n, x, b, 0, f"{entry}.input{k}", where) for k, x in enumerate(scanned)]
        last, outputs = _scan_steps(imp, n, body, own_states, own_inputs, [0] * inputs_count, directions, entry, where,
                                    translations)
        for k, value in enumerate(last):
            finals[k].append(value)
        for k, parts in enumerate(outputs):
            _stack(imp, n, parts, f"{entry}.out{k}", 0, where)
            stacked[k].append(f"{entry}.out{k}")
    for out, parts in zip(n.outputs, finals + stacked):
        _stack(imp, n, parts, out, 0, where)
