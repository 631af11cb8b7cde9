"""LLaMA-family Hugging Face checkpoints -> the shared LLaMA graph (llama.py).

llama, mistral and qwen2 are the plain graph; qwen3, gemma2, gemma3_text and phi3 turn on
LlamaConfig's switches (FAMILIES). HF stores q/k weights in the "half" RoPE layout
(rotate_half), so no permutation is needed; weights are used as stored, except Gemma's norm
weights, which HF applies as ``1 + weight`` and which are read as that sum. Qwen2 adds q/k/v
biases, LLaMA's ``attention_bias`` / ``mlp_bias`` add biases to every projection; Mistral, Qwen2
/ Qwen3 with ``use_sliding_window``, Phi-3 with ``sliding_window`` and Gemma's sliding layers
attend within a window.
"""

from __future__ import annotations

import math

import numpy as np

from volvox.errors import BlueprintError
from volvox.formats.hf_folder import HFCheckpoint, HFConfig, specs_of
from volvox.formats.imported import Imported, ModelDims
from volvox.architectures.llama import LlamaConfig, build_llama_graph, constants
from volvox.architectures.moe import HF_MOE_NAMES, MOE_FAMILIES, HFMoe

_L = "model.layers.{l}."
HF_NAMES = {
    "embed": "model.embed_tokens.weight",
    "attn_norm": _L + "input_layernorm.weight",
    **{k: _L + f"self_attn.{k}_proj.weight" for k in "qkvo"},
    **{f"{k}_bias": _L + f"self_attn.{k}_proj.bias" for k in "qkvo"},
    "qkv": _L + "self_attn.qkv_proj.weight",
    "q_norm": _L + "self_attn.q_norm.weight",
    "k_norm": _L + "self_attn.k_norm.weight",
    "ffn_norm": _L + "post_attention_layernorm.weight",
    **{k: _L + f"mlp.{k}_proj.weight" for k in ("gate", "up", "down")},
    **{f"{k}_bias": _L + f"mlp.{k}_proj.bias" for k in ("gate", "up", "down")},
    "gate_up": _L + "mlp.gate_up_proj.weight",
    "output_norm": "model.norm.weight",
    "output": "lm_head.weight",
}
# Gemma norms the attention output (post_attention_layernorm) and the FFN's input and output
GEMMA_NAMES = {**HF_NAMES, "post_attn_norm": _L + "post_attention_layernorm.weight",
               "ffn_norm": _L + "pre_feedforward_layernorm.weight",
               "post_ffn_norm": _L + "post_feedforward_layernorm.weight"}
NORM_KEYS = ("attn_norm", "ffn_norm", "post_attn_norm", "post_ffn_norm", "q_norm", "k_norm", "output_norm")

# model_type -> the LlamaConfig switches it turns on (and, under "gemma_norms", whether its norm
# weights are stored as weight - 1)
FAMILIES = {
    "llama": {}, "mistral": {}, "qwen2": {},
    "qwen3": dict(qk_norm=True),
    "gemma2": dict(post_norms=True, ffn_act="gelu_tanh", gemma_norms=True),
    "gemma3_text": dict(post_norms=True, ffn_act="gelu_tanh", qk_norm=True, gemma_norms=True),
    "phi3": dict(fused_qkv=True, fused_gate_up=True),
    **MOE_FAMILIES,
}
TIED_BY_DEFAULT = ("gemma2", "gemma3_text")  # tie_word_embeddings' default in their configs
ACTIVATIONS = {"silu": "silu", "gelu_pytorch_tanh": "gelu_tanh"}


def rope_of(cfg: HFConfig, context: int, head_dim: int, params: dict | None = None) -> dict:
    """LlamaConfig's rope fields from ``rope_parameters`` (transformers 5) or ``rope_theta``/``rope_scaling``
    (``params``: one layer type's entry of a per-layer-type ``rope_parameters``)."""
    if params is None:
        params = cfg.data.get("rope_parameters") or cfg.data.get("rope_scaling") or {}
    if not isinstance(params, dict):
        raise cfg.unsupported(f"rope parameters {params!r}")
    theta = float(params.get("rope_theta", cfg.get("rope_theta", default=10000.0, kind=float)))
    partial = float(params.get("partial_rotary_factor", cfg.data.get("partial_rotary_factor") or 1.0))
    rope_dim = int(head_dim * partial)  # as transformers rounds it
    if not 0 < rope_dim <= head_dim or rope_dim % 2:
        raise cfg.unsupported(f"partial_rotary_factor {partial} of head_dim {head_dim}")
    kind = params.get("rope_type", params.get("type", "default"))
    if cfg.model_type == "phi3" and kind == "yarn":  # transformers reads Phi-3's old "yarn" as LongRoPE
        kind = "longrope"
    original = float(params.get("original_max_position_embeddings")
                     or cfg.data.get("original_max_position_embeddings") or context)
    out = {"rope_theta": theta, "rope_dim": rope_dim}
    try:
        if kind == "linear":
            out["rope_scale"] = float(params["factor"])
        elif kind == "llama3":
            out["rope_llama3"] = {
                "factor": float(params["factor"]), "low_freq_factor": float(params["low_freq_factor"]),
                "high_freq_factor": float(params["high_freq_factor"]), "original_context": original}
        elif kind == "yarn":
            out["rope_extra"] = _yarn(cfg, params, context, original)
        elif kind in ("longrope", "su"):
            out["rope_extra"] = _longrope(params, context, original)
        elif kind != "default":
            raise cfg.unsupported(f"rope type {kind!r} (supported: default, linear, llama3, yarn, longrope)")
    except (KeyError, TypeError, ValueError) as e:
        raise BlueprintError(f"{cfg.path}: {kind} rope parameters {params!r} lack or garble {e}") from None
    return out


def _yarn(cfg: HFConfig, params: dict, context: int, original: float) -> dict:
    """YaRN's rope params as transformers computes them (attention factor from ``factor``, or
    ``mscale`` / ``mscale_all_dim``, unless given)."""
    if params.get("truncate", True) is not True:
        raise cfg.unsupported("yarn with truncate false")
    factor = float(params.get("factor") or context / original)

    def mscale_of(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0
    attention_factor = params.get("attention_factor")
    if attention_factor is None:
        m, m_all = params.get("mscale"), params.get("mscale_all_dim")
        attention_factor = mscale_of(factor, m) / mscale_of(factor, m_all) if m and m_all else mscale_of(factor)
    return {"yarn": {"factor": factor, "original_context": original,
                     "beta_fast": float(params.get("beta_fast") or 32), "beta_slow": float(params.get("beta_slow") or 1)},
            "mscale": float(attention_factor)}


def _longrope(params: dict, context: int, original: float) -> dict:
    """LongRoPE's rope params: short / long per-pair divisors and the attention factor transformers uses."""
    factor = float(params.get("factor") or context / original)
    attention_factor = params.get("attention_factor")
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))
    return {"longrope_short": [float(f) for f in params["short_factor"]],
            "longrope_long": [float(f) for f in params["long_factor"]],
            "longrope_context": int(original), "mscale": float(attention_factor)}


def layer_windows(cfg: HFConfig, n_layers: int) -> tuple:
    """Sliding window per layer (0 = full causal attention), as transformers decides it."""
    window = cfg.get("sliding_window", default=0)
    types = cfg.data.get("layer_types")
    if cfg.model_type in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe") and not cfg.data.get("use_sliding_window"):
        return ()
    if isinstance(types, list) and len(types) == n_layers:
        return tuple(window if t == "sliding_attention" else 0 for t in types)
    if cfg.model_type in ("qwen2", "qwen2_moe"):
        first = cfg.get("max_window_layers", default=n_layers)
        return tuple(window if l >= first else 0 for l in range(n_layers))
    if cfg.model_type in ("gemma2", "gemma3_text"):  # configs from before layer_types: every n-th layer is global
        pattern = 2 if cfg.model_type == "gemma2" else cfg.get("sliding_window_pattern", default=6)
        return tuple(window if (l + 1) % max(pattern, 1) else 0 for l in range(n_layers))
    return (window,) * n_layers if cfg.model_type in ("mistral", "phi3", "mixtral") and window else ()


def _family_fields(cfg: HFConfig, dim: int, head_dim: int, context: int) -> dict:
    """The LlamaConfig fields of the checkpoint's family: its switches, Gemma's scalars and ropes."""
    fields = {k: v for k, v in FAMILIES[cfg.model_type].items() if k != "gemma_norms"}
    act = cfg.data.get("hidden_activation") or cfg.data.get("hidden_act") or "silu"
    if ACTIVATIONS.get(act) != fields.get("ffn_act", "silu"):
        raise cfg.unsupported(f"hidden activation {act!r}")
    params = cfg.data.get("rope_parameters")
    if cfg.model_type == "gemma3_text" and isinstance(params, dict) and "full_attention" in params:
        local = params.get("sliding_attention") or {}
        if local.get("rope_type", "default") != "default":
            raise cfg.unsupported(f"sliding-layer rope type {local.get('rope_type')!r}")
        fields["local_rope_theta"] = float(local.get("rope_theta", 10000.0))
        fields.update(rope_of(cfg, context, head_dim, params["full_attention"]))
    elif cfg.model_type == "gemma3_text":
        fields["local_rope_theta"] = cfg.get("rope_local_base_freq", default=10000.0, kind=float)
        fields.update(rope_of(cfg, context, head_dim))
    else:
        fields.update(rope_of(cfg, context, head_dim))
    if cfg.model_type.startswith("gemma"):
        fields["embed_scale"] = float(np.float32(dim ** 0.5))
        fields["attn_scale"] = cfg.get("query_pre_attn_scalar", kind=float) ** -0.5
        fields["attn_softcap"] = cfg.get("attn_logit_softcapping", default=0.0, kind=float)
        fields["final_softcap"] = cfg.get("final_logit_softcapping", default=0.0, kind=float)
    return fields


def from_hf(cfg: HFConfig, ckpt: HFCheckpoint) -> Imported:
    """Import a llama / mistral / qwen2 / qwen3 / gemma2 / gemma3_text / phi3 checkpoint."""
    dim, n_heads = cfg.get("hidden_size"), cfg.get("num_attention_heads")
    n_kv = cfg.get("num_key_value_heads", default=n_heads)
    if n_heads == 0 or n_kv == 0 or n_heads % n_kv:
        raise cfg.unsupported(f"num_attention_heads {n_heads} with num_key_value_heads {n_kv}")
    head_dim = cfg.get("head_dim", default=dim // n_heads)
    n_layers, ffn, vocab = cfg.get("num_hidden_layers"), cfg.get("intermediate_size"), cfg.get("vocab_size")
    context = cfg.get("max_position_embeddings", default=4096)
    family = FAMILIES[cfg.model_type]
    fields = _family_fields(cfg, dim, head_dim, context)
    names = GEMMA_NAMES if family.get("gemma_norms") else HF_NAMES
    moe = HFMoe(cfg, dim, n_layers) if cfg.model_type in MOE_FAMILIES else None
    if moe:
        names = {**names, **HF_MOE_NAMES}
    attn_bias = cfg.model_type in ("qwen2", "qwen2_moe") or bool(cfg.data.get("attention_bias"))
    shapes = {"embed": (vocab, dim), "output_norm": (dim,)}
    if not cfg.data.get("tie_word_embeddings", cfg.model_type in TIED_BY_DEFAULT):
        shapes["output"] = (vocab, dim)
    q_rows, kv_rows = n_heads * head_dim, n_kv * head_dim
    layer_shapes = {"attn_norm": (dim,), "ffn_norm": (dim,)}
    if family.get("fused_qkv"):
        layer_shapes["qkv"] = (q_rows + 2 * kv_rows, dim)
    else:
        layer_shapes.update(q=(q_rows, dim), k=(kv_rows, dim), v=(kv_rows, dim))
    layer_shapes["o"] = (dim, q_rows)
    if family.get("fused_gate_up"):
        layer_shapes["gate_up"] = (2 * ffn, dim)
    else:
        layer_shapes.update(gate=(ffn, dim), up=(ffn, dim))
    layer_shapes["down"] = (dim, ffn)
    if family.get("qk_norm"):
        layer_shapes.update(q_norm=(head_dim,), k_norm=(head_dim,))
    if family.get("qk_norm_full"):
        layer_shapes.update(q_norm=(q_rows,), k_norm=(kv_rows,))
    if family.get("post_norms"):
        layer_shapes.update(post_attn_norm=(dim,), post_ffn_norm=(dim,))
    if attn_bias:
        layer_shapes.update(q_bias=(q_rows,), k_bias=(kv_rows,), v_bias=(kv_rows,))
        if cfg.data.get("attention_bias"):
            layer_shapes["o_bias"] = (dim,)
    if cfg.data.get("mlp_bias"):
        layer_shapes.update(gate_bias=(ffn,), up_bias=(ffn,), down_bias=(dim,))
    weights = {}

    def take(key: str, shape: tuple, layer: int | None) -> None:
        name = names[key].format(l=layer)
        weights[name] = ckpt.take(name, shape)
        if family.get("gemma_norms") and key in NORM_KEYS:  # HF scales by (1 + weight)
            weights[name] = weights[name].astype(np.float32) + np.float32(1.0)
    for key, shape in shapes.items():
        take(key, shape, None)
    for l in range(n_layers):
        for key, shape in layer_shapes.items():
            if moe and moe.is_moe_layer(l) and key.split("_")[0] in ("gate", "up", "down"):
                continue  # an MoE layer: its experts instead of the dense FFN
            take(key, shape, l)
        if moe and moe.is_moe_layer(l):
            weights.update(moe.take(ckpt, l))
    config = LlamaConfig(
        n_layers=n_layers, dim=dim, n_heads=n_heads, n_kv_heads=n_kv, head_dim=head_dim, ffn_dim=ffn,
        vocab_size=vocab, norm_eps=cfg.get("rms_norm_eps", default=1e-6, kind=float), rope_style="half",
        context_length=context, layer_windows=layer_windows(cfg, n_layers), **fields)
    weights.update(constants(config))
    graph = build_llama_graph(config, names, specs_of(weights), moe.config.ffn if moe else None)
    return Imported(graph, {n: weights[n] for n in graph.weights}, {"task": "generate", "dims": vars(ModelDims.of(config))}, cfg.path)
