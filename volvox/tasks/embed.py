"""Sentence embeddings from an encoder (BERT-style): tokenize, run, pool, optionally L2-normalise.

A plain encoder is mean-pooled over all its tokens. A sentence-transformers folder brings its own
pipeline (``metadata["sentence"]``, architectures/sentence_embedder.py): its pooling and Dense
layers are graph nodes ending in ``embedding``, and this task applies the rest as
sentence-transformers' ``encode`` does: truncation to ``max_seq_length`` tokens, named prompts
prepended to the text (left out of the pooling when the model says so), and Normalize.
"""

from __future__ import annotations

import numpy as np

from volvox.errors import TokenizerError
from volvox.ops.context import RunContext
from volvox.tasks.text import TextModel

PROMPT_TOKENS = "prompt_tokens"  # the graph input counting the tokens the pooling leaves out


class Encoder(TextModel):
    """An encoder graph (inputs tokens/positions/token_types, output ``hidden``, and ``embedding`` when it
    carries a sentence-transformers pipeline) with its WordPiece tokenizer."""

    @property
    def sentence(self) -> dict:
        """The sentence-transformers settings (pooling, normalize, max_seq_length, prompts), or {}."""
        return self.metadata.get("sentence") or {}

    @property
    def max_tokens(self) -> int:
        """The most tokens of one text the model sees (special tokens included); longer texts are truncated."""
        limit = self.sentence.get("max_seq_length") or self.config.context_length
        return min(int(limit), self.config.context_length)

    def _run(self, ids, prompt_tokens: int = 0) -> dict[str, np.ndarray]:
        self._check_open()
        ids = np.asarray(ids, dtype=np.int32).reshape(-1)  # (seq,)
        if ids.size == 0 or ids.size > self.config.context_length:
            raise TokenizerError(f"an encoder input needs 1..{self.config.context_length} tokens, got {ids.size}")
        feeds = {"tokens": ids, "positions": np.arange(ids.size, dtype=np.int32),
                 "token_types": np.zeros(ids.size, dtype=np.int32)}
        if any(spec.name == PROMPT_TOKENS for spec in self.graph.inputs):
            feeds[PROMPT_TOKENS] = np.array([min(prompt_tokens, ids.size - 1)], dtype=np.int32)
        return self.executor.run(RunContext(), feeds)

    def hidden_states(self, ids) -> np.ndarray:
        """Last hidden states (len(ids), dim) of one token sequence."""
        return self._run(ids)["hidden"]

    def _prompt(self, prompt_name: str | None, prompt: str | None) -> str:
        if prompt is not None and prompt_name is not None:
            raise TokenizerError("embed() takes prompt or prompt_name, not both")
        if prompt is not None:
            if not isinstance(prompt, str):
                raise TokenizerError(f"prompt must be a string, got {type(prompt).__name__}")
            return prompt
        prompts = self.sentence.get("prompts") or {}
        name = prompt_name if prompt_name is not None else self.sentence.get("default_prompt_name")
        if name is None:
            return ""
        if name not in prompts:
            raise TokenizerError(f"unknown prompt_name {name!r} (this model has: {sorted(prompts) or 'none'})")
        return prompts[name]

    def embed(self, texts: str | list[str], normalize: bool | None = None, prompt_name: str | None = None,
              prompt: str | None = None) -> np.ndarray:
        """Embeddings (len(texts), width) (or (width,) for one string).

        Each text runs on its own (no padding), truncated to ``max_tokens`` tokens. A plain encoder
        takes the mean of all hidden states, [CLS] and [SEP] included; a sentence-transformers model
        its own pooling and Dense layers. ``prompt`` (or the model's ``prompt_name`` prompt, or its
        default one) is prepended to every text. ``normalize`` scales each embedding to unit L2 norm;
        None keeps the model's choice (a sentence-transformers Normalize module, else off).
        """
        single = isinstance(texts, str)
        if not single and (not isinstance(texts, (list, tuple)) or not all(isinstance(t, str) for t in texts)):
            raise TokenizerError("embed() needs a string or a list of strings")
        prefix = self._prompt(prompt_name, prompt)
        # sentence-transformers counts a prompt as its tokens with [CLS] (all but the closing [SEP])
        skip = len(self.tokenizer.encode(prefix)) - 1 if prefix and not self.sentence.get("include_prompt", True) else 0
        rows = []
        for text in [texts] if single else texts:
            outputs = self._run(self.tokenizer.encode(prefix + text, max_length=self.max_tokens), skip)
            if "embedding" in outputs:
                rows.append(outputs["embedding"][0].astype(np.float64))      # (width,)
            else:
                rows.append(outputs["hidden"].astype(np.float64).mean(axis=0))  # (dim,)
        width = self.graph.specs["embedding" if "embedding" in self.graph.outputs else "hidden"].shape[-1]
        out = np.stack(rows) if rows else np.zeros((0, width))  # (n, width)
        if self.sentence.get("normalize", False) if normalize is None else normalize:
            out /= np.maximum(np.linalg.norm(out, axis=-1, keepdims=True), 1e-12)
        out = out.astype(np.float32)
        return out[0] if single else out
