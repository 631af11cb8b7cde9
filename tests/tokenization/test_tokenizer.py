"""Byte-level BPE: ids against HF tokenizers and llama.cpp on SmolLM2's real vocab."""

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from volvox.errors import TokenizerError
from volvox.tokenizers import ByteLevelBPETokenizer, Pretokenizer
from volvox.tokenizers.bpe import bytes_to_unicode

gguf = pytest.importorskip("gguf")
hf = pytest.importorskip("tokenizers")

CORPUS = [
    "",
    "Hello world",
    "The quick brown fox jumps over the lazy dog. It's 5 o'clock; we'll see, they'd've said.",
    "I'M SHOUTING, YOU'RE NOT. She's, he'll, we've, I'd, can't, won't",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < 10; ++i) { x[i] = y[i] * 2.5f; }  // done",
    "1234567 3.14159 1,000,000 0x1F 2024-01-31 +44 (0)20 7946 0958",
    "   leading spaces, trailing spaces   ",
    "tabs\tand\t\ttabs\n\nnew\nlines\r\nwindows\n\n\n  indented\n\t\n",
    "\n\n\n  ",
    " ",
    "\t",
    "!!!??? ... --- *** ### @@@ $$$ %%% ^^^ &&& ((( ))) [[[ ]]] {{{ }}} <<< >>> ||| ~~~ `` '' \"\"",
    "emoji 😀😃😄 👍🏽 ❤️ 🇺🇸 flags",
    "zwj families 👨‍👩‍👧‍👦 and 🏳️‍🌈 and 🧑🏿‍💻",
    "中文字符测试，你好世界。日本語のテキスト、カタカナ。한국어 텍스트",
    "العربية نص تجريبي مع أرقام ١٢٣٤٥",
    "combining: e\u0301 a\u0308 n\u0303 Z\u0335\u0327a\u0336\u0301l\u0334g\u0337o\u0338",
    "Ünïcödé àçcéntš — “quotes” ‘single’ … ß ẞ ﬁ Ω ≈ ∑ ∞ ½ ² ³ Ⅻ",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more<|im_end|><|im_start|>",
    "half special <|im_start and |im_end|> and <|im_start|",
    "\u00a0non-breaking\u2003em\u3000ideographic space\u200bzero-width",
    "mixed123abc456 a1b2c3 ab12 12ab",
    "x" * 300,
    " " * 40 + "y",
    "\x00\x01\x1f control \x7f chars",
]


def _gguf_metadata(path):
    """The tokenizer.* metadata of a GGUF file as the plain dict volvox's reader hands over."""
    reader = gguf.GGUFReader(path)

    def strings(key):
        field = reader.fields[key]
        return [bytes(field.parts[i]).decode("utf-8") for i in field.data]

    def scalar(key):
        field = reader.fields[key]
        return field.parts[field.data[0]][0].item()

    types = reader.fields["tokenizer.ggml.token_type"]
    return {
        "tokenizer.ggml.model": strings("tokenizer.ggml.model")[0],
        "tokenizer.ggml.pre": strings("tokenizer.ggml.pre")[0],
        "tokenizer.ggml.tokens": strings("tokenizer.ggml.tokens"),
        "tokenizer.ggml.merges": strings("tokenizer.ggml.merges"),
        "tokenizer.ggml.token_type": np.array([types.parts[i][0] for i in types.data], dtype=np.int32),
        "tokenizer.ggml.bos_token_id": scalar("tokenizer.ggml.bos_token_id"),
        "tokenizer.ggml.eos_token_id": scalar("tokenizer.ggml.eos_token_id"),
        "tokenizer.ggml.add_bos_token": bool(scalar("tokenizer.ggml.add_bos_token")),
        "tokenizer.chat_template": strings("tokenizer.chat_template")[0],
    }


@pytest.fixture(scope="module")
def metadata(smollm2_gguf_path):
    return _gguf_metadata(smollm2_gguf_path)


@pytest.fixture(scope="module")
def tok(metadata):
    return ByteLevelBPETokenizer.from_gguf_metadata(metadata)


@pytest.fixture(scope="module")
def hf_tok(metadata):
    """An independent HF tokenizer with SmolLM2's pre-tokenizer, built from the same vocab/merges."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    tokens = metadata["tokenizer.ggml.tokens"]
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = [tuple(m.split(" ", 1)) for m in metadata["tokenizer.ggml.merges"]]
    t = Tokenizer(models.BPE(vocab, merges))
    t.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    t.decoder = decoders.ByteLevel()
    control = [tokens[i] for i, k in enumerate(metadata["tokenizer.ggml.token_type"]) if k == 3]
    t.add_special_tokens([AddedToken(c, special=True, normalized=False) for c in control])
    return t


@pytest.fixture(scope="module")
def llama(smollm2_gguf_path):
    llama_cpp = pytest.importorskip("llama_cpp")
    return llama_cpp.Llama(model_path=smollm2_gguf_path, vocab_only=True, verbose=False)


def _hf_ids(hf_tok, text):
    return hf_tok.encode(text, add_special_tokens=False).ids


@pytest.fixture(scope="module")
def dropped_bytes(tok):
    """Bytes with no token in the vocab (SmolLM2 lacks a few control bytes); encode drops them."""
    vocab = set(tok.tokens)
    return {b for b, c in bytes_to_unicode().items() if c not in vocab}


def _tokenizable(text, dropped_bytes):
    """``text`` without the characters encode() has to drop."""
    return "".join(ch for ch in text if not dropped_bytes.intersection(ch.encode("utf-8")))


# ---- exactness against references -------------------------------------------------

def test_metadata_fields(tok):
    assert tok.vocab_size == 49152
    assert (tok.bos_id, tok.eos_id, tok.add_bos) == (1, 2, False)
    assert tok.eog_ids == {0, 2}  # <|endoftext|>, <|im_end|>
    assert tok.encode("<|im_start|>") == [1]


@pytest.mark.parametrize("text", CORPUS)
def test_matches_hf_tokenizers(tok, hf_tok, text):
    ids = tok.encode(text)
    assert ids == _hf_ids(hf_tok, text)
    assert tok.decode(ids) == text


@pytest.mark.parametrize("text", CORPUS)
def test_matches_llama_cpp(tok, llama, text):
    expected = llama.tokenize(text.encode("utf-8"), add_bos=False, special=True)
    assert tok.encode(text) == expected


def test_long_document_matches_hf(tok, hf_tok):
    text = "\n".join(CORPUS * 3)
    ids = tok.encode(text)
    assert ids == _hf_ids(hf_tok, text)
    assert tok.decode(ids) == text


# Assigned code points only (per Python's Unicode tables), so that differences
# between Unicode versions of the three regex engines stay out of the test.
_unicode_text = st.text(
    alphabet=st.characters(exclude_categories=("Cs", "Cn", "Co")), max_size=40
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_unicode_text)
def test_random_unicode_matches_hf(tok, hf_tok, dropped_bytes, text):
    # Bytes without a token are compared with llama.cpp only (see test_byte_missing_from_vocab).
    text = _tokenizable(text, dropped_bytes)
    ids = tok.encode(text)
    assert ids == _hf_ids(hf_tok, text)
    assert tok.decode(ids) == text


_text_with_specials = st.lists(
    st.one_of(
        st.sampled_from(["<|im_start|>", "<|im_end|>", "<|endoftext|>", " ", "\n", "12", "'s"]),
        st.text(alphabet=st.characters(exclude_categories=("Cs", "Cn", "Co")), max_size=8),
    ),
    max_size=8,
).map("".join)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_text_with_specials)
def test_random_text_with_specials_matches_hf(tok, hf_tok, dropped_bytes, text):
    text = _tokenizable(text, dropped_bytes)
    assert tok.encode(text) == _hf_ids(hf_tok, text)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_text_with_specials)
def test_random_text_with_specials_matches_llama_cpp(tok, llama, text):
    assert tok.encode(text) == llama.tokenize(text.encode("utf-8"), add_bos=False, special=True)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_unicode_text)
def test_random_unicode_matches_llama_cpp(tok, llama, text):
    expected = llama.tokenize(text.encode("utf-8"), add_bos=False, special=True)
    assert tok.encode(text) == expected


# ---- encode options -----------------------------------------------------------------

def test_parse_special_off_spells_specials_out(tok):
    text = "<|im_start|>user"
    ids = tok.encode(text, parse_special=False)
    assert 1 not in ids
    assert tok.decode(ids) == text


@pytest.mark.parametrize("text", [t for t in CORPUS if "<|" in t])
def test_parse_special_off_matches_llama_cpp(tok, llama, text):
    expected = llama.tokenize(text.encode("utf-8"), add_bos=False, special=False)
    assert tok.encode(text, parse_special=False) == expected


def test_add_bos(tok):
    assert tok.encode("hi", add_bos=True)[0] == tok.bos_id
    assert tok.encode("hi")[0] != tok.bos_id


def test_pretokenizer_smollm_splits_digits_first():
    assert Pretokenizer("smollm").split("a 12 b's") == ["a", " ", "1", "2", " b", "'s"]
    assert Pretokenizer("gpt2").split("a 12 b's") == ["a", " 12", " b", "'s"]
    assert Pretokenizer("llama-bpe").split("12345 it'S") == ["123", "45", " it", "'S"]
    assert Pretokenizer("qwen2").split("123") == ["1", "2", "3"]


def test_unknown_pretokenizer():
    with pytest.raises(TokenizerError, match="unknown pre-tokenizer"):
        Pretokenizer("no-such-pre")


# ---- decode ---------------------------------------------------------------------------

def test_decode_skip_special(tok):
    ids = tok.encode("<|im_start|>user\nhi<|im_end|>")
    assert tok.decode(ids, skip_special=True) == "user\nhi"


def test_decode_accepts_numpy_ids(tok):
    ids = tok.encode("numpy ids")
    assert tok.decode(np.array(ids, dtype=np.int64)) == "numpy ids"


def test_token_bytes(tok):
    assert tok.token_bytes(tok.encode(" world")[0]) == b" world"
    assert tok.token_bytes(1) == b"<|im_start|>"


def test_decode_invalid_utf8_replaced_only_at_the_end(tok):
    ids = tok.encode("😀")
    assert len(ids) > 1  # the emoji spans several byte tokens
    assert tok.decode(ids) == "😀"
    assert tok.decode(ids[:-1]) == b"".join(tok.token_bytes(i) for i in ids[:-1]).decode("utf-8", "replace")
    assert "\ufffd" in tok.decode(ids[:-1])


@pytest.mark.parametrize("bad", [-1, 49152, 10**9])
def test_decode_bad_ids(tok, bad):
    with pytest.raises(TokenizerError, match="outside the vocabulary"):
        tok.decode([5, bad])
    with pytest.raises(TokenizerError):
        tok.token_bytes(bad)
    with pytest.raises(TokenizerError):
        tok.stream_decoder().push(bad)


def test_decode_non_integer_id(tok):
    with pytest.raises(TokenizerError, match="integer"):
        tok.decode([1.5])


# ---- streaming ------------------------------------------------------------------------

@pytest.mark.parametrize("text", CORPUS)
def test_stream_decode_matches_decode(tok, text):
    ids = tok.encode(text)
    stream = tok.stream_decoder()
    pieces = [stream.push(i) for i in ids]
    pieces.append(stream.flush())
    assert "".join(pieces) == tok.decode(ids) == text
    assert all("\ufffd" not in p for p in pieces)


def test_stream_holds_back_partial_emoji(tok):
    ids = tok.encode("👨‍👩‍👧")
    stream = tok.stream_decoder()
    out = []
    for i in ids:
        piece = stream.push(i)
        out.append(piece)
        assert "\ufffd" not in piece
    assert "".join(out) + stream.flush() == "👨‍👩‍👧"
    assert "" in out  # at least one token was a partial character


def test_stream_flush_replaces_truncated_tail(tok):
    ids = tok.encode("é😀")
    stream = tok.stream_decoder()
    text = "".join(stream.push(i) for i in ids[:-1]) + stream.flush()
    assert text == tok.decode(ids[:-1])


# ---- from_tokenizer_json --------------------------------------------------------------

def test_from_tokenizer_json_round_trip(tok, hf_tok, tmp_path):
    path = tmp_path / "tokenizer.json"
    hf_tok.save(str(path))
    loaded = ByteLevelBPETokenizer.from_tokenizer_json(path)
    assert loaded.vocab_size == tok.vocab_size
    assert loaded.pre == "smollm"
    for text in CORPUS:
        assert loaded.encode(text) == tok.encode(text) == _hf_ids(hf_tok, text)


def test_from_tokenizer_json_string_merges_and_config(hf_tok, tmp_path):
    data = json.loads(hf_tok.to_str())
    data["model"]["merges"] = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    (tmp_path / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<|im_start|>", "eos_token": {"content": "<|im_end|>"},
                    "chat_template": "{{ bos_token }}{{ messages[0]['content'] }}{{ eos_token }}"}),
        encoding="utf-8",
    )
    loaded = ByteLevelBPETokenizer.from_tokenizer_json(tmp_path / "tokenizer.json")
    assert loaded.encode("It's 2024!") == _hf_ids(hf_tok, "It's 2024!")
    assert (loaded.bos_id, loaded.eos_id) == (1, 2)
    assert loaded.apply_chat_template([{"role": "user", "content": "x"}]) == "<|im_start|>x<|im_end|>"


def test_from_tokenizer_json_gpt2_pretokenizer(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {c: i for i, c in enumerate("abĠ")} | {"ab": 3, "Ġab": 4}
    t = Tokenizer(models.BPE(vocab, [("a", "b"), ("Ġ", "ab")]))
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.save(str(tmp_path / "tokenizer.json"))
    loaded = ByteLevelBPETokenizer.from_tokenizer_json(tmp_path / "tokenizer.json")
    assert loaded.pre == "gpt2"
    assert loaded.encode("ab ab a") == t.encode("ab ab a").ids == [3, 4, 2, 0]


_HF_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@pytest.mark.parametrize(
    "name, split, ignore_merges",
    [("llama-bpe", _HF_LLAMA3_SPLIT, True), ("qwen2", _HF_LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}"), False)],
)
def test_from_tokenizer_json_llama3_and_qwen2_splits(metadata, tmp_path, name, split, ignore_merges):
    """LLaMA-3 / Qwen2 pre-tokenizers (HF Split + ByteLevel) on SmolLM2's vocab, against HF."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    vocab = {t: i for i, t in enumerate(metadata["tokenizer.ggml.tokens"])}
    merges = [tuple(m.split(" ", 1)) for m in metadata["tokenizer.ggml.merges"]]
    t = Tokenizer(models.BPE(vocab, merges, ignore_merges=ignore_merges))
    t.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(split), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    t.save(str(tmp_path / "tokenizer.json"))
    loaded = ByteLevelBPETokenizer.from_tokenizer_json(tmp_path / "tokenizer.json")
    assert loaded.pre == name
    for text in CORPUS:
        assert loaded.encode(text) == t.encode(text).ids, text


def test_from_tokenizer_json_rejects_unsupported(hf_tok, tmp_path):
    data = json.loads(hf_tok.to_str())
    data["model"]["type"] = "WordPiece"
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(TokenizerError, match="WordPiece"):
        ByteLevelBPETokenizer.from_tokenizer_json(path)

    data["model"]["type"] = "BPE"
    data["pre_tokenizer"] = {"type": "Whitespace"}
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(TokenizerError, match="pre_tokenizer"):
        ByteLevelBPETokenizer.from_tokenizer_json(path)

    data = json.loads(hf_tok.to_str())
    data["model"]["vocab"]["extra"] = 99999
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(TokenizerError, match="not dense"):
        ByteLevelBPETokenizer.from_tokenizer_json(path)

    data["model"]["vocab"]["extra"] = 5
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(TokenizerError, match="id 5 is given to both"):
        ByteLevelBPETokenizer.from_tokenizer_json(path)

    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(TokenizerError, match="cannot read"):
        ByteLevelBPETokenizer.from_tokenizer_json(path)


# ---- bad data -------------------------------------------------------------------------

def test_empty_vocab():
    with pytest.raises(TokenizerError, match="empty"):
        ByteLevelBPETokenizer([], [])


def test_merge_with_unknown_token():
    with pytest.raises(TokenizerError, match="not in the vocabulary"):
        ByteLevelBPETokenizer(["a", "b", "ab"], ["a b", "a zz"])
    with pytest.raises(TokenizerError, match="'ba' is not in the vocabulary"):
        ByteLevelBPETokenizer(["a", "b", "ab"], ["b a"])


def test_malformed_merge():
    with pytest.raises(TokenizerError, match="malformed"):
        ByteLevelBPETokenizer(["a", "b", "ab"], ["ab"])


def test_bad_special_and_bos_ids():
    with pytest.raises(TokenizerError, match="outside the vocabulary"):
        ByteLevelBPETokenizer(["a"], [], {"<s>": 7})
    with pytest.raises(TokenizerError, match="bos_id"):
        ByteLevelBPETokenizer(["a"], [], bos_id=3)


def test_gguf_metadata_problems(metadata):
    with pytest.raises(TokenizerError, match="not byte-level BPE"):
        ByteLevelBPETokenizer.from_gguf_metadata({**metadata, "tokenizer.ggml.model": "llama"})
    with pytest.raises(TokenizerError, match="merges"):
        ByteLevelBPETokenizer.from_gguf_metadata({k: v for k, v in metadata.items() if k != "tokenizer.ggml.merges"})
    with pytest.raises(TokenizerError, match="token_type"):
        ByteLevelBPETokenizer.from_gguf_metadata({**metadata, "tokenizer.ggml.token_type": [1, 2]})
    with pytest.raises(TokenizerError, match="unknown pre-tokenizer"):
        ByteLevelBPETokenizer.from_gguf_metadata({**metadata, "tokenizer.ggml.pre": "martian"})


def test_byte_missing_from_vocab_is_dropped(tok, hf_tok):
    # SmolLM2 has no token for byte 0x16; HF tokenizers and llama.cpp drop it too.
    assert tok.encode("a\x16b") == _hf_ids(hf_tok, "a\x16b") == tok.encode("a") + tok.encode("b")


def test_byte_missing_from_vocab_splits_its_word_like_llama_cpp(tok, hf_tok, llama):
    # Inside one pre-token the references disagree: llama.cpp keeps the dropped byte
    # as a barrier between its neighbours, HF removes it first and merges across it.
    # volvox follows llama.cpp, the runtime GGUF models are made for.
    text = "|\x16-"
    expected = llama.tokenize(text.encode("utf-8"), add_bos=False, special=True)
    assert tok.encode(text) == expected == tok.encode("|") + tok.encode("-")
    assert _hf_ids(hf_tok, text) == tok.encode("|-")


def test_encode_rejects_non_str(tok):
    with pytest.raises(TokenizerError):
        tok.encode(b"bytes")
