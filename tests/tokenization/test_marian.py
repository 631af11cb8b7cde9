"""Marian's tokenizer (SentencePiece models + vocab.json) against transformers' MarianTokenizer, which
runs the `sentencepiece` library itself."""

import pytest

from hf_models import CORPUS, train_marian_tokenizer
from volvox.errors import TokenizerError, UnsupportedError
from volvox.formats.sentencepiece import read_marian_tokenizer, read_sentencepiece_model

tf = pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

TEXTS = CORPUS + ["  leading and   repeated   spaces  ", "ＦＵＬＬ width and ﬁ ligature", ">>fra<< a language code",
                  "", "unseen letters: ßøå ɣ"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    directory = tmp_path_factory.mktemp("marian-tok")
    train_marian_tokenizer(directory)
    return directory


def test_encode_and_decode_match_transformers(folder):
    ours = read_marian_tokenizer(folder)
    ref = tf.MarianTokenizer(str(folder / "source.spm"), str(folder / "target.spm"), str(folder / "vocab.json"))
    for text in TEXTS:
        ids = ref(text).input_ids
        assert ours.encode(text) == ids, text
        assert ours.decode(ids, skip_special=True) == ref.decode(ids, skip_special_tokens=True), text
        assert ours.decode(ids) == ref.decode(ids), text


def test_stream_decoder_concatenates_to_decode(folder):
    ours = read_marian_tokenizer(folder)
    ids = ours.encode(CORPUS[0])
    stream = ours.stream_decoder(skip_special=True)
    assert "".join(stream.push(i) for i in ids) + stream.flush() == ours.decode(ids, skip_special=True)


def test_bad_files_are_named(folder, tmp_path):
    (tmp_path / "broken.spm").write_bytes(b"\x0a\xff\xff")
    with pytest.raises(TokenizerError, match="broken.spm"):
        read_sentencepiece_model(tmp_path / "broken.spm")
    with pytest.raises(TokenizerError, match="cannot read"):
        read_sentencepiece_model(tmp_path / "missing.spm")
    import sentencepiece as spm
    import io
    bpe = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(CORPUS * 20), model_writer=bpe, vocab_size=60,
                                   model_type="bpe", minloglevel=2, hard_vocab_limit=False)
    (tmp_path / "bpe.spm").write_bytes(bpe.getvalue())
    with pytest.raises(UnsupportedError, match="bpe model"):
        read_sentencepiece_model(tmp_path / "bpe.spm")
    (tmp_path / "vocab.json").write_text("[1, 2]")
    for name in ("source.spm", "target.spm"):
        (tmp_path / name).write_bytes((folder / name).read_bytes())
    with pytest.raises(TokenizerError, match="vocab.json"):
        read_marian_tokenizer(tmp_path)
