"""Loading and normalising user images.

``load_image`` turns whatever the user gives (a path, encoded bytes, a PIL image, a numpy array)
into the one form the core works with: an 8-bit RGB PIL image, upright (EXIF orientation
applied), at its original resolution. Size limits are checked from the header, before decoding.
Phone photos in HEIC/HEIF are read through the ``pillow-heif`` plugin (registered on import), AVIF
by Pillow itself; only regular files are opened (a FIFO or device would block), and a URL is refused
with advice rather than taken for a file name.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import re
import stat
import struct
import warnings
import zlib
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from .errors import InputError
from .limits import MAX_IMAGE_PIXELS

try:  # HEIC/HEIF (iPhone photos); AVIF is built into Pillow >= 11.3
    from pillow_heif import register_heif_opener
except ImportError:  # pragma: no cover - pillow-heif is in requirements.txt
    register_heif_opener = None
else:
    register_heif_opener()

logger = logging.getLogger(__name__)

MAX_PIXELS = MAX_IMAGE_PIXELS  # decompression-bomb cap (pixels); configurable per call
MIN_SIDE = 8  # smallest accepted width/height (pixels): nothing below this can be segmented usefully
# What a message over the pixel limit advises by default (a front end with another limit passes its own advice).
LIMIT_ADVICE = "downscale it (or raise the limit: --max-image-pixels on the command line, max_pixels in Python)"
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")

ImageSource = str | os.PathLike | bytes | bytearray | memoryview | Image.Image | np.ndarray

_ALPHA_MODES = {"RGBA", "LA", "PA", "RGBa", "La"}
_HIGH_DEPTH_MODES = {"I", "I;16", "I;16L", "I;16B", "I;16N", "F"}
# What Pillow raises on broken image data (decoders differ: OSError for "image file is truncated",
# SyntaxError for broken PNG chunks, struct/zlib errors for corrupt headers and streams).
_CORRUPT_ERRORS = (OSError, ValueError, SyntaxError, EOFError, IndexError, struct.error, zlib.error)


def image_digest(image: Image.Image) -> str:
    """A content key for an image: sha256 hex of its mode, size and pixel bytes."""
    h = hashlib.sha256()
    h.update(f"{image.mode}:{image.size[0]}x{image.size[1]}:".encode())
    h.update(image.tobytes())
    return h.hexdigest()


def file_name_of(path: str | Path | None) -> str | None:
    """The file name of ``path`` without its folders, as this system splits paths (``"/tmp/x/coffee.jpg"`` ->
    ``"coffee.jpg"``), with unprintable characters (controls, undecodable bytes) removed and at most 255
    characters; ``None`` for ``None``, non-strings or a name with nothing printable left."""
    if not isinstance(path, (str, Path)):
        return None
    name = "".join(c for c in Path(path).name if c.isprintable())[:255]
    return name if name.strip() else None


def load_image(source: ImageSource, max_pixels: int = MAX_PIXELS, name: str | None = None,
               limit_advice: str = LIMIT_ADVICE) -> Image.Image:
    """Load and normalise an image for the agent.

    Accepted sources: a file path (``str`` or ``Path``), encoded image bytes, a PIL image, or a
    numpy array ``(H, W)``, ``(H, W, 1)`` (gray), ``(H, W, 2)`` (gray + alpha), ``(H, W, 3)``
    (RGB) or ``(H, W, 4)`` (RGBA) of dtype bool, integer or float.

    Normalisation:
      * EXIF orientation is applied once (``PIL.ImageOps.exif_transpose``); the result carries
        no orientation tag, so loading it again does not rotate it twice;
      * transparency (RGBA, LA, P or RGB/L with a transparent colour) is composited on white;
      * 16/32-bit integer ("I;16", "I") and float ("F") images are rescaled linearly from their
        true range [min, max] to [0, 255] (a constant image becomes 0 when its value is <= 0,
        else 255); the same holds for numpy arrays, except float arrays already within [0, 1],
        which are multiplied by 255, and bool arrays, which map to 0/255;
      * everything else ("1", "L", "P", "CMYK", "YCbCr"...) is converted to RGB by Pillow.

    Args:
        source: the image, see above.
        max_pixels: largest accepted width * height; checked on the header before decoding.
        name: how messages name a file source (default: its path as given); a server passes the
            uploaded file's own name so that messages never show its temporary paths.
        limit_advice: what a message over ``max_pixels`` tells the person to do.

    Returns:
        PIL image, mode "RGB", 8 bits per channel, original resolution (after orientation).

    Raises:
        InputError: file not found; a URL; not a regular file (a folder, FIFO or device); not an
            image; truncated or corrupt data; more than ``max_pixels`` pixels; a side shorter than
            ``MIN_SIDE``; too large to decode in the memory left; an array of unsupported shape,
            dtype or with NaN/infinite values; an unsupported source type or mode.
    """
    if isinstance(max_pixels, bool) or not isinstance(max_pixels, (int, np.integer)) or max_pixels < 1:
        raise InputError(f"max_pixels must be a positive integer, got {max_pixels!r}")
    limit = (int(max_pixels), limit_advice)
    try:
        if isinstance(source, np.ndarray):
            return _from_array(source, limit)
        if isinstance(source, Image.Image):
            _check_size(source.size, limit, "the image")
            return _normalise(source, "the image")
        if isinstance(source, (bytes, bytearray, memoryview)):
            with _open(io.BytesIO(bytes(source)), "the image data", limit) as img:
                return _normalise(img, "the image data")
        if isinstance(source, (str, os.PathLike)):
            return _from_file(source, name, limit)
    except MemoryError:
        raise InputError("there is not enough memory left to decode this image; downscale it or try again "
                         "later") from None
    raise InputError(
        f"unsupported image source of type {type(source).__name__}; give a file path, image bytes, "
        "a PIL image or a numpy array"
    )


def _from_file(source: str | os.PathLike, name: str | None, limit: tuple[int, str]) -> Image.Image:
    """Open a regular file (never a FIFO or device, whose reads could block forever) and load it."""
    text = os.fspath(source)
    shown = repr(name if name is not None else text)
    if isinstance(text, str) and _URL.match(text):
        raise InputError(f"{shown} is a URL; images are read from files only: download it first (e.g. "
                         "`curl -L -o photo.jpg URL`) and give the file's path")
    path = Path(source)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise InputError(f"image file not found: {shown}; check the path") from None
    except OSError as exc:
        raise InputError(f"cannot read the image file {shown}: {exc.strerror or 'not accessible'}") from None
    if stat.S_ISDIR(mode):
        raise InputError(f"{shown} is a directory, not an image file; give the path of an image")
    if not stat.S_ISREG(mode):
        raise InputError(f"{shown} is not a regular file (a pipe, socket or device); save the image to a file "
                         "and give that file's path")
    what = f"file {shown}"
    try:
        with open(path, "rb") as fh:
            with _open(fh, what, limit) as img:
                return _normalise(img, what)
    except PermissionError:
        raise InputError(f"cannot read {what}: permission denied") from None


def _check_size(size: tuple[int, int], limit: tuple[int, str], what: str) -> None:
    max_pixels, advice = limit
    width, height = int(size[0]), int(size[1])
    if width * height > max_pixels:
        raise InputError(
            f"{what} is {width}x{height} = {width * height:,} pixels, above the pixel limit of {max_pixels:,}; "
            f"{advice}"
        )
    if min(width, height) < MIN_SIDE:
        raise InputError(
            f"{what} is {width}x{height} pixels; each side must be at least {MIN_SIDE} pixels"
        )


def _open(stream: io.IOBase, what: str, limit: tuple[int, str]) -> Image.Image:
    """Open lazily (header only), check the size, then decode; errors become InputError."""
    try:
        with warnings.catch_warnings():  # our own limit is checked below, with a clearer message
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(stream)
    except UnidentifiedImageError as exc:
        raise InputError(
            f"{what} is not an image (or not a format this app reads); give a JPEG, PNG, WebP, HEIC, AVIF or TIFF"
        ) from exc
    except Image.DecompressionBombError as exc:
        # Pillow refuses headers above twice its MAX_IMAGE_PIXELS before we can look at them.
        raise InputError(
            f"{what} has far more pixels than the pixel limit of {limit[0]:,} (its header alone is refused as a "
            "possible decompression bomb); downscale it"
        ) from exc
    except _CORRUPT_ERRORS as exc:
        raise InputError(f"{what} is corrupt: its header cannot be read ({exc})") from exc
    try:
        _check_size(img.size, limit, what)
        try:
            img.load()
        except Image.DecompressionBombError as exc:
            raise InputError(f"{what} is above the pixel limit ({exc}); downscale it") from exc
        except _CORRUPT_ERRORS as exc:
            raise InputError(f"{what} is truncated or corrupt and cannot be decoded ({exc})") from exc
    except BaseException:
        img.close()
        raise
    return img


def _upright(img: Image.Image, what: str) -> Image.Image:
    """Apply the EXIF orientation (a detached copy); broken EXIF is ignored with a warning."""
    try:
        return ImageOps.exif_transpose(img)
    except (Image.DecompressionBombError, MemoryError):
        raise
    except _CORRUPT_ERRORS + (KeyError, TypeError) as exc:
        if isinstance(exc, OSError) and "truncated" in str(exc):
            raise InputError(f"{what} is truncated or corrupt and cannot be decoded ({exc})") from exc
        logger.warning("ignoring unreadable EXIF orientation of %s: %s", what, exc)
        return img.copy()


def _normalise(img: Image.Image, what: str) -> Image.Image:
    """Upright 8-bit RGB copy of ``img`` (see ``load_image``)."""
    try:
        img.load()
    except _CORRUPT_ERRORS as exc:
        raise InputError(f"{what} is truncated or corrupt and cannot be decoded ({exc})") from exc
    img = _upright(img, what)
    mode = img.mode
    if mode == "RGB" and "transparency" not in img.info:
        return img
    if mode in _HIGH_DEPTH_MODES:
        gray = _rescale_to_uint8(np.asarray(img))
        return Image.fromarray(gray, mode="L").convert("RGB")
    if mode in _ALPHA_MODES or "transparency" in img.info:
        return _composite_on_white(np.asarray(img.convert("RGBA")))
    try:
        return img.convert("RGB")
    except ValueError as exc:
        raise InputError(f"{what} has image mode {mode!r}, which cannot be converted to RGB; save it as RGB") from exc


def _composite_on_white(rgba: np.ndarray) -> Image.Image:
    """uint8 (H, W, 4) RGBA -> RGB image, alpha-composited on white (integer, rounded)."""
    color = rgba[..., :3].astype(np.uint32)
    alpha = rgba[..., 3:4].astype(np.uint32)
    rgb = (color * alpha + 255 * (255 - alpha) + 127) // 255
    return Image.fromarray(rgb.astype(np.uint8), mode="RGB")


def _rescale_to_uint8(values: np.ndarray) -> np.ndarray:
    """Map the array's [min, max] linearly onto [0, 255] (rounded); uint8 of the same shape."""
    data = values.astype(np.float32, copy=False)
    lo = float(data.min())
    hi = float(data.max())
    if hi <= lo:
        return np.full(values.shape, 255 if hi > 0 else 0, dtype=np.uint8)
    scaled = (data - np.float32(lo)) * np.float32(255.0 / (hi - lo))
    return np.clip(np.rint(scaled), 0, 255).astype(np.uint8)


def _from_array(array: np.ndarray, limit: tuple[int, str]) -> Image.Image:
    """Numpy array -> 8-bit RGB image (see ``load_image`` for the accepted shapes and dtypes)."""
    if array.ndim == 2:
        array = array[..., None]
    if array.ndim != 3 or array.shape[2] not in (1, 2, 3, 4):
        raise InputError(
            f"an image array must have shape (H, W), (H, W, 1), (H, W, 2), (H, W, 3) or (H, W, 4); "
            f"got {array.shape}"
        )
    height, width, channels = array.shape
    _check_size((width, height), limit, "the image array")

    kind = array.dtype.kind
    if kind == "b":
        data = array.astype(np.uint8) * 255
    elif array.dtype == np.uint8:
        data = array
    elif kind in "iu":
        data = _rescale_channels(array)
    elif kind == "f":
        if not np.isfinite(array).all():
            raise InputError("the image array contains NaN or infinite values; replace them before loading")
        if float(array.min()) >= 0.0 and float(array.max()) <= 1.0:
            data = np.rint(array.astype(np.float32) * 255.0).astype(np.uint8)
        else:
            data = _rescale_channels(array)
    else:
        raise InputError(f"an image array must be bool, integer or float; got dtype {array.dtype}")

    data = np.ascontiguousarray(data)
    if channels == 1:
        return Image.fromarray(data[..., 0], mode="L").convert("RGB")
    if channels == 3:
        return Image.fromarray(data, mode="RGB")
    if channels == 2:
        gray, alpha = data[..., 0], data[..., 1]
        data = np.stack([gray, gray, gray, alpha], axis=-1)
    return _composite_on_white(data)


def _rescale_channels(array: np.ndarray) -> np.ndarray:
    """Rescale colour channels together by their joint true range.

    An alpha channel (last of 2 or 4) keeps its nominal meaning instead: integer alpha is divided
    by the dtype's maximum, float alpha is clipped to [0, 1]; both are then scaled to 0..255.
    """
    channels = array.shape[2]
    if channels not in (2, 4):
        return _rescale_to_uint8(array)
    color = _rescale_to_uint8(array[..., : channels - 1])
    alpha = array[..., channels - 1 :].astype(np.float64)
    if array.dtype.kind in "iu":
        alpha = np.clip(alpha, 0, None) / float(np.iinfo(array.dtype).max)
    alpha = np.rint(np.clip(alpha, 0.0, 1.0) * 255.0).astype(np.uint8)
    return np.concatenate([color, alpha], axis=-1)
