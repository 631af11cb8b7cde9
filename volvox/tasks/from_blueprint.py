"""The task model a blueprint's ``metadata.task`` asks for: LanguageModel (generate), Encoder (embed)
or a plain Model (anything else).

Task blueprints carry what the task needs beside the graph (docs/blueprint.md):
``metadata.dims`` (KV cache geometry, context and vocabulary sizes) and
``metadata.tokenizer`` (the tokenizer file and its special-token state).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from volvox.errors import BlueprintError
from volvox.model import Model


@dataclass(frozen=True)
class ModelDims:
    """What a task needs to know of a model beyond its graph."""

    n_layers: int
    n_kv_heads: int
    head_dim: int
    context_length: int
    vocab_size: int

    @classmethod
    def of(cls, config: Any) -> "ModelDims":
        """The dims of an importer's hyperparameters (LlamaConfig, GPTConfig, BertConfig)."""
        return cls(**{f.name: int(getattr(config, f.name)) for f in fields(cls)})

    @classmethod
    def from_metadata(cls, md: Any, where: str) -> "ModelDims":
        """Parse ``metadata.dims``; BlueprintError naming the field at fault."""
        names = [f.name for f in fields(cls)]
        if not isinstance(md, dict) or set(md) != set(names):
            raise BlueprintError(f"{where}: metadata.dims must be an object with exactly {names}")
        for k in names:
            if not isinstance(md[k], int) or isinstance(md[k], bool) or md[k] <= 0:
                raise BlueprintError(f"{where}: metadata.dims.{k} must be a positive integer, got {md[k]!r}")
        return cls(**md)


def tokenizer_metadata(tok, file: str = "tokenizer.json") -> dict:
    """``metadata.tokenizer`` for a byte-level BPE tokenizer: its file and special-token state."""
    return {"file": file, "bos_id": tok.bos_id, "eos_id": tok.eos_id, "add_bos": tok.add_bos,
            "eog_ids": sorted(tok.eog_ids), "chat_template": tok.chat_template}


def _bpe_tokenizer(path: Path, md: dict, where: str):
    """The byte-level BPE tokenizer of a generate blueprint, special-token state from metadata."""
    from volvox.tokenizers import ByteLevelBPETokenizer

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


def task_model(graph, weights: dict, metadata: dict, directory: Path, closers: list, **kw) -> Model:
    """The Model subclass for ``metadata.task`` of the blueprint in ``directory``."""
    directory = Path(directory)
    where = str(directory / "config.json")
    task = metadata.get("task")
    if task not in ("generate", "embed"):
        return Model(graph, weights, metadata, str(directory), closers=closers, **kw)
    dims = ModelDims.from_metadata(metadata.get("dims"), where)
    tok_md = metadata.get("tokenizer")
    if not isinstance(tok_md, dict) or not isinstance(tok_md.get("file"), str):
        raise BlueprintError(f"{where}: metadata.tokenizer must be an object with a 'file'")
    tok_path = directory / Path(tok_md["file"]).name
    if task == "generate":
        from volvox.tasks.generate import LanguageModel

        tok = _bpe_tokenizer(tok_path, tok_md, where)
        return LanguageModel(graph, weights, metadata, str(directory), dims, tok, closers=closers, **kw)
    from volvox.tokenizers.wordpiece import WordPieceTokenizer
    from volvox.tasks.embed import Encoder

    tok = WordPieceTokenizer.from_tokenizer_json(tok_path)
    return Encoder(graph, weights, metadata, str(directory), dims, tok, closers=closers, **kw)
