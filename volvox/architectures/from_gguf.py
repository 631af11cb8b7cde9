"""LLaMA-family language models straight from a GGUF file: its metadata as the architecture's
hyperparameters, its tensors as the weights (mmapped, quantized blocks kept packed), its tokenizer.

The architectures are llama.cpp's names (GGUF_FAMILIES). llama.cpp's converter permutes LLaMA's
q/k rows into the interleaved RoPE layout and leaves the others in HF's half layout; it stores
Gemma's norm weights with HF's ``+ 1`` already added, Phi-3's Q/K/V and gate/up fused, LLaMA-3.1's
frequency scaling as the ``rope_freqs`` tensor and Phi-3's LongRoPE factors as the
``rope_factors_short`` / ``rope_factors_long`` tensors.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from volvox.errors import GGUFError, UnsupportedError
from volvox.ir.graph import TensorSpec
from volvox.ops.linear import WEIGHT_DTYPES
from volvox.ir.quant_blocks import SUPPORTED_QTYPES, QuantTensor
from volvox.tokenizers.gguf_vocab import tokenizer_from_gguf
from volvox.formats.gguf import GGUFFile
from volvox.formats.imported import Deferred, Imported, ModelDims
from volvox.architectures import mamba
from volvox.architectures.llama import GGUF_NAMES, LlamaConfig, build_llama_graph, constants
from volvox.architectures.moe import GGUF_MOE_FAMILIES, GGUF_MOE_NAMES, as_spec, gguf_moe_config, gguf_moe_specs

# Gemma's GELU as llama.cpp computes it (through an fp16 table), which quantized weights need to give its logits
_GEMMA = dict(post_norms=True, ffn_act="gelu_f16_table")
# architecture -> (RoPE layout, LlamaConfig switches, default sliding-window layer pattern: every
# n-th layer is global, 0 = no sliding layers)
GGUF_FAMILIES = {
    "llama": ("interleaved", {}, 0), "mistral": ("interleaved", {}, 0), "qwen2": ("half", {}, 0),
    "qwen3": ("half", dict(qk_norm=True), 0),
    "gemma2": ("half", _GEMMA, 2),
    "gemma3": ("half", dict(_GEMMA, qk_norm=True), 6),
    "phi3": ("half", {}, 0),  # llama.cpp runs Phi-3 without its sliding window, and so does volvox
    **GGUF_MOE_FAMILIES,
}
LLAMA_ARCHITECTURES = tuple(GGUF_FAMILIES)


def _layer_windows(md: dict, arch: str, path: str, n_layers: int, default_pattern: int) -> tuple:
    """Per-layer sliding windows as llama.cpp sets them: layer l slides unless l % pattern == pattern - 1,
    or as the file's boolean ``sliding_window_pattern`` array says."""
    window = int(md.get(f"{arch}.attention.sliding_window", 4096 if arch == "gemma2" else 0) or 0)
    if not default_pattern or not window:
        return ()
    pattern = md.get(f"{arch}.attention.sliding_window_pattern", default_pattern)
    if not isinstance(pattern, (int, np.integer)):  # one flag per layer
        flags = [bool(s) for s in np.asarray(pattern).reshape(-1)]
        if len(flags) != n_layers:
            raise GGUFError(f"{path}: {arch}.attention.sliding_window_pattern has {len(flags)} flags for {n_layers} layers")
        return tuple(window if s else 0 for s in flags)
    pattern = int(pattern)
    return tuple(window if pattern == 0 or l % pattern < pattern - 1 else 0 for l in range(n_layers))


def _rope_fields(md: dict, arch: str, path: str, tensors: dict, read) -> dict:
    """LlamaConfig's rope fields: linear / YaRN scaling from the metadata, frequency factors from
    the rope_freqs (LLaMA 3.1) or rope_factors_* (Phi-3 LongRoPE) tensors."""
    scaling = md.get(f"{arch}.rope.scaling.type", "none")
    factor = float(md.get(f"{arch}.rope.scaling.factor", 1.0) or 1.0)
    original = md.get(f"{arch}.rope.scaling.original_context_length")
    fields, extra = {}, {}
    if scaling == "linear":
        fields["rope_scale"] = factor
    elif scaling == "yarn":
        if original is None:
            raise GGUFError(f"{path}: yarn rope scaling needs {arch}.rope.scaling.original_context_length")
        if float(md.get(f"{arch}.rope.scaling.yarn_log_multiplier", 0.0) or 0.0):
            raise UnsupportedError(f"{path}: yarn rope scaling with {arch}.rope.scaling.yarn_log_multiplier")
        extra["yarn"] = {"factor": factor, "original_context": float(original),
                         "beta_fast": float(md.get(f"{arch}.rope.scaling.yarn_beta_fast", 32.0)),
                         "beta_slow": float(md.get(f"{arch}.rope.scaling.yarn_beta_slow", 1.0))}
        extra["mscale"] = float(md.get(f"{arch}.rope.scaling.attn_factor", 1.0)) * (
            1.0 + 0.1 * math.log(factor) if factor > 1 else 1.0)
    elif scaling not in ("none", "longrope"):
        raise UnsupportedError(f"{path}: rope scaling {scaling!r} is not supported (supported: none, linear, yarn)")
    if "rope_freqs.weight" in tensors:
        extra["freq_factors"] = [float(f) for f in read("rope_freqs.weight")]
    elif "rope_factors_short.weight" in tensors:
        if original is None:
            raise GGUFError(f"{path}: LongRoPE factors need {arch}.rope.scaling.original_context_length")
        extra.update(longrope_short=[float(f) for f in read("rope_factors_short.weight")],
                     longrope_long=[float(f) for f in read("rope_factors_long.weight")],
                     longrope_context=int(original), mscale=float(md.get(f"{arch}.rope.scaling.attn_factor", 1.0)))
    return {**fields, "rope_extra": extra} if extra else fields


def llama_config_from_gguf(md: dict, path: str, tensors: dict | None = None, read=None) -> LlamaConfig:
    """LlamaConfig from GGUF metadata (and the shapes / values of its rope factor and fused
    tensors, ``tensors``: name -> shape, ``read``: name -> array); GGUFError naming the missing key."""
    arch = md.get("general.architecture")
    if arch not in GGUF_FAMILIES:
        raise UnsupportedError(f"{path}: architecture {arch!r} is not supported "
                               f"(supported: {', '.join(tuple(GGUF_FAMILIES) + mamba.GGUF_ARCHITECTURES)})")
    tensors = tensors or {}
    style, switches, pattern = GGUF_FAMILIES[arch]

    def get(key, default=None):
        value = md.get(f"{arch}.{key}", default)
        if value is None:
            raise GGUFError(f"{path}: metadata key {arch}.{key} is missing")
        return value

    n_heads = int(get("attention.head_count"))
    dim = int(get("embedding_length"))
    if n_heads <= 0 or (f"{arch}.attention.key_length" not in md and dim % n_heads):
        raise GGUFError(f"{path}: embedding_length {dim} is not a multiple of head_count {n_heads}")
    head_dim = int(get("attention.key_length", dim // n_heads))
    if int(get("attention.value_length", head_dim)) != head_dim:
        raise UnsupportedError(f"{path}: value heads of another size than key heads are not supported")
    rope_dim = int(get("rope.dimension_count", head_dim))
    if not 0 < rope_dim <= head_dim or rope_dim % 2:
        raise GGUFError(f"{path}: rope dimension count {rope_dim} must be even and within head dim {head_dim}")
    tokens = md.get("tokenizer.ggml.tokens")
    n_layers, ffn = int(get("block_count")), int(get("feed_forward_length"))
    fields = dict(switches)
    if "blk.0.attn_qkv.weight" in tensors:
        fields["fused_qkv"] = True
    if "blk.0.ffn_gate.weight" not in tensors and tuple(tensors.get("blk.0.ffn_up.weight", ()))[:1] == (2 * ffn,):
        fields["fused_gate_up"] = True
    if arch.startswith("gemma"):
        fields["embed_scale"] = float(np.float32(math.sqrt(dim)))
        # llama.cpp scales queries by 1/sqrt(head_dim), except Gemma 2 / 3 27B (46 / 62 layers): by dim/heads
        big = (arch, n_layers) in (("gemma2", 46), ("gemma3", 62))
        fields["attn_scale"] = float(np.float32(1.0) / np.sqrt(np.float32(dim // n_heads if big else head_dim)))
        fields["final_softcap"] = float(md.get(f"{arch}.final_logit_softcapping", 30.0 if arch == "gemma2" else 0.0))
        if arch == "gemma2":
            fields["attn_softcap"] = float(md.get(f"{arch}.attn_logit_softcapping", 50.0))
        if arch == "gemma3":
            fields["local_rope_theta"] = float(md.get(f"{arch}.rope.freq_base_swa", 10000.0))
    rope = _rope_fields(md, arch, path, tensors, read)
    return LlamaConfig(
        n_layers=n_layers, dim=dim, n_heads=n_heads,
        n_kv_heads=int(get("attention.head_count_kv", n_heads)), head_dim=head_dim, ffn_dim=ffn,
        vocab_size=int(get("vocab_size", len(tokens) if tokens is not None else None)),
        norm_eps=float(get("attention.layer_norm_rms_epsilon")),
        rope_theta=float(get("rope.freq_base", 10000.0)), rope_style=style,
        context_length=int(get("context_length")), rope_dim=rope_dim,
        layer_windows=_layer_windows(md, arch, path, n_layers, pattern), **rope, **fields)


def import_gguf(path: str) -> Imported:
    """The LLaMA-family model in the GGUF file at ``path`` (a generate task; the file stays open until the
    model closes)."""
    gguf = GGUFFile(path)
    try:
        if gguf.metadata.get("general.architecture") in mamba.GGUF_ARCHITECTURES:
            return mamba.import_gguf(gguf, str(path))
        shapes = {name: tuple(info.shape) for name, info in gguf.tensors.items()}

        def read(name: str) -> np.ndarray:  # a small float tensor's values (rope factors), (n,)
            return np.asarray(gguf.tensor(name), np.float32).reshape(-1)
        cfg = llama_config_from_gguf(gguf.metadata, str(path), shapes, read)
        specs: dict[str, TensorSpec] = {}
        for name, info in gguf.tensors.items():
            dtype = {"f32": "float32", "f16": "float16"}.get(info.qtype, info.qtype)
            if dtype not in WEIGHT_DTYPES:
                raise UnsupportedError(f"{path}: tensor {name!r} has type {info.qtype}, which volvox does not "
                                       f"compute with (supported: f32, f16, {', '.join(SUPPORTED_QTYPES)})")
            specs[name] = TensorSpec(name, tuple(info.shape), dtype)
        extra = constants(cfg)
        specs.update({name: TensorSpec(name, a.shape, a.dtype.name) for name, a in extra.items()})
        moe = gguf_moe_config(gguf.metadata, gguf.metadata["general.architecture"], str(path))
        if moe:  # experts (Mixtral: architecture llama with expert_count)
            graph = build_llama_graph(cfg, {**GGUF_NAMES, **GGUF_MOE_NAMES}, gguf_moe_specs(specs), moe.ffn)
        else:
            graph = build_llama_graph(cfg, GGUF_NAMES, specs)
        weights = {name: extra[name] if name in extra else as_spec(gguf.tensor(name), graph.weights[name])
                   for name in graph.weights}
        tokenizer = Deferred(partial(tokenizer_from_gguf, gguf.metadata, str(path)))
        metadata = {"task": "generate", "architecture": gguf.metadata.get("general.architecture"),
                    "name": gguf.metadata.get("general.name"), "format": "gguf",
                    "quantized": sorted({w.qtype for w in weights.values() if isinstance(w, QuantTensor)}),
                    "dims": vars(ModelDims.of(cfg))}
        return Imported(graph, weights, metadata, str(path), tokenizer, [gguf.close])
    except BaseException:
        gguf.close()
        raise
