"""WordPiece (BERT) tokenization, matching Hugging Face ``tokenizers``.

text -> added/special tokens split out -> BertNormalizer (clean control chars,
space out CJK ideographs, strip accents, lowercase char by char) ->
BertPreTokenizer (split on whitespace, isolate punctuation) -> greedy
longest-match-first WordPiece per word (``##`` continuations; a word with no
full cover becomes [UNK]) -> [CLS] ... [SEP] as the post-processor says.
"""

from __future__ import annotations

import json
import string
import unicodedata
from pathlib import Path

import regex

from volvox.errors import TokenizerError

# Rust's char::is_whitespace (the Unicode White_Space property); Python's isspace() differs.
_WHITE_SPACE = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000"
                         + "".join(map(chr, range(0x2000, 0x200B))))
_CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
        (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def _is_control(c: str) -> bool:
    """tokenizers' is_control: Unicode category C* except tab, newline and carriage return."""
    return c not in "\t\n\r" and unicodedata.category(c).startswith("C")


def _is_cjk(c: str) -> bool:
    cp = ord(c)
    return any(lo <= cp <= hi for lo, hi in _CJK)


def _is_punctuation(c: str) -> bool:
    """ASCII punctuation or any Unicode P* character (tokenizers' is_bert_punc)."""
    return c in string.punctuation or unicodedata.category(c).startswith("P")


class WordPieceTokenizer:
    """BERT-style WordPiece tokenizer: ``encode(text) -> ids`` with [CLS]/[SEP] around."""

    def __init__(self, vocab: dict[str, int], *, unk_token: str = "[UNK]", prefix: str = "##",
                 max_chars: int = 100, lowercase: bool = True, strip_accents: bool | None = None,
                 clean_text: bool = True, chinese_chars: bool = True, prefix_ids: tuple[int, ...] = (),
                 suffix_ids: tuple[int, ...] = (), added_tokens: dict[str, int] | None = None):
        """vocab: token -> id. prefix_ids / suffix_ids wrap every encoded text (e.g. [CLS] / [SEP]).
        ``strip_accents`` None follows ``lowercase`` (as BertNormalizer). ``added_tokens`` are
        matched literally in the raw text before normalization."""
        if not vocab:
            raise TokenizerError("WordPiece vocabulary is empty")
        if unk_token not in vocab:
            raise TokenizerError(f"WordPiece unk_token {unk_token!r} is not in the vocabulary")
        self.vocab = dict(vocab)
        self.vocab_size = max(self.vocab.values()) + 1
        self.unk_id = self.vocab[unk_token]
        self.prefix, self.max_chars = prefix, max_chars
        self.lowercase, self.clean_text, self.chinese_chars = lowercase, clean_text, chinese_chars
        self.strip_accents = lowercase if strip_accents is None else strip_accents
        self.prefix_ids, self.suffix_ids = tuple(prefix_ids), tuple(suffix_ids)
        self.added_tokens = dict(added_tokens or {})
        self._added_re = (regex.compile("|".join(regex.escape(t) for t in sorted(self.added_tokens, key=len, reverse=True)))
                          if self.added_tokens else None)

    @classmethod
    def from_tokenizer_json(cls, path) -> "WordPieceTokenizer":
        """Build from an HF tokenizer.json with a WordPiece model, BertNormalizer and BertPreTokenizer."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise TokenizerError(f"{path}: cannot read tokenizer.json: {e}") from None
        try:
            return cls._from_json_doc(data, path)
        except (AttributeError, TypeError, KeyError, ValueError, IndexError) as e:
            # a field of the wrong JSON type (a list where an object belongs, a null id)
            raise TokenizerError(f"{path}: malformed WordPiece tokenizer.json ({type(e).__name__}: {e})") from None

    @classmethod
    def _from_json_doc(cls, data, path: Path) -> "WordPieceTokenizer":
        """from_tokenizer_json's work on the parsed document."""
        model = data.get("model") if isinstance(data, dict) else None
        if not isinstance(model, dict) or model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
            raise TokenizerError(f"{path}: not a WordPiece tokenizer (model type "
                                 f"{model.get('type') if isinstance(model, dict) else None!r})")
        norm = data.get("normalizer") or {"type": "BertNormalizer", "lowercase": False, "strip_accents": False,
                                          "clean_text": False, "handle_chinese_chars": False}
        if norm.get("type") != "BertNormalizer":
            raise TokenizerError(f"{path}: normalizer {norm.get('type')!r} is not supported (BertNormalizer only)")
        pre = data.get("pre_tokenizer")
        if not isinstance(pre, dict) or pre.get("type") != "BertPreTokenizer":
            raise TokenizerError(f"{path}: pre_tokenizer {pre!r} is not supported (BertPreTokenizer only)")
        vocab = model["vocab"]
        bad = next((t for t, i in vocab.items() if not isinstance(i, int) or isinstance(i, bool) or i < 0), None)
        if bad is not None:
            raise TokenizerError(f"{path}: token {bad!r} has invalid id {vocab[bad]!r}")
        added_tokens = data.get("added_tokens") or []
        if not isinstance(added_tokens, list):
            raise TokenizerError(f"{path}: added_tokens must be a JSON array, got {type(added_tokens).__name__}")
        added = {t["content"]: t["id"] for t in added_tokens if isinstance(t, dict)}
        prefix_ids, suffix_ids = _template_ids(data.get("post_processor"), {**vocab, **added}, path)
        unk, prefix = model.get("unk_token", "[UNK]"), model.get("continuing_subword_prefix", "##")
        max_chars = model.get("max_input_chars_per_word", 100)
        if not (isinstance(unk, str) and isinstance(prefix, str)):
            raise TokenizerError(f"{path}: model.unk_token and model.continuing_subword_prefix must be strings, "
                                 f"got {unk!r} and {prefix!r}")
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
            raise TokenizerError(f"{path}: model.max_input_chars_per_word must be a positive integer, got {max_chars!r}")
        return cls(vocab, unk_token=unk, prefix=prefix, max_chars=max_chars,
                   lowercase=bool(norm.get("lowercase", True)), strip_accents=norm.get("strip_accents"),
                   clean_text=bool(norm.get("clean_text", True)),
                   chinese_chars=bool(norm.get("handle_chinese_chars", True)),
                   prefix_ids=prefix_ids, suffix_ids=suffix_ids, added_tokens=added)

    # ---- encode ---------------------------------------------------------------

    def normalize(self, text: str) -> str:
        """BertNormalizer: clean text, space out CJK, strip accents, lowercase (each as configured)."""
        if self.clean_text:
            text = "".join(" " if c in _WHITE_SPACE else c for c in text
                           if c not in "\0\ufffd" and not _is_control(c))
        if self.chinese_chars:
            text = "".join(f" {c} " if _is_cjk(c) else c for c in text)
        if self.strip_accents:
            text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
        if self.lowercase:
            text = "".join(c.lower() for c in text)  # per character: no final-sigma rule, as Rust
        return text

    def pre_tokenize(self, text: str) -> list[str]:
        """BertPreTokenizer: words split on whitespace, every punctuation character its own word."""
        words, word = [], []
        for c in text:
            if c in _WHITE_SPACE or _is_punctuation(c):
                if word:
                    words.append("".join(word))
                    word = []
                if c not in _WHITE_SPACE:
                    words.append(c)
            else:
                word.append(c)
        if word:
            words.append("".join(word))
        return words

    def _word_ids(self, word: str, out: list[int]) -> None:
        """Append the WordPiece ids of one word (greedy longest match; [UNK] if it cannot be covered)."""
        if len(word) > self.max_chars:
            out.append(self.unk_id)
            return
        pieces, start = [], 0
        while start < len(word):
            for end in range(len(word), start, -1):
                piece = word[start:end] if start == 0 else self.prefix + word[start:end]
                if piece in self.vocab:
                    pieces.append(self.vocab[piece])
                    start = end
                    break
            else:
                out.append(self.unk_id)
                return
        out.extend(pieces)

    def encode(self, text: str, add_special_tokens: bool = True, max_length: int | None = None) -> list[int]:
        """Token ids of ``text``; with ``max_length``, content is truncated so the result fits."""
        if not isinstance(text, str):
            raise TokenizerError(f"encode() needs a str, got {type(text).__name__}")
        if max_length is not None and (not isinstance(max_length, int) or max_length < 0):
            raise TokenizerError(f"max_length must be a non-negative int or None, got {max_length!r}")
        ids: list[int] = []
        pos = 0
        for m in (self._added_re.finditer(text) if self._added_re else ()):
            self._encode_plain(text[pos:m.start()], ids)
            ids.append(self.added_tokens[m.group()])
            pos = m.end()
        self._encode_plain(text[pos:], ids)
        if not add_special_tokens:
            return ids[:max_length] if max_length is not None else ids
        if max_length is not None:
            room = max_length - len(self.prefix_ids) - len(self.suffix_ids)
            if room < 0:
                raise TokenizerError(f"max_length {max_length} cannot hold the special tokens")
            ids = ids[:room]
        return [*self.prefix_ids, *ids, *self.suffix_ids]

    def _encode_plain(self, text: str, out: list[int]) -> None:
        for word in self.pre_tokenize(self.normalize(text)):
            self._word_ids(word, out)


def _template_ids(post: dict | None, vocab: dict[str, int], path: Path) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(ids before, ids after) a single sequence, from a BertProcessing or TemplateProcessing post-processor."""
    if post is None:
        return (), ()
    kind = post.get("type")
    if kind == "BertProcessing":
        return (int(post["cls"][1]),), (int(post["sep"][1]),)
    if kind == "TemplateProcessing":
        specials = post.get("special_tokens", {})
        before, after, seen_a = [], [], False
        for item in post.get("single", []):
            if "Sequence" in item:
                seen_a = True
            elif "SpecialToken" in item:
                name = item["SpecialToken"]["id"]
                ids = specials.get(name, {}).get("ids") or ([vocab[name]] if name in vocab else None)
                if ids is None:
                    raise TokenizerError(f"{path}: post_processor special token {name!r} has no id")
                (after if seen_a else before).extend(int(i) for i in ids)
        return tuple(before), tuple(after)
    raise TokenizerError(f"{path}: post_processor {kind!r} is not supported (BertProcessing, TemplateProcessing)")
