"""Choosing the next token from logits: greedy, temperature, top-k, top-p, repetition penalty."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from volvox.errors import GenerationError


@dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens; temperature 0 means greedy (argmax)."""

    temperature: float = 0.0
    top_k: int = 0              # 0: no top-k cut
    top_p: float = 1.0          # 1: no nucleus cut
    repetition_penalty: float = 1.0
    seed: int | None = None

    def __post_init__(self):
        if not (self.temperature >= 0 and np.isfinite(self.temperature)):
            raise GenerationError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if int(self.top_k) != self.top_k or self.top_k < 0:
            raise GenerationError(f"top_k must be an integer >= 0, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise GenerationError(f"top_p must be in (0, 1], got {self.top_p}")
        if not (self.repetition_penalty > 0 and np.isfinite(self.repetition_penalty)):
            raise GenerationError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")


FIRST_CANDIDATES = 64  # a nucleus search sorts this many of the best tokens first, then 4x as many ...


def best_first(z: np.ndarray, k: int) -> np.ndarray:
    """The ids of the ``k`` largest of ``z``, largest first, ties by lower id: the first ``k`` of a stable
    descending sort, found by a partition (O(vocab)) and a sort of the few, not a sort of the vocabulary."""
    if k >= z.size:
        return np.argsort(-z, kind="stable")
    cut = z[np.argpartition(-z, k - 1)[k - 1]]      # the k-th largest value
    cand = np.flatnonzero(z >= cut)                  # (>= k,) every id that may be among the k
    return cand[np.lexsort((cand, -z[cand]))][:k]   # by value, then id


class Sampler:
    """Stateful token picker (owns the random generator seeded by ``params.seed``).

    Per token it does O(vocab) vector work at most (a scaled copy, an exp, a partition): the
    candidates are sorted only as far as top-k / top-p need them, and pure temperature sampling
    draws from the whole distribution unsorted."""

    def __init__(self, params: SamplingParams):
        self.params = params
        self.rng = np.random.default_rng(params.seed)
        # the device generator's key: the seed itself, so a seeded GPU run is reproducible
        self.device_seed = (int(params.seed) if params.seed is not None
                            else int(self.rng.integers(0, 2 ** 63))) & (2 ** 64 - 1)
        self.device_draws = 0  # picks handed to the device so far: its generator's counter

    def device_pick(self):
        """The next token's pick for a GPU forward (runtime.gpu_executor.TokenPick), or None when it
        must be made here: a repetition penalty needs the history, which stays on the host.

        Greedy picks are the argmax, as here. Seeded draws come from a counter-based generator of
        (seed, draw number), reproducible for a seed but not the same numbers as this host sampler."""
        p = self.params
        if p.repetition_penalty != 1.0:
            return None
        from volvox.runtime.gpu_executor import TokenPick  # only GPU runs need it
        pick = TokenPick(p.temperature, int(p.top_k), p.top_p, self.device_seed, self.device_draws)
        self.device_draws += 1
        return pick

    def __call__(self, logits: np.ndarray, history: list[int]) -> int:
        """Next token id from ``logits`` (vocab,) given the ids seen so far."""
        p = self.params
        if p.repetition_penalty != 1.0 and history:
            logits = logits.copy()
            seen = np.unique(np.asarray(history, dtype=np.int64))
            vals = logits[seen]
            logits[seen] = np.where(vals > 0, vals / p.repetition_penalty, vals * p.repetition_penalty)
        if p.temperature == 0.0:
            return int(np.argmax(logits))
        z = logits.astype(np.float64) / p.temperature  # (vocab,)
        if p.top_k:
            order = best_first(z, p.top_k)  # candidate ids, best first
            probs = np.exp(z[order] - z[order[0]])
            probs /= probs.sum()
        elif p.top_p < 1.0:  # the nucleus of the whole distribution: sort only until it is found
            weights = np.exp(z - z.max())  # (vocab,)
            total, k = weights.sum(), FIRST_CANDIDATES
            while True:
                order = best_first(z, k)
                probs = weights[order] / total
                if k >= z.size or probs.sum() >= p.top_p:
                    break
                k *= 4
        else:  # the whole distribution, in id order: nothing to sort
            return self._draw(np.exp(z - z.max()))
        if p.top_p < 1.0:
            keep = int(np.searchsorted(np.cumsum(probs), p.top_p)) + 1  # smallest prefix with mass >= top_p
            order, probs = order[:keep], probs[:keep]
        return int(order[self._draw(probs)])

    def _draw(self, weights: np.ndarray) -> int:
        """An index drawn with probability proportional to ``weights`` (inverse CDF, one uniform)."""
        cdf = np.cumsum(weights)  # (n,)
        return min(int(np.searchsorted(cdf, self.rng.random() * cdf[-1], side="right")), weights.size - 1)
