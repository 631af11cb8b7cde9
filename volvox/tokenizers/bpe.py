"""Byte-level BPE (GPT-2 style): text <-> token ids.

Text is split into pre-tokens (pretokenize.py), each pre-token's UTF-8 bytes
are mapped to printable characters (GPT-2's bytes_to_unicode), and adjacent
symbols are merged lowest merge rank first, leftmost first on ties — the
order HF tokenizers and llama.cpp use. A byte whose character is missing from
the vocabulary is dropped, as both of them do. Special (control) tokens written
literally in the text are matched before any of that.
"""

import heapq
import json
from pathlib import Path

import regex

from volvox.errors import TokenizerError
from volvox.tokenizers.byte_vocab import ByteVocabulary
from volvox.tokenizers.pretokenize import Pretokenizer, pre_name_from_hf

# GGUF tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
_GGUF_CONTROL = 3
_GGUF_USER_DEFINED = 4

# Control tokens that end a generation when present in the vocab (as llama.cpp's list).
_EOG_NAMES = (
    "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>",
    "<end_of_turn>", "<|end_of_text|>", "</s>", "<EOT>",
)

_WORD_CACHE_MAX = 1 << 16  # pre-token -> ids entries kept before the cache is cleared


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


_BYTE_TO_CHAR = bytes_to_unicode()
_CHAR_TO_BYTE = {c: b for b, c in _BYTE_TO_CHAR.items()}


def _split_merge(merge, index: int) -> tuple[str, str]:
    """A merge is "a b" (split at the first space after position 0) or an [a, b] pair."""
    if isinstance(merge, str):
        pos = merge.find(" ", 1)
        if pos > 0:
            return merge[:pos], merge[pos + 1:]
    elif isinstance(merge, (list, tuple)) and len(merge) == 2 and all(isinstance(s, str) for s in merge):
        return merge[0], merge[1]
    raise TokenizerError(f"merge #{index} is malformed: {merge!r} (expected 'a b' or [a, b])")


_TO_LATIN1 = {ord(c): b for c, b in _CHAR_TO_BYTE.items()}  # alphabet char -> the code point of its byte
_DROP_ALPHABET = dict.fromkeys(_TO_LATIN1)                   # alphabet char -> deleted


def _token_text_bytes(token: str) -> bytes:
    """Bytes of a normal vocab token; tokens outside the byte alphabet are raw UTF-8 (as HF). (Two
    str.translate calls: a Python loop over each character was a third of a 49k-token vocab's load.)"""
    if token.translate(_DROP_ALPHABET):  # a character outside the byte alphabet
        return token.encode("utf-8")
    return token.translate(_TO_LATIN1).encode("latin-1")


class ByteLevelBPETokenizer(ByteVocabulary):
    """GPT-2-style byte-level BPE tokenizer with special tokens and a chat template."""

    def __init__(
        self,
        tokens: list[str],
        merges: list[str],
        special_tokens: dict[str, int] | None = None,
        pre: str = "gpt2",
        bos_id: int | None = None,
        eos_id: int | None = None,
        add_bos: bool = False,
        chat_template: str | None = None,
        *,
        added_tokens: dict[str, int] | None = None,
        ignore_merges: bool = False,
    ):
        """Build from the vocab (id -> token text) and merges ("a b" or [a, b], best first).

        ``special_tokens`` (control tokens) are matched in text only when
        ``encode(parse_special=True)`` and dropped by ``decode(skip_special=True)``;
        ``added_tokens`` (user-defined) are always matched and always decoded.
        ``ignore_merges`` takes a pre-token that is itself in the vocab whole (LLaMA-3).
        """
        tokens = list(tokens)
        if not tokens:
            raise TokenizerError("tokenizer vocabulary is empty")
        if not all(isinstance(t, str) for t in tokens):
            raise TokenizerError("tokenizer vocabulary must be a list of strings")
        self.tokens = tokens
        self.vocab_size = len(tokens)
        self._vocab = {t: i for i, t in enumerate(tokens)}  # last duplicate wins, as llama.cpp

        self._ranks = {}
        for rank, merge in enumerate(merges):
            a, b = _split_merge(merge, rank)
            for part in (a, b, a + b):
                if part not in self._vocab:
                    raise TokenizerError(f"merge #{rank} {a!r} + {b!r}: token {part!r} is not in the vocabulary")
            self._ranks.setdefault((a, b), rank)

        self.special_tokens = self._check_literals(special_tokens, "special token")
        self.added_tokens = self._check_literals(added_tokens, "added token")
        self._skip_ids = frozenset(self.special_tokens.values())
        literal_ids = self._skip_ids | frozenset(self.added_tokens.values())
        self._id_bytes = [
            t.encode("utf-8") if i in literal_ids else _token_text_bytes(t) for i, t in enumerate(tokens)
        ]
        self._literal_to_id = {**self.added_tokens, **self.special_tokens}
        self._literal_re_all = self._alternation(self._literal_to_id)
        self._literal_re_added = self._alternation(self.added_tokens)

        self.bos_id = self._check_id(bos_id, "bos_id")
        self.eos_id = self._check_id(eos_id, "eos_id")
        self.add_bos = bool(add_bos)
        if self.add_bos and self.bos_id is None:
            raise TokenizerError("add_bos is set but the tokenizer has no bos_id")
        self.eog_ids = {self._vocab[n] for n in _EOG_NAMES if n in self._vocab}
        if self.eos_id is not None:
            self.eog_ids.add(self.eos_id)
        self.chat_template = chat_template
        self.pre = pre
        self._pretokenizer = Pretokenizer(pre)
        self._ignore_merges = ignore_merges
        self._word_cache: dict[str, tuple[int, ...]] = {}

    # ---- construction helpers -------------------------------------------------

    def _check_literals(self, literals: dict[str, int] | None, what: str) -> dict[str, int]:
        """A copy of a text -> id map with every text non-empty and every id valid."""
        checked = {}
        for text, token_id in (literals or {}).items():
            if not isinstance(text, str) or not text:
                raise TokenizerError(f"{what} {text!r} must be a non-empty string")
            checked[text] = self._check_id(token_id, f"{what} {text!r} id")
        return checked

    @staticmethod
    def _alternation(literals: dict[str, int]):
        """A regex matching any literal, leftmost then longest first; None when there are none."""
        if not literals:
            return None
        return regex.compile("|".join(regex.escape(t) for t in sorted(literals, key=len, reverse=True)))

    @classmethod
    def from_gguf_metadata(cls, md: dict) -> "ByteLevelBPETokenizer":
        """Build from a GGUF metadata dict (``tokenizer.ggml.*`` keys, model "gpt2")."""
        model = md.get("tokenizer.ggml.model", "gpt2")
        if model != "gpt2":
            raise TokenizerError(f"tokenizer.ggml.model {model!r} is not byte-level BPE ('gpt2')")
        tokens = md.get("tokenizer.ggml.tokens")
        merges = md.get("tokenizer.ggml.merges")
        if tokens is None:
            raise TokenizerError("GGUF metadata has no tokenizer.ggml.tokens")
        if merges is None:
            raise TokenizerError("GGUF metadata has no tokenizer.ggml.merges (required for 'gpt2' BPE)")
        tokens = list(tokens)
        types = md.get("tokenizer.ggml.token_type")
        types = [1] * len(tokens) if types is None else [int(t) for t in types]
        if len(types) != len(tokens):
            raise TokenizerError(
                f"tokenizer.ggml.token_type has {len(types)} entries for {len(tokens)} tokens"
            )
        special = {t: i for i, (t, k) in enumerate(zip(tokens, types)) if k == _GGUF_CONTROL}
        added = {t: i for i, (t, k) in enumerate(zip(tokens, types)) if k == _GGUF_USER_DEFINED}
        pre = md.get("tokenizer.ggml.pre") or "default"
        return cls(
            tokens,
            merges,
            special,
            pre=pre,
            bos_id=md.get("tokenizer.ggml.bos_token_id"),
            eos_id=md.get("tokenizer.ggml.eos_token_id"),
            add_bos=bool(md.get("tokenizer.ggml.add_bos_token", False)),
            chat_template=md.get("tokenizer.chat_template"),
            added_tokens=added,
            ignore_merges=pre == "llama-bpe",
        )

    @classmethod
    def from_tokenizer_json(cls, path) -> "ByteLevelBPETokenizer":
        """Build from an HF ``tokenizer.json`` (byte-level BPE); a sibling tokenizer_config.json
        supplies bos/eos, add_bos_token and the chat template when present."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise TokenizerError(f"{path}: cannot read tokenizer.json: {exc}") from None
        model = data.get("model") if isinstance(data, dict) else None
        if not isinstance(model, dict) or model.get("type") != "BPE":
            kind = model.get("type") if isinstance(model, dict) else None
            raise TokenizerError(f"{path}: model type {kind!r} is not supported (only byte-level BPE)")
        for key in ("continuing_subword_prefix", "end_of_word_suffix"):
            if model.get(key):
                raise TokenizerError(f"{path}: BPE with {key}={model[key]!r} is not supported")
        if model.get("byte_fallback"):
            raise TokenizerError(f"{path}: byte_fallback BPE (SentencePiece-style) is not byte-level BPE")
        if data.get("normalizer") is not None:
            raise TokenizerError(f"{path}: normalizer {data['normalizer']!r} is not supported")
        try:
            pre = pre_name_from_hf(data.get("pre_tokenizer"))
        except TokenizerError as exc:
            raise TokenizerError(f"{path}: {exc}") from None

        for key, kind in (("vocab", dict), ("merges", list)):
            if not isinstance(model.get(key) or kind(), kind):
                raise TokenizerError(f"{path}: model.{key} must be a JSON {'object' if kind is dict else 'array'}")
        id_of = dict(model.get("vocab") or {})
        special, added = {}, {}
        added_tokens = data.get("added_tokens") or []
        if not isinstance(added_tokens, list):
            raise TokenizerError(f"{path}: added_tokens must be a JSON array, got {type(added_tokens).__name__}")
        for tok in added_tokens:
            if not isinstance(tok, dict):
                raise TokenizerError(f"{path}: added token {tok!r} is not an object")
            content, token_id = tok.get("content"), tok.get("id")
            if not isinstance(content, str):
                raise TokenizerError(f"{path}: added token {tok!r:.80}: content must be a string")
            id_of[content] = token_id
            (special if tok.get("special") else added)[content] = token_id
        text_of = {}
        for text, token_id in id_of.items():
            if not isinstance(text, str) or not isinstance(token_id, int) or token_id < 0:
                raise TokenizerError(f"{path}: token {text!r} has invalid id {token_id!r}")
            if token_id in text_of:
                raise TokenizerError(f"{path}: id {token_id} is given to both {text_of[token_id]!r} and {text!r}")
            text_of[token_id] = text
        if not text_of:
            raise TokenizerError(f"{path}: the vocabulary is empty")
        if max(text_of) != len(text_of) - 1:
            gap = next(i for i in range(len(text_of)) if i not in text_of)
            raise TokenizerError(f"{path}: vocabulary ids are not dense (first missing id {gap})")
        tokens = [text_of[i] for i in range(len(text_of))]

        config = _read_tokenizer_config(path.with_name("tokenizer_config.json"))

        def literal_id(key):
            value = config.get(key)
            text = value.get("content") if isinstance(value, dict) else value
            return id_of.get(text) if isinstance(text, str) else None

        return cls(
            tokens,
            model.get("merges") or [],
            special,
            pre=pre,
            bos_id=literal_id("bos_token"),
            eos_id=literal_id("eos_token"),
            add_bos=bool(config.get("add_bos_token", False)) and literal_id("bos_token") is not None,
            chat_template=_chat_template_of(config),
            added_tokens=added,
            ignore_merges=bool(model.get("ignore_merges", False)),
        )

    # ---- encode ---------------------------------------------------------------

    def encode(self, text: str, add_bos: bool | None = None, parse_special: bool = True) -> list[int]:
        """Token ids of ``text``; special tokens written in it become their ids when ``parse_special``."""
        ids = self._first_ids(text, add_bos)
        literal_re = self._literal_re_all if parse_special else self._literal_re_added
        if literal_re is None:
            self._encode_plain(text, ids)
            return ids
        pos = 0
        for m in literal_re.finditer(text):
            self._encode_plain(text[pos:m.start()], ids)
            ids.append(self._literal_to_id[m.group()])
            pos = m.end()
        self._encode_plain(text[pos:], ids)
        return ids

    def _encode_plain(self, text: str, out: list[int]) -> None:
        """Append the ids of text that holds no special tokens."""
        cache = self._word_cache
        for word in self._pretokenizer.split(text):
            ids = cache.get(word)
            if ids is None:
                ids = self._bpe(word)
                if len(cache) >= _WORD_CACHE_MAX:
                    cache.clear()
                cache[word] = ids
            out.extend(ids)

    def _bpe(self, word: str) -> tuple[int, ...]:
        """Ids of one pre-token: merge adjacent symbols by rank (a heap of candidate pairs)."""
        # latin-1 turns each byte into the code point of the same value; translate maps it.
        try:
            raw = word.encode("utf-8")
        except UnicodeEncodeError as e:
            raise TokenizerError(f"encode(): text holds the lone surrogate {word[e.start]!r}, "
                                 "which is not valid Unicode and has no UTF-8 bytes") from None
        symbols = list(raw.decode("latin-1").translate(_BYTE_TO_CHAR))
        vocab = self._vocab
        whole = "".join(symbols)
        if self._ignore_merges and whole in vocab:
            return (vocab[whole],)
        ranks = self._ranks
        n = len(symbols)
        nxt = list(range(1, n + 1))  # index of the next live symbol; n = none
        prv = list(range(-1, n - 1))  # index of the previous live symbol; -1 = none
        heap = []
        for i in range(n - 1):
            rank = ranks.get((symbols[i], symbols[i + 1]))
            if rank is not None:
                heap.append((rank, i, symbols[i], symbols[i + 1]))
        heapq.heapify(heap)
        while heap:
            _, i, left, right = heapq.heappop(heap)
            j = nxt[i]
            # Stale entry: a side has grown or died since this pair was pushed.
            if j >= n or symbols[i] != left or symbols[j] != right:
                continue
            symbols[i] = left + right
            symbols[j] = None
            nxt[i] = nxt[j]
            if nxt[j] < n:
                prv[nxt[j]] = i
            p, q = prv[i], nxt[i]
            if p >= 0:
                rank = ranks.get((symbols[p], symbols[i]))
                if rank is not None:
                    heapq.heappush(heap, (rank, p, symbols[p], symbols[i]))
            if q < n:
                rank = ranks.get((symbols[i], symbols[q]))
                if rank is not None:
                    heapq.heappush(heap, (rank, i, symbols[i], symbols[q]))
        # A byte with no token of its own is dropped, as HF tokenizers (no unk) and llama.cpp do.
        return tuple(vocab[s] for s in symbols if s is not None and s in vocab)

    # ---- decode ---------------------------------------------------------------

    def decode(self, ids, skip_special: bool = False) -> str:
        """Text of ``ids``; invalid UTF-8 in the joined bytes becomes U+FFFD."""
        data = b"".join(self._bytes_of(i, skip_special) for i in ids)
        return data.decode("utf-8", errors="replace")


def _read_tokenizer_config(path: Path) -> dict:
    """tokenizer_config.json beside a tokenizer.json, or {} when there is none."""
    if not path.is_file():
        return {}
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TokenizerError(f"{path}: cannot read tokenizer config: {exc}") from None
    if not isinstance(config, dict):
        raise TokenizerError(f"{path}: tokenizer config is not a JSON object")
    return config


def _chat_template_of(config: dict) -> str | None:
    """The default chat template of a tokenizer_config.json (a string or a named list)."""
    template = config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None
