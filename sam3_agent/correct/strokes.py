"""Brush strokes drawn on a scaled view of an image, turned into full-resolution bool masks.

The UI may show a 4000x3000 photo at 1000x750; strokes are given in view coordinates and mapped
here to the image's own pixels, so edits always happen at full resolution.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import InputError

logger = logging.getLogger(__name__)

_EDGE_SLACK = 1e-9  # px^2 added to the squared radius: a pixel centre on the brush's edge is painted
_PAIRS_PER_CHUNK = 1 << 20  # (segment, row) pairs computed at once: about 100 MB of temporaries at most


def _check_size(height: int, width: int) -> None:
    if height <= 0 or width <= 0:
        raise InputError(f"image size {width}x{height} must be positive")


def stroke_from_view_points(
    points: Sequence[tuple[float, float]], radius: float, view_scale: float, height: int, width: int
) -> np.ndarray:
    """A round brush dragged through ``points`` on a scaled view, drawn at the image's full resolution.

    Coordinates: (x, y) in view pixels, x right, y down, pixel (c, r) centred on (c, r); the view shows the image
    at ``view_scale`` = view size / full size (e.g. 0.25 for a 1000 px view of a 4000 px photo). A view point maps to
    full resolution as ``(v + 0.5) / view_scale - 0.5`` and the radius as ``radius / view_scale``; a full-size pixel
    is painted when its centre lies within that radius of the polyline (round caps and joins). Parts outside the
    image are clipped (a warning is logged).

    The polyline is drawn once, row by row: each segment's covered span on each row it reaches is computed exactly,
    and the spans are merged. The work is (segments x rows they reach) plus the stroke's bounding box, never
    points x brush area.

    Returns:
        bool (height, width).

    Raises:
        InputError: no point, non-positive radius or scale, non-finite values, or no painted pixel inside the image.
    """
    _check_size(height, width)
    full, r = _full_resolution(points, radius, view_scale)
    out = np.zeros((height, width), dtype=bool)
    box = _bounding_box(full, r, height, width)
    if box is not None:
        y0, y1, x0, x1 = box
        out[y0:y1, x0:x1] = _rasterise(_without_straight_points(full), r * r + _EDGE_SLACK, box)
    if not out.any():
        raise InputError("the brush stroke lies entirely outside the image: paint over the image")
    outside = (full[:, 0] - r < -0.5) | (full[:, 1] - r < -0.5) | (full[:, 0] + r > width - 0.5) | (
        full[:, 1] + r > height - 0.5)
    if outside.any():
        logger.warning("brush stroke runs past the image edge; the part outside was clipped")
    return out


def _full_resolution(points: Sequence[tuple[float, float]], radius: float, view_scale: float) -> tuple[np.ndarray, float]:
    """View points as float64 (N, 2) full-resolution (x, y) and the radius in full pixels, after checking them."""
    try:
        pts = np.asarray(points, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError("brush points must be (x, y) pairs of numbers") from None
    if pts.size == 0:
        raise InputError("a brush stroke needs at least one point")
    if pts.ndim != 2 or pts.shape[1] != 2:
        raise InputError(f"brush points must be a list of (x, y) pairs; got shape {pts.shape}")
    if not (np.isfinite(pts).all() and np.isfinite(radius) and np.isfinite(view_scale)):
        raise InputError("brush points, radius and view scale must be finite numbers")
    if radius <= 0 or view_scale <= 0:
        raise InputError(f"brush radius ({radius}) and view scale ({view_scale}) must be positive")
    return (pts + 0.5) / view_scale - 0.5, radius / view_scale


def _bounding_box(full: np.ndarray, r: float, height: int, width: int) -> tuple[int, int, int, int] | None:
    """Rows y0:y1 and columns x0:x1 of the image the stroke can reach, or None when it reaches none."""
    x0 = max(int(np.floor(full[:, 0].min() - r)), 0)
    x1 = min(int(np.ceil(full[:, 0].max() + r)) + 1, width)
    y0 = max(int(np.floor(full[:, 1].min() - r)), 0)
    y1 = min(int(np.ceil(full[:, 1].max() + r)) + 1, height)
    return (y0, y1, x0, x1) if x0 < x1 and y0 < y1 else None


def _without_straight_points(pts: np.ndarray) -> np.ndarray:
    """The polyline without repeated points and without points lying on a straight run between their neighbours
    (a drag along a line sends one per pixel): the union of round-capped segments is unchanged."""
    pts = pts[np.concatenate(([True], np.any(pts[1:] != pts[:-1], axis=1)))]
    if len(pts) < 3:
        return pts
    before, after = pts[1:-1] - pts[:-2], pts[2:] - pts[1:-1]
    straight = (before[:, 0] * after[:, 1] == before[:, 1] * after[:, 0]) & ((before * after).sum(axis=1) > 0)
    return pts[np.concatenate(([True], ~straight, [True]))]


def _rasterise(pts: np.ndarray, r2: float, box: tuple[int, int, int, int]) -> np.ndarray:
    """bool (y1 - y0, x1 - x0): the pixels of ``box`` whose centre is within sqrt(``r2``) of the polyline ``pts``.

    Each (segment, row) pair gives one span of columns (a round-capped segment is convex); the spans are merged per
    row with a difference array. Rows go in bands of at most ``_PAIRS_PER_CHUNK`` pairs, so temporaries stay small.
    """
    y0, y1, x0, x1 = box
    a, b = (pts[:-1], pts[1:]) if len(pts) > 1 else (pts, pts)
    r = float(np.sqrt(r2))
    top = np.ceil(np.minimum(a[:, 1], b[:, 1]) - r).astype(np.int64)
    bottom = np.floor(np.maximum(a[:, 1], b[:, 1]) + r).astype(np.int64)
    constants = _segment_constants(a, b, r2)
    out = np.zeros((y1 - y0, x1 - x0), dtype=bool)
    band = max(1, _PAIRS_PER_CHUNK // len(a))
    for first_row in range(y0, y1, band):
        last_row = min(first_row + band, y1) - 1
        start, stop = np.maximum(top, first_row), np.minimum(bottom, last_row)
        reached = np.flatnonzero(stop >= start)
        if len(reached) == 0:
            continue
        counts = stop[reached] - start[reached] + 1
        which = np.repeat(reached, counts)
        rows = np.repeat(start[reached] - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
        lo, hi = _capsule_spans(constants[:, which], rows.astype(np.float64), r2)
        c_lo, c_hi = np.maximum(np.ceil(lo), x0), np.minimum(np.floor(hi), x1 - 1)
        keep = c_lo <= c_hi
        width = x1 - x0 + 1  # one spare column for the spans' ends
        at = (rows[keep] - first_row) * width - x0
        size = (last_row - first_row + 1) * width
        diff = np.bincount(at + c_lo[keep].astype(np.int64), minlength=size) - np.bincount(
            at + c_hi[keep].astype(np.int64) + 1, minlength=size)
        out[first_row - y0:last_row + 1 - y0] = np.cumsum(diff.reshape(-1, width), axis=1)[:, :-1] > 0
    return out


def _segment_constants(a: np.ndarray, b: np.ndarray, r2: float) -> np.ndarray:
    """float64 (11, S): a row per constant, a column per segment a[i]-b[i] (so a gather stays contiguous).

    Rows: ax, ay, bx, by, then the segment's body (the points within the radius whose projection falls on the
    segment) on a row y, with ry = y - ay and u = x - ax: u in [-ry*k1 + p_lo, -ry*k1 + p_hi] (projection) and in
    [ry*k2 - half, ry*k2 + half] (distance), on rows body_y0 <= y <= body_y1. A horizontal or vertical segment drops
    the condition x does not enter; a point has no body.
    """
    dx, dy = b[:, 0] - a[:, 0], b[:, 1] - a[:, 1]
    length2 = dx * dx + dy * dy
    width = np.sqrt(r2 * length2)  # |u*dy - ry*dx| <= r |d| is distance <= r
    along_y, along_x = dx == 0, dy == 0
    safe_dx, safe_dy = np.where(along_y, 1.0, dx), np.where(along_x, 1.0, dy)
    k1 = np.where(along_y, 0.0, dy / safe_dx)
    p_lo = np.where(along_y, -np.inf, np.minimum(0.0, length2 / safe_dx))
    p_hi = np.where(along_y, np.inf, np.maximum(0.0, length2 / safe_dx))
    k2 = np.where(along_x, 0.0, dx / safe_dy)
    half = np.where(along_x, np.inf, width / np.abs(safe_dy))
    r = np.sqrt(r2)
    body_y0 = np.select([length2 == 0, along_y, along_x], [np.inf, np.minimum(a[:, 1], b[:, 1]), a[:, 1] - r],
                        -np.inf)
    body_y1 = np.select([length2 == 0, along_y, along_x], [-np.inf, np.maximum(a[:, 1], b[:, 1]), a[:, 1] + r],
                        np.inf)
    return np.stack([a[:, 0], a[:, 1], b[:, 0], b[:, 1], k1, p_lo, p_hi, k2, half, body_y0, body_y1])


def _capsule_spans(constants: np.ndarray, y: np.ndarray, r2: float) -> tuple[np.ndarray, np.ndarray]:
    """For each segment (a column of ``_segment_constants``) and row y[i]: the x range [lo, hi] of points on the row
    within sqrt(``r2``) of the segment (lo > hi when none): the hull of the spans of its two end discs and body."""
    ax, ay, bx, by, k1, p_lo, p_hi, k2, half, body_y0, body_y1 = constants
    lo = np.full(len(y), np.inf)
    hi = np.full(len(y), -np.inf)
    for x, h2 in ((ax, r2 - (y - ay) ** 2), (bx, r2 - (y - by) ** 2)):
        inside = h2 >= 0
        h = np.sqrt(np.where(inside, h2, 0.0))
        lo = np.where(inside, np.minimum(lo, x - h), lo)
        hi = np.where(inside, np.maximum(hi, x + h), hi)
    ry = y - ay
    along = -ry * k1
    across = ry * k2
    u_lo, u_hi = np.maximum(along + p_lo, across - half), np.minimum(along + p_hi, across + half)
    body = (y >= body_y0) & (y <= body_y1) & (u_lo <= u_hi)
    return np.where(body, np.minimum(lo, ax + u_lo), lo), np.where(body, np.maximum(hi, ax + u_hi), hi)


def stroke_from_view_mask(view_mask: np.ndarray, height: int, width: int) -> np.ndarray:
    """A stroke drawn on a scaled view (bool or non-zero = painted), mapped to the full ``height`` x ``width``.

    Nearest-neighbour on pixel centres: full pixel (r, c) takes view pixel (floor((r + 0.5) * h / H),
    floor((c + 0.5) * w / W)), so with an integer scale each view pixel covers exactly its block of full pixels.

    Raises:
        InputError: not a 2-D array, or a view whose aspect ratio differs from the image's by more than rounding.
    """
    _check_size(height, width)
    view = np.asarray(view_mask)
    if view.ndim != 2 or view.shape[0] == 0 or view.shape[1] == 0:
        raise InputError(f"a view stroke must be a non-empty 2-D mask (h, w); got shape {view.shape}")
    h, w = view.shape
    if abs(round(height * w / width) - h) > 1:
        raise InputError(
            f"the painted layer is {w}x{h} but the image is {width}x{height}: the view must show the whole image "
            "at one scale (same aspect ratio)"
        )
    rows = np.minimum(((np.arange(height) + 0.5) * h / height).astype(np.int64), h - 1)
    cols = np.minimum(((np.arange(width) + 0.5) * w / width).astype(np.int64), w - 1)
    return (view != 0)[rows[:, None], cols[None, :]]


def stroke_from_editor(value: Any, height: int, width: int) -> np.ndarray:
    """The strokes of a Gradio ``ImageEditor`` value, at the image's full resolution.

    Args:
        value: ``{"background": ..., "layers": [...], "composite": ...}`` with RGBA uint8 arrays (h, w, 4) or PIL
            images, at the size the editor showed; a pixel is painted where any layer's alpha is above 0.
        height, width: the full image size.

    Returns:
        bool (height, width).

    Raises:
        InputError: not an editor value, no layer, a layer without alpha or of another size, nothing painted.
    """
    if not isinstance(value, dict) or "layers" not in value:
        raise InputError("expected the ImageEditor value: a dict with 'background', 'layers' and 'composite'")
    layers = [np.asarray(layer) for layer in (value.get("layers") or []) if layer is not None]
    if not layers:
        raise InputError("nothing was painted: draw on the image with the brush first")
    painted = None
    for layer in layers:
        if layer.ndim != 3 or layer.shape[2] != 4:
            raise InputError(f"an editor layer must be RGBA (h, w, 4); got shape {layer.shape}")
        alpha = layer[..., 3] > 0
        if painted is not None and alpha.shape != painted.shape:
            raise InputError(f"editor layers differ in size: {alpha.shape} and {painted.shape}")
        painted = alpha if painted is None else painted | alpha
    if not painted.any():
        raise InputError("nothing was painted: draw on the image with the brush first")
    return stroke_from_view_mask(painted, height, width)
