"""EfficientNet-Lite0 from its PyTorch state dict against the upstream PyTorch implementation
(efficientnet-lite-pytorch) on the same weights and inputs; the restricted .pth reader."""

import os
import pickle

import numpy as np
import pytest

import volvox
from volvox.errors import WeightsError
from volvox.tasks.image import preprocess
from volvox.formats.torch_state_dict import read_state_dict

from vision_helpers import SAMPLES, model_file, sample_image

torch = pytest.importorskip("torch")
upstream = pytest.importorskip("efficientnet_lite_pytorch")


@pytest.fixture(scope="module")
def reference():
    net = upstream.EfficientNet.from_name("efficientnet-lite0")
    net.load_state_dict(torch.load(model_file("efficientnet-lite0"), weights_only=True))
    return net.eval()


def test_state_dict_reader_matches_torch_load():
    path = model_file("efficientnet-lite0")
    ours, theirs = read_state_dict(path), torch.load(path, weights_only=True)
    assert list(ours) == list(theirs)
    for k, v in theirs.items():
        np.testing.assert_array_equal(ours[k], v.numpy())


@pytest.mark.parametrize("name", SAMPLES)
def test_logits_match_pytorch(reference, name):
    model = volvox.load("efficientnet-lite0")
    x = preprocess(sample_image(name), model.metadata["preprocess"]).tensor   # (1, 224, 224, 3)
    ours = model.run({"input": x})["logits"]
    with torch.no_grad():
        want = reference(torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))).numpy()
    np.testing.assert_allclose(ours, want, atol=1e-4, rtol=1e-4)
    assert ours.argmax() == want.argmax()


def test_classify_names_imagenet_classes():
    model = volvox.load("efficientnet-lite0")
    assert model.classify(sample_image("chelsea"))[0].label in ("tabby", "tiger cat", "Egyptian cat")
    assert model.classify(sample_image("coffee"), top_k=3)[0].label == "espresso"


def test_pickle_with_code_is_refused(tmp_path):
    path = tmp_path / "evil.pth"
    with open(path, "wb") as f:  # a legacy-format stream whose object is a callable, not tensors
        for obj in (0x1950A86A20F9469CFC6C, 1001, {}):
            pickle.dump(obj, f)
        pickle.dump(os.system, f)  # (not print: an imported Ray replaces builtins.print with its own)
    with pytest.raises(WeightsError, match=f"refuses to unpickle {os.system.__module__}.system"):
        read_state_dict(path)


def test_truncated_pth_is_a_clear_error(tmp_path):
    data = open(model_file("efficientnet-lite0"), "rb").read()
    path = tmp_path / "cut.pth"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(WeightsError, match="cut.pth"):
        read_state_dict(path)
