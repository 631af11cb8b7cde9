"""Hugging Face Mamba / Mamba-2 / Bamba (hybrid) checkpoints against transformers + torch (its slow torch path on the CPU).

Each case builds a tiny random model with transformers (fixed seed, fp32, no download), saves it,
loads the folder with volvox and compares logits, 32 greedy tokens (the recurrent state carried on
both sides), the recurrence after a prefill against the full forward, chunked prefill, batched and
streamed generation.
"""

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import volvox  # noqa: E402
from volvox.tasks import generate as generate_task  # noqa: E402
from hf_models import CORPUS, load_pair, rel_err, session_greedy, torch_greedy, torch_logits  # noqa: E402

CASES = {
    "mamba": ("mamba", dict(hidden_size=32, intermediate_size=64, state_size=8, time_step_rank=4)),
    "mamba-bias-untied": ("mamba", dict(hidden_size=24, intermediate_size=48, state_size=4, time_step_rank=3,
                                        conv_kernel=3, use_bias=True, tie_word_embeddings=False)),
    "mamba2": ("mamba2", dict(hidden_size=32, num_heads=8, head_dim=8, n_groups=1, state_size=8, chunk_size=8)),
    "mamba2-groups-tied": ("mamba2", dict(hidden_size=32, num_heads=4, head_dim=16, n_groups=2, state_size=6,
                                          chunk_size=4, tie_word_embeddings=True, conv_kernel=3)),
    # hybrid: Mamba-2, attention (partial rotary, GQA), Mamba-2 layers, each with a SwiGLU block
    "bamba-hybrid": ("bamba", dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, attn_layer_indices=[1],
                                   mamba_n_heads=4, mamba_d_head=16, mamba_n_groups=2, mamba_d_state=8,
                                   mamba_chunk_size=4, intermediate_size=48, max_position_embeddings=256,
                                   num_hidden_layers=3)),
}


def build_ssm_lm(directory, kind, tokenizer_json, vocab, seed=0, **kw):
    """Save a random ``kind`` (mamba / mamba2 / bamba) causal LM (2 layers unless ``kw`` says) + tokenizer.json;
    return the torch model."""
    import shutil

    import torch
    import transformers as tf

    torch.manual_seed(seed)
    cls = {"mamba": tf.MambaConfig, "mamba2": tf.Mamba2Config, "bamba": tf.BambaConfig}[kind]
    kw = {"num_hidden_layers": 2, **kw}
    config = cls(vocab_size=vocab, bos_token_id=None, eos_token_id=None, pad_token_id=None, **kw)
    model = tf.AutoModelForCausalLM.from_config(config).float().eval()
    with torch.no_grad():  # spread the random init so that logits are far from ties
        for name, p in model.named_parameters():
            if name.endswith(("proj.weight", "embeddings.weight", "lm_head.weight")):
                p.mul_(3.0)
    model.save_pretrained(directory)
    shutil.copy(tokenizer_json, directory / "tokenizer.json")
    return model


@pytest.fixture(scope="module", params=sorted(CASES))
def pair(request, tmp_path_factory, tokenizer_json):
    yield from load_pair(request, tmp_path_factory, tokenizer_json, CASES, build_ssm_lm)


def test_logits_match_transformers(pair):
    model, lm = pair
    ids = lm.tokenizer.encode(CORPUS[0] + " " + CORPUS[2])
    assert len(ids) > 20
    assert rel_err(lm.logits(ids), torch_logits(model, ids)) < 1e-4


def test_greedy_tokens_match_transformers(pair):
    model, lm = pair
    ids = lm.tokenizer.encode("Once upon a time")
    assert session_greedy(lm.new_session(), ids, 32) == torch_greedy(model, ids, 32)


def test_recurrence_after_prefill_equals_full_forward(pair, monkeypatch):
    model, lm = pair
    ids = lm.tokenizer.encode(CORPUS[1])
    want = torch_logits(model, ids)
    session = lm.new_session()
    rows = [session.forward(ids[:7], all_logits=True)] + [session.forward([t]) for t in ids[7:]]
    assert rel_err(np.concatenate(rows), want) < 1e-4
    monkeypatch.setattr(generate_task, "PREFILL_CHUNK", 5)  # a prompt prefilled in chunks carries the state
    assert rel_err(lm.logits(ids), want) < 1e-4


def test_batch_stream_and_chat_equal_one_by_one(pair):
    _, lm = pair
    prompts = ["Once upon", "The quick brown fox jumps over", "def", "Tiny models tell tiny stories: a"]
    assert lm.generate(prompts, max_new_tokens=12) == [lm.generate(p, max_new_tokens=12) for p in prompts]
    kw = dict(max_new_tokens=10, temperature=0.8, top_k=20, seed=5)
    assert lm.generate(prompts, **kw) == [lm.generate(p, **kw) for p in prompts]
    assert "".join(lm.generate(prompts[1], stream=True, max_new_tokens=12)) == lm.generate(prompts[1], max_new_tokens=12)
    messages = [{"role": "user", "content": "Once upon a time"}]
    prompt = lm.tokenizer.apply_chat_template(messages, add_generation_prompt=True)  # ChatML: no template here
    assert lm.chat(messages, max_new_tokens=8) == lm.generate(prompt, max_new_tokens=8, add_bos=False) != ""


def test_reference_mode_matches_kernels(pair, tmp_path_factory):
    _, lm = pair
    ids = lm.tokenizer.encode(CORPUS[2])
    with volvox.load(lm.source, reference=True) as ref:
        assert rel_err(lm.logits(ids), ref.logits(ids)) < 1e-5


def test_served_requests_get_their_sequential_answers(pair):
    """The serving scheduler packs the sequences' decode steps, each row from its own state cache."""
    pytest.importorskip("uvicorn")
    pytest.importorskip("openai")
    from concurrent.futures import ThreadPoolExecutor

    from live_server import LiveServer

    _, lm = pair
    prompts = ["Once upon", "The quick brown fox", "def main", "Tiny models tell", "a cat, a hat"]
    want = [lm.generate(p, max_new_tokens=10 + i) for i, p in enumerate(prompts)]
    server = LiveServer(lm, "ssm", max_batch=8)
    try:
        client = server.client()
        with ThreadPoolExecutor(len(prompts)) as pool:
            got = list(pool.map(lambda i: client.completions.create(model="ssm", prompt=prompts[i], max_tokens=10 + i,
                                                                     temperature=0).choices[0].text,
                                range(len(prompts))))
        assert server.wait_idle()["volvox_kv_caches_alive"] == 0
    finally:
        server.close()
    assert got == want


@pytest.mark.parametrize("field, value, match", [
    ("norm_before_gate", True, "norm_before_gate"),
    ("time_step_limit", [0.001, 0.1], "time_step_limit"),
    ("hidden_act", "gelu", "hidden_act"),
])
def test_unsupported_mamba2_configs_are_refused(pair, tmp_path, field, value, match):
    import json
    import shutil

    _, lm = pair
    if lm.metadata["architecture"] != "mamba2":
        pytest.skip("a mamba2 config field")
    folder = tmp_path / "edited"
    shutil.copytree(lm.source, folder)
    config = json.loads((folder / "config.json").read_text())
    config[field] = value
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(volvox.UnsupportedError, match=match):
        volvox.load(folder)


@pytest.mark.parametrize("state", [None, {"n_layers": 0, "conv": [3, 8], "ssm": [8, 4]},
                                   {"n_layers": 2, "conv": [3], "ssm": [8, 4]}, {"n_layers": 2, "conv": [3, 8]}])
def test_bad_state_metadata_is_a_blueprint_error(state):
    from volvox.runtime.state_cache import StateShape

    with pytest.raises(volvox.BlueprintError, match="metadata.state"):
        StateShape.from_metadata(state, "model")
