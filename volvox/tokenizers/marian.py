"""Marian's tokenizer (MarianMT folders): SentencePiece pieces, numbered by the folder's vocab.json.

A Marian folder has no tokenizer.json: ``source.spm`` segments the source text, ``target.spm`` the
target's, and ``vocab.json`` maps each piece to the model's id (a piece it lacks is ``<unk>``).
Encoding appends ``</s>``; a leading language code such as ``>>fr<<`` (multilingual models) is one
token of its own. Decoding joins the pieces as SentencePiece does (``▁`` -> space).
"""

from __future__ import annotations

import re

from volvox.errors import TokenizerError
from volvox.tokenizers.unigram import UnigramStreamDecoder, UnigramTokenizer

_LANGUAGE_CODE = re.compile(r">>.+?<<")


class MarianTokenizer:
    """Source text -> ids with source.spm + vocab.json; ids -> text through the target pieces."""

    def __init__(self, source: UnigramTokenizer, vocab: dict, where: str = "vocab.json"):
        """``source``: the source.spm segmentation (formats/sentencepiece.py); ``vocab``: piece -> id."""
        self.where = where
        self._source = source
        if not isinstance(vocab, dict) or not all(isinstance(i, int) and i >= 0 for i in vocab.values()):
            raise TokenizerError(f"{where}: must map pieces to non-negative ids")
        self.ids = vocab
        self.vocab_size = max(vocab.values()) + 1
        self.pieces = {i: p for p, i in vocab.items()}  # id -> piece (the first of duplicates)
        for name in ("</s>", "<unk>", "<pad>"):
            if name not in vocab:
                raise TokenizerError(f"{where}: has no {name} piece")
        self.eos_id, self.unk_id, self.pad_id = vocab["</s>"], vocab["<unk>"], vocab["<pad>"]
        self.bos_id = None
        self.eog_ids = {self.eos_id}
        self._special_ids = frozenset({self.eos_id, self.pad_id, self.unk_id})

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Ids of ``text`` then ``</s>`` (unless told otherwise); a leading ``>>xx<<`` code is one token."""
        if not isinstance(text, str):
            raise TokenizerError(f"text must be a str, got {type(text).__name__}")
        ids: list[int] = []
        code = _LANGUAGE_CODE.match(text)
        if code:
            ids.append(self.ids.get(code.group(), self.unk_id))
            text = text[code.end():]
        spm = self._source
        ids += [self.ids.get(spm.pieces[i], self.unk_id) for i in spm.encode(text, add_special_tokens=False)]
        return ids + [self.eos_id] if add_special_tokens else ids

    def decode(self, ids, skip_special: bool = False) -> str:
        """Text of ``ids`` as Marian decodes it: each run of ordinary pieces joined (``▁`` -> space, the
        run's leading one dropped), a special token kept (unless skipped) with a space after it, the
        result stripped."""
        text, run = "", []
        for i in ids:
            i = int(i)
            if i not in self.pieces:
                raise TokenizerError(f"token id {i} is outside the vocabulary (size {self.vocab_size})")
            if i in self._special_ids:
                if not skip_special:
                    text += _join(run) + self.pieces[i] + " "
                    run = []
                continue
            run.append(self.pieces[i])
        return (text + _join(run)).strip()

    def stream_decoder(self, skip_special: bool = False) -> UnigramStreamDecoder:
        """A fresh incremental decoder for generated ids."""
        return UnigramStreamDecoder(self, skip_special)


def _join(pieces: list[str]) -> str:
    """SentencePiece's decode of pieces: concatenated, ``▁`` as a space, the first one dropped."""
    text = "".join(pieces).replace("\u2581", " ")
    return text[1:] if text.startswith(" ") else text
