"""``volvox convert``: a GGUF file, an HF checkpoint folder or a blueprint -> a volvox blueprint.

The source is loaded as ``volvox.load`` loads it (without compiler passes), so
the blueprint holds the very graph and weight bytes the source runs with:
loading it gives bit-identical outputs. ``quantize`` packs every float matrix
read by a ``linear`` or ``embedding`` node (rows a multiple of 32 values) with
``quant_blocks.quantize_ref`` (ggml's reference quantizers); a matrix whose rows are not
whole 256-value super-blocks takes llama.cpp's fallback for a k-quant request
(``K_FALLBACK``). The blueprint is written into a temporary directory
beside OUT_DIR and renamed into place at the end: an interrupted conversion
never leaves a blueprint that loads.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from volvox.errors import BlueprintError, UnsupportedError
from volvox.ir.graph import Graph
from volvox.ir.quant_blocks import QUANTIZABLE_QTYPES, QuantTensor, quantize_ref
from volvox.formats.safetensors import save_safetensors
from volvox.formats.blueprint import tokenizer_metadata
from volvox.formats.imported import ModelDims
from volvox.hub import show_progress


def source_weights(model) -> dict[str, Any]:
    """The weights a loaded model runs with, by graph weight name (arrays or QuantTensors)."""
    return {name: w for (_, w), name in zip(model.executor.weight_slots, model.graph.weights)}


def quantizable(graph: Graph, weights: dict[str, Any]) -> list[str]:
    """Float matrices read as a linear weight or an embedding table, with rows a multiple of 32 values."""
    names = {node.inputs.get("weight") for node in graph.nodes if node.op == "linear"}
    names |= {node.inputs.get("table") for node in graph.nodes if node.op == "embedding"}
    return [n for n in graph.weights if n in names and isinstance(weights[n], np.ndarray)
            and weights[n].ndim == 2 and weights[n].shape[1] % 32 == 0]


def graph_config(graph: Graph, quantized: dict[str, dict], metadata: dict) -> dict:
    """config.json (blueprint format v1) describing ``graph``."""
    return {
        "format": "volvox-blueprint",
        "version": 1,
        "inputs": [{"name": s.name, "shape": list(s.shape), "dtype": s.dtype} for s in graph.inputs],
        "nodes": [{"id": n.id, "op": n.op, "inputs": n.inputs, "outputs": n.outputs, "params": n.params}
                  for n in graph.nodes],
        "outputs": list(graph.outputs),
        "weights": {"file": "model.safetensors", "quantized": quantized},
        "metadata": metadata,
    }


def _tokenizer_json(src: Path, model) -> str:
    """The tokenizer.json text for the blueprint: the source's own, or one built from GGUF metadata."""
    if src.is_dir():
        name = (model.metadata.get("tokenizer") or {}).get("file", "tokenizer.json")
        return (src / Path(name).name).read_text(encoding="utf-8")
    from volvox.formats.gguf import GGUFFile
    from volvox.tokenizers.bpe import ByteLevelBPETokenizer
    from volvox.tokenizers.hf_json import bpe_tokenizer_json

    tok = model.tokenizer
    if not isinstance(tok, ByteLevelBPETokenizer):
        raise UnsupportedError(f"{src}: a blueprint stores a byte-level BPE tokenizer.json; this GGUF file's "
                               f"vocabulary is {type(tok).__name__} (run the .gguf file itself)")
    with GGUFFile(str(src)) as gguf:
        merges = list(gguf.metadata.get("tokenizer.ggml.merges") or [])
    doc = bpe_tokenizer_json(tok.tokens, merges, tok.special_tokens, tok.added_tokens, tok.pre,
                             ignore_merges=tok._ignore_merges)
    return json.dumps(doc, ensure_ascii=False)


def _seq2seq_tokenizer(src: Path, tok) -> tuple[dict, dict[str, str | bytes]]:
    """An encoder-decoder's ``metadata.tokenizer`` and the tokenizer files copied from its folder."""
    from volvox.formats.blueprint import SEQ2SEQ_TOKENIZER_FILES
    from volvox.tokenizers.marian import MarianTokenizer
    from volvox.tokenizers.unigram import UnigramTokenizer

    if isinstance(tok, MarianTokenizer):
        kind, md = "marian", {}
    elif isinstance(tok, UnigramTokenizer):
        kind, md = "unigram", {}
    else:
        kind, md = "bpe", tokenizer_metadata(tok)
    return {**md, "kind": kind}, {name: (src / name).read_bytes() for name in SEQ2SEQ_TOKENIZER_FILES[kind]}


# What --quantize may store the float matrices as: a GGUF block format, or IEEE half ("f16":
# half the bytes of float32 for a bandwidth-bound decode, rounding each weight to 11 bits).
CONVERT_TYPES = QUANTIZABLE_QTYPES + ("f16",)
# The 32-block type a k-quant request stores a matrix as when its rows are not whole super-blocks
# (llama.cpp's tensor_type_fallback).
K_FALLBACK = {"q2_k": "q4_0", "q3_k": "q4_0", "q4_k": "q5_0", "q5_k": "q5_1", "q6_k": "q8_0"}


def storage_type(qtype: str, cols: int) -> str:
    """What --quantize ``qtype`` stores a matrix of ``cols``-value rows (a multiple of 32) as."""
    return K_FALLBACK[qtype] if qtype in K_FALLBACK and cols % 256 else qtype


def convert(src: str | os.PathLike, out_dir: str | os.PathLike, quantize: str | None = None,
            overwrite: bool = False, progress: bool | None = False,
            merge_adapter: str | os.PathLike | None = None) -> Path:
    """Write the blueprint of ``src`` (GGUF file, HF folder or blueprint) to ``out_dir``; returns its path.
    ``merge_adapter``: a LoRA adapter folder baked into the projections it adapts (W + alpha/r B A, those
    matrices stored float32 unless ``quantize`` packs them again)."""
    from volvox.loader import load

    src, out_dir = Path(src), Path(out_dir)
    if quantize is not None and quantize not in CONVERT_TYPES:
        raise UnsupportedError(f"--quantize {quantize!r}: choose from {', '.join(CONVERT_TYPES)}")
    if out_dir.exists() and not overwrite:
        raise BlueprintError(f"{out_dir} already exists (pass overwrite=True / --force to replace it)")
    model = load(src, optimize=False, adapter=merge_adapter)
    encoder = getattr(model, "encoder", None)  # an encoder-decoder's: a second graph, encoder.json
    try:
        graph, weights = model.graph, source_weights(model)
        if merge_adapter is not None:
            from volvox.train.lora import merge_lora

            merged = merge_lora(graph, weights)
            graph, weights = merged.graph, merged.weights
        encoder_weights = source_weights(encoder) if encoder is not None else {}
        targets = set(quantizable(graph, weights)) if quantize else set()
        if encoder is not None and quantize:
            targets |= set(quantizable(encoder.graph, encoder_weights))
        show = show_progress() if progress is None else progress
        every = {**encoder_weights, **weights}  # shared tensors (BART's embedding) are the same array
        bar = tqdm(total=len(every) + 1, desc=f"convert {src.name}", unit="tensor", disable=not show,
                   file=sys.stderr)
        tensors: dict[str, np.ndarray] = {}
        quantized: dict[str, dict] = {}
        for name, w in every.items():
            if name in targets and quantize == "f16":  # IEEE half: a plain float16 tensor
                w = np.asarray(w, dtype=np.float32).astype(np.float16)
            elif name in targets:
                w = quantize_ref(np.asarray(w, dtype=np.float32), storage_type(quantize, w.shape[1]))
            if isinstance(w, QuantTensor):
                quantized[name] = {"qtype": w.qtype, "shape": list(w.shape)}
                w = w.data
            tensors[name] = np.asarray(w)
            bar.set_postfix_str(name[:40], refresh=False)
            bar.update()
        metadata = {k: v for k, v in model.metadata.items()
                    if k not in ("format", "quantized", "dims", "tokenizer", "adapter")}
        metadata["source_format"] = model.metadata.get("source_format", model.metadata.get("format"))
        files: dict[str, str] = {}
        if metadata.get("task") in ("generate", "embed"):
            metadata["dims"] = vars(ModelDims.of(model.config))
            metadata["tokenizer"] = (tokenizer_metadata(model.tokenizer) if metadata["task"] == "generate"
                                     else {"file": "tokenizer.json"})
            files["tokenizer.json"] = _tokenizer_json(src, model)
        if encoder is not None:
            metadata["dims"] = vars(ModelDims.of(model.config))
            metadata["encoder"] = {"config": "encoder.json"}
            metadata["tokenizer"], tokenizer_files = _seq2seq_tokenizer(src, model.tokenizer)
            files.update(tokenizer_files)
            enc_quantized = {n: q for n, q in quantized.items() if n in encoder_weights}
            files["encoder.json"] = json.dumps(graph_config(encoder.graph, enc_quantized, encoder.metadata),
                                               indent=1, ensure_ascii=False)
        dec_quantized = {n: q for n, q in quantized.items() if n in weights}
        files["config.json"] = json.dumps(graph_config(graph, dec_quantized, metadata), indent=1, ensure_ascii=False)
        bar.set_postfix_str("model.safetensors", refresh=False)
        _write_atomically(out_dir, files, tensors, overwrite)
        bar.update()
        bar.close()
    finally:
        model.close()
    return out_dir


def _write_atomically(out_dir: Path, files: dict[str, str | bytes], tensors: dict[str, np.ndarray],
                      overwrite: bool) -> None:
    """Write the blueprint into a temporary sibling directory, then rename it to ``out_dir``."""
    parent = out_dir.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = parent / f".{out_dir.name}.{secrets.token_hex(6)}.tmp"
    tmp.mkdir()
    try:
        save_safetensors(tmp / "model.safetensors", tensors)
        for name, content in files.items():
            if isinstance(content, bytes):
                (tmp / name).write_bytes(content)
            else:
                (tmp / name).write_text(content, encoding="utf-8")
        if out_dir.exists() and overwrite:
            old = parent / f".{out_dir.name}.{secrets.token_hex(6)}.old"
            os.rename(out_dir, old)
            os.rename(tmp, out_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
