"""Hugging Face checkpoint folders by ``model_type``: the architecture that builds each one's graph
(formats/hf_folder.py reads the folder), the tokenizer its task needs, and its end-of-sequence ids.
Decoders are generate tasks, BERT-style encoders embed tasks (a sentence-transformers folder's ``modules.json``
adds its pooling and Dense layers to the encoder's graph), encoder-decoders seq2seq tasks (Whisper: transcribe)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from volvox.architectures import bart, bert, gpt2, gpt_neo, hf_llama, hf_mamba, t5, whisper
from volvox.architectures.sentence_embedder import add_sentence_pipeline
from volvox.errors import UnsupportedError
from volvox.formats.hf_folder import HFCheckpoint, HFConfig, eos_ids, read_hf_config
from volvox.formats.imported import Imported
from volvox.formats.sentence_transformers import is_sentence_transformers_folder, read_sentence_pipeline
from volvox.formats.sentencepiece import is_marian_folder, read_marian_tokenizer
from volvox.tokenizers import ByteLevelBPETokenizer
from volvox.tokenizers.unigram import UnigramTokenizer
from volvox.tokenizers.wordpiece import WordPieceTokenizer

# model_type -> the architecture's importer (graph, weights and dims of the folder's checkpoint)
HF_ARCHITECTURES: dict[str, Callable[[HFConfig, HFCheckpoint], Imported]] = {
    "gpt2": gpt2.from_hf, "gpt_neo": gpt_neo.from_hf, "bert": bert.from_hf,
    **{model_type: hf_llama.from_hf for model_type in hf_llama.FAMILIES},
    "mamba": hf_mamba.from_hf, "mamba2": hf_mamba.from_hf, "bamba": hf_mamba.from_hf_bamba,
    "whisper": whisper.from_hf, "t5": t5.from_hf, "bart": bart.from_hf,
    "marian": bart.from_hf_marian,
}


def tokenizer_model_type(path: Path) -> str | None:
    """The ``model.type`` of a tokenizer.json (BPE, Unigram, WordPiece), None if unreadable (the
    tokenizer's own reader then says why)."""
    try:
        model = json.loads(path.read_text(encoding="utf-8")).get("model")
    except (OSError, ValueError, AttributeError):
        return None
    return model.get("type") if isinstance(model, dict) else None


def import_hf(directory: str | Path) -> Imported:
    """The model in HF checkpoint folder ``directory``: graph, weights (mmapped; closed by the model),
    metadata with its task and dims, and the tokenizer of tokenizer.json."""
    directory = Path(directory)
    cfg = read_hf_config(directory)
    if cfg.model_type not in HF_ARCHITECTURES:
        raise UnsupportedError(f"{cfg.path}: model_type {cfg.model_type!r} is not supported "
                               f"(supported: {', '.join(sorted(HF_ARCHITECTURES))})")
    ckpt = HFCheckpoint(directory)
    try:
        imported = HF_ARCHITECTURES[cfg.model_type](cfg, ckpt)
        if is_sentence_transformers_folder(directory):
            if imported.metadata["task"] != "embed":
                raise UnsupportedError(f"{directory}: a sentence-transformers pipeline over model_type "
                                       f"{cfg.model_type!r} (an encoder such as bert is needed)")
            hidden = imported.graph.specs["hidden"].shape[-1]
            imported = add_sentence_pipeline(imported, read_sentence_pipeline(directory, hidden))
        imported.source, imported.closers = str(directory), [ckpt.close]
        imported.metadata = {**imported.metadata, "architecture": cfg.model_type, "name": directory.name,
                             "format": "hf"}
        tok_path = directory / "tokenizer.json"
        if imported.metadata["task"] == "embed":
            imported.tokenizer = WordPieceTokenizer.from_tokenizer_json(tok_path)
        elif cfg.model_type == "marian" and is_marian_folder(directory):
            imported.tokenizer = read_marian_tokenizer(directory)
        elif tokenizer_model_type(tok_path) == "Unigram":
            imported.tokenizer = UnigramTokenizer.from_tokenizer_json(tok_path)
        else:
            imported.tokenizer = tok = ByteLevelBPETokenizer.from_tokenizer_json(tok_path)
            tok.eog_ids |= {i for i in eos_ids(directory) if 0 <= i < tok.vocab_size}
        return imported
    except BaseException:
        ckpt.close()
        raise
