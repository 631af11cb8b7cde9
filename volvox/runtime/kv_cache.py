"""The KV cache: each layer's keys and values for every position up to the context limit."""

from __future__ import annotations

import mmap

import numpy as np

from volvox.errors import GenerationError


class KVCache:
    """Keys and values per layer, each (n_kv_heads, max_tokens, head_dim) float32.

    The whole context is reserved at once in anonymous memory that the OS backs
    lazily with zeroed 4 KiB pages: memory grows with the tokens actually
    cached, nothing is ever copied or reallocated, and a decode step allocates
    nothing. (Not ``np.zeros``: numpy asks for 2 MiB huge pages on large arrays,
    and the first token written to each head's region would zero a whole one.)
    """

    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, max_tokens: int):
        self.max_tokens = max_tokens
        shape = (n_kv_heads, max_tokens, head_dim)
        per_array = n_kv_heads * max_tokens * head_dim * 4
        self._memory = mmap.mmap(-1, max(1, 2 * n_layers * per_array))  # anonymous, zero-filled on first touch
        arrays = np.frombuffer(self._memory, np.float32, count=2 * n_layers * per_array // 4)
        arrays = arrays.reshape((2 * n_layers,) + shape)
        self.keys = list(arrays[:n_layers])    # n_layers x (n_kv_heads, max_tokens, head_dim)
        self.values = list(arrays[n_layers:])  # n_layers x (n_kv_heads, max_tokens, head_dim)

    def reserve(self, n_tokens: int) -> None:
        """Check that ``n_tokens`` fit; GenerationError past the context limit."""
        if n_tokens > self.max_tokens:
            raise GenerationError(f"sequence of {n_tokens} tokens exceeds the context length of {self.max_tokens}")

    def append(self, layer: int, start: int, k_new: np.ndarray, v_new: np.ndarray):
        """Write (n_kv_heads, seq, head_dim) keys/values at ``start``; return views of all cached ones."""
        end = start + k_new.shape[1]
        self.reserve(end)
        k, v = self.keys[layer], self.values[layer]
        k[:, start:end] = k_new
        v[:, start:end] = v_new
        return k[:, :end], v[:, :end]
