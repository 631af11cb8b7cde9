"""SentencePiece vocabularies as GGUF stores them (``tokenizer.ggml.model = "llama"``: Llama-2, Mistral,
Gemma, Phi-3 ...), encoded and decoded the way llama.cpp's ``llm_tokenizer_spm`` does.

Encoding: special tokens (control, user-defined and unknown tokens; control and unknown ones only when
``parse_special``) are cut out of the text first, longest first, each over every remaining text
fragment in turn. Each text fragment gets a leading space when ``add_space_prefix`` is set and it
starts the text or follows a special token; its spaces become "▁" (U+2581); it is split into
characters and adjacent symbols are merged while some pair's concatenation is a token, the pair
whose token has the highest score first (leftmost on ties). A final symbol that is no token becomes
its UTF-8 bytes as ``<0xXX>`` byte tokens. BOS / EOS are added as the file's
``tokenizer.ggml.add_bos_token`` / ``add_eos_token`` say (SentencePiece's defaults: BOS yes, EOS no).

Decoding: a normal token's "▁" become spaces, a byte token is its byte, control and unknown tokens are
their text (dropped when ``skip_special``), unused tokens are nothing; a text that starts with BOS
loses one leading space (llama-cpp-python's ``Llama.detokenize``).

Variants as llama.cpp keys them: Gemma writes ``add_space_prefix = false``; a model whose
``general.name`` holds "phi-3" / "phi3" strips the whitespace after its special tokens (except
``<unk>``, ``<s>``, ``<|endoftext|>``). End-of-generation tokens found by their text (EOT, EOM, EOS
names) are treated as control tokens, as llama.cpp overrides their type.
"""

from __future__ import annotations

import codecs
import heapq
import operator

from volvox.errors import TokenizerError
from volvox.tokenizers.byte_vocab import ByteVocabulary

# GGUF tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# Token texts llama.cpp takes to end a generation, whatever their stored type (it makes them control).
EOG_TEXTS = frozenset((
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~[",
))
# Special tokens a Phi-3 file keeps the whitespace after (llama.cpp's exceptions to its rstrip rule).
_PHI3_KEEP_SPACE = ("<unk>", "<s>", "<|endoftext|>")
_C_SPACE = " \t\n\v\f\r"  # C isspace() in the "C" locale
_SPACE_MARK = "\u2581"    # "▁"


class SentencePieceTokenizer(ByteVocabulary):
    """llama.cpp's SPM tokenizer over a GGUF vocabulary (tokens, scores, token types)."""

    def __init__(self, tokens: list[str], scores: list[float], types: list[int], *, bos_id: int | None = 1,
                 eos_id: int | None = 2, add_bos: bool = True, add_eos: bool = False,
                 add_space_prefix: bool = True, extra_eog_ids=(), rstrip_special: bool = False,
                 chat_template: str | None = None):
        """Build from the vocabulary (id -> text), its scores and token types (GGUF's numbering).

        ``extra_eog_ids`` (EOT / EOM ids from the file) end a generation beside EOS and the EOG texts;
        ``rstrip_special`` strips the whitespace after special tokens in encoded text (Phi-3)."""
        tokens = list(tokens)
        if not tokens:
            raise TokenizerError("tokenizer vocabulary is empty")
        if not all(isinstance(t, str) for t in tokens):
            raise TokenizerError("tokenizer vocabulary must be a list of strings")
        if len(scores) != len(tokens) or len(types) != len(tokens):
            raise TokenizerError(f"{len(tokens)} tokens but {len(scores)} scores and {len(types)} token types")
        self.tokens = tokens
        self.vocab_size = len(tokens)
        self.scores = [float(s) for s in scores]
        self.types = [int(t) for t in types]
        self._vocab = {t: i for i, t in enumerate(tokens)}  # the last duplicate wins, as llama.cpp
        self.bos_id = self._check_id(bos_id, "bos_id")
        self.eos_id = self._check_id(eos_id, "eos_id")
        self.add_bos, self.add_eos = bool(add_bos), bool(add_eos)
        if self.add_bos and self.bos_id is None:
            raise TokenizerError("add_bos is set but the tokenizer has no bos_id")
        if self.add_eos and self.eos_id is None:
            raise TokenizerError("add_eos is set but the tokenizer has no eos_id")
        self.add_space_prefix = bool(add_space_prefix)
        self.chat_template = chat_template

        eog_by_text = {i for t, i in self._vocab.items() if t in EOG_TEXTS}
        for i in eog_by_text:
            if self.types[i] != CONTROL:
                self.types[i] = CONTROL
        self.eog_ids = eog_by_text | {self._check_id(i, "end-of-generation id") for i in extra_eog_ids}
        if self.eos_id is not None:
            self.eog_ids.add(self.eos_id)
        self._skip_ids = frozenset(i for i, k in enumerate(self.types) if k in (CONTROL, UNKNOWN))
        # (id, text, strip the whitespace after it), longest text first, then lowest id
        specials = [i for i, k in enumerate(self.types) if k in (CONTROL, USER_DEFINED, UNKNOWN) and tokens[i]]
        specials.sort(key=lambda i: -len(tokens[i].encode("utf-8")))
        keep_space = {self._vocab[t] for t in _PHI3_KEEP_SPACE if t in self._vocab}
        self._specials = [(i, tokens[i], rstrip_special and i not in keep_space) for i in specials]
        self._byte_ids = {}  # byte value -> its token id (<0xXX>, else the one-character token)
        for b in range(256):
            i = self._vocab.get(f"<0x{b:02X}>", self._vocab.get(chr(b)) if b < 0x80 else None)
            if i is not None:
                self._byte_ids[b] = i
        self._id_bytes = [self._piece(i) for i in range(self.vocab_size)]

    @classmethod
    def from_gguf_metadata(cls, md: dict) -> "SentencePieceTokenizer":
        """Build from a GGUF metadata dict (``tokenizer.ggml.*`` keys, model "llama") with llama.cpp's
        defaults: BOS 1, EOS 2, BOS added, EOS not, a space prefixed."""
        model = md.get("tokenizer.ggml.model")
        if model != "llama":
            raise TokenizerError(f"tokenizer.ggml.model {model!r} is not SentencePiece ('llama')")
        tokens = md.get("tokenizer.ggml.tokens")
        if tokens is None:
            raise TokenizerError("GGUF metadata has no tokenizer.ggml.tokens")
        tokens = list(tokens)
        scores = md.get("tokenizer.ggml.scores")
        if scores is None:
            raise TokenizerError("GGUF metadata has no tokenizer.ggml.scores (required for 'llama' SentencePiece)")
        types = md.get("tokenizer.ggml.token_type")
        types = [NORMAL] * len(tokens) if types is None else list(types)

        def token_id(key: str, default: int | None) -> int | None:
            """llama.cpp's rule: a default outside the vocabulary is none; a key outside it is ignored."""
            value = md.get(f"tokenizer.ggml.{key}")
            if value is not None and 0 <= int(value) < len(tokens):
                return int(value)
            return default if default is not None and default < len(tokens) else None

        name = str(md.get("general.name") or "").lower()
        extra = [i for i in (token_id("eot_token_id", None), token_id("eom_token_id", None)) if i is not None]
        return cls(tokens, list(scores), types,
                   bos_id=token_id("bos_token_id", 1), eos_id=token_id("eos_token_id", 2),
                   add_bos=bool(md.get("tokenizer.ggml.add_bos_token", True)),
                   add_eos=bool(md.get("tokenizer.ggml.add_eos_token", False)),
                   add_space_prefix=bool(md.get("tokenizer.ggml.add_space_prefix", True)),
                   extra_eog_ids=extra, rstrip_special="phi-3" in name or "phi3" in name,
                   chat_template=md.get("tokenizer.chat_template"))

    # ---- encode ---------------------------------------------------------------

    def encode(self, text: str, add_bos: bool | None = None, parse_special: bool = True,
               add_eos: bool | None = None) -> list[int]:
        """Token ids of ``text`` (BOS / EOS as the file says unless given); special tokens written in it
        become their ids when ``parse_special`` (user-defined tokens always do)."""
        ids = self._first_ids(text, add_bos)
        prev_special = True  # the text's start takes the space prefix as a special token's end does
        for part in self._partition(text, parse_special):
            if isinstance(part, int):
                ids.append(part)
                prev_special = True
                continue
            if self.add_space_prefix and prev_special:
                part = " " + part
            self._encode_fragment(part.replace(" ", _SPACE_MARK), ids)
            prev_special = False
        if self.add_eos if add_eos is None else add_eos:
            if self.eos_id is None:
                raise TokenizerError("add_eos requested but the tokenizer has no eos_id")
            ids.append(self.eos_id)
        return ids

    def _partition(self, text: str, parse_special: bool) -> list:
        """``text`` as fragments: str (plain text) and int (a special token's id), llama.cpp's
        tokenizer_st_partition: each special token in turn, longest first, cut out of every text fragment."""
        parts = [text] if text else []
        for token_id, literal, rstrip in self._specials:
            if not parse_special and token_id in self._skip_ids:
                continue  # control and unknown tokens are matched only when asked; user-defined always
            out = []
            for part in parts:
                if isinstance(part, int) or literal not in part:
                    out.append(part)
                    continue
                while True:
                    at = part.find(literal)
                    if at < 0:
                        break
                    if at:
                        out.append(part[:at])
                    out.append(token_id)
                    part = part[at + len(literal):]
                    if rstrip:
                        part = part.lstrip(_C_SPACE)
                if part:
                    out.append(part)
            parts = out
        return parts

    def _encode_fragment(self, text: str, out: list[int]) -> None:
        """Append the ids of one escaped text fragment: llm_tokenizer_spm_session's bigram merge."""
        vocab, scores = self._vocab, self.scores
        symbols = list(text)  # (n,) live symbol texts; None once merged into its left neighbour
        n = len(symbols)
        nxt = list(range(1, n + 1))   # index of the next live symbol; n = none
        prv = list(range(-1, n - 1))  # index of the previous live symbol; -1 = none
        heap = []  # (-score, left, right, merged length): best score first, leftmost on ties

        def push(left: int, right: int) -> None:
            if left < 0 or right >= n:
                return
            merged = symbols[left] + symbols[right]
            token = vocab.get(merged)
            if token is not None:
                heapq.heappush(heap, (-scores[token], left, right, len(merged)))

        for i in range(1, n):
            push(i - 1, i)
        while heap:
            _, left, right, size = heapq.heappop(heap)
            a, b = symbols[left], symbols[right]
            if a is None or b is None or len(a) + len(b) != size:
                continue  # a side was merged since this pair was pushed
            symbols[left], symbols[right] = a + b, None
            nxt[left] = nxt[right]
            if nxt[right] < n:
                prv[nxt[right]] = left
            push(prv[left], left)
            push(left, nxt[left])
        i = 0
        while i < n:
            symbol = symbols[i]
            token = vocab.get(symbol)
            if token is not None:
                out.append(token)
            else:  # no token: its UTF-8 bytes as byte tokens
                try:
                    raw = symbol.encode("utf-8")
                except UnicodeEncodeError:
                    raise TokenizerError(f"encode(): text holds the lone surrogate {symbol!r}, which is not "
                                         "valid Unicode and has no UTF-8 bytes") from None
                for byte in raw:
                    if byte not in self._byte_ids:
                        raise TokenizerError(f"encode(): {symbol!r} has no token and the vocabulary has no "
                                             f"byte token <0x{byte:02X}> for its byte")
                    out.append(self._byte_ids[byte])
            i = nxt[i]

    # ---- decode ---------------------------------------------------------------

    def _piece(self, token_id: int) -> bytes:
        """The bytes token ``token_id`` decodes to (llama.cpp's token_to_piece, special tokens shown)."""
        kind, text = self.types[token_id], self.tokens[token_id]
        if kind in (CONTROL, UNKNOWN, USER_DEFINED):
            return text.encode("utf-8")
        if kind == NORMAL:
            return text.replace(_SPACE_MARK, " ").encode("utf-8")
        if kind == BYTE:
            try:
                return bytes([int(text[3:-1], 16)])
            except ValueError:
                raise TokenizerError(f"byte token {token_id} {text!r} is not of the form <0xXX>") from None
        return b""  # unused or undefined: nothing, as llama.cpp

    def decode(self, ids, skip_special: bool = False) -> str:
        """Text of ``ids``: one leading space dropped after a leading BOS; invalid UTF-8 becomes U+FFFD."""
        ids = list(ids)
        data = b"".join(self._bytes_of(i, skip_special) for i in ids)
        if ids and self.bos_id is not None and operator.index(ids[0]) == self.bos_id and data[:1] == b" ":
            data = data[1:]
        return codecs.decode(data, "utf-8", errors="replace")
