"""Tiles: the extra view of a dense mask set, an opt-in (``AgentConfig.dense_tiles``, ``--dense-tiles``: a main
request then holds six images instead of the reference agent's two; the default keeps two and draws the dense overlay
larger instead, ``enlarged``). The photo cut into four overlapping quarters, each drawn enlarged with its masks in the
overlay's colours and numbers, so a model that cannot make out a crowded overlay's small labels and small masks reads
them in a part of the photo it sees larger.

When (with the opt-in): a set is shown in tiles when its overlay is ``labels.crowded``: its labels, at the size where
the VLM reads them, would cover more than ``labels.LABEL_AREA_SHARE`` of the photo, so the overlay draws them smaller.
On the real photos of the benchmark that is the case at 100 and 200 masks, not at 50
(``python -m sam3_agent.bench.labels``).

Geometry (``tile_layouts``), reading order top left, top right, bottom left, bottom right:

- each tile reaches ``TILE_MARGIN`` of the photo's side past the middle, so the tiles overlap in a band an eighth
  of the photo wide and tall, and any mask at most that wide and tall lies whole in at least one tile;
- each tile is drawn at the pixel count the VLM sees the whole overlay at (``legibility.seen_scale`` under its
  ``PixelBounds``), so the VLM sees each tile at its drawn size, one tile costs as many image tokens as the
  overlay, and the tile shows its part 16/9 (about 1.8) times larger, linearly, than the overlay does.

Drawing (``render_tile``): the photo's part resized (OpenCV: area average when shrinking, bicubic when enlarging);
every mask that touches the tile filled and outlined in its overlay colour (a mask cut by the tile's edge is outlined
along it); a mask is numbered, with its overlay number, in every tile that shows all of it, or, when none does, in
the tile that shows most of it (the first such tile on a tie), so every mask is numbered in at least one tile. The
labels are placed and sized as on the overlay (``labels``), for the tile.

Hand-written: cutting and scaling a photo into tiles is a few lines of OpenCV; the masks stay RLE and only each
mask's part inside a tile is decoded (``rle.decode_window``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np
from PIL import Image

from .. import rle
from ..limits import DENSE_VIEW_TILES
from ..mask_set import Masks
from .draw import DrawStyle, mask_colors
from .labels import OverlayLabels, crowded, labels_of_regions
from .legibility import DEFAULT_BOUNDS, PixelBounds, seen_scale
from .overlay import draw_numbered
from .regions import MaskRegions
from .resample import resize_photo

TILE_MARGIN = 1 / 16  # each tile reaches this share of the photo's side past the middle: an overlap of 1/8
TILE_PLACES = ("top left", "top right", "bottom left", "bottom right")  # the tiles' order, as the model is told
if len(TILE_PLACES) != DENSE_VIEW_TILES:  # the grid is 2 x 2: limits.DENSE_VIEW_TILES counts its images
    raise ImportError(f"limits.DENSE_VIEW_TILES is {DENSE_VIEW_TILES}; the tile grid has {len(TILE_PLACES)} tiles")


@dataclass(frozen=True)
class TileLayout:
    """Where one tile lies on the photo and how large it is drawn.

    Attributes:
        box: ``(x0, y0, x1, y1)`` ints, photo pixels, x1/y1 exclusive.
        size: ``(width, height)`` ints, the drawn tile's pixels.
        scale: drawn pixels per photo pixel (the same for all four tiles).
    """

    box: tuple[int, int, int, int]
    size: tuple[int, int]
    scale: float


def tile_span(side: int) -> int:
    """The extent (px) of a tile along a photo side of ``side`` px: half of it plus ``TILE_MARGIN`` of it, rounded
    up, at most the side."""
    return min(side, math.ceil(side * (0.5 + TILE_MARGIN)))


def tile_layouts(width: int, height: int, bounds: PixelBounds = DEFAULT_BOUNDS) -> list[TileLayout]:
    """The four tiles of a ``width`` x ``height`` photo, in ``TILE_PLACES`` order (see the module docstring).

    Raises:
        ValueError: a side below 1 px.
    """
    if width < 1 or height < 1:
        raise ValueError(f"a photo of {width}x{height} px has no tiles")
    span_x, span_y = tile_span(width), tile_span(height)
    seen_pixels = width * height * seen_scale(width, height, bounds) ** 2  # the overlay's pixel count as seen
    scale = math.sqrt(seen_pixels / (span_x * span_y))
    size = (max(1, math.floor(span_x * scale)), max(1, math.floor(span_y * scale)))  # never above the overlay's count
    return [TileLayout((x0, y0, x0 + span_x, y0 + span_y), size, scale)
            for y0 in (0, height - span_y) for x0 in (0, width - span_x)]


def shows_tiles(width: int, height: int, count: int, bounds: PixelBounds = DEFAULT_BOUNDS) -> bool:
    """True when ``count`` masks on a ``width`` x ``height`` photo are also shown in tiles (``labels.crowded``)."""
    return crowded(width, height, count, bounds)


def _inside(box: np.ndarray, tile: tuple[int, int, int, int]) -> bool:
    return tile[0] <= box[0] and tile[1] <= box[1] and box[2] <= tile[2] and box[3] <= tile[3]


def _overlap(box: np.ndarray, tile: tuple[int, int, int, int]) -> tuple[int, int, int, int] | None:
    x0, y0 = max(int(box[0]), tile[0]), max(int(box[1]), tile[1])
    x1, y1 = min(int(box[2]), tile[2]), min(int(box[3]), tile[3])
    return (x0, y0, x1, y1) if x1 > x0 and y1 > y0 else None


def numbered_tiles(masks: Masks, layouts: list[TileLayout]) -> list[list[bool]]:
    """Which tile numbers which mask: ``result[t][k]`` is True when tile ``t`` shows all of mask ``k``, or, for a
    mask that no tile shows whole, when ``t`` is the first of the tiles that show the most of its pixels. Empty
    masks are numbered nowhere.

    Returns:
        ``len(layouts)`` lists of ``len(masks)`` bools.
    """
    result = [[False] * len(masks) for _ in layouts]
    for k, box in enumerate(masks.tight_boxes):
        if box[2] <= box[0]:
            continue
        whole = [t for t, layout in enumerate(layouts) if _inside(box, layout.box)]
        if not whole:
            shown = []
            for layout in layouts:
                part = _overlap(box, layout.box)
                shown.append(int(rle.decode_window(masks.counts[k], masks.height, part).sum()) if part else 0)
            whole = [int(np.argmax(shown))]
        for t in whole:
            result[t][k] = True
    return result


def _window(masks: Masks, k: int, part: tuple[int, int, int, int], layout: TileLayout) -> tuple[int, int, np.ndarray]:
    """Mask ``k`` over ``part`` (photo px, inside the tile) as a window ``(x0, y0, bool crop)`` of the drawn tile: a
    shrunk pixel is set when at least half the pixels it covers are (a thin mask that would vanish keeps every
    pixel it touches); an enlarged mask is interpolated linearly and cut at one half."""
    tx0, ty0 = layout.box[:2]
    x0, y0 = round((part[0] - tx0) * layout.scale), round((part[1] - ty0) * layout.scale)
    x1 = min(layout.size[0], max(x0 + 1, round((part[2] - tx0) * layout.scale)))
    y1 = min(layout.size[1], max(y0 + 1, round((part[3] - ty0) * layout.scale)))
    x0, y0 = min(x0, x1 - 1), min(y0, y1 - 1)
    pixels = rle.decode_window(masks.counts[k], masks.height, part).view(np.uint8) * np.uint8(255)
    shrink = layout.scale < 1
    sized = cv2.resize(pixels, (x1 - x0, y1 - y0), interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR)
    half = sized >= 128
    return x0, y0, half if half.any() else sized > 0


@dataclass(frozen=True)
class TileMasks:
    """The masks one tile shows, ready to draw: their windows on the drawn tile, their overlay indices (0-based)
    and whether the tile numbers each (``numbered_tiles``)."""

    regions: MaskRegions
    indices: list[int]
    numbered: list[bool]


def tile_masks(masks: Masks, layouts: list[TileLayout], tile: int, style: DrawStyle) -> TileMasks:
    """The masks of ``layouts[tile]`` (``TileMasks``); regions padded for ``style``'s contour."""
    layout = layouts[tile]
    numbered = numbered_tiles(masks, layouts)[tile]
    windows, indices = [], []
    for k, box in enumerate(masks.tight_boxes):
        part = _overlap(box, layout.box)
        window = _window(masks, k, part, layout) if part is not None else None
        if window is not None and window[2].any():  # its box may reach into the tile where its pixels do not
            windows.append(window)
            indices.append(k)
    regions = MaskRegions.from_windows(windows, layout.size[1], layout.size[0], style.contour_width + 1)
    return TileMasks(regions, indices, [numbered[k] for k in indices])


def _checked(image: Image.Image, masks: Masks, tile: int) -> None:
    if not isinstance(image, Image.Image):
        raise TypeError(f"image must be a PIL image; got {type(image).__name__}")
    if masks.size != (image.height, image.width):
        raise ValueError(f"masks of {masks.width}x{masks.height} do not match the {image.width}x{image.height} photo")
    if not 0 <= tile < len(TILE_PLACES):
        raise ValueError(f"tile {tile!r} is out of range: a photo has {len(TILE_PLACES)} tiles (0 to "
                         f"{len(TILE_PLACES) - 1})")


def render_tile(image: Image.Image, masks: Masks, tile: int, bounds: PixelBounds = DEFAULT_BOUNDS) -> Image.Image:
    """Tile ``tile`` (0-based, ``TILE_PLACES`` order) of the numbered overlay of ``masks`` on ``image``, drawn at
    the size the VLM with pixel ``bounds`` sees it (see the module docstring).

    Args:
        image: PIL image (converted to RGB if needed), W x H.
        masks: the overlay's masks, numbered 1..N, at the image's size.
        tile: 0 to 3.
        bounds: the VLM's pixel bounds.

    Returns:
        A new RGB image of ``tile_layouts(W, H, bounds)[tile].size``.

    Raises:
        ValueError: masks of another size than the photo, or a tile out of range.
    """
    _checked(image, masks, tile)
    layouts = tile_layouts(image.width, image.height, bounds)
    layout = layouts[tile]
    rgb = image if image.mode == "RGB" else image.convert("RGB")
    part = np.asarray(rgb.crop(layout.box), dtype=np.uint8)
    out = resize_photo(part, layout.size)
    style = DrawStyle.for_size(*layout.size)
    shown = tile_masks(masks, layouts, tile, style)
    draw_numbered(out, shown.regions, [k + 1 for k in shown.indices], style, bounds,
                  mask_colors(len(masks))[shown.indices], shown.numbered)
    return Image.fromarray(out)


def tile_labels(masks: Masks, tile: int, bounds: PixelBounds = DEFAULT_BOUNDS) -> tuple[OverlayLabels, TileLayout]:
    """Where ``render_tile`` puts the labels of tile ``tile`` (its placements in drawn-tile px, one per mask the
    tile shows, ``None`` for one it does not number), and the tile's layout: what the legibility benchmark
    measures.

    Raises:
        ValueError: a tile out of range.
    """
    if not 0 <= tile < len(TILE_PLACES):
        raise ValueError(f"tile {tile!r} is out of range")
    layouts = tile_layouts(masks.width, masks.height, bounds)
    style = DrawStyle.for_size(*layouts[tile].size)
    shown = tile_masks(masks, layouts, tile, style)
    return labels_of_regions(shown.regions, [k + 1 for k in shown.indices], bounds, shown.numbered), layouts[tile]
