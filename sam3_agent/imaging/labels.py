"""Where each mask's number goes on the numbered overlay: the mask's deepest interior point, nudged away from the
labels placed before it.

A label box fits the number's digits plus padding (sizes from ``draw.DrawStyle``), is centred on the mask's deepest
interior point (the maximum of its distance transform: on the mask even for a ring or a concave shape) and clamped
inside the image.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import cv2
import numpy as np

from ..mask_set import Masks
from .draw import DrawStyle, text_size
from .postprocess import boxes_from_masks
from .regions import MaskRegions, MaskSource

_MAX_LABEL_CANDIDATES = 200  # interior points tried when nudging a label away from others


def _distance_map(inner: np.ndarray) -> np.ndarray:
    """Distance to the nearest non-mask pixel (image edges count as outside) over the mask's tight box."""
    sub = np.pad(inner.astype(np.uint8), 1)
    return cv2.distanceTransform(sub, cv2.DIST_L2, 5)[1:-1, 1:-1]


def label_point(mask: np.ndarray) -> tuple[int, int]:
    """The mask's deepest interior point: where its label goes.

    The maximum of the Euclidean distance transform (``cv2.distanceTransform``) of the mask, with
    pixels beyond the image edge counted as outside; for a ring or a concave shape this lies on
    the mask, unlike the centroid. Ties go to the first point in row-major order.

    Args:
        mask: bool (H, W).

    Returns:
        ``(x, y)`` in pixels.

    Raises:
        ValueError: on an empty mask or an array that is not 2-dimensional.
    """
    arr = np.asarray(mask)
    if arr.ndim != 2:
        raise ValueError(f"mask must be bool (H, W); got shape {arr.shape}")
    arr = arr if arr.dtype == bool else arr > 0
    box = boxes_from_masks(arr[None])[0]
    if box[2] <= box[0]:
        raise ValueError("cannot place a label on an empty mask")
    x0, y0, x1, y1 = (int(v) for v in box)
    dist = _distance_map(arr[y0:y1, x0:x1])
    y, x = np.unravel_index(int(np.argmax(dist)), dist.shape)
    return int(x0 + x), int(y0 + y)


def _deepest_first(values: np.ndarray, limit: int) -> np.ndarray:
    """Positions of the ``limit`` largest ``values``, largest first, ties in position order: the head of a stable
    descending sort, found with a partition instead of sorting every value."""
    if values.size > limit:
        kth = np.partition(values, values.size - limit)[values.size - limit]  # the limit-th largest value
        above = np.flatnonzero(values > kth)
        tied = np.flatnonzero(values == kth)[: limit - above.size]
        chosen = np.sort(np.concatenate([above, tied]))
    else:
        chosen = np.arange(values.size)
    return chosen[np.argsort(-values[chosen], kind="stable")]


class _LabelCandidates:
    """Interior points of a mask, deepest first: ``first`` is ``label_point``; ``others()`` (sampled on a grid of
    at most about 10,000 points, deepest ``_MAX_LABEL_CANDIDATES`` first) serve for nudging and are only worked
    out when the first place is taken."""

    def __init__(self, inner: np.ndarray, box: np.ndarray) -> None:
        self._dist = _distance_map(inner)
        self._x0, self._y0 = int(box[0]), int(box[1])
        y, x = np.unravel_index(int(np.argmax(self._dist)), self._dist.shape)
        self.first = (self._x0 + int(x), self._y0 + int(y))

    def others(self) -> Iterator[tuple[int, int]]:
        stride = max(1, int(math.sqrt(self._dist.size / 10_000)))
        sampled = self._dist[::stride, ::stride]
        flat = sampled.ravel()
        inside = np.flatnonzero(flat > 0)
        ys, xs = np.unravel_index(inside[_deepest_first(flat[inside], _MAX_LABEL_CANDIDATES)], sampled.shape)
        for y, x in zip(ys.tolist(), xs.tolist()):
            yield self._x0 + x * stride, self._y0 + y * stride


def _box_at(center: tuple[int, int], size: tuple[int, int], width: int, height: int) -> tuple[int, int, int, int]:
    """A ``size`` = (w, h) box centred on ``center``, shifted to lie inside the image."""
    bw, bh = size
    x0 = min(max(center[0] - bw // 2, 0), max(width - bw, 0))
    y0 = min(max(center[1] - bh // 2, 0), max(height - bh, 0))
    return x0, y0, x0 + bw, y0 + bh


def _overlaps(box: tuple[int, int, int, int], others: list[tuple[int, int, int, int]]) -> bool:
    return any(box[0] < o[2] and o[0] < box[2] and box[1] < o[3] and o[1] < box[3] for o in others)


def _place_label(
    candidates: _LabelCandidates,
    size: tuple[int, int],
    placed: list[tuple[int, int, int, int]],
    width: int,
    height: int,
) -> tuple[int, int, int, int]:
    """The label box at the deepest point, nudged to avoid earlier labels where possible."""
    first = _box_at(candidates.first, size, width, height)
    if not _overlaps(first, placed):
        return first
    for point in candidates.others():
        box = _box_at(point, size, width, height)
        if not _overlaps(box, placed):
            return box
    bw, bh = size
    cx, cy = candidates.first
    for k in (1, 2):
        for dx, dy in ((0, bh), (0, -bh), (bw, 0), (-bw, 0), (bw, bh), (-bw, -bh), (bw, -bh), (-bw, bh)):
            box = _box_at((cx + k * dx, cy + k * dy), size, width, height)
            if not _overlaps(box, placed):
                return box
    return first


def label_numbers(numbers: list[int] | None, n: int) -> list[int]:
    """The number shown on each of ``n`` masks: ``numbers`` as ints, or ``1..n`` when ``None``.

    Raises:
        ValueError: when ``numbers`` has not ``n`` entries.
    """
    labels = list(range(1, n + 1)) if numbers is None else [int(v) for v in numbers]
    if len(labels) != n:
        raise ValueError(f"numbers has {len(labels)} entries for {n} masks")
    return labels


def place_labels(regions: MaskRegions, labels: list[int], style: DrawStyle) -> list[tuple[int, int, int, int] | None]:
    """The label box of each mask of ``regions`` showing ``labels[k]``, placed in order (see ``label_boxes``):
    ``(x0, y0, x1, y1)`` ints, pixels, x1/y1 exclusive; ``None`` for an empty mask."""
    width, height = regions.width, regions.height
    placed: list[tuple[int, int, int, int]] = []
    result: list[tuple[int, int, int, int] | None] = []
    for k in range(regions.count):
        if regions.empty(k):
            result.append(None)
            continue
        tw, th = text_size(str(labels[k]), style.font_scale, style.text_thickness)
        size = (min(tw + 2 * style.padding, width), min(th + 2 * style.padding, height))
        box = _place_label(_LabelCandidates(regions.box_crop(k), regions.boxes[k]), size, placed, width, height)
        placed.append(box)
        result.append(box)
    return result


def label_boxes(masks: MaskSource, numbers: list[int] | None = None) -> list[tuple[int, int, int, int] | None]:
    """Where ``render_numbered_overlay`` puts each mask's label.

    Each box fits the label's digits plus padding (sizes from ``DrawStyle``), is centred on the
    mask's deepest point (``label_point``), shifted to lie inside the image, and, when it would
    overlap an earlier label, moved to the deepest other interior point where it does not (or,
    failing that, next to the first position); it stays where it was when nothing is free.

    Args:
        masks: bool (N, H, W), or ``Masks``.
        numbers: the label texts; default ``1..N``.

    Returns:
        N boxes ``(x0, y0, x1, y1)`` ints, pixels, x1/y1 exclusive; ``None`` for an empty mask.

    Raises:
        ValueError: on a non-3-D array or when ``numbers`` has the wrong length.
    """
    if isinstance(masks, Masks):
        height, width = masks.size
    else:
        arr = np.asarray(masks)
        if arr.ndim != 3:
            raise ValueError(f"masks must be bool (N, H, W); got shape {arr.shape}")
        height, width = arr.shape[1:]
    regions = MaskRegions(masks, height, width, 0)
    return place_labels(regions, label_numbers(numbers, regions.count), DrawStyle.for_size(width, height))

