"""The overlay of a dense set drawn at the main VLM's pixel budget: legible numbers inside the two-image cap.

The reference agent's main request holds two images, the photo and the latest numbered overlay, and this product
keeps that cap by default (``limits.MAX_MAIN_IMAGES``). A dense set (``labels.crowded``: its labels, with digits
``labels.MIN_DIGIT_PX_SEEN`` px tall where the VLM sees them, would cover more than ``labels.LABEL_AREA_SHARE`` of the
photo) therefore gets no extra images; instead its one overlay is drawn larger, at the VLM's largest pixel count
(``PixelBounds.max_pixels``): a photo below that budget is enlarged (Pillow's bicubic, ``resample.resize_photo``)
with its masks, so the VLM sees the whole overlay at its budget and each label covers a smaller share of it. A photo
that already reaches the budget is shown as it is (the VLM shrinks it to the budget anyway). The four enlarged tiles
of ``tiles`` are the opt-in alternative (``AgentConfig.dense_tiles``: six images a request).

Size (``enlarged_layout``): the photo scaled by ``sqrt(max_pixels / (W * H))``, at most ``MAX_ENLARGEMENT`` times
per side (beyond that the enlarged photo shows no more detail, only larger digits), rounded down to whole pixels;
the layout is one ``tiles.TileLayout`` covering the whole photo, so the masks are resampled and drawn as a tile's
are and every mask is numbered. What it costs: one image at the budget, e.g. 980 Qwen3-VL tokens for a 640x427
photo instead of 260 (``python -m sam3_agent.bench.labels``'s main-request table); the four tiles cost 4 x 260 more.

Hand-written for the same reason as ``tiles``: a resize and the overlay's own drawing.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image

from ..mask_set import Masks
from .draw import DrawStyle, mask_colors
from .labels import OverlayLabels, labels_of_regions
from .legibility import DEFAULT_BOUNDS, PixelBounds
from .overlay import draw_numbered
from .resample import resize_photo
from .tiles import TileLayout, tile_masks

MAX_ENLARGEMENT = 4.0  # per side; a 160 x 107 photo under the default budget is drawn at 640 x 427, not 1226 x 818


def enlarged_layout(width: int, height: int, bounds: PixelBounds = DEFAULT_BOUNDS) -> TileLayout | None:
    """Where and how large a dense overlay of a ``width`` x ``height`` photo is drawn for a VLM with pixel
    ``bounds``: one layout covering the whole photo, or ``None`` when the photo already has at least
    ``bounds.max_pixels`` pixels (or would grow by less than one pixel a side): then it is drawn at its own size.

    Raises:
        ValueError: a side below 1 px.
    """
    if width < 1 or height < 1:
        raise ValueError(f"a photo of {width}x{height} px has no overlay")
    scale = min(MAX_ENLARGEMENT, math.sqrt(bounds.max_pixels / (width * height)))
    size = (math.floor(width * scale), math.floor(height * scale))
    if size[0] <= width or size[1] <= height:
        return None
    return TileLayout((0, 0, width, height), size, size[0] / width)


def _checked(image: Image.Image, masks: Masks) -> None:
    if not isinstance(image, Image.Image):
        raise TypeError(f"image must be a PIL image; got {type(image).__name__}")
    if masks.size != (image.height, image.width):
        raise ValueError(f"masks of {masks.width}x{masks.height} do not match the {image.width}x{image.height} photo")


def render_enlarged_overlay(image: Image.Image, masks: Masks, bounds: PixelBounds = DEFAULT_BOUNDS) -> Image.Image:
    """The numbered overlay of ``masks`` on ``image``, drawn at ``enlarged_layout``'s size (see the module
    docstring): the same masks, colours and numbers as ``overlay.render_numbered_overlay``, every mask numbered.

    Args:
        image: PIL image (converted to RGB if needed), W x H.
        masks: numbered 1..N, at the image's size.
        bounds: the main VLM's pixel bounds.

    Returns:
        A new RGB image of ``enlarged_layout(W, H, bounds).size``.

    Raises:
        ValueError: masks of another size than the photo, or a photo that is not enlarged under ``bounds``
            (``enlarged_layout`` is ``None``).
    """
    _checked(image, masks)
    layout = enlarged_layout(image.width, image.height, bounds)
    if layout is None:
        raise ValueError(f"a {image.width}x{image.height} photo is not enlarged under a budget of "
                         f"{bounds.max_pixels:,} px: draw its overlay at its own size")
    rgb = image if image.mode == "RGB" else image.convert("RGB")
    out = resize_photo(np.asarray(rgb, dtype=np.uint8), layout.size)
    style = DrawStyle.for_size(*layout.size)
    shown = tile_masks(masks, [layout], 0, style)
    draw_numbered(out, shown.regions, [k + 1 for k in shown.indices], style, bounds,
                  mask_colors(len(masks))[shown.indices], shown.numbered)
    return Image.fromarray(out)


def enlarged_labels(masks: Masks, bounds: PixelBounds = DEFAULT_BOUNDS) -> tuple[OverlayLabels, TileLayout]:
    """Where ``render_enlarged_overlay`` puts each label (drawn-overlay px) and its layout: what the legibility
    benchmark measures.

    Raises:
        ValueError: a photo that is not enlarged under ``bounds``.
    """
    layout = enlarged_layout(masks.width, masks.height, bounds)
    if layout is None:
        raise ValueError(f"a {masks.width}x{masks.height} photo is not enlarged under a budget of "
                         f"{bounds.max_pixels:,} px")
    style = DrawStyle.for_size(*layout.size)
    shown = tile_masks(masks, [layout], 0, style)
    return labels_of_regions(shown.regions, [k + 1 for k in shown.indices], bounds, shown.numbered), layout
