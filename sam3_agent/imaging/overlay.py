"""The numbered overlay, what the model sees after each phrase: every mask filled, outlined and numbered, at full
size (``render_numbered_overlay``) or shrunk for a page (``render_overlay_scaled``); ``draw_numbered`` draws masks
held as regions (the overlay's, or a tile's: ``tiles``)."""

from __future__ import annotations

import logging

import cv2
import numpy as np
from PIL import Image

from .. import rle
from ..mask_set import Masks
from .draw import DrawStyle, draw_contour, draw_fill, draw_label, draw_leader, mask_colors
from .labels import label_numbers, labels_of_regions
from .legibility import DEFAULT_BOUNDS, PixelBounds
from .regions import MaskRegions, MaskSource

logger = logging.getLogger(__name__)


def _as_rgb_array(image: Image.Image) -> np.ndarray:
    if not isinstance(image, Image.Image):
        raise TypeError(f"image must be a PIL image; got {type(image).__name__}")
    rgb = image if image.mode == "RGB" else image.convert("RGB")
    return np.array(rgb, dtype=np.uint8)  # a writable copy


def render_numbered_overlay(image: Image.Image, masks: MaskSource, numbers: list[int] | None = None,
                            bounds: PixelBounds = DEFAULT_BOUNDS) -> Image.Image:
    """The image with every mask filled, outlined and numbered (what the model sees).

    Mask k (0-based) gets colour ``mask_colors(N)[k]``; fills are blended in order, then all
    contours are painted, then the leader lines of labels placed beside their mask, then all labels (so no
    label is covered). Labels go where ``labels.overlay_labels`` puts them, in its font size: the number in
    black or white (whichever contrasts with the mask colour) on a box filled with the solid mask colour and
    edged in the text colour.

    Args:
        image: PIL image (converted to RGB if needed), W x H.
        masks: bool (N, H, W) at the image's resolution, or ``Masks`` (each decoded once, box region only kept).
        numbers: the label of each mask; default ``1..N``.
        bounds: the pixel bounds of the VLM that will see it: the labels are sized for the size it sees.

    Returns:
        A new RGB image of the same size; a copy of the image when N = 0.

    Raises:
        ValueError: when the masks do not match the image size or ``numbers`` has the wrong length.
    """
    out = _as_rgb_array(image)
    height, width = out.shape[:2]
    style = DrawStyle.for_size(width, height)
    draw_numbered(out, MaskRegions(masks, height, width, style.contour_width + 1), numbers, style, bounds)
    return Image.fromarray(out)


def draw_numbered(out: np.ndarray, regions: MaskRegions, numbers: list[int] | None, style: DrawStyle,
                  bounds: PixelBounds = DEFAULT_BOUNDS, colors: np.ndarray | None = None,
                  labelled: list[bool] | None = None) -> None:
    """Fills, then contours, then leader lines, then labels of every mask of ``regions`` on ``out`` (uint8
    (H, W, 3) RGB, in place; see ``render_numbered_overlay``); outlines in ``style``, labels in the style
    ``labels.label_style`` picks for ``bounds``.

    Args:
        numbers: the label of each mask; default ``1..N``.
        colors: uint8 (N, 3) RGB, one per mask; default ``mask_colors(N)``.
        labelled: which masks get a label (default: all); the others are filled and outlined only.
    """
    n = regions.count
    labels = label_numbers(numbers, n)
    placed = labels_of_regions(regions, labels, bounds, labelled)
    if n == 0:
        return
    colors = mask_colors(n) if colors is None else colors
    nonempty = [k for k in range(n) if not regions.empty(k)]
    for k in nonempty:
        draw_fill(out, regions.box_crop(k), colors[k], regions.boxes[k])
    for k in nonempty:
        crop, (x0, y0, _, _) = regions.region(k)
        draw_contour(out, crop, colors[k], (x0, y0), style.contour_width)
    shown = [(k, p) for k, p in enumerate(placed.placements) if p is not None]
    for k, placement in shown:
        if placement.leader:
            draw_leader(out, placement.box, placement.anchor, colors[k], style)
    for k, placement in shown:
        draw_label(out, placement.box, str(labels[k]), colors[k], placed.style)
    if len(nonempty) < n:
        logger.warning("numbered view: %d empty mask(s) left undrawn", n - len(nonempty))


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
    draw_numbered(out, MaskRegions.from_windows(windows, small_h, small_w, style.contour_width + 1), None, style)
    return Image.fromarray(out)

