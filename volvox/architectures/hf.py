"""Hugging Face checkpoint folders by ``model_type``: the architecture that builds each one's graph
(formats/hf_folder.py reads the folder), the tokenizer its task needs, and its end-of-sequence ids.
Decoders are generate tasks, BERT-style encoders embed tasks."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from volvox.architectures import bert, gpt2, gpt_neo, hf_llama
from volvox.errors import UnsupportedError
from volvox.formats.hf_folder import HFCheckpoint, HFConfig, eos_ids, read_hf_config
from volvox.formats.imported import Imported
from volvox.tokenizers import ByteLevelBPETokenizer
from volvox.tokenizers.wordpiece import WordPieceTokenizer

# model_type -> the architecture's importer (graph, weights and dims of the folder's checkpoint)
HF_ARCHITECTURES: dict[str, Callable[[HFConfig, HFCheckpoint], Imported]] = {
    "gpt2": gpt2.from_hf, "gpt_neo": gpt_neo.from_hf, "bert": bert.from_hf, **{model_type: hf_llama.from_hf for model_type in hf_llama.FAMILIES},
}


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
        imported.source, imported.closers = str(directory), [ckpt.close]
        imported.metadata = {**imported.metadata, "architecture": cfg.model_type, "name": directory.name,
                             "format": "hf"}
        tok_path = directory / "tokenizer.json"
        if imported.metadata["task"] == "embed":
            imported.tokenizer = WordPieceTokenizer.from_tokenizer_json(tok_path)
        else:
            imported.tokenizer = tok = ByteLevelBPETokenizer.from_tokenizer_json(tok_path)
            tok.eog_ids |= {i for i in eos_ids(directory) if 0 <= i < tok.vocab_size}
        return imported
    except BaseException:
        ckpt.close()
        raise
