"""How legible the numbers of an overlay are to the model: the size the VLM sees an image at, and the share of
labels that overlap no other label and lie inside the image (``legible_share``).

``PixelBounds`` are the VLM's bounds on an image's pixel count (``vlm.image_fit.ImageLimits.pixel_bounds`` gives
those of a backend: the default, a user's ``--max-pixels``, a server's or ZeroGPU's plan); every view that sizes its
labels for the model takes them, and its recipe records them so a saved trace draws the view again identically.
``seen_scale`` repeats the scaling of ``vlm.image_fit.bounded_size`` (imaging sits below ``vlm`` and cannot import
it; a test checks that the two agree for the default and for other bounds).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..limits import DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS


@dataclass(frozen=True)
class PixelBounds:
    """A VLM's bounds on an image's pixel count after its processor's resize (aspect kept).

    Attributes:
        min_pixels / max_pixels: ints, pixels (width x height); defaults from ``limits``.

    Raises:
        ValueError: a bound that is not a whole number of at least 1, or ``min_pixels`` above ``max_pixels``.
    """

    min_pixels: int = DEFAULT_MIN_PIXELS
    max_pixels: int = DEFAULT_MAX_PIXELS

    def __post_init__(self) -> None:
        for value in (self.min_pixels, self.max_pixels):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"pixel bounds must be whole numbers of at least 1, got {self.min_pixels!r}, "
                                 f"{self.max_pixels!r}")
        if self.min_pixels > self.max_pixels:
            raise ValueError(f"min_pixels ({self.min_pixels}) is larger than max_pixels ({self.max_pixels})")


DEFAULT_BOUNDS = PixelBounds()


def seen_scale(width: int, height: int, bounds: PixelBounds = DEFAULT_BOUNDS) -> float:
    """The factor by which a Qwen-VL processor with these pixel bounds resizes a ``width`` x ``height`` image
    (its pixel count scaled into ``[min_pixels, max_pixels]``, aspect kept): 1.0 when it already lies within."""
    pixels = max(1, int(width) * int(height))
    if pixels > bounds.max_pixels:
        return math.sqrt(bounds.max_pixels / pixels)
    if pixels < bounds.min_pixels:
        return math.sqrt(bounds.min_pixels / pixels)
    return 1.0


def legible_share(boxes: Sequence[tuple[int, int, int, int] | None], width: int, height: int) -> float:
    """The share of labels that overlap no other label (by a positive area) and lie wholly inside the
    ``width`` x ``height`` image; ``None`` entries (empty masks, no label) are not counted. 1.0 for no label.

    Overlap and containment do not change when the image is resized, so boxes at the photo's size give the
    figure at the VLM's input size too; what resizing changes is the digits' height (``seen_scale``).

    Args:
        boxes: ``(x0, y0, x1, y1)`` px, x1/y1 exclusive.
    """
    drawn = np.array([b for b in boxes if b is not None], dtype=np.int64).reshape(-1, 4)
    if len(drawn) == 0:
        return 1.0
    x0, y0, x1, y1 = drawn.T
    overlap = ((x0[:, None] < x1[None]) & (x0[None] < x1[:, None]) & (y0[:, None] < y1[None]) & (y0[None] < y1[:, None]))
    np.fill_diagonal(overlap, False)
    inside = (x0 >= 0) & (y0 >= 0) & (x1 <= width) & (y1 <= height)
    return float(np.mean(inside & ~overlap.any(axis=1)))
