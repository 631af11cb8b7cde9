"""Tokenizers: byte-level BPE (GPT-2 family), GGUF SentencePiece (llama.cpp's SPM) and chat templates."""

from volvox.tokenizers.bpe import ByteLevelBPETokenizer
from volvox.tokenizers.byte_vocab import StreamDecoder
from volvox.tokenizers.chat import CHATML_TEMPLATE, render_chat_template
from volvox.tokenizers.pretokenize import PRETOKENIZER_NAMES, Pretokenizer
from volvox.tokenizers.spm import SentencePieceTokenizer

__all__ = [
    "ByteLevelBPETokenizer",
    "StreamDecoder",
    "SentencePieceTokenizer",
    "CHATML_TEMPLATE",
    "render_chat_template",
    "PRETOKENIZER_NAMES",
    "Pretokenizer",
]
