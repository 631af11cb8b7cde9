"""The tokenizer of a GGUF file, chosen by its ``tokenizer.ggml.model``: "gpt2" (byte-level BPE) or
"llama" (SentencePiece, llama.cpp's SPM); any other vocabulary is refused by name."""

from __future__ import annotations

from volvox.errors import UnsupportedError
from volvox.tokenizers.bpe import ByteLevelBPETokenizer
from volvox.tokenizers.spm import SentencePieceTokenizer

GGUF_VOCABS = {"gpt2": ByteLevelBPETokenizer, "llama": SentencePieceTokenizer}


def tokenizer_from_gguf(md: dict, path: str = "GGUF file"):
    """The tokenizer GGUF metadata ``md`` describes (a file without the key is byte-level BPE)."""
    model = md.get("tokenizer.ggml.model", "gpt2")
    if model not in GGUF_VOCABS:
        raise UnsupportedError(f"{path}: tokenizer.ggml.model {model!r} is not supported "
                               f"(supported: {', '.join(GGUF_VOCABS)})")
    return GGUF_VOCABS[model].from_gguf_metadata(md)
