"""BERT-style encoders: volvox embeddings against transformers (BertModel + masked mean pooling)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import volvox  # noqa: E402
from hf_models import with_specials  # noqa: E402

TEXTS = ["the cat sat on the mat", "a naïve café in Zürich! embedding models map text to vectors", "東京", ""]


@pytest.fixture(scope="module", params=[dict(), dict(hidden_size=64, num_attention_heads=8, num_hidden_layers=3,
                                                     hidden_act="gelu_new")], ids=["base", "wide-tanh"])
def pair(request, tmp_path_factory):
    import transformers as tf
    from tokenizers import BertWordPieceTokenizer

    directory = tmp_path_factory.mktemp("bert")
    tok = BertWordPieceTokenizer(lowercase=True)
    tok.train_from_iterator(TEXTS * 5 + ["the dog ran to the sea"] * 3, vocab_size=200, show_progress=False)
    with_specials(tok, template=True)
    tok.save(str(directory / "tokenizer.json"))
    torch.manual_seed(1)
    cfg = dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96,
               max_position_embeddings=64)
    model = tf.BertModel(tf.BertConfig(vocab_size=tok.get_vocab_size(), **{**cfg, **request.param})).eval()
    model.save_pretrained(directory)
    enc = volvox.load(directory)
    yield model, tok, enc
    enc.close()


def torch_embeddings(model, tok, texts, normalize):
    """transformers: right-padded batch, attention mask, masked mean pooling (sentence-transformers style)."""
    ids = [tok.encode(t).ids for t in texts]
    n = max(map(len, ids))
    input_ids = torch.tensor([x + [0] * (n - len(x)) for x in ids])
    mask = torch.tensor([[1] * len(x) + [0] * (n - len(x)) for x in ids])
    with torch.no_grad():
        h = model(input_ids=input_ids, attention_mask=mask).last_hidden_state
    e = (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    return (torch.nn.functional.normalize(e, dim=-1) if normalize else e).numpy()


@pytest.mark.parametrize("normalize", [False, True])
def test_embeddings_match_transformers(pair, normalize):
    model, tok, enc = pair
    got = enc.embed(TEXTS, normalize=normalize)
    want = torch_embeddings(model, tok, TEXTS, normalize)
    assert got.shape == want.shape
    assert np.abs(got - want).max() / np.abs(want).max() < 1e-4
    if normalize:
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-5)


def test_single_string_gives_one_vector(pair):
    _, _, enc = pair
    np.testing.assert_array_equal(enc.embed("the cat"), enc.embed(["the cat"])[0])
