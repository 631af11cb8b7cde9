"""SentencePiece model files (``*.model`` / Marian's ``source.spm``): the ModelProto read into a
UnigramTokenizer, and Marian folders' tokenizer (source.spm + vocab.json).

A SentencePiece model is a protobuf ``ModelProto``: its pieces (string, score, type), the trainer
spec (model type, unk id, byte fallback) and the normalizer spec (the compiled character map and
the whitespace switches). Only Unigram models are read; BPE / word / char models are refused.
The normalizer becomes the steps SentencePiece runs: the character map, then (with
``remove_extra_whitespaces``) leading / trailing spaces stripped and runs of spaces collapsed,
then ``▁`` for every space and one in front (``add_dummy_prefix``).
"""

from __future__ import annotations

import base64
import json
import struct
from dataclasses import dataclass
from pathlib import Path

from volvox.errors import TokenizerError, UnsupportedError
from volvox.formats.protobuf import parse
from volvox.tokenizers.marian import MarianTokenizer
from volvox.tokenizers.unigram import UnigramTokenizer

# SentencePiece's piece types (sentencepiece_model.proto)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
UNIGRAM = 1
MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}


@dataclass(frozen=True)
class SentencePieceModel:
    """What a ModelProto holds that encoding needs."""

    pieces: list[tuple[str, float, int]]  # (piece, score, type) in id order
    unk_id: int
    byte_fallback: bool
    charsmap: bytes                       # the compiled normalization map ("" for identity)
    add_dummy_prefix: bool
    remove_extra_whitespaces: bool


def _message(buf, where: str) -> dict[int, list]:
    return parse(memoryview(buf), lambda why: TokenizerError(f"{where}: not a SentencePiece model ({why})"))


def _text(value, where: str) -> str:
    try:
        return bytes(value).decode("utf-8")
    except (TypeError, UnicodeDecodeError):
        raise TokenizerError(f"{where}: a piece is not UTF-8 text") from None


def read_sentencepiece_model(path) -> SentencePieceModel:
    """The pieces and normalizer of SentencePiece model file ``path``; TokenizerError for a missing or
    malformed file, UnsupportedError for a model that is not Unigram."""
    path = Path(path)
    where = str(path)
    try:
        blob = path.read_bytes()
    except OSError as e:
        raise TokenizerError(f"{where}: cannot read the SentencePiece model ({e.strerror or e})") from None
    model = _message(blob, where)
    trainer = _message(model[2][-1], where) if 2 in model else {}
    model_type = trainer.get(3, [UNIGRAM])[-1]
    if model_type != UNIGRAM:
        raise UnsupportedError(f"{where}: a SentencePiece {MODEL_TYPES.get(model_type, model_type)} model "
                               "(only unigram models are read)")
    pieces = []
    for raw in model.get(1, []):
        fields = _message(raw, where)
        if 1 not in fields:
            raise TokenizerError(f"{where}: piece {len(pieces)} has no text")
        score = struct.unpack("<f", struct.pack("<I", fields.get(2, [0])[-1]))[0]
        pieces.append((_text(fields[1][-1], where), score, int(fields.get(3, [NORMAL])[-1])))
    if not pieces:
        raise TokenizerError(f"{where}: the SentencePiece model has no pieces")
    normalizer = _message(model[3][-1], where) if 3 in model else {}
    unk_id = int(trainer.get(40, [0])[-1])
    if not 0 <= unk_id < len(pieces):
        raise TokenizerError(f"{where}: unk_id {unk_id} is outside the {len(pieces)} pieces")
    return SentencePieceModel(pieces, unk_id, bool(trainer.get(35, [0])[-1]), bytes(normalizer.get(2, [b""])[-1]),
                              bool(normalizer.get(3, [1])[-1]), bool(normalizer.get(4, [1])[-1]))


def sentencepiece_tokenizer(path) -> UnigramTokenizer:
    """A UnigramTokenizer that segments text as SentencePiece does with the model at ``path`` (no
    special tokens added: callers add their own)."""
    spm = read_sentencepiece_model(path)
    steps: list[dict] = []
    if spm.charsmap:
        steps.append({"type": "Precompiled", "precompiled_charsmap": base64.b64encode(spm.charsmap).decode("ascii")})
    if spm.remove_extra_whitespaces:
        steps += [{"type": "Strip", "strip_left": True, "strip_right": True},
                  {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]
    scheme = "always" if spm.add_dummy_prefix else "never"
    # control and unknown pieces never match text: they keep their ids but not their strings
    vocab = [(piece if kind in (NORMAL, USER_DEFINED, BYTE, UNUSED) else f"\0{piece}", score)
             for piece, score, kind in spm.pieces]
    return UnigramTokenizer(vocab, spm.unk_id, byte_fallback=spm.byte_fallback,
                            normalizer={"type": "Sequence", "normalizers": steps},
                            pre_tokenizer={"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme},
                            decoder={"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme},
                            where=str(path))


def is_marian_folder(directory: Path) -> bool:
    """Whether ``directory`` holds Marian's tokenizer files."""
    return all((directory / name).is_file() for name in ("source.spm", "target.spm", "vocab.json"))


def read_marian_tokenizer(directory) -> MarianTokenizer:
    """The tokenizer of a Marian folder: source.spm's segmentation, numbered by vocab.json."""
    directory = Path(directory)
    source = sentencepiece_tokenizer(directory / "source.spm")
    path = directory / "vocab.json"
    try:
        vocab = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise TokenizerError(f"{path}: not a readable JSON vocabulary ({e})") from None
    return MarianTokenizer(source, vocab, str(path))
