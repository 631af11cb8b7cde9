"""Training graphs: a model's inference graph turned into the graph of its loss, with chosen weights as inputs.

``trainable_graph`` is generic: the named weights become float32 graph inputs (an optimiser step then
only changes the feeds) and every other weight stays a frozen weight, prepacked or quantized as at
inference. ``training_graph`` does that for a text model, after rewriting its graph from a decode
graph to the full-sequence causal language-model graph: ``tokens (batch, seq)`` and ``labels
(batch, seq)`` in, the mean cross entropy over labels != ignore_index out. The forward nodes are the
inference builder's own (same ops, same kernels, over batch * seq rows); only the stateful ones
change: attention over the KV cache becomes ``causal_attention`` over each whole sequence, the
positions are 0 .. seq-1 in every sequence (``sequence_positions``), and ``output_rows`` goes (every
row's logits feed the loss).
``differentiate`` (compile/autodiff.py) then adds the backward nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from volvox.compile.autodiff import differentiate
from volvox.errors import BlueprintError, UnsupportedError
from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.ops import get_op, validate
from volvox.ops.loss import IGNORE_INDEX

LOSS = "loss"
TRAINABLE_DTYPES = ("float32", "float16", "float64")


@dataclass
class TrainingGraph:
    """A training graph and what it runs with: frozen ``weights``, the trainable tensors' current values
    (``params``, float32, fed as graph inputs beside ``tokens`` and ``labels``), the loss tensor's name."""

    graph: Graph
    weights: dict[str, Any]
    params: dict[str, np.ndarray]
    loss: str = LOSS
    closers: list[Callable[[], None]] = field(default_factory=list)

    def joint(self, checkpoint_blocks: bool = False) -> Graph:
        """The forward + backward graph: outputs the loss and grad/<name> for every trainable tensor. With
        ``checkpoint_blocks``, only the residual stream (block_checkpoints) is kept from the forward and
        each block's activations are recomputed for its backward: less memory, about one more forward."""
        checkpoints = block_checkpoints(self.graph) if checkpoint_blocks else None
        return differentiate(self.graph, self.loss, list(self.params), checkpoints)

    def close(self) -> None:
        """Release the weight files this graph's import opened."""
        for close in self.closers:
            close()
        self.closers = []


def block_checkpoints(graph: Graph) -> list[str]:
    """The tensors a transformer's blocks start from: every input of a norm node (the residual stream
    before each attention and feed-forward half, and before the final norm)."""
    return sorted({n.inputs["x"] for n in graph.nodes if n.op in ("rms_norm", "layer_norm")})


def trainable_graph(graph: Graph, weights: dict[str, Any], names: list[str]) -> tuple[Graph, dict[str, Any]]:
    """``graph`` with the weights ``names`` turned into float32 graph inputs (after the existing inputs,
    in ``names`` order; their values, from ``weights``, are fed at each run), and the weights that stay
    (frozen). UnsupportedError for a block-quantized weight (only float weights train; an adapter
    trains beside a quantized one)."""
    for name in names:
        if name not in graph.weights:
            raise BlueprintError(f"cannot train {name!r}: not a weight of the graph")
        if graph.weights[name].dtype not in TRAINABLE_DTYPES:
            raise UnsupportedError(f"cannot train weight {name!r}: it is {graph.weights[name].dtype} "
                                   "(only float weights train; keep it frozen)")
    chosen = set(names)
    inputs = list(graph.inputs) + [TensorSpec(n, graph.weights[n].shape, "float32") for n in names]
    frozen = {n: s for n, s in graph.weights.items() if n not in chosen}
    out = Graph(inputs, frozen, list(graph.nodes), list(graph.outputs))
    validate(out)
    return out, {n: w for n, w in weights.items() if n in frozen}


def causal_lm_graph(graph: Graph, ignore_index: int = IGNORE_INDEX) -> Graph:
    """A text model's inference graph (inputs tokens, positions (seq,); output logits) as the full-sequence
    causal LM loss graph: inputs tokens and labels (batch, seq) int32, output ``loss``. The batch runs as
    the inference graph's rows (batch * seq of them), so every node keeps the shapes its builder gave
    it; attention alone sees (batch, seq, heads * head_dim). UnsupportedError names a node the rewrite
    cannot train (a stateful op other than attention and output_rows)."""
    names = [s.name for s in graph.inputs]
    if sorted(names) != ["positions", "tokens"] or graph.outputs != ["logits"]:
        raise UnsupportedError(f"not a decoder-only text model graph (inputs {names}, outputs {graph.outputs}): "
                               "training graphs take tokens and positions in, logits out")
    rename = {"tokens": "tokens.rows"}  # tensor -> what the training graph reads instead
    nodes = [Node("tokens.rows", "reshape", {"x": "tokens"}, {"y": "tokens.rows"}, {"shape": [-1]}),
             Node("positions", "sequence_positions", {"ids": "tokens"}, {"y": "positions"})]
    for node in graph.nodes:
        inputs = {p: rename.get(t, t) for p, t in node.inputs.items()}
        if node.op == "output_rows":  # every row is kept
            rename[node.outputs["y"]] = inputs["x"]
        elif node.op == "attention":
            nodes += _causal_attention(node, inputs)
        elif get_op(node.op, node.id).stateful:
            raise UnsupportedError(f"node {node.id!r}: op {node.op!r} reads a decode state; it has no training form")
        else:
            nodes.append(Node(node.id, node.op, inputs, dict(node.outputs), dict(node.params)))
    nodes += [Node("labels.rows", "reshape", {"x": "labels"}, {"y": "labels.rows"}, {"shape": [-1]}),
              Node(LOSS, "cross_entropy", {"logits": rename.get("logits", "logits"), "labels": "labels.rows"},
                   {"loss": LOSS, "lse": LOSS + ".lse"}, {"ignore_index": int(ignore_index)})]
    inputs = [TensorSpec("tokens", ("batch", "seq"), "int32"), TensorSpec("labels", ("batch", "seq"), "int32")]
    out = Graph(inputs, dict(graph.weights), nodes, [LOSS])
    validate(out)
    return out


def _causal_attention(node: Node, inputs: dict[str, str]) -> list[Node]:
    """An attention node's training form: q, k, v rows split into (batch, seq, ...) like the tokens,
    causal_attention over each whole sequence (its logsumexp kept for the backward), rows again."""
    p = node.id
    if float(node.params.get("softcap", 0.0)) or not node.params.get("causal", True):
        raise UnsupportedError(f"node {p!r}: soft-capped or non-causal attention has no training form yet")
    params = {k: v for k, v in node.params.items() if k != "layer"}
    width = int(node.params["n_heads"]) * int(node.params["head_dim"])
    split = [Node(f"{p}.{port}_batch", "reshape_like", {"x": inputs[port], "like": "tokens"},
                  {"y": f"{p}.{port}_batch"}, {"keep": 1}) for port in ("q", "k", "v")]
    attend = Node(p, "causal_attention", {port: f"{p}.{port}_batch" for port in ("q", "k", "v")},
                  {"y": p + ".y_batch", "lse": p + ".lse"}, params)
    rows = Node(p + ".rows", "reshape", {"x": p + ".y_batch"}, {"y": node.outputs["y"]}, {"shape": [-1, width]})
    return split + [attend, rows]


def training_graph(model, trainable: None | str | list[str] = None, ignore_index: int = IGNORE_INDEX) -> TrainingGraph:
    """The causal LM training graph of a text model: ``model`` a loaded LanguageModel (its files are read
    again, uncompiled) or the path of one. ``trainable``: None (nothing; every weight frozen), "all"
    (every float weight) or a list of weight names, which become graph inputs with float32 copies of
    their values in ``params``. The loss is the mean cross entropy of logits[b, t] against labels[b, t]
    over the labels != ``ignore_index`` (labels are the next tokens, shifted by the caller; padding
    and prompt rows -100)."""
    from volvox.loader import import_model

    imported = import_model(Path(model if isinstance(model, (str, Path)) else model.source))
    try:
        if imported.metadata.get("task") != "generate":
            raise UnsupportedError(f"{imported.source}: training graphs are for text generation models "
                                   f"(this one's task is {imported.metadata.get('task')!r})")
        validate(imported.graph)
        graph = causal_lm_graph(imported.graph, ignore_index)
        if trainable is None:
            names = []
        elif trainable == "all":  # a one-element weight is a constant the importer made (Gemma's embed_scale)
            names = [n for n, s in graph.weights.items() if s.dtype in TRAINABLE_DTYPES and int(np.prod(s.shape)) > 1]
        else:
            names = list(trainable)
        graph, frozen = trainable_graph(graph, imported.weights, names)
        params = {n: np.array(imported.weights[n], dtype=np.float32) for n in names}  # (writable copies)
        return TrainingGraph(graph, frozen, params, LOSS, list(imported.closers))
    except BaseException:
        imported.close()
        raise
