"""Bad input to volvox.load and generate: a clear volvox exception naming the problem, never a crash."""

import pytest

import volvox
from tiny_gguf import write_tiny_llama


def test_nonexistent_path(tmp_path):
    with pytest.raises(volvox.ModelNotFoundError, match="no such file"):
        volvox.load(tmp_path / "missing.gguf")


def test_unknown_model_name():
    with pytest.raises(volvox.ModelNotFoundError, match="smollm2-135m-instruct"):
        volvox.load("no-such-model")


def test_not_a_gguf_file(tmp_path):
    p = tmp_path / "model.bin"
    p.write_bytes(b"PK\x03\x04 this is a zip, not a model")
    with pytest.raises(volvox.VolvoxError, match="not a model file"):
        volvox.load(p)


@pytest.mark.parametrize("keep", [0.01, 0.3, 0.7, 0.99])
def test_truncated_gguf(tmp_path, keep):
    path = write_tiny_llama(tmp_path / "tiny.gguf")
    data = path.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: max(4, int(len(data) * keep))])
    with pytest.raises(volvox.GGUFError, match="cut.gguf"):
        volvox.load(cut)


def test_unsupported_architecture(tmp_path):
    path = write_tiny_llama(tmp_path / "falcon.gguf", arch="falcon")
    with pytest.raises(volvox.UnsupportedError, match="falcon"):
        volvox.load(path)


def test_unsupported_quant_type(tmp_path):
    path = write_tiny_llama(tmp_path / "q8k.gguf", dim=256, ffn=256, qtype="q8_k")
    with pytest.raises(volvox.UnsupportedError, match="q8_k"):
        volvox.load(path)


def test_unknown_backend(tmp_path):
    with pytest.raises(volvox.UnsupportedError, match="backend"):
        volvox.load(write_tiny_llama(tmp_path / "t.gguf"), backend="tpu")


def test_generation_errors_on_tiny_model(tmp_path):
    with volvox.load(write_tiny_llama(tmp_path / "t.gguf", context=32)) as lm:
        with pytest.raises(volvox.GenerationError, match="context length of 32"):
            lm.generate("the " * 40, max_new_tokens=1)
        with pytest.raises(volvox.GenerationError, match="max_new_tokens"):
            lm.generate("the", max_new_tokens=-1)
        with pytest.raises(volvox.GenerationError, match="token ids"):
            lm.logits([10 ** 6])
