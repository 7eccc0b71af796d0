"""A photo crop resized for a view, to the same pixels on every machine.

A trace stores view recipes, not pixels, and draws them again when opened, perhaps on another computer: the
resampling must not depend on the CPU. OpenCV's bicubic resize of 8-bit images does: its optimized (SIMD) code and its
plain code give different pixels (seen with OpenCV 5.1 on one machine by ``cv2.setUseOptimized``, and a trace's zoom
view drawn on a machine with AVX-512 differed from the same view drawn without it). So enlarging goes through
Pillow's bicubic filter, whose 8-bit resampling is fixed-point C with no CPU dispatch; shrinking stays with OpenCV's
area average (``INTER_AREA``), whose pixels are the same on both OpenCV paths (pinned by
``tests/test_resample.py``, which draws every view kind with OpenCV's optimized code on and off).
"""

from __future__ import annotations

import cv2
import numpy as np
from PIL import Image


def resize_photo(pixels: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``pixels`` resized to ``size``: shrunk by area averaging, else enlarged by bicubic interpolation.

    Args:
        pixels: (H, W, 3) uint8 RGB.
        size: (width, height) in pixels, each >= 1. Shrinking means neither side grows.

    Returns:
        (height, width, 3) uint8 RGB, writable, the same pixels on every CPU for the same input.

    Raises:
        ValueError: ``pixels`` is not (H, W, 3) uint8, or a side of ``size`` is below 1.
    """
    if pixels.dtype != np.uint8 or pixels.ndim != 3 or pixels.shape[2] != 3:
        raise ValueError(f"a photo crop must be (H, W, 3) uint8 RGB, got {pixels.shape} {pixels.dtype}")
    width, height = size
    if width < 1 or height < 1:
        raise ValueError(f"a resized photo must be at least 1 x 1 px, got {width} x {height}")
    if width <= pixels.shape[1] and height <= pixels.shape[0]:
        return cv2.resize(pixels, (width, height), interpolation=cv2.INTER_AREA)
    enlarged = Image.fromarray(np.ascontiguousarray(pixels)).resize((width, height), Image.Resampling.BICUBIC)
    return np.array(enlarged, dtype=np.uint8)  # a copy: callers draw on it (Pillow's own array is read-only)
