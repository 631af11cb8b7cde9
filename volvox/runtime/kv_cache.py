"""The KV cache: each layer's keys and values, grown by doubling up to the context limit."""

from __future__ import annotations

import numpy as np

from ..errors import GenerationError


class KVCache:
    """Keys and values per layer, each (n_kv_heads, capacity, head_dim) float32.

    Capacity starts small and doubles (up to ``max_tokens``) when a run needs
    more, so steady-state decode allocates nothing.
    """

    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, max_tokens: int, initial: int = 256):
        self.n_layers, self.n_kv_heads, self.head_dim = n_layers, n_kv_heads, head_dim
        self.max_tokens = max_tokens
        self.capacity = 0
        self.keys: list[np.ndarray] = []    # n_layers x (n_kv_heads, capacity, head_dim)
        self.values: list[np.ndarray] = []  # n_layers x (n_kv_heads, capacity, head_dim)
        self.reserve(min(initial, max_tokens))

    def reserve(self, n_tokens: int) -> None:
        """Make room for ``n_tokens`` cached tokens; GenerationError past the context limit."""
        if n_tokens > self.max_tokens:
            raise GenerationError(f"sequence of {n_tokens} tokens exceeds the context length of {self.max_tokens}")
        if n_tokens <= self.capacity:
            return
        new_cap = min(self.max_tokens, max(n_tokens, 2 * self.capacity))
        shape = (self.n_kv_heads, new_cap, self.head_dim)
        old_k, old_v, n = self.keys, self.values, self.capacity
        self.keys = [np.zeros(shape, np.float32) for _ in range(self.n_layers)]
        self.values = [np.zeros(shape, np.float32) for _ in range(self.n_layers)]
        for layer in range(len(old_k)):
            self.keys[layer][:, :n] = old_k[layer]
            self.values[layer][:, :n] = old_v[layer]
        self.capacity = new_cap

    def append(self, layer: int, start: int, k_new: np.ndarray, v_new: np.ndarray):
        """Write (n_kv_heads, seq, head_dim) keys/values at ``start``; return views of all cached ones."""
        end = start + k_new.shape[1]
        if end > self.capacity:
            self.reserve(end)
        k, v = self.keys[layer], self.values[layer]
        k[:, start:end] = k_new
        v[:, start:end] = v_new
        return k[:, :end], v[:, :end]

    @property
    def nbytes(self) -> int:
        """Bytes held by the cache at its current capacity."""
        return 2 * self.n_layers * self.n_kv_heads * self.capacity * self.head_dim * 4
