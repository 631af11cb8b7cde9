"""What the Hugging Face decoder tests share: one trained byte-level BPE tokenizer per test module
(each module's cases load through hf_models.load_pair)."""

import pytest

from hf_models import train_bpe_tokenizer


@pytest.fixture(scope="module")
def tokenizer_json(tmp_path_factory):
    """(path of a trained tokenizer.json, its vocabulary size)."""
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    return path, train_bpe_tokenizer(path)
