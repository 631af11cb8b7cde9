"""Fuzz the tokenizers and image decoding: arbitrary strings and ids through the byte-level BPE
and WordPiece encode / decode / streaming paths, tokenizer.json files with mutated fields, and
truncated, garbage or dimension-lying PNG / JPEG bytes. Only volvox errors may escape; text that
encodes must decode back to itself (byte-level BPE is lossless)."""

import io
import json
import struct
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz import mutate
from volvox.errors import VolvoxError
from volvox.tasks.image import ImageError, load_image, preprocess
from volvox.tokenizers.bpe import ByteLevelBPETokenizer, bytes_to_unicode
from volvox.tokenizers.hf_json import bpe_tokenizer_json
from volvox.tokenizers.wordpiece import WordPieceTokenizer

FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
B2U = bytes_to_unicode()
BPE_TOKENS = [B2U[b] for b in range(256)] + ["Ġt", "he", "Ġthe", "in", "<|end|>"]
BPE_JSON = bpe_tokenizer_json(BPE_TOKENS, ["Ġ t", "h e", "Ġt he", "i n"], {"<|end|>": 260}, {}, "gpt2")
WP_VOCAB = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "##s", "cat", "un", "##able",
                                        ",", "é", "中"])}
WP_JSON = {"model": {"type": "WordPiece", "vocab": WP_VOCAB, "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                     "max_input_chars_per_word": 100},
           "normalizer": {"type": "BertNormalizer", "lowercase": True, "strip_accents": None, "clean_text": True,
                          "handle_chinese_chars": True},
           "pre_tokenizer": {"type": "BertPreTokenizer"},
           "post_processor": {"type": "TemplateProcessing",
                              "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                                         {"Sequence": {"id": "A", "type_id": 0}},
                                         {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
                              "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                                                 "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
           "added_tokens": []}


def _load(tmp_path_factory, doc, cls):
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    path.write_text(json.dumps(doc))
    return cls.from_tokenizer_json(path)


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    return _load(tmp_path_factory, BPE_JSON, ByteLevelBPETokenizer)


@pytest.fixture(scope="module")
def wordpiece(tmp_path_factory):
    return _load(tmp_path_factory, WP_JSON, WordPieceTokenizer)


any_text = st.one_of(st.text(max_size=40), st.sampled_from(["<|end|>", "the<|end|>the", "\ud800", "\x00", "\u202e",
                                                           "e\u0301", "中文", " " * 33, "\n\r\t"]))
ids = st.lists(st.one_of(st.integers(-3, 270), st.sampled_from([2**31, 2**63, -2**63, 1.5, "3", None])), max_size=12)


@FUZZ
@given(any_text)
def test_bpe_encode_decode_roundtrips(bpe, text):
    try:
        encoded = bpe.encode(text)
    except VolvoxError:
        return  # e.g. lone surrogates, which have no UTF-8 bytes
    assert bpe.decode(encoded) == text
    stream = bpe.stream_decoder()
    assert "".join(stream.push(i) for i in encoded) + stream.flush() == text


@FUZZ
@given(ids, st.booleans())
def test_bpe_decode_and_stream_any_ids(bpe, token_ids, skip_special):
    for fn in (lambda: bpe.decode(token_ids, skip_special=skip_special),
               lambda: [bpe.stream_decoder(skip_special).push(i) for i in token_ids]):
        try:
            assert isinstance(fn(), (str, list))
        except VolvoxError:
            pass


@FUZZ
@given(any_text, st.booleans(), st.one_of(st.none(), st.integers(-2, 8)))
def test_wordpiece_encode_any_text(wordpiece, text, special, max_length):
    try:
        out = wordpiece.encode(text, add_special_tokens=special, max_length=max_length)
    except VolvoxError:
        return
    assert all(isinstance(i, int) and 0 <= i < len(WP_VOCAB) for i in out)


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**64, 2**64), st.floats(), st.text(max_size=6),
                      st.sampled_from(["BPE", "WordPiece", "ByteLevel", "BertNormalizer", "[UNK]", "##"]))
json_value = st.recursive(json_leaf, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                             st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                          max_leaves=6)


def _paths(obj, prefix=()):
    yield prefix
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        if not (isinstance(obj, dict) and k == "vocab"):  # the vocab's 261 leaves would drown the rest
            yield from _paths(v, prefix + (k,))
        else:
            yield prefix + (k,)
            yield prefix + (k, next(iter(v)))


@pytest.mark.parametrize("doc, cls", [(BPE_JSON, ByteLevelBPETokenizer), (WP_JSON, WordPieceTokenizer)],
                         ids=["bpe", "wordpiece"])
def test_mutated_tokenizer_json_fails_cleanly(tmp_path_factory, doc, cls):
    paths = [p for p in _paths(doc) if p]

    @FUZZ
    @given(st.lists(st.tuples(st.sampled_from(paths), st.one_of(json_value, st.just("__delete__"))),
                    min_size=1, max_size=3), any_text)
    def check(mutations, text):
        try:
            tok = _load(tmp_path_factory, mutate(doc, mutations), cls)
            ids = tok.encode(text)
            if cls is ByteLevelBPETokenizer:
                tok.decode(ids)
        except VolvoxError:
            pass
    check()


@pytest.mark.parametrize("doc, cls", [(BPE_JSON, ByteLevelBPETokenizer), (WP_JSON, WordPieceTokenizer)],
                         ids=["bpe", "wordpiece"])
@pytest.mark.parametrize("value", [True, 5, "tokens", {"content": "x"}])
def test_added_tokens_of_the_wrong_type(tmp_path_factory, doc, cls, value):
    """Found by the fuzzer: a non-list added_tokens raised a bare TypeError."""
    with pytest.raises(VolvoxError):
        _load(tmp_path_factory, mutate(doc, [(("added_tokens",), value)]), cls)


@pytest.mark.parametrize("field, value", [("continuing_subword_prefix", None), ("unk_token", 3),
                                          ("max_input_chars_per_word", None), ("max_input_chars_per_word", 0)])
def test_wordpiece_model_fields_of_the_wrong_type(tmp_path_factory, field, value):
    """Found by the fuzzer: a null continuing_subword_prefix raised a bare TypeError when encoding."""
    with pytest.raises(VolvoxError, match=field):
        _load(tmp_path_factory, mutate(WP_JSON, [(("model", field), value)]), WordPieceTokenizer)


# ------------------------------------------------------------------ images

def _png(width: int, height: int, body: bytes = b"") -> bytes:
    """A PNG whose IHDR declares width x height RGB; ``body`` is the compressed IDAT payload."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", body) + chunk(b"IEND", b""))


def _encoded(fmt: str) -> bytes:
    from PIL import Image
    out = io.BytesIO()
    Image.fromarray(np.arange(8 * 8 * 3, dtype=np.uint8).reshape(8, 8, 3)).save(out, fmt)
    return out.getvalue()


SEEDS = {"png": _encoded("PNG"), "jpeg": _encoded("JPEG")}
SPEC = {"size": [4, 4], "scale": 1 / 255}


def _check_image(tmp_path, name: str, data: bytes) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    try:
        x = preprocess(path, SPEC).tensor
    except ImageError as e:
        assert str(path) in str(e)
        return
    assert x.shape == (1, 4, 4, 3) and x.dtype == np.float32


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(sorted(SEEDS)), st.data())
def test_mutated_images_fail_cleanly(tmp_path, fmt, data):
    raw = bytearray(SEEDS[fmt])
    for _ in range(data.draw(st.integers(1, 3))):
        kind = data.draw(st.sampled_from(["flip", "truncate", "splice"]))
        at = data.draw(st.integers(0, len(raw) - 1)) if raw else 0
        if kind == "flip" and raw:
            raw[at] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "truncate":
            del raw[at:]
        else:
            raw[at:at + 4] = data.draw(st.binary(min_size=1, max_size=4))
    _check_image(tmp_path, f"x.{fmt}", bytes(raw))


@pytest.mark.parametrize("width, height", [(1 << 16, 1 << 16), (2**31 - 1, 1), (0, 5), (30000, 30000)])
def test_huge_declared_png_is_refused_without_allocating(tmp_path, width, height):
    # a 1-row IDAT under an IHDR that claims up to 4 gigapixels: Pillow's decompression-bomb
    # check (or its decoder) must refuse it as an ImageError, never allocate the declared size
    path = tmp_path / "bomb.png"
    path.write_bytes(_png(width, height, zlib.compress(b"\0" * 64)))
    with pytest.raises(ImageError, match="bomb.png"):
        load_image(path)


def test_garbage_and_empty_files_are_image_errors(tmp_path):
    for name, data in {"empty.png": b"", "text.jpg": b"hello", "half.png": SEEDS["png"][:40],
                       "half.jpg": SEEDS["jpeg"][:100]}.items():
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(ImageError, match=name):
            load_image(path)
