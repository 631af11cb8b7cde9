"""BERT-style encoders (BERT, MiniLM sentence embedders): graph and Hugging Face checkpoints.

Post-LayerNorm transformer over word + position + token-type embeddings with
bidirectional attention; the graph outputs the last hidden states (seq, dim),
which the Encoder task pools into sentence embeddings.
"""

from __future__ import annotations

from dataclasses import dataclass

from volvox.ir.graph import Graph, TensorSpec
from volvox.architectures.builder import GraphBuilder, TransformerShape
from volvox.architectures.gpt2 import gelu_of
from volvox.formats.hf_folder import HFCheckpoint, HFConfig, specs_of
from volvox.formats.imported import Imported, ModelDims


@dataclass(frozen=True)
class BertConfig(TransformerShape):
    """Hyperparameters of a BERT-style encoder."""

    type_vocab_size: int
    gelu: str = "none"  # GELU approximation: "none" (exact erf) or "tanh"

    @property
    def n_kv_heads(self) -> int:
        """Every head has its own keys and values."""
        return self.n_heads


_L = "encoder.layer.{l}."
BERT_NAMES = {
    "word": "embeddings.word_embeddings.weight", "position": "embeddings.position_embeddings.weight",
    "type": "embeddings.token_type_embeddings.weight",
    "emb_ln": "embeddings.LayerNorm.weight", "emb_ln_bias": "embeddings.LayerNorm.bias",
    **{k: _L + f"attention.self.{name}.weight" for k, name in (("q", "query"), ("k", "key"), ("v", "value"))},
    **{f"{k}_bias": _L + f"attention.self.{name}.bias" for k, name in (("q", "query"), ("k", "key"), ("v", "value"))},
    "o": _L + "attention.output.dense.weight", "o_bias": _L + "attention.output.dense.bias",
    "attn_ln": _L + "attention.output.LayerNorm.weight", "attn_ln_bias": _L + "attention.output.LayerNorm.bias",
    "fc": _L + "intermediate.dense.weight", "fc_bias": _L + "intermediate.dense.bias",
    "proj": _L + "output.dense.weight", "proj_bias": _L + "output.dense.bias",
    "ffn_ln": _L + "output.LayerNorm.weight", "ffn_ln_bias": _L + "output.LayerNorm.bias",
}


def build_bert_graph(cfg: BertConfig, names: dict[str, str], weights: dict[str, TensorSpec]) -> Graph:
    """The encoder: inputs tokens/positions/token_types (seq,), output ``hidden`` (seq, dim)."""
    b = GraphBuilder("BERT", names, weights)
    attn = dict(n_heads=cfg.n_heads, n_kv_heads=cfg.n_heads, head_dim=cfg.head_dim, causal=False)
    w = b.add("embedding", "word_embed", {"table": b.weight("word"), "ids": "tokens"}, "word_emb")         # (seq, dim)
    p = b.add("embedding", "pos_embed", {"table": b.weight("position"), "ids": "positions"}, "pos_emb")   # (seq, dim)
    t = b.add("embedding", "type_embed", {"table": b.weight("type"), "ids": "token_types"}, "type_emb")  # (seq, dim)
    h = b.add("add", "embed_sum", {"a": b.add("add", "embed_wp", {"a": w, "b": p}, "emb_wp"), "b": t}, "emb")
    h = b.layer_norm("embed_ln", h, "emb_ln", None, "h.0", cfg.norm_eps)
    for l in range(cfg.n_layers):
        pre = f"l{l}."
        # attention block (post-norm): h = layernorm(h + W_o attention(W_q h, W_k h, W_v h))
        q = b.linear(pre + "query", h, "q", l, pre + "q")  # (seq, dim)
        k = b.linear(pre + "key", h, "k", l, pre + "k")    # (seq, dim)
        v = b.linear(pre + "value", h, "v", l, pre + "v")  # (seq, dim)
        a = b.add("attention", pre + "attn", {"q": q, "k": k, "v": v}, pre + "attn", layer=l, **attn)
        o = b.linear(pre + "attn_out", a, "o", l, pre + "o")  # (seq, dim)
        h = b.layer_norm(pre + "attn_ln", b.add("add", pre + "attn_residual", {"a": o, "b": h}, pre + "h_res"),
                         "attn_ln", l, pre + "h_attn", cfg.norm_eps)
        # feed-forward block (post-norm): h = layernorm(h + W_proj gelu(W_fc h))
        f = b.linear(pre + "fc", h, "fc", l, pre + "fc")  # (seq, ffn_dim)
        f = b.add("gelu", pre + "act", {"x": f}, pre + "fc_gelu", approximate=cfg.gelu)
        d = b.linear(pre + "proj", f, "proj", l, pre + "proj")  # (seq, dim)
        h = b.layer_norm(pre + "ffn_ln", b.add("add", pre + "ffn_residual", {"a": d, "b": h}, pre + "h_ffn_res"),
                         "ffn_ln", l, "hidden" if l == cfg.n_layers - 1 else f"h.{l + 1}", cfg.norm_eps)
    inputs = [TensorSpec(n, ("seq",), "int32") for n in ("tokens", "positions", "token_types")]
    return b.graph(inputs, ["hidden"])


def from_hf(cfg: HFConfig, ckpt: HFCheckpoint) -> Imported:
    """Import a ``bert`` checkpoint (names with or without the ``bert.`` prefix); pooler/heads are ignored."""
    dim, n_heads, n_layers = cfg.get("hidden_size"), cfg.get("num_attention_heads"), cfg.get("num_hidden_layers")
    vocab, context, ffn = cfg.get("vocab_size"), cfg.get("max_position_embeddings"), cfg.get("intermediate_size")
    n_types = cfg.get("type_vocab_size", default=2)
    if n_heads == 0 or dim % n_heads:
        raise cfg.unsupported(f"hidden_size {dim} with num_attention_heads {n_heads}")
    if cfg.data.get("position_embedding_type", "absolute") != "absolute":
        raise cfg.unsupported(f"position_embedding_type {cfg.data['position_embedding_type']!r}")
    gelu = gelu_of(cfg, "hidden_act", "gelu")
    pre = ckpt.prefix(BERT_NAMES["word"], ("", "bert."))
    shapes = {"word": (vocab, dim), "position": (context, dim), "type": (n_types, dim),
              "emb_ln": (dim,), "emb_ln_bias": (dim,)}
    layer_shapes = {"q": (dim, dim), "k": (dim, dim), "v": (dim, dim), "o": (dim, dim), "fc": (ffn, dim),
                    "proj": (dim, ffn), "attn_ln": (dim,), "ffn_ln": (dim,)}
    layer_shapes.update({k + "_bias": (s[0],) for k, s in layer_shapes.items()})
    weights = {BERT_NAMES[k]: ckpt.take(pre + BERT_NAMES[k], s) for k, s in shapes.items()}
    for l in range(n_layers):
        for k, s in layer_shapes.items():
            name = BERT_NAMES[k].format(l=l)
            weights[name] = ckpt.take(pre + name, s)
    config = BertConfig(n_layers=n_layers, dim=dim, n_heads=n_heads, head_dim=dim // n_heads, ffn_dim=ffn,
                        vocab_size=vocab, context_length=context, type_vocab_size=n_types,
                        norm_eps=cfg.get("layer_norm_eps", default=1e-12, kind=float), gelu=gelu)
    graph = build_bert_graph(config, BERT_NAMES, specs_of(weights))
    return Imported(graph, weights, {"task": "embed", "dims": vars(ModelDims.of(config))}, cfg.path)
