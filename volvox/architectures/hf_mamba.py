"""Mamba-family Hugging Face checkpoints (model_type mamba, mamba2, bamba) -> the graphs of mamba.py.

At load A_log becomes A = -exp(A_log) and the conv weight (channels, 1, kernel) becomes (channels,
kernel), as GGUF writers store them; every tensor is checked against the shape config.json implies.
"""

from __future__ import annotations

import numpy as np

from volvox.architectures.mamba import (UNLIMITED_CONTEXT, HybridConfig, MambaConfig, build_hybrid_graph,
                                        build_mamba_graph, imported_model)
from volvox.formats.hf_folder import HFCheckpoint, HFConfig, specs_of
from volvox.formats.imported import Imported

# Weight names by model_type; "{l}" is the layer index. *_bias entries are optional.
_B = "backbone.layers.{l}."
HF_NAMES = {
    "embed": "backbone.embeddings.weight", "norm": _B + "norm.weight",
    "in_proj": _B + "mixer.in_proj.weight", "in_proj_bias": _B + "mixer.in_proj.bias",
    "conv": _B + "mixer.conv1d.weight", "conv_bias": _B + "mixer.conv1d.bias",
    "x_proj": _B + "mixer.x_proj.weight", "dt_proj": _B + "mixer.dt_proj.weight", "dt_proj_bias": _B + "mixer.dt_proj.bias",
    "dt_bias": _B + "mixer.dt_bias", "A": _B + "mixer.A_log", "D": _B + "mixer.D", "mixer_norm": _B + "mixer.norm.weight",
    "out_proj": _B + "mixer.out_proj.weight", "out_proj_bias": _B + "mixer.out_proj.bias",
    "output_norm": "backbone.norm_f.weight", "output": "lm_head.weight",
}

_M = "model.layers.{l}."
BAMBA_HF_NAMES = {
    "embed": "model.embed_tokens.weight", "norm": _M + "input_layernorm.weight",
    "in_proj": _M + "mamba.in_proj.weight", "in_proj_bias": _M + "mamba.in_proj.bias",
    "conv": _M + "mamba.conv1d.weight", "conv_bias": _M + "mamba.conv1d.bias", "dt_bias": _M + "mamba.dt_bias",
    "A": _M + "mamba.A_log", "D": _M + "mamba.D", "mixer_norm": _M + "mamba.norm.weight",
    "out_proj": _M + "mamba.out_proj.weight", "out_proj_bias": _M + "mamba.out_proj.bias",
    **{k: _M + f"self_attn.{k}_proj.weight" for k in "qkvo"},
    **{f"{k}_bias": _M + f"self_attn.{k}_proj.bias" for k in "qkvo"},
    "ffn_norm": _M + "pre_ff_layernorm.weight",
    **{k: _M + f"feed_forward.{k}_proj.weight" for k in ("gate", "up", "down")},
    **{f"{k}_bias": _M + f"feed_forward.{k}_proj.bias" for k in ("gate", "up", "down")},
    "output_norm": "model.final_layernorm.weight", "output": "lm_head.weight",
}


def _json_float(value) -> float | None:
    """A number of config.json: plain, or transformers' {"__float__": "Infinity"} form; None if neither."""
    if isinstance(value, dict) and set(value) == {"__float__"}:
        value = value["__float__"]
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _check_time_step_limit(cfg: HFConfig) -> None:
    """Mamba-2's dt clamp: only the default (0, inf), which softplus already keeps to, is supported."""
    limit = cfg.data.get("time_step_limit", [0.0, float("inf")])
    if not isinstance(limit, (list, tuple)) or [_json_float(v) for v in limit] != [0.0, float("inf")]:
        raise cfg.unsupported(f"time_step_limit {limit!r} (only the default (0, inf))")


def _hf_config(cfg: HFConfig) -> MambaConfig:
    if cfg.data.get("hidden_act", "silu") != "silu":
        raise cfg.unsupported(f"hidden_act {cfg.data.get('hidden_act')!r}")
    dim = cfg.get("hidden_size")
    common = dict(n_layers=cfg.get("num_hidden_layers"), dim=dim, state_size=cfg.get("state_size"),
                  conv_kernel=cfg.get("conv_kernel"), vocab_size=cfg.get("vocab_size"),
                  norm_eps=cfg.get("layer_norm_epsilon", default=1e-5, kind=float),
                  context_length=cfg.get("max_position_embeddings", default=UNLIMITED_CONTEXT))
    if cfg.model_type == "mamba":
        return MambaConfig(version=1, d_inner=cfg.get("intermediate_size"), dt_rank=cfg.get("time_step_rank"), **common)
    if cfg.data.get("norm_before_gate", False):
        raise cfg.unsupported("norm_before_gate")
    _check_time_step_limit(cfg)
    n_heads, head_dim = cfg.get("num_heads"), cfg.get("head_dim")
    d_inner = cfg.get("intermediate_size", default=int(cfg.get("expand", default=2, kind=float) * dim))
    groups = cfg.get("n_groups", default=1)
    if n_heads * head_dim != d_inner or not groups or n_heads % groups:
        raise cfg.unsupported(f"num_heads {n_heads} x head_dim {head_dim} with intermediate size {d_inner} "
                              f"and n_groups {groups}")
    return MambaConfig(version=2, d_inner=d_inner, n_heads=n_heads, n_groups=groups, **common)


def _ssm_shapes(c: MambaConfig, conv_bias: bool, proj_bias: bool) -> dict[str, tuple]:
    """Shapes of one SSM layer's mixer tensors in a Hugging Face checkpoint, by names-table key."""
    di, n, k, cc = c.d_inner, c.state_size, c.conv_kernel, c.conv_channels
    if c.version == 1:
        shapes = {"in_proj": (2 * di, c.dim), "conv": (di, 1, k), "x_proj": (c.dt_rank + 2 * n, di),
                  "dt_proj": (di, c.dt_rank), "dt_proj_bias": (di,), "A": (di, n), "D": (di,)}
    else:
        shapes = {"in_proj": (di + cc + c.n_heads, c.dim), "conv": (cc, 1, k), "dt_bias": (c.n_heads,),
                  "A": (c.n_heads,), "D": (c.n_heads,), "mixer_norm": (di,)}
    shapes["out_proj"] = (c.dim, di)
    if conv_bias:
        shapes["conv_bias"] = (cc,)
    if proj_bias:
        shapes.update(in_proj_bias=(shapes["in_proj"][0],), out_proj_bias=(c.dim,))
    return shapes


def _take_layer(ckpt: HFCheckpoint, names: dict, layer: int, shapes: dict, weights: dict) -> None:
    """Layer ``layer``'s tensors into ``weights``: A_log as A = -exp(A_log), the conv weight as (channels, kernel)."""
    for key, shape in shapes.items():
        name = names[key].format(l=layer)
        w = ckpt.take(name, shape)
        if key == "A":
            w = -np.exp(w.astype(np.float32))
        elif key == "conv":
            w = np.ascontiguousarray(w.reshape(shape[0], shape[-1]), dtype=np.float32)
        weights[name] = w


def _take_head(ckpt: HFCheckpoint, names: dict, vocab: int, dim: int, tied: bool) -> dict:
    """The embedding, the final norm and (untied) the output projection."""
    keys = ("embed", "output_norm") if tied else ("embed", "output_norm", "output")
    shapes = {"embed": (vocab, dim), "output_norm": (dim,), "output": (vocab, dim)}
    return {names[k]: ckpt.take(names[k], shapes[k]) for k in keys}


def from_hf(cfg: HFConfig, ckpt: HFCheckpoint) -> Imported:
    """Import a mamba / mamba2 checkpoint (A_log taken to A = -exp(A_log) at load)."""
    c = _hf_config(cfg)
    shapes = {**_ssm_shapes(c, cfg.data.get("use_conv_bias", True), cfg.data.get("use_bias", False)), "norm": (c.dim,)}
    # MambaConfig ties the head to the embedding by default, Mamba2Config does not
    weights = _take_head(ckpt, HF_NAMES, c.vocab_size, c.dim, cfg.data.get("tie_word_embeddings", c.version == 1))
    for l in range(c.n_layers):
        _take_layer(ckpt, HF_NAMES, l, shapes, weights)
    return imported_model(c, build_mamba_graph(c, HF_NAMES, specs_of(weights)), weights, cfg.path)


def _bamba_config(cfg: HFConfig) -> HybridConfig:
    if cfg.data.get("hidden_act", "silu") != "silu":
        raise cfg.unsupported(f"hidden_act {cfg.data.get('hidden_act')!r}")
    _check_time_step_limit(cfg)
    rope = cfg.data.get("rope_parameters") or {}
    if not isinstance(rope, dict) or rope.get("rope_type", "default") != "default":
        raise cfg.unsupported(f"rope parameters {rope!r} (only the default rope)")
    dim, n_layers = cfg.get("hidden_size"), cfg.get("num_hidden_layers")
    n_heads = cfg.get("num_attention_heads")
    n_kv = cfg.get("num_key_value_heads", default=n_heads)
    head_dim = cfg.get("head_dim", default=dim // n_heads if n_heads else 0)
    attention = set(cfg.data.get("attn_layer_indices") or [])
    kinds = tuple("attention" if l in attention else "ssm" for l in range(n_layers))
    ssm_heads, groups = cfg.get("mamba_n_heads"), cfg.get("mamba_n_groups", default=1)
    d_inner = int(cfg.get("mamba_expand", default=2, kind=float) * dim)
    if (not n_heads or n_kv == 0 or n_heads % n_kv or not ssm_heads or d_inner % ssm_heads or not groups
            or ssm_heads % groups or cfg.get("mamba_d_head", default=d_inner // ssm_heads) * ssm_heads != d_inner):
        raise cfg.unsupported(f"attention heads {n_heads} / {n_kv}, mamba heads {ssm_heads} in {groups} groups "
                              f"over {d_inner} channels")
    rope_dim = int(head_dim * float(rope.get("partial_rotary_factor", 1.0)))
    ssm = MambaConfig(version=2, n_layers=kinds.count("ssm"), dim=dim, d_inner=d_inner,
                      state_size=cfg.get("mamba_d_state"), conv_kernel=cfg.get("mamba_d_conv"),
                      vocab_size=cfg.get("vocab_size"), norm_eps=cfg.get("rms_norm_eps", default=1e-5, kind=float),
                      context_length=cfg.get("max_position_embeddings", default=UNLIMITED_CONTEXT),
                      n_heads=ssm_heads, n_groups=groups)
    return HybridConfig(ssm=ssm, layer_kinds=kinds, n_heads=n_heads, n_kv_heads=n_kv, head_dim=head_dim,
                        rope_theta=float(rope.get("rope_theta", 10000.0)), rope_dim=rope_dim,
                        ffn_dim=cfg.get("intermediate_size"))


def from_hf_bamba(cfg: HFConfig, ckpt: HFCheckpoint) -> Imported:
    """Import a bamba checkpoint (Mamba-2 and attention layers, SwiGLU feed-forward blocks)."""
    c = _bamba_config(cfg)
    dim, f = c.ssm.dim, c.ffn_dim
    mlp_bias, attn_bias = cfg.data.get("mlp_bias", False), cfg.data.get("attention_bias", False)
    common = {"norm": (dim,), "ffn_norm": (dim,), "gate": (f, dim), "up": (f, dim), "down": (dim, f)}
    if mlp_bias:
        common.update(gate_bias=(f,), up_bias=(f,), down_bias=(dim,))
    attention = {"q": (c.n_heads * c.head_dim, dim), "k": (c.n_kv_heads * c.head_dim, dim),
                 "v": (c.n_kv_heads * c.head_dim, dim), "o": (dim, c.n_heads * c.head_dim)}
    if attn_bias:
        attention.update({f"{k}_bias": (s[0],) for k, s in attention.items()})
    ssm = _ssm_shapes(c.ssm, cfg.data.get("mamba_conv_bias", True), cfg.data.get("mamba_proj_bias", False))
    weights = _take_head(ckpt, BAMBA_HF_NAMES, c.ssm.vocab_size, dim, cfg.data.get("tie_word_embeddings", False))
    for l, kind in enumerate(c.layer_kinds):
        _take_layer(ckpt, BAMBA_HF_NAMES, l, {**common, **(ssm if kind == "ssm" else attention)}, weights)
    return imported_model(c, build_hybrid_graph(c, BAMBA_HF_NAMES, specs_of(weights)), weights, cfg.path)
