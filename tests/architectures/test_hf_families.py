"""The newer dense decoder families from Hugging Face folders against transformers + torch: Qwen3
(QK-norm), Gemma 2 (soft-capping, sliding + global layers, GeGLU, (1 + w) norms), Gemma 3 text
(QK-norm, local RoPE base, per-layer pattern), Phi-3 (fused qkv / gate_up, LongRoPE) and LLaMA with
YaRN scaling (LLaMA 3.1 scaling is in test_hf_decoders.py).

Each case builds a tiny random model with transformers (fixed seed, fp32, no download), saves it,
loads the folder with volvox and compares prefill logits, step-by-step decode logits over a
sequence longer than every sliding window, and 32 greedy tokens (KV cache on both sides).
The decode references are transformers' forward with its KV cache, one token per call: LongRoPE
picks its factors per call from the last position, so a one-shot forward over a sequence longer
than the original context, or generate() (which differs from its own step-by-step forward there),
is a different computation.
"""

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from hf_models import CORPUS, load_pair, rel_err, session_greedy, torch_logits  # noqa: E402

BASE = dict(num_hidden_layers=2, hidden_size=48, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=80, max_position_embeddings=256)
GEMMA = dict(BASE, num_hidden_layers=3, head_dim=16, query_pre_attn_scalar=24, sliding_window=6,
             layer_types=["sliding_attention", "full_attention", "sliding_attention"])
CASES = {
    "qwen3": ("qwen3", dict(BASE, head_dim=16)),
    "qwen3-window-tied": ("qwen3", dict(BASE, head_dim=8, use_sliding_window=True, sliding_window=5,
                                        max_window_layers=1, tie_word_embeddings=True)),
    "gemma2": ("gemma2", dict(GEMMA, attn_logit_softcapping=8.0, final_logit_softcapping=12.0)),
    "gemma3_text": ("gemma3_text", dict(GEMMA, rope_parameters={
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6}})),
    "phi3": ("phi3", dict(BASE, sliding_window=7)),
    "phi3-longrope": ("phi3", dict(BASE, original_max_position_embeddings=16, rope_scaling={
        "rope_type": "longrope", "short_factor": [1.0, 1.2, 1.5, 2.0, 3.0, 4.0],
        "long_factor": [1.0, 2.0, 4.0, 6.0, 9.0, 16.0]})),
    "phi3-partial-longrope": ("phi3", dict(BASE, original_max_position_embeddings=16, partial_rotary_factor=0.5,
                                           rope_scaling={"rope_type": "longrope", "short_factor": [1.0, 1.5, 3.0],
                                                         "long_factor": [1.0, 4.0, 16.0]})),
    "llama-yarn": ("llama", dict(BASE, rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                      "original_max_position_embeddings": 16})),
}


def build_model(directory, model_type, tokenizer_json, vocab, seed=0, **kw):
    """Save a random ``model_type`` causal LM (fp32, weights widened, norms randomised) with the
    tokenizer into ``directory``; return the torch model."""
    import shutil

    import torch
    import transformers as tf

    torch.manual_seed(seed)
    config = tf.AutoConfig.for_model(model_type, vocab_size=vocab, bos_token_id=None, eos_token_id=None,
                                     pad_token_id=None, **kw)
    model = tf.AutoModelForCausalLM.from_config(config).float().eval()
    with torch.no_grad():  # random init is tiny (std 0.02): widen it so logits are far from ties
        for name, p in model.named_parameters():
            if p.ndim >= 2 or "bias" in name:
                p.mul_(4.0)
            elif "norm" in name:  # norms start as ones (Gemma: zeros, used as 1 + w): make them matter
                p.add_(0.3 * torch.randn_like(p))
    model.save_pretrained(directory)
    shutil.copy(tokenizer_json, directory / "tokenizer.json")
    return model


def torch_step_logits(model, ids, first=1):
    """transformers' logits (len(ids) - first + 1, vocab): ids[:first] in one call, then one token per
    call through its KV cache."""
    import torch

    with torch.no_grad():
        out = model(torch.tensor([ids[:first]]), use_cache=True)
        rows = [out.logits[0, -1].numpy()]
        for token in ids[first:]:
            out = model(torch.tensor([[token]]), past_key_values=out.past_key_values, use_cache=True)
            rows.append(out.logits[0, -1].numpy())
    return np.stack(rows)


def torch_greedy_steps(model, ids, n):
    """n greedy tokens from transformers' forward with its KV cache, one token per call after the prompt."""
    import torch

    with torch.no_grad():
        out, got = model(torch.tensor([ids]), use_cache=True), []
        for _ in range(n):
            got.append(int(out.logits[0, -1].argmax()))
            out = model(torch.tensor([[got[-1]]]), past_key_values=out.past_key_values, use_cache=True)
    return got


@pytest.fixture(scope="module", params=sorted(CASES))
def pair(request, tmp_path_factory, tokenizer_json):
    yield from load_pair(request, tmp_path_factory, tokenizer_json, CASES, build_model)


def test_prefill_logits_match_transformers(pair):
    model, lm = pair
    ids = lm.tokenizer.encode(CORPUS[0] + " " + CORPUS[2])
    assert len(ids) > 20  # longer than every sliding window and LongRoPE's original context
    assert rel_err(lm.logits(ids), torch_logits(model, ids)) < 1e-4


def test_decode_step_logits_match_transformers(pair):
    model, lm = pair
    ids = lm.tokenizer.encode(CORPUS[1] + " " + CORPUS[0])[:24]
    want = torch_step_logits(model, ids)  # (24, vocab)
    session = lm.new_session()
    got = np.stack([session.forward([token])[-1] for token in ids])  # one token per step
    assert rel_err(got, want) < 1e-4


def test_greedy_tokens_match_transformers(pair):
    model, lm = pair
    ids = lm.tokenizer.encode("Once upon a time")
    assert session_greedy(lm.new_session(), ids, 32) == torch_greedy_steps(model, ids, 32)


def test_family_switches_are_in_the_graph(pair):
    """The switches a family turns on are in the compiled graph (a case cannot pass as plain LLaMA)."""
    model, lm = pair
    ops = {node.op for node in lm.graph.nodes}
    model_type = model.config.model_type
    assert ("softcap" in ops) == bool(getattr(model.config, "final_logit_softcapping", None))
    assert ("slice" in ops) == (model_type == "phi3")
    assert ("reshape" in ops) == (model_type in ("qwen3", "gemma3_text"))


def test_window_cache_forgets_what_no_query_sees(pair):
    """Where every layer slides (Phi-3 here), the KV cache hands back the pages of positions behind
    the window as decoding moves on (they read as zeros after), and the logits stay transformers'."""
    from volvox.runtime.kv_cache import kv_window

    model, lm = pair
    if kv_window(lm.graph) == 0:
        pytest.skip("a layer attends to the whole context: the cache keeps every position")
    ids = (lm.tokenizer.encode(" ".join(CORPUS)) * 4)[:200]
    session = lm.new_session()
    for token in ids[:-1]:  # token steps (the native plan where the graph lowers)
        session.forward([token])
    last = session.forward([ids[-1]])[-1]
    kv = session.ctx.kv
    assert kv.forgotten > 100 and not kv.keys[0][:, :kv.forgotten // 2].any()
    assert rel_err(last, torch_logits(model, ids)[-1]) < 1e-4


def test_broken_rope_parameters_name_the_config():
    from volvox.architectures.hf_llama import rope_of
    from volvox.errors import BlueprintError
    from volvox.formats.hf_folder import HFConfig

    cfg = HFConfig({"model_type": "phi3", "rope_scaling": {"rope_type": "longrope", "long_factor": [1.0]}},
                   "folder/config.json")
    with pytest.raises(BlueprintError, match="folder/config.json: longrope .* 'short_factor'"):
        rope_of(cfg, 256, 16)


@pytest.mark.parametrize("data, want", [
    (dict(model_type="gemma2", sliding_window=4), (4, 0, 4, 0)),
    (dict(model_type="gemma3_text", sliding_window=4, sliding_window_pattern=3), (4, 4, 0, 4)),
    (dict(model_type="gemma3_text", sliding_window=4, layer_types=["full_attention"] + ["sliding_attention"] * 3),
     (0, 4, 4, 4)),
    (dict(model_type="qwen3", sliding_window=4), ()),
])
def test_layer_windows_of_configs_with_and_without_layer_types(data, want):
    from volvox.architectures.hf_llama import layer_windows
    from volvox.formats.hf_folder import HFConfig

    assert layer_windows(HFConfig(data, "config.json"), 4) == want
