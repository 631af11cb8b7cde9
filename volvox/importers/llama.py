"""The LLaMA-family decoder graph (RMSNorm, RoPE, grouped-query attention, SwiGLU).

Shared by the GGUF importer and the Hugging Face importer (hf_llama.py): each
supplies the hyperparameters and the names of its weight tensors. Optional
biases (Qwen2's q/k/v, LLaMA's ``attention_bias``) are wired when the names
table has a ``<key>_bias`` entry whose tensor exists.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UnsupportedError
from ..graph import Graph, Node, TensorSpec


@dataclass(frozen=True)
class LlamaConfig:
    """Hyperparameters of a LLaMA-style decoder."""

    n_layers: int
    dim: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_dim: int
    vocab_size: int
    norm_eps: float
    rope_theta: float
    rope_style: str        # "interleaved" (GGUF layout) or "half" (HF layout)
    context_length: int
    rope_scale: float = 1.0
    rope_llama3: dict | None = None   # LLaMA-3.1 frequency scaling (see ops.attention.llama3_inv_freq)
    layer_windows: tuple = ()         # per-layer sliding window (0 = full causal); () = all full


# Weight names in GGUF files; "{l}" is the layer index.
GGUF_NAMES = {
    "embed": "token_embd.weight",
    "attn_norm": "blk.{l}.attn_norm.weight",
    "q": "blk.{l}.attn_q.weight",
    "k": "blk.{l}.attn_k.weight",
    "v": "blk.{l}.attn_v.weight",
    "o": "blk.{l}.attn_output.weight",
    "ffn_norm": "blk.{l}.ffn_norm.weight",
    "gate": "blk.{l}.ffn_gate.weight",
    "up": "blk.{l}.ffn_up.weight",
    "down": "blk.{l}.ffn_down.weight",
    "output_norm": "output_norm.weight",
    "output": "output.weight",
}


def build_llama_graph(cfg: LlamaConfig, names: dict[str, str], weights: dict[str, TensorSpec]) -> Graph:
    """The decoder graph: inputs tokens/positions (seq,), output logits (out_seq, vocab).

    ``weights`` are the specs of the tensors in the file; a missing output
    projection means the embedding is tied.
    """
    nodes: list[Node] = []

    def add(op: str, node_id: str, inputs: dict, out: str, **params) -> str:
        nodes.append(Node(node_id, op, inputs, {"y": out}, params))
        return out

    def weight(key: str, layer: int | None = None) -> str:
        name = names[key].format(l=layer)
        if name not in weights:
            raise UnsupportedError(f"LLaMA weights lack tensor {name!r}")
        return name

    def linear(node_id: str, x: str, key: str, layer: int, out: str) -> str:
        inputs = {"x": x, "weight": weight(key, layer)}
        bias = names.get(key + "_bias", "").format(l=layer)
        if bias in weights:
            inputs["bias"] = bias
        return add("linear", node_id, inputs, out)

    attn = dict(n_heads=cfg.n_heads, n_kv_heads=cfg.n_kv_heads, head_dim=cfg.head_dim)
    rope = dict(head_dim=cfg.head_dim, theta=cfg.rope_theta, style=cfg.rope_style, scale=cfg.rope_scale)
    if cfg.rope_llama3:
        rope["llama3"] = dict(cfg.rope_llama3)
    h = add("embedding", "embed", {"table": weight("embed"), "ids": "tokens"}, "h.0")  # (seq, dim)
    for l in range(cfg.n_layers):
        p = f"l{l}."
        # attention block: h += Wo · attention(rope(Wq x), rope(Wk x), Wv x), x = rmsnorm(h)
        x = add("rms_norm", p + "attn_norm", {"x": h, "weight": weight("attn_norm", l)}, p + "x", eps=cfg.norm_eps)
        q = linear(p + "q_proj", x, "q", l, p + "q")   # (seq, n_heads*head_dim)
        k = linear(p + "k_proj", x, "k", l, p + "k")   # (seq, n_kv_heads*head_dim)
        v = linear(p + "v_proj", x, "v", l, p + "v")   # (seq, n_kv_heads*head_dim)
        q = add("rope", p + "q_rope", {"x": q, "positions": "positions"}, p + "q_rot", **rope)
        k = add("rope", p + "k_rope", {"x": k, "positions": "positions"}, p + "k_rot", **rope)
        window = {"window": cfg.layer_windows[l]} if cfg.layer_windows and cfg.layer_windows[l] else {}
        a = add("attention", p + "attn", {"q": q, "k": k, "v": v}, p + "attn", layer=l, **attn, **window)
        o = linear(p + "o_proj", a, "o", l, p + "o")  # (seq, dim)
        h = add("add", p + "attn_residual", {"a": h, "b": o}, p + "h_attn")
        # feed-forward block: h += W_down (silu(W_gate x) * W_up x), x = rmsnorm(h)
        x = add("rms_norm", p + "ffn_norm", {"x": h, "weight": weight("ffn_norm", l)}, p + "x_ffn", eps=cfg.norm_eps)
        g = linear(p + "gate_proj", x, "gate", l, p + "gate")  # (seq, ffn_dim)
        u = linear(p + "up_proj", x, "up", l, p + "up")        # (seq, ffn_dim)
        g = add("silu", p + "gate_act", {"x": g}, p + "gate_silu")
        m = add("mul", p + "swiglu", {"a": g, "b": u}, p + "swiglu")
        d = linear(p + "down_proj", m, "down", l, p + "down")  # (seq, dim)
        h = add("add", p + "ffn_residual", {"a": h, "b": d}, f"h.{l + 1}")
    h = add("output_rows", "output_rows", {"x": h}, "h.out")  # (out_seq, dim)
    h = add("rms_norm", "output_norm", {"x": h, "weight": weight("output_norm")}, "h.norm", eps=cfg.norm_eps)
    out_w = names["output"] if names["output"] in weights else weight("embed")
    add("linear", "lm_head", {"x": h, "weight": out_w}, "logits")  # (out_seq, vocab)
    inputs = [TensorSpec("tokens", ("seq",), "int32"), TensorSpec("positions", ("seq",), "int32")]
    used = {n for node in nodes for n in node.inputs.values()}
    graph = Graph(inputs, {n: s for n, s in weights.items() if n in used}, nodes, ["logits"])
    graph.validate()
    return graph
