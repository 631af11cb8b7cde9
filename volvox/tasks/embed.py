"""Sentence embeddings from an encoder (BERT-style): tokenize, run, mean-pool, optionally L2-normalise."""

from __future__ import annotations

import numpy as np

from volvox.errors import TokenizerError
from volvox.ops.context import RunContext
from volvox.tasks.text import TextModel


class Encoder(TextModel):
    """An encoder graph (inputs tokens/positions/token_types, output ``hidden``) with its WordPiece tokenizer."""

    def hidden_states(self, ids) -> np.ndarray:
        """Last hidden states (len(ids), dim) of one token sequence."""
        self._check_open()
        ids = np.asarray(ids, dtype=np.int32).reshape(-1)  # (seq,)
        if ids.size == 0 or ids.size > self.config.context_length:
            raise TokenizerError(f"an encoder input needs 1..{self.config.context_length} tokens, got {ids.size}")
        feeds = {"tokens": ids, "positions": np.arange(ids.size, dtype=np.int32),
                 "token_types": np.zeros(ids.size, dtype=np.int32)}
        return self.executor.run(RunContext(), feeds)["hidden"]

    def embed(self, texts: str | list[str], normalize: bool = False) -> np.ndarray:
        """Embeddings (len(texts), dim) (or (dim,) for one string): the mean of each text's hidden states.

        Each text runs on its own (no padding), so the mean covers exactly the
        tokens an attention mask would keep, [CLS] and [SEP] included; texts longer
        than the model's context are truncated. ``normalize`` scales each to unit L2 norm.
        """
        single = isinstance(texts, str)
        if not single and (not isinstance(texts, (list, tuple)) or not all(isinstance(t, str) for t in texts)):
            raise TokenizerError("embed() needs a string or a list of strings")
        rows = []
        for text in [texts] if single else texts:
            ids = self.tokenizer.encode(text, max_length=self.config.context_length)
            rows.append(self.hidden_states(ids).astype(np.float64).mean(axis=0))  # (dim,)
        out = np.stack(rows) if rows else np.zeros((0, self.graph.specs["hidden"].shape[-1]))  # (n, dim)
        if normalize:
            out /= np.maximum(np.linalg.norm(out, axis=-1, keepdims=True), 1e-12)
        out = out.astype(np.float32)
        return out[0] if single else out
