"""What a stateful op reads of the run it is part of: the KV cache, the position of the first new
token and which output rows to keep (RunContext), or, for ragged batches, one such context per
sequence (BatchContext).

Ragged batching: several sequences' new tokens packed as the rows of one forward pass.
Row-wise ops (embedding, norms, linear, activations) see one (rows, dim) matrix, so a
decode step of B sequences multiplies every weight once for all of them; the few
stateful ops (attention, output_rows) split the rows back per sequence and use
that sequence's own RunContext (its KV cache and position). No padding, no mask.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

@dataclass
class RunContext:
    """State that stateful ops read: the KV and state caches, tokens already cached, which output rows to keep."""

    kv: Any = None          # KVCache or None (a model without attention layers has none)
    state: Any = None       # StateCache of the SSM layers (runtime/state_cache.py) or None
    pos: int = 0
    output_rows: str = "all"

@dataclass
class BatchContext:
    """The run context of a packed forward pass: (context, row count) per sequence, in row order."""

    parts: list[tuple[object, int]]

    def map_rows(self, fn: Callable, params: dict, *arrays: np.ndarray) -> np.ndarray:
        """Apply ``fn(ctx, params, *row_slices)`` per sequence; concatenate the results in order."""
        out, start = [], 0
        for ctx, n in self.parts:
            out.append(fn(ctx, params, *(a[start:start + n] for a in arrays)))
            start += n
        return np.concatenate(out)
