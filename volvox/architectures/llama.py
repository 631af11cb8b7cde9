"""The LLaMA-family decoder graph (RMSNorm, RoPE, grouped-query attention, gated feed-forward).

Shared by the GGUF importer and the Hugging Face importer (hf_llama.py): each
supplies the hyperparameters and the names of its weight tensors. Optional
biases (Qwen2's q/k/v, LLaMA's ``attention_bias``) are wired when the names
table has a ``<key>_bias`` entry whose tensor exists.

The newer dense families are this graph with a few switches (LlamaConfig):
Qwen3 normalises each query / key head (``qk_norm``); Gemma 2 / 3 scale the
embeddings (``embed_scale``), use GeGLU (``ffn_act``), norm the attention and
feed-forward outputs too (``post_norms``), soft-cap attention scores and
logits, and alternate sliding-window and global layers (Gemma 3 with its own
RoPE base on the local ones); Phi-3 stores Q/K/V and gate/up fused
(``fused_qkv``, ``fused_gate_up``), sliced apart in the graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

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
    rope_extra: dict | None = None    # other rope params: yarn, longrope, freq_factors, mscale (ops.attention)
    rope_dim: int = 0                 # leading dims of each head that RoPE rotates (Phi-4-mini: 3/4); 0 = all
    layer_windows: tuple = ()         # per-layer sliding window (0 = full causal); () = all full
    local_rope_theta: float = 0.0     # RoPE base of the sliding-window layers (Gemma 3); 0 = rope_theta
    qk_norm: bool = False             # RMSNorm over each query / key head before RoPE (Qwen3, Gemma 3)
    qk_norm_full: bool = False        # RMSNorm over the whole query / key projection before RoPE (OLMoE)
    post_norms: bool = False          # RMSNorm of the attention and FFN outputs before each residual (Gemma)
    embed_scale: float = 0.0          # embeddings multiplied by this (Gemma: sqrt(dim)); 0 = not scaled
    ffn_act: str = "silu"             # gate activation: "silu" (SwiGLU), "gelu_tanh" (GeGLU) or
    #                                   "gelu_f16_table" (GeGLU with ggml's fp16 table, for GGUF files)
    attn_scale: float = 0.0           # score scale; 0 = head_dim ** -0.5
    attn_softcap: float = 0.0         # scores -> cap * tanh(scores / cap) (Gemma 2); 0 = none
    final_softcap: float = 0.0        # logits -> cap * tanh(logits / cap) (Gemma 2); 0 = none
    fused_qkv: bool = False           # one "qkv" weight (q rows, then k, then v) (Phi-3)
    fused_gate_up: bool = False       # one "gate_up" weight (gate rows, then up) (Phi-3)


# Weight names in GGUF files; "{l}" is the layer index.
GGUF_NAMES = {
    "embed": "token_embd.weight",
    "attn_norm": "blk.{l}.attn_norm.weight",
    "q": "blk.{l}.attn_q.weight",
    "k": "blk.{l}.attn_k.weight",
    "v": "blk.{l}.attn_v.weight",
    **{f"{k}_bias": f"blk.{{l}}.attn_{k}.bias" for k in "qkv"},
    "qkv": "blk.{l}.attn_qkv.weight",
    "q_norm": "blk.{l}.attn_q_norm.weight",
    "k_norm": "blk.{l}.attn_k_norm.weight",
    "o": "blk.{l}.attn_output.weight",
    "post_attn_norm": "blk.{l}.post_attention_norm.weight",
    "ffn_norm": "blk.{l}.ffn_norm.weight",
    "gate": "blk.{l}.ffn_gate.weight",
    "up": "blk.{l}.ffn_up.weight",
    "gate_up": "blk.{l}.ffn_up.weight",   # Phi-3 keeps gate and up fused under ffn_up
    "down": "blk.{l}.ffn_down.weight",
    "post_ffn_norm": "blk.{l}.post_ffw_norm.weight",
    "output_norm": "output_norm.weight",
    "output": "output.weight",
}

EMBED_SCALE = "embed_scale"  # the constant (1,) tensor that scales the embeddings (constants())


def constants(cfg: LlamaConfig) -> dict[str, np.ndarray]:
    """The constant tensors the graph of ``cfg`` reads besides the file's weights."""
    return {EMBED_SCALE: np.array([cfg.embed_scale], np.float32)} if cfg.embed_scale else {}


def _rope_params(cfg: LlamaConfig, layer: int) -> dict:
    """The rope node params of ``layer``: Gemma 3's sliding layers take their own base, unscaled."""
    partial = {"rope_dim": cfg.rope_dim} if cfg.rope_dim and cfg.rope_dim != cfg.head_dim else {}
    if cfg.local_rope_theta and cfg.layer_windows and cfg.layer_windows[layer]:
        return dict(head_dim=cfg.head_dim, theta=cfg.local_rope_theta, style=cfg.rope_style, **partial)
    rope = dict(head_dim=cfg.head_dim, theta=cfg.rope_theta, style=cfg.rope_style, scale=cfg.rope_scale,
                **partial, **(cfg.rope_extra or {}))
    if cfg.rope_llama3:
        rope["llama3"] = dict(cfg.rope_llama3)
    return rope


def _columns(b: GraphBuilder, node_id: str, x: str, start: int, end: int, out: str) -> str:
    """Columns start..end of x (seq, n): one part of a fused projection's output."""
    return b.add("slice", node_id, {"x": x}, out, axes=[1], starts=[start], ends=[end])


def _head_norm(b: GraphBuilder, cfg: LlamaConfig, p: str, x: str, key: str, layer: int, out: str) -> str:
    """RMSNorm of each head_dim-wide head of x (seq, heads*head_dim) with weight[key] (head_dim,)."""
    heads = b.add("reshape", p + key + "_heads", {"x": x}, out + "_heads", shape=[0, -1, cfg.head_dim])  # (seq, heads, head_dim)
    normed = b.rms_norm(p + key, heads, key, layer, out + "_normed", cfg.norm_eps)  # (seq, heads, head_dim)
    return b.add("reshape", p + key + "_rows", {"x": normed}, out, shape=[0, -1])  # (seq, heads*head_dim)


def gated_ffn(b: GraphBuilder, cfg: LlamaConfig, p: str, l: int, x: str) -> str:
    """The dense feed-forward block: W_down (act(W_gate x) * W_up x) (+ Gemma's post norm); returns its
    output (seq, dim)."""
    if cfg.fused_gate_up:
        gu = b.linear(p + "gate_up_proj", x, "gate_up", l, p + "gate_up")  # (seq, 2*ffn_dim)
        g = _columns(b, p + "gate_part", gu, 0, cfg.ffn_dim, p + "gate")
        u = _columns(b, p + "up_part", gu, cfg.ffn_dim, 2 * cfg.ffn_dim, p + "up")
    else:
        g = b.linear(p + "gate_proj", x, "gate", l, p + "gate")  # (seq, ffn_dim)
        u = b.linear(p + "up_proj", x, "up", l, p + "up")        # (seq, ffn_dim)
    if cfg.ffn_act == "gelu_tanh":
        g = b.add("gelu", p + "gate_act", {"x": g}, p + "gate_gelu", approximate="tanh")
    elif cfg.ffn_act == "gelu_f16_table":
        g = b.add("gelu_f16_table", p + "gate_act", {"x": g}, p + "gate_gelu")
    else:
        g = b.add("silu", p + "gate_act", {"x": g}, p + "gate_silu")
    m = b.add("mul", p + "swiglu", {"a": g, "b": u}, p + "swiglu")
    d = b.linear(p + "down_proj", m, "down", l, p + "down")  # (seq, dim)
    if cfg.post_norms:
        d = b.rms_norm(p + "post_ffn_norm", d, "post_ffn_norm", l, p + "down_norm", cfg.norm_eps)
    return d


# a layer's feed-forward block: (builder, config, node prefix, layer, x) -> its output's name
FeedForward = Callable[[GraphBuilder, LlamaConfig, str, int, str], str]


def build_llama_graph(cfg: LlamaConfig, names: dict[str, str], weights: dict[str, TensorSpec],
                      ffn: FeedForward | None = None) -> Graph:
    """The decoder graph: inputs tokens/positions (seq,), output logits (out_seq, vocab).

    ``weights`` are the specs of the tensors in the file and of ``constants(cfg)``; a missing
    output projection means the embedding is tied. ``ffn`` builds each layer's feed-forward block
    (architectures/moe.py's for mixture-of-experts models); None: gated_ffn.
    """
    b = GraphBuilder("LLaMA", names, weights)
    q_cols, kv_cols = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    attn = dict(n_heads=cfg.n_heads, n_kv_heads=cfg.n_kv_heads, head_dim=cfg.head_dim)
    if cfg.attn_scale:
        attn["scale"] = cfg.attn_scale
    if cfg.attn_softcap:
        attn["softcap"] = cfg.attn_softcap
    h = b.add("embedding", "embed", {"table": b.weight("embed"), "ids": "tokens"}, "h.0")  # (seq, dim)
    if cfg.embed_scale:
        h = b.add("mul", "embed_scale", {"a": h, "b": EMBED_SCALE}, "h.0.scaled")  # (seq, dim)
    for l in range(cfg.n_layers):
        p = f"l{l}."
        # attention block: h += Wo · attention(rope(Wq x), rope(Wk x), Wv x), x = rmsnorm(h)
        x = b.rms_norm(p + "attn_norm", h, "attn_norm", l, p + "x", cfg.norm_eps)
        if cfg.fused_qkv:
            qkv = b.linear(p + "qkv_proj", x, "qkv", l, p + "qkv")  # (seq, q_cols + 2*kv_cols)
            q = _columns(b, p + "q_part", qkv, 0, q_cols, p + "q")
            k = _columns(b, p + "k_part", qkv, q_cols, q_cols + kv_cols, p + "k")
            v = _columns(b, p + "v_part", qkv, q_cols + kv_cols, q_cols + 2 * kv_cols, p + "v")
        else:
            q = b.linear(p + "q_proj", x, "q", l, p + "q")   # (seq, n_heads*head_dim)
            k = b.linear(p + "k_proj", x, "k", l, p + "k")   # (seq, n_kv_heads*head_dim)
            v = b.linear(p + "v_proj", x, "v", l, p + "v")   # (seq, n_kv_heads*head_dim)
        if cfg.qk_norm:
            q = _head_norm(b, cfg, p, q, "q_norm", l, p + "q_n")
            k = _head_norm(b, cfg, p, k, "k_norm", l, p + "k_n")
        elif cfg.qk_norm_full:
            q = b.rms_norm(p + "q_norm", q, "q_norm", l, p + "q_n", cfg.norm_eps)  # (seq, n_heads*head_dim)
            k = b.rms_norm(p + "k_norm", k, "k_norm", l, p + "k_n", cfg.norm_eps)  # (seq, n_kv_heads*head_dim)
        rope = _rope_params(cfg, l)
        q = b.add("rope", p + "q_rope", {"x": q, "positions": "positions"}, p + "q_rot", **rope)
        k = b.add("rope", p + "k_rope", {"x": k, "positions": "positions"}, p + "k_rot", **rope)
        window = cfg.layer_windows[l] if cfg.layer_windows else 0
        if cfg.post_norms:
            a = b.add("attention", p + "attn", {"q": q, "k": k, "v": v}, p + "attn", layer=l, **attn,
                      **({"window": window} if window else {}))
            o = b.linear(p + "o_proj", a, "o", l, p + "o")  # (seq, dim)
            o = b.rms_norm(p + "post_attn_norm", o, "post_attn_norm", l, p + "o_norm", cfg.norm_eps)
            h = b.add("add", p + "attn_residual", {"a": h, "b": o}, p + "h_attn")
        else:
            h = b.attention_residual(p, l, h, q, k, v, attn, window)
        # feed-forward block: h += ffn(x), x = rmsnorm(h)
        x = b.rms_norm(p + "ffn_norm", h, "ffn_norm", l, p + "x_ffn", cfg.norm_eps)
        d = (ffn or gated_ffn)(b, cfg, p, l, x)  # (seq, dim)
        h = b.add("add", p + "ffn_residual", {"a": h, "b": d}, f"h.{l + 1}")
    h = b.add("output_rows", "output_rows", {"x": h}, "h.out")  # (out_seq, dim)
    h = b.rms_norm("output_norm", h, "output_norm", None, "h.norm", cfg.norm_eps)
    logits = "logits.raw" if cfg.final_softcap else "logits"
    b.linear("lm_head", h, "output" if b.has("output") else "embed", None, logits)  # (out_seq, vocab)
    if cfg.final_softcap:
        b.add("softcap", "logit_softcap", {"x": logits}, "logits", cap=cfg.final_softcap)
    return b.graph(list(DECODER_INPUTS), ["logits"])
