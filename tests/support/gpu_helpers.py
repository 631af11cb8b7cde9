"""Shared GPU test helpers: one device per backend per test session, skipped with the reason when unavailable."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest

from volvox._gpu.devices import GPU_BACKENDS, open_device
from volvox._gpu.backend import BackendUnavailable


@lru_cache(maxsize=None)
def _device_or_reason(name: str):
    try:
        return open_device(name), ""
    except BackendUnavailable as e:
        return None, str(e)


def device_or_none(name: str):
    """The session's device for backend ``name``, or None when it is unavailable."""
    return _device_or_reason(name)[0]


def device_or_skip(name: str):
    """The session's device for backend ``name``; pytest.skip with the driver's reason if there is none."""
    dev, reason = _device_or_reason(name)
    if dev is None:
        pytest.skip(f"{name} unavailable: {reason}")
    return dev


def nmse(got: np.ndarray, want: np.ndarray) -> float:
    """Normalised mean squared error, as ggml's test-backend-ops."""
    want = np.asarray(want, np.float64)
    return float(np.sum((np.asarray(got, np.float64) - want) ** 2) / max(np.sum(want ** 2), 1e-30))


BACKENDS = pytest.mark.parametrize("backend", GPU_BACKENDS)
