"""Hugging Face encoder-decoder checkpoints (whisper, t5, bart, marian) against transformers + torch.

Tiny random models (fixed seed, fp32, no download) are saved with save_pretrained and loaded with
volvox: decoder logits, greedy tokens against transformers' generate (KV cache on both sides), a
batch against one-by-one decoding, streaming, seeded sampling and the errors of bad inputs.
"""

import json
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")

import volvox  # noqa: E402
from hf_models import (CORPUS, rel_err, session_greedy, train_bpe_tokenizer, train_marian_tokenizer,  # noqa: E402
                       train_unigram_tokenizer)
from volvox.errors import GenerationError, UnsupportedError  # noqa: E402
from volvox.ops.cross_attention import cross_attention_ref  # noqa: E402
from volvox.ops.context import RunContext  # noqa: E402

N_MELS, N_AUDIO_CTX = 8, 12  # 24 feature frames


def build_tiny_whisper(directory, tokenizer_json, text_vocab, seed=0, **kw):
    """A random 2+2-layer Whisper whose vocabulary is the tokenizer's text tokens then 4 control
    tokens (end, start, no-timestamps, spare); returns the torch model."""
    torch.manual_seed(seed)
    eos, start = text_vocab, text_vocab + 1
    config = tf.WhisperConfig(
        vocab_size=text_vocab + 4, num_mel_bins=N_MELS, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=2, encoder_ffn_dim=48, decoder_ffn_dim=40,
        max_source_positions=N_AUDIO_CTX, max_target_positions=40, eos_token_id=eos, pad_token_id=eos,
        bos_token_id=eos, decoder_start_token_id=start, suppress_tokens=None, begin_suppress_tokens=None, **kw)
    model = tf.WhisperForConditionalGeneration(config).float().eval()
    with torch.no_grad():  # random init is small: widen it so logits are far from ties
        for name, p in model.named_parameters():
            if (p.ndim >= 2 or "bias" in name) and "embed_positions" not in name:
                p.mul_(3.0)
    model.save_pretrained(directory)
    generation = json.loads((directory / "generation_config.json").read_text())
    generation.update(no_timestamps_token_id=start + 1)
    (directory / "generation_config.json").write_text(json.dumps(generation))
    shutil.copy(tokenizer_json, directory / "tokenizer.json")
    return model


@pytest.fixture(scope="module")
def whisper(tmp_path_factory):
    root = tmp_path_factory.mktemp("whisper")
    tok = root / "tokenizer.json"
    text_vocab = train_bpe_tokenizer(tok)
    folder = root / "tiny-whisper"
    model = build_tiny_whisper(folder, tok, text_vocab)
    vm = volvox.load(folder)
    yield model, vm, text_vocab
    vm.close()


def features(seed, frames=2 * N_AUDIO_CTX):
    return np.random.default_rng(seed).standard_normal((N_MELS, frames)).astype(np.float32)


def torch_logits(model, feats, ids):
    with torch.no_grad():
        out = model(input_features=torch.from_numpy(feats)[None], decoder_input_ids=torch.tensor([ids]))
    return out.logits[0].numpy()


def torch_greedy(model, feats, start, n):
    """n greedy tokens from transformers' generate (GenerationMixin's loop, KV cache on)."""
    from transformers.generation.utils import GenerationMixin

    with torch.no_grad():
        out = GenerationMixin.generate(model, inputs=torch.from_numpy(feats)[None],
                                       decoder_input_ids=torch.tensor([start]), max_new_tokens=n, min_new_tokens=n,
                                       do_sample=False)
    return out[0, len(start):].tolist()


def test_whisper_logits_match_transformers(whisper):
    model, vm, text_vocab = whisper
    assert vm.metadata["task"] == "transcribe"
    ids = [text_vocab + 1, 5, 17, 200, 3, 90, 41]
    for seed in (0, 1):
        feats = features(seed)
        ours, ref = vm.logits(feats, ids), torch_logits(model, feats, ids)
        assert ours.shape == ref.shape
        assert rel_err(ours, ref) < 1e-4


def test_whisper_encoder_and_cross_keys_match_transformers(whisper):
    model, vm, _ = whisper
    feats = features(3)
    src = vm.encode(feats)
    with torch.no_grad():
        hidden = model.model.encoder(torch.from_numpy(feats)[None]).last_hidden_state[0]
        k = model.model.decoder.layers[1].encoder_attn.k_proj(hidden).numpy()  # (n_audio_ctx, dim)
    assert rel_err(src.hidden, hidden.numpy()) < 1e-4
    keys = src.cross[1][0]  # (n_heads, n_audio_ctx, head_dim)
    assert rel_err(keys.transpose(1, 0, 2).reshape(k.shape), k) < 1e-4


def test_whisper_greedy_matches_transformers_generate(whisper):
    model, vm, text_vocab = whisper
    start = [text_vocab + 1]
    for seed in (4, 5):
        feats = features(seed)
        ref = torch_greedy(model, feats, start, 20)
        assert session_greedy(vm.new_session(vm.encode(feats)), start, 20) == ref


def test_seq2seq_text_stream_batch_and_sampling(whisper):
    model, vm, text_vocab = whisper
    feats = [features(s) for s in (6, 7, 8)]
    alone = [vm.seq2seq(f, 12) for f in feats]
    assert vm.seq2seq(feats, 12) == alone
    assert "".join(vm.seq2seq(feats[0], 12, stream=True)) == alone[0]
    ref = torch_greedy(model, feats[0], [text_vocab + 1], 12)
    text_ids = ref[:ref.index(text_vocab)] if text_vocab in ref else ref
    assert alone[0] == vm.tokenizer.decode([t for t in text_ids if t < text_vocab])
    sampled = vm.seq2seq(feats[1], 12, temperature=0.9, seed=3)
    assert sampled == vm.seq2seq(feats[1], 12, temperature=0.9, seed=3)
    assert vm.seq2seq(feats, 12, temperature=0.9, seed=3)[1] == sampled


def test_seq2seq_bad_inputs(whisper):
    _, vm, _ = whisper
    with pytest.raises(GenerationError, match="shape"):
        vm.seq2seq(features(0, frames=10), 8)
    with pytest.raises(GenerationError, match="NaN"):
        vm.seq2seq(np.full((N_MELS, 2 * N_AUDIO_CTX), np.nan, np.float32), 8)
    with pytest.raises(GenerationError, match="max_new_tokens"):
        vm.seq2seq(features(0), -1)
    with pytest.raises(GenerationError, match="context length"):
        vm.seq2seq(features(0), 100)
    with pytest.raises(GenerationError, match="stream"):
        vm.seq2seq([features(0), features(1)], 8, stream=True)


def test_cross_attention_ref_matches_torch_and_needs_a_source():
    rng = np.random.default_rng(0)
    nh, hd, n_src, seq = 3, 4, 7, 2
    q = rng.standard_normal((seq, nh * hd)).astype(np.float32)
    k, v = (rng.standard_normal((nh, n_src, hd)).astype(np.float32) for _ in range(2))
    from volvox.ops.cross_attention import SourceContext

    ours = cross_attention_ref(SourceContext(cross=[(k, v)]), {"n_heads": nh, "head_dim": hd}, q)
    ref = torch.nn.functional.scaled_dot_product_attention(
        torch.from_numpy(q).reshape(seq, nh, hd).transpose(0, 1), torch.from_numpy(k), torch.from_numpy(v))
    assert rel_err(ours, ref.transpose(0, 1).reshape(seq, nh * hd).numpy()) < 1e-5
    with pytest.raises(UnsupportedError, match="no encoded input"):
        cross_attention_ref(RunContext(), {"n_heads": nh, "head_dim": hd}, q)


# ------------------------------------------------------------------------------------------ T5
T5_CASES = {
    "t5-v1.0-relu-tied": dict(feed_forward_proj="relu", tie_word_embeddings=True),
    "t5-v1.1-gated-gelu": dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False, d_kv=12),
}


@pytest.fixture(scope="module", params=list(T5_CASES))
def t5(request, tmp_path_factory):
    root = tmp_path_factory.mktemp("t5")
    tok = train_unigram_tokenizer(root / "tokenizer.json")
    torch.manual_seed(1)
    base = dict(d_model=32, d_kv=8, d_ff=48, num_layers=2, num_decoder_layers=2, num_heads=4,
                relative_attention_num_buckets=8, relative_attention_max_distance=20)
    config = tf.T5Config(vocab_size=tok.get_vocab_size(), decoder_start_token_id=0, eos_token_id=1, pad_token_id=0,
                         **{**base, **T5_CASES[request.param]})
    model = tf.T5ForConditionalGeneration(config).float().eval()
    with torch.no_grad():  # widen the feed-forward init (not attention, unscaled in T5) so logits are far from ties
        for name, p in model.named_parameters():
            if "DenseReluDense" in name or "lm_head" in name:
                p.mul_(2.0)
    folder = root / request.param
    model.save_pretrained(folder)
    shutil.copy(root / "tokenizer.json", folder / "tokenizer.json")
    vm = volvox.load(folder)
    yield model, vm, tok
    vm.close()


def test_t5_logits_match_transformers(t5):
    model, vm, tok = t5
    assert vm.metadata["task"] == "seq2seq"
    for text in CORPUS[:3]:
        src = tok.encode(text).ids
        dec = [0] + src[:24]  # decoder positions past max_distance reach the log-scale buckets
        with torch.no_grad():
            ref = model(input_ids=torch.tensor([src]), decoder_input_ids=torch.tensor([dec])).logits[0].numpy()
        ours = vm.logits(src, dec)
        assert rel_err(ours, ref) < 1e-4


def test_t5_greedy_text_matches_transformers_generate(t5):
    model, vm, tok = t5
    texts = CORPUS[:3]
    for text in texts:
        src = tok.encode(text).ids
        assert vm.tokenizer.encode(text) == src
        with torch.no_grad():
            out = model.generate(torch.tensor([src]), max_new_tokens=25, do_sample=False, num_beams=1)[0].tolist()
        assert vm.seq2seq(text, 25) == tok.decode(out[1:], skip_special_tokens=True)
        assert vm.last_stats.new_tokens == len([t for t in out[1:] if t != 1])
    assert vm.seq2seq(texts, 25) == [vm.seq2seq(t, 25) for t in texts]


def test_t5_bad_input(t5):
    _, vm, _ = t5
    with pytest.raises(GenerationError, match="non-empty"):
        vm.seq2seq([], 8)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (8, 20)])
def test_relative_buckets_match_transformers(bidirectional, num_buckets, max_distance):
    from transformers.models.t5.modeling_t5 import T5Attention

    from volvox.ops.relative_attention import relative_buckets

    relative = np.arange(-400, 401)[None, :] - np.arange(0, 3)[:, None]  # (3, 801) key - query
    ref = T5Attention._relative_position_bucket(torch.from_numpy(relative), bidirectional=bidirectional,
                                                num_buckets=num_buckets, max_distance=max_distance).numpy()
    np.testing.assert_array_equal(relative_buckets(relative, bidirectional, num_buckets, max_distance), ref)


# ---------------------------------------------------------------------------------------- BART
BART_CASES = {"bart": {}, "bart-scaled-gelu-tanh": dict(scale_embedding=True, activation_function="gelu_new")}


@pytest.fixture(scope="module", params=list(BART_CASES))
def bart(request, tmp_path_factory):
    from tokenizers import Tokenizer

    root = tmp_path_factory.mktemp("bart")
    train_bpe_tokenizer(root / "tokenizer.json")
    torch.manual_seed(3)
    config = tf.BartConfig(vocab_size=Tokenizer.from_file(str(root / "tokenizer.json")).get_vocab_size(),
                           d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                           decoder_attention_heads=2, encoder_ffn_dim=48, decoder_ffn_dim=40,
                           max_position_embeddings=64, bos_token_id=0, pad_token_id=1, eos_token_id=2,
                           decoder_start_token_id=2, forced_bos_token_id=None, forced_eos_token_id=None,
                           **BART_CASES[request.param])
    model = tf.BartForConditionalGeneration(config).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2 or "bias" in name:
                p.mul_(4.0)
    folder = root / request.param
    model.save_pretrained(folder)
    shutil.copy(root / "tokenizer.json", folder / "tokenizer.json")
    vm = volvox.load(folder)
    yield model, vm, Tokenizer.from_file(str(root / "tokenizer.json"))
    vm.close()


def test_bart_logits_and_greedy_match_transformers(bart):
    from transformers.generation.utils import GenerationMixin

    model, vm, tok = bart
    for text in CORPUS[:3]:
        src = [0] + tok.encode(text).ids + [2]
        dec = [2] + src[1:20]
        with torch.no_grad():
            ref = model(input_ids=torch.tensor([src]), decoder_input_ids=torch.tensor([dec])).logits[0].numpy()
            kw = dict(do_sample=False, num_beams=1, no_repeat_ngram_size=0)
            forced = GenerationMixin.generate(model, torch.tensor([src]), max_new_tokens=20, min_new_tokens=20, **kw)
            free = GenerationMixin.generate(model, torch.tensor([src]), max_new_tokens=20, **kw)[0, 1:].tolist()
        assert rel_err(vm.logits(src, dec), ref) < 1e-4
        assert vm._source_ids(text) == src
        session, ours = vm.new_session(vm.encode(src)), []
        logits = session.forward([2])[-1]
        for _ in range(20):  # greedy without stopping: transformers' min_new_tokens keeps the end token out
            logits[2] = -np.inf
            ours.append(int(np.argmax(logits)))
            logits = session.forward([ours[-1]])[-1]
        assert ours == forced[0, 1:].tolist()
        ids = free[:free.index(2)] if 2 in free else free
        assert vm.seq2seq(text, 20) == tok.decode(ids, skip_special_tokens=True)
    assert vm.seq2seq(CORPUS[:3], 20) == [vm.seq2seq(t, 20) for t in CORPUS[:3]]


# -------------------------------------------------------------------------------------- Marian
@pytest.fixture(scope="module", params=["swish", "gelu"])
def marian(request, tmp_path_factory):
    pytest.importorskip("sentencepiece")
    folder = tmp_path_factory.mktemp("marian") / "tiny-marian"
    vocab = train_marian_tokenizer(folder)
    torch.manual_seed(5)
    pad = vocab - 1
    config = tf.MarianConfig(vocab_size=vocab, decoder_vocab_size=vocab, d_model=32, encoder_layers=2,
                             decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=2,
                             encoder_ffn_dim=48, decoder_ffn_dim=40, max_position_embeddings=64, pad_token_id=pad,
                             eos_token_id=1, decoder_start_token_id=pad, forced_eos_token_id=None,
                             activation_function=request.param)
    model = tf.MarianMTModel(config).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if (p.ndim >= 2 or "bias" in name) and "embed_positions" not in name:
                p.mul_(4.0)
    model.save_pretrained(folder)
    vm = volvox.load(folder)
    yield model, vm, tf.MarianTokenizer(str(folder / "source.spm"), str(folder / "target.spm"),
                                        str(folder / "vocab.json")), pad
    vm.close()


def test_marian_logits_and_greedy_match_transformers(marian):
    from transformers.generation.utils import GenerationMixin

    model, vm, tok, pad = marian
    for text in CORPUS[:3]:
        src = tok(text).input_ids
        assert vm._source_ids(text) == src
        dec = [pad] + src[:15]
        with torch.no_grad():
            ref = model(input_ids=torch.tensor([src]), decoder_input_ids=torch.tensor([dec])).logits[0].numpy()
            out = GenerationMixin.generate(model, torch.tensor([src]), max_new_tokens=16, do_sample=False,
                                           num_beams=1, bad_words_ids=None)[0, 1:].tolist()
        assert rel_err(vm.logits(src, dec), ref) < 1e-4
        ids = out[:out.index(1)] if 1 in out else out
        assert vm.seq2seq(text, 16) == tok.decode(ids, skip_special_tokens=True)


def test_marian_refuses_separate_vocabularies(marian, tmp_path):
    model, vm, tok, pad = marian
    folder = tmp_path / "split-vocab"
    shutil.copytree(vm.source, folder)
    config = json.loads((folder / "config.json").read_text())
    config["share_encoder_decoder_embeddings"] = False
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedError, match="separate source and target vocabularies"):
        volvox.load(folder)


# ------------------------------------------------------------------ blueprints of encoder-decoders
def _roundtrip(vm, tmp_path, source, decoder_ids, quantize=None):
    """Convert ``vm``'s folder to a blueprint, load it: (blueprint model, its logits, the folder's)."""
    from volvox.convert import convert

    out = convert(vm.source, tmp_path / "bp", quantize=quantize)
    assert sorted(p.name for p in out.iterdir() if p.suffix == ".json")[:2] == ["config.json", "encoder.json"]
    bp = volvox.load(out)
    return bp, bp.logits(source, decoder_ids), vm.logits(source, decoder_ids)


def test_whisper_blueprint_equals_its_folder(whisper, tmp_path):
    model, vm, text_vocab = whisper
    bp, got, want = _roundtrip(vm, tmp_path, features(0), [text_vocab + 1, 5, 17])
    with bp:
        np.testing.assert_array_equal(got, want)
        assert bp.metadata["task"] == "transcribe"
        assert bp.seq2seq(features(1), 8) == vm.seq2seq(features(1), 8)


def _check_text_blueprint(vm, start, tmp_path):
    src = vm._source_ids(CORPUS[0])
    bp, got, want = _roundtrip(vm, tmp_path, src, [start] + src[:6])
    with bp:
        np.testing.assert_array_equal(got, want)
        assert bp._source_ids(CORPUS[1]) == vm._source_ids(CORPUS[1])
        assert bp.seq2seq(CORPUS[1], 12) == vm.seq2seq(CORPUS[1], 12)


def test_t5_blueprint_equals_its_folder(t5, tmp_path):
    _check_text_blueprint(t5[1], 0, tmp_path)


def test_bart_blueprint_equals_its_folder(bart, tmp_path):
    _check_text_blueprint(bart[1], 2, tmp_path)


def test_marian_blueprint_equals_its_folder(marian, tmp_path):
    _check_text_blueprint(marian[1], marian[3], tmp_path)


def test_quantized_seq2seq_blueprint_is_close(bart, tmp_path):
    vm = bart[1]
    src = vm._source_ids(CORPUS[0])
    bp, got, want = _roundtrip(vm, tmp_path, src, [2] + src[:6], quantize="q8_0")
    with bp:
        assert rel_err(got, want) < 0.05
        encoder = json.loads((tmp_path / "bp" / "encoder.json").read_text())
        assert encoder["weights"]["quantized"]  # the encoder's matrices are quantized too
