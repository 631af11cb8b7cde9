"""Text-line recognition with CTC: preprocess, run, greedy decode with per-character scores.

metadata.ctc: charset (a list) or charset_metadata_key (a key of the ONNX metadata_props
holding one character per line, as PaddleOCR exports do), blank (index of the blank
class, default 0, with the charset placed after it), append_space (add " " at the end).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from volvox.errors import BlueprintError
from volvox.tasks.image import preprocess
from volvox.model import Model


@dataclass(frozen=True)
class TextLine:
    """A recognised line: text, one score per character, and their mean."""

    text: str
    char_scores: tuple[float, ...]

    @property
    def score(self) -> float:
        """Mean character score (0 for an empty line)."""
        return float(np.mean(self.char_scores)) if self.char_scores else 0.0


def greedy_ctc(probs: np.ndarray, charset: list[str], blank: int = 0) -> TextLine:
    """Best class per time step, repeats merged, blanks dropped; probs (T, n_classes)."""
    best = probs.argmax(axis=-1)                         # (T,)
    best_p = probs[np.arange(len(best)), best]           # (T,)
    keep = best != blank
    keep[1:] &= best[1:] != best[:-1]
    return TextLine("".join(charset[i] for i in best[keep]), tuple(float(p) for p in best_p[keep]))


class TextRecognizer(Model):
    """A CTC text-line recogniser: ``ctc(image)`` -> TextLine."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        cfg = self.metadata.get("ctc", {})
        chars = cfg.get("charset")
        if chars is None:
            key = cfg.get("charset_metadata_key", "character")
            chars = self.metadata.get("onnx_metadata", {}).get(key, "").splitlines()
        chars = list(chars) + ([" "] if cfg.get("append_space", False) else [])
        self.blank = int(cfg.get("blank", 0))
        self.charset = chars[:self.blank] + ["<blank>"] + chars[self.blank:]
        n = self.graph.specs[self.graph.outputs[0]].shape[-1]
        if len(self.charset) != n:
            raise BlueprintError(f"{self.source}: {len(self.charset)} CTC classes (charset + blank), the model outputs {n}")

    def probabilities(self, image) -> np.ndarray:
        """Per-time-step class probabilities (T, n_classes) of one text-line image."""
        x = preprocess(image, self.metadata["preprocess"]).tensor
        return self.run({self.graph.inputs[0].name: x})[self.graph.outputs[0]][0]

    def ctc(self, image) -> TextLine:
        """The text of a one-line image (path, PIL image or RGB array), greedy CTC decoding."""
        return greedy_ctc(self.probabilities(image), self.charset, self.blank)
