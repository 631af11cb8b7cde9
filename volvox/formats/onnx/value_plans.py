"""ONNX models whose plan depends on input *values*: a shape-fixing operand (a Reshape's shape, Slice
bounds, TopK's K, Expand's shape, pads, repeats, Resize's sizes ...) or the input of an op whose
output shape depends on the data (NonZero, Compress, Unique, NonMaxSuppression) computed from graph
inputs at run time.

The importer fixes shapes at import and raises ConstantRequired naming the graph inputs such an
operand comes from. ``ValuePlannedModel`` resolves them at run time: each run reads those inputs'
values, imports the graph with them held as constants (the importer folds what they decide, data-
dependent ops included, and plans every other buffer as usual) and caches the compiled model per
value signature; a run with values seen before reuses its plan, new values re-plan. Symbolic dims of
the other inputs are still bound per run by the executor, as in any model.
"""

from __future__ import annotations

import collections
import sys

import numpy as np

from volvox.errors import ClosedError, ShapeError, UnsupportedError
from volvox.model import Model
from volvox.formats.onnx.reader import OnnxModel, element_dtype

PLANS_KEPT = 8        # compiled plans kept per model (least recently used dropped first)
REPLANS_PER_RUN = 8   # rounds of "another operand must be known" before a run gives up


def bake(model: OnnxModel, values: dict[str, np.ndarray], path: str) -> OnnxModel:
    """``model`` with the graph inputs named in ``values`` turned into initializers holding them (in the
    inputs' declared dtype; ShapeError when a value's shape contradicts a declared dim)."""
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
    return OnnxModel(model.opset, model.metadata, initializers, inputs, list(model.outputs), list(model.nodes))


class ValuePlannedModel(Model):
    """An ONNX model planned per run from the values of the graph inputs that fix its shapes:
    ``run({name: array})`` as any Model; ``value_inputs`` names the inputs whose values pick the plan."""

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
        self._plans: collections.OrderedDict[tuple, Model] = collections.OrderedDict()
        self._closers, self._closed = [], False
        self._last: Model | None = None   # the plan of the latest run

    def _signature(self, feeds: dict) -> tuple:
        """The plan's key: each value input's dtype, shape and bytes."""
        key = []
        for name in self.value_inputs:
            if name not in feeds:
                raise ShapeError(f"{self.source}: missing input {name!r} (its values fix the plan)")
            value = np.ascontiguousarray(feeds[name])
            key.append((name, value.dtype.str, value.shape, value.tobytes()))
        return tuple(key)

    def plan_for(self, feeds: dict) -> Model:
        """The compiled model for these feeds' values of ``value_inputs`` (imported on first sight)."""
        from volvox.formats.onnx.importer import ConstantRequired

        for _ in range(REPLANS_PER_RUN):
            key = self._signature(feeds)
            if key in self._plans:
                self._plans.move_to_end(key)
                self._last = self._plans[key]
                return self._last
            values = {name: feeds[name] for name in self.value_inputs}
            try:
                graph, weights, metadata = self._import(bake(self._model, values, self.source), self.source)
            except ConstantRequired as e:   # another operand computed from inputs: hold those too
                more = [name for name in e.inputs if name not in self.value_inputs]
                if not more or not all(name in feeds for name in more):
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
        """No profile: each value's plan has its own executor."""
        return None

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

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"model {self.source!r} was closed")
