"""LLaMA-family Hugging Face checkpoints (llama, mistral, qwen2) -> the shared LLaMA graph (llama.py).

HF stores q/k weights in the "half" RoPE layout (rotate_half), so no permutation is
needed; weights are used as stored. Qwen2 adds q/k/v biases, LLaMA's
``attention_bias`` / ``mlp_bias`` add biases to every projection, Mistral (and
Qwen2 with ``use_sliding_window``) attend within a sliding window.
"""

from __future__ import annotations

from volvox.formats.hf_folder import HFCheckpoint, HFConfig, specs_of
from volvox.formats.imported import Imported, ModelDims
from volvox.architectures.llama import LlamaConfig, build_llama_graph, swiglu_ffn
from volvox.architectures.moe import HF_MOE_NAMES, HFMoe

_L = "model.layers.{l}."
HF_NAMES = {
    "embed": "model.embed_tokens.weight",
    "attn_norm": _L + "input_layernorm.weight",
    **{k: _L + f"self_attn.{k}_proj.weight" for k in "qkvo"},
    **{f"{k}_bias": _L + f"self_attn.{k}_proj.bias" for k in "qkvo"},
    "ffn_norm": _L + "post_attention_layernorm.weight",
    **{k: _L + f"mlp.{k}_proj.weight" for k in ("gate", "up", "down")},
    **{f"{k}_bias": _L + f"mlp.{k}_proj.bias" for k in ("gate", "up", "down")},
    "output_norm": "model.norm.weight",
    "output": "lm_head.weight",
}


def rope_of(cfg: HFConfig, context: int) -> dict:
    """LlamaConfig's rope fields from ``rope_parameters`` (transformers 5) or ``rope_theta``/``rope_scaling``."""
    params = cfg.data.get("rope_parameters") or cfg.data.get("rope_scaling") or {}
    if not isinstance(params, dict):
        raise cfg.unsupported(f"rope parameters {params!r}")
    theta = float(params.get("rope_theta", cfg.get("rope_theta", default=10000.0, kind=float)))
    if float(params.get("partial_rotary_factor", 1.0)) != 1.0:
        raise cfg.unsupported("partial_rotary_factor")
    kind = params.get("rope_type", params.get("type", "default"))
    out = {"rope_theta": theta}
    if kind == "linear":
        out["rope_scale"] = float(params["factor"])
    elif kind == "llama3":
        out["rope_llama3"] = {
            "factor": float(params["factor"]), "low_freq_factor": float(params["low_freq_factor"]),
            "high_freq_factor": float(params["high_freq_factor"]),
            "original_context": float(params.get("original_max_position_embeddings", context))}
    elif kind != "default":
        raise cfg.unsupported(f"rope type {kind!r} (supported: default, linear, llama3)")
    return out


def layer_windows(cfg: HFConfig, n_layers: int) -> tuple:
    """Sliding window per layer (0 = full causal attention), as transformers decides it."""
    window = cfg.get("sliding_window", default=0)
    types = cfg.data.get("layer_types")
    if isinstance(types, list) and len(types) == n_layers:
        return tuple(window if t == "sliding_attention" else 0 for t in types)
    if cfg.model_type in ("qwen2", "qwen2_moe"):
        if not cfg.data.get("use_sliding_window"):
            return ()
        first = cfg.get("max_window_layers", default=n_layers)
        return tuple(window if l >= first else 0 for l in range(n_layers))
    return (window,) * n_layers if cfg.model_type in ("mistral", "mixtral") and window else ()


def from_hf(cfg: HFConfig, ckpt: HFCheckpoint) -> Imported:
    """Import a llama / mistral / qwen2 checkpoint, or a mixture-of-experts one (mixtral, qwen2_moe)."""
    dim, n_heads = cfg.get("hidden_size"), cfg.get("num_attention_heads")
    n_kv = cfg.get("num_key_value_heads", default=n_heads)
    if n_heads == 0 or n_kv == 0 or n_heads % n_kv:
        raise cfg.unsupported(f"num_attention_heads {n_heads} with num_key_value_heads {n_kv}")
    head_dim = cfg.get("head_dim", default=dim // n_heads)
    n_layers, ffn, vocab = cfg.get("num_hidden_layers"), cfg.get("intermediate_size"), cfg.get("vocab_size")
    context = cfg.get("max_position_embeddings", default=4096)
    act = cfg.data.get("hidden_act", "silu")
    if act != "silu":
        raise cfg.unsupported(f"hidden_act {act!r}")
    moe = HFMoe(cfg, dim, n_layers) if cfg.model_type in ("mixtral", "qwen2_moe") else None
    attn_bias = cfg.model_type in ("qwen2", "qwen2_moe") or bool(cfg.data.get("attention_bias"))
    shapes = {"embed": (vocab, dim), "output_norm": (dim,)}
    if not cfg.data.get("tie_word_embeddings", False):  # the default of LlamaConfig, MistralConfig, Qwen2Config
        shapes["output"] = (vocab, dim)
    layer_shapes = {"attn_norm": (dim,), "ffn_norm": (dim,), "q": (n_heads * head_dim, dim),
                    "k": (n_kv * head_dim, dim), "v": (n_kv * head_dim, dim), "o": (dim, n_heads * head_dim),
                    "gate": (ffn, dim), "up": (ffn, dim), "down": (dim, ffn)}
    if attn_bias:
        layer_shapes.update(q_bias=(n_heads * head_dim,), k_bias=(n_kv * head_dim,), v_bias=(n_kv * head_dim,))
        if cfg.data.get("attention_bias"):
            layer_shapes["o_bias"] = (dim,)
    if cfg.data.get("mlp_bias"):
        layer_shapes.update(gate_bias=(ffn,), up_bias=(ffn,), down_bias=(dim,))
    weights = {HF_NAMES[k]: ckpt.take(HF_NAMES[k], s) for k, s in shapes.items()}
    for l in range(n_layers):
        for k, s in layer_shapes.items():
            if moe and moe.is_moe_layer(l) and k.split("_")[0] in ("gate", "up", "down"):
                continue  # an MoE layer: its experts instead of the dense FFN
            name = HF_NAMES[k].format(l=l)
            weights[name] = ckpt.take(name, s)
        if moe and moe.is_moe_layer(l):
            weights.update(moe.take(ckpt, l))
    config = LlamaConfig(
        n_layers=n_layers, dim=dim, n_heads=n_heads, n_kv_heads=n_kv, head_dim=head_dim, ffn_dim=ffn,
        vocab_size=vocab, norm_eps=cfg.get("rms_norm_eps", default=1e-6, kind=float), rope_style="half",
        context_length=context, layer_windows=layer_windows(cfg, n_layers), **rope_of(cfg, context))
    names, block = ({**HF_NAMES, **HF_MOE_NAMES}, moe.config.ffn) if moe else (HF_NAMES, swiglu_ffn)
    graph = build_llama_graph(config, names, specs_of(weights), block)
    return Imported(graph, {n: weights[n] for n in graph.weights}, {"task": "generate", "dims": vars(ModelDims.of(config))}, cfg.path)
