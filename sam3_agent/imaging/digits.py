"""The digits of mask numbers, drawn the same way by every installation (``text_size``, ``draw_digits``).

A trace stores recipes, not pixels, and draws its views again when it is opened; that is only honest if the
renderer gives the same pixels wherever it runs. OpenCV's text does not: its Hershey font changed size between
4.x, 5.0 and 5.1 (``getTextSize("12", FONT_HERSHEY_SIMPLEX, 0.6, 1)``: (25, 14) on 4.13, (23, 16) on 5.1), which moved
every label of every overlay. Font rendering through Pillow depends on the FreeType it was built with. So the
digits are strokes of our own, rasterised here with numpy: a pixel's ink is its distance to the nearest stroke
(an anti-aliased round pen), computed with IEEE arithmetic only, and quantised to 64 levels.

Hand-written because no maintained library draws text with pixels fixed across its own releases; only digits
are needed (labels are mask numbers).

Geometry, in pixels, for a size unit ``scale`` (the old Hershey scale, so label sizes stay what they were tuned to):
  * a digit is ``DIGIT_HEIGHT * scale`` tall (the pen's centre line) and ``DIGIT_WIDTH * scale`` wide; digits are
    ``DIGIT_GAP * scale`` apart; the pen is ``thickness`` px wide;
  * ``text_size`` is the ink's box: the centre lines plus half the pen on every side.
"""

from __future__ import annotations

import functools
import math

import numpy as np

DIGIT_HEIGHT = 21.0  # px per unit of scale: the cap height of OpenCV's Hershey simplex digits, which labels were tuned to
DIGIT_WIDTH = 11.0  # px per unit of scale: about 0.52 of the height, as in common sans-serif digits
DIGIT_GAP = 4.0  # px per unit of scale between two digits
_LEVELS = 64  # ink coverage is quantised to 1/64 and blended in integers

Polyline = tuple[tuple[float, float], ...]


def _ellipse(cx: float, cy: float, rx: float, ry: float, steps: int = 20) -> Polyline:
    return tuple((cx + rx * math.sin(2 * math.pi * k / steps), cy - ry * math.cos(2 * math.pi * k / steps))
                 for k in range(steps + 1))


def _turned(lines: tuple[Polyline, ...]) -> tuple[Polyline, ...]:
    """The glyph turned by 180 degrees (a 9 from a 6)."""
    return tuple(tuple((1.0 - x, 1.0 - y) for x, y in line) for line in lines)


# Centre lines in a unit cell: x from the left (0..1 of the width), y from the top (0..1 of the height).
_SIX: tuple[Polyline, ...] = (
    ((0.92, 0.12), (0.7, 0.01), (0.45, 0.0), (0.2, 0.1), (0.05, 0.32), (0.0, 0.6), (0.04, 0.82), (0.2, 0.97),
     (0.5, 1.0), (0.8, 0.96), (0.97, 0.8), (0.98, 0.63), (0.85, 0.47), (0.55, 0.4), (0.25, 0.44), (0.06, 0.58)),
)
GLYPHS: dict[str, tuple[Polyline, ...]] = {
    "0": (_ellipse(0.5, 0.5, 0.5, 0.5),),
    "1": (((0.15, 0.22), (0.58, 0.0), (0.58, 1.0)),),
    "2": (((0.02, 0.24), (0.15, 0.07), (0.45, 0.0), (0.78, 0.05), (0.97, 0.24), (0.93, 0.43), (0.72, 0.6),
           (0.0, 1.0), (1.0, 1.0)),),
    "3": (((0.04, 0.1), (0.35, 0.0), (0.7, 0.02), (0.92, 0.15), (0.9, 0.33), (0.7, 0.44), (0.4, 0.47)),
          ((0.7, 0.5), (0.93, 0.62), (0.98, 0.8), (0.82, 0.96), (0.5, 1.0), (0.2, 0.97), (0.0, 0.87)),
          ((0.4, 0.47), (0.7, 0.5))),
    "4": (((0.78, 1.0), (0.78, 0.0), (0.0, 0.7), (1.0, 0.7)),),
    "5": (((0.92, 0.0), (0.12, 0.0), (0.06, 0.46), (0.35, 0.38), (0.7, 0.4), (0.93, 0.55), (0.98, 0.76),
           (0.83, 0.95), (0.5, 1.0), (0.2, 0.97), (0.0, 0.86)),),
    "6": _SIX,
    "7": (((0.0, 0.0), (1.0, 0.0), (0.35, 1.0)),),
    "8": (_ellipse(0.5, 0.245, 0.42, 0.245), _ellipse(0.5, 0.735, 0.5, 0.265)),
    "9": _turned(_SIX),
}


def _digits_of(text: str) -> str:
    if not text or any(ch not in GLYPHS for ch in text):
        raise ValueError(f"only the digits 0-9 can be drawn as a label; got {text!r}")
    return text


def _centre_box(count: int, scale: float) -> tuple[float, float]:
    """Width and height (px) of the centre lines of ``count`` digits."""
    return (count * DIGIT_WIDTH + (count - 1) * DIGIT_GAP) * scale, DIGIT_HEIGHT * scale


@functools.lru_cache(maxsize=4096)
def text_size(text: str, scale: float, thickness: int) -> tuple[int, int]:
    """Width and height (px) of the ink of ``text`` drawn by ``draw_digits`` at ``scale`` with a ``thickness`` px pen.

    Raises:
        ValueError: when ``text`` is empty or holds anything but the digits 0-9.
    """
    width, height = _centre_box(len(_digits_of(text)), scale)
    return math.ceil(width + thickness), math.ceil(height + thickness)


def _segments(text: str, scale: float, thickness: int) -> np.ndarray:
    """float64 (S, 4): every stroke segment ``x0, y0, x1, y1`` in px, relative to the ink box's top-left corner."""
    pen = thickness / 2.0
    rows = []
    for i, ch in enumerate(text):
        left = pen + i * (DIGIT_WIDTH + DIGIT_GAP) * scale
        for line in GLYPHS[ch]:
            points = [(left + x * DIGIT_WIDTH * scale, pen + y * DIGIT_HEIGHT * scale) for x, y in line]
            rows.extend((*a, *b) for a, b in zip(points[:-1], points[1:]))
    return np.array(rows, dtype=np.float64)


@functools.lru_cache(maxsize=1024)
def ink_coverage(text: str, scale: float, thickness: int) -> np.ndarray:
    """The ink of ``text`` over its ``text_size`` box: uint8 (h, w), 0 (none) to 64 (full), read-only.

    A pixel's coverage is ``clip(thickness / 2 + 0.5 - d, 0, 1)`` of its centre's distance ``d`` (px) to the
    nearest stroke, rounded to 1/64.

    Raises:
        ValueError: when ``text`` is empty or holds anything but the digits 0-9.
    """
    width, height = text_size(text, scale, thickness)
    seg = _segments(text, scale, thickness)
    ys, xs = np.mgrid[0:height, 0:width]
    px = xs.reshape(-1, 1) + 0.5
    py = ys.reshape(-1, 1) + 0.5
    x0, y0, x1, y1 = (seg[:, k][None, :] for k in range(4))
    dx, dy = x1 - x0, y1 - y0
    length2 = dx * dx + dy * dy
    t = np.where(length2 > 0, ((px - x0) * dx + (py - y0) * dy) / np.where(length2 > 0, length2, 1.0), 0.0)
    t = np.clip(t, 0.0, 1.0)
    ex, ey = px - (x0 + t * dx), py - (y0 + t * dy)
    distance = np.sqrt((ex * ex + ey * ey).min(axis=1))
    coverage = np.clip(thickness / 2.0 + 0.5 - distance, 0.0, 1.0)
    levels = np.floor(coverage * _LEVELS + 0.5).astype(np.uint8).reshape(height, width)
    levels.flags.writeable = False
    return levels


def draw_digits(out: np.ndarray, text: str, origin: tuple[int, int], scale: float, thickness: int,
                ink: tuple[int, int, int]) -> None:
    """Draw ``text`` (digits only) on ``out`` (uint8 (H, W, 3) RGB, in place) with the top-left corner of its ink box
    (``text_size``) at ``origin`` ``(x, y)`` px; the part outside ``out`` is clipped.

    Each pixel becomes ``(p * (64 - a) + ink * a + 32) // 64`` for its coverage ``a`` (``ink_coverage``).

    Raises:
        ValueError: when ``text`` is empty or holds anything but the digits 0-9.
    """
    coverage = ink_coverage(text, scale, thickness)
    x, y = origin
    h, w = coverage.shape
    ox0, oy0 = max(x, 0), max(y, 0)
    ox1, oy1 = min(x + w, out.shape[1]), min(y + h, out.shape[0])
    if ox1 <= ox0 or oy1 <= oy0:
        return
    a = coverage[oy0 - y:oy1 - y, ox0 - x:ox1 - x].astype(np.uint16)[..., None]
    region = out[oy0:oy1, ox0:ox1]
    colour = np.asarray(ink, dtype=np.uint16)
    region[:] = ((region.astype(np.uint16) * (_LEVELS - a) + colour * a + _LEVELS // 2) // _LEVELS).astype(np.uint8)
