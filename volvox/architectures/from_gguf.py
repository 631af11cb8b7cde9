"""LLaMA-family language models straight from a GGUF file: its metadata as the architecture's
hyperparameters, its tensors as the weights (mmapped, quantized blocks kept packed), its tokenizer."""

from __future__ import annotations

from functools import partial

from volvox.errors import GGUFError, UnsupportedError
from volvox.ir.graph import TensorSpec
from volvox.ops.linear import WEIGHT_DTYPES
from volvox.ir.quant_blocks import SUPPORTED_QTYPES, QuantTensor
from volvox.tokenizers import ByteLevelBPETokenizer
from volvox.formats.gguf import GGUFFile
from volvox.formats.imported import Deferred, Imported, ModelDims
from volvox.architectures import mamba
from volvox.architectures.llama import GGUF_NAMES, LlamaConfig, build_llama_graph

LLAMA_ARCHITECTURES = ("llama", "mistral")


def llama_config_from_gguf(md: dict, path: str) -> LlamaConfig:
    """LlamaConfig from GGUF metadata; GGUFError naming the missing key."""
    arch = md.get("general.architecture")
    if arch not in LLAMA_ARCHITECTURES:
        raise UnsupportedError(f"{path}: architecture {arch!r} is not supported "
                               f"(supported: {', '.join(LLAMA_ARCHITECTURES + mamba.GGUF_ARCHITECTURES)})")

    def get(key, default=None):
        value = md.get(f"{arch}.{key}", default)
        if value is None:
            raise GGUFError(f"{path}: metadata key {arch}.{key} is missing")
        return value

    n_heads = int(get("attention.head_count"))
    dim = int(get("embedding_length"))
    if n_heads <= 0 or dim % n_heads:
        raise GGUFError(f"{path}: embedding_length {dim} is not a multiple of head_count {n_heads}")
    head_dim = dim // n_heads
    scaling = md.get(f"{arch}.rope.scaling.type", "none")
    if scaling not in ("none", "linear"):
        raise UnsupportedError(f"{path}: rope scaling {scaling!r} is not supported")
    rope_dim = int(get("rope.dimension_count", head_dim))
    if rope_dim != head_dim:
        raise UnsupportedError(f"{path}: partial rotary embeddings (rope dim {rope_dim} of {head_dim}) are not supported")
    tokens = md.get("tokenizer.ggml.tokens")
    return LlamaConfig(
        n_layers=int(get("block_count")), dim=dim, n_heads=n_heads,
        n_kv_heads=int(get("attention.head_count_kv", n_heads)), head_dim=head_dim,
        ffn_dim=int(get("feed_forward_length")),
        vocab_size=int(get("vocab_size", len(tokens) if tokens is not None else None)),
        norm_eps=float(get("attention.layer_norm_rms_epsilon")),
        rope_theta=float(get("rope.freq_base", 10000.0)), rope_style="interleaved",
        context_length=int(get("context_length")),
        rope_scale=float(md.get(f"{arch}.rope.scaling.factor", 1.0)) if scaling == "linear" else 1.0,
    )


def import_gguf(path: str) -> Imported:
    """The LLaMA-family model in the GGUF file at ``path`` (a generate task; the file stays open until the
    model closes)."""
    gguf = GGUFFile(path)
    try:
        if gguf.metadata.get("general.architecture") in mamba.GGUF_ARCHITECTURES:
            return mamba.import_gguf(gguf, str(path))
        cfg = llama_config_from_gguf(gguf.metadata, str(path))
        specs: dict[str, TensorSpec] = {}
        for name, info in gguf.tensors.items():
            dtype = {"f32": "float32", "f16": "float16"}.get(info.qtype, info.qtype)
            if dtype not in WEIGHT_DTYPES:
                raise UnsupportedError(f"{path}: tensor {name!r} has type {info.qtype}, which volvox does not "
                                       f"compute with (supported: f32, f16, {', '.join(SUPPORTED_QTYPES)})")
            specs[name] = TensorSpec(name, tuple(info.shape), dtype)
        graph = build_llama_graph(cfg, GGUF_NAMES, specs)
        weights = {name: gguf.tensor(name) for name in graph.weights}
        tokenizer = Deferred(partial(ByteLevelBPETokenizer.from_gguf_metadata, gguf.metadata))
        metadata = {"task": "generate", "architecture": gguf.metadata.get("general.architecture"),
                    "name": gguf.metadata.get("general.name"), "format": "gguf",
                    "quantized": sorted({w.qtype for w in weights.values() if isinstance(w, QuantTensor)}),
                    "dims": vars(ModelDims.of(cfg))}
        return Imported(graph, weights, metadata, str(path), tokenizer, [gguf.close])
    except BaseException:
        gguf.close()
        raise
