"""Whisper (speech -> text): the encoder and decoder graphs, and Hugging Face checkpoints.

The encoder reads log-mel features (frames, n_mels) of one 30 s window: two 1-D convolutions
(kernel 3, the second with stride 2, each followed by exact GELU) written as NHWC conv2d over a
one-row image, plus the learned (sinusoidal at init) positions, then pre-LayerNorm transformer
layers with bidirectional attention and a final LayerNorm. It also projects, once per input, every
decoder layer's cross-attention keys and values (outputs ``cross_k.{l}`` / ``cross_v.{l}``).

The decoder is pre-LayerNorm too: token + learned position embeddings, per layer causal
self-attention over its KV cache, cross-attention over the encoded input (ops/cross_attention.py)
and a GELU MLP; the logits reuse the token embedding (Whisper ties them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from volvox.architectures.builder import DECODER_INPUTS, GraphBuilder, TransformerShape
from volvox.architectures.gpt2 import gelu_of
from volvox.errors import BlueprintError, UnsupportedError, WeightsError
from volvox.formats.hf_folder import HFCheckpoint, HFConfig, specs_of
from volvox.formats.imported import Imported, ModelDims
from volvox.ir.graph import Graph, TensorSpec


MULTILINGUAL_VOCAB = 51865  # Whisper's multilingual vocabularies have this many tokens or more; English-only 51864


@dataclass(frozen=True)
class WhisperConfig(TransformerShape):
    """Hyperparameters of a Whisper model; the TransformerShape fields describe the decoder."""

    n_mels: int
    n_audio_ctx: int          # encoder positions (frames / 2)
    n_audio_layers: int
    n_audio_heads: int
    audio_ffn_dim: int
    gelu: str = "none"

    @property
    def n_kv_heads(self) -> int:
        """Every head has its own keys and values."""
        return self.n_heads


_E, _D = "encoder.layers.{l}.", "decoder.layers.{l}."
WHISPER_NAMES = {
    "conv1": "encoder.conv1.weight", "conv1_bias": "encoder.conv1.bias",
    "conv2": "encoder.conv2.weight", "conv2_bias": "encoder.conv2.bias",
    "enc_pos": "encoder.embed_positions.weight",
    "enc_ln": "encoder.layer_norm.weight", "enc_ln_bias": "encoder.layer_norm.bias",
    "tok": "decoder.embed_tokens.weight", "dec_pos": "decoder.embed_positions.weight",
    "dec_ln": "decoder.layer_norm.weight", "dec_ln_bias": "decoder.layer_norm.bias",
}
for _side, _pre in (("enc_", _E), ("", _D)):
    for _key, _name in (("q", "self_attn.q_proj"), ("k", "self_attn.k_proj"), ("v", "self_attn.v_proj"),
                        ("o", "self_attn.out_proj"), ("attn_ln", "self_attn_layer_norm"), ("fc", "fc1"),
                        ("proj", "fc2"), ("ffn_ln", "final_layer_norm")):
        WHISPER_NAMES[_side + _key] = _pre + _name + ".weight"
        WHISPER_NAMES[_side + _key + "_bias"] = _pre + _name + ".bias"
for _key, _name in (("xq", "q_proj"), ("xk", "k_proj"), ("xv", "v_proj"), ("xo", "out_proj")):
    WHISPER_NAMES[_key] = _D + "encoder_attn." + _name + ".weight"
    WHISPER_NAMES[_key + "_bias"] = _D + "encoder_attn." + _name + ".bias"
WHISPER_NAMES["cross_ln"], WHISPER_NAMES["cross_ln_bias"] = (_D + "encoder_attn_layer_norm.weight",
                                                           _D + "encoder_attn_layer_norm.bias")


def _pre_ln_mlp(b: GraphBuilder, p: str, l: int, h: str, side: str, cfg: WhisperConfig, out: str) -> str:
    """h + W_fc2 gelu(W_fc1 layernorm(h)) (+ biases) -> ``out`` (seq, dim)."""
    x = b.layer_norm(p + "ffn_ln", h, side + "ffn_ln", l, p + "x_mlp", cfg.norm_eps)
    f = b.linear(p + "fc", x, side + "fc", l, p + "fc")  # (seq, ffn_dim)
    f = b.add("gelu", p + "act", {"x": f}, p + "fc_gelu", approximate=cfg.gelu)
    d = b.linear(p + "proj", f, side + "proj", l, p + "proj")  # (seq, dim)
    return b.add("add", p + "mlp_residual", {"a": h, "b": d}, out)


def build_encoder_graph(cfg: WhisperConfig, names: dict[str, str], weights: dict[str, TensorSpec]) -> Graph:
    """Input ``features`` (2 * n_audio_ctx, n_mels); outputs ``hidden`` (n_audio_ctx, dim) and each
    decoder layer's cross-attention ``cross_k.{l}`` / ``cross_v.{l}`` (n_audio_ctx, dim)."""
    b = GraphBuilder("Whisper encoder", names, weights)
    frames = 2 * cfg.n_audio_ctx
    attn = dict(n_heads=cfg.n_audio_heads, n_kv_heads=cfg.n_audio_heads, head_dim=cfg.dim // cfg.n_audio_heads,
                causal=False)
    # conv front: two kernel-3 convolutions over time as conv2d on a (1, 1, frames, channels) image
    x = b.add("reshape", "features_image", {"x": "features"}, "features_nhwc", shape=[1, 1, frames, cfg.n_mels])
    x = b.add("conv2d", "conv1", {"x": x, "weight": b.weight("conv1"), "bias": b.weight("conv1_bias")}, "conv1",
              pads=[0, 1, 0, 1])  # (1, 1, frames, dim)
    x = b.add("gelu", "conv1_act", {"x": x}, "conv1_gelu", approximate="none")
    x = b.add("conv2d", "conv2", {"x": x, "weight": b.weight("conv2"), "bias": b.weight("conv2_bias")}, "conv2",
              pads=[0, 1, 0, 1], strides=[1, 2])  # (1, 1, n_audio_ctx, dim)
    x = b.add("gelu", "conv2_act", {"x": x}, "conv2_gelu", approximate="none")
    x = b.add("reshape", "conv_rows", {"x": x}, "conv_rows", shape=[cfg.n_audio_ctx, cfg.dim])  # (n_audio_ctx, dim)
    h = b.add("add", "enc_embed_sum", {"a": x, "b": b.weight("enc_pos")}, "enc_h.0")
    for l in range(cfg.n_audio_layers):
        p = f"enc{l}."
        x = b.layer_norm(p + "attn_ln", h, "enc_attn_ln", l, p + "x", cfg.norm_eps)
        q = b.linear(p + "q_proj", x, "enc_q", l, p + "q")  # (n_audio_ctx, dim)
        k = b.linear(p + "k_proj", x, "enc_k", l, p + "k")  # (n_audio_ctx, dim)
        v = b.linear(p + "v_proj", x, "enc_v", l, p + "v")  # (n_audio_ctx, dim)
        h = b.attention_residual(p, l, h, q, k, v, attn, o_key="enc_o")  # (n_audio_ctx, dim)
        h = _pre_ln_mlp(b, p, l, h, "enc_", cfg, f"enc_h.{l + 1}")
    h = b.layer_norm("enc_ln", h, "enc_ln", None, "hidden", cfg.norm_eps)  # (n_audio_ctx, dim)
    outputs = ["hidden"]
    for l in range(cfg.n_layers):
        outputs.append(b.linear(f"cross{l}.k_proj", h, "xk", l, f"cross_k.{l}"))  # (n_audio_ctx, dim)
        outputs.append(b.linear(f"cross{l}.v_proj", h, "xv", l, f"cross_v.{l}"))  # (n_audio_ctx, dim)
    return b.graph([TensorSpec("features", (frames, cfg.n_mels), "float32")], outputs)


def build_decoder_graph(cfg: WhisperConfig, names: dict[str, str], weights: dict[str, TensorSpec]) -> Graph:
    """Inputs tokens/positions (seq,); output logits (out_seq, vocab). Runs in a SourceContext
    (ops/cross_attention.py) holding the encoder's cross keys/values."""
    b = GraphBuilder("Whisper decoder", names, weights)
    attn = dict(n_heads=cfg.n_heads, n_kv_heads=cfg.n_heads, head_dim=cfg.head_dim)
    tok = b.add("embedding", "embed", {"table": b.weight("tok"), "ids": "tokens"}, "tok_emb")          # (seq, dim)
    pos = b.add("embedding", "pos_embed", {"table": b.weight("dec_pos"), "ids": "positions"}, "pos_emb")  # (seq, dim)
    h = b.add("add", "embed_sum", {"a": tok, "b": pos}, "h.0")
    for l in range(cfg.n_layers):
        p = f"l{l}."
        # self-attention: h += W_o attention(W_q x, W_k x, W_v x) over the KV cache, x = layernorm(h)
        x = b.layer_norm(p + "attn_ln", h, "attn_ln", l, p + "x", cfg.norm_eps)
        q = b.linear(p + "q_proj", x, "q", l, p + "q")  # (seq, dim)
        k = b.linear(p + "k_proj", x, "k", l, p + "k")  # (seq, dim)
        v = b.linear(p + "v_proj", x, "v", l, p + "v")  # (seq, dim)
        h = b.attention_residual(p, l, h, q, k, v, attn)
        # cross-attention: h += W_xo cross_attention(W_xq x) over the encoded input, x = layernorm(h)
        x = b.layer_norm(p + "cross_ln", h, "cross_ln", l, p + "x_cross", cfg.norm_eps)
        q = b.linear(p + "cross_q_proj", x, "xq", l, p + "xq")  # (seq, dim)
        a = b.add("cross_attention", p + "cross_attn", {"q": q}, p + "cross_attn", layer=l, n_heads=cfg.n_heads,
                  head_dim=cfg.head_dim)
        o = b.linear(p + "cross_o_proj", a, "xo", l, p + "xo")  # (seq, dim)
        h = b.add("add", p + "cross_residual", {"a": h, "b": o}, p + "h_cross")
        h = _pre_ln_mlp(b, p, l, h, "", cfg, f"h.{l + 1}")
    h = b.add("output_rows", "output_rows", {"x": h}, "h.out")  # (out_seq, dim)
    h = b.layer_norm("dec_ln", h, "dec_ln", None, "h.norm", cfg.norm_eps)
    b.add("linear", "lm_head", {"x": h, "weight": b.weight("tok")}, "logits")  # (out_seq, vocab)
    return b.graph(list(DECODER_INPUTS), ["logits"])


def whisper_shapes(cfg: WhisperConfig) -> dict[str, tuple]:
    """Every weight's shape by graph name, as the graph uses it (conv weights OHWI)."""
    d, shapes = cfg.dim, {}
    shapes.update({"conv1": (d, 1, 3, cfg.n_mels), "conv2": (d, 1, 3, d), "conv1_bias": (d,), "conv2_bias": (d,),
                   "enc_pos": (cfg.n_audio_ctx, d), "enc_ln": (d,), "enc_ln_bias": (d,),
                   "tok": (cfg.vocab_size, d), "dec_pos": (cfg.context_length, d), "dec_ln": (d,),
                   "dec_ln_bias": (d,)})
    out = {WHISPER_NAMES[k]: s for k, s in shapes.items()}
    for side, n_layers, ffn in (("enc_", cfg.n_audio_layers, cfg.audio_ffn_dim), ("", cfg.n_layers, cfg.ffn_dim)):
        per_layer = {"q": (d, d), "k": (d, d), "v": (d, d), "o": (d, d), "fc": (ffn, d), "proj": (d, ffn),
                     "attn_ln": (d,), "ffn_ln": (d,)}
        if not side:
            per_layer.update({"xq": (d, d), "xk": (d, d), "xv": (d, d), "xo": (d, d), "cross_ln": (d,)})
        for l in range(n_layers):
            for key, shape in per_layer.items():
                out[WHISPER_NAMES[side + key].format(l=l)] = shape
                if key != "k" and key != "xk":  # key projections have no bias
                    out[WHISPER_NAMES[side + key + "_bias"].format(l=l)] = (shape[0],)
    return out


def build_whisper(cfg: WhisperConfig, weights: dict[str, np.ndarray], source: str,
                  seq2seq: dict) -> Imported:
    """The import of a Whisper model from weights named and shaped as whisper_shapes says: the
    decoder graph as the model's graph, the encoder's in ``metadata["encoder"]``."""
    specs = specs_of(weights)
    encoder = Imported(build_encoder_graph(cfg, WHISPER_NAMES, specs), weights, {"task": "encode"}, source)
    metadata = {"task": "transcribe", "dims": vars(ModelDims.of(cfg)), "encoder": encoder,
                "seq2seq": {"source": "features", "n_mels": cfg.n_mels, "frames": 2 * cfg.n_audio_ctx,
                            "cross_heads": cfg.n_heads, "cross_head_dim": cfg.head_dim, **seq2seq}}
    return Imported(build_decoder_graph(cfg, WHISPER_NAMES, specs), weights, metadata, source)


def from_hf(cfg: HFConfig, ckpt: HFCheckpoint) -> Imported:
    """Import a ``whisper`` checkpoint (WhisperForConditionalGeneration or WhisperModel)."""
    d = cfg.get("d_model")
    heads, audio_heads = cfg.get("decoder_attention_heads"), cfg.get("encoder_attention_heads")
    if heads == 0 or audio_heads == 0 or d % heads or d % audio_heads:
        raise cfg.unsupported(f"d_model {d} with {audio_heads} encoder / {heads} decoder heads")
    if cfg.data.get("scale_embedding"):
        raise cfg.unsupported("scale_embedding")
    config = WhisperConfig(
        n_layers=cfg.get("decoder_layers"), dim=d, n_heads=heads, head_dim=d // heads,
        ffn_dim=cfg.get("decoder_ffn_dim"), vocab_size=cfg.get("vocab_size"),
        context_length=cfg.get("max_target_positions"), norm_eps=1e-5, n_mels=cfg.get("num_mel_bins"),
        n_audio_ctx=cfg.get("max_source_positions"), n_audio_layers=cfg.get("encoder_layers"),
        n_audio_heads=audio_heads, audio_ffn_dim=cfg.get("encoder_ffn_dim"),
        gelu=gelu_of(cfg, "activation_function", "gelu"))
    pre = ckpt.prefix(WHISPER_NAMES["conv1"], ("model.", ""))
    weights = {}
    for name, shape in whisper_shapes(config).items():
        if name.startswith("encoder.conv"):
            hf_shape = (shape[0], shape[3], shape[2]) if len(shape) == 4 else shape  # (out, in, k) in torch
            w = np.asarray(ckpt.take(pre + name, hf_shape), np.float32)
            weights[name] = np.ascontiguousarray(w.transpose(0, 2, 1)[:, None]) if len(shape) == 4 else w
        else:
            weights[name] = ckpt.take(pre + name, shape)
    return build_whisper(config, weights, cfg.path, hf_generation(cfg))


def hf_generation(cfg: HFConfig) -> dict:
    """Decoding settings of a Whisper config (and its generation_config.json, when present): the
    decoder's start token, its end tokens and the tokens never (or never first) emitted."""
    gen = {}
    path = Path(cfg.path).with_name("generation_config.json")
    if path.is_file():
        try:
            gen = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            gen = {}
    data = {**cfg.data, **gen}
    start = cfg.get("decoder_start_token_id")
    eos = data.get("eos_token_id")
    eos = [int(e) for e in (eos if isinstance(eos, list) else [eos]) if isinstance(e, int) and not isinstance(e, bool)]
    if not eos:
        raise BlueprintError(f"{cfg.path}: a Whisper config needs an integer eos_token_id (the end of a transcript)")
    return {"decoder_start": [start], "eos": eos, "text_tokens": min(eos, default=cfg.get("vocab_size")),
            "suppress": [int(t) for t in data.get("suppress_tokens") or []],
            "suppress_begin": [int(t) for t in data.get("begin_suppress_tokens") or []],
            "no_timestamps": data.get("no_timestamps_token_id"),
            "multilingual": cfg.get("vocab_size") >= MULTILINGUAL_VOCAB}


# CTranslate2's Whisper variables (ctranslate2 WhisperSpec) -> graph names; fused matrices are split
# by rows at import: self_attention/linear_0 = [q; k; v], attention/linear_1 = [k; v].
_CT2_PARTS = {
    "self_attention/linear_0": ("q", "k", "v"), "self_attention/linear_1": ("o",),
    "self_attention/layer_norm": ("attn_ln",), "ffn/linear_0": ("fc",), "ffn/linear_1": ("proj",),
    "ffn/layer_norm": ("ffn_ln",), "attention/linear_0": ("xq",), "attention/linear_1": ("xk", "xv"),
    "attention/linear_2": ("xo",), "attention/layer_norm": ("cross_ln",),
}
_CT2_ACTIVATION_GELU = 3  # ctranslate2's Activation enum: RELU, GELUTanh, SWISH, GELU, ...


def import_ct2(directory) -> Imported:
    """A Whisper model in CTranslate2's format (model.bin of a WhisperSpec, config.json, tokenizer.json)."""
    from volvox.formats.ctranslate2 import read_ct2
    from volvox.tokenizers import ByteLevelBPETokenizer

    directory = Path(directory)
    ct2 = read_ct2(directory)
    try:
        imported = _from_ct2(ct2, directory)
        tokenizer_json = directory / "tokenizer.json"
        if not tokenizer_json.is_file():
            raise BlueprintError(f"{directory}: a CTranslate2 Whisper folder needs its tokenizer.json")
        imported.tokenizer = tok = ByteLevelBPETokenizer.from_tokenizer_json(tokenizer_json)
        spec = imported.metadata["seq2seq"]
        ids = {name: _token_id(tok, f"<|{name}|>", directory)
               for name in ("startoftranscript", "endoftext", "notimestamps")}
        spec.update(decoder_start=[ids["startoftranscript"]], eos=[ids["endoftext"]], text_tokens=ids["endoftext"],
                    no_timestamps=ids["notimestamps"])
        imported.closers = [ct2.close]
        return imported
    except BaseException:
        ct2.close()
        raise


def _token_id(tok, text: str, directory: Path) -> int:
    ids = tok.encode(text)
    if len(ids) != 1:
        raise BlueprintError(f"{directory}/tokenizer.json: no special token {text!r}")
    return ids[0]


def _from_ct2(ct2, directory: Path) -> Imported:
    if ct2.spec != "WhisperSpec":
        raise UnsupportedError(f"{ct2.path}: CTranslate2 spec {ct2.spec!r} is not supported (supported: WhisperSpec)")
    for name, want in (("decoder/pre_norm", 1), ("decoder/scale_embeddings", 0), ("decoder/alibi", 0),
                       ("decoder/activation", _CT2_ACTIVATION_GELU)):
        if ct2.scalar(name, want) != want:
            raise UnsupportedError(f"{ct2.path}: {name} = {ct2.scalar(name)} (this Whisper import needs {want})")
    conv1 = ct2.get("encoder/conv1/weight")  # (dim, n_mels, 3)
    if conv1.ndim != 3:
        raise WeightsError(f"{ct2.path}: encoder/conv1/weight has shape {list(conv1.shape)}, not (dim, n_mels, 3)")
    d, n_mels, _ = conv1.shape
    n_layers = {side: sum(1 for n in ct2.variables
                          if n.startswith(f"{side}/layer_") and n.endswith("ffn/linear_0/weight"))
                for side in ("encoder", "decoder")}
    config = WhisperConfig(
        n_layers=n_layers["decoder"], dim=d, n_heads=int(ct2.scalar("decoder/num_heads")),
        head_dim=d // int(ct2.scalar("decoder/num_heads")),
        ffn_dim=ct2.get("decoder/layer_0/ffn/linear_0/weight").shape[0],
        vocab_size=ct2.get("decoder/embeddings/weight").shape[0],
        context_length=ct2.get("decoder/position_encodings/encodings").shape[0], norm_eps=1e-5, n_mels=n_mels,
        n_audio_ctx=ct2.get("encoder/position_encodings/encodings").shape[0], n_audio_layers=n_layers["encoder"],
        n_audio_heads=int(ct2.scalar("encoder/num_heads")),
        audio_ffn_dim=ct2.get("encoder/layer_0/ffn/linear_0/weight").shape[0])
    shapes = whisper_shapes(config)
    weights = {}
    for name, ct2_name in (("conv1", "encoder/conv1"), ("conv2", "encoder/conv2")):
        w = ct2.get(ct2_name + "/weight").astype(np.float32)  # (out, in, k)
        weights[WHISPER_NAMES[name]] = np.ascontiguousarray(w.transpose(0, 2, 1)[:, None])  # (out, 1, k, in)
        weights[WHISPER_NAMES[name + "_bias"]] = ct2.get(ct2_name + "/bias").astype(np.float32)
    for key, ct2_name in (("enc_pos", "encoder/position_encodings/encodings"),
                          ("dec_pos", "decoder/position_encodings/encodings"), ("tok", "decoder/embeddings/weight"),
                          ("enc_ln", "encoder/layer_norm/gamma"), ("enc_ln_bias", "encoder/layer_norm/beta"),
                          ("dec_ln", "decoder/layer_norm/gamma"), ("dec_ln_bias", "decoder/layer_norm/beta")):
        w = ct2.get(ct2_name)
        weights[WHISPER_NAMES[key]] = w if key == "tok" else w.astype(np.float32)
    for side, prefix in (("enc_", "encoder"), ("", "decoder")):
        for l in range(n_layers[prefix]):
            for part, keys in _CT2_PARTS.items():
                if side and part.startswith("attention/"):
                    continue
                base = f"{prefix}/layer_{l}/{part}"
                if part.endswith("layer_norm"):
                    for suffix, ct2_suffix in (("", "/gamma"), ("_bias", "/beta")):
                        name = WHISPER_NAMES[side + keys[0] + suffix].format(l=l)
                        weights[name] = ct2.get(base + ct2_suffix).astype(np.float32)
                    continue
                w, bias = ct2.get(base + "/weight"), ct2.get(base + "/bias").astype(np.float32)
                rows = w.shape[0] // len(keys)
                for i, key in enumerate(keys):  # equal row blocks
                    weights[WHISPER_NAMES[side + key].format(l=l)] = w[i * rows:(i + 1) * rows]  # (rows, in)
                    weights[WHISPER_NAMES[side + key + "_bias"].format(l=l)] = bias[i * rows:(i + 1) * rows]  # (rows,)
    for name, shape in shapes.items():
        if name not in weights or weights[name].shape != shape:
            got = weights[name].shape if name in weights else None
            raise WeightsError(f"{ct2.path}: Whisper weight {name} should be {shape}, got {got}")
    cfg = ct2.config
    seq2seq = {"suppress": [int(t) for t in cfg.get("suppress_ids") or []],
               "suppress_begin": [int(t) for t in cfg.get("suppress_ids_begin") or []],
               "multilingual": config.vocab_size >= MULTILINGUAL_VOCAB}
    imported = build_whisper(config, weights, str(directory), seq2seq)
    imported.metadata.update(architecture="whisper", name=directory.name, format="ctranslate2")
    return imported
