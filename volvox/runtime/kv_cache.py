"""The KV cache: each layer's keys and values for every position up to the context limit."""

from __future__ import annotations

import mmap
from typing import Callable

import numpy as np

from volvox.errors import GenerationError
from volvox.ir.graph import Graph


def kv_window(graph: Graph) -> int:
    """The most positions any attention layer of ``graph`` looks back over when every one of them
    slides over a window (Mistral, Phi-3); 0 when one attends to the whole context (Gemma's global
    layers, LLaMA), so that the cache must keep every position."""
    windows = [int(node.params.get("window", 0)) for node in graph.nodes if node.op == "attention"]
    return max(windows) if windows and min(windows) > 0 else 0


class KVCache:
    """Keys and values per layer, each (n_kv_heads, max_tokens, head_dim) float32.

    The whole context is reserved at once in anonymous memory that the OS backs
    lazily with zeroed 4 KiB pages: memory grows with the tokens actually
    cached, nothing is ever copied or reallocated, and a decode step allocates
    nothing. (Not ``np.zeros``: numpy asks for 2 MiB huge pages on large arrays,
    and the first token written to each head's region would zero a whole one.)

    With a ``window`` (every layer sliding, see kv_window) the pages of positions
    that no later query can see are handed back to the OS as the sequence moves
    on, so the memory in use stays about one window per head however long the
    sequence grows; positions keep their absolute index (the kernels and the
    masks are those of the full cache) and read as zeros once forgotten.
    """

    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, max_tokens: int, window: int = 0):
        self.max_tokens, self.window = max_tokens, window
        shape = (n_kv_heads, max_tokens, head_dim)
        per_array = n_kv_heads * max_tokens * head_dim * 4
        self._memory = mmap.mmap(-1, max(1, 2 * n_layers * per_array))  # anonymous, zero-filled on first touch
        arrays = np.frombuffer(self._memory, np.float32, count=2 * n_layers * per_array // 4)
        arrays = arrays.reshape((2 * n_layers,) + shape)
        self.host_keys = list(arrays[:n_layers])    # n_layers x (n_kv_heads, max_tokens, head_dim)
        self.host_values = list(arrays[n_layers:])  # n_layers x (n_kv_heads, max_tokens, head_dim)
        self.pending_download: Callable[[], None] | None = None  # set while a device holds rows the host lacks
        self._row_bytes = head_dim * 4
        self._regions = 2 * n_layers * n_kv_heads  # (layer, k|v, head) row ranges, each max_tokens rows
        self.forgotten = 0  # positions below this have been handed back (window caches)

    def materialize(self) -> None:
        """Bring the rows only a device holds into the host arrays (an explicit download; nothing when
        the host is current)."""
        download, self.pending_download = self.pending_download, None
        if download is not None:
            download()

    @property
    def keys(self) -> list[np.ndarray]:
        """Per layer (n_kv_heads, max_tokens, head_dim) keys, current on the host."""
        if self.pending_download is not None:
            self.materialize()
        return self.host_keys

    @property
    def values(self) -> list[np.ndarray]:
        """Per layer (n_kv_heads, max_tokens, head_dim) values, current on the host."""
        if self.pending_download is not None:
            self.materialize()
        return self.host_values

    def reserve(self, n_tokens: int, start: int | None = None) -> None:
        """Check that ``n_tokens`` fit (GenerationError past the context limit); a window cache told the
        first position ``start`` of the coming run forgets the positions no query from there on sees."""
        if n_tokens > self.max_tokens:
            raise GenerationError(f"sequence of {n_tokens} tokens exceeds the context length of {self.max_tokens}")
        if self.window and start is not None:
            self._forget_before(start - self.window + 1)

    def _forget_before(self, position: int) -> None:
        """Hand the whole pages of every head's rows below ``position`` back to the OS (they read as zeros
        after), once at least a page per head has passed out of the window."""
        # the memory is shared anonymous (shmem): MADV_REMOVE frees it, MADV_DONTNEED would only unmap it
        if position - self.forgotten < max(1, mmap.PAGESIZE // self._row_bytes) or not hasattr(mmap, "MADV_REMOVE"):
            return
        region, page = self.max_tokens * self._row_bytes, mmap.PAGESIZE
        for r in range(self._regions):
            # the whole pages of this region below ``position`` not handed back yet (those below ``forgotten``)
            lo = max(-(-r * region // page) * page, (r * region + self.forgotten * self._row_bytes) // page * page)
            hi = (r * region + position * self._row_bytes) // page * page
            if hi > lo:
                self._memory.madvise(mmap.MADV_REMOVE, lo, hi - lo)
        self.forgotten = position

    def append(self, layer: int, start: int, k_new: np.ndarray, v_new: np.ndarray):
        """Write (n_kv_heads, seq, head_dim) keys/values at ``start``; return views of all cached ones."""
        end = start + k_new.shape[1]
        self.reserve(end, start)
        k, v = self.keys[layer], self.values[layer]
        k[:, start:end] = k_new
        v[:, start:end] = v_new
        return k[:, :end], v[:, :end]
