"""T5 (v1.0, v1.1, flan-t5): the encoder and decoder graphs, and Hugging Face checkpoints.

Pre-RMSNorm transformer without biases or absolute positions: self-attention adds T5's relative
position bias (ops/relative_attention.py; the first layer's bias table serves every layer) and is
not scaled by 1/sqrt(head_dim); the decoder adds unscaled cross-attention over the encoded input
(ops/cross_attention.py; the encoder graph projects its keys and values once per input). The
feed-forward block is ReLU (v1.0) or gated GELU (v1.1 / flan: gelu_new(x Wi0) * (x Wi1)). T5 v1.0
scales the decoder's last hidden state by d_model^-0.5 before the logits (configs say so by
``scale_decoder_outputs``, or, as older transformers wrote them, by ``tie_word_embeddings``);
the scale is folded into the final norm's weight at import.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from volvox.architectures.builder import DECODER_INPUTS, GraphBuilder, TransformerShape
from volvox.formats.hf_folder import HFCheckpoint, HFConfig, specs_of
from volvox.formats.imported import Imported, ModelDims
from volvox.ir.graph import Graph, TensorSpec

_ACTIVATIONS = {"relu": ("relu", {}), "gelu": ("gelu", {"approximate": "none"}),
                "gelu_new": ("gelu", {"approximate": "tanh"}), "silu": ("silu", {})}


@dataclass(frozen=True)
class T5Config(TransformerShape):
    """Hyperparameters of a T5 model; TransformerShape's fields describe the decoder (dim: d_model,
    head_dim: d_kv, whose product with n_heads may differ from d_model)."""

    n_encoder_layers: int
    num_buckets: int
    max_distance: int
    activation: str = "relu"   # a key of _ACTIVATIONS
    gated: bool = False
    lm_head: bool = False       # logits from a separate lm_head matrix, else from the shared embedding
    scale_output: bool = True   # the decoder output times d_model^-0.5 before the logits (T5 v1.0)

    @property
    def n_kv_heads(self) -> int:
        """Every head has its own keys and values."""
        return self.n_heads


_E, _D = "encoder.block.{l}.layer.", "decoder.block.{l}.layer."
T5_NAMES = {
    "shared": "shared.weight", "lm_head": "lm_head.weight",
    "enc_bias_table": "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
    "dec_bias_table": "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
    "enc_final_ln": "encoder.final_layer_norm.weight", "dec_final_ln": "decoder.final_layer_norm.weight",
    **{f"enc_{k}": _E + f"0.SelfAttention.{k}.weight" for k in "qkvo"},
    "enc_attn_ln": _E + "0.layer_norm.weight", "enc_ffn_ln": _E + "1.layer_norm.weight",
    **{f"enc_{k}": _E + f"1.DenseReluDense.{k}.weight" for k in ("wi", "wi_0", "wi_1", "wo")},
    **{f"dec_{k}": _D + f"0.SelfAttention.{k}.weight" for k in "qkvo"},
    **{f"dec_x{k}": _D + f"1.EncDecAttention.{k}.weight" for k in "qkvo"},
    "dec_attn_ln": _D + "0.layer_norm.weight", "dec_cross_ln": _D + "1.layer_norm.weight",
    "dec_ffn_ln": _D + "2.layer_norm.weight",
    **{f"dec_{k}": _D + f"2.DenseReluDense.{k}.weight" for k in ("wi", "wi_0", "wi_1", "wo")},
}


def _ffn(b: GraphBuilder, p: str, l: int, h: str, side: str, cfg: T5Config, out: str) -> str:
    """h + Wo act(Wi x) (gated: act(Wi0 x) * (Wi1 x)), x = rmsnorm(h) -> ``out`` (seq, dim)."""
    x = b.rms_norm(p + "ffn_ln", h, side + "ffn_ln", l, p + "x_ffn", cfg.norm_eps)
    op, params = _ACTIVATIONS[cfg.activation]
    if cfg.gated:
        g = b.linear(p + "wi_0", x, side + "wi_0", l, p + "wi_0")  # (seq, ffn_dim)
        u = b.linear(p + "wi_1", x, side + "wi_1", l, p + "wi_1")  # (seq, ffn_dim)
        g = b.add(op, p + "act", {"x": g}, p + "wi_act", **params)
        f = b.add("mul", p + "gate", {"a": g, "b": u}, p + "gated")
    else:
        f = b.add(op, p + "act", {"x": b.linear(p + "wi", x, side + "wi", l, p + "wi")}, p + "wi_act", **params)
    d = b.linear(p + "wo", f, side + "wo", l, p + "wo")  # (seq, dim)
    return b.add("add", p + "ffn_residual", {"a": h, "b": d}, out)


def _self_attention(b: GraphBuilder, p: str, l: int, h: str, side: str, cfg: T5Config, causal: bool) -> str:
    """h + Wo relative_attention(Wq x, Wk x, Wv x), x = rmsnorm(h) (seq, dim)."""
    x = b.rms_norm(p + "attn_ln", h, side + "attn_ln", l, p + "x", cfg.norm_eps)
    q, k, v = (b.linear(p + f"{n}_proj", x, side + n, l, p + n) for n in "qkv")  # (seq, n_heads * head_dim) each
    a = b.add("relative_attention", p + "attn", {"q": q, "k": k, "v": v, "table": b.weight(side + "bias_table")},
              p + "attn", layer=l, n_heads=cfg.n_heads, head_dim=cfg.head_dim, num_buckets=cfg.num_buckets,
              max_distance=cfg.max_distance, bidirectional=not causal, causal=causal)
    o = b.linear(p + "o_proj", a, side + "o", l, p + "o")  # (seq, dim)
    return b.add("add", p + "attn_residual", {"a": h, "b": o}, p + "h_attn")


def build_encoder_graph(cfg: T5Config, names: dict[str, str], weights: dict[str, TensorSpec]) -> Graph:
    """Input ``tokens`` (seq,); outputs ``hidden`` (seq, dim) and every decoder layer's
    cross-attention ``cross_k.{l}`` / ``cross_v.{l}`` (seq, n_heads * head_dim)."""
    b = GraphBuilder("T5 encoder", names, weights)
    h = b.add("embedding", "embed", {"table": b.weight("shared"), "ids": "tokens"}, "enc_h.0")  # (seq, dim)
    for l in range(cfg.n_encoder_layers):
        p = f"enc{l}."
        h = _self_attention(b, p, l, h, "enc_", cfg, causal=False)
        h = _ffn(b, p, l, h, "enc_", cfg, f"enc_h.{l + 1}")
    h = b.rms_norm("enc_final_ln", h, "enc_final_ln", None, "hidden", cfg.norm_eps)
    outputs = ["hidden"]
    for l in range(cfg.n_layers):
        outputs.append(b.linear(f"cross{l}.k_proj", h, "dec_xk", l, f"cross_k.{l}"))
        outputs.append(b.linear(f"cross{l}.v_proj", h, "dec_xv", l, f"cross_v.{l}"))
    return b.graph([TensorSpec("tokens", ("seq",), "int32")], outputs)


def build_decoder_graph(cfg: T5Config, names: dict[str, str], weights: dict[str, TensorSpec]) -> Graph:
    """Inputs tokens/positions (seq,); output logits (out_seq, vocab), run in a SourceContext."""
    b = GraphBuilder("T5 decoder", names, weights)
    h = b.add("embedding", "embed", {"table": b.weight("shared"), "ids": "tokens"}, "h.0")  # (seq, dim)
    for l in range(cfg.n_layers):
        p = f"l{l}."
        h = _self_attention(b, p, l, h, "dec_", cfg, causal=True)
        x = b.rms_norm(p + "cross_ln", h, "dec_cross_ln", l, p + "x_cross", cfg.norm_eps)
        q = b.linear(p + "cross_q_proj", x, "dec_xq", l, p + "xq")  # (seq, n_heads * head_dim)
        a = b.add("cross_attention", p + "cross_attn", {"q": q}, p + "cross_attn", layer=l, n_heads=cfg.n_heads,
                  head_dim=cfg.head_dim, scale=1.0)
        o = b.linear(p + "cross_o_proj", a, "dec_xo", l, p + "xo")  # (seq, dim)
        h = b.add("add", p + "cross_residual", {"a": h, "b": o}, p + "h_cross")
        h = _ffn(b, p, l, h, "dec_", cfg, f"h.{l + 1}")
    h = b.add("output_rows", "output_rows", {"x": h}, "h.out")  # (out_seq, dim)
    h = b.rms_norm("dec_final_ln", h, "dec_final_ln", None, "h.norm", cfg.norm_eps)  # weight * d^-0.5 (v1.0)
    b.add("linear", "lm_head", {"x": h, "weight": b.weight("lm_head" if cfg.lm_head else "shared")}, "logits")
    return b.graph(list(DECODER_INPUTS), ["logits"])


def from_hf(cfg: HFConfig, ckpt: HFCheckpoint) -> Imported:
    """Import a ``t5`` checkpoint (T5ForConditionalGeneration: T5 v1.0, v1.1, flan-t5)."""
    d, d_kv, n_heads = cfg.get("d_model"), cfg.get("d_kv"), cfg.get("num_heads")
    n_enc = cfg.get("num_layers")
    n_dec = cfg.get("num_decoder_layers", default=n_enc)
    vocab, ffn = cfg.get("vocab_size"), cfg.get("d_ff")
    proj = cfg.data.get("feed_forward_proj", "relu")
    parts = proj.split("-") if isinstance(proj, str) else []
    gated = len(parts) == 2 and parts[0] == "gated"
    act = "gelu_new" if proj == "gated-gelu" else (parts[-1] if parts else None)
    if act not in _ACTIVATIONS or len(parts) not in (1, 2) or (len(parts) == 2 and not gated):
        raise cfg.unsupported(f"feed_forward_proj {proj!r}")
    if n_heads == 0 or d_kv == 0:
        raise cfg.unsupported(f"num_heads {n_heads} with d_kv {d_kv}")
    scale_output = bool(cfg.data.get("scale_decoder_outputs", cfg.data.get("tie_word_embeddings", True)))
    lm_head = ckpt.has(T5_NAMES["lm_head"])
    config = T5Config(
        n_layers=n_dec, dim=d, n_heads=n_heads, head_dim=d_kv, ffn_dim=ffn, vocab_size=vocab,
        context_length=cfg.get("n_positions", default=512), norm_eps=cfg.get("layer_norm_epsilon", default=1e-6,
                                                                               kind=float),
        n_encoder_layers=n_enc, num_buckets=cfg.get("relative_attention_num_buckets", default=32),
        max_distance=cfg.get("relative_attention_max_distance", default=128), activation=act, gated=gated,
        lm_head=lm_head, scale_output=scale_output)
    inner = n_heads * d_kv
    shapes = {"shared": (vocab, d), "enc_bias_table": (config.num_buckets, n_heads),
              "dec_bias_table": (config.num_buckets, n_heads), "enc_final_ln": (d,), "dec_final_ln": (d,)}
    if lm_head:
        shapes["lm_head"] = (vocab, d)
    ffn_keys = {"wi_0": (ffn, d), "wi_1": (ffn, d)} if gated else {"wi": (ffn, d)}
    per_layer = {"enc_": {"q": (inner, d), "k": (inner, d), "v": (inner, d), "o": (d, inner), "attn_ln": (d,),
                          "ffn_ln": (d,), "wo": (d, ffn), **ffn_keys},
                 "dec_": {"q": (inner, d), "k": (inner, d), "v": (inner, d), "o": (d, inner), "attn_ln": (d,),
                          "xq": (inner, d), "xk": (inner, d), "xv": (inner, d), "xo": (d, inner),
                          "cross_ln": (d,), "ffn_ln": (d,), "wo": (d, ffn), **ffn_keys}}
    weights = {T5_NAMES[k]: ckpt.take(T5_NAMES[k], s) for k, s in shapes.items()}
    for side, n_layers in (("enc_", n_enc), ("dec_", n_dec)):
        for l in range(n_layers):
            for key, shape in per_layer[side].items():
                name = T5_NAMES[side + key].format(l=l)
                weights[name] = ckpt.take(name, shape)
    if scale_output:  # the logits read the final norm's output times d_model^-0.5: folded into its weight
        final = T5_NAMES["dec_final_ln"]
        weights[final] = (weights[final].astype(np.float64) * d ** -0.5).astype(np.float32)
    specs = specs_of(weights)
    encoder = Imported(build_encoder_graph(config, T5_NAMES, specs), weights, {"task": "encode"}, cfg.path)
    start = cfg.get("decoder_start_token_id", default=0)
    eos = cfg.get("eos_token_id", default=1)
    metadata = {"task": "seq2seq", "dims": vars(ModelDims.of(config)), "encoder": encoder,
                "seq2seq": {"source": "text", "cross_heads": n_heads, "cross_head_dim": d_kv,
                            "decoder_start": [start], "eos": [eos]}}
    return Imported(build_decoder_graph(config, T5_NAMES, specs), weights, metadata, cfg.path)
