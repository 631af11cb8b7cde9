"""Tokenizers: byte-level BPE (GPT-2 family) and chat templates."""

from volvox.tokenizers.bpe import ByteLevelBPETokenizer, StreamDecoder
from volvox.tokenizers.chat import CHATML_TEMPLATE, render_chat_template
from volvox.tokenizers.pretokenize import PRETOKENIZER_NAMES, Pretokenizer

__all__ = [
    "ByteLevelBPETokenizer",
    "StreamDecoder",
    "CHATML_TEMPLATE",
    "render_chat_template",
    "PRETOKENIZER_NAMES",
    "Pretokenizer",
]
