"""The LLaMA-family decoder graph (RMSNorm, RoPE, grouped-query attention, SwiGLU).

Shared by the GGUF importer and the Hugging Face importer (hf_llama.py): each
supplies the hyperparameters and the names of its weight tensors. Optional
biases (Qwen2's q/k/v, LLaMA's ``attention_bias``) are wired when the names
table has a ``<key>_bias`` entry whose tensor exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from volvox.ir.graph import Graph, TensorSpec
from volvox.architectures.builder import DECODER_INPUTS, GraphBuilder, TransformerShape


@dataclass(frozen=True)
class LlamaConfig(TransformerShape):
    """Hyperparameters of a LLaMA-style decoder."""

    n_kv_heads: int
    rope_theta: float
    rope_style: str        # "interleaved" (GGUF layout) or "half" (HF layout)
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


def swiglu_ffn(b: GraphBuilder, p: str, l: int, x: str) -> str:
    """The dense feed-forward block: W_down (silu(W_gate x) * W_up x); returns its output (seq, dim)."""
    g = b.linear(p + "gate_proj", x, "gate", l, p + "gate")  # (seq, ffn_dim)
    u = b.linear(p + "up_proj", x, "up", l, p + "up")        # (seq, ffn_dim)
    g = b.add("silu", p + "gate_act", {"x": g}, p + "gate_silu")
    m = b.add("mul", p + "swiglu", {"a": g, "b": u}, p + "swiglu")
    return b.linear(p + "down_proj", m, "down", l, p + "down")  # (seq, dim)


FeedForward = Callable[[GraphBuilder, str, int, str], str]  # (builder, node prefix, layer, x) -> output name


def build_llama_graph(cfg: LlamaConfig, names: dict[str, str], weights: dict[str, TensorSpec],
                      ffn: FeedForward = swiglu_ffn) -> Graph:
    """The decoder graph: inputs tokens/positions (seq,), output logits (out_seq, vocab).

    ``weights`` are the specs of the tensors in the file; a missing output
    projection means the embedding is tied. ``ffn`` builds each layer's feed-forward block
    (architectures/moe.py's for mixture-of-experts models).
    """
    b = GraphBuilder("LLaMA", names, weights)

    attn = dict(n_heads=cfg.n_heads, n_kv_heads=cfg.n_kv_heads, head_dim=cfg.head_dim)
    rope = dict(head_dim=cfg.head_dim, theta=cfg.rope_theta, style=cfg.rope_style, scale=cfg.rope_scale)
    if cfg.rope_llama3:
        rope["llama3"] = dict(cfg.rope_llama3)
    h = b.add("embedding", "embed", {"table": b.weight("embed"), "ids": "tokens"}, "h.0")  # (seq, dim)
    for l in range(cfg.n_layers):
        p = f"l{l}."
        # attention block: h += Wo · attention(rope(Wq x), rope(Wk x), Wv x), x = rmsnorm(h)
        x = b.rms_norm(p + "attn_norm", h, "attn_norm", l, p + "x", cfg.norm_eps)
        q = b.linear(p + "q_proj", x, "q", l, p + "q")   # (seq, n_heads*head_dim)
        k = b.linear(p + "k_proj", x, "k", l, p + "k")   # (seq, n_kv_heads*head_dim)
        v = b.linear(p + "v_proj", x, "v", l, p + "v")   # (seq, n_kv_heads*head_dim)
        q = b.add("rope", p + "q_rope", {"x": q, "positions": "positions"}, p + "q_rot", **rope)
        k = b.add("rope", p + "k_rope", {"x": k, "positions": "positions"}, p + "k_rot", **rope)
        h = b.attention_residual(p, l, h, q, k, v, attn, cfg.layer_windows[l] if cfg.layer_windows else 0)
        # feed-forward block: h += ffn(x), x = rmsnorm(h)
        x = b.rms_norm(p + "ffn_norm", h, "ffn_norm", l, p + "x_ffn", cfg.norm_eps)
        d = ffn(b, p, l, x)  # (seq, dim)
        h = b.add("add", p + "ffn_residual", {"a": h, "b": d}, f"h.{l + 1}")
    h = b.add("output_rows", "output_rows", {"x": h}, "h.out")  # (out_seq, dim)
    h = b.rms_norm("output_norm", h, "output_norm", None, "h.norm", cfg.norm_eps)
    b.linear("lm_head", h, "output" if b.has("output") else "embed", None, "logits")  # (out_seq, vocab)
    return b.graph(list(DECODER_INPUTS), ["logits"])
