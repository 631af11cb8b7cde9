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


class Sampler:
    """Stateful token picker (owns the random generator seeded by ``params.seed``)."""

    def __init__(self, params: SamplingParams):
        self.params = params
        self.rng = np.random.default_rng(params.seed)

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
        z = logits.astype(np.float64) / p.temperature
        order = np.argsort(-z, kind="stable")  # candidate ids, best first
        if p.top_k:
            order = order[: p.top_k]
        probs = np.exp(z[order] - z[order[0]])
        probs /= probs.sum()
        if p.top_p < 1.0:
            keep = int(np.searchsorted(np.cumsum(probs), p.top_p)) + 1  # smallest prefix with mass >= top_p
            order, probs = order[:keep], probs[:keep] / probs[:keep].sum()
        return int(order[self.rng.choice(len(order), p=probs)])
