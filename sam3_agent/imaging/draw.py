"""Drawing primitives shared by every view: mask colours, the translucent fill, the contour, the label box, and the
line and text sizes of an image (``DrawStyle``).

Everything is drawn with numpy and OpenCV on ``uint8 (H, W, 3)`` RGB arrays, in place, over one mask's box only.

Drawing rules, shared by every view (change ``views.RENDERER_VERSION`` whenever a change here changes a pixel):
  * fill: inside the mask, each pixel becomes ``(p * (256 - w) + c * w + 128) >> 8`` with
    ``w = round(FILL_ALPHA * 256)`` (integer alpha blend of pixel ``p`` and mask colour ``c``);
  * contour: an inner border of the mask, ``contour_width`` pixels wide, painted in the solid
    mask colour (it lies on mask pixels only, so pixels outside every mask stay unchanged);
  * labels (numbered overlay only): the number in black or white on a solid box of the mask's
    colour (placed and sized by ``labels``), its digits drawn by ``digits`` (not OpenCV's fonts, whose metrics
    change between releases); a label placed beside its mask is joined to it by a leader line.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import cv2
import numpy as np

from .digits import draw_digits, text_size

FILL_ALPHA = 0.45  # translucency of the mask fill: the image stays visible underneath
_FILL_WEIGHT = round(FILL_ALPHA * 256)  # 115: the blend weight out of 256


@dataclass(frozen=True)
class DrawStyle:
    """Line and text sizes for an image, scaled with its longer side ``s`` (pixels).

    Attributes:
        contour_width: px, ``max(1, round(s / 400))`` (1 px at 300 px, 10 px at 4000 px).
        font_scale: the digits' size unit (``digits``: 21 px of digit height per unit, the scale of OpenCV's
            Hershey font the sizes were first tuned with), ``max(0.6, s / 700)`` (digits about 13 px tall at
            300 px, about 120 px at 4000 px): the VLM sees images shrunk to its pixel budget, so
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


def _fill_table(color: np.ndarray) -> np.ndarray:
    """``blend_fill`` of every byte value per channel, as an OpenCV lookup table: uint8 (1, 256, 3)."""
    return _fill_table_of(tuple(int(c) for c in color))


@functools.lru_cache(maxsize=1024)
def _fill_table_of(color: tuple[int, int, int]) -> np.ndarray:
    table = blend_fill(np.repeat(np.arange(256, dtype=np.uint8)[:, None], 3, axis=1), color)[None]
    table.flags.writeable = False
    return table


def draw_fill(out: np.ndarray, inner: np.ndarray, color: np.ndarray, box: np.ndarray) -> None:
    """Blend ``color`` into ``out`` where ``inner`` (the mask over its tight ``box``) is set (``blend_fill``, done
    as a table lookup over the box and an OpenCV masked copy: far faster than numpy's masked assignment)."""
    x0, y0, x1, y1 = (int(v) for v in box)
    region = out[y0:y1, x0:x1]
    cv2.copyTo(cv2.LUT(region, _fill_table(color)), np.ascontiguousarray(inner).view(np.uint8), region)


def draw_contour(out: np.ndarray, crop: np.ndarray, color: np.ndarray, origin: tuple[int, int], width: int) -> None:
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


def draw_label(out: np.ndarray, box: tuple[int, int, int, int], text: str, color: np.ndarray, style: DrawStyle) -> None:
    """Paint a label on ``out`` (uint8 (H, W, 3) RGB, in place): ``box`` ``(x0, y0, x1, y1)`` px (x1/y1 exclusive)
    filled with the solid mask ``color`` and edged in the text colour, ``text`` centred in it in black or white,
    whichever contrasts more with ``color``; line and text sizes from ``style``."""
    x0, y0, x1, y1 = box
    ink = _text_color(color)
    out[y0:y1, x0:x1] = color
    edge = max(1, style.text_thickness // 2)
    cv2.rectangle(out, (x0, y0), (x1 - 1, y1 - 1), ink, edge, lineType=cv2.LINE_8)
    tw, th = text_size(text, style.font_scale, style.text_thickness)
    draw_digits(out, text, (x0 + (x1 - x0 - tw) // 2, y0 + (y1 - y0 - th) // 2), style.font_scale,
                style.text_thickness, ink)


def draw_leader(out: np.ndarray, box: tuple[int, int, int, int], anchor: tuple[int, int], color: np.ndarray,
                style: DrawStyle) -> None:
    """A leader line from a label ``box`` to its mask's ``anchor`` point (x, y) px: the mask colour, ``contour_width``
    px wide, edged in the contrasting ink so it shows on any photo, ending in a dot on the mask. Drawn before the
    labels, so its part inside the box is covered by the label."""
    x0, y0, x1, y1 = box
    start = ((x0 + x1) // 2, (y0 + y1) // 2)
    width = max(1, style.contour_width)
    ink = _text_color(color)
    paint = tuple(int(c) for c in color)
    cv2.line(out, start, anchor, ink, width + 2, lineType=cv2.LINE_8)
    cv2.circle(out, anchor, width + 2, ink, -1, lineType=cv2.LINE_8)
    cv2.line(out, start, anchor, paint, width, lineType=cv2.LINE_8)
    cv2.circle(out, anchor, width + 1, paint, -1, lineType=cv2.LINE_8)
