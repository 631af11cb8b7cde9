"""ONNX models whose plan depends on tensor *values*: a shape-fixing operand (a Reshape's shape, Slice
bounds, TopK's K, Expand's shape, pads, repeats, Resize's sizes ...) or the input of an op whose
output shape depends on the data (NonZero, Compress, Unique, NonMaxSuppression) computed at run time.

The importer fixes shapes at import and raises ConstantRequired naming the tensor whose value it
needs. ``ValuePlannedModel`` resolves such tensors at run time: a graph input's value is read from
the feeds; a computed tensor's value comes from a *prefix* model, the part of the graph that
computes it (compiled once, itself planned per value if it needs to be). The graph is then imported
with those values held as constants (the importer folds what they decide, data-dependent ops
included, and drops the nodes only they needed) and the compiled plan is cached per value
signature: values seen before reuse their plan, new ones re-plan. Symbolic dims of the other inputs
are still bound per run by the executor, as in any model.
"""

from __future__ import annotations

import collections
import dataclasses
import sys

import numpy as np

from volvox.errors import ClosedError, ShapeError, UnsupportedError
from volvox.model import Model
from volvox.formats.onnx.reader import OnnxModel, element_dtype

PLANS_KEPT = 8        # compiled plans kept per model (least recently used dropped first)
REPLANS_PER_RUN = 8   # rounds of "another operand must be known" before a run gives up


def _names_read(node) -> set[str]:
    """The tensors ``node`` reads, those its subgraphs (If / Loop / Scan bodies) read from outside included."""
    names = {i for i in node.inputs if i}
    for value in node.attrs.values():
        if isinstance(value, OnnxModel):
            for inner in value.nodes:
                names |= _names_read(inner)
    return names


def prune(model: OnnxModel) -> OnnxModel:
    """``model`` without the nodes none of its outputs depends on."""
    needed, kept = set(model.outputs), []
    for node in reversed(model.nodes):
        if any(o in needed for o in node.outputs if o):
            kept.append(node)
            needed |= _names_read(node)
    return OnnxModel(model.opset, model.metadata, model.initializers, model.inputs, list(model.outputs), kept[::-1])


def computes(model: OnnxModel, name: str) -> bool:
    """Whether ``name`` is a graph input of ``model`` or an output of one of its (top-level) nodes."""
    return any(i[0] == name for i in model.inputs) or any(name in n.outputs for n in model.nodes)


def values_needed(model: OnnxModel, error) -> tuple[str, ...] | None:
    """The tensors whose values resolve ConstantRequired ``error``: the tensor it names when ``model``
    computes it at its top level, else the graph inputs it is computed from (a tensor inside a
    function body or subgraph); None when neither is known."""
    if computes(model, error.value_of):
        return (error.value_of,)
    graph_inputs = {name for name, _, _ in model.inputs}
    return tuple(error.inputs) if all(name in graph_inputs for name in error.inputs) else None


def bake(model: OnnxModel, values: dict[str, np.ndarray], path: str) -> OnnxModel:
    """``model`` with the tensors named in ``values`` held as initializers: graph inputs (in their
    declared dtype; ShapeError when a value's shape contradicts a declared dim) and computed tensors
    (their producers' outputs renamed away), then pruned of the nodes only those computed."""
    initializers = dict(model.initializers)
    inputs = []
    for name, elem, dims in model.inputs:
        if name not in values:
            inputs.append((name, elem, dims))
            continue
        value = np.asarray(values[name]).astype(element_dtype(elem, f"{path}: input {name!r}"), copy=False)
        if dims and (len(dims) != value.ndim or any(isinstance(d, int) and d != s for d, s in zip(dims, value.shape))):
            raise ShapeError(f"{path}: input {name!r} has shape {list(value.shape)}, the model declares {dims}")
        initializers[name] = value
    nodes = []
    for node in model.nodes:
        if any(o in values for o in node.outputs):
            for o in node.outputs:
                if o in values:
                    initializers[o] = np.asarray(values[o])
            node = dataclasses.replace(node, outputs=[f"{o}.computed" if o in values else o for o in node.outputs])
        nodes.append(node)
    return prune(OnnxModel(model.opset, model.metadata, initializers, inputs, list(model.outputs), nodes))


def load_planned(model: OnnxModel, path: str, import_fn, **model_kw) -> Model:
    """A Model of ``model``, or a ValuePlannedModel when its import needs the value of a tensor it computes."""
    from volvox.formats.onnx.importer import ConstantRequired

    try:
        graph, weights, metadata = import_fn(model, path)
    except ConstantRequired as e:
        if values_needed(model, e) is None:
            raise
        return ValuePlannedModel(model, path, values_needed(model, e), import_fn, **model_kw)
    return Model(graph, weights, metadata, path, **model_kw)


class ValuePlannedModel(Model):
    """An ONNX model planned per run from the values of the tensors that fix its shapes:
    ``run({name: array})`` as any Model; ``value_inputs`` names those tensors (graph inputs, or tensors
    the graph computes), in the order the import asked for them."""

    def __init__(self, model: OnnxModel, path: str, value_inputs: tuple[str, ...], import_fn, **model_kw):
        device = model_kw.pop("device", None)
        if device is not None:   # one device per plan would be closed with the first plan dropped
            device.close()
            print("Backend: CPU (a model planned per input value runs on the CPU)", file=sys.stderr)
        self.source = path
        self.metadata = {"format": "onnx", "opset": model.opset, "onnx_metadata": model.metadata,
                         "value_inputs": list(value_inputs)}
        self.value_inputs = tuple(value_inputs)
        self.load_seconds = 0.0
        self._model, self._import, self._model_kw = model, import_fn, model_kw
        self._graph_inputs = {name for name, _, _ in model.inputs}
        self._prefix: Model | None = None   # computes the value tensors that are not graph inputs
        self._prefix_outputs: list[str] = []
        self._plans: collections.OrderedDict[tuple, Model] = collections.OrderedDict()
        self._closers, self._closed = [], False
        self._last: Model | None = None   # the plan of the latest run

    def _values(self, feeds: dict) -> dict[str, np.ndarray]:
        """The value of each of ``value_inputs`` for these feeds: graph inputs read, the others computed
        by the prefix model (rebuilt when the set of computed ones grew)."""
        values = {}
        for name in self.value_inputs:
            if name in self._graph_inputs:
                if name not in feeds:
                    raise ShapeError(f"{self.source}: missing input {name!r} (its values fix the plan)")
                values[name] = np.asarray(feeds[name])
        computed = [name for name in self.value_inputs if name not in self._graph_inputs]
        if computed:
            if computed != self._prefix_outputs:
                if self._prefix is not None:
                    self._prefix.close()
                prefix = OnnxModel(self._model.opset, self._model.metadata, self._model.initializers,
                                   self._model.inputs, computed, self._model.nodes)
                self._prefix = load_planned(prune(prefix), self.source, self._import, **self._model_kw)
                self._prefix_outputs = computed
            values.update(zip(computed, self._prefix.run(feeds).values()))
        return values

    def plan_for(self, feeds: dict) -> Model:
        """The compiled model for these feeds' values of ``value_inputs`` (imported on first sight)."""
        from volvox.formats.onnx.importer import ConstantRequired

        for _ in range(REPLANS_PER_RUN):
            values = self._values(feeds)
            key = tuple((name, v.dtype.str, v.shape, np.ascontiguousarray(v).tobytes()) for name, v in values.items())
            if key in self._plans:
                self._plans.move_to_end(key)
                self._last = self._plans[key]
                return self._last
            try:
                graph, weights, metadata = self._import(bake(self._model, values, self.source), self.source)
            except ConstantRequired as e:   # another tensor's value is needed: compute it too
                more = [name for name in values_needed(self._model, e) or () if name not in self.value_inputs]
                if not more:
                    raise
                self.value_inputs += tuple(more)
                self.metadata["value_inputs"] = list(self.value_inputs)
                continue
            plan = Model(graph, weights, {**metadata, "value_inputs": list(self.value_inputs)}, self.source,
                         **self._model_kw)
            self._plans[key] = plan
            if len(self._plans) > PLANS_KEPT:
                self._plans.popitem(last=False)[1].close()
            self._last = plan
            return plan
        raise UnsupportedError(f"{self.source}: more than {REPLANS_PER_RUN} rounds of run-time operands to resolve")

    def run(self, feeds: dict) -> dict[str, np.ndarray]:
        """Run on ``feeds``: the plan of these values of ``value_inputs`` (made now if new) on the rest."""
        self._check_open()
        return self.plan_for(feeds).run({k: v for k, v in feeds.items() if k not in self.value_inputs})

    @property
    def graph(self):
        """The compiled graph of the latest run's plan (None before the first run)."""
        return None if self._last is None else self._last.graph

    @property
    def source_graph(self):
        """The imported graph of the latest run's plan, before compiler passes (None before the first run)."""
        return None if self._last is None else self._last.source_graph

    @property
    def executor(self):
        """The executor of the latest run's plan (None before the first run)."""
        return None if self._last is None else self._last.executor

    @property
    def compile_report(self):
        """The compiler report of the latest run's plan (None before the first run)."""
        return None if self._last is None else self._last.compile_report

    @property
    def profile(self):
        """The per-op timings of the latest run's plan (None unless loaded with profile=True)."""
        return None if self._last is None else self._last.profile

    def weight_bytes(self) -> dict[str, int]:
        """Bytes of weights per dtype of the latest run's plan (empty before the first run)."""
        return {} if self._last is None else self._last.weight_bytes()

    def close(self) -> None:
        """Release every cached plan; later calls raise ClosedError."""
        if self._closed:
            return
        self._closed = True
        self._last = None
        while self._plans:
            self._plans.popitem()[1].close()
        if self._prefix is not None:
            self._prefix.close()
            self._prefix = None

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"model {self.source!r} was closed")
