"""Images carrying an EXIF orientation are loaded upright by the path classify / detect / ctc use
(volvox.tasks.image.load_image / preprocess), from a file and from an opened PIL image.

The expected pixels come from the EXIF definition of each orientation (where the stored image's
row 0 and column 0 are displayed), written as numpy flips / rotations, never from Pillow's
``exif_transpose`` (which volvox uses).
"""

import numpy as np
import pytest

from volvox.tasks.image import load_image, preprocess

Image = pytest.importorskip("PIL.Image")

ORIENTATION = 0x0112
UPRIGHT = {  # orientation -> stored (H, W, 3) to displayed
    1: lambda a: a,
    2: lambda a: a[:, ::-1],                      # row 0 top, column 0 right: mirrored
    3: lambda a: a[::-1, ::-1],                   # row 0 bottom, column 0 right: rotated 180
    4: lambda a: a[::-1],                         # row 0 bottom, column 0 left: flipped
    5: lambda a: a.transpose(1, 0, 2),            # row 0 left, column 0 top: transposed
    6: lambda a: np.rot90(a, -1),                 # row 0 right, column 0 top: rotate 90 clockwise
    7: lambda a: a[::-1, ::-1].transpose(1, 0, 2),  # row 0 right, column 0 bottom: transverse
    8: lambda a: np.rot90(a, 1),                  # row 0 left, column 0 bottom: rotate 90 counter-clockwise
}


def save_with_orientation(path, pixels: np.ndarray, orientation: int, **kw):
    exif = Image.Exif()
    exif[ORIENTATION] = orientation
    Image.fromarray(pixels).save(path, exif=exif, **kw)
    return path


@pytest.fixture(scope="module")
def stored():
    return np.random.default_rng(3).integers(0, 256, (5, 8, 3), dtype=np.uint8)  # (H, W, 3), not square


@pytest.mark.parametrize("orientation", sorted(UPRIGHT))
def test_png_orientation_is_applied(tmp_path, stored, orientation):
    path = save_with_orientation(tmp_path / f"o{orientation}.png", stored, orientation)
    want = UPRIGHT[orientation](stored)
    np.testing.assert_array_equal(load_image(path), want)
    np.testing.assert_array_equal(load_image(str(path)), want)
    with Image.open(path) as im:
        np.testing.assert_array_equal(load_image(im), want)


def test_jpeg_rotate_90_is_loaded_upright(tmp_path, stored):
    """Orientation 6 on a JPEG: the decoded pixels rotated 90 degrees clockwise, through preprocess too."""
    path = save_with_orientation(tmp_path / "phone.jpg", stored, 6, quality=95)
    with Image.open(path) as im:
        assert im.getexif()[ORIENTATION] == 6
        raw = np.asarray(im.convert("RGB"))            # (5, 8, 3) as stored, no orientation applied
    upright = np.rot90(raw, -1)                         # (8, 5, 3)
    np.testing.assert_array_equal(load_image(path), upright)
    spec = {"size": [5, 8], "scale": 1 / 255}
    prepared = preprocess(path, spec)
    assert prepared.orig_size == (5, 8)                 # (width, height) after orientation
    np.testing.assert_array_equal(prepared.tensor, preprocess(np.ascontiguousarray(upright), spec).tensor)
