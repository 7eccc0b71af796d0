"""How legible the numbers of an overlay are to the model: the size the VLM sees an image at, and the share of
labels that overlap no other label and lie inside the image (``legible_share``).

``seen_size`` repeats, for the default pixel bounds of ``limits``, the scaling of ``vlm.image_fit.bounded_size``
(imaging sits below ``vlm`` and cannot import it; a test checks that the two agree).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..limits import DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS


def seen_scale(width: int, height: int, min_pixels: int = DEFAULT_MIN_PIXELS,
               max_pixels: int = DEFAULT_MAX_PIXELS) -> float:
    """The factor by which a Qwen-VL processor with these pixel bounds resizes a ``width`` x ``height`` image
    (its pixel count scaled into ``[min_pixels, max_pixels]``, aspect kept): 1.0 when it already lies within."""
    pixels = max(1, int(width) * int(height))
    if pixels > max_pixels:
        return math.sqrt(max_pixels / pixels)
    if pixels < min_pixels:
        return math.sqrt(min_pixels / pixels)
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
