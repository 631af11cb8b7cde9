"""/v1/embeddings on a BERT-style encoder: the openai client's embeddings equal the model's own embed()
(and torch's mean-pooled hidden states), in float and in base64; generation routes are absent."""

import httpx
import numpy as np
import pytest

import volvox

TEXTS = ["the cat sat on the mat", "a dog ran in the park", "hello world"]


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    pytest.importorskip("torch", reason="the tiny BERT is built with transformers")
    from hf_models import build_tiny_bert

    directory = tmp_path_factory.mktemp("bert")
    torch_model, tokenizer = build_tiny_bert(directory, TEXTS)
    with volvox.load(directory) as enc:
        yield enc, torch_model, tokenizer


def torch_mean_pooled(torch_model, tokenizer, text):
    import torch

    ids = tokenizer.encode(text).ids
    with torch.no_grad():
        hidden = torch_model(torch.tensor([ids])).last_hidden_state[0]  # (seq, dim)
    return hidden.mean(0).numpy()


def test_embeddings_equal_embed(serve, encoder):
    enc, torch_model, tokenizer = encoder
    server = serve(enc, "bert")
    got = server.client().embeddings.create(model="bert", input=TEXTS)  # the client asks for base64
    rows = np.array([d.embedding for d in got.data])  # (3, dim)
    np.testing.assert_allclose(rows, enc.embed(TEXTS), rtol=0, atol=1e-6)
    for row, text in zip(rows, TEXTS):
        want = torch_mean_pooled(torch_model, tokenizer, text)
        assert np.abs(row - want).max() < 1e-4 * np.abs(want).max() + 1e-5
    assert [d.index for d in got.data] == [0, 1, 2]
    assert got.usage.prompt_tokens == sum(len(tokenizer.encode(t).ids) for t in TEXTS)
    floats = httpx.post(server.url + "/v1/embeddings", json={"model": "bert", "input": TEXTS[0],
                                                              "encoding_format": "float"}).json()
    np.testing.assert_allclose(floats["data"][0]["embedding"], rows[0], atol=1e-6)


def test_an_encoder_has_no_generation_routes(serve, encoder):
    server = serve(encoder[0], "bert")
    r = httpx.post(server.url + "/v1/completions", json={"model": "bert", "prompt": "x"})
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    r = httpx.post(server.url + "/v1/embeddings", json={"model": "bert", "input": [1, 2]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input"
