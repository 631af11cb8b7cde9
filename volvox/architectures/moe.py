"""Mixture-of-experts feed-forward blocks for the LLaMA-family decoder (llama.py): Mixtral, Qwen2-MoE,
Qwen3-MoE (with Qwen3's per-head QK-norm) and OLMoE (QK-norm over the whole q / k projections), from
Hugging Face folders and from GGUF files.

A layer's block is the router (a ``linear`` to one logit per expert) and the ``moe`` op (ops/moe.py:
top-k routing, the chosen experts' SwiGLU FFNs, weighted sum); where the model has a shared expert
that every token runs (Qwen2-MoE), its SwiGLU is ordinary nodes whose output the op adds, scaled by
``sigmoid(W_shexp_gate x)`` when the model gates it. Expert weights are 3-D stacks
(n_experts, out, in): a GGUF file's ``ffn_*_exps`` tensors as they are (quantized ones stay packed),
a HF checkpoint's per-expert matrices stacked at load (or its fused ``gate_up_proj`` /
``down_proj`` stacks read as views).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from volvox.architectures.builder import GraphBuilder
from volvox.architectures.llama import LlamaConfig, gated_ffn
from volvox.errors import UnsupportedError
from volvox.formats.hf_folder import HFCheckpoint, HFConfig
from volvox.ir.graph import TensorSpec


@dataclass(frozen=True)
class MoeConfig:
    """How a model routes its tokens and which of its layers have experts."""

    n_experts: int
    top_k: int
    norm_topk: bool               # divide the chosen experts' scores by their sum
    gating: str = "softmax"       # or "sigmoid"
    dense_layers: tuple = ()      # layers with the dense SwiGLU block instead (Qwen2/3-MoE's mlp_only_layers)

    def ffn(self, b: GraphBuilder, cfg: LlamaConfig, p: str, l: int, x: str) -> str:
        """Layer ``l``'s feed-forward block on x (seq, dim); returns its output (seq, dim)."""
        if l in self.dense_layers:
            return gated_ffn(b, cfg, p, l, x)
        logits = b.linear(p + "router", x, "router", l, p + "router_logits")  # (seq, n_experts)
        experts = {k: b.weight(k + "_exps", l) for k in ("gate", "up", "down")}  # (n_experts, out, in) each
        inputs = {"x": x, "logits": logits, **experts}
        if _has(b, "gate_shexp", l):  # the shared expert, gated by sigmoid(W x) where the model has that gate
            g = b.linear(p + "shexp_gate_proj", x, "gate_shexp", l, p + "shexp_gate")  # (seq, shared_ffn)
            u = b.linear(p + "shexp_up_proj", x, "up_shexp", l, p + "shexp_up")
            g = b.add("silu", p + "shexp_act", {"x": g}, p + "shexp_silu")
            m = b.add("mul", p + "shexp_swiglu", {"a": g, "b": u}, p + "shexp_swiglu")
            inputs["shared"] = b.linear(p + "shexp_down_proj", m, "down_shexp", l, p + "shexp_down")  # (seq, dim)
            if _has(b, "router_shexp", l):
                inputs["shared_logit"] = b.linear(p + "shexp_router", x, "router_shexp", l, p + "shexp_logit")  # (seq, 1)
        return b.add("moe", p + "moe", inputs, p + "moe", top_k=self.top_k, gating=self.gating,
                     norm_topk=self.norm_topk)  # (seq, dim)


def _has(b: GraphBuilder, key: str, l: int) -> bool:
    """Whether the names table has ``key`` and the file has its tensor for layer ``l``."""
    return key in b.names and b.names[key].format(l=l) in b.weights


# The MoE model_types of HF folders -> the LlamaConfig switches of their attention (hf_llama.FAMILIES)
MOE_FAMILIES = {"mixtral": {}, "qwen2_moe": {}, "qwen3_moe": dict(qk_norm=True), "olmoe": dict(qk_norm_full=True)}
# ... and the MoE architectures of GGUF files -> (RoPE layout, switches, sliding pattern) (from_gguf.GGUF_FAMILIES;
# Mixtral is architecture "llama" with expert_count)
GGUF_MOE_FAMILIES = {"qwen2moe": ("half", {}, 0), "qwen3moe": ("half", dict(qk_norm=True), 0),
                     "olmoe": ("half", dict(qk_norm_full=True), 0)}

# Expert tensors in GGUF files (llama.cpp's names; "{l}" is the layer index).
GGUF_MOE_NAMES = {
    "router": "blk.{l}.ffn_gate_inp.weight",
    "gate_exps": "blk.{l}.ffn_gate_exps.weight",
    "up_exps": "blk.{l}.ffn_up_exps.weight",
    "down_exps": "blk.{l}.ffn_down_exps.weight",
    "router_shexp": "blk.{l}.ffn_gate_inp_shexp.weight",
    "gate_shexp": "blk.{l}.ffn_gate_shexp.weight",
    "up_shexp": "blk.{l}.ffn_up_shexp.weight",
    "down_shexp": "blk.{l}.ffn_down_shexp.weight",
}

# Where the graph's names of a HF MoE layer point (the stacks are made at load under these names).
_L = "model.layers.{l}."
HF_MOE_NAMES = {
    "router": _L + "mlp.gate.weight",
    **{f"{k}_exps": _L + f"mlp.experts.{k}_stack" for k in ("gate", "up", "down")},
    "router_shexp": _L + "mlp.shared_expert_gate.weight",
    **{f"{k}_shexp": _L + f"mlp.shared_expert.{k}_proj.weight" for k in ("gate", "up", "down")},
}
# Per-expert matrices as HF checkpoints store them: (prefix of the block, {our key: file name}).
_HF_EXPERT_LAYOUTS = {
    "mixtral": ("block_sparse_moe.", {"gate": "w1", "down": "w2", "up": "w3"}),
    "default": ("mlp.", {"gate": "gate_proj", "up": "up_proj", "down": "down_proj"}),
}


class HFMoe:
    """A HF MoE checkpoint's routing (MoeConfig) and its expert weights, read per layer for hf_llama.from_hf."""

    def __init__(self, cfg: HFConfig, dim: int, n_layers: int):
        get = cfg.get
        n_experts = get("num_local_experts", "num_experts")
        top_k = get("num_experts_per_tok")
        if not 1 <= top_k <= n_experts:
            raise cfg.unsupported(f"num_experts_per_tok {top_k} of {n_experts} experts")
        kind = cfg.model_type
        self.block, self.files = _HF_EXPERT_LAYOUTS.get(kind, _HF_EXPERT_LAYOUTS["default"])
        self.ffn_dim = get("moe_intermediate_size", "intermediate_size")
        self.shared_dim = get("shared_expert_intermediate_size", default=0)
        sparse_step = get("decoder_sparse_step", default=1)
        only_dense = set(cfg.data.get("mlp_only_layers") or ())
        dense = tuple(l for l in range(n_layers)
                      if l in only_dense or sparse_step <= 0 or (l + 1) % sparse_step)
        norm = True if kind == "mixtral" else bool(cfg.data.get("norm_topk_prob", False))
        if cfg.data.get("clip_qkv") is not None:
            raise cfg.unsupported("clip_qkv")
        self.config = MoeConfig(n_experts=n_experts, top_k=top_k, norm_topk=norm, dense_layers=dense)
        self.dim = dim

    def is_moe_layer(self, l: int) -> bool:
        """Whether layer ``l`` has experts (else its dense block's weights are read)."""
        return l not in self.config.dense_layers

    def take(self, ckpt: HFCheckpoint, l: int) -> dict[str, np.ndarray]:
        """Layer ``l``'s router, expert stacks (n_experts, out, in) and shared expert, by graph name."""
        E, F, D = self.config.n_experts, self.ffn_dim, self.dim
        names = {k: v.format(l=l) for k, v in HF_MOE_NAMES.items()}
        prefix = ckpt.prefix("gate.weight", (_L.format(l=l) + self.block, _L.format(l=l) + "mlp."))
        out = {names["router"]: ckpt.take(prefix + "gate.weight", (E, D))}
        fused = prefix + "experts."
        if ckpt.has(fused + "gate_up_proj"):  # transformers 5: one (E, 2F, D) and one (E, D, F) stack
            gate_up = ckpt.take(fused + "gate_up_proj", (E, 2 * F, D))
            out[names["gate_exps"]], out[names["up_exps"]] = gate_up[:, :F], gate_up[:, F:]
            out[names["down_exps"]] = ckpt.take(fused + "down_proj", (E, D, F))
        else:
            shapes = {"gate": (F, D), "up": (F, D), "down": (D, F)}
            for k, shape in shapes.items():
                mats = [ckpt.take(f"{prefix}experts.{e}.{self.files[k]}.weight", shape) for e in range(E)]
                out[names[k + "_exps"]] = np.stack(mats)  # (E, out, in)
        if self.shared_dim:
            S = self.shared_dim
            for k, shape in {"gate": (S, D), "up": (S, D), "down": (D, S)}.items():
                out[names[k + "_shexp"]] = ckpt.take(names[k + "_shexp"], shape)
            if ckpt.has(names["router_shexp"]):
                out[names["router_shexp"]] = ckpt.take(names["router_shexp"], (1, D))
        return out


def gguf_moe_config(md: dict, arch: str, path: str) -> MoeConfig | None:
    """The routing of a GGUF MoE model (None for a dense one); UnsupportedError for gating volvox lacks."""
    n_experts = int(md.get(f"{arch}.expert_count", 0))
    if not n_experts:
        return None
    top_k = int(md.get(f"{arch}.expert_used_count", 0))
    if not 1 <= top_k <= n_experts:
        raise UnsupportedError(f"{path}: expert_used_count {top_k} of {n_experts} experts")
    if md.get(f"{arch}.expert_gating_func", 1) != 1:
        raise UnsupportedError(f"{path}: expert_gating_func {md[f'{arch}.expert_gating_func']!r} (supported: 1, softmax)")
    # as llama.cpp runs these architectures: softmax scores; Mixtral (arch llama) and Qwen3-MoE renormalise
    # the chosen experts' scores, Qwen2-MoE and OLMoE do not (whatever the HF config said)
    return MoeConfig(n_experts=n_experts, top_k=top_k, norm_topk=arch in ("llama", "qwen3moe"))


def gguf_moe_specs(specs: dict[str, TensorSpec]) -> dict[str, TensorSpec]:
    """A GGUF MoE file's tensor specs as the graph reads them: a shared-expert gate stored as a vector
    (dim,), as llama.cpp's converter writes it, becomes the (1, dim) matrix of its one-logit linear."""
    return {n: TensorSpec(n, (1,) + s.shape, s.dtype) if len(s.shape) == 1 and n.endswith(".ffn_gate_inp_shexp.weight")
            else s for n, s in specs.items()}


def as_spec(w, spec: TensorSpec):
    """A weight array reshaped to its graph spec's shape where that differs only by a leading 1 (a vector
    read as a one-row matrix); QuantTensors and everything else as they are."""
    if isinstance(w, np.ndarray) and w.shape != spec.shape and (1,) + w.shape == spec.shape:
        return w.reshape(spec.shape)
    return w
