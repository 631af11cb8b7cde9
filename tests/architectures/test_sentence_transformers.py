"""sentence-transformers folders (modules.json: Transformer -> Pooling -> Dense -> Normalize, max_seq_length,
prompts) embedded by volvox against the sentence-transformers library's encode() on the same folder."""

import json

import numpy as np
import pytest

pytest.importorskip("torch")
st = pytest.importorskip("sentence_transformers")

import volvox  # noqa: E402
from hf_models import build_tiny_bert  # noqa: E402

WORDS = "the cat sat on a mat while dogs ran to sea and birds sang over hills near old towns".split()
TEXTS = ["the cat sat on the mat", "birds sang", " ".join(WORDS * 3), "a naïve café!"]  # the third runs past 16 tokens
MAX_SEQ_LENGTH = 16
PROMPTS = {"query": "query: ", "passage": "passage: the "}
ST = "sentence_transformers.models."


def write_sentence_folder(directory, modes, dense=None, normalize=False, include_prompt=True, default_prompt=None):
    """A tiny random BERT saved as a sentence-transformers folder with the given pooling ``modes``
    (Pooling config keys without the pooling_mode_ prefix), Dense layers ``dense`` (list of
    (out_features, bias, activation class)) and Normalize."""
    import torch
    try:
        from sentence_transformers.sentence_transformer.modules import Dense  # sentence-transformers 6
    except ImportError:
        from sentence_transformers.models import Dense

    model, _ = build_tiny_bert(directory, TEXTS + ["query passage"], seed=3)
    (directory / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 32}))
    modules = [{"idx": 0, "name": "0", "path": "", "type": ST + "Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": ST + "Pooling"}]
    (directory / "1_Pooling").mkdir()
    pooling = {"word_embedding_dimension": 32, "include_prompt": include_prompt,
               **{f"pooling_mode_{m}": m in modes for m in ("cls_token", "mean_tokens", "max_tokens",
                                                           "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken")}}
    (directory / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    width = 32 * len(modes)
    torch.manual_seed(5)
    for i, (out, bias, activation) in enumerate(dense or []):
        sub = directory / f"{2 + i}_Dense"
        sub.mkdir()
        layer = Dense(width, out, bias=bias, activation_function=getattr(torch.nn, activation)())
        layer.save(str(sub))
        modules.append({"idx": len(modules), "name": str(len(modules)), "path": sub.name, "type": ST + "Dense"})
        width = out
    if normalize:
        modules.append({"idx": len(modules), "name": str(len(modules)), "path": "normalize", "type": ST + "Normalize"})
    (directory / "modules.json").write_text(json.dumps(modules))
    (directory / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": MAX_SEQ_LENGTH, "do_lower_case": False}))
    (directory / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": PROMPTS, "default_prompt_name": default_prompt, "similarity_fn_name": "cosine"}))
    return directory


def assert_same_embeddings(ours, theirs):
    assert ours.shape == theirs.shape
    cos = (ours * theirs).sum(-1) / np.linalg.norm(ours, axis=-1) / np.linalg.norm(theirs, axis=-1)
    assert cos.min() > 0.9999, cos
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


CASES = {
    "mean": dict(modes=["mean_tokens"]),
    "cls": dict(modes=["cls_token"]),
    "max": dict(modes=["max_tokens"]),
    "lasttoken": dict(modes=["lasttoken"]),
    "mean_sqrt_len": dict(modes=["mean_sqrt_len_tokens"]),
    "weightedmean": dict(modes=["weightedmean_tokens"]),
    "cls+max+mean": dict(modes=["cls_token", "max_tokens", "mean_tokens"]),
    "mean-dense-tanh-normalize": dict(modes=["mean_tokens"], normalize=True,
                                      dense=[(24, True, "Tanh")]),
    "two-dense-identity": dict(modes=["cls_token"], dense=[(40, False, "Identity"), (16, True, "Tanh")]),
    "prompt-excluded": dict(modes=["mean_tokens"], include_prompt=False, default_prompt="query"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_embed_equals_sentence_transformers(case, tmp_path):
    folder = write_sentence_folder(tmp_path / "m", **CASES[case])
    reference = st.SentenceTransformer(str(folder), device="cpu")
    assert reference.max_seq_length == MAX_SEQ_LENGTH
    theirs = reference.encode(TEXTS, convert_to_numpy=True)
    with volvox.load(folder) as model:
        assert model.max_tokens == MAX_SEQ_LENGTH
        ours = model.embed(TEXTS)
        assert_same_embeddings(ours, theirs)
        for name in PROMPTS:
            assert_same_embeddings(model.embed(TEXTS, prompt_name=name),
                                   reference.encode(TEXTS, prompt_name=name, convert_to_numpy=True))


def test_long_text_is_truncated_as_sentence_transformers_does(tmp_path):
    folder = write_sentence_folder(tmp_path / "m", modes=["mean_tokens"])
    with volvox.load(folder) as model:
        long, prefix = TEXTS[2], " ".join(TEXTS[2].split()[:40])
        assert np.array_equal(model.embed(long), model.embed(prefix))  # both past the 16-token limit
        assert not np.allclose(model.embed(long), model.embed("the cat"))


def test_normalize_follows_the_model_unless_asked(tmp_path):
    with volvox.load(write_sentence_folder(tmp_path / "n", modes=["mean_tokens"], normalize=True)) as model:
        assert np.allclose(np.linalg.norm(model.embed(TEXTS), axis=-1), 1.0, atol=1e-6)
        assert not np.allclose(np.linalg.norm(model.embed(TEXTS, normalize=False), axis=-1), 1.0)


@pytest.mark.parametrize("change, message", [
    (lambda d: (d / "modules.json").write_text("[{\"type\": 3}]"), "must be a list of modules"),
    (lambda d: (d / "modules.json").write_text(json.dumps(
        json.loads((d / "modules.json").read_text()) + [{"path": "x", "type": ST + "LSTM"}])), "LSTM"),
    (lambda d: (d / "1_Pooling" / "config.json").write_text("{}"), "no pooling mode"),
    (lambda d: (d / "1_Pooling" / "config.json").unlink(), "missing"),
])
def test_bad_folders_are_named(tmp_path, change, message):
    folder = write_sentence_folder(tmp_path / "m", modes=["mean_tokens"])
    change(folder)
    with pytest.raises(volvox.VolvoxError, match=message):
        volvox.load(folder)


def test_unknown_prompt_name_is_refused(tmp_path):
    with volvox.load(write_sentence_folder(tmp_path / "m", modes=["mean_tokens"])) as model:
        with pytest.raises(volvox.VolvoxError, match="unknown prompt_name 'nope'"):
            model.embed("hi", prompt_name="nope")


def test_converted_blueprint_keeps_the_pipeline(tmp_path):
    from volvox.convert import convert

    folder = write_sentence_folder(tmp_path / "m", include_prompt=False, normalize=True, modes=["max_tokens", "mean_tokens"],
                                   dense=[(20, True, "Tanh")])
    convert(folder, tmp_path / "bp")
    with volvox.load(folder) as source, volvox.load(tmp_path / "bp") as blueprint:
        assert np.array_equal(source.embed(TEXTS, prompt_name="passage"), blueprint.embed(TEXTS, prompt_name="passage"))
