"""The GPT-2-style decoder graph (learned positions, LayerNorm, GELU MLP) and GPT-2 checkpoints.

``build_gpt_graph`` serves GPT-2 and GPT-Neo (gpt_neo.py): each supplies the
hyperparameters and the names of its weight tensors; a bias is wired when the
names table has a ``<key>_bias`` entry whose tensor exists. GPT-2 stores its
projections as Conv1D (``[in, out]``) with Q, K and V fused in ``c_attn``: they
are transposed and split once at import into ``[out, in]`` matrices.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from volvox.ir.graph import Graph, TensorSpec
from volvox.architectures.builder import DECODER_INPUTS, GraphBuilder, TransformerShape
from volvox.formats.hf_folder import HFCheckpoint, HFConfig, specs_of
from volvox.formats.imported import Imported, ModelDims


@dataclass(frozen=True)
class GPTConfig(TransformerShape):
    """Hyperparameters of a GPT-2-style decoder."""

    gelu: str = "tanh"            # GELU approximation: "tanh" (gelu_new) or "none" (exact erf)
    attn_scale: float = 0.0       # multiplier of q·k; 0 = 1/sqrt(head_dim)
    layer_windows: tuple = ()     # per-layer local attention window (0 = global); () = all global

    @property
    def n_kv_heads(self) -> int:
        """Every head has its own keys and values."""
        return self.n_heads


def build_gpt_graph(cfg: GPTConfig, names: dict[str, str], weights: dict[str, TensorSpec]) -> Graph:
    """The decoder graph: inputs tokens/positions (seq,), output logits (out_seq, vocab).

    A missing output projection means the embedding is tied.
    """
    b = GraphBuilder("GPT", names, weights)

    attn = dict(n_heads=cfg.n_heads, n_kv_heads=cfg.n_heads, head_dim=cfg.head_dim)
    if cfg.attn_scale:
        attn["scale"] = cfg.attn_scale
    tok = b.add("embedding", "embed", {"table": b.weight("wte"), "ids": "tokens"}, "tok_emb")           # (seq, dim)
    pos = b.add("embedding", "pos_embed", {"table": b.weight("wpe"), "ids": "positions"}, "pos_emb")   # (seq, dim)
    h = b.add("add", "embed_sum", {"a": tok, "b": pos}, "h.0")
    for l in range(cfg.n_layers):
        p = f"l{l}."
        # attention block: h += W_o attention(W_q x, W_k x, W_v x), x = layernorm(h)
        x = b.layer_norm(p + "ln_1", h, "ln_1", l, p + "x", cfg.norm_eps)
        q = b.linear(p + "q_proj", x, "q", l, p + "q")  # (seq, dim)
        k = b.linear(p + "k_proj", x, "k", l, p + "k")  # (seq, dim)
        v = b.linear(p + "v_proj", x, "v", l, p + "v")  # (seq, dim)
        h = b.attention_residual(p, l, h, q, k, v, attn, cfg.layer_windows[l] if cfg.layer_windows else 0)
        # MLP block: h += W_proj gelu(W_fc x), x = layernorm(h)
        x = b.layer_norm(p + "ln_2", h, "ln_2", l, p + "x_mlp", cfg.norm_eps)
        f = b.linear(p + "fc", x, "fc", l, p + "fc")  # (seq, ffn_dim)
        f = b.add("gelu", p + "act", {"x": f}, p + "fc_gelu", approximate=cfg.gelu)
        d = b.linear(p + "proj", f, "proj", l, p + "proj")  # (seq, dim)
        h = b.add("add", p + "mlp_residual", {"a": h, "b": d}, f"h.{l + 1}")
    h = b.add("output_rows", "output_rows", {"x": h}, "h.out")  # (out_seq, dim)
    h = b.layer_norm("ln_f", h, "ln_f", None, "h.norm", cfg.norm_eps)
    b.add("linear", "lm_head", {"x": h, "weight": b.weight("output" if b.has("output") else "wte")}, "logits")  # (out_seq, vocab)
    return b.graph(list(DECODER_INPUTS), ["logits"])


def gelu_of(cfg: HFConfig, key: str = "activation_function", default: str = "gelu_new") -> str:
    """The gelu op's ``approximate`` param for the activation a config names under ``key``."""
    act = cfg.data.get(key, default)
    if act in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
        return "tanh"
    if act == "gelu":
        return "none"
    raise cfg.unsupported(f"{key} {act!r}")


# Graph weight names: GPT-2's transposed / split tensors get names of their own.
_H = "h.{l}."
GPT2_NAMES = {
    "wte": "wte.weight", "wpe": "wpe.weight",
    "ln_1": _H + "ln_1.weight", "ln_1_bias": _H + "ln_1.bias",
    **{k: _H + f"attn.{k}_proj.weight" for k in "qkvo"},
    **{f"{k}_bias": _H + f"attn.{k}_proj.bias" for k in "qkvo"},
    "ln_2": _H + "ln_2.weight", "ln_2_bias": _H + "ln_2.bias",
    "fc": _H + "mlp.fc.weight", "fc_bias": _H + "mlp.fc.bias",
    "proj": _H + "mlp.proj.weight", "proj_bias": _H + "mlp.proj.bias",
    "ln_f": "ln_f.weight", "ln_f_bias": "ln_f.bias",
    "output": "lm_head.weight",
}


def from_hf(cfg: HFConfig, ckpt: HFCheckpoint) -> Imported:
    """Import a ``gpt2`` checkpoint (names with or without the ``transformer.`` prefix)."""
    dim, n_heads, n_layers = cfg.get("n_embd", "hidden_size"), cfg.get("n_head"), cfg.get("n_layer")
    vocab, context = cfg.get("vocab_size"), cfg.get("n_positions", "n_ctx")
    ffn = cfg.get("n_inner", default=4 * dim)
    if n_heads == 0 or dim % n_heads:
        raise cfg.unsupported(f"n_embd {dim} with n_head {n_heads}")
    if cfg.data.get("scale_attn_by_inverse_layer_idx"):
        raise cfg.unsupported("scale_attn_by_inverse_layer_idx")
    pre = ckpt.prefix("wte.weight", ("transformer.", ""))
    names = {k: pre + v if k != "output" else v for k, v in GPT2_NAMES.items()}

    def take(name: str, shape: tuple) -> np.ndarray:
        return ckpt.take(pre + name, shape)

    def conv1d(name: str, n_in: int, n_out: int) -> np.ndarray:
        return np.ascontiguousarray(take(name, (n_in, n_out)).T)  # (n_out, n_in)

    weights = {names["wte"]: take("wte.weight", (vocab, dim)), names["wpe"]: take("wpe.weight", (context, dim)),
               names["ln_f"]: take("ln_f.weight", (dim,)), names["ln_f_bias"]: take("ln_f.bias", (dim,))}
    if not cfg.data.get("tie_word_embeddings", True):
        weights["lm_head.weight"] = ckpt.take("lm_head.weight", (vocab, dim))
    for l in range(n_layers):
        h, n = f"h.{l}.", {k: v.format(l=l) for k, v in names.items()}
        for ln in ("ln_1", "ln_2"):
            weights[n[ln]] = take(h + ln + ".weight", (dim,))
            weights[n[ln + "_bias"]] = take(h + ln + ".bias", (dim,))
        qkv, qkv_bias = conv1d(h + "attn.c_attn.weight", dim, 3 * dim), take(h + "attn.c_attn.bias", (3 * dim,))
        for i, k in enumerate("qkv"):
            weights[n[k]] = qkv[i * dim:(i + 1) * dim]                     # (dim, dim), contiguous rows
            weights[n[k + "_bias"]] = qkv_bias[i * dim:(i + 1) * dim]
        weights[n["o"]] = conv1d(h + "attn.c_proj.weight", dim, dim)
        weights[n["o_bias"]] = take(h + "attn.c_proj.bias", (dim,))
        weights[n["fc"]] = conv1d(h + "mlp.c_fc.weight", dim, ffn)
        weights[n["fc_bias"]] = take(h + "mlp.c_fc.bias", (ffn,))
        weights[n["proj"]] = conv1d(h + "mlp.c_proj.weight", ffn, dim)
        weights[n["proj_bias"]] = take(h + "mlp.c_proj.bias", (dim,))
    config = GPTConfig(n_layers=n_layers, dim=dim, n_heads=n_heads, head_dim=dim // n_heads, ffn_dim=ffn,
                       vocab_size=vocab, context_length=context,
                       norm_eps=cfg.get("layer_norm_epsilon", default=1e-5, kind=float), gelu=gelu_of(cfg),
                       attn_scale=0.0 if cfg.data.get("scale_attn_weights", True) else 1.0)
    graph = build_gpt_graph(config, names, specs_of(weights))
    return Imported(graph, weights, {"task": "generate", "dims": vars(ModelDims.of(config))}, cfg.path)
