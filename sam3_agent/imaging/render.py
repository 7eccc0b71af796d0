"""Images shown to the model: numbered mask overlays, single-mask views and zoomed views.

Everything is drawn with numpy and OpenCV on ``uint8 (H, W, 3)`` RGB arrays; work per mask is
restricted to the mask's bounding box (plus the contour width), so drawing stays fast on large
photos with many masks. Masks come as a bool array or as a ``mask_set.Masks`` (RLE): then only each mask's
box region is decoded (``rle.decode_window``), once per image drawn.

Every view is a pure function of the photo and the masks, so a trace stores ``MaskView`` recipes
instead of pixels and renders them again, identically, when it is opened (``RENDERER_VERSION`` is
recorded with them: change it whenever a change here changes a single pixel).

Drawing rules, shared by every view:
  * fill: inside the mask, each pixel becomes ``(p * (256 - w) + c * w + 128) >> 8`` with
    ``w = round(FILL_ALPHA * 256)`` (integer alpha blend of pixel ``p`` and mask colour ``c``);
  * contour: an inner border of the mask, ``contour_width`` pixels wide, painted in the solid
    mask colour (it lies on mask pixels only, so pixels outside every mask stay unchanged);
  * labels (numbered overlay only): the number in black or white on a solid box of the mask's
    colour, centred on the mask's deepest interior point and clamped inside the image.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import cv2
import numpy as np
from PIL import Image

from .. import rle
from ..mask_set import Masks
from ..messages import ImagePart, images_equal
from .postprocess import boxes_from_masks

logger = logging.getLogger(__name__)

FILL_ALPHA = 0.45  # translucency of the mask fill: the image stays visible underneath
_FILL_WEIGHT = round(FILL_ALPHA * 256)  # 115: the blend weight out of 256
ZOOM_MIN_LONG_SIDE = 384  # zoom crops are upscaled until their longer side reaches this (px)
ZOOM_SEPARATOR_WIDTH = 4  # px between the two halves of a zoom view
ZOOM_SEPARATOR_COLOR = (255, 255, 255)
_FONT = cv2.FONT_HERSHEY_SIMPLEX
_MAX_LABEL_CANDIDATES = 200  # interior points tried when nudging a label away from others
_CROP_BUDGET_BYTES = 256 * 1024 * 1024  # decoded mask regions kept while one overlay is drawn
RENDERER_VERSION = 1  # recorded in saved traces next to the view recipes

MaskSource = np.ndarray | Masks


@dataclass(frozen=True)
class DrawStyle:
    """Line and text sizes for an image, scaled with its longer side ``s`` (pixels).

    Attributes:
        contour_width: px, ``max(1, round(s / 400))`` (1 px at 300 px, 10 px at 4000 px).
        font_scale: OpenCV Hershey scale, ``max(0.6, s / 700)`` (digits about 13 px tall at
            300 px, about 125 px at 4000 px): the VLM sees images shrunk to its pixel budget, so
            labels must stay a few percent of the image tall to remain legible there.
        text_thickness: px, ``max(1, round(1.6 * font_scale))``.
        padding: px between the digits and the edge of their box.
    """

    contour_width: int
    font_scale: float
    text_thickness: int
    padding: int

    @staticmethod
    def for_size(width: int, height: int) -> DrawStyle:
        """The style for an image of ``width`` x ``height`` pixels."""
        side = max(int(width), int(height), 1)
        font_scale = max(0.6, side / 700.0)
        thickness = max(1, round(1.6 * font_scale))
        return DrawStyle(
            contour_width=max(1, round(side / 400.0)),
            font_scale=font_scale,
            text_thickness=thickness,
            padding=max(2, round(4 * font_scale)),
        )


def mask_colors(n: int) -> np.ndarray:
    """``n`` distinct, deterministic, saturated colours (a fresh array; the table is computed once per ``n``).

    Hues step by the golden ratio (neighbouring numbers get far-apart hues); brightness
    alternates every 10 colours so that long lists stay distinguishable.

    Returns:
        uint8 (n, 3), RGB.

    Raises:
        ValueError: when ``n`` is negative.
    """
    if n < 0:
        raise ValueError(f"number of colours must be >= 0, got {n}")
    return _colors(int(n)).copy()


@functools.lru_cache(maxsize=256)
def _colors(n: int) -> np.ndarray:
    i = np.arange(n, dtype=np.float64)
    hue = (0.05 + i * 0.6180339887498949) % 1.0
    sat = np.full(n, 0.80)
    val = np.where((np.arange(n) // 10) % 2 == 0, 0.95, 0.72)
    # Vectorised HSV -> RGB.
    h6 = hue * 6.0
    sector = np.floor(h6).astype(np.int64) % 6
    frac = h6 - np.floor(h6)
    p = val * (1.0 - sat)
    q = val * (1.0 - sat * frac)
    t = val * (1.0 - sat * (1.0 - frac))
    table = np.stack(
        [
            np.stack([val, t, p], axis=1),
            np.stack([q, val, p], axis=1),
            np.stack([p, val, t], axis=1),
            np.stack([p, q, val], axis=1),
            np.stack([t, p, val], axis=1),
            np.stack([val, p, q], axis=1),
        ]
    )  # (6, n, 3)
    rgb = table[sector, np.arange(n)] if n else np.zeros((0, 3))
    return np.rint(rgb * 255.0).astype(np.uint8).reshape(n, 3)


def blend_fill(pixels: np.ndarray, color: np.ndarray | tuple[int, int, int]) -> np.ndarray:
    """The fill colour of pixels under a mask: integer alpha blend with weight ``FILL_ALPHA``.

    Args:
        pixels: uint8 (..., 3) RGB.
        color: RGB triple (0..255).

    Returns:
        uint8 array of the same shape: ``(p * (256 - w) + c * w + 128) >> 8``, ``w = 115``.
    """
    p = pixels.astype(np.uint16)
    c = np.asarray(color, dtype=np.uint16)
    return ((p * (256 - _FILL_WEIGHT) + c * _FILL_WEIGHT + 128) >> 8).astype(np.uint8)


def _text_color(color: np.ndarray) -> tuple[int, int, int]:
    """Black or white, whichever contrasts more with ``color`` (Rec. 601 luma)."""
    luma = 0.299 * float(color[0]) + 0.587 * float(color[1]) + 0.114 * float(color[2])
    return (0, 0, 0) if luma >= 140 else (255, 255, 255)


def _as_rgb_array(image: Image.Image) -> np.ndarray:
    if not isinstance(image, Image.Image):
        raise TypeError(f"image must be a PIL image; got {type(image).__name__}")
    rgb = image if image.mode == "RGB" else image.convert("RGB")
    return np.array(rgb, dtype=np.uint8)  # a writable copy


def _check_masks(masks: np.ndarray, height: int, width: int) -> np.ndarray:
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


class _MaskRegions:
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
            self._arr = _check_masks(masks, height, width)
            self.boxes = boxes_from_masks(self._arr)
        self.count = int(self.boxes.shape[0])

    @classmethod
    def from_windows(
        cls, windows: list[tuple[int, int, np.ndarray]], height: int, width: int, pad: int
    ) -> _MaskRegions:
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


def _fill_table(color: np.ndarray) -> np.ndarray:
    """``blend_fill`` of every byte value per channel, as an OpenCV lookup table: uint8 (1, 256, 3)."""
    return _fill_table_of(tuple(int(c) for c in color))


@functools.lru_cache(maxsize=1024)
def _fill_table_of(color: tuple[int, int, int]) -> np.ndarray:
    table = blend_fill(np.repeat(np.arange(256, dtype=np.uint8)[:, None], 3, axis=1), color)[None]
    table.flags.writeable = False
    return table


@functools.lru_cache(maxsize=4096)
def _text_size(text: str, scale: float, thickness: int) -> tuple[int, int]:
    """``cv2.getTextSize`` (width, height) of ``text`` in the label font, memoised (the same digits recur)."""
    (width, height), _ = cv2.getTextSize(text, _FONT, scale, thickness)
    return width, height


def _draw_fill(out: np.ndarray, inner: np.ndarray, color: np.ndarray, box: np.ndarray) -> None:
    """Blend ``color`` into ``out`` where ``inner`` (the mask over its tight ``box``) is set (``blend_fill``, done
    as a table lookup over the box and an OpenCV masked copy: far faster than numpy's masked assignment)."""
    x0, y0, x1, y1 = (int(v) for v in box)
    region = out[y0:y1, x0:x1]
    cv2.copyTo(cv2.LUT(region, _fill_table(color)), np.ascontiguousarray(inner).view(np.uint8), region)


def _draw_contour(out: np.ndarray, crop: np.ndarray, color: np.ndarray, origin: tuple[int, int], width: int) -> None:
    """Paint the inner border (``width`` px) of the mask in solid ``color``; only mask pixels change.

    ``crop`` is the mask over a region at ``origin`` (x, y) that extends at least ``width + 1`` px beyond its
    box wherever the image does.
    """
    x0, y0 = origin
    sub = np.ascontiguousarray(crop).view(np.uint8)
    kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * width + 1, 2 * width + 1))
    # Outside the crop counts as background: the crop is padded inside the image, and at the
    # image edge this draws the border along the edge too.
    inner = cv2.erode(sub, kernel, borderType=cv2.BORDER_CONSTANT, borderValue=0)
    border = cv2.subtract(sub, inner)  # 1 on mask pixels whose neighbourhood leaves the mask
    region = out[y0 : y0 + crop.shape[0], x0 : x0 + crop.shape[1]]
    solid = np.empty_like(region)
    solid[:] = color
    cv2.copyTo(solid, border, region)


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


def _draw_label(out: np.ndarray, box: tuple[int, int, int, int], text: str, color: np.ndarray, style: DrawStyle) -> None:
    x0, y0, x1, y1 = box
    ink = _text_color(color)
    out[y0:y1, x0:x1] = color
    edge = max(1, style.text_thickness // 2)
    cv2.rectangle(out, (x0, y0), (x1 - 1, y1 - 1), ink, edge, lineType=cv2.LINE_8)
    tw, th = _text_size(text, style.font_scale, style.text_thickness)
    org = (x0 + (x1 - x0 - tw) // 2, y0 + (y1 - y0 + th) // 2)
    cv2.putText(out, text, org, _FONT, style.font_scale, ink, style.text_thickness, lineType=cv2.LINE_AA)


def _labels(numbers: list[int] | None, n: int) -> list[int]:
    labels = list(range(1, n + 1)) if numbers is None else [int(v) for v in numbers]
    if len(labels) != n:
        raise ValueError(f"numbers has {len(labels)} entries for {n} masks")
    return labels


def _place_labels(regions: _MaskRegions, labels: list[int], style: DrawStyle) -> list[tuple[int, int, int, int] | None]:
    width, height = regions.width, regions.height
    placed: list[tuple[int, int, int, int]] = []
    result: list[tuple[int, int, int, int] | None] = []
    for k in range(regions.count):
        if regions.empty(k):
            result.append(None)
            continue
        tw, th = _text_size(str(labels[k]), style.font_scale, style.text_thickness)
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
    regions = _MaskRegions(masks, height, width, 0)
    return _place_labels(regions, _labels(numbers, regions.count), DrawStyle.for_size(width, height))


def render_numbered_overlay(image: Image.Image, masks: MaskSource, numbers: list[int] | None = None) -> Image.Image:
    """The image with every mask filled, outlined and numbered (what the model sees).

    Mask k (0-based) gets colour ``mask_colors(N)[k]``; fills are blended in order, then all
    contours are painted, then all labels (so no label is covered). Labels go in the boxes given
    by ``label_boxes``: the number in black or white (whichever contrasts with the mask colour)
    on a box filled with the solid mask colour and edged in the text colour.

    Args:
        image: PIL image (converted to RGB if needed), W x H.
        masks: bool (N, H, W) at the image's resolution, or ``Masks`` (each decoded once, box region only kept).
        numbers: the label of each mask; default ``1..N``.

    Returns:
        A new RGB image of the same size; a copy of the image when N = 0.

    Raises:
        ValueError: when the masks do not match the image size or ``numbers`` has the wrong length.
    """
    out = _as_rgb_array(image)
    height, width = out.shape[:2]
    style = DrawStyle.for_size(width, height)
    _draw_overlay(out, _MaskRegions(masks, height, width, style.contour_width + 1), numbers, style)
    return Image.fromarray(out)


def _draw_overlay(out: np.ndarray, regions: _MaskRegions, numbers: list[int] | None, style: DrawStyle) -> None:
    """Fills, then contours, then labels of every mask of ``regions`` on ``out`` (see ``render_numbered_overlay``)."""
    n = regions.count
    labels = _labels(numbers, n)
    placements = _place_labels(regions, labels, style)
    if n == 0:
        return
    colors = mask_colors(n)
    nonempty = [k for k in range(n) if placements[k] is not None]
    for k in nonempty:
        _draw_fill(out, regions.box_crop(k), colors[k], regions.boxes[k])
    for k in nonempty:
        crop, (x0, y0, _, _) = regions.region(k)
        _draw_contour(out, crop, colors[k], (x0, y0), style.contour_width)
    for k in nonempty:
        _draw_label(out, placements[k], str(labels[k]), colors[k], style)  # type: ignore[arg-type]
    if len(nonempty) < n:
        logger.warning("render_numbered_overlay: %d empty mask(s) left undrawn", n - len(nonempty))


def render_overlay_scaled(image: Image.Image, masks: Masks, max_side: int) -> Image.Image:
    """``render_numbered_overlay`` drawn at a display size: the photo shrunk by the smallest whole factor that
    brings its longer side to at most ``max_side`` px (box filter), each mask's box shrunk alike, then drawn in
    the style of that size (labels and outlines sized for it).

    For a page, not for the model (the trace's views stay full size): it costs about the square of the factor
    less than drawing at full size. A shrunk mask pixel is set when at least half the pixels it covers are; a
    thin mask that would vanish keeps every pixel it touches. At full size when the photo already fits.

    Raises:
        ValueError: masks of another size than the photo.
    """
    width, height = image.size
    if masks.size != (height, width):
        raise ValueError(f"masks of {masks.width}x{masks.height} do not match the {width}x{height} photo")
    factor = -(-max(width, height) // max_side)
    if factor <= 1:
        return render_numbered_overlay(image, masks)
    rgb = image if image.mode == "RGB" else image.convert("RGB")
    out = np.array(rgb.reduce(factor), dtype=np.uint8)
    small_h, small_w = out.shape[:2]
    windows = []
    for k in range(len(masks)):
        x0, y0, x1, y1 = (int(v) for v in masks.tight_boxes[k])
        if x1 <= x0:
            windows.append((0, 0, np.zeros((0, 0), dtype=bool)))
            continue
        sx0, sy0 = x0 // factor, y0 // factor
        sx1, sy1 = min(small_w, -(-x1 // factor)), min(small_h, -(-y1 // factor))
        # whole blocks of factor x factor pixels, so each shrunk pixel averages the pixels it covers
        block = (sx0 * factor, sy0 * factor, min(width, sx1 * factor), min(height, sy1 * factor))
        full = rle.decode_window(masks.counts[k], height, block).view(np.uint8) * np.uint8(255)
        covered = cv2.resize(full, (sx1 - sx0, sy1 - sy0), interpolation=cv2.INTER_AREA)
        half = covered >= 128
        windows.append((sx0, sy0, half if half.any() else covered > 0))
    style = DrawStyle.for_size(small_w, small_h)
    _draw_overlay(out, _MaskRegions.from_windows(windows, small_h, small_w, style.contour_width + 1), None, style)
    return Image.fromarray(out)


def _single_mask_view(image: Image.Image, regions: _MaskRegions, k: int, color: np.ndarray) -> Image.Image:
    """The photo with mask ``k`` of ``regions`` drawn; only the mask's region is converted and pasted back."""
    out = image.copy() if image.mode == "RGB" else image.convert("RGB")
    if regions.empty(k):
        return out
    crop, (x0, y0, x1, y1) = regions.region(k)
    patch = np.array(out.crop((x0, y0, x1, y1)), dtype=np.uint8)
    bx0, by0, bx1, by1 = (int(v) for v in regions.boxes[k])
    _draw_fill(patch, regions.box_crop(k), color, np.array([bx0 - x0, by0 - y0, bx1 - x0, by1 - y0]))
    _draw_contour(patch, crop, color, (0, 0), DrawStyle.for_size(image.width, image.height).contour_width)
    out.paste(Image.fromarray(patch), (x0, y0))
    return out


def render_single_mask(image: Image.Image, mask: np.ndarray, color: np.ndarray | None = None) -> Image.Image:
    """The image with only this mask drawn (fill and contour, no number).

    Args:
        image: PIL image (converted to RGB if needed), W x H.
        mask: bool (H, W).
        color: RGB triple; default ``mask_colors(1)[0]`` (the colour of a lone numbered mask).

    Returns:
        A new RGB image of the same size (a copy of the image for an empty mask).

    Raises:
        ValueError: when the mask does not match the image size.
    """
    if not isinstance(image, Image.Image):
        raise TypeError(f"image must be a PIL image; got {type(image).__name__}")
    arr = np.asarray(mask)
    if arr.ndim != 2:
        raise ValueError(f"mask must be bool (H, W); got shape {arr.shape}")
    style = DrawStyle.for_size(image.width, image.height)
    regions = _MaskRegions(arr, image.height, image.width, style.contour_width + 1)
    col = mask_colors(1)[0] if color is None else np.asarray(color, dtype=np.uint8)
    return _single_mask_view(image, regions, 0, col)


def _zoom_box(box: np.ndarray, height: int, width: int, margin: float, min_side: int) -> tuple[int, int, int, int]:
    bx0, by0, bx1, by1 = (float(v) for v in box)
    if bx1 <= bx0:
        raise ValueError("cannot build a zoom view of an empty mask")

    def span(lo: float, hi: float, limit: int) -> tuple[int, int]:
        side = min(limit, max(math.ceil((hi - lo) * (1 + 2 * margin)), int(min_side)))
        start = math.floor((lo + hi) / 2 - side / 2)
        start = min(max(start, 0), limit - side)
        return start, start + side

    x0, x1 = span(bx0, bx1, width)
    y0, y1 = span(by0, by1, height)
    return x0, y0, x1, y1


def zoom_crop_box(mask: np.ndarray, margin: float = 0.25, min_side: int = 64) -> tuple[int, int, int, int]:
    """The region a zoom view shows: the mask's box enlarged and clamped to the image.

    Each side of the crop is ``ceil(box side * (1 + 2 * margin))``, at least ``min_side``, at most
    the image side; the crop is centred on the box and shifted to lie inside the image. It
    always contains the whole mask box.

    Args:
        mask: bool (H, W).
        margin: extra space on each side as a fraction of the box size.
        min_side: smallest crop side in pixels (when the image is that large).

    Returns:
        ``(x0, y0, x1, y1)`` ints, pixels, x1/y1 exclusive.

    Raises:
        ValueError: on an empty mask, a negative margin or a non-2-D array.
    """
    arr = np.asarray(mask)
    if arr.ndim != 2:
        raise ValueError(f"mask must be bool (H, W); got shape {arr.shape}")
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    arr = arr if arr.dtype == bool else arr > 0
    return _zoom_box(boxes_from_masks(arr[None])[0], arr.shape[0], arr.shape[1], margin, min_side)


def _draw_single(out: np.ndarray, mask: np.ndarray, color: np.ndarray) -> None:
    """Fill and outline ``mask`` (bool, the size of ``out``) on ``out`` in place, as ``render_single_mask`` does."""
    height, width = out.shape[:2]
    style = DrawStyle.for_size(width, height)
    regions = _MaskRegions(mask[None], height, width, style.contour_width + 1)
    if regions.empty(0):
        return
    crop, (x0, y0, _, _) = regions.region(0)
    _draw_fill(out, regions.box_crop(0), color, regions.boxes[0])
    _draw_contour(out, crop, color, (x0, y0), style.contour_width)


def _zoom_view(image: Image.Image, window: np.ndarray, box: tuple[int, int, int, int]) -> Image.Image:
    """The zoom view of the mask ``window`` (bool, the mask over ``box``): see ``render_zoom_view``."""
    rgb = image if image.mode == "RGB" else image.convert("RGB")
    crop = np.asarray(rgb.crop(box), dtype=np.uint8)
    crop_mask = window
    ch, cw = crop.shape[:2]
    long_side = max(ch, cw)
    if long_side < ZOOM_MIN_LONG_SIDE:
        factor = ZOOM_MIN_LONG_SIDE / long_side
        size = (max(1, round(cw * factor)), max(1, round(ch * factor)))  # (w, h) for OpenCV
        crop = cv2.resize(crop, size, interpolation=cv2.INTER_CUBIC)
        crop_mask = cv2.resize(crop_mask.astype(np.uint8), size, interpolation=cv2.INTER_NEAREST) > 0
        ch, cw = crop.shape[:2]
    canvas = np.empty((ch, 2 * cw + ZOOM_SEPARATOR_WIDTH, 3), dtype=np.uint8)
    canvas[:, :cw] = crop
    canvas[:, cw : cw + ZOOM_SEPARATOR_WIDTH] = ZOOM_SEPARATOR_COLOR
    drawn = canvas[:, cw + ZOOM_SEPARATOR_WIDTH :]
    drawn[:] = crop
    _draw_single(drawn, np.ascontiguousarray(crop_mask), mask_colors(1)[0])  # drawn after upscaling: sharp
    return Image.fromarray(canvas)


def render_zoom_view(image: Image.Image, mask: np.ndarray, margin: float = 0.25, min_side: int = 64) -> Image.Image:
    """A close-up of one mask: the plain crop and the same crop with the mask drawn, side by side.

    The crop is ``zoom_crop_box(mask, margin, min_side)``. When its longer side is under
    ``ZOOM_MIN_LONG_SIDE`` px it is upscaled (image: bicubic; mask: nearest) so the longer side
    equals ``ZOOM_MIN_LONG_SIDE``; the mask is drawn after upscaling so its outline stays sharp.

    Args:
        image: PIL image (converted to RGB if needed), W x H.
        mask: bool (H, W).
        margin: see ``zoom_crop_box``.
        min_side: see ``zoom_crop_box``.

    Returns:
        RGB image of width ``2 * crop_w + ZOOM_SEPARATOR_WIDTH`` and height ``crop_h`` (crop size
        after upscaling); the separator is ``ZOOM_SEPARATOR_COLOR``.

    Raises:
        ValueError: on an empty mask or a mask that does not match the image size.
    """
    if not isinstance(image, Image.Image):
        raise TypeError(f"image must be a PIL image; got {type(image).__name__}")
    arr = _check_masks(mask, image.height, image.width)
    if arr.shape[0] != 1:
        raise ValueError(f"render_zoom_view takes one mask (H, W); got {arr.shape[0]}")
    x0, y0, x1, y1 = zoom_crop_box(arr[0], margin, min_side)
    return _zoom_view(image, arr[0, y0:y1, x0:x1], (x0, y0, x1, y1))


def render_mask_views(image: Image.Image, masks: Masks, index: int) -> tuple[Image.Image, Image.Image]:
    """The two views a verifier gets of mask ``index`` (0-based): ``render_single_mask`` with the lone-mask colour
    and ``render_zoom_view`` with the default margin (only the mask's box and the zoom's crop are decoded).

    Raises:
        ValueError: an empty mask (no zoom view exists), masks of another size, or an index out of range.
    """
    return _views_of(image, masks, index, ("mask", "zoom"))  # type: ignore[return-value]


ViewKind = Literal["overlay", "mask", "zoom"]


def _views_of(
    image: Image.Image, masks: Masks, index: int | None, kinds: tuple[ViewKind, ...]
) -> tuple[Image.Image, ...]:
    if "overlay" in kinds:
        return (render_numbered_overlay(image, masks),)
    if index is None or not 0 <= index < len(masks):
        raise ValueError(f"mask index {index!r} is out of range for {len(masks)} masks")
    if masks.size != (image.height, image.width):
        raise ValueError(f"masks of {masks.width}x{masks.height} do not match the {image.width}x{image.height} photo")
    style = DrawStyle.for_size(image.width, image.height)
    out: list[Image.Image] = []
    for kind in kinds:
        if kind == "mask":
            regions = _MaskRegions(masks.subset([index]), image.height, image.width, style.contour_width + 1)
            out.append(_single_mask_view(image, regions, 0, mask_colors(1)[0]))
        else:
            box = _zoom_box(masks.tight_boxes[index], image.height, image.width, 0.25, 64)
            out.append(_zoom_view(image, rle.decode_window(masks.counts[index], masks.height, box), box))
    return tuple(out)


@dataclass(frozen=True, eq=False)
class MaskView:
    """How to draw one view again from the photo and the masks (a ``messages.DerivedImage``).

    A saved trace stores this recipe (kind, which mask set, which mask) instead of the pixels.

    Attributes:
        kind: ``"overlay"`` (``render_numbered_overlay`` of every mask, numbered 1..N), ``"mask"``
            (``render_single_mask`` of mask ``index``) or ``"zoom"`` (``render_zoom_view`` of mask ``index``).
        photo: the raw image (RGB, original resolution).
        masks: the mask set, at the photo's size.
        index: 0-based mask for ``"mask"`` / ``"zoom"``; ``None`` for ``"overlay"``.

    Raises:
        ValueError: an unknown kind, or an index missing, given for an overlay, or out of range.
    """

    kind: ViewKind
    photo: Image.Image
    masks: Masks
    index: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("overlay", "mask", "zoom"):
            raise ValueError(f"unknown view kind {self.kind!r}: expected overlay, mask or zoom")
        if (self.kind == "overlay") != (self.index is None):
            raise ValueError(f"a {self.kind} view {'takes no' if self.kind == 'overlay' else 'needs a'} mask index")
        if self.index is not None and not 0 <= self.index < len(self.masks):
            raise ValueError(f"mask index {self.index} is out of range for {len(self.masks)} masks")

    def render(self) -> Image.Image:
        """The view's pixels."""
        return _views_of(self.photo, self.masks, self.index, (self.kind,))[0]

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, MaskView)
            and self.kind == other.kind
            and self.index == other.index
            and self.masks == other.masks
            and (self.photo is other.photo or images_equal(self.photo, other.photo))
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        which = "" if self.index is None else f", mask {self.index + 1}"
        return f"MaskView({self.kind}, {self.masks!r}{which})"


def view_part(name: str, view: MaskView) -> ImagePart:
    """A derived ``ImagePart`` named ``name``, rendered now (its pixels are needed at once) but holding only the
    recipe: a saved trace stores ``view``, and the pixels are rendered again when evicted and read."""
    return ImagePart(view.render(), name, view)
