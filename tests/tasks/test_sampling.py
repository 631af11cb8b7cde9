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
