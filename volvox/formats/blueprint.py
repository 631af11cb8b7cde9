"""Blueprints on disk: config.json (the graph, format v1) + model.safetensors (weights, mmapped).

See docs/blueprint.md for the format. Everything is validated before any
compute: schema, op names, wiring, shapes (inferred over the whole graph),
and every weight against the graph's use of it.
"""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Any

import numpy as np

from volvox.errors import BlueprintError, VolvoxError
from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.ir.quant_blocks import GGML_FORMATS, QuantTensor, SUPPORTED_QTYPES, row_nbytes
from volvox.formats.imported import Imported, ModelDims
from volvox.formats.config_json import read_config_json
from volvox.formats.safetensors import SafeTensorsFile
from volvox.formats.sentencepiece import read_marian_tokenizer
from volvox.ops import validate_file
from volvox.tokenizers import ByteLevelBPETokenizer
from volvox.tokenizers.unigram import UnigramTokenizer
from volvox.tokenizers.wordpiece import WordPieceTokenizer

FORMAT_NAME = "volvox-blueprint"
FORMAT_VERSION = 1
ST_DTYPES = {"float32": "F32", "float16": "F16", "int32": "I32", "int64": "I64", "int8": "I8", "uint8": "U8"}


def _field(obj: dict, key: str, kind, where: str):
    if not isinstance(obj, dict) or key not in obj:
        raise BlueprintError(f"{where}: missing field {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise BlueprintError(f"{where}: field {key!r} must be {getattr(kind, '__name__', kind)}, got {type(value).__name__}")
    return value


def _shape(value, where: str) -> tuple:
    if not isinstance(value, list) or not all(
            (isinstance(d, int) and not isinstance(d, bool) and d >= 0) or (isinstance(d, str) and d) for d in value):
        raise BlueprintError(f"{where}: shape must be a list of non-negative ints or symbol names, got {value!r}")
    return tuple(value)


def parse_config(config: dict, where: str = "config.json") -> tuple[Graph, dict, dict]:
    """(graph without weights, quantized-weight table, metadata) from a config.json dict."""
    if not isinstance(config, dict):
        raise BlueprintError(f"{where}: top level must be an object")
    if config.get("format") != FORMAT_NAME:
        raise BlueprintError(f"{where}: field 'format' must be {FORMAT_NAME!r}, got {config.get('format')!r}")
    if config.get("version") != FORMAT_VERSION:
        raise BlueprintError(f"{where}: unsupported version {config.get('version')!r} (this volvox reads {FORMAT_VERSION})")
    inputs = []
    for i, spec in enumerate(_field(config, "inputs", list, where)):
        w = f"{where}: inputs[{i}]"
        inputs.append(TensorSpec(_field(spec, "name", str, w), _shape(_field(spec, "shape", list, w), w),
                                 _field(spec, "dtype", str, w)))
    nodes = []
    for i, node in enumerate(_field(config, "nodes", list, where)):
        w = f"{where}: nodes[{i}]"
        node_id = _field(node, "id", str, w)
        w = f"{where}: node {node_id!r}"
        ins, outs = _field(node, "inputs", dict, w), _field(node, "outputs", dict, w)
        if not all(isinstance(v, str) for v in list(ins.values()) + list(outs.values())):
            raise BlueprintError(f"{w}: inputs/outputs must map port names to tensor names (strings)")
        nodes.append(Node(node_id, _field(node, "op", str, w), ins, outs, node.get("params", {})))
        if not isinstance(nodes[-1].params, dict):
            raise BlueprintError(f"{w}: params must be an object")
    outputs = _field(config, "outputs", list, where)
    if not outputs or not all(isinstance(o, str) for o in outputs):
        raise BlueprintError(f"{where}: outputs must be a non-empty list of tensor names")
    weights_cfg = config.get("weights", {})
    quantized = weights_cfg.get("quantized", {}) if isinstance(weights_cfg, dict) else None
    if not isinstance(quantized, dict):
        raise BlueprintError(f"{where}: weights.quantized must be an object")
    metadata = config.get("metadata", {})
    if not isinstance(metadata, dict):
        raise BlueprintError(f"{where}: metadata must be an object")
    return Graph(inputs, {}, nodes, outputs), quantized, metadata


def _bind_weight(st: SafeTensorsFile, name: str, quantized: dict, path: str) -> tuple[TensorSpec, Any]:
    """The graph spec and the runtime array (or QuantTensor) of weight ``name``."""
    raw = st.tensor(name)
    q = quantized.get(name)
    if q is None:
        return TensorSpec(name, tuple(raw.shape), raw.dtype.name), raw
    w = f"{path}: quantized weight {name!r}"
    qtype = _field(q, "qtype", str, w)
    if qtype not in SUPPORTED_QTYPES:
        raise BlueprintError(f"{w}: qtype {qtype!r} is not one of {', '.join(SUPPORTED_QTYPES)}")
    shape = _shape(_field(q, "shape", list, w), w)
    if len(shape) != 2 or not all(isinstance(d, int) for d in shape) or shape[1] % GGML_FORMATS[qtype].block_size:
        raise BlueprintError(f"{w}: shape {list(shape)} must be [rows, cols] with cols a multiple of "
                             f"{GGML_FORMATS[qtype].block_size}")
    want = (shape[0], row_nbytes(qtype, shape[1]))
    if raw.dtype != np.uint8 or raw.shape != want:
        raise BlueprintError(f"{w}: stored as {raw.dtype}{list(raw.shape)}, {qtype} {list(shape)} needs uint8{list(want)}")
    return TensorSpec(name, shape, qtype), QuantTensor(raw, qtype, shape)


def read_blueprint(directory: str | Path, config_name: str = "config.json"
                   ) -> tuple[Graph, dict, dict, SafeTensorsFile | None]:
    """(validated graph, weights by name, metadata, open safetensors file) of a blueprint directory (its
    ``config_name`` graph: config.json, or an encoder-decoder's encoder.json)."""
    directory = Path(directory)
    config, cfg_path = read_config_json(directory, name=config_name)
    graph, quantized, metadata = parse_config(config, str(cfg_path))
    weights_file = config.get("weights", {}).get("file", "model.safetensors")
    st_path = directory / str(weights_file)
    st = SafeTensorsFile(st_path) if st_path.is_file() else None
    try:
        used = {n for node in graph.nodes for n in node.inputs.values()} - {s.name for s in graph.inputs}
        produced = {n for node in graph.nodes for n in node.outputs.values()}
        weights = {}
        available = set(st.names) if st is not None else set()
        for name in sorted(used - produced):
            if name not in available:
                raise BlueprintError(f"{cfg_path}: tensor {name!r} is read by a node but is no graph input, "
                                     f"no node output and not in {st_path.name}")
            spec, weights[name] = _bind_weight(st, name, quantized, str(st_path))
            graph.weights[name] = spec
        for name in quantized:
            if name not in graph.weights:
                raise BlueprintError(f"{cfg_path}: weights.quantized names {name!r}, which the graph does not use")
        validate_file(graph, str(cfg_path))
    except VolvoxError:
        if st is not None:
            st.close()
        raise
    return graph, weights, metadata, st


def tokenizer_metadata(tok, file: str = "tokenizer.json") -> dict:
    """``metadata.tokenizer`` for a byte-level BPE tokenizer: its file and special-token state."""
    return {"file": file, "bos_id": tok.bos_id, "eos_id": tok.eos_id, "add_bos": tok.add_bos,
            "eog_ids": sorted(tok.eog_ids), "chat_template": tok.chat_template}


def _bpe_tokenizer(path: Path, md: dict, where: str):
    """The byte-level BPE tokenizer of a generate blueprint, special-token state from metadata."""
    tok = ByteLevelBPETokenizer.from_tokenizer_json(path)

    def token_id(key: str, value) -> int | None:
        if value is None:
            return None
        try:
            value = operator.index(value)
        except TypeError:
            raise BlueprintError(f"{where}: metadata.tokenizer.{key} must be an integer, got {value!r}") from None
        if not 0 <= value < tok.vocab_size:
            raise BlueprintError(f"{where}: metadata.tokenizer.{key} {value} is outside the vocabulary")
        return value

    tok.bos_id, tok.eos_id = token_id("bos_id", md.get("bos_id")), token_id("eos_id", md.get("eos_id"))
    tok.add_bos = bool(md.get("add_bos")) and tok.bos_id is not None
    if not isinstance(md.get("eog_ids", []), list):
        raise BlueprintError(f"{where}: metadata.tokenizer.eog_ids must be a list")
    tok.eog_ids = {token_id("eog_ids", i) for i in md.get("eog_ids", [])}
    template = md.get("chat_template")
    if template is not None and not isinstance(template, str):
        raise BlueprintError(f"{where}: metadata.tokenizer.chat_template must be a string")
    tok.chat_template = template
    return tok


# An encoder-decoder blueprint's tokenizer kinds -> the files each reads (docs/blueprint.md).
SEQ2SEQ_TOKENIZER_FILES = {"bpe": ("tokenizer.json",), "unigram": ("tokenizer.json",),
                           "marian": ("source.spm", "target.spm", "vocab.json")}


def _seq2seq_parts(directory: Path, imported: Imported, where: str) -> None:
    """An encoder-decoder blueprint's encoder graph (``metadata.encoder.config``, weights from the same
    safetensors file) and tokenizer (``metadata.tokenizer.kind``), into ``imported``."""
    metadata = imported.metadata
    encoder_md = metadata.get("encoder")
    if not isinstance(encoder_md, dict) or not isinstance(encoder_md.get("config"), str):
        raise BlueprintError(f"{where}: metadata.encoder must be an object naming the encoder's graph file "
                             "({'config': 'encoder.json'})")
    graph, weights, enc_metadata, st = read_blueprint(directory, Path(encoder_md["config"]).name)
    if st is not None:
        imported.closers.append(st.close)
    metadata["encoder"] = Imported(graph, weights, enc_metadata, str(directory))
    tok_md = metadata.get("tokenizer")
    kind = tok_md.get("kind") if isinstance(tok_md, dict) else None
    if kind not in SEQ2SEQ_TOKENIZER_FILES:
        raise BlueprintError(f"{where}: metadata.tokenizer.kind must be one of {', '.join(SEQ2SEQ_TOKENIZER_FILES)}, "
                             f"got {kind!r}")
    if kind == "bpe":
        imported.tokenizer = _bpe_tokenizer(directory / "tokenizer.json", tok_md, where)
    elif kind == "unigram":
        imported.tokenizer = UnigramTokenizer.from_tokenizer_json(directory / "tokenizer.json")
    else:
        imported.tokenizer = read_marian_tokenizer(directory)


def import_blueprint(directory: str | Path) -> Imported:
    """A blueprint directory as the loader takes it: its validated graph, weights and metadata, and
    for a generate / embed task its dims (checked) and tokenizer, for an encoder-decoder
    (seq2seq / transcribe) also its encoder graph (docs/blueprint.md)."""
    directory = Path(directory)
    graph, weights, metadata, st = read_blueprint(directory)
    imported = Imported(graph, weights, metadata, str(directory), closers=[st.close] if st is not None else [])
    try:
        task, where = metadata.get("task"), str(directory / "config.json")
        if task is not None and not isinstance(task, str):
            raise BlueprintError(f"{where}: metadata.task must be a string (a task name), not {task!r}")
        if task in ("generate", "embed"):
            ModelDims.from_metadata(metadata.get("dims"), where)
            tok_md = metadata.get("tokenizer")
            if not isinstance(tok_md, dict) or not isinstance(tok_md.get("file"), str):
                raise BlueprintError(f"{where}: metadata.tokenizer must be an object with a 'file'")
            tok_path = directory / Path(tok_md["file"]).name
            imported.tokenizer = (_bpe_tokenizer(tok_path, tok_md, where) if task == "generate"
                                  else WordPieceTokenizer.from_tokenizer_json(tok_path))
        elif task in ("seq2seq", "transcribe"):
            ModelDims.from_metadata(metadata.get("dims"), where)
            _seq2seq_parts(directory, imported, where)
        return imported
    except BaseException:
        imported.close()
        raise
