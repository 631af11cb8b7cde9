"""BART (summarisation, translation): the encoder and decoder graphs, and Hugging Face checkpoints.

Post-LayerNorm transformer with learned positions: token embeddings (times sqrt(d_model) when
``scale_embedding``) plus position embeddings, a LayerNorm, then per layer attention, residual,
LayerNorm and a GELU MLP, residual, LayerNorm. The decoder adds cross-attention over the encoded
input (ops/cross_attention.py; the encoder graph projects its keys and values once per input)
between its self-attention and its MLP; the logits reuse the shared embedding and add
``final_logits_bias``. BART's position tables start at row 2 (its learned positions are offset by
2): the import drops those two rows, so position p reads row p.

Marian (MarianMT translation models) is the same graph with fixed sinusoidal positions (computed at
import, not offset), no embedding LayerNorm and (in the opus-mt models) a SiLU ("swish") MLP; its tokenizer is the folder's
SentencePiece models and vocab.json (tokenizers/marian.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from volvox.architectures.builder import DECODER_INPUTS, GraphBuilder, TransformerShape
from volvox.architectures.gpt2 import gelu_of
from volvox.formats.hf_folder import HFCheckpoint, HFConfig, specs_of
from volvox.formats.imported import Imported, ModelDims
from volvox.ir.graph import Graph, TensorSpec

POSITION_OFFSET = 2


@dataclass(frozen=True)
class BartConfig(TransformerShape):
    """Hyperparameters of a BART model; TransformerShape's fields describe the decoder."""

    n_encoder_layers: int
    n_encoder_heads: int
    encoder_ffn_dim: int
    embed_scale: float = 1.0
    activation: str = "gelu"  # the MLP's: "gelu" or "silu"
    gelu: str = "none"        # gelu's approximation
    embed_norm: bool = True   # LayerNorm after the embeddings (BART; Marian has none)

    @property
    def n_kv_heads(self) -> int:
        """Every head has its own keys and values."""
        return self.n_heads


_E, _D = "model.encoder.layers.{l}.", "model.decoder.layers.{l}."
BART_NAMES = {"shared": "model.shared.weight", "logits_bias": "final_logits_bias",
              "enc_scale": "model.encoder.embed_scale", "dec_scale": "model.decoder.embed_scale"}  # (dim,) sqrt(d)
for _side, _pre, _stack in (("enc_", _E, "model.encoder."), ("dec_", _D, "model.decoder.")):
    BART_NAMES[_side + "pos"] = _stack + "embed_positions.weight"
    BART_NAMES[_side + "emb_ln"], BART_NAMES[_side + "emb_ln_bias"] = (_stack + "layernorm_embedding.weight",
                                                                     _stack + "layernorm_embedding.bias")
    for _key, _name in (("q", "self_attn.q_proj"), ("k", "self_attn.k_proj"), ("v", "self_attn.v_proj"),
                        ("o", "self_attn.out_proj"), ("attn_ln", "self_attn_layer_norm"), ("fc", "fc1"),
                        ("proj", "fc2"), ("ffn_ln", "final_layer_norm"), ("xq", "encoder_attn.q_proj"),
                        ("xk", "encoder_attn.k_proj"), ("xv", "encoder_attn.v_proj"), ("xo", "encoder_attn.out_proj"),
                        ("cross_ln", "encoder_attn_layer_norm")):
        BART_NAMES[_side + _key] = _pre + _name + ".weight"
        BART_NAMES[_side + _key + "_bias"] = _pre + _name + ".bias"


def _embed(b: GraphBuilder, side: str, cfg: BartConfig, out: str) -> str:
    """layernorm(embed(tokens) * embed_scale + positions) (seq, dim)."""
    tok = b.add("embedding", side + "embed", {"table": b.weight("shared"), "ids": "tokens"}, side + "tok_emb")
    if cfg.embed_scale != 1.0:
        tok = b.add("mul", side + "embed_scale", {"a": tok, "b": b.weight(side + "scale")}, side + "tok_scaled")
    pos = b.add("embedding", side + "pos_embed", {"table": b.weight(side + "pos"), "ids": "positions"},
                side + "pos_emb")  # (seq, dim)
    if not cfg.embed_norm:
        return b.add("add", side + "embed_sum", {"a": tok, "b": pos}, out)
    h = b.add("add", side + "embed_sum", {"a": tok, "b": pos}, side + "emb")
    return b.layer_norm(side + "emb_ln", h, side + "emb_ln", None, out, cfg.norm_eps)


def _post_ln_block(b: GraphBuilder, p: str, l: int, h: str, delta: str, key: str, cfg: BartConfig, out: str) -> str:
    """layernorm(h + delta) with the ``key`` norm -> ``out`` (seq, dim)."""
    s = b.add("add", p + key + "_residual", {"a": h, "b": delta}, p + key + "_sum")
    return b.layer_norm(p + key, s, key, l, out, cfg.norm_eps)


def _mlp(b: GraphBuilder, p: str, l: int, h: str, side: str, cfg: BartConfig, out: str) -> str:
    f = b.linear(p + "fc", h, side + "fc", l, p + "fc")  # (seq, ffn_dim)
    if cfg.activation == "silu":
        f = b.add("silu", p + "act", {"x": f}, p + "fc_silu")
    else:
        f = b.add("gelu", p + "act", {"x": f}, p + "fc_gelu", approximate=cfg.gelu)
    d = b.linear(p + "proj", f, side + "proj", l, p + "proj")  # (seq, dim)
    s = b.add("add", p + "ffn_residual", {"a": h, "b": d}, p + "ffn_sum")
    return b.layer_norm(p + "ffn_ln", s, side + "ffn_ln", l, out, cfg.norm_eps)


def build_encoder_graph(cfg: BartConfig, names: dict[str, str], weights: dict[str, TensorSpec]) -> Graph:
    """Inputs tokens/positions (seq,); outputs ``hidden`` (seq, dim) and every decoder layer's
    cross-attention ``cross_k.{l}`` / ``cross_v.{l}`` (seq, dim)."""
    b = GraphBuilder("BART encoder", names, weights)
    attn = dict(n_heads=cfg.n_encoder_heads, n_kv_heads=cfg.n_encoder_heads, head_dim=cfg.dim // cfg.n_encoder_heads,
                causal=False)
    h = _embed(b, "enc_", cfg, "enc_h.0")
    for l in range(cfg.n_encoder_layers):
        p = f"enc{l}."
        q, k, v = (b.linear(p + f"{n}_proj", h, "enc_" + n, l, p + n) for n in "qkv")  # (seq, dim) each
        a = b.add("attention", p + "attn", {"q": q, "k": k, "v": v}, p + "attn", layer=l, **attn)
        o = b.linear(p + "o_proj", a, "enc_o", l, p + "o")  # (seq, dim)
        h = b.layer_norm(p + "attn_ln", b.add("add", p + "attn_residual", {"a": h, "b": o}, p + "attn_sum"),
                         "enc_attn_ln", l, p + "h_attn", cfg.norm_eps)
        h = _mlp(b, p, l, h, "enc_", cfg, "hidden" if l == cfg.n_encoder_layers - 1 else f"enc_h.{l + 1}")
    outputs = ["hidden"]
    for l in range(cfg.n_layers):
        outputs.append(b.linear(f"cross{l}.k_proj", "hidden", "dec_xk", l, f"cross_k.{l}"))
        outputs.append(b.linear(f"cross{l}.v_proj", "hidden", "dec_xv", l, f"cross_v.{l}"))
    return b.graph(list(DECODER_INPUTS), outputs)


def build_decoder_graph(cfg: BartConfig, names: dict[str, str], weights: dict[str, TensorSpec]) -> Graph:
    """Inputs tokens/positions (seq,); output logits (out_seq, vocab), run in a SourceContext."""
    b = GraphBuilder("BART decoder", names, weights)
    attn = dict(n_heads=cfg.n_heads, n_kv_heads=cfg.n_heads, head_dim=cfg.head_dim)
    h = _embed(b, "dec_", cfg, "h.0")
    for l in range(cfg.n_layers):
        p = f"l{l}."
        q, k, v = (b.linear(p + f"{n}_proj", h, "dec_" + n, l, p + n) for n in "qkv")  # (seq, dim) each
        a = b.add("attention", p + "attn", {"q": q, "k": k, "v": v}, p + "attn", layer=l, **attn)
        o = b.linear(p + "o_proj", a, "dec_o", l, p + "o")  # (seq, dim)
        h = b.layer_norm(p + "attn_ln", b.add("add", p + "attn_residual", {"a": h, "b": o}, p + "attn_sum"),
                         "dec_attn_ln", l, p + "h_attn", cfg.norm_eps)
        xq = b.linear(p + "cross_q_proj", h, "dec_xq", l, p + "xq")  # (seq, dim)
        a = b.add("cross_attention", p + "cross_attn", {"q": xq}, p + "cross_attn", layer=l, n_heads=cfg.n_heads,
                  head_dim=cfg.head_dim)
        o = b.linear(p + "cross_o_proj", a, "dec_xo", l, p + "xo")  # (seq, dim)
        h = b.layer_norm(p + "cross_ln", b.add("add", p + "cross_residual", {"a": h, "b": o}, p + "cross_sum"),
                         "dec_cross_ln", l, p + "h_cross", cfg.norm_eps)
        h = _mlp(b, p, l, h, "dec_", cfg, f"h.{l + 1}")
    h = b.add("output_rows", "output_rows", {"x": h}, "h.out")  # (out_seq, dim)
    logits = b.add("linear", "lm_head", {"x": h, "weight": b.weight("shared")}, "logits_raw")  # (out_seq, vocab)
    b.add("add", "logits_bias", {"a": logits, "b": b.weight("logits_bias")}, "logits")
    return b.graph(list(DECODER_INPUTS), ["logits"])


def sinusoidal_positions(n_pos: int, dim: int) -> np.ndarray:
    """Marian's fixed position table (n_pos, dim) float32: angle pos / 10000^(2*(j//2)/dim) of column j;
    the sines of the even columns' angles fill the first half, the cosines of the odd ones the rest."""
    j = np.arange(dim)
    angles = np.arange(n_pos)[:, None] / np.power(10000.0, 2 * (j // 2) / dim)[None, :]  # (n_pos, dim)
    half = (dim + 1) // 2
    table = np.empty((n_pos, dim), np.float64)
    table[:, :half] = np.sin(angles[:, 0::2])
    table[:, half:] = np.cos(angles[:, 1::2])
    return table.astype(np.float32)


def _config(cfg: HFConfig, **switches) -> BartConfig:
    """The hyperparameters every BART-shaped config names the same way."""
    d, vocab, n_pos = cfg.get("d_model"), cfg.get("vocab_size"), cfg.get("max_position_embeddings")
    heads, enc_heads = cfg.get("decoder_attention_heads"), cfg.get("encoder_attention_heads")
    if heads == 0 or enc_heads == 0 or d % heads or d % enc_heads:
        raise cfg.unsupported(f"d_model {d} with {enc_heads} encoder / {heads} decoder heads")
    for flag in ("normalize_before", "add_final_layer_norm"):
        if cfg.data.get(flag):
            raise cfg.unsupported(flag)
    return BartConfig(
        n_layers=cfg.get("decoder_layers"), dim=d, n_heads=heads, head_dim=d // heads,
        ffn_dim=cfg.get("decoder_ffn_dim"), vocab_size=vocab, context_length=n_pos, norm_eps=1e-5,
        n_encoder_layers=cfg.get("encoder_layers"), n_encoder_heads=enc_heads,
        encoder_ffn_dim=cfg.get("encoder_ffn_dim"),
        embed_scale=float(np.sqrt(d)) if cfg.data.get("scale_embedding") else 1.0, **switches)


def _import(cfg: HFConfig, ckpt: HFCheckpoint, config: BartConfig, positions, seq2seq: dict) -> Imported:
    """The decoder (with the encoder in its metadata) of a BART-shaped checkpoint; ``positions(side)``
    gives each side's (n_pos, dim) position table."""
    d, vocab = config.dim, config.vocab_size
    weights = {BART_NAMES["shared"]: ckpt.take(BART_NAMES["shared"], (vocab, d))}
    bias = BART_NAMES["logits_bias"]
    weights[bias] = (ckpt.take(bias, (1, vocab)).reshape(vocab).astype(np.float32) if ckpt.has(bias)
                     else np.zeros(vocab, np.float32))
    for side, n_layers, ffn in (("enc_", config.n_encoder_layers, config.encoder_ffn_dim),
                                ("dec_", config.n_layers, config.ffn_dim)):
        weights[BART_NAMES[side + "pos"]] = positions(side)
        if config.embed_norm:
            for key in ("emb_ln", "emb_ln_bias"):
                weights[BART_NAMES[side + key]] = np.asarray(ckpt.take(BART_NAMES[side + key], (d,)), np.float32)
        if config.embed_scale != 1.0:
            weights[BART_NAMES[side + "scale"]] = np.full(d, config.embed_scale, np.float32)
        per_layer = {"q": (d, d), "k": (d, d), "v": (d, d), "o": (d, d), "attn_ln": (d,), "fc": (ffn, d),
                     "proj": (d, ffn), "ffn_ln": (d,)}
        if side == "dec_":
            per_layer.update({"xq": (d, d), "xk": (d, d), "xv": (d, d), "xo": (d, d), "cross_ln": (d,)})
        for l in range(n_layers):
            for key, shape in per_layer.items():
                for suffix, s in (("", shape), ("_bias", (shape[0],))):
                    name = BART_NAMES[side + key + suffix].format(l=l)
                    weights[name] = ckpt.take(name, s)
    specs = specs_of(weights)
    encoder = Imported(build_encoder_graph(config, BART_NAMES, specs), weights, {"task": "encode"}, cfg.path)
    metadata = {"task": "seq2seq", "dims": vars(ModelDims.of(config)), "encoder": encoder,
                "seq2seq": {"source": "text", "cross_heads": config.n_heads, "cross_head_dim": config.head_dim,
                            **seq2seq}}
    return Imported(build_decoder_graph(config, BART_NAMES, specs), weights, metadata, cfg.path)


def from_hf(cfg: HFConfig, ckpt: HFCheckpoint) -> Imported:
    """Import a ``bart`` checkpoint (BartForConditionalGeneration)."""
    config = _config(cfg, gelu=gelu_of(cfg, "activation_function", "gelu"))
    n_pos, d = config.context_length, config.dim

    def positions(side: str) -> np.ndarray:  # (n_pos, dim): row p is position p
        return ckpt.take(BART_NAMES[side + "pos"], (n_pos + POSITION_OFFSET, d))[POSITION_OFFSET:]

    start, eos, bos = cfg.get("decoder_start_token_id"), cfg.get("eos_token_id"), cfg.get("bos_token_id")
    forced = cfg.data.get("forced_bos_token_id")
    return _import(cfg, ckpt, config, positions, {
        "source_prefix": [bos], "source_suffix": [eos],
        "decoder_start": [start] + ([int(forced)] if isinstance(forced, int) else []), "eos": [eos]})


def from_hf_marian(cfg: HFConfig, ckpt: HFCheckpoint) -> Imported:
    """Import a ``marian`` checkpoint (MarianMTModel): one vocabulary shared by source and target."""
    if not cfg.data.get("share_encoder_decoder_embeddings", True) or \
            cfg.data.get("decoder_vocab_size", cfg.get("vocab_size")) != cfg.get("vocab_size"):
        raise cfg.unsupported("separate source and target vocabularies")
    if not cfg.data.get("tie_word_embeddings", True):
        raise cfg.unsupported("an lm_head not tied to the shared embeddings")
    if cfg.data.get("activation_function", "gelu") in ("swish", "silu"):  # the opus-mt models'
        config = _config(cfg, activation="silu", embed_norm=False)
    else:
        config = _config(cfg, gelu=gelu_of(cfg, "activation_function", "gelu"), embed_norm=False)
    table = sinusoidal_positions(config.context_length, config.dim)  # (n_pos, dim)
    eos = cfg.get("eos_token_id")
    return _import(cfg, ckpt, config, lambda side: table, {
        "decoder_start": [cfg.get("decoder_start_token_id")], "eos": [eos]})
