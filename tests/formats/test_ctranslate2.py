"""CTranslate2 model folders: the model.bin reader on files written by ctranslate2's own converter
(a tiny random Whisper from transformers at float32, float16 and int8), the Whisper import against
transformers and ctranslate2, and malformed files."""

import shutil
import struct

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")
ctranslate2 = pytest.importorskip("ctranslate2")

import volvox  # noqa: E402
from hf_models import rel_err, train_bpe_tokenizer  # noqa: E402
from volvox.errors import BlueprintError, UnsupportedError, WeightsError  # noqa: E402
from volvox.formats.ctranslate2 import read_ct2  # noqa: E402

N_MELS, N_AUDIO_CTX = 8, 12


@pytest.fixture(scope="module")
def hf_whisper(tmp_path_factory):
    """A tiny random Whisper checkpoint folder and its torch model."""
    from tokenizers import Tokenizer

    root = tmp_path_factory.mktemp("ct2")
    tok = root / "tokenizer.json"
    text_vocab = train_bpe_tokenizer(tok)  # "<|endoftext|>" is id 0
    bpe = Tokenizer.from_file(str(tok))
    bpe.add_special_tokens(["<|startoftranscript|>", "<|notimestamps|>"])  # ids text_vocab, text_vocab + 1
    bpe.save(str(tok))
    torch.manual_seed(2)
    config = tf.WhisperConfig(
        vocab_size=text_vocab + 4, num_mel_bins=N_MELS, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48,
        max_source_positions=N_AUDIO_CTX, max_target_positions=32, eos_token_id=0, pad_token_id=0,
        bos_token_id=0, decoder_start_token_id=text_vocab, suppress_tokens=[], begin_suppress_tokens=[])
    model = tf.WhisperForConditionalGeneration(config).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if (p.ndim >= 2 or "bias" in name) and "embed_positions" not in name:
                p.mul_(3.0)
    folder = root / "hf"
    model.save_pretrained(folder)
    shutil.copy(tok, folder / "tokenizer.json")
    return folder, model, text_vocab


def convert(hf_folder, out, quantization):
    converter = ctranslate2.converters.TransformersConverter(str(hf_folder), copy_files=["tokenizer.json"])
    converter.convert(str(out), quantization=quantization, force=True)
    return out


@pytest.fixture(scope="module")
def ct2_folders(hf_whisper, tmp_path_factory):
    folder, _, _ = hf_whisper
    root = tmp_path_factory.mktemp("ct2_out")
    return {q: convert(folder, root / q, q) for q in ("float32", "float16", "int8")}


def test_reader_gives_the_converters_weights(hf_whisper, ct2_folders):
    _, model, _ = hf_whisper
    fc1 = model.model.encoder.layers[1].fc1.weight.detach().numpy()  # (48, 32)
    for q, folder in ct2_folders.items():
        ct2 = read_ct2(folder)
        assert ct2.spec == "WhisperSpec"
        w = ct2.get("encoder/layer_1/ffn/linear_0/weight")
        if q == "float32":
            np.testing.assert_array_equal(w, fc1)
        elif q == "float16":
            assert w.dtype == np.float16
            np.testing.assert_array_equal(w, fc1.astype(np.float16))
        else:  # per-row int8: each row within half a step of its scale
            step = np.abs(fc1).max(axis=1, keepdims=True) / 127
            assert np.all(np.abs(w - fc1) <= 0.5001 * step)
        assert ct2.scalar("decoder/num_heads") == 4
        ct2.close()


def test_ct2_whisper_logits_match_transformers_and_ctranslate2(hf_whisper, ct2_folders):
    folder, model, text_vocab = hf_whisper
    feats = np.random.default_rng(0).standard_normal((N_MELS, 2 * N_AUDIO_CTX)).astype(np.float32)
    ids = [text_vocab, 7, 30, 120, 4]
    with torch.no_grad():
        ref = model(input_features=torch.from_numpy(feats)[None], decoder_input_ids=torch.tensor([ids])).logits[0]
    vm = volvox.load(ct2_folders["float32"])
    try:
        assert vm.metadata["format"] == "ctranslate2" and vm.spec["decoder_start"] == [text_vocab]
        assert rel_err(vm.logits(feats, ids), ref.numpy()) < 1e-4
        enc = ctranslate2.models.Whisper(str(ct2_folders["float32"]), device="cpu", compute_type="float32")
        ref_hidden = np.array(enc.encode(ctranslate2.StorageView.from_array(feats[None]), to_cpu=True))[0]
        assert rel_err(vm.encode(feats).hidden, ref_hidden) < 1e-4
    finally:
        vm.close()


def _write_model_bin(path, version=6, spec="WhisperSpec", variables=(), aliases=(), cut=None):
    def string(s):
        return struct.pack("<H", len(s) + 1) + s.encode() + b"\0"
    out = struct.pack("<I", version) + string(spec) + struct.pack("<II", 1, len(variables))
    for name, array, dtype_id in variables:
        out += string(name) + struct.pack("<B", array.ndim) + b"".join(struct.pack("<I", d) for d in array.shape)
        out += struct.pack("<BI", dtype_id, array.nbytes) + array.tobytes()
    out += struct.pack("<I", len(aliases)) + b"".join(string(a) + string(t) for a, t in aliases)
    path.write_bytes(out[:cut] if cut else out)


def test_malformed_model_bin(tmp_path, hf_whisper, ct2_folders):
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    good = [("a/weight", w, 0), ("a/scalar", np.array(3, np.int16), 2)]
    _write_model_bin(tmp_path / "model.bin", variables=good, aliases=[("b/weight", "a/weight")])
    ct2 = read_ct2(tmp_path)
    np.testing.assert_array_equal(ct2.get("b/weight"), w)
    assert ct2.scalar("a/scalar") == 3
    with pytest.raises(WeightsError, match="no variable"):
        ct2.get("missing")
    ct2.close()
    _write_model_bin(tmp_path / "model.bin", variables=good, cut=40)
    with pytest.raises(WeightsError, match="truncated"):
        read_ct2(tmp_path)
    _write_model_bin(tmp_path / "model.bin", version=99, variables=good)
    with pytest.raises(UnsupportedError, match="binary version 99"):
        read_ct2(tmp_path)
    _write_model_bin(tmp_path / "model.bin", variables=[("a/weight", w, 9)])
    with pytest.raises(UnsupportedError, match="dtype id 9"):
        read_ct2(tmp_path)
    _write_model_bin(tmp_path / "model.bin", variables=good, aliases=[("b", "nothing")])
    with pytest.raises(WeightsError, match="unknown variable"):
        read_ct2(tmp_path)
    _write_model_bin(tmp_path / "model.bin", spec="TransformerSpec", variables=good)
    with pytest.raises(UnsupportedError, match="TransformerSpec"):
        volvox.load(tmp_path)
    no_tokenizer = tmp_path / "no_tok"
    shutil.copytree(ct2_folders["float32"], no_tokenizer)
    (no_tokenizer / "tokenizer.json").unlink(missing_ok=True)
    with pytest.raises(BlueprintError, match="tokenizer.json"):
        volvox.load(no_tokenizer)
