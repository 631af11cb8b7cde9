"""WordPiece ids against Hugging Face `tokenizers` (BertWordPieceTokenizer) on a varied corpus."""

import pytest

pytest.importorskip("tokenizers")

from tokenizers import BertWordPieceTokenizer, processors  # noqa: E402

from volvox.errors import TokenizerError  # noqa: E402
from hf_models import with_specials
from volvox.tokenizers.wordpiece import WordPieceTokenizer  # noqa: E402

CORPUS = [
    "Hello, World! It's a naïve café in Zürich.", "東京は日本の首都です。", "ΟΔΟΣ Σίσυφος ΣΑΣ",
    "İstanbul ǅemal ﬁne straße", "tabs\tand\nnewlines\r\nand\x0bvertical\x0cfeed\x85nel\u00a0nbsp\u2003emsp"
    "\u200bzwsp\ufeffbom", "control\x00null\x1fus\x7fdel\ufffdrepl", "emoji 🙂🚀 and math ∑∫ √2 ≈ 1.414",
    "punct: «quotes» „low“ — dash… ¿qué? ¡sí! 【brackets】", "x" * 120,
    "supercalifragilisticexpialidocious antidisestablishmentarianism", "[CLS] the [MASK] sat [SEP] on [PAD] mat",
    "e\u0301 combining acute, Å vs A\u030a", "numbers 123,456.78 and 1e-5 3/4", "UPPER lower MiXeD", "", "   ", "a",
]
TRAIN = CORPUS * 3 + ["the cat sat on the mat and the dog ran"] * 5


@pytest.fixture(scope="module", params=[True, False], ids=["lowercase", "cased"])
def pair(request, tmp_path_factory):
    hf = BertWordPieceTokenizer(lowercase=request.param)
    hf.train_from_iterator(TRAIN, vocab_size=300, show_progress=False)
    with_specials(hf, template=request.param)
    path = tmp_path_factory.mktemp("wp") / "tokenizer.json"
    hf.save(str(path))
    return hf, WordPieceTokenizer.from_tokenizer_json(path)


@pytest.mark.parametrize("text", CORPUS + [c.upper() for c in CORPUS] + ["unseen wordz qqq", "日本語テキスト", "ⅷ ½ ² ①"])
def test_ids_match_hf_tokenizers(pair, text):
    hf, ours = pair
    assert ours.encode(text) == hf.encode(text).ids
    assert ours.encode(text, add_special_tokens=False) == hf.encode(text, add_special_tokens=False).ids


def test_truncation_keeps_special_tokens(pair):
    hf, ours = pair
    hf.enable_truncation(8)
    try:
        assert ours.encode(CORPUS[0], max_length=8) == hf.encode(CORPUS[0]).ids
    finally:
        hf.no_truncation()


def test_non_wordpiece_file_is_refused(tmp_path):
    path = tmp_path / "tokenizer.json"
    path.write_text('{"model": {"type": "BPE", "vocab": {}, "merges": []}}')
    with pytest.raises(TokenizerError, match="not a WordPiece tokenizer"):
        WordPieceTokenizer.from_tokenizer_json(path)
