"""Learning-rate schedules: the factor the base learning rate is multiplied by at each optimiser step.

``schedule(step)`` takes the 0-based index of the optimiser step about to run, as torch's
LambdaLR does. Warmup rises linearly as (step + 1) / warmup, so the first step already moves
(torch: ``LinearLR(start_factor=1/warmup, total_iters=warmup-1)``); the decay then runs from 1 to
``min_ratio`` over the remaining steps, by a half cosine (``CosineAnnealingLR``) or a straight line
(``LinearLR``), and stays at ``min_ratio`` past the end.
"""

from __future__ import annotations

import math
from typing import Callable

from volvox.errors import VolvoxError

Schedule = Callable[[int], float]
SCHEDULES = ("constant", "cosine", "linear")


def make_schedule(kind: str, total_steps: int, warmup_steps: int = 0, min_ratio: float = 0.0) -> Schedule:
    """The factor function of ``kind`` ("constant", "cosine", "linear") over ``total_steps`` steps, the
    first ``warmup_steps`` of them warming up (constant: warmup then flat)."""
    if kind not in SCHEDULES:
        raise VolvoxError(f"unknown schedule {kind!r} (choose from {', '.join(SCHEDULES)})")
    if warmup_steps < 0 or total_steps < 1 or warmup_steps > total_steps or not 0.0 <= min_ratio <= 1.0:
        raise VolvoxError(f"bad schedule: total_steps={total_steps} warmup_steps={warmup_steps} min_ratio={min_ratio}")
    decay_steps = max(total_steps - warmup_steps, 1)

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        t = min(step - warmup_steps, decay_steps)
        if kind == "cosine":
            return min_ratio + (1.0 - min_ratio) * (1.0 + math.cos(math.pi * t / decay_steps)) / 2.0
        if kind == "linear":
            return 1.0 + (min_ratio - 1.0) * t / decay_steps
        return 1.0

    return factor
