"""Views are drawn to the same pixels on every CPU: a trace draws its views again when opened, maybe elsewhere.

OpenCV picks optimized (SIMD) code by the CPU it runs on; ``cv2.setUseOptimized(False)`` runs its plain code
instead, which stands in here for "another CPU". Every view kind is drawn both ways, from a photo small enough that
each view enlarges it and one large enough that each shrinks it, and must come out the same. Drawing the zoom view
with OpenCV's bicubic resize (renderer 4) makes this test fail.
"""

from __future__ import annotations

from collections.abc import Iterator

import cv2
import numpy as np
import pytest
from conftest import photo
from PIL import Image

from sam3_agent.images import image_digest
from sam3_agent.imaging.postprocess import boxes_from_masks
from sam3_agent.imaging.resample import resize_photo
from sam3_agent.imaging.tiles import TILE_PLACES
from sam3_agent.imaging.views import MaskView
from sam3_agent.mask_set import Masks


def rectangles(width: int, height: int) -> Masks:
    """Five rectangles at fixed fractions of the photo (a thin one and a large one with a hole among them)."""
    masks = np.zeros((5, height, width), dtype=bool)
    for k, (x0, y0, x1, y1) in enumerate([(0.1, 0.1, 0.3, 0.4), (0.5, 0.2, 0.9, 0.8), (0.05, 0.7, 0.95, 0.75),
                                          (0.35, 0.45, 0.45, 0.6), (0.6, 0.05, 0.65, 0.3)]):
        masks[k, round(y0 * height):round(y1 * height), round(x0 * width):round(x1 * width)] = True
    masks[1, round(0.4 * height):round(0.5 * height), round(0.6 * width):round(0.7 * width)] = False
    return Masks(masks, np.linspace(0.9, 0.5, 5, dtype=np.float32), boxes_from_masks(masks), "thing")


def every_view(image: Image.Image) -> Iterator[tuple[str, MaskView]]:
    masks = rectangles(image.width, image.height)
    yield "overlay", MaskView("overlay", image, masks)
    for tile in range(len(TILE_PLACES)):
        yield f"tile {tile}", MaskView("tile", image, masks, tile=tile)
    for kind in ("mask", "zoom", "locate", "closeup"):
        for index in range(len(masks)):
            yield f"{kind} {index}", MaskView(kind, image, masks, index)
    yield "group", MaskView("group", image, masks, indices=(0, 2, 4))


@pytest.fixture
def opencv_paths() -> Iterator[None]:
    yield
    cv2.setUseOptimized(True)


@pytest.mark.parametrize("size", [(120, 80), (2400, 1600)], ids=["enlarged", "shrunk"])
def test_every_view_kind_is_drawn_to_the_same_pixels_by_opencvs_optimized_and_plain_code(size, opencv_paths):
    image = photo("coffee.jpg").resize(size, Image.Resampling.BILINEAR)
    drawn = {}
    for optimized in (True, False):
        cv2.setUseOptimized(optimized)
        drawn[optimized] = {name: image_digest(view.render()) for name, view in every_view(image)}
    assert len(drawn[True]) == 1 + 4 + 4 * 5 + 1
    assert drawn[True] == drawn[False]


def test_a_crop_is_shrunk_by_area_and_enlarged_by_pillows_bicubic():
    pixels = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3) * 3
    shrunk = resize_photo(pixels, (3, 2))
    # each shrunk pixel is the mean of a 2 x 2 block: the top-left one of (0, 9, 54, 63) in red, 31.5, rounded up
    assert shrunk.shape == (2, 3, 3) and shrunk[0, 0].tolist() == [32, 35, 38]
    assert np.array_equal(shrunk, cv2.resize(pixels, (3, 2), interpolation=cv2.INTER_AREA))
    enlarged = resize_photo(pixels, (12, 8))
    assert enlarged.shape == (8, 12, 3) and enlarged.dtype == np.uint8 and enlarged.flags.writeable
    assert np.array_equal(enlarged, np.asarray(Image.fromarray(pixels).resize((12, 8), Image.Resampling.BICUBIC)))
    assert np.array_equal(resize_photo(pixels, (6, 4)), pixels)  # its own size: unchanged


@pytest.mark.parametrize(("pixels", "size", "message"), [
    (np.zeros((4, 4), dtype=np.uint8), (2, 2), r"must be \(H, W, 3\) uint8 RGB, got \(4, 4\) uint8"),
    (np.zeros((4, 4, 3), dtype=np.float32), (2, 2), r"got \(4, 4, 3\) float32"),
    (np.zeros((4, 4, 3), dtype=np.uint8), (0, 2), r"at least 1 x 1 px, got 0 x 2"),
])
def test_a_crop_that_cannot_be_resized_is_refused_with_what_was_wrong(pixels, size, message):
    with pytest.raises(ValueError, match=message):
        resize_photo(pixels, size)
