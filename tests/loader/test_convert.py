"""volvox convert: GGUF / HF folder -> blueprint gives identical logits and token ids; atomic writes."""

import json

import numpy as np
import pytest

import volvox
from tiny_gguf import write_tiny_llama
from volvox import convert as convert_module
from volvox.convert import convert, quantizable, source_weights, storage_type
from volvox.errors import BlueprintError
from volvox.model import Model
from volvox.ir.quant_blocks import quantize_ref

TEXT = "Once upon a time, the quick brown fox 12345 said <|im_start|>user\nHi there!<|im_end|> café 東京"


def assert_same_model(src, out, n=24):
    """Logits bit-identical and tokenizer ids / special-token state identical."""
    with volvox.load(src) as a, volvox.load(out) as b:
        assert type(b) is type(a)
        ids = a.tokenizer.encode(TEXT)
        assert b.tokenizer.encode(TEXT) == ids
        np.testing.assert_array_equal(b.logits(ids[:n]), a.logits(ids[:n]))
        assert (b.tokenizer.bos_id, b.tokenizer.eos_id, b.tokenizer.eog_ids, b.tokenizer.chat_template) == \
               (a.tokenizer.bos_id, a.tokenizer.eos_id, a.tokenizer.eog_ids, a.tokenizer.chat_template)
        assert b.generate(TEXT, max_new_tokens=8) == a.generate(TEXT, max_new_tokens=8)


@pytest.mark.parametrize("qtype", ["f32", "q4_1", "q4_k"])
def test_tiny_gguf_roundtrip(tmp_path, qtype):
    src = tmp_path / "tiny.gguf"
    shape = dict(dim=256, ffn=256) if qtype == "q4_k" else {}  # k-quants need rows of 256
    write_tiny_llama(src, qtype=qtype, embed_qtype="q8_0" if qtype != "f32" else "f32", tied=False, **shape)
    convert(src, tmp_path / "bp")
    assert_same_model(src, tmp_path / "bp")
    cfg = json.loads((tmp_path / "bp" / "config.json").read_text())
    assert cfg["metadata"]["task"] == "generate" and cfg["metadata"]["source_format"] == "gguf"


def test_smollm2_gguf_roundtrip(tmp_path, smollm2_gguf_path):
    convert(smollm2_gguf_path, tmp_path / "smollm2")
    assert_same_model(smollm2_gguf_path, tmp_path / "smollm2", n=12)
    tokenizers = pytest.importorskip("tokenizers")  # the written tokenizer.json is valid for HF tokenizers too
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "smollm2" / "tokenizer.json"))
    with volvox.load(tmp_path / "smollm2") as lm:
        assert hf.encode(TEXT).ids == lm.tokenizer.encode(TEXT)


@pytest.fixture(scope="module")
def hf_gpt2(tmp_path_factory):
    pytest.importorskip("transformers")
    from hf_models import build_causal_lm, train_bpe_tokenizer

    d = tmp_path_factory.mktemp("hf_gpt2")
    vocab = train_bpe_tokenizer(d / "tok.json")
    build_causal_lm(d, "gpt2", d / "tok.json", vocab, n_embd=64)
    return d


def test_hf_roundtrip(tmp_path, hf_gpt2):
    convert(hf_gpt2, tmp_path / "bp")
    assert_same_model(hf_gpt2, tmp_path / "bp")


@pytest.mark.parametrize("qtype", ["q8_0", "q4_0"])
def test_quantize_equals_quantizing_in_memory(tmp_path, hf_gpt2, qtype):
    convert(hf_gpt2, tmp_path / "bp", quantize=qtype)
    with volvox.load(hf_gpt2, optimize=False) as src, volvox.load(tmp_path / "bp") as bp:
        weights = source_weights(src)
        names = quantizable(src.graph, weights)
        assert len(names) >= 9  # every 64-wide projection and both embeddings
        for name in names:
            weights[name] = quantize_ref(np.asarray(weights[name]), qtype)
        in_memory = Model(src.graph, weights, {}, "in-memory")
        feeds = {"tokens": np.arange(1, 17, dtype=np.int32), "positions": np.arange(16, dtype=np.int32)}
        np.testing.assert_array_equal(bp.run(feeds)["logits"], in_memory.run(feeds)["logits"])
        assert set(json.loads((tmp_path / "bp" / "config.json").read_text())["weights"]["quantized"]) == set(names)


@pytest.mark.parametrize("qtype", ["q5_0", "q5_1", "iq4_nl", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"])
def test_quantize_to_each_type_with_llama_cpp_s_fallback(tmp_path, qtype):
    """Every matrix becomes `qtype` (ggml's reference quantizer), except that a k-quant request
    stores the 288-wide ffn_down as llama.cpp's fallback type; the blueprint computes exactly what
    the same weights quantized in memory compute."""
    src = tmp_path / "tiny.gguf"
    write_tiny_llama(src, dim=256, ffn=288, qtype="f32", embed_qtype="f32", tied=False)
    convert(src, tmp_path / "bp", quantize=qtype)
    stored = json.loads((tmp_path / "bp" / "config.json").read_text())["weights"]["quantized"]
    with volvox.load(src, optimize=False) as m, volvox.load(tmp_path / "bp") as bp:
        weights = source_weights(m)
        names = quantizable(m.graph, weights)
        want = {n: storage_type(qtype, weights[n].shape[1]) for n in names}
        assert {n: v["qtype"] for n, v in stored.items()} == want
        assert qtype in want.values()
        if qtype.endswith("_k"):
            assert len(set(want.values())) == 2          # ffn_down (288 wide) took the fallback
        for name in names:
            weights[name] = quantize_ref(np.asarray(weights[name]), want[name])
        in_memory = Model(m.graph, weights, {}, "in-memory")
        feeds = {"tokens": np.arange(1, 9, dtype=np.int32), "positions": np.arange(8, dtype=np.int32)}
        np.testing.assert_array_equal(bp.run(feeds)["logits"], in_memory.run(feeds)["logits"])


def test_f16_stores_half_matrices_equal_to_casting_in_memory(tmp_path, hf_gpt2):
    """--quantize f16 stores the quantizable matrices as IEEE half: the blueprint computes what the
    same graph with those weights cast to float16 computes (prefill logits and greedy decode), and
    stays close to the float32 model."""
    convert(hf_gpt2, tmp_path / "bp", quantize="f16")
    with volvox.load(hf_gpt2, optimize=False) as src, volvox.load(tmp_path / "bp") as bp:
        weights = source_weights(src)
        names = quantizable(src.graph, weights)
        cast = {n: (np.asarray(w, np.float32).astype(np.float16) if n in names else w) for n, w in weights.items()}
        assert sum(bp.weight_bytes().values()) < 0.6 * sum(src.weight_bytes().values())
        in_memory = Model(src.graph, cast, {}, "in-memory")
        feeds = {"tokens": np.arange(1, 17, dtype=np.int32), "positions": np.arange(16, dtype=np.int32)}
        half, full = bp.run(feeds)["logits"], src.run(feeds)["logits"]
        np.testing.assert_array_equal(half, in_memory.run(feeds)["logits"])
        assert np.abs(half - full).max() <= 2e-3 * np.abs(full).max()
        assert not np.array_equal(half, full)  # the weights really are rounded
        assert json.loads((tmp_path / "bp" / "config.json").read_text())["weights"]["quantized"] == {}
    with volvox.load(hf_gpt2) as full, volvox.load(tmp_path / "bp") as half:
        ids = full.tokenizer.encode(TEXT)[:12]
        assert half.generate(ids, max_new_tokens=8) == full.generate(ids, max_new_tokens=8)


def test_interrupted_convert_leaves_nothing(tmp_path, monkeypatch):
    src = tmp_path / "tiny.gguf"
    write_tiny_llama(src)

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("killed mid-write")

    monkeypatch.setattr(convert_module, "save_safetensors", crash)
    with pytest.raises(KeyboardInterrupt):
        convert(src, tmp_path / "out" / "bp")
    assert not (tmp_path / "out" / "bp").exists()
    assert list((tmp_path / "out").iterdir()) == []  # no temp directory left behind either


def test_existing_out_dir_needs_overwrite(tmp_path):
    src = tmp_path / "tiny.gguf"
    write_tiny_llama(src)
    convert(src, tmp_path / "bp")
    with pytest.raises(BlueprintError, match="already exists"):
        convert(src, tmp_path / "bp")
    convert(src, tmp_path / "bp", quantize="q8_0", overwrite=True)
    assert json.loads((tmp_path / "bp" / "config.json").read_text())["weights"]["quantized"]


def test_cli_convert(tmp_path, capsys):
    from volvox.cli import main

    src = tmp_path / "tiny.gguf"
    write_tiny_llama(src)
    assert main(["convert", str(src), str(tmp_path / "bp"), "--quantize", "q4_1"]) == 0
    assert "wrote" in capsys.readouterr().out
    assert main(["convert", str(src), str(tmp_path / "bp")]) == 1
    assert "already exists" in capsys.readouterr().err


@pytest.mark.parametrize("progress", [True, False, None])
def test_progress_bar_only_when_asked_or_on_a_terminal(tmp_path, capsys, progress):
    src = tmp_path / "tiny.gguf"
    write_tiny_llama(src)
    convert(src, tmp_path / "bp", progress=progress)  # None: a terminal decides (pytest's stderr is not one)
    err = capsys.readouterr().err
    assert ("convert tiny.gguf: 100%" in err) == (progress is True), err
