"""What every importer hands the loader: a graph, its weights, metadata and the tokenizer, and what
to close once the model is done with them. The loader picks the task from ``metadata["task"]``
(loader.TASKS); tasks that need more than the graph read it from the metadata (``dims``)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Callable

from volvox.errors import BlueprintError
from volvox.ir.graph import Graph


@dataclass
class Imported:
    """A model as read from its files, before any compilation."""

    graph: Graph
    weights: dict[str, Any]                 # weight name -> array or QuantTensor (often memory-mapped)
    metadata: dict                          # task, dims, labels, preprocessing, architecture, format ...
    source: str                             # the file or folder it came from (for messages)
    tokenizer: Any = None                   # generate / embed tasks: their tokenizer, or a Deferred one
    closers: list[Callable[[], None]] = field(default_factory=list)  # release mmaps once the model closes

    def close(self) -> None:
        """Release what the import opened (a failed load closes it; a model closes it later)."""
        for close in self.closers:
            close()


@dataclass(frozen=True)
class Deferred:
    """Something an importer builds only when a task first needs it: a tokenizer from a GGUF vocabulary
    (49k tokens and merges) is half of a small model's load, and running a graph never needs it."""

    make: Callable[[], Any]


ATTENTION_FREE_DIMS = ("n_kv_heads", "head_dim")  # 0 in a model without attention layers (Mamba)


@dataclass(frozen=True)
class ModelDims:
    """What a generate / embed task needs to know of a model beyond its graph (``metadata["dims"]``)."""

    n_layers: int
    n_kv_heads: int
    head_dim: int
    context_length: int
    vocab_size: int

    @classmethod
    def of(cls, config: Any) -> "ModelDims":
        """The dims of an architecture's hyperparameters (LlamaConfig, GPTConfig, BertConfig)."""
        return cls(**{f.name: int(getattr(config, f.name)) for f in fields(cls)})

    @classmethod
    def from_metadata(cls, md: Any, where: str) -> "ModelDims":
        """Parse ``metadata["dims"]``; BlueprintError naming the field at fault."""
        names = [f.name for f in fields(cls)]
        if not isinstance(md, dict) or set(md) != set(names):
            raise BlueprintError(f"{where}: metadata.dims must be an object with exactly {names}")
        for k in names:
            least = 0 if k in ATTENTION_FREE_DIMS else 1
            if not isinstance(md[k], int) or isinstance(md[k], bool) or md[k] < least:
                raise BlueprintError(f"{where}: metadata.dims.{k} must be an integer >= {least}, got {md[k]!r}")
        return cls(**md)
