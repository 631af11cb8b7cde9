"""GPT-Neo checkpoints (e.g. TinyStories): the GPT-2-style graph with unscaled attention scores
and layers alternating between global and local (sliding ``window_size``) attention."""

from __future__ import annotations

from volvox.architectures.gpt2 import GPTConfig, build_gpt_graph, gelu_of
from volvox.formats.hf_folder import HFCheckpoint, HFConfig, specs_of
from volvox.formats.imported import Imported, ModelDims

_H = "transformer.h.{l}."
NEO_NAMES = {
    "wte": "transformer.wte.weight", "wpe": "transformer.wpe.weight",
    "ln_1": _H + "ln_1.weight", "ln_1_bias": _H + "ln_1.bias",
    **{k: _H + f"attn.attention.{k}_proj.weight" for k in "qkv"},
    "o": _H + "attn.attention.out_proj.weight", "o_bias": _H + "attn.attention.out_proj.bias",
    "ln_2": _H + "ln_2.weight", "ln_2_bias": _H + "ln_2.bias",
    "fc": _H + "mlp.c_fc.weight", "fc_bias": _H + "mlp.c_fc.bias",
    "proj": _H + "mlp.c_proj.weight", "proj_bias": _H + "mlp.c_proj.bias",
    "ln_f": "transformer.ln_f.weight", "ln_f_bias": "transformer.ln_f.bias",
    "output": "lm_head.weight",
}


def attention_layers(cfg: HFConfig, n_layers: int) -> list[str]:
    """"global" / "local" per layer, from ``attention_layers`` or the ``attention_types`` pattern."""
    layers = cfg.data.get("attention_layers")
    if layers is None:
        layers = [kind for pattern, repeat in cfg.data.get("attention_types", []) for _ in range(repeat)
                  for kind in pattern]
    if len(layers) != n_layers or not set(layers) <= {"global", "local"}:
        raise cfg.unsupported(f"attention_layers {layers!r} for {n_layers} layers")
    return layers


def from_hf(cfg: HFConfig, ckpt: HFCheckpoint) -> Imported:
    """Import a ``gpt_neo`` checkpoint."""
    dim, n_heads, n_layers = cfg.get("hidden_size"), cfg.get("num_heads"), cfg.get("num_layers")
    vocab, context = cfg.get("vocab_size"), cfg.get("max_position_embeddings")
    ffn = cfg.get("intermediate_size", default=4 * dim)
    if n_heads == 0 or dim % n_heads:
        raise cfg.unsupported(f"hidden_size {dim} with num_heads {n_heads}")
    window = cfg.get("window_size", default=256)
    windows = tuple(window if kind == "local" else 0 for kind in attention_layers(cfg, n_layers))
    shapes = {"wte": (vocab, dim), "wpe": (context, dim), "ln_f": (dim,), "ln_f_bias": (dim,)}
    if not cfg.data.get("tie_word_embeddings", True):
        shapes["output"] = (vocab, dim)
    layer_shapes = {"ln_1": (dim,), "ln_1_bias": (dim,), "q": (dim, dim), "k": (dim, dim), "v": (dim, dim),
                    "o": (dim, dim), "o_bias": (dim,), "ln_2": (dim,), "ln_2_bias": (dim,),
                    "fc": (ffn, dim), "fc_bias": (ffn,), "proj": (dim, ffn), "proj_bias": (dim,)}
    weights = {NEO_NAMES[k]: ckpt.take(NEO_NAMES[k], s) for k, s in shapes.items()}
    for l in range(n_layers):
        for k, s in layer_shapes.items():
            weights[NEO_NAMES[k].format(l=l)] = ckpt.take(NEO_NAMES[k].format(l=l), s)
    config = GPTConfig(n_layers=n_layers, dim=dim, n_heads=n_heads, head_dim=dim // n_heads, ffn_dim=ffn,
                       vocab_size=vocab, context_length=context,
                       norm_eps=cfg.get("layer_norm_epsilon", default=1e-5, kind=float), gelu=gelu_of(cfg),
                       attn_scale=1.0, layer_windows=windows)  # GPT-Neo does not scale q·k
    graph = build_gpt_graph(config, NEO_NAMES, specs_of(weights))
    return Imported(graph, weights, {"task": "generate", "dims": vars(ModelDims.of(config))}, cfg.path)
