"""Where each mask's number goes on the numbered overlay, and how big it is drawn.

Placement (``place_labels``), for any count up to SAM 3's 200 masks per phrase:

1. Inside: each label box (the number's digits plus padding) is centred on its mask's deepest interior point (the
   maximum of its distance transform: on the mask even for a ring or a concave shape), clamped inside the image,
   or on the deepest other interior point where it overlaps no label placed before it. Small masks go first (they
   have the fewest places), so a large mask's label moves aside for a small one.
2. Beside: a label that found no free place inside goes to the nearest free place around its deepest point
   (rings of growing radius, up to ``BESIDE_REACH`` of the image's longer side) and gets a leader line to it.
3. When nothing is free it stays on its deepest point, overlapping (the measure of ``legibility`` counts it).

Size (``label_style``): the style of ``DrawStyle.for_size``, with the font shrunk for dense sets until all labels
together cover at most ``LABEL_AREA_SHARE`` of the image, but never below ``MIN_DIGIT_PX_SEEN`` px at the size the
VLM sees the overlay (``legibility.seen_scale`` under the VLM's ``PixelBounds``), and raised to that when the photo
is shrunk a lot. A set whose font had to shrink is ``crowded``: its overlay is then drawn at the VLM's pixel budget
(``enlarged``), or, with the opt-in tiles, the model also gets the set in four enlarged tiles (``tiles``).

Hand-written: label placement is a small greedy search over an occupancy map (numpy); no maintained library
places labels on raster masks (adjustText and the like work on matplotlib text artists, which this renderer
does not use: it draws with OpenCV).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import cv2
import numpy as np

from ..mask_set import Masks
from .digits import text_size
from .draw import DrawStyle
from .legibility import DEFAULT_BOUNDS, PixelBounds, seen_scale
from .postprocess import boxes_from_masks
from .regions import MaskRegions, MaskSource

_MAX_LABEL_CANDIDATES = 200  # interior points tried when nudging a label away from others
LABEL_GAP = 1  # px kept free between two labels
BESIDE_REACH = 0.25  # how far from its mask a label may go (share of the longer side) before it overlaps instead
LABEL_AREA_SHARE = 0.25  # dense sets: the font shrinks until all label boxes together cover at most this share
DENSE_LABELS = 20  # ... of the image; fewer labels keep their font (shrinking helps a crowd, not a tiny photo)
MIN_DIGIT_PX_SEEN = 10  # ... but digits stay at least this tall (px, ink height) where the VLM sees them


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


class _Occupancy:
    """The pixels covered by the labels placed so far."""

    def __init__(self, width: int, height: int) -> None:
        self.taken = np.zeros((height, width), dtype=bool)

    def free(self, box: tuple[int, int, int, int]) -> bool:
        return not self.taken[box[1] : box[3], box[0] : box[2]].any()

    def take(self, box: tuple[int, int, int, int]) -> None:
        """Mark ``box`` and a ``LABEL_GAP`` px margin around it (so neighbouring labels never touch: "1" "2" is
        not read as "12")."""
        x0, y0, x1, y1 = box
        self.taken[max(0, y0 - LABEL_GAP) : y1 + LABEL_GAP, max(0, x0 - LABEL_GAP) : x1 + LABEL_GAP] = True


def _inside(candidates: _LabelCandidates, size: tuple[int, int], occupied: _Occupancy, width: int,
            height: int) -> tuple[int, int, int, int] | None:
    """The label box at the deepest point, else at the deepest other interior point, where it is free."""
    first = _box_at(candidates.first, size, width, height)
    if occupied.free(first):
        return first
    for point in candidates.others():
        box = _box_at(point, size, width, height)
        if occupied.free(box):
            return box
    return None


def _ring_offsets(size: tuple[int, int], reach: int) -> Iterator[tuple[int, int]]:
    """Offsets (dx, dy) of label centres around a point, nearest first: rings half a label height apart, each
    sampled at steps of about half a label height, starting straight above."""
    bw, bh = size
    step = max(2, bh // 2)
    for radius in range(step, max(reach, step) + 1, step):
        samples = max(8, round(2 * math.pi * radius / step))
        for k in range(samples):
            angle = 2 * math.pi * k / samples
            # the ellipse through the label's half-size: a box beside the point, not only above it
            yield round(math.sin(angle) * (radius + bw / 2)), round(-math.cos(angle) * (radius + bh / 2))


def _beside(anchor: tuple[int, int], size: tuple[int, int], occupied: _Occupancy, width: int, height: int,
            reach: int) -> tuple[int, int, int, int] | None:
    """The nearest free label box around ``anchor`` within ``reach`` px, or None."""
    for dx, dy in _ring_offsets(size, reach):
        box = _box_at((anchor[0] + dx, anchor[1] + dy), size, width, height)
        if occupied.free(box):
            return box
    return None


def label_numbers(numbers: list[int] | None, n: int) -> list[int]:
    """The number shown on each of ``n`` masks: ``numbers`` as ints, or ``1..n`` when ``None``.

    Raises:
        ValueError: when ``numbers`` has not ``n`` entries.
    """
    labels = list(range(1, n + 1)) if numbers is None else [int(v) for v in numbers]
    if len(labels) != n:
        raise ValueError(f"numbers has {len(labels)} entries for {n} masks")
    return labels


@dataclass(frozen=True)
class LabelPlacement:
    """Where one mask's number is drawn.

    Attributes:
        box: ``(x0, y0, x1, y1)`` ints, pixels, x1/y1 exclusive.
        anchor: ``(x, y)`` px, the mask's deepest interior point (``label_point``).
        leader: True when the label sits beside its mask: a leader line joins it to ``anchor``.
    """

    box: tuple[int, int, int, int]
    anchor: tuple[int, int]
    leader: bool


def place_labels(regions: MaskRegions, labels: list[int], style: DrawStyle,
                 labelled: Sequence[bool] | None = None) -> list[LabelPlacement | None]:
    """The label of each mask of ``regions`` showing ``labels[k]`` (see the module docstring); ``None`` for an
    empty mask and for a mask whose ``labelled[k]`` is False (default: every mask is labelled)."""
    width, height = regions.width, regions.height
    occupied = _Occupancy(width, height)
    result: list[LabelPlacement | None] = [None] * regions.count
    sizes: dict[int, tuple[int, int]] = {}
    anchors: dict[int, tuple[int, int]] = {}
    areas = {k: int(regions.box_crop(k).sum()) for k in range(regions.count)
             if not regions.empty(k) and (labelled is None or labelled[k])}
    left = []
    for k in sorted(areas, key=lambda k: (areas[k], k)):  # small masks first: they have the fewest places
        tw, th = text_size(str(labels[k]), style.font_scale, style.text_thickness)
        sizes[k] = (min(tw + 2 * style.padding, width), min(th + 2 * style.padding, height))
        candidates = _LabelCandidates(regions.box_crop(k), regions.boxes[k])
        anchors[k] = candidates.first
        box = _inside(candidates, sizes[k], occupied, width, height)
        if box is None:
            left.append(k)
            continue
        occupied.take(box)
        result[k] = LabelPlacement(box, anchors[k], False)
    reach = round(BESIDE_REACH * max(width, height))
    for k in left:
        box = _beside(anchors[k], sizes[k], occupied, width, height, reach)
        leader = box is not None
        box = box if box is not None else _box_at(anchors[k], sizes[k], width, height)
        occupied.take(box)
        result[k] = LabelPlacement(box, anchors[k], leader)
    return result


def _regions_of(masks: MaskSource) -> MaskRegions:
    if isinstance(masks, Masks):
        height, width = masks.size
    else:
        arr = np.asarray(masks)
        if arr.ndim != 3:
            raise ValueError(f"masks must be bool (N, H, W); got shape {arr.shape}")
        height, width = arr.shape[1:]
    return MaskRegions(masks, height, width, 0)


def _scales(width: int, height: int, labels: list[int], bounds: PixelBounds) -> tuple[DrawStyle, bool, float]:
    """The base style of the image size; whether the labels in the legible font (digits at least
    ``MIN_DIGIT_PX_SEEN`` px where the VLM sees them) would cover more than ``LABEL_AREA_SHARE`` of the image; and
    the font scale ``label_style`` draws them in."""
    style = DrawStyle.for_size(width, height)
    seen = seen_scale(width, height, bounds)

    def seen_height(scale: float) -> float:
        return text_size("0", scale, max(1, round(1.6 * scale)))[1] * seen

    def covered(scale: float) -> int:
        candidate = _styled(style, scale)
        total = 0
        for label in labels:
            tw, th = text_size(str(label), candidate.font_scale, candidate.text_thickness)
            total += (tw + 2 * candidate.padding) * (th + 2 * candidate.padding)
        return total

    scale = style.font_scale
    while seen_height(scale) < MIN_DIGIT_PX_SEEN and scale < 20:
        scale *= 1.1
    room = LABEL_AREA_SHARE * width * height
    dense = len(labels) > DENSE_LABELS and covered(scale) > room
    while dense and covered(scale) > room and seen_height(scale * 0.9) >= MIN_DIGIT_PX_SEEN:
        scale *= 0.9
    return style, dense, scale


def _styled(style: DrawStyle, scale: float) -> DrawStyle:
    return replace(style, font_scale=scale, text_thickness=max(1, round(1.6 * scale)),
                   padding=max(1, min(style.padding, round(4 * scale))))


def label_style(width: int, height: int, labels: list[int], bounds: PixelBounds = DEFAULT_BOUNDS) -> DrawStyle:
    """The style the numbered overlay of a ``width`` x ``height`` photo draws ``labels`` in: ``DrawStyle.for_size``
    with the font shrunk (by steps of 10 %) while the label boxes together cover more than ``LABEL_AREA_SHARE`` of
    the image (only for more than ``DENSE_LABELS`` labels), and never below ``MIN_DIGIT_PX_SEEN`` px tall at the
    size a VLM with pixel ``bounds`` sees the image (``seen_scale``)."""
    style, _, scale = _scales(width, height, labels, bounds)
    return style if scale == style.font_scale else _styled(style, scale)


def crowded(width: int, height: int, count: int, bounds: PixelBounds = DEFAULT_BOUNDS) -> bool:
    """True when the labels 1..``count`` of a ``width`` x ``height`` overlay lack room: more than ``DENSE_LABELS``
    of them, which in the legible font (digits ``MIN_DIGIT_PX_SEEN`` px or more where a VLM with pixel ``bounds``
    sees them) would cover more than ``LABEL_AREA_SHARE`` of the image, so ``label_style`` draws them smaller (down
    to that floor). Such a set's overlay is drawn enlarged (``enlarged``), or shown in tiles too (``tiles``, opt-in)."""
    return _scales(width, height, list(range(1, count + 1)), bounds)[1]


@dataclass(frozen=True)
class OverlayLabels:
    """The labels of a numbered overlay: one placement per mask (``None`` for an empty one), the style they are
    drawn in and their digits' height in px (their ink's height, at the photo's size)."""

    placements: list[LabelPlacement | None]
    style: DrawStyle
    digit_height: int


def overlay_labels(masks: MaskSource, numbers: list[int] | None = None,
                   bounds: PixelBounds = DEFAULT_BOUNDS) -> OverlayLabels:
    """Where ``render_numbered_overlay`` puts each mask's label, in the style of ``label_style``.

    Args:
        masks: bool (N, H, W), or ``Masks``.
        numbers: the label texts; default ``1..N``.
        bounds: the pixel bounds of the VLM that will see the overlay.

    Raises:
        ValueError: on a non-3-D array or when ``numbers`` has the wrong length.
    """
    return labels_of_regions(_regions_of(masks), numbers, bounds)


def labels_of_regions(regions: MaskRegions, numbers: list[int] | None = None, bounds: PixelBounds = DEFAULT_BOUNDS,
                      labelled: Sequence[bool] | None = None) -> OverlayLabels:
    """``overlay_labels`` of masks already held as ``MaskRegions``; only the masks whose ``labelled[k]`` is True
    get a label (default: all), and only their labels count for the font size."""
    labels = label_numbers(numbers, regions.count)
    shown = labels if labelled is None else [label for label, keep in zip(labels, labelled) if keep]
    style = label_style(regions.width, regions.height, shown, bounds)
    digit_height = text_size("0", style.font_scale, style.text_thickness)[1]
    return OverlayLabels(place_labels(regions, labels, style, labelled), style, digit_height)


def label_boxes(masks: MaskSource, numbers: list[int] | None = None) -> list[tuple[int, int, int, int] | None]:
    """Label boxes placed as ``place_labels`` places them, in the font of ``DrawStyle.for_size`` (what the
    correction view draws its numbers in; the model's overlay uses ``overlay_labels``).

    Args:
        masks: bool (N, H, W), or ``Masks``.
        numbers: the label texts; default ``1..N``.

    Returns:
        N boxes ``(x0, y0, x1, y1)`` ints, pixels, x1/y1 exclusive; ``None`` for an empty mask.

    Raises:
        ValueError: on a non-3-D array or when ``numbers`` has the wrong length.
    """
    regions = _regions_of(masks)
    style = DrawStyle.for_size(regions.width, regions.height)
    placements = place_labels(regions, label_numbers(numbers, regions.count), style)
    return [None if p is None else p.box for p in placements]
