"""TextModel: what the models over token ids share (a tokenizer, and the dims their tasks need)."""

from __future__ import annotations

import threading

from volvox.formats.imported import Deferred, ModelDims
from volvox.model import Model


class TextModel(Model):
    """A graph over token ids with its tokenizer and dims (``metadata["dims"]``, a ModelDims)."""

    state_shape = None  # the SSM layers' state shapes (runtime/state_cache.StateShape) of a model that has them

    @classmethod
    def from_imported(cls, imported, **kw) -> "TextModel":
        """The model of an import whose metadata carries its dims and which brings its tokenizer."""
        dims = ModelDims.from_metadata(imported.metadata.get("dims"), imported.source)
        return cls(imported.graph, imported.weights, imported.metadata, imported.source, dims, imported.tokenizer,
                   closers=imported.closers, **kw)

    def __init__(self, graph, weights, metadata, source, config: ModelDims, tokenizer, **kw):
        super().__init__(graph, weights, metadata, source, **kw)
        self.config = config
        self._tokenizer = tokenizer
        self._tokenizer_lock = threading.Lock()

    @property
    def tokenizer(self):
        """The model's tokenizer (one an importer deferred is built here, on first use, once)."""
        if isinstance(self._tokenizer, Deferred):
            with self._tokenizer_lock:
                if isinstance(self._tokenizer, Deferred):
                    self._tokenizer = self._tokenizer.make()
        return self._tokenizer

    @tokenizer.setter
    def tokenizer(self, tokenizer) -> None:
        self._tokenizer = tokenizer
