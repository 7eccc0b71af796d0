"""The views a verifier gets, drawn at the size the VLM's image processor will use, so it resizes nothing and every
token carries drawn pixels:

- ``render_locate_view``: the whole photo, small (``LOCATE_PIXELS``, about 196 tokens), with one mask drawn: where
  the mask lies. The photo itself goes to the verifier at full size once per
  request, before any mask's views, so a round's verifications share it as a prefix.
- ``render_closeup_view``: the region around one mask, raw on the left and with the mask drawn on the right, each
  half's longer side ``CLOSEUP_SIDE`` px (small crops enlarged, large ones shrunk), at most about 290 tokens
  whatever the photo's size.
- ``render_group_view``: the photo at the size the processor sees it, with several masks drawn and numbered with
  their own numbers (verification in groups).

Sizes follow Qwen-VL's ``smart_resize`` (sides in whole tokens of ``TOKEN_SIDE`` px, pixel count within the
verifier's ``PixelBounds``, recorded in each view's recipe); ``processor_size`` repeats it here because imaging sits
below ``vlm`` (a test checks that the two agree). A backend with 28 px tokens (Qwen2.5-VL) resizes these views a
little, as it resizes every image.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections import OrderedDict

import cv2
import numpy as np
from PIL import Image

from .. import rle
from ..limits import DEFAULT_MIN_PIXELS
from ..mask_set import Masks
from .draw import DrawStyle, draw_contour, draw_fill, mask_colors
from .legibility import DEFAULT_BOUNDS, PixelBounds
from .overlay import render_numbered_overlay
from .regions import MaskRegions
from .resample import resize_photo

TOKEN_SIDE = 32  # px per image-token side of Qwen3-VL (16 px patches merged 2 x 2; vlm.image_fit.QWEN3_VL_TOKEN_SIDE)
CLOSEUP_SIDE = 384  # px, the longer side of each half of a close-up (the zoom view's enlargement before renderer 3)
CLOSEUP_SEPARATOR = 4  # px of white between the close-up's halves
SEPARATOR_COLOR = (255, 255, 255)
PAD_COLOR = (0, 0, 0)  # what fills a close-up half around a crop of another shape (vlm.image_fit pads likewise)
# Pixels of a locate view: 448 x 448 for a square photo, 196 tokens; enough to see where a mask lies in the photo,
# whose details come from the photo itself, sent at full size before the views. (Qwen3-VL's own minimum, 65,536 px,
# would give 64 tokens: a mask of a crowd would be a few pixels.) Kept within the VLM's bounds.
LOCATE_PIXELS = DEFAULT_MIN_PIXELS


def processor_size(width: int, height: int, bounds: PixelBounds = DEFAULT_BOUNDS) -> tuple[int, int]:
    """``(width, height)`` a Qwen-VL image processor resizes a ``width`` x ``height`` image to: sides rounded to whole
    ``TOKEN_SIDE`` px tokens, then scaled (aspect kept) until the pixel count lies within ``bounds``
    (transformers' ``smart_resize``)."""
    side, min_pixels, max_pixels = TOKEN_SIDE, bounds.min_pixels, bounds.max_pixels
    h_bar, w_bar = round(height / side) * side, round(width / side) * side
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(side, math.floor(height / beta / side) * side)
        w_bar = max(side, math.floor(width / beta / side) * side)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar, w_bar = math.ceil(height * beta / side) * side, math.ceil(width * beta / side) * side
    return w_bar, h_bar


def kept_size(width: int, height: int, bounds: PixelBounds = DEFAULT_BOUNDS) -> tuple[int, int]:
    """``processor_size`` applied until the size stays: the size the processor keeps as it is. One step suffices but
    for extreme shapes under small bounds, where raising the pixel count to the minimum can overshoot the maximum
    (a 772 x 4 canvas under 65,536 px bounds: 3584 x 32, which the processor would shrink to 2048 x 32)."""
    size = processor_size(width, height, bounds)
    for _ in range(16):  # each step shrinks an overshooting size; in practice at most two are needed
        again = processor_size(*size, bounds)
        if again == size:
            break
        size = again
    return size


def locate_size(width: int, height: int, bounds: PixelBounds = DEFAULT_BOUNDS) -> tuple[int, int]:
    """The size of a locate view of a ``width`` x ``height`` photo: aspect kept, whole tokens, the fewest pixels at
    or above ``LOCATE_PIXELS`` (brought within ``bounds``), as the processor keeps it."""
    pixels = min(max(LOCATE_PIXELS, bounds.min_pixels), bounds.max_pixels)
    beta = math.sqrt(pixels / (width * height))
    return kept_size(math.ceil(width * beta / TOKEN_SIDE) * TOKEN_SIDE,
                     math.ceil(height * beta / TOKEN_SIDE) * TOKEN_SIDE, bounds)


def zoom_box(box: np.ndarray, height: int, width: int, margin: float, min_side: int) -> tuple[int, int, int, int]:
    """The region around a mask's tight ``box`` (xyxy px) that close-ups show: each side ``ceil(box side * (1 + 2 *
    margin))``, at least ``min_side``, at most the image's, centred on the box and shifted inside the image.

    Raises:
        ValueError: an empty box.
    """
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


def draw_single(out: np.ndarray, mask: np.ndarray, color: np.ndarray) -> None:
    """Fill and outline ``mask`` (bool, the size of ``out``) on ``out`` in place, in the style of ``out``'s size."""
    height, width = out.shape[:2]
    style = DrawStyle.for_size(width, height)
    regions = MaskRegions(mask[None], height, width, style.contour_width + 1)
    if regions.empty(0):
        return
    crop, (x0, y0, _, _) = regions.region(0)
    draw_fill(out, regions.box_crop(0), color, regions.boxes[0])
    draw_contour(out, crop, color, (x0, y0), style.contour_width)


def _resized_mask(window: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``window`` (bool) resized to ``size`` (w, h): enlarged by nearest neighbour; shrunk by area, a pixel set when
    at least half of what it covers is, and a thin mask that would vanish keeps every pixel it touches."""
    if size == (window.shape[1], window.shape[0]):
        return window
    if size[0] >= window.shape[1] and size[1] >= window.shape[0]:
        return cv2.resize(window.view(np.uint8), size, interpolation=cv2.INTER_NEAREST) > 0
    covered = cv2.resize(window.view(np.uint8) * np.uint8(255), size, interpolation=cv2.INTER_AREA)
    half = covered >= 128
    return half if half.any() else covered > 0


def _scaled_masks(masks: Masks, indices: tuple[int, ...], size: tuple[int, int]) -> np.ndarray:
    """Masks ``indices`` of ``masks`` at ``size`` (w, h): bool (len(indices), h, w); each decoded over its box only."""
    width, height = size
    sx, sy = width / masks.width, height / masks.height
    out = np.zeros((len(indices), height, width), dtype=bool)
    for row, k in enumerate(indices):
        x0, y0, x1, y1 = (int(v) for v in masks.tight_boxes[k])
        if x1 <= x0:
            continue
        window = rle.decode_window(masks.counts[k], masks.height, (x0, y0, x1, y1))
        tx0, ty0 = min(width - 1, math.floor(x0 * sx)), min(height - 1, math.floor(y0 * sy))
        tx1, ty1 = max(tx0 + 1, min(width, math.ceil(x1 * sx))), max(ty0 + 1, min(height, math.ceil(y1 * sy)))
        out[row, ty0:ty1, tx0:tx1] = _resized_mask(window, (tx1 - tx0, ty1 - ty0))
    return out


_SCALED_KEPT = 4  # scaled photos remembered: a round draws every mask's locate view (and group views) of one photo


class _ScaledPhotos:
    """The photo resized to a view's size, once per photo and size: a round's locate views all start from the same
    small copy, instead of each resizing the whole photo again (at 12 MP and 50 masks that was a fifth of the run's
    time outside the models). Entries hold the photo weakly and are checked to be that very object; a fresh copy of
    the pixels is handed out each time (views are drawn on it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[int, tuple[int, int]], tuple[weakref.ref, np.ndarray]] = OrderedDict()

    def get(self, photo: Image.Image, size: tuple[int, int]) -> np.ndarray:
        key = (id(photo), size)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0]() is photo:
                self._entries.move_to_end(key)
                return entry[1].copy()
        scaled = _resized_photo(photo, size)
        scaled.flags.writeable = False
        with self._lock:
            self._entries[key] = (weakref.ref(photo), scaled)
            while len(self._entries) > _SCALED_KEPT:
                self._entries.popitem(last=False)
        return scaled.copy()


def _resized_photo(photo: Image.Image, size: tuple[int, int]) -> np.ndarray:
    rgb = photo if photo.mode == "RGB" else photo.convert("RGB")
    if size == rgb.size:
        return np.array(rgb, dtype=np.uint8)
    shrink = size[0] < rgb.width
    return np.array(rgb.resize(size, Image.Resampling.BOX if shrink else Image.Resampling.BICUBIC), dtype=np.uint8)


_scaled_photos = _ScaledPhotos()


def _scaled_photo(photo: Image.Image, size: tuple[int, int]) -> np.ndarray:
    """uint8 (h, w, 3): ``photo`` resized to ``size`` (w, h), BOX when shrinking, bicubic when enlarging; a copy the
    caller may draw on."""
    return _scaled_photos.get(photo, size)


def render_locate_view(photo: Image.Image, masks: Masks, index: int,
                       bounds: PixelBounds = DEFAULT_BOUNDS) -> Image.Image:
    """The photo at ``locate_size`` (for ``bounds``) with only mask ``index`` (0-based) filled and outlined in the
    lone-mask colour.

    Raises:
        ValueError: masks of another size than the photo, or an index out of range.
    """
    _check(photo, masks, (index,))
    size = locate_size(photo.width, photo.height, bounds)
    out = _scaled_photo(photo, size)
    draw_single(out, _scaled_masks(masks, (index,), size)[0], mask_colors(1)[0])
    return Image.fromarray(out)


def closeup_layout(crop_width: int, crop_height: int,
                   bounds: PixelBounds = DEFAULT_BOUNDS) -> tuple[tuple[int, int], tuple[int, int]]:
    """Where a ``crop_width`` x ``crop_height`` crop goes in a close-up: ``((canvas w, canvas h), (crop w, crop h))``.

    The crop is scaled (aspect kept) so its longer side is ``CLOSEUP_SIDE``; the canvas (two halves and the
    separator) is then given ``kept_size`` under ``bounds``, and the crop scaled again to fit one half of it (each half is
    ``(canvas w - CLOSEUP_SEPARATOR) // 2`` px wide and the canvas high; the crop is centred in it)."""
    scale = CLOSEUP_SIDE / max(crop_width, crop_height)
    natural = (2 * max(1, round(crop_width * scale)) + CLOSEUP_SEPARATOR, max(1, round(crop_height * scale)))
    canvas = kept_size(*natural, bounds)
    half = ((canvas[0] - CLOSEUP_SEPARATOR) // 2, canvas[1])
    fit = min(half[0] / crop_width, half[1] / crop_height)
    inner = (max(1, min(half[0], round(crop_width * fit))), max(1, min(half[1], round(crop_height * fit))))
    return canvas, inner


def render_closeup_view(photo: Image.Image, masks: Masks, index: int, bounds: PixelBounds = DEFAULT_BOUNDS,
                        margin: float = 0.25, min_side: int = 64) -> Image.Image:
    """The close-up of mask ``index`` (0-based): the region ``zoom_box`` of its tight box (``margin``, ``min_side``)
    raw on the left, with the mask drawn on the right (drawn after scaling, so its outline stays sharp), laid out by
    ``closeup_layout`` on ``PAD_COLOR`` with a ``CLOSEUP_SEPARATOR`` px white separator.

    Raises:
        ValueError: an empty mask, masks of another size than the photo, or an index out of range.
    """
    _check(photo, masks, (index,))
    box = zoom_box(masks.tight_boxes[index], masks.height, masks.width, margin, min_side)
    crop_w, crop_h = box[2] - box[0], box[3] - box[1]
    (width, height), inner = closeup_layout(crop_w, crop_h, bounds)
    rgb = photo if photo.mode == "RGB" else photo.convert("RGB")
    crop = np.asarray(rgb.crop(box), dtype=np.uint8)
    crop = resize_photo(crop, inner)
    window = _resized_mask(rle.decode_window(masks.counts[index], masks.height, box), inner)
    canvas = np.empty((height, width, 3), dtype=np.uint8)
    canvas[:] = PAD_COLOR
    half = (width - CLOSEUP_SEPARATOR) // 2
    left, top = (half - inner[0]) // 2, (height - inner[1]) // 2
    canvas[:, half : half + CLOSEUP_SEPARATOR] = SEPARATOR_COLOR
    for start in (0, half + CLOSEUP_SEPARATOR):
        canvas[top : top + inner[1], start + left : start + left + inner[0]] = crop
    drawn = canvas[top : top + inner[1], half + CLOSEUP_SEPARATOR + left : half + CLOSEUP_SEPARATOR + left + inner[0]]
    draw_single(drawn, np.ascontiguousarray(window), mask_colors(1)[0])  # a view into canvas: drawn in place
    return Image.fromarray(canvas)


def render_group_view(photo: Image.Image, masks: Masks, indices: tuple[int, ...],
                      bounds: PixelBounds = DEFAULT_BOUNDS) -> Image.Image:
    """The photo at ``kept_size`` under ``bounds`` (the size the VLM sees it at) with masks ``indices`` (0-based)
    drawn as the numbered overlay draws masks, each labelled with its own number (index + 1).

    Raises:
        ValueError: no index, a repeated one, one out of range, or masks of another size than the photo.
    """
    _check(photo, masks, indices)
    if not indices or len(set(indices)) != len(indices):
        raise ValueError(f"a group view needs distinct mask indices, got {list(indices)}")
    size = kept_size(photo.width, photo.height, bounds)
    scaled = Image.fromarray(_scaled_photo(photo, size))
    return render_numbered_overlay(scaled, _scaled_masks(masks, indices, size), [k + 1 for k in indices], bounds=bounds)


def _check(photo: Image.Image, masks: Masks, indices: tuple[int, ...]) -> None:
    if masks.size != (photo.height, photo.width):
        raise ValueError(f"masks of {masks.width}x{masks.height} do not match the {photo.width}x{photo.height} photo")
    for k in indices:
        if not 0 <= k < len(masks):
            raise ValueError(f"mask index {k!r} is out of range for {len(masks)} masks")
