"""Unigram (SentencePiece) tokenizers as Hugging Face ``tokenizers`` serialises them in tokenizer.json.

Encoding, as ``tokenizers`` does it: added tokens are matched first (longest first) and kept whole;
every other span is normalized (NFKC / NFC / NFD / NFKD, Lowercase, Strip, Replace, Prepend, in a
Sequence), pre-tokenized (Metaspace: spaces become "▁", a "▁" prepended, split before each "▁";
WhitespaceSplit), and each piece is segmented by the Viterbi path of highest total score over
the vocabulary's pieces (an unknown character scores the lowest piece score minus 10; adjacent
unknowns fuse into one unknown token, or become <0xNN> byte tokens with byte fallback). A
TemplateProcessing post-processor adds its special tokens (T5: "</s>" at the end).

SentencePiece's ``Precompiled`` normalizer (the compiled character map of T5, mBART, XLM-R ...) is a
double-array trie over UTF-8 bytes whose leaves point into a blob of NUL-terminated replacements;
it is applied as ``tokenizers`` applies it: per grapheme cluster (of under 6 bytes) the first
(shortest) prefix match replaces the whole cluster, otherwise per character.
"""

from __future__ import annotations

import base64
import json
import re
import struct
import unicodedata
from pathlib import Path

import regex

from volvox.errors import TokenizerError, UnsupportedError

UNK_PENALTY = 10.0
_BYTE_PIECE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


class UnigramStreamDecoder:
    """Incremental detokenizer: the text each pushed id adds (decode of all ids so far, minus the
    text already returned)."""

    def __init__(self, tokenizer: "UnigramTokenizer", skip_special: bool = False):
        self._tokenizer, self._skip_special = tokenizer, skip_special
        self._ids: list[int] = []
        self._emitted = ""

    def push(self, token_id) -> str:
        """Add one id; return the text it completes (held back while it ends in a partial byte sequence)."""
        self._ids.append(token_id)
        text = self._tokenizer.decode(self._ids, skip_special=self._skip_special)
        if text.endswith("\ufffd") or not text.startswith(self._emitted):
            return ""
        piece, self._emitted = text[len(self._emitted):], text
        return piece

    def flush(self) -> str:
        """End the stream: whatever is left, and reset."""
        text = self._tokenizer.decode(self._ids, skip_special=self._skip_special)
        tail = text[len(self._emitted):] if text.startswith(self._emitted) else ""
        self._ids, self._emitted = [], ""
        return tail


class UnigramTokenizer:
    """A Unigram model with its normalizer, pre-tokenizer, post-processor and added tokens."""

    def __init__(self, pieces: list[tuple[str, float]], unk_id: int | None, *, byte_fallback: bool = False,
                 normalizer: dict | None = None, pre_tokenizer: dict | None = None, decoder: dict | None = None,
                 added_tokens: list[dict] = (), template: list | None = None, where: str = "tokenizer"):
        if not pieces:
            raise TokenizerError(f"{where}: the Unigram vocabulary is empty")
        if unk_id is not None and not 0 <= unk_id < len(pieces):
            raise TokenizerError(f"{where}: unk_id {unk_id} is outside the vocabulary of {len(pieces)}")
        self.where = where
        self.pieces = [p for p, _ in pieces]
        self.scores = [float(s) for _, s in pieces]
        self.vocab_size = len(pieces)
        self.unk_id, self.byte_fallback = unk_id, byte_fallback
        self._ids = {p: i for i, p in enumerate(self.pieces)}  # the last duplicate wins, as tokenizers
        self._min_score = min(self.scores)
        self._max_len = max(len(p) for p in self.pieces)
        self._normalizers = _normalizer_steps(normalizer, where)
        self._pre = _pre_tokenizer_steps(pre_tokenizer, where)
        self._decoder = _decoder_steps(decoder, where)
        self.added = {t["content"]: int(t["id"]) for t in added_tokens}
        self._special_ids = frozenset(int(t["id"]) for t in added_tokens if t.get("special"))
        self._added_re = (re.compile("|".join(re.escape(t) for t in sorted(self.added, key=len, reverse=True)))
                          if self.added else None)
        self._template = template or []
        self.eos_id = self._ids.get("</s>", self.added.get("</s>"))
        self.bos_id = None
        self.eog_ids = {self.eos_id} if self.eos_id is not None else set()

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_tokenizer_json(cls, path) -> "UnigramTokenizer":
        """The tokenizer of a tokenizer.json whose model is Unigram; TokenizerError for a malformed
        file, UnsupportedError for a normalizer / pre-tokenizer / decoder this module lacks."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise TokenizerError(f"{path}: no such tokenizer file") from None
        except (ValueError, UnicodeDecodeError) as e:
            raise TokenizerError(f"{path}: not valid JSON ({e})") from None
        model = data.get("model") if isinstance(data, dict) else None
        if not isinstance(model, dict) or model.get("type") != "Unigram":
            raise TokenizerError(f"{path}: not a Unigram tokenizer.json (model type "
                                 f"{model.get('type') if isinstance(model, dict) else None!r})")
        vocab = model.get("vocab")
        if not isinstance(vocab, list) or not all(isinstance(v, list) and len(v) == 2 for v in vocab):
            raise TokenizerError(f"{path}: model.vocab must be a list of [piece, score] pairs")
        template = _template_of(data.get("post_processor"), str(path))
        return cls([(str(p), float(s)) for p, s in vocab], model.get("unk_id"),
                   byte_fallback=bool(model.get("byte_fallback")), normalizer=data.get("normalizer"),
                   pre_tokenizer=data.get("pre_tokenizer"), decoder=data.get("decoder"),
                   added_tokens=data.get("added_tokens") or [], template=template, where=str(path))

    # ------------------------------------------------------------------ encoding
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text`` (with the post-processor's special tokens unless told otherwise)."""
        if not isinstance(text, str):
            raise TokenizerError(f"text must be a str, got {type(text).__name__}")
        ids: list[int] = []
        pos, first = 0, True
        for m in (self._added_re.finditer(text) if self._added_re else ()):
            if m.start() > pos:
                self._encode_span(text[pos:m.start()], first, ids)
            ids.append(self.added[m.group()])
            pos, first = m.end(), False
        if pos < len(text):
            self._encode_span(text[pos:], first, ids)
        if not add_special_tokens:
            return ids
        out: list[int] = []
        for item in self._template:
            out.extend(ids if item is None else [item])
        return out if self._template else ids

    def _encode_span(self, text: str, at_start: bool, out: list[int]) -> None:
        for step in self._normalizers:
            text = step(text)
        words = [text] if text else []
        for step in self._pre:
            words = [w for word in words for w in step(word, at_start)]
        for word in words:
            for piece in self._segment(word):
                self._emit(piece, out)

    def _segment(self, word: str) -> list[str]:
        """The pieces of the highest-scoring segmentation of ``word`` (tokenizers' encode_optimized)."""
        n = len(word)
        best = [0.0] * (n + 1)
        start: list[int | None] = [None] * (n + 1)
        piece_id = [0] * (n + 1)
        unk_score = self._min_score - UNK_PENALTY
        for i in range(n):
            if i and start[i] is None:
                continue
            here, single = best[i], False
            for j in range(i + 1, min(n, i + self._max_len) + 1):  # prefixes in order of length
                tid = self._ids.get(word[i:j])
                if tid is None:
                    continue
                score = self.scores[tid] + here
                if start[j] is None or score > best[j]:
                    best[j], start[j], piece_id[j] = score, i, tid
                single |= j == i + 1
            if not single:
                if self.unk_id is None:
                    raise TokenizerError(f"{self.where}: character {word[i]!r} is not in the vocabulary "
                                         "and the model has no unk token")
                score = unk_score + here
                if start[i + 1] is None or score > best[i + 1]:
                    best[i + 1], start[i + 1], piece_id[i + 1] = score, i, self.unk_id
        pieces: list[str] = []
        unknown: list[str] = []
        end = n
        while end > 0:
            begin = start[end]
            if piece_id[end] == self.unk_id and self.unk_id is not None:  # adjacent unknowns fuse
                unknown.append(word[begin:end])
            else:
                if unknown:
                    pieces.append("".join(reversed(unknown)))
                    unknown = []
                pieces.append(word[begin:end])
            end = begin
        if unknown:
            pieces.append("".join(reversed(unknown)))
        return pieces[::-1]

    def _emit(self, piece: str, out: list[int]) -> None:
        tid = self._ids.get(piece)
        if tid is not None:
            out.append(tid)
            return
        if self.byte_fallback:
            byte_ids = [self._ids.get(f"<0x{b:02X}>") for b in piece.encode("utf-8")]
            if all(i is not None for i in byte_ids):
                out.extend(byte_ids)
                return
        out.append(self.unk_id)

    # ------------------------------------------------------------------ decoding
    def decode(self, ids, skip_special: bool = False) -> str:
        """Text of ``ids`` through the tokenizer.json decoder (Metaspace, ByteFallback ...)."""
        tokens = []
        for i in ids:
            i = int(i)
            if not 0 <= i < max(self.vocab_size, max(self.added.values(), default=-1) + 1):
                raise TokenizerError(f"token id {i} is outside the vocabulary (size {self.vocab_size})")
            if skip_special and i in self._special_ids:
                continue
            tokens.append(self.pieces[i] if i < self.vocab_size else
                          next(t for t, j in self.added.items() if j == i))
        for step in self._decoder:
            tokens = step(tokens)
        return "".join(tokens)

    def stream_decoder(self, skip_special: bool = False) -> UnigramStreamDecoder:
        """A fresh incremental decoder for generated ids."""
        return UnigramStreamDecoder(self, skip_special)


# ---------------------------------------------------------------------- pipeline steps
def _steps(config: dict | None, key: str, make, where: str) -> list:
    if config is None:
        return []
    if not isinstance(config, dict):
        raise TokenizerError(f"{where}: {key} must be an object, got {config!r}")
    if config.get("type") == "Sequence":
        parts = config.get("normalizers") or config.get("pretokenizers") or config.get("decoders") or []
        return [s for part in parts for s in _steps(part, key, make, where)]
    return [make(config)]


def _normalizer_steps(config, where: str) -> list:
    def make(c: dict):
        kind = c.get("type")
        if kind in ("NFKC", "NFC", "NFD", "NFKD"):
            return lambda t, form=kind: unicodedata.normalize(form, t)
        if kind == "Lowercase":
            return str.lower
        if kind == "Strip":
            left, right = c.get("strip_left", True), c.get("strip_right", True)
            return lambda t: (t.lstrip() if left else t).rstrip() if right else (t.lstrip() if left else t)
        if kind == "Replace":
            return _replacer(c, where)
        if kind == "Prepend":
            return lambda t, p=c.get("prepend", ""): p + t if t else t
        if kind == "Precompiled":
            return PrecompiledCharsmap(c.get("precompiled_charsmap") or "", where).normalize
        raise UnsupportedError(f"{where}: normalizer {kind!r} is not supported")
    return _steps(config, "normalizer", make, where)


class PrecompiledCharsmap:
    """SentencePiece's compiled normalization map: a Darts double-array trie (u32 units) over UTF-8
    keys, then the replacement strings, each ending in NUL."""

    def __init__(self, charsmap_base64: str, where: str):
        try:
            blob = base64.b64decode(charsmap_base64, validate=True)
        except ValueError:
            raise TokenizerError(f"{where}: precompiled_charsmap is not base64") from None
        if not blob:
            self._units, self._strings = (), b""
            return
        if len(blob) < 4 or 4 + struct.unpack_from("<I", blob)[0] > len(blob):
            raise TokenizerError(f"{where}: precompiled_charsmap is truncated")
        trie_bytes = struct.unpack_from("<I", blob)[0]
        self._units = struct.unpack_from(f"<{trie_bytes // 4}I", blob, 4)
        self._strings = blob[4 + trie_bytes:]

    def _first_match(self, key: bytes) -> str | None:
        """The replacement of the shortest key that prefixes ``key``, or None."""
        units = self._units
        if not units:
            return None
        pos = _offset(units[0])
        for byte in key:
            if byte == 0:
                break
            pos ^= byte
            if pos >= len(units) or units[pos] & ((1 << 31) | 0xFF) != byte:
                return None
            unit = units[pos]
            pos ^= _offset(unit)
            if (unit >> 8) & 1:  # a key ends here: its leaf holds the replacement's offset
                start = units[pos] & ((1 << 31) - 1)
                end = self._strings.find(b"\0", start)
                return self._strings[start:end if end >= 0 else len(self._strings)].decode("utf-8", "replace")
        return None

    def normalize(self, text: str) -> str:
        """``text`` with every mapped grapheme cluster (or character) replaced."""
        if not self._units:
            return text
        out = []
        for grapheme in regex.findall(r"\X", text):
            raw = grapheme.encode("utf-8")
            if len(raw) < 6:
                norm = self._first_match(raw)
                if norm is not None:
                    out.append(norm)
                    continue
            for ch in grapheme:
                norm = self._first_match(ch.encode("utf-8"))
                out.append(ch if norm is None else norm)
        return "".join(out)


def _offset(unit: int) -> int:
    """A Darts unit's offset to its children."""
    return (unit >> 10) << ((unit & (1 << 9)) >> 6)


def _replacer(c: dict, where: str):
    pattern, content = c.get("pattern") or {}, c.get("content", "")
    if "String" in pattern:
        return lambda t, s=pattern["String"]: t.replace(s, content)
    if "Regex" in pattern:
        rx = re.compile(pattern["Regex"])
        return lambda t: rx.sub(lambda m: content, t)
    raise TokenizerError(f"{where}: Replace needs a String or Regex pattern, got {pattern!r}")


def _pre_tokenizer_steps(config, where: str) -> list:
    def make(c: dict):
        kind = c.get("type")
        if kind == "Metaspace":
            rep = c.get("replacement", "\u2581")
            scheme = c.get("prepend_scheme") or ("always" if c.get("add_prefix_space", True) else "never")
            split = c.get("split", True)
            return lambda word, at_start: _metaspace(word, at_start, rep, scheme, split)
        if kind == "WhitespaceSplit":
            return lambda word, at_start: word.split()
        raise UnsupportedError(f"{where}: pre_tokenizer {kind!r} is not supported")
    return _steps(config, "pre_tokenizer", make, where)


def _metaspace(word: str, at_start: bool, rep: str, scheme: str, split: bool) -> list[str]:
    """tokenizers' Metaspace: spaces -> ``rep``, ``rep`` prepended ("always"; "first": only at the
    text's start), then split before every ``rep`` (it joins the piece after it)."""
    word = word.replace(" ", rep)
    if (scheme == "always" or (scheme == "first" and at_start)) and not word.startswith(rep):
        word = rep + word
    if not split:
        return [word] if word else []
    cuts = [i for i, ch in enumerate(word) if ch == rep and i > 0]
    return [word[a:b] for a, b in zip([0] + cuts, cuts + [len(word)]) if a < b]


def _decoder_steps(config, where: str) -> list:
    def make(c: dict):
        kind = c.get("type")
        if kind == "Metaspace":
            rep = c.get("replacement", "\u2581")
            scheme = c.get("prepend_scheme") or ("always" if c.get("add_prefix_space", True) else "never")

            def metaspace(tokens):
                out = [t.replace(rep, " ") for t in tokens]
                if out and scheme != "never" and out[0].startswith(" "):
                    out[0] = out[0][1:]
                return out
            return metaspace
        if kind == "ByteFallback":
            return _byte_fallback
        if kind == "Fuse":
            return lambda tokens: ["".join(tokens)]
        if kind == "Replace":
            replace = _replacer(c, where)
            return lambda tokens: [replace(t) for t in tokens]
        if kind == "Strip":
            n, left, right = c.get("content", " "), c.get("start", 0), c.get("stop", 0)
            return lambda tokens: [_strip(t, n, left, right) for t in tokens]
        raise UnsupportedError(f"{where}: decoder {kind!r} is not supported")
    return _steps(config, "decoder", make, where)


def _strip(token: str, content: str, left: int, right: int) -> str:
    for _ in range(left):
        if token.startswith(content):
            token = token[len(content):]
    for _ in range(right):
        if token.endswith(content):
            token = token[:-len(content)]
    return token


def _byte_fallback(tokens: list[str]) -> list[str]:
    """<0xNN> tokens joined into the UTF-8 text they spell (invalid bytes: U+FFFD per byte)."""
    out, pending = [], bytearray()
    for t in tokens:
        m = _BYTE_PIECE.match(t)
        if m:
            pending.append(int(m.group(1), 16))
            continue
        if pending:
            out.append(_bytes_text(pending))
            pending = bytearray()
        out.append(t)
    if pending:
        out.append(_bytes_text(pending))
    return out


def _bytes_text(data: bytearray) -> str:
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        return "\ufffd" * len(data)


def _template_of(post: dict | None, where: str) -> list | None:
    """A TemplateProcessing's single-sequence template as [id or None (the text)], or None."""
    if post is None:
        return None
    if not isinstance(post, dict) or post.get("type") != "TemplateProcessing":
        raise UnsupportedError(f"{where}: post_processor {post.get('type') if isinstance(post, dict) else post!r} "
                               "is not supported")
    specials = post.get("special_tokens") or {}
    out = []
    for item in post.get("single") or []:
        if "Sequence" in item:
            out.append(None)
        elif "SpecialToken" in item:
            name = item["SpecialToken"]["id"]
            ids = (specials.get(name) or {}).get("ids") or []
            if len(ids) != 1:
                raise TokenizerError(f"{where}: post_processor special token {name!r} must have one id")
            out.append(int(ids[0]))
    return out
