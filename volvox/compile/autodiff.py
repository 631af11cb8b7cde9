"""Reverse-mode automatic differentiation over a graph: forward nodes + backward nodes in one graph.

``differentiate(graph, loss, wrt)`` walks the forward nodes in reverse topological order and asks
each op on a path from a ``wrt`` tensor to ``loss`` for its backward (``OpDef.backward``). A
backward reads the gradient of its node's outputs through the builder (``g.grad``), adds ordinary
op-table nodes (``g.emit``) and hands each input's gradient back (``g.accumulate``). A tensor read
by several nodes gets the sum of their contributions (one ``add`` or ``add_n`` node), emitted when
the node producing it is reached, after every reader has contributed.

The result is an ordinary graph: the executor runs it and the memory planner plans it like any
other; backward nodes read forward tensors directly, which keeps them alive as long as needed.

Checkpointing (``checkpoints``: forward tensors to keep) trades compute for memory: a backward node
then reads, instead of any other forward activation, a copy recomputed from the nearest checkpoints
(the producing forward nodes emitted again, once, just before their first backward reader). The
forward activations die with their last forward reader; during the backward only the recomputed
activations of the part being differentiated are alive, beside the checkpoints.
"""

from __future__ import annotations

import copy

from volvox.errors import BlueprintError, UnsupportedError
from volvox.ir.graph import FLOAT_DTYPES, Graph, Node, TensorSpec
from volvox.ops import get_op, validate
from volvox.ops.fused import MAX_ADD_N

GRAD_PREFIX = "grad/"


def grad_name(tensor: str) -> str:
    """The name of dL/d``tensor`` among the training graph's outputs."""
    return GRAD_PREFIX + tensor


class GradBuilder:
    """What an op's ``backward(g, node)`` works with: the gradients reaching the node's outputs, a way to
    add backward nodes, and where to put its inputs' gradients."""

    def __init__(self, graph: Graph, loss: str, wrt: list[str], checkpoints: set[str] | None = None):
        self.specs: dict[str, TensorSpec] = dict(graph.specs)
        self.nodes: list[Node] = []
        self._contributions: dict[str, list[str]] = {}  # tensor -> gradient tensors to sum
        self._summed: dict[str, str] = {}               # tensor -> its summed gradient, once emitted
        self._count = 0
        self._current = "seed"                          # the forward node whose backward is being built
        self.active = _active_tensors(graph, loss, wrt)
        # checkpointing: the forward node making each tensor, the tensors backward nodes may read as they
        # are (None: every forward tensor), and the recomputed copies made so far
        self._producer = {t: n for n in graph.nodes for t in n.outputs.values()}
        self._kept = None if checkpoints is None else set(checkpoints) | {s.name for s in graph.inputs} | set(graph.weights)
        self._recomputed: dict[str, str] = {}

    # ---------------------------------------------------------------- what a backward calls
    def grad(self, node: Node, port: str) -> str | None:
        """Name of dL/d(``node``'s output ``port``), or None when no gradient reaches that output."""
        name = node.outputs.get(port)
        return None if name is None else self.grad_of(name)

    def needs(self, node: Node, port: str) -> bool:
        """Whether ``node``'s input ``port`` needs a gradient (it lies on a path from a ``wrt`` tensor)."""
        name = node.inputs.get(port)
        return name is not None and name in self.active

    def emit(self, op: str, inputs: dict[str, str], params: dict | None = None,
             outputs: tuple[str, ...] = ("y",)) -> tuple[str, ...]:
        """Add a backward node running ``op`` on ``inputs`` ({port: tensor}); returns the names of its
        ``outputs`` ports' new tensors, in order. Shapes are inferred at once (ShapeError names the op)."""
        opdef = get_op(op, self._current)
        inputs = {port: self._readable(t) for port, t in inputs.items()}
        self._count += 1
        node_id = f"bw{self._count}.{self._current}.{op}"
        names = {port: f"bw{self._count}/{self._current}/{port}" for port in outputs}
        node = Node(node_id, op, inputs, names, dict(params or {}))
        opdef.check_ports(node)
        out_specs = opdef.infer({p: self.specs[t] for p, t in node.inputs.items()}, node.params)
        for port, name in names.items():
            shape, dtype = out_specs[port]
            self.specs[name] = TensorSpec(name, tuple(shape), dtype)
        self.nodes.append(node)
        return tuple(names[p] for p in outputs)

    def accumulate(self, node: Node, port: str, tensor: str) -> None:
        """Add ``tensor`` to the gradient of ``node``'s input ``port`` (a no-op when it needs none)."""
        if self.needs(node, port):
            self.add_gradient(node.inputs[port], tensor)

    def reduce_to(self, name: str, shape: tuple) -> str:
        """``name`` summed over the axes numpy broadcasting added to reach it from ``shape`` (the
        gradient of a broadcast input); ``name`` itself when nothing was broadcast."""
        have = self.specs[name].shape
        lead = len(have) - len(shape)
        axes = [i for i, (d, s) in enumerate(zip(have[lead:], shape)) if s == 1 and d != 1]
        if lead == 0 and not axes:
            return name
        return self.emit("sum_to", {"x": name}, {"lead": lead, "axes": axes})[0]

    def shape(self, name: str) -> tuple:
        """The (possibly symbolic) shape of tensor ``name``."""
        return self.specs[name].shape

    # ---------------------------------------------------------------- bookkeeping
    def _readable(self, tensor: str) -> str:
        """What a backward node reads for ``tensor``: the tensor itself, or (checkpointing) a recomputed copy
        of a forward activation that is not kept, its producer emitted again over readable inputs."""
        if self._kept is None or tensor in self._kept or tensor not in self._producer:
            return tensor
        if tensor not in self._recomputed:
            node = self._producer[tensor]
            inputs = {port: self._readable(t) for port, t in node.inputs.items()}
            outputs = {port: "recompute/" + t for port, t in node.outputs.items()}
            for port, t in node.outputs.items():
                self._recomputed[t] = outputs[port]
                self.specs[outputs[port]] = TensorSpec(outputs[port], self.specs[t].shape, self.specs[t].dtype)
            self.nodes.append(Node("recompute." + node.id, node.op, inputs, outputs, dict(node.params)))
        return self._recomputed[tensor]

    def backward_of(self, node: Node) -> None:
        """Run ``node``'s backward when a gradient reaches one of its outputs; UnsupportedError names the
        node and op when its op has none."""
        if not any(t in self.active and self.grad_of(t) is not None for t in node.outputs.values()):
            return
        op = get_op(node.op, node.id)
        if op.backward is None:
            raise UnsupportedError(f"node {node.id!r}: op {node.op!r} has no backward (cannot differentiate through it)")
        self._current = node.id
        op.backward(self, node)

    def gradient_output(self, w: str) -> str:
        """dL/d``w`` under grad_name(w) (a graph output); zeros when no path leads from w to the loss."""
        name = grad_name(w)
        if self.grad_of(w, name) is None:
            self.nodes.append(Node(f"bw.zero.{w}", "fill_like", {"x": w}, {"y": name}, {"value": 0.0}))
        return name

    def add_gradient(self, tensor: str, grad: str) -> None:
        """Record ``grad`` as one contribution to dL/d``tensor``."""
        if tensor in self._summed:
            raise BlueprintError(f"gradient of {tensor!r} reached after it was summed (graph not in topological order)")
        self._contributions.setdefault(tensor, []).append(grad)

    def grad_of(self, tensor: str, name: str | None = None) -> str | None:
        """dL/d``tensor``: its contributions summed (once), or None when there are none. ``name`` names the
        result (a graph output): the sum's own output, or a reshape view of a lone contribution."""
        if tensor in self._summed:
            return self._summed[tensor]
        parts = self._contributions.get(tensor)
        if not parts:
            return None
        while len(parts) > MAX_ADD_N:  # sum in chunks of at most MAX_ADD_N inputs
            chunks = [parts[i:i + MAX_ADD_N] for i in range(0, len(parts), MAX_ADD_N)]
            parts = [self._sum(c) if len(c) > 1 else c[0] for c in chunks]
        if len(parts) > 1:
            total = self._sum(parts, name)
        elif name is not None:
            total = self._view(parts[0], name)
        else:
            total = parts[0]
        self._summed[tensor] = total
        return total

    def _sum(self, parts: list[str], name: str | None = None) -> str:
        """One add (two parts) or add_n node summing ``parts``; its output called ``name`` when given."""
        op = "add" if len(parts) == 2 else "add_n"
        ports = ("a", "b") if op == "add" else tuple(f"x{i}" for i in range(len(parts)))
        total = self.emit(op, dict(zip(ports, parts)))[0]
        if name is not None:  # the node was just made and nothing reads its output yet
            self.nodes[-1].outputs["y"] = name
            self.specs[name] = TensorSpec(name, self.specs[total].shape, self.specs[total].dtype)
            total = name
        return total

    def _view(self, tensor: str, name: str) -> str:
        """A reshape view of ``tensor`` (same shape) called ``name``."""
        spec = self.specs[tensor]
        self.nodes.append(Node(f"bw.{name}", "reshape", {"x": tensor}, {"y": name}, {"shape": [0] * len(spec.shape)}))
        self.specs[name] = TensorSpec(name, spec.shape, spec.dtype)
        return name


def _active_tensors(graph: Graph, loss: str, wrt: list[str]) -> set[str]:
    """Float tensors on a path from a ``wrt`` tensor to ``loss``: those whose gradient is needed."""
    from_wrt = set(wrt)
    for node in graph.nodes:
        if any(t in from_wrt for t in node.inputs.values()):
            from_wrt.update(t for t in node.outputs.values() if graph.specs[t].dtype in FLOAT_DTYPES)
    to_loss = {loss}
    for node in reversed(graph.nodes):
        if any(t in to_loss for t in node.outputs.values()):
            to_loss.update(node.inputs.values())
    return from_wrt & to_loss


def differentiate(graph: Graph, loss: str, wrt: list[str], checkpoints: list[str] | None = None) -> Graph:
    """The training graph of ``graph``: its forward nodes, then the backward nodes; outputs ``loss`` and
    ``grad_name(w)`` for each ``w`` in ``wrt`` (graph inputs or weights, float). The gradient is that of
    the sum of ``loss``'s elements (the loss itself for a scalar). ``checkpoints``: the forward tensors
    backward nodes may read as they are (with the graph's inputs and weights); any other is recomputed
    from them (None: every forward tensor is kept). UnsupportedError names the node and op on the path
    that has no backward."""
    if not graph.specs:
        validate(graph)
    if loss not in graph.specs:
        raise BlueprintError(f"loss tensor {loss!r} is not in the graph")
    if graph.specs[loss].dtype not in FLOAT_DTYPES:
        raise BlueprintError(f"loss tensor {loss!r} is {graph.specs[loss].dtype}, not a float")
    sources = {s.name for s in graph.inputs} | set(graph.weights)
    if len(set(wrt)) != len(wrt):
        raise BlueprintError(f"wrt names a tensor twice: {wrt}")
    for w in wrt:
        if w not in sources:
            raise BlueprintError(f"cannot differentiate with respect to {w!r}: not a graph input or weight")
        if graph.specs[w].dtype not in FLOAT_DTYPES:
            raise BlueprintError(f"cannot differentiate with respect to {w!r}: it is {graph.specs[w].dtype}")
    unknown = [t for t in checkpoints or () if t not in graph.specs]
    if unknown:
        raise BlueprintError(f"checkpoints {unknown} are not tensors of the graph")
    g = GradBuilder(graph, loss, wrt, None if checkpoints is None else set(checkpoints) | {loss})
    if loss in g.active:
        g.add_gradient(loss, g.emit("fill_like", {"x": loss}, {"value": 1.0})[0])
    for node in reversed(graph.nodes):
        g.backward_of(node)
    outputs = [loss] + [g.gradient_output(w) for w in wrt]
    joint = Graph(list(graph.inputs), dict(graph.weights), [copy.copy(n) for n in graph.nodes] + g.nodes, outputs)
    validate(joint)
    return joint
