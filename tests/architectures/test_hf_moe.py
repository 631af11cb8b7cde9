"""Hugging Face mixture-of-experts checkpoints (mixtral, qwen2_moe, qwen3_moe, olmoe) against transformers + torch.

Each case builds a tiny random MoE model with transformers (fixed seed, fp32, no download), saves it
with save_pretrained, loads the folder with volvox and compares the logits of a prefill, the logits
of a step-by-step decode (the token step's native MoE steps) and 32 greedy tokens (KV cache on both
sides), and batched generation (rows of several sequences routed together) against one by one.
"""

import shutil

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from hf_models import CORPUS, load_pair, rel_err, session_greedy, torch_greedy, torch_logits  # noqa: E402

BASE = dict(num_hidden_layers=2, hidden_size=48, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=256, bos_token_id=None, eos_token_id=None, pad_token_id=None)
CASES = {
    "mixtral": ("MixtralConfig", dict(num_local_experts=4, num_experts_per_tok=2, intermediate_size=64)),
    "mixtral-top1-window": ("MixtralConfig", dict(num_local_experts=3, num_experts_per_tok=1, intermediate_size=32,
                                                  sliding_window=6, tie_word_embeddings=True)),
    "qwen2_moe": ("Qwen2MoeConfig", dict(num_experts=6, num_experts_per_tok=2, moe_intermediate_size=32,
                                         shared_expert_intermediate_size=80, intermediate_size=96)),
    "qwen2_moe-norm-dense-layer": ("Qwen2MoeConfig", dict(num_experts=4, num_experts_per_tok=3, norm_topk_prob=True,
                                                          moe_intermediate_size=32, shared_expert_intermediate_size=40,
                                                          intermediate_size=72, mlp_only_layers=[1])),
    "qwen3_moe": ("Qwen3MoeConfig", dict(num_experts=5, num_experts_per_tok=2, moe_intermediate_size=32,
                                         norm_topk_prob=True, head_dim=16)),
    "qwen3_moe-sparse-step": ("Qwen3MoeConfig", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                                     intermediate_size=64, decoder_sparse_step=2)),
    "olmoe": ("OlmoeConfig", dict(num_experts=6, num_experts_per_tok=3, intermediate_size=32)),
}


def build_moe_lm(directory, config_class, tokenizer_json, vocab, seed=0, **kw):
    """Save a random MoE causal LM (fp32) + tokenizer.json into ``directory``; return the torch model."""
    import torch
    import transformers as tf

    torch.manual_seed(seed)
    config = getattr(tf, config_class)(vocab_size=vocab, **{**BASE, **kw})
    model = tf.AutoModelForCausalLM.from_config(config).float().eval()
    with torch.no_grad():  # random init is tiny (std 0.02): widen it so logits and router scores are far from ties
        for name, p in model.named_parameters():
            if p.ndim >= 2 or "bias" in name:
                p.mul_(4.0)
    model.save_pretrained(directory)
    shutil.copy(tokenizer_json, directory / "tokenizer.json")
    return model


@pytest.fixture(scope="module", params=sorted(CASES))
def pair(request, tmp_path_factory, tokenizer_json):
    yield from load_pair(request, tmp_path_factory, tokenizer_json, CASES, build_moe_lm)


def test_logits_match_transformers(pair):
    model, lm = pair
    ids = lm.tokenizer.encode(CORPUS[0] + " " + CORPUS[2])
    assert len(ids) > 20  # long enough to cross the sliding window
    assert rel_err(lm.logits(ids), torch_logits(model, ids)) < 1e-4


def test_decode_steps_match_transformers(pair):
    model, lm = pair
    ids = lm.tokenizer.encode(CORPUS[1])
    session = lm.new_session()
    steps = np.concatenate([session.forward(ids[:3])] + [session.forward([t]) for t in ids[3:]])  # rows 2, 3, ...
    assert rel_err(steps, torch_logits(model, ids)[2:]) < 1e-4


def test_greedy_tokens_match_transformers(pair):
    model, lm = pair
    ids = lm.tokenizer.encode("Once upon a time")
    assert session_greedy(lm.new_session(), ids, 32) == torch_greedy(model, ids, 32)


def test_batch_equals_one_by_one(pair):
    _, lm = pair
    prompts = ["Once upon", "The quick brown fox jumps over", "def", "Tiny models tell tiny stories: a"]
    assert lm.generate(prompts, max_new_tokens=16) == [lm.generate(p, max_new_tokens=16) for p in prompts]


def test_token_step_runs_native_steps(pair):
    """The decode plan lowers every node, the MoE block and the shared expert's gate included, to native steps."""
    _, lm = pair
    session = lm.new_session()
    session.forward([1, 2, 3])
    session.forward([4])
    plan = lm._native_decode_plan()
    assert plan and not plan.islands
    assert "moe" in {op for _, op in plan.step_nodes}
