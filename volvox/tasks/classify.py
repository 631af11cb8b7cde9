"""Image classification: preprocess, run, top-k labels with probabilities."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from volvox.errors import BlueprintError
from volvox.tasks.image import preprocess
from volvox.model import Model


@dataclass(frozen=True)
class Label:
    """One class: index, name and probability."""

    index: int
    label: str
    score: float


class Classifier(Model):
    """A classification model: ``classify(image, top_k=5)`` -> labels, most likely first.

    metadata: preprocess (see volvox.tasks.image), labels, output (graph output name; default the
    first), output_kind "probabilities" (default) or "logits" (softmax applied here).
    """

    def scores(self, image) -> np.ndarray:
        """Class probabilities (n_classes,) for one image."""
        prepared = preprocess(image, self.metadata["preprocess"])
        out = self.run({self.graph.inputs[0].name: prepared.tensor})[self.metadata.get("output", self.graph.outputs[0])]
        p = out.reshape(-1).astype(np.float64)  # (n_classes,)
        if self.metadata.get("output_kind", "probabilities") == "logits":
            e = np.exp(p - p.max())
            p = e / e.sum()
        return p

    def classify(self, image, top_k: int = 5) -> list[Label]:
        """The ``top_k`` most likely labels of ``image`` (path, PIL image or RGB array)."""
        p = self.scores(image)
        labels = self.metadata.get("labels") or [str(i) for i in range(p.size)]
        if len(labels) != p.size:
            raise BlueprintError(f"{self.source}: metadata has {len(labels)} labels, the model outputs {p.size} classes")
        order = np.argsort(-p, kind="stable")[:max(int(top_k), 1)]
        return [Label(int(i), labels[i], float(p[i])) for i in order]
