"""GGUF Mamba / Mamba-2 files against llama.cpp (llama-cpp-python) on the same file.

Random transformers models are written to GGUF with the `gguf` package in this test, as llama.cpp's
converter does it (tensor names from gguf's name map, A = -exp(A_log), the conv weight squeezed,
Mamba-2's A / D as (n_heads, 1) and its norm as (n_groups, d_inner / n_groups)); volvox's logits
must be llama.cpp's within NMSE 1e-6 at every position of the prompt and over decode steps.
"""

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
llama_cpp = pytest.importorskip("llama_cpp")

import volvox  # noqa: E402
from tiny_gguf import _byte_vocab, add_byte_tokenizer, store_matrix  # noqa: E402

CONFIGS = {
    "mamba": dict(hidden_size=32, intermediate_size=64, state_size=8, time_step_rank=4),
    "mamba2": dict(hidden_size=32, num_heads=4, head_dim=16, n_groups=2, state_size=8, chunk_size=8),
}
CASES = [("mamba", "f32"), ("mamba", "f16"), ("mamba", "q8_0"), ("mamba2", "f32"), ("mamba2", "q8_0"), ("mamba2", "q4_0")]
# the matrices a GGUF writer stores in the file's type; the SSM's small tensors stay f32 (ggml's ops need it)
MATRICES = ("token_embd.weight", "output.weight", "ssm_in.weight", "ssm_x.weight", "ssm_dt.weight", "ssm_out.weight")
PROMPT = [5, 70, 71, 120, 33, 200, 9, 14, 250, 3, 61, 62, 63, 140]


# ggml multiplies f16 weights with activations rounded to f16 (volvox widens the weights and keeps the
# activations f32): an f16 file's logits differ from llama.cpp's by that rounding, not by the SSM; the
# f16 file is held to transformers on the same f16-rounded weights instead (test_f16_file_matches_transformers)
NMSE_BOUND = {"f16": 1e-5}


def nmse(got, want):
    return float(np.sum((got - want) ** 2) / np.sum(want ** 2))


def random_ssm_model(kind, vocab, seed=0, gain=3.0, **sizes):
    """A random transformers Mamba / Mamba-2 model (fp32), its projections multiplied by ``gain``
    (``sizes`` override CONFIGS)."""
    import torch
    import transformers as tf

    torch.manual_seed(seed)
    cls = {"mamba": tf.MambaConfig, "mamba2": tf.Mamba2Config}[kind]
    model = tf.AutoModelForCausalLM.from_config(cls(vocab_size=vocab, num_hidden_layers=2, **{**CONFIGS[kind], **sizes})).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("proj.weight", "embeddings.weight", "lm_head.weight")):
                p.mul_(gain)
    return model


def write_ssm_gguf(model, kind, path, qtype, dt_b_c_rms=False):
    """``model`` as a GGUF file of ``kind`` (mamba / mamba2), its matrices stored as ``qtype``."""
    cfg = model.config
    arch = {"mamba": gguf.MODEL_ARCH.MAMBA, "mamba2": gguf.MODEL_ARCH.MAMBA2}[kind]
    names = gguf.get_tensor_name_map(arch, cfg.num_hidden_layers)
    tokens = _byte_vocab()[0]
    w = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[arch])
    d_inner = cfg.intermediate_size if kind == "mamba" else cfg.num_heads * cfg.head_dim
    w.add_context_length(1 << 20)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(0)
    w.add_head_count(0)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_ssm_conv_kernel(cfg.conv_kernel)
    w.add_ssm_inner_size(d_inner)
    w.add_ssm_state_size(cfg.state_size)
    w.add_ssm_time_step_rank(cfg.time_step_rank if kind == "mamba" else cfg.num_heads)
    if kind == "mamba":
        w.add_ssm_dt_b_c_rms(dt_b_c_rms)
    else:
        w.add_ssm_group_count(cfg.n_groups)
    w.add_layer_norm_rms_eps(cfg.layer_norm_epsilon)
    w.add_vocab_size(len(tokens))
    add_byte_tokenizer(w)
    for hf_name, t in model.state_dict().items():
        if hf_name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        data = t.detach().numpy().astype(np.float32)
        if hf_name.endswith(".dt_bias"):
            hf_name = hf_name[:-len("dt_bias")] + "dt_proj.bias"
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        assert name is not None, hf_name
        if hf_name.endswith(".A_log"):
            data = -np.exp(data)
        if ".conv1d.weight" in hf_name:
            data = data.squeeze(1)  # (channels, kernel)
        if kind == "mamba2" and hf_name.endswith((".A_log", ".D")):
            data = data.reshape(-1, 1)
        if kind == "mamba2" and hf_name.endswith("mixer.norm.weight"):
            data = data.reshape(cfg.n_groups, -1)
        if not name.endswith(MATRICES) or (qtype not in ("f32", "f16") and data.shape[-1] % 32):
            w.add_tensor(name, data)
        else:
            array, raw_dtype = store_matrix(data, qtype)
            w.add_tensor(name, array, raw_dtype=raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def models():
    vocab = len(_byte_vocab()[0])
    return {kind: random_ssm_model(kind, vocab) for kind in CONFIGS}


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}-{c[1]}")
def files(request, tmp_path_factory, models):
    kind, qtype = request.param
    path = write_ssm_gguf(models[kind], kind, tmp_path_factory.mktemp(f"{kind}-{qtype}") / "model.gguf", qtype)
    llama = llama_cpp.Llama(model_path=str(path), n_ctx=64, n_batch=64, logits_all=True, verbose=False, n_threads=1)
    lm = volvox.load(path)
    yield llama, lm, NMSE_BOUND.get(qtype, 1e-6)
    lm.close()
    llama.close()


def test_prompt_logits_match_llama_cpp(files):
    llama, lm, bound = files
    llama.reset()
    llama.eval(PROMPT)
    want = np.array(llama.scores[:len(PROMPT)], np.float32)
    assert nmse(lm.logits(PROMPT), want) < bound


def test_decode_steps_match_llama_cpp(files):
    llama, lm, bound = files
    llama.reset()
    llama.eval(PROMPT[:4])
    session = lm.new_session()
    got = session.forward(PROMPT[:4])[-1]
    for token in PROMPT[4:10]:
        want = np.array(llama.scores[llama.n_tokens - 1], np.float32)
        assert nmse(got, want) < bound
        llama.eval([token])
        got = session.forward([token])[-1]


def test_f16_file_matches_transformers(models, tmp_path):
    import copy

    import torch
    from hf_models import rel_err, torch_logits

    path = write_ssm_gguf(models["mamba"], "mamba", tmp_path / "f16.gguf", "f16")
    rounded = copy.deepcopy(models["mamba"])
    with torch.no_grad():  # the weights the file stores as f16, rounded as it stores them
        for name, p in rounded.named_parameters():
            if name.endswith(("proj.weight", "embeddings.weight", "lm_head.weight")):
                p.copy_(p.half().float())
    with volvox.load(path) as lm:
        assert rel_err(lm.logits(PROMPT), torch_logits(rounded, PROMPT)) < 1e-4


def test_falcon_mamba_norms_are_refused(models, tmp_path):
    path = write_ssm_gguf(models["mamba"], "mamba", tmp_path / "falcon.gguf", "f32", dt_b_c_rms=True)
    with pytest.raises(volvox.UnsupportedError, match="Falcon-Mamba"):
        volvox.load(path)
