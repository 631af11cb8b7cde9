"""Images in, model tensors out: load (path, PIL image or array), EXIF orientation, resize,
normalisation from a model's ``metadata.preprocess``.

``preprocess`` keys (all optional except size):
  size [w, h]; resize "stretch" (default) | "letterbox" (keep aspect, centre, pad black) |
  "height" (PaddleOCR's recogniser input: scale to height h keeping the aspect ratio; the
  tensor is max(w, h * aspect) wide and the image is padded on the right with 0 after
  normalisation); channel_order "rgb" | "bgr"; scale (multiplied first), mean, std
  (per channel, after scale); layout "nhwc" (default) | "nchw".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from volvox.errors import VolvoxError


class ImageError(VolvoxError):
    """An image could not be read, or is not an image volvox can use."""


@dataclass(frozen=True)
class Prepared:
    """A model-ready batch and how it maps back to the original image."""

    tensor: np.ndarray         # (1, h, w, 3) or (1, 3, h, w) float32
    orig_size: tuple[int, int]  # (width, height) after EXIF orientation
    padding: tuple[float, float, float, float]  # letterbox (left, top, right, bottom) as fractions of the tensor


def load_image(image) -> np.ndarray:
    """RGB uint8 (H, W, 3) from a path, a PIL image or an array (H, W), (H, W, 3) or (H, W, 4)."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    if isinstance(image, (str, Path)):
        try:
            with Image.open(image) as im:
                im = ImageOps.exif_transpose(im)
                return np.asarray(im.convert("RGB"))
        except FileNotFoundError:
            raise ImageError(f"{image}: no such image file") from None
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
            raise ImageError(f"{image}: not an image Pillow can read ({e})") from None
        except Image.DecompressionBombError as e:  # declared size over Pillow's MAX_IMAGE_PIXELS
            raise ImageError(f"{image}: refused, the declared size is a decompression bomb ({e})") from None
    if isinstance(image, Image.Image):
        return np.asarray(ImageOps.exif_transpose(image).convert("RGB"))
    if isinstance(image, np.ndarray):
        if image.ndim == 2:
            image = np.repeat(image[:, :, None], 3, axis=2)
        if image.ndim != 3 or image.shape[2] not in (3, 4) or image.shape[0] == 0 or image.shape[1] == 0:
            raise ImageError(f"image array must be (H, W), (H, W, 3) or (H, W, 4), got shape {image.shape}")
        if image.dtype != np.uint8:
            raise ImageError(f"image array must be uint8 RGB, got dtype {image.dtype}")
        return np.ascontiguousarray(image[:, :, :3])
    raise ImageError(f"image must be a path, a PIL.Image or a numpy array, got {type(image).__name__}")


def resize(rgb: np.ndarray, width: int, height: int) -> np.ndarray:
    """Bilinear resize (Pillow) of uint8 RGB to (height, width, 3)."""
    from PIL import Image

    if rgb.shape[1] == width and rgb.shape[0] == height:
        return rgb
    return np.asarray(Image.fromarray(rgb).resize((width, height), Image.BILINEAR))


def _normalise(x: np.ndarray, spec: dict) -> np.ndarray:
    """uint8 (h, w, 3) -> float32 with channel order, scale, mean and std applied."""
    if spec.get("channel_order", "rgb") == "bgr":
        x = x[:, :, ::-1]
    y = x.astype(np.float32) * np.float32(spec.get("scale", 1.0))
    y -= np.asarray(spec.get("mean", (0.0, 0.0, 0.0)), np.float32)
    y /= np.asarray(spec.get("std", (1.0, 1.0, 1.0)), np.float32)
    return y


def preprocess(image, spec: dict) -> Prepared:
    """Load ``image`` and turn it into the model input ``spec`` (metadata.preprocess) describes."""
    rgb = load_image(image)
    h0, w0 = rgb.shape[:2]
    w, h = (int(v) for v in spec["size"])
    mode = spec.get("resize", "stretch")
    padding = (0.0, 0.0, 0.0, 0.0)
    if mode == "stretch":
        x = _normalise(resize(rgb, w, h), spec)
    elif mode == "letterbox":
        s = min(w / w0, h / h0)
        rw, rh = max(1, round(w0 * s)), max(1, round(h0 * s))
        left, top = (w - rw) // 2, (h - rh) // 2
        canvas = np.zeros((h, w, 3), np.uint8)  # (h, w, 3) black border
        canvas[top:top + rh, left:left + rw] = resize(rgb, rw, rh)
        x = _normalise(canvas, spec)
        padding = (left / w, top / h, (w - rw - left) / w, (h - rh - top) / h)
    elif mode == "height":
        w = max(w, int(h * w0 / h0))
        rw = min(w, int(math.ceil(h * w0 / h0)))
        x = np.zeros((h, w, 3), np.float32)  # (h, w, 3) zero padding after normalisation
        x[:, :rw] = _normalise(resize(rgb, rw, h), spec)
    else:
        raise ImageError(f"preprocess.resize must be stretch, letterbox or height, got {mode!r}")
    if spec.get("layout", "nhwc") == "nchw":
        x = x.transpose(2, 0, 1)
    return Prepared(np.ascontiguousarray(x[None]), (w0, h0), padding)
