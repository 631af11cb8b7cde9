"""What the GGUF-style vocabularies share (byte-level BPE and SentencePiece): every id stands for a
fixed byte string, ids are checked against the vocabulary, text is decoded incrementally, and chats
are rendered through the model's template."""

from __future__ import annotations

import codecs
import operator

from volvox.errors import TokenizerError
from volvox.tokenizers.chat import render_chat_template


class StreamDecoder:
    """Incremental detokenizer: returns only complete UTF-8 characters per pushed id."""

    def __init__(self, tokenizer: "ByteVocabulary", skip_special: bool = False):
        """Start an empty stream over ``tokenizer``'s vocabulary."""
        self._tokenizer = tokenizer
        self._skip_special = skip_special
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id) -> str:
        """Add one id; return the text it completes (a partial multi-byte character is held back)."""
        data = self._tokenizer._bytes_of(token_id, self._skip_special)
        return self._utf8.decode(data)

    def flush(self) -> str:
        """End the stream: return held-back bytes (invalid ones as U+FFFD) and reset."""
        text = self._utf8.decode(b"", final=True)
        self._utf8.reset()
        return text


class ByteVocabulary:
    """Base of a tokenizer whose subclass sets ``tokens``, ``vocab_size``, ``bos_id`` / ``eos_id``, ``add_bos``,
    ``chat_template``, ``_id_bytes`` (each id's bytes) and ``_skip_ids`` (the ids ``skip_special``
    drops)."""

    tokens: list[str]
    vocab_size: int
    bos_id: int | None
    eos_id: int | None
    add_bos: bool
    chat_template: str | None
    _id_bytes: list[bytes]
    _skip_ids: frozenset[int]

    def _check_id(self, token_id, what: str) -> int | None:
        """``token_id`` as an int inside the vocabulary (None stays None)."""
        if token_id is None:
            return None
        try:
            token_id = operator.index(token_id)
        except TypeError:
            raise TokenizerError(f"{what} must be an integer, got {token_id!r}") from None
        if not 0 <= token_id < self.vocab_size:
            raise TokenizerError(f"{what} {token_id} is outside the vocabulary (size {self.vocab_size})")
        return token_id

    def _first_ids(self, text, add_bos: bool | None) -> list[int]:
        """The ids an encoding of ``text`` starts with: [BOS] when asked (``add_bos``, else the
        tokenizer's default), else none; a non-str ``text`` or a missing BOS raises."""
        if not isinstance(text, str):
            raise TokenizerError(f"encode() needs a str, got {type(text).__name__}")
        if not (self.add_bos if add_bos is None else add_bos):
            return []
        if self.bos_id is None:
            raise TokenizerError("add_bos requested but the tokenizer has no bos_id")
        return [self.bos_id]

    def _bytes_of(self, token_id, skip_special: bool) -> bytes:
        """Bytes of one id (empty for a skipped special id when ``skip_special``); bad ids raise."""
        i = self._check_id(token_id, "token id")
        if i is None:
            raise TokenizerError("token id must be an integer, got None")
        if skip_special and i in self._skip_ids:
            return b""
        return self._id_bytes[i]

    def token_bytes(self, token_id) -> bytes:
        """The raw bytes token ``token_id`` stands for (special tokens: their text in UTF-8)."""
        return self._bytes_of(token_id, False)

    def stream_decoder(self, skip_special: bool = False) -> StreamDecoder:
        """A fresh incremental decoder for generated ids."""
        return StreamDecoder(self, skip_special)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True, **extra) -> str:
        """Render ``messages`` with the model's chat template (ChatML when it has none)."""
        return render_chat_template(
            self.chat_template, messages,
            bos_token=self.tokens[self.bos_id] if self.bos_id is not None else "",
            eos_token=self.tokens[self.eos_id] if self.eos_id is not None else "",
            add_generation_prompt=add_generation_prompt, **extra)
