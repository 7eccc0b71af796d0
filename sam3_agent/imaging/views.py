"""Per-mask views and the recipes that draw views again: the photo with one mask drawn, the zoomed close-up of one
mask (the verifier's views until renderer 3, kept so older traces draw as they were, the zoom's enlarged crop
resampled as since renderer 5), and ``MaskView`` (which view of which mask or masks of which set: also the numbered
overlay (at the photo's size, or a dense one enlarged: ``enlarged``) and its tiles, and the verifier's views since
renderer 4, ``verify_views``, each drawn for the VLM's pixel bounds).

Every view is a pure function of the photo and the masks, so a trace stores ``MaskView`` recipes instead of pixels
and renders them again, identically, when it is opened (``RENDERER_VERSION`` is recorded with them: change it
whenever a change in ``imaging`` (``draw``, ``digits``, ``regions``, ``labels``, ``overlay``, ``enlarged``, ``tiles``,
``resample``, this module) changes a single pixel). An overlay's, a tile's and a verifier view's recipe also holds
the VLM's ``PixelBounds`` it was drawn for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import cv2
import numpy as np
from PIL import Image

from .. import rle
from ..mask_set import Masks
from ..messages import ImagePart, images_equal
from .draw import DrawStyle, draw_contour, draw_fill, mask_colors
from .enlarged import enlarged_layout, render_enlarged_overlay
from .legibility import DEFAULT_BOUNDS, PixelBounds
from .overlay import render_numbered_overlay
from .postprocess import boxes_from_masks
from .regions import MaskRegions, check_masks
from .resample import resize_photo
from .tiles import TILE_PLACES, render_tile
from .verify_views import draw_single, render_closeup_view, render_group_view, render_locate_view, zoom_box

ZOOM_MIN_LONG_SIDE = 384  # zoom crops are upscaled until their longer side reaches this (px)
ZOOM_SEPARATOR_WIDTH = 4  # px between the two halves of a zoom view
ZOOM_SEPARATOR_COLOR = (255, 255, 255)
# Recorded in saved traces next to the view recipes. 2: labels placed and sized for any count; 3: digits drawn by
# imaging.digits (the same pixels on every OpenCV version); 4: the verifier's views drawn at the processor's size
# (locate, closeup) and the group view (the overlay, tile, mask and zoom views are unchanged); 5: photo crops
# enlarged by ``resample.resize_photo`` (Pillow's bicubic: the same pixels on every CPU, which OpenCV's was not), in
# the zoom and close-up views and the tiles; 6: a dense set's overlay may be drawn enlarged to the VLM's pixel budget
# (``enlarged``, a recipe field: every view of renderer 5 draws the same pixels).
RENDERER_VERSION = 6


def _single_mask_view(image: Image.Image, regions: MaskRegions, k: int, color: np.ndarray) -> Image.Image:
    """The photo with mask ``k`` of ``regions`` drawn; only the mask's region is converted and pasted back."""
    out = image.copy() if image.mode == "RGB" else image.convert("RGB")
    if regions.empty(k):
        return out
    crop, (x0, y0, x1, y1) = regions.region(k)
    patch = np.array(out.crop((x0, y0, x1, y1)), dtype=np.uint8)
    bx0, by0, bx1, by1 = (int(v) for v in regions.boxes[k])
    draw_fill(patch, regions.box_crop(k), color, np.array([bx0 - x0, by0 - y0, bx1 - x0, by1 - y0]))
    draw_contour(patch, crop, color, (0, 0), DrawStyle.for_size(image.width, image.height).contour_width)
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
    regions = MaskRegions(arr, image.height, image.width, style.contour_width + 1)
    col = mask_colors(1)[0] if color is None else np.asarray(color, dtype=np.uint8)
    return _single_mask_view(image, regions, 0, col)


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
    return zoom_box(boxes_from_masks(arr[None])[0], arr.shape[0], arr.shape[1], margin, min_side)


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
        crop = resize_photo(crop, size)
        crop_mask = cv2.resize(crop_mask.astype(np.uint8), size, interpolation=cv2.INTER_NEAREST) > 0
        ch, cw = crop.shape[:2]
    canvas = np.empty((ch, 2 * cw + ZOOM_SEPARATOR_WIDTH, 3), dtype=np.uint8)
    canvas[:, :cw] = crop
    canvas[:, cw : cw + ZOOM_SEPARATOR_WIDTH] = ZOOM_SEPARATOR_COLOR
    drawn = canvas[:, cw + ZOOM_SEPARATOR_WIDTH :]
    drawn[:] = crop
    draw_single(drawn, np.ascontiguousarray(crop_mask), mask_colors(1)[0])  # drawn after upscaling: sharp
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
    arr = check_masks(mask, image.height, image.width)
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


ViewKind = Literal["overlay", "tile", "mask", "zoom", "locate", "closeup", "group"]
VIEW_KINDS: tuple[ViewKind, ...] = ("overlay", "tile", "mask", "zoom", "locate", "closeup", "group")
_ONE_MASK = ("mask", "zoom", "locate", "closeup")  # the kinds that show one mask (an ``index``)


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
            regions = MaskRegions(masks.subset([index]), image.height, image.width, style.contour_width + 1)
            out.append(_single_mask_view(image, regions, 0, mask_colors(1)[0]))
        else:
            box = zoom_box(masks.tight_boxes[index], image.height, image.width, 0.25, 64)
            out.append(_zoom_view(image, rle.decode_window(masks.counts[index], masks.height, box), box))
    return tuple(out)


@dataclass(frozen=True, eq=False)
class MaskView:
    """How to draw one view again from the photo and the masks (a ``messages.DerivedImage``).

    A saved trace stores this recipe (kind, which mask set, which mask, masks or tile, the pixel bounds) instead of
    the pixels.

    Attributes:
        kind: ``"overlay"`` (``render_numbered_overlay`` of every mask, numbered 1..N), ``"tile"``
            (``tiles.render_tile``: one enlarged quarter of that overlay, for a dense set); of mask ``index``:
            ``"mask"`` (``render_single_mask``), ``"zoom"`` (``render_zoom_view``), ``"locate"``
            (``verify_views.render_locate_view``) or ``"closeup"`` (``verify_views.render_closeup_view``); or
            ``"group"`` (``verify_views.render_group_view`` of masks ``indices``).
        photo: the raw image (RGB, original resolution).
        masks: the mask set, at the photo's size.
        index: 0-based mask of the one-mask kinds; ``None`` otherwise.
        tile: 0-based tile (``tiles.TILE_PLACES`` order) for ``"tile"``; ``None`` otherwise.
        bounds: the pixel bounds of the VLM the view is drawn for (an overlay's or tile's labels are sized for the
            size that VLM sees; a verifier view is drawn at the size its processor uses); recorded so a saved trace
            draws the view again identically. The ``"mask"`` and ``"zoom"`` views do not depend on them.
        indices: 0-based masks of a ``"group"`` view, distinct, in the order verified; ``None`` otherwise.
        enlarged: an ``"overlay"`` drawn at the VLM's pixel budget (``enlarged.render_enlarged_overlay``: a dense set
            within the two-image cap; a photo not enlarged under ``bounds``, which the agent never records so, is
            drawn at its own size); ``False`` for every other view, and for an overlay at the photo's size.

    Raises:
        ValueError: an unknown kind, or an index, indices or tile missing where needed, given where not, out of
            range or repeated.
    """

    kind: ViewKind
    photo: Image.Image
    masks: Masks
    index: int | None = None
    tile: int | None = None
    bounds: PixelBounds = DEFAULT_BOUNDS
    indices: tuple[int, ...] | None = None
    enlarged: bool = False

    def __post_init__(self) -> None:
        if self.kind not in VIEW_KINDS:
            raise ValueError(f"unknown view kind {self.kind!r}: expected one of {', '.join(VIEW_KINDS)}")
        per_mask = self.kind in _ONE_MASK
        if per_mask != (self.index is not None):
            raise ValueError(f"a {self.kind} view {'needs a' if per_mask else 'takes no'} mask index")
        if (self.kind == "tile") != (self.tile is not None):
            raise ValueError(f"a {self.kind} view {'needs a' if self.kind == 'tile' else 'takes no'} tile number")
        if (self.kind == "group") != (self.indices is not None):
            raise ValueError(f"a {self.kind} view {'needs' if self.kind == 'group' else 'takes no'} mask indices")
        for k in (self.index,) if self.indices is None else self.indices:
            if k is not None and not (isinstance(k, int) and 0 <= k < len(self.masks)):
                raise ValueError(f"mask index {k!r} is out of range for {len(self.masks)} masks")
        if self.indices is not None and (not self.indices or len(set(self.indices)) != len(self.indices)):
            raise ValueError(f"a group view needs distinct mask indices, got {list(self.indices)}")
        if self.tile is not None and not 0 <= self.tile < len(TILE_PLACES):
            raise ValueError(f"tile {self.tile} is out of range: there are {len(TILE_PLACES)} tiles")
        if not isinstance(self.bounds, PixelBounds):
            raise ValueError(f"bounds must be PixelBounds, got {type(self.bounds).__name__}")
        if not isinstance(self.enlarged, bool) or (self.enlarged and self.kind != "overlay"):
            raise ValueError(f"only an overlay is drawn enlarged, got enlarged={self.enlarged!r} for a {self.kind} view")

    def render(self) -> Image.Image:
        """The view's pixels."""
        if self.kind == "overlay" and self.enlarged and enlarged_layout(*self.photo.size, self.bounds) is not None:
            return render_enlarged_overlay(self.photo, self.masks, self.bounds)
        if self.kind == "overlay":
            return render_numbered_overlay(self.photo, self.masks, bounds=self.bounds)
        if self.kind == "tile":
            return render_tile(self.photo, self.masks, self.tile, self.bounds)  # type: ignore[arg-type]
        if self.kind == "locate":
            return render_locate_view(self.photo, self.masks, self.index, self.bounds)  # type: ignore[arg-type]
        if self.kind == "closeup":
            return render_closeup_view(self.photo, self.masks, self.index, self.bounds)  # type: ignore[arg-type]
        if self.kind == "group":
            return render_group_view(self.photo, self.masks, self.indices, self.bounds)  # type: ignore[arg-type]
        return _views_of(self.photo, self.masks, self.index, (self.kind,))[0]

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, MaskView)
            and self.kind == other.kind
            and self.index == other.index
            and self.tile == other.tile
            and self.indices == other.indices
            and self.bounds == other.bounds
            and self.enlarged == other.enlarged
            and self.masks == other.masks
            and (self.photo is other.photo or images_equal(self.photo, other.photo))
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        which = "" if self.index is None else f", mask {self.index + 1}"
        which += "" if self.tile is None else f", tile {self.tile + 1} ({TILE_PLACES[self.tile]})"
        which += "" if self.indices is None else ", masks " + ", ".join(str(k + 1) for k in self.indices)
        which += ", enlarged" if self.enlarged else ""
        return f"MaskView({self.kind}, {self.masks!r}{which})"


def view_part(name: str, view: MaskView) -> ImagePart:
    """A derived ``ImagePart`` named ``name``, rendered now (its pixels are needed at once) but holding only the
    recipe: a saved trace stores ``view``, and the pixels are rendered again when evicted and read."""
    return ImagePart(view.render(), name, view)
