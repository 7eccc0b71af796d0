"""Images and masks of a trace or bundle that comes from outside, checked against the photo before they are decoded.

- every image is checked on its header (size) before it is decoded, and every mask RLE on its declared size (it must
  be the raw image's) and on its run lengths before it is decoded;
- what one load decodes into pixels is bounded (``MAX_DECODED_BYTES``, one ``DecodeBudget`` per load), so a small
  file declaring many huge blank images or masks is refused before it costs gigabytes.

The files themselves are read within bounds by ``trace.safe_read``; loaders run inside ``safe_read.reading``.
"""

from __future__ import annotations

import io
import struct
import warnings
import zlib
from typing import Any

import numpy as np
from PIL import Image

from ..errors import TraceFormatError, describe
from ..images import MAX_PIXELS
from ..imaging.views import ZOOM_MIN_LONG_SIDE, ZOOM_SEPARATOR_WIDTH
from ..rle import check_rle, decode_rle, validated_counts

MAX_MASKS_PER_RECORD = 1000  # SAM 3 proposes at most 200 detections per phrase (its DETR query count)
# Bytes one load may decode into pixels (RGB images at 3 bytes a pixel, masks at 1): a run on a 64 MP photo with
# 20 full-size images fits; a small file that declares thousands of huge blank images or masks does not.
MAX_DECODED_BYTES = 4 * 1024**3


class DecodeBudget:
    """Bytes that one load may still decode into pixels (``MAX_DECODED_BYTES`` by default); share one per load."""

    def __init__(self, max_bytes: int = MAX_DECODED_BYTES) -> None:
        self.max_bytes = max_bytes
        self.left = max_bytes

    def take(self, count: int, what: str) -> None:
        """Count ``count`` bytes about to be decoded. Raises TraceFormatError (before any allocation) past the budget."""
        if count > self.left:
            raise TraceFormatError(f"{what}: this file's images and masks would take more than "
                                   f"{self.max_bytes / 1024**3:g} GB once decoded, so it is not loaded")
        self.left -= count


def view_size_limit(width: int, height: int) -> tuple[int, int]:
    """The largest (width, height) of any image the renderer makes of a ``width`` x ``height`` photo.

    Overlays and single-mask views are the photo's size; a zoom view puts two crops side by side, each at most the
    photo's size or upscaled to ``imaging.views.ZOOM_MIN_LONG_SIDE`` px on its longer side.
    """
    side_w, side_h = max(width, ZOOM_MIN_LONG_SIDE), max(height, ZOOM_MIN_LONG_SIDE)
    return 2 * side_w + ZOOM_SEPARATOR_WIDTH, side_h


def check_image_size(data: bytes, what: str, max_size: tuple[int, int] | None = None,
                     max_pixels: int | None = MAX_PIXELS, budget: DecodeBudget | None = None) -> tuple[int, int]:
    """The (width, height) an encoded image declares in its header, checked before any pixel is decoded: at most
    ``max_size`` (width, height) and ``max_pixels`` pixels (``None``: the caller checks), counted against ``budget``
    (3 bytes a pixel).

    Raises:
        TraceFormatError: not an image, or larger than allowed.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                width, height = image.size
    except Image.DecompressionBombError:  # Pillow refuses headers above twice its MAX_IMAGE_PIXELS unread
        most = "" if max_pixels is None else f" ({max_pixels:,} at most)"
        raise TraceFormatError(f"{what} has far more pixels than this trace's images can have{most}: the file is "
                               "damaged or was not saved by SAM3 Agent") from None
    except (OSError, ValueError, SyntaxError, EOFError, IndexError, struct.error, zlib.error) as error:
        raise TraceFormatError(f"{what} is missing or unreadable: {describe(error)}") from None
    if (max_pixels is not None and width * height > max_pixels) or (max_size is not None and (width > max_size[0] or height > max_size[1])):
        limit = f"{max_size[0]}x{max_size[1]}" if max_size is not None else f"{max_pixels:,} pixels"
        raise TraceFormatError(f"{what} is {width}x{height} pixels, larger than this trace's images can be "
                               f"({limit}): the file is damaged or was not saved by SAM3 Agent")
    if budget is not None:
        budget.take(3 * width * height, what)
    return width, height


def decode_image(data: bytes, what: str, max_size: tuple[int, int] | None = None,
                 max_pixels: int = MAX_PIXELS, budget: DecodeBudget | None = None) -> Image.Image:
    """Decode an image of a trace after checking its header (``check_image_size``); returns it in mode RGB.

    Raises:
        TraceFormatError: not an image, corrupt, or larger than allowed (checked before any pixel is decoded).
    """
    check_image_size(data, what, max_size, max_pixels, budget)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
            image.load()
        return image if image.mode == "RGB" else image.convert("RGB")
    except (OSError, ValueError, SyntaxError, EOFError, IndexError, struct.error, zlib.error) as error:
        raise TraceFormatError(f"{what} is missing or unreadable: {describe(error)}") from None


# ------------------------------------------------------------------ masks


def mask_counts_for_image(rles: Any, height: int, width: int, what: str,
                          budget: DecodeBudget | None = None) -> tuple[bytes, ...]:
    """The compressed counts of a file's masks, after checking every RLE against the image (``check_rle``), the
    number of masks and the budget; nothing is decoded.

    The masks stay compressed (``mask_set.Masks`` holds the counts); drawing a view decodes one mask's box at a time,
    so a set takes one mask's pixels of the budget (1 byte a pixel), not one per mask: a trace the command line wrote
    with hundreds of masks on a 16 MP photo reads back. Whole-set decodes (the Correct tab's answer, exports) are
    bounded by the caller (``trace.load_limits``).

    Args:
        rles: list of COCO RLE dicts read from a file.
        height, width: the image's size in pixels (the trace's raw image).
        what: names the masks in messages (``"mask 3 of round 2"``).
        budget: decoded bytes left for this load (one per load, shared by all its masks).

    Returns:
        one ``bytes`` of COCO compressed counts per mask, in order.

    Raises:
        TraceFormatError: not a list, too many masks, a mask that does not fit the image, over the budget.
    """
    if not isinstance(rles, list):
        raise TraceFormatError(f"{what}: expected a list of RLE masks")
    if len(rles) > MAX_MASKS_PER_RECORD:
        raise TraceFormatError(f"{what}: {len(rles):,} masks in one record; a trace holds at most "
                               f"{MAX_MASKS_PER_RECORD:,}")
    for number, rle in enumerate(rles, start=1):
        check_rle(rle, height, width, f"{what}, mask {number}" if len(rles) > 1 else what)
    if budget is not None:
        budget.take(height * width if rles else 0, what)
    try:
        return validated_counts(rles, height, width)[0]
    except ValueError as error:
        raise TraceFormatError(f"{what} is malformed: {error}") from None


def masks_for_image(rles: Any, height: int, width: int, what: str, budget: DecodeBudget | None = None) -> np.ndarray:
    """Decode the masks of a file after ``mask_counts_for_image``'s checks.

    Returns:
        bool (N, height, width).

    Raises:
        TraceFormatError: see ``mask_counts_for_image``.
    """
    mask_counts_for_image(rles, height, width, what, budget)
    return decode_rle(rles, height=height, width=width)


def check_edit_masks(edits: Any, height: int, width: int) -> None:
    """Check that every mask an edit carries (``mask`` / ``stroke``, an ``edit_ops.MaskRle``) is the image's size.

    Raises:
        TraceFormatError: an edit's mask of another size (e.g. transposed); the message names the edit.
    """
    for number, op in enumerate(edits, start=1):
        for field in ("mask", "stroke"):
            rle = getattr(op, field, None)
            if rle is not None and (rle.height, rle.width) != (height, width):
                raise TraceFormatError(f"edit {number} holds a {field} of {rle.width}x{rle.height} pixels (width x "
                                       f"height) but the image is {width}x{height}: every mask must be the size of "
                                       "the image")
