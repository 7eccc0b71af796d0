"""The pixels of each mask over its box: masks given as a bool array, as a ``mask_set.Masks`` (RLE) or as windows,
checked against the image, each mask's region (its box grown by a padding) decoded once while a view is drawn.

Work per mask is restricted to the mask's bounding box (plus the contour width), so drawing stays fast on large
photos with many masks; of an RLE mask only its box region is decoded (``rle.decode_window``).
"""

from __future__ import annotations

import cv2
import numpy as np

from .. import rle
from ..mask_set import Masks
from .postprocess import boxes_from_masks

_CROP_BUDGET_BYTES = 256 * 1024 * 1024  # decoded mask regions kept while one overlay is drawn

MaskSource = np.ndarray | Masks  # bool (N, H, W), or a mask set (RLE)


def check_masks(masks: np.ndarray, height: int, width: int) -> np.ndarray:
    """``masks`` (one (H, W) or (N, H, W), any dtype: nonzero is set) as bool (N, height, width).

    Raises:
        ValueError: when the masks are not the image's size (the message names both).
    """
    arr = np.asarray(masks)
    if arr.ndim == 2:
        arr = arr[None]
    if arr.ndim != 3 or arr.shape[1:] != (height, width):
        raise ValueError(
            f"masks must be bool (N, {height}, {width}) to match the {width}x{height} image; got shape {arr.shape}"
        )
    return arr if arr.dtype == bool else arr > 0


def _padded_box(box: np.ndarray, pad: int, height: int, width: int) -> tuple[int, int, int, int]:
    x0, y0, x1, y1 = (int(v) for v in box)
    return max(0, x0 - pad), max(0, y0 - pad), min(width, x1 + pad), min(height, y1 + pad)


class MaskRegions:
    """Per-mask pixels of a bool array or a ``Masks``: tight boxes, and each mask's region (its box grown by
    ``pad`` px, clipped to the image). An RLE mask is decoded once and its region kept while the regions kept
    stay under ``_CROP_BUDGET_BYTES`` (then decoded again when asked again)."""

    def __init__(self, masks: MaskSource, height: int, width: int, pad: int) -> None:
        self.height, self.width, self.pad = height, width, pad
        self._kept: dict[int, np.ndarray] = {}
        self._bytes = 0
        self._windows: list[tuple[int, int, np.ndarray]] | None = None
        if isinstance(masks, Masks):
            if masks.size != (height, width):
                raise ValueError(
                    f"masks must be (N, {height}, {width}) to match the {width}x{height} image; got "
                    f"{masks.height}x{masks.width} masks"
                )
            self._rle: Masks | None = masks
            self._arr: np.ndarray | None = None
            self.boxes = masks.tight_boxes
        else:
            self._rle = None
            self._arr = check_masks(masks, height, width)
            self.boxes = boxes_from_masks(self._arr)
        self.count = int(self.boxes.shape[0])

    @classmethod
    def from_windows(
        cls, windows: list[tuple[int, int, np.ndarray]], height: int, width: int, pad: int
    ) -> MaskRegions:
        """Masks given as windows ``(x0, y0, bool crop)`` placed at (x0, y0), each holding its whole mask."""
        regions = cls(np.zeros((0, height, width), dtype=bool), height, width, pad)
        regions._windows = windows
        boxes = []
        for x0, y0, window in windows:
            bx, by, bw, bh = cv2.boundingRect(np.ascontiguousarray(window).view(np.uint8))
            boxes.append((x0 + bx, y0 + by, x0 + bx + bw, y0 + by + bh) if bw else (0, 0, 0, 0))
        regions.boxes = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
        regions.count = len(windows)
        return regions

    def empty(self, k: int) -> bool:
        return bool(self.boxes[k, 2] <= self.boxes[k, 0])

    def region(self, k: int) -> tuple[np.ndarray, tuple[int, int, int, int]]:
        """Mask ``k`` over its padded box: bool (y1 - y0, x1 - x0), and that box ``(x0, y0, x1, y1)``."""
        box = _padded_box(self.boxes[k], self.pad, self.height, self.width)
        x0, y0, x1, y1 = box
        if self._arr is not None and self._windows is None:
            return self._arr[k, y0:y1, x0:x1], box
        if self._windows is not None:
            wx, wy, window = self._windows[k]
            crop = np.zeros((y1 - y0, x1 - x0), dtype=bool)
            cx0, cy0 = max(x0, wx), max(y0, wy)
            cx1, cy1 = min(x1, wx + window.shape[1]), min(y1, wy + window.shape[0])
            if cx1 > cx0 and cy1 > cy0:
                crop[cy0 - y0 : cy1 - y0, cx0 - x0 : cx1 - x0] = window[cy0 - wy : cy1 - wy, cx0 - wx : cx1 - wx]
            return crop, box
        crop = self._kept.get(k)
        if crop is None:
            crop = rle.decode_window(self._rle.counts[k], self.height, box)  # type: ignore[union-attr]
            if self._bytes + crop.nbytes <= _CROP_BUDGET_BYTES:
                self._kept[k] = crop
                self._bytes += crop.nbytes
        return crop, box

    def box_crop(self, k: int) -> np.ndarray:
        """Mask ``k`` over its tight box (a view into its region)."""
        crop, (x0, y0, _, _) = self.region(k)
        bx0, by0, bx1, by1 = (int(v) for v in self.boxes[k])
        return crop[by0 - y0 : by1 - y0, bx0 - x0 : bx1 - x0]

