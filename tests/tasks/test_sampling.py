"""Token sampling: greedy, temperature, top-k, top-p and repetition penalty against direct computation."""

import numpy as np
import pytest

import volvox
from volvox.tasks.sampling import Sampler, SamplingParams

LOGITS = np.array([1.0, 3.0, 2.0, 0.5, 2.9], dtype=np.float32)


def test_greedy():
    assert Sampler(SamplingParams())(LOGITS, []) == 1


def test_top_k_one_is_greedy():
    assert all(Sampler(SamplingParams(temperature=1.5, top_k=1, seed=s))(LOGITS, []) == 1 for s in range(20))


def test_top_p_keeps_the_nucleus():
    p = np.exp(LOGITS - LOGITS.max())
    p /= p.sum()
    order = np.argsort(-p)
    nucleus = set(order[: np.searchsorted(np.cumsum(p[order]), 0.6) + 1].tolist())
    seen = {Sampler(SamplingParams(temperature=1.0, top_p=0.6, seed=s))(LOGITS, []) for s in range(200)}
    assert seen == nucleus


def test_temperature_matches_softmax_frequencies():
    sampler = Sampler(SamplingParams(temperature=0.7, seed=1))
    counts = np.bincount([sampler(LOGITS, []) for _ in range(20000)], minlength=5) / 20000
    p = np.exp((LOGITS - LOGITS.max()) / 0.7)
    np.testing.assert_allclose(counts, p / p.sum(), atol=0.015)


def test_repetition_penalty_demotes_seen_tokens():
    assert Sampler(SamplingParams(repetition_penalty=2.0))(LOGITS, [1]) == 4
    neg = np.array([-1.0, -1.1], dtype=np.float32)
    assert Sampler(SamplingParams(repetition_penalty=2.0))(neg, [0]) == 1


@pytest.mark.parametrize("kw", [dict(temperature=float("nan")), dict(top_p=1.5), dict(top_k=2.5),
                                dict(repetition_penalty=-1.0)])
def test_invalid(kw):
    with pytest.raises(volvox.GenerationError):
        SamplingParams(**kw)


def test_best_first_is_the_stable_sorts_prefix():
    from volvox.tasks.sampling import best_first

    rng = np.random.default_rng(0)
    z = np.round(rng.standard_normal(5000), 1)  # many ties, at the cut too
    full = np.argsort(-z, kind="stable")
    for k in (1, 7, 40, 333, 4999, 5000):
        np.testing.assert_array_equal(best_first(z, k), full[:k])


def test_top_p_on_a_large_vocabulary_draws_only_from_the_nucleus():
    rng = np.random.default_rng(1)
    logits = (rng.standard_normal(20000) * 2).astype(np.float32)
    z = logits.astype(np.float64)
    p = np.exp(z - z.max())
    p /= p.sum()
    order = np.argsort(-p, kind="stable")
    nucleus = set(order[: np.searchsorted(np.cumsum(p[order]), 0.5) + 1].tolist())  # hundreds of tokens
    assert len(nucleus) > 4 * 64  # past the sampler's first candidate set
    seen = {Sampler(SamplingParams(temperature=1.0, top_p=0.5, seed=s))(logits, []) for s in range(300)}
    assert seen <= nucleus and len(seen) > 100
