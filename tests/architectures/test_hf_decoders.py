"""Hugging Face decoder checkpoints (gpt2, gpt_neo, llama, mistral, qwen2) against transformers + torch.

Each case builds a tiny random model with transformers (fixed seed, fp32, no download),
saves it with save_pretrained, loads the folder with volvox and compares logits,
32 greedy tokens (KV cache on both sides) and batched vs one-by-one generation.
"""

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from hf_models import CORPUS, build_causal_lm, load_pair, rel_err, session_greedy, torch_greedy, torch_logits  # noqa: E402

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}
CASES = {
    "gpt2": ("gpt2", {}),
    "gpt2-wide-untied": ("gpt2", dict(n_embd=64, n_head=2, n_layer=3, tie_word_embeddings=False,
                                      activation_function="gelu")),
    "gpt_neo": ("gpt_neo", {}),
    "gpt_neo-window3": ("gpt_neo", dict(num_heads=6, window_size=3, attention_types=[[["local", "global"], 1]])),
    "llama-gqa-llama3": ("llama", dict(rope_scaling=LLAMA3)),
    "llama-mha-tied-linear": ("llama", dict(num_key_value_heads=4, tie_word_embeddings=True, rope_theta=500.0,
                                            rope_scaling={"rope_type": "linear", "factor": 2.0})),
    "llama-mqa-bias": ("llama", dict(num_attention_heads=6, num_key_value_heads=1, hidden_size=48,
                                     attention_bias=True, mlp_bias=True)),
    "mistral-window": ("mistral", dict(sliding_window=6, rope_theta=1e6)),
    "qwen2-tied": ("qwen2", dict(tie_word_embeddings=True, num_attention_heads=8, num_key_value_heads=2,
                                 hidden_size=64)),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def pair(request, tmp_path_factory, tokenizer_json):
    yield from load_pair(request, tmp_path_factory, tokenizer_json, CASES, build_causal_lm)


def test_logits_match_transformers(pair):
    model, lm = pair
    ids = lm.tokenizer.encode(CORPUS[0] + " " + CORPUS[2])
    assert len(ids) > 20  # long enough to cross the sliding windows
    assert rel_err(lm.logits(ids), torch_logits(model, ids)) < 1e-4


def test_greedy_tokens_match_transformers(pair):
    model, lm = pair
    ids = lm.tokenizer.encode("Once upon a time")
    assert session_greedy(lm.new_session(), ids, 32) == torch_greedy(model, ids, 32)


def test_batch_equals_one_by_one(pair):
    _, lm = pair
    prompts = ["Once upon", "The quick brown fox jumps over", "def", "Tiny models tell tiny stories: a"]
    assert lm.generate(prompts, max_new_tokens=32) == [lm.generate(p, max_new_tokens=32) for p in prompts]
    kw = dict(max_new_tokens=16, temperature=0.8, top_k=20, seed=5, stop=["a"])
    assert lm.generate(prompts, **kw) == [lm.generate(p, **kw) for p in prompts]


def test_tokenizer_ids_match_hf_tokenizers(tokenizer_json):
    from tokenizers import Tokenizer

    from volvox.tokenizers import ByteLevelBPETokenizer

    ours = ByteLevelBPETokenizer.from_tokenizer_json(tokenizer_json[0])
    theirs = Tokenizer.from_file(str(tokenizer_json[0]))
    for text in CORPUS + ["unseen words: zebra quartz 98765", "  spaces\tand\nnewlines  "]:
        assert ours.encode(text) == theirs.encode(text).ids
