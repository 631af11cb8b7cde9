"""GraphBuilder: what every architecture's graph builder shares.

Nodes are appended in execution order; weights are named through a table of
keys ("q", "ln_1", ...) whose values may hold a ``{l}`` layer placeholder; a
bias is wired when the table has ``<key>_bias`` and that tensor exists.
"""

from __future__ import annotations

from dataclasses import dataclass

from volvox.errors import UnsupportedError
from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.ops import validate


@dataclass(frozen=True)
class TransformerShape:
    """The sizes every transformer family has; a family's config adds its own fields."""

    n_layers: int
    dim: int
    n_heads: int
    head_dim: int
    ffn_dim: int
    vocab_size: int
    context_length: int
    norm_eps: float


class GraphBuilder:
    """Accumulates one graph's nodes over a file's weight specs."""

    def __init__(self, family: str, names: dict[str, str], weights: dict[str, TensorSpec]):
        self.family, self.names, self.weights = family, names, weights
        self.nodes: list[Node] = []

    def add(self, op: str, node_id: str, inputs: dict, out: str, **params) -> str:
        """Append a single-output node; returns its output tensor's name."""
        self.nodes.append(Node(node_id, op, inputs, {"y": out}, params))
        return out

    def weight(self, key: str, layer: int | None = None) -> str:
        """The tensor name of ``key`` (for ``layer``); UnsupportedError if the file lacks it."""
        name = self.names[key].format(l=layer)
        if name not in self.weights:
            raise UnsupportedError(f"{self.family} weights lack tensor {name!r}")
        return name

    def has(self, key: str) -> bool:
        """Whether the table names ``key`` and the file has that (layer-free) tensor."""
        return key in self.names and self.names[key] in self.weights

    def _with_bias(self, inputs: dict, key: str, layer: int | None) -> dict:
        bias = self.names.get(key + "_bias", "").format(l=layer)
        return {**inputs, "bias": bias} if bias in self.weights else inputs

    def linear(self, node_id: str, x: str, key: str, layer: int | None, out: str) -> str:
        """x @ W[key].T (+ bias[key] when present)."""
        return self.add("linear", node_id, self._with_bias({"x": x, "weight": self.weight(key, layer)}, key, layer), out)

    def layer_norm(self, node_id: str, x: str, key: str, layer: int | None, out: str, eps: float) -> str:
        """LayerNorm with weight[key] (+ bias[key] when present)."""
        inputs = self._with_bias({"x": x, "weight": self.weight(key, layer)}, key, layer)
        return self.add("layer_norm", node_id, inputs, out, eps=eps)

    def rms_norm(self, node_id: str, x: str, key: str, layer: int | None, out: str, eps: float) -> str:
        """RMSNorm with weight[key]."""
        return self.add("rms_norm", node_id, {"x": x, "weight": self.weight(key, layer)}, out, eps=eps)

    def attention_residual(self, p: str, layer: int, h: str, q: str, k: str, v: str, attn: dict,
                           window: int = 0, o_key: str = "o") -> str:
        """h + W_o attention(q, k, v) (+ bias), W_o the weight ``o_key``: attention as ``attn`` says (causal
        over the KV cache by default), sliding over ``window`` positions when it is not 0; returns the
        residual sum's name (seq, dim)."""
        a = self.add("attention", p + "attn", {"q": q, "k": k, "v": v}, p + "attn", layer=layer, **attn,
                     **({"window": window} if window else {}))
        o = self.linear(p + "o_proj", a, o_key, layer, p + "o")  # (seq, dim)
        return self.add("add", p + "attn_residual", {"a": h, "b": o}, p + "h_attn")

    def graph(self, inputs: list[TensorSpec], outputs: list[str]) -> Graph:
        """The validated graph, keeping only the weights some node reads."""
        used = {n for node in self.nodes for n in node.inputs.values()}
        graph = Graph(inputs, {n: s for n, s in self.weights.items() if n in used}, self.nodes, outputs)
        validate(graph)
        return graph


DECODER_INPUTS = (TensorSpec("tokens", ("seq",), "int32"), TensorSpec("positions", ("seq",), "int32"))
