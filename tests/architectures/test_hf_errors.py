"""Bad Hugging Face folders give clear volvox errors naming the file, field or tensor; sharded folders load."""

import json
import shutil

import numpy as np
import pytest

pytest.importorskip("transformers")

import volvox  # noqa: E402
from hf_models import build_causal_lm, train_bpe_tokenizer  # noqa: E402
from volvox.errors import BlueprintError, ModelNotFoundError, ShapeError, TokenizerError, UnsupportedError, WeightsError  # noqa: E402
from volvox.formats.safetensors import SafeTensorsFile, save_safetensors  # noqa: E402


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    d = tmp_path_factory.mktemp("llama")
    vocab = train_bpe_tokenizer(d / "tok.json")
    build_causal_lm(d, "llama", d / "tok.json", vocab)
    return d


@pytest.fixture
def folder(good, tmp_path):
    d = tmp_path / "model"
    shutil.copytree(good, d)
    return d


def edit_config(d, **changes):
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(changes)
    (d / "config.json").write_text(json.dumps(cfg))


def edit_tensors(d, fn):
    with SafeTensorsFile(d / "model.safetensors") as st:
        tensors = {n: np.array(st.tensor(n)) for n in st.names}
    fn(tensors)
    save_safetensors(d / "model.safetensors", tensors)


def test_unknown_model_type(folder):
    edit_config(folder, model_type="mamba9000")
    with pytest.raises(UnsupportedError, match="model_type 'mamba9000' is not supported"):
        volvox.load(folder)


def test_missing_config_field(folder):
    cfg = json.loads((folder / "config.json").read_text())
    del cfg["hidden_size"]
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(BlueprintError, match="config.json: missing field 'hidden_size'"):
        volvox.load(folder)


def test_missing_tensor(folder):
    edit_tensors(folder, lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    with pytest.raises(WeightsError, match="no tensor 'model.layers.1.mlp.up_proj.weight'"):
        volvox.load(folder)


def test_shape_mismatch(folder):
    def shrink(t):
        t["model.layers.0.self_attn.k_proj.weight"] = t["model.layers.0.self_attn.k_proj.weight"][:8]
    edit_tensors(folder, shrink)
    with pytest.raises(ShapeError, match=r"'model.layers.0.self_attn.k_proj.weight' has shape \[8, 48\], config.json implies \[24, 48\]"):
        volvox.load(folder)


def test_config_disagreeing_with_weights(folder):
    edit_config(folder, intermediate_size=81)
    with pytest.raises(ShapeError, match="mlp.gate_proj.weight' has shape"):
        volvox.load(folder)


def test_no_tokenizer(folder):
    (folder / "tokenizer.json").unlink()
    with pytest.raises(TokenizerError, match="tokenizer.json"):
        volvox.load(folder)


def test_no_weights(folder):
    (folder / "model.safetensors").unlink()
    with pytest.raises(ModelNotFoundError, match="no model.safetensors or model.safetensors.index.json"):
        volvox.load(folder)


def shard(d):
    """Split model.safetensors into two shards with an index, as save_pretrained does."""
    with SafeTensorsFile(d / "model.safetensors") as st:
        tensors = {n: np.array(st.tensor(n)) for n in st.names}
    names = sorted(tensors)
    halves = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, part in halves.items():
        save_safetensors(d / file, {n: tensors[n] for n in part})
    index = {"metadata": {}, "weight_map": {n: f for f, part in halves.items() for n in part}}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    (d / "model.safetensors").unlink()


def test_sharded_checkpoint_loads(good, folder):
    shard(folder)
    with volvox.load(good) as a, volvox.load(folder) as b:
        np.testing.assert_array_equal(a.logits([1, 2, 3, 4]), b.logits([1, 2, 3, 4]))


def test_sharded_index_names_missing_shard(folder):
    shard(folder)
    (folder / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(ModelNotFoundError, match="shard 'model-00002-of-00002.safetensors' is missing"):
        volvox.load(folder)


def test_sharded_index_names_tensor_not_in_shard(folder):
    shard(folder)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors" \
        if index["weight_map"]["model.norm.weight"].startswith("model-00002") else "model-00002-of-00002.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(WeightsError, match="'model.norm.weight' should be in"):
        volvox.load(folder)
