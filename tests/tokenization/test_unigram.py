"""Unigram (SentencePiece-style) tokenizer.json against Hugging Face `tokenizers`: ids and decoded text."""

import json

import pytest

tokenizers = pytest.importorskip("tokenizers")

from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # noqa: E402
from hf_models import train_unigram_tokenizer  # noqa: E402

from volvox.errors import TokenizerError, UnsupportedError  # noqa: E402
from volvox.tokenizers.unigram import UnigramTokenizer  # noqa: E402

CORPUS = [
    "Once upon a time there was a little robot who loved to read books about the sea.",
    "The quick brown fox jumps over the lazy dog; 12345 + 678 = 13023!",
    "translate English to German: The house is wonderful.",
    "summarize: Tiny models tell tiny stories: a cat, a hat, and a bat sat on the mat.",
    "Ünïcödé wörds, naïve café and ﬁne ligatures appear sometimes.",
]
TEXTS = CORPUS + [
    "", " ", "hello", "  leading and   repeated   spaces  ", "unseen glyphs: 東京 🙂 𝔘 ∑",
    "a special </s> in the middle</s>", "tabs\tand\nnewlines", "ＦＵＬＬＷＩＤＴＨ ｔｅｘｔ", "x" * 40,
    "combining e\u0301 and n\u0303, no\u00a0break, zero\u200bwidth, ①②③ ㎏ Ⅻ ﬃ ½ ™ …",
    "Ａｃｃｅｎｔ ＡＢＣ ｱｲｳ ｶﾞ",
]


def t5_style(path):
    """A T5-like tokenizer.json trained on CORPUS (tests/support/hf_models.py)."""
    return train_unigram_tokenizer(path, CORPUS)


def byte_fallback_style(path):
    """A hand-made byte-fallback vocabulary with a llama-style decoder (Replace, ByteFallback, Fuse, Strip)
    and Metaspace with prepend_scheme 'first'."""
    vocab = [("<unk>", 0.0), ("<s>", 0.0), ("</s>", 0.0)] + [(f"<0x{b:02X}>", -20.0) for b in range(256)]
    vocab += [("\u2581", -2.0), ("\u2581the", -3.0), ("\u2581a", -3.5), ("e", -4.0), ("t", -4.2), ("h", -4.4),
              ("th", -4.0), ("\u2581qu", -5.0), ("ick", -5.5), ("o", -4.1), ("n", -4.3), ("\u2581on", -4.9)]
    tok = Tokenizer(models.Unigram(vocab, unk_id=0, byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens(["<s>", "</s>"])
    tok.save(str(path))
    return tok


def sentencepiece_style(path):
    """As transformers converts a SentencePiece T5 model: a sentencepiece Unigram model trained here with
    the nmt_nfkc rule, whose compiled character map becomes a Precompiled normalizer."""
    spm = pytest.importorskip("sentencepiece")
    from sentencepiece import sentencepiece_model_pb2
    from tokenizers import Regex, normalizers, processors

    corpus = path.parent / "corpus.txt"
    corpus.write_text("\n".join(CORPUS * 20), encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(path.parent / "spm"), vocab_size=70,
                                   model_type="unigram", normalization_rule_name="nmt_nfkc", pad_id=0, eos_id=1,
                                   unk_id=2, bos_id=-1, minloglevel=2)
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString((path.parent / "spm.model").read_bytes())
    tok = Tokenizer(models.Unigram([(p.piece, p.score) for p in proto.pieces], unk_id=2, byte_fallback=False))
    tok.normalizer = normalizers.Sequence([normalizers.Precompiled(proto.normalizer_spec.precompiled_charsmap),
                                           normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace()])
    tok.decoder = decoders.Metaspace()
    tok.add_special_tokens(["<pad>", "</s>", "<unk>"])
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    tok.save(str(path))
    return tok


@pytest.fixture(scope="module", params=[t5_style, byte_fallback_style, sentencepiece_style],
                ids=["t5-style", "byte-fallback", "sentencepiece-precompiled"])
def pair(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("unigram") / "tokenizer.json"
    ref = request.param(path)
    return ref, UnigramTokenizer.from_tokenizer_json(path)


def test_encode_matches_tokenizers(pair):
    ref, ours = pair
    for text in TEXTS:
        assert ours.encode(text) == ref.encode(text).ids, text
        assert ours.encode(text, add_special_tokens=False) == ref.encode(text, add_special_tokens=False).ids, text


def test_decode_matches_tokenizers(pair):
    ref, ours = pair
    for text in TEXTS:
        ids = ref.encode(text).ids
        assert ours.decode(ids, skip_special=True) == ref.decode(ids, skip_special_tokens=True), text
        assert ours.decode(ids) == ref.decode(ids, skip_special_tokens=False), text
        stream = ours.stream_decoder(skip_special=True)
        assert "".join(stream.push(i) for i in ids) + stream.flush() == ref.decode(ids, skip_special_tokens=True)


def test_bad_tokenizer_files(tmp_path):
    path = tmp_path / "tokenizer.json"
    path.write_text("{not json")
    with pytest.raises(TokenizerError, match="not valid JSON"):
        UnigramTokenizer.from_tokenizer_json(path)
    path.write_text(json.dumps({"model": {"type": "BPE", "vocab": {}, "merges": []}}))
    with pytest.raises(TokenizerError, match="not a Unigram"):
        UnigramTokenizer.from_tokenizer_json(path)
    doc = {"model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["a", -1.0]]},
           "normalizer": {"type": "Precompiled", "precompiled_charsmap": "/wAAAA=="}}
    path.write_text(json.dumps(doc))
    with pytest.raises(TokenizerError, match="truncated"):
        UnigramTokenizer.from_tokenizer_json(path)
    doc["normalizer"] = {"type": "NmtNormalizer"}
    path.write_text(json.dumps(doc))
    with pytest.raises(UnsupportedError, match="NmtNormalizer"):
        UnigramTokenizer.from_tokenizer_json(path)
    doc = {"model": {"type": "Unigram", "unk_id": 5, "vocab": [["<unk>", 0.0]]}}
    path.write_text(json.dumps(doc))
    with pytest.raises(TokenizerError, match="unk_id"):
        UnigramTokenizer.from_tokenizer_json(path)
    with pytest.raises(TokenizerError, match="no such"):
        UnigramTokenizer.from_tokenizer_json(tmp_path / "missing.json")
