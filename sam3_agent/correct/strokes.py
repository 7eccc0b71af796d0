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
    is painted when its centre lies within that radius of the polyline. Parts outside the image are clipped (a
    warning is logged).

    Returns:
        bool (height, width).

    Raises:
        InputError: no point, non-positive radius or scale, non-finite values, or no painted pixel inside the image.
    """
    _check_size(height, width)
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
    full = (pts + 0.5) / view_scale - 0.5
    r = radius / view_scale
    out = np.zeros((height, width), dtype=bool)
    segments = list(zip(full[:-1], full[1:])) or [(full[0], full[0])]
    for a, b in segments:
        x0, x1 = max(int(np.floor(min(a[0], b[0]) - r)), 0), min(int(np.ceil(max(a[0], b[0]) + r)) + 1, width)
        y0, y1 = max(int(np.floor(min(a[1], b[1]) - r)), 0), min(int(np.ceil(max(a[1], b[1]) + r)) + 1, height)
        if x0 >= x1 or y0 >= y1:
            continue
        xs, ys = np.meshgrid(np.arange(x0, x1, dtype=np.float64), np.arange(y0, y1, dtype=np.float64))
        d = b - a
        length2 = float(d @ d)
        t = np.zeros_like(xs) if length2 == 0 else np.clip(((xs - a[0]) * d[0] + (ys - a[1]) * d[1]) / length2, 0, 1)
        dist2 = (xs - a[0] - t * d[0]) ** 2 + (ys - a[1] - t * d[1]) ** 2
        out[y0:y1, x0:x1] |= dist2 <= r * r + 1e-9
    outside = (full[:, 0] - r < -0.5) | (full[:, 1] - r < -0.5) | (full[:, 0] + r > width - 0.5) | (
        full[:, 1] + r > height - 0.5)
    if not out.any():
        raise InputError("the brush stroke lies entirely outside the image: paint over the image")
    if outside.any():
        logger.warning("brush stroke runs past the image edge; the part outside was clipped")
    return out


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
