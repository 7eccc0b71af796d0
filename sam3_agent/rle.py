"""COCO run-length encoding of masks, the compact form ``mask_set.Masks`` holds them in.

Helpers over ``pycocotools.mask`` that work on the raw compressed ``counts`` (bytes) of trusted masks: encode
once, then read areas, tight boxes and pairwise intersections straight from the runs (no decoding), and decode
where pixels are needed: a whole mask (pycocotools) or only a box of it (``decode_window``, which pycocotools
lacks). Validation of RLE read from files: ``validated_counts``.

COCO RLE is column-major: runs alternate background / foreground, starting with background, over the
pixels ordered column by column (``size = [H, W]``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import cv2
import numpy as np
from pycocotools import mask as coco_mask

from .errors import TraceFormatError


def _objects(counts: Sequence[bytes], height: int, width: int) -> list[dict]:
    return [{"size": [height, width], "counts": c} for c in counts]


def encode(masks: np.ndarray | Iterable[np.ndarray], height: int, width: int) -> tuple[bytes, ...]:
    """Compressed COCO RLE counts of each mask (the bytes ``pycocotools.mask.encode`` writes).

    Only the columns a mask touches are read twice: its bounding rectangle (``cv2.boundingRect``) gives the band
    of columns, whose column-major runs are counted with numpy and handed to ``pycocotools.mask.frPyObjects``
    to compress; the empty columns around the band only lengthen the first and last background runs.

    Args:
        masks: bool (N, H, W), or an iterable of bool (H, W) masks (encoded as they come, so a producer
            that makes masks one at a time never holds them all).
        height, width: the mask size (pixels).

    Returns:
        N ``bytes`` (ASCII COCO compressed counts), in order.

    Raises:
        ValueError: a mask of another size or dimensionality.
    """
    out: list[bytes] = []
    for mask in masks:
        arr = np.asarray(mask)
        if arr.shape != (height, width):
            raise ValueError(f"mask of shape {arr.shape} where ({height}, {width}) was expected")
        pixels = np.ascontiguousarray(arr.view(np.uint8) if arr.dtype == bool else (arr > 0).view(np.uint8))
        out.append(_encode_one(pixels, height, width))
    return tuple(out)


def _encode_one(pixels: np.ndarray, height: int, width: int) -> bytes:
    if height * width == 0:
        return bytes(coco_mask.encode(np.zeros((height, width, 1), dtype=np.uint8, order="F"))[0]["counts"])
    x, y, band_width, band_height = cv2.boundingRect(pixels)
    if band_width == 0:
        runs = [height * width]
    else:
        band = np.zeros((band_width, height), dtype=np.uint8)  # the band's columns, each one a row here
        crop = np.ascontiguousarray(pixels[y : y + band_height, x : x + band_width])
        band[:, y : y + band_height] = cv2.transpose(crop)
        flat = band.ravel()
        changes = np.flatnonzero(flat[1:] != flat[:-1]) + 1
        runs = np.diff(np.concatenate(([0], changes, [flat.size]))).tolist()
        if flat[0]:
            runs.insert(0, 0)  # COCO runs start with background
        runs[0] += x * height
        after = (width - x - band_width) * height
        if len(runs) % 2:  # the band ends on background
            runs[-1] += after
        elif after:
            runs.append(after)
    return bytes(coco_mask.frPyObjects({"size": [height, width], "counts": runs}, height, width)["counts"])


def run_lengths(counts: bytes) -> np.ndarray:
    """The run lengths of COCO compressed counts, int64 (number of runs,), background first.

    Vectorised reading of the COCO mask API's string format: each run is written as 6-bit chunks offset by
    48 (low 5 bits data, bit 0x20 "more", bit 0x10 of the last chunk the sign); from the fourth run on, each
    value is a delta to the run two places before. Runs may be negative here: callers check.

    Raises:
        ValueError: a character outside the alphabet, counts that end inside a run, or a run over 55 bits.
    """
    chunks = np.frombuffer(counts, dtype=np.uint8).astype(np.int64) - 48
    if chunks.size == 0:
        return np.zeros(0, dtype=np.int64)
    if np.any((chunks < 0) | (chunks >= 64)):
        raise ValueError("'counts' has a character outside the COCO RLE alphabet")
    more = (chunks & 0x20) != 0
    if more[-1]:
        raise ValueError("'counts' ends in the middle of a run length")
    ends = np.flatnonzero(~more)  # the last chunk of each value
    starts = np.concatenate(([0], ends[:-1] + 1))
    place = np.arange(chunks.size) - np.repeat(starts, ends - starts + 1)  # chunk number inside its value
    if place.max() > 10:  # 11 chunks = 55 bits: far beyond any image
        raise ValueError("'counts' holds a run length too large for any image")
    values = np.add.reduceat((chunks & 0x1F) << (5 * place), starts)
    values -= np.where(chunks[ends] & 0x10, np.left_shift(1, 5 * (place[ends] + 1)), 0)
    runs = values.copy()
    runs[1::2] = np.cumsum(values[1::2])  # run m (m > 2) adds run m - 2: odd and even runs are running sums
    runs[2::2] = np.cumsum(values[2::2])
    return runs


def decode_window(counts: bytes, height: int, box: tuple[int, int, int, int]) -> np.ndarray:
    """The pixels of one trusted mask inside ``box`` only, without decoding the rest of the image.

    pycocotools can only decode whole masks (H x W bytes written per mask: 12 MB for a 12 MP photo); drawing
    and cropping need the mask's box alone. Each foreground run is cut at column ends and clipped to the box,
    then the box is filled from the run ends; the work grows with the runs and the box, not the image.
    ``tests/test_rle.py`` checks it against ``pycocotools.mask.decode`` on random masks and boxes.

    Args:
        counts: COCO compressed counts of a mask of ``height`` rows.
        box: ``(x0, y0, x1, y1)`` ints, pixels, x1/y1 exclusive, inside the mask.

    Returns:
        bool (y1 - y0, x1 - x0), C-ordered.
    """
    x0, y0, x1, y1 = (int(v) for v in box)
    h, w = y1 - y0, x1 - x0
    if h <= 0 or w <= 0:
        return np.zeros((max(h, 0), max(w, 0)), dtype=bool)
    runs = run_lengths(counts)
    ends = np.cumsum(runs)
    first, last = ends[0::2][: len(runs) // 2], ends[1::2]  # foreground runs: [first, last) column-major
    keep = (last > first) & (last > x0 * height) & (first < x1 * height)
    first, last = first[keep], last[keep]
    col0, col1 = first // height, (last - 1) // height
    spans = col1 - col0 + 1  # columns each run touches
    run = np.repeat(np.arange(first.size), spans)
    col = col0[run] + np.arange(run.size) - np.repeat(np.cumsum(spans) - spans, spans)
    top = np.clip(np.maximum(first[run] - col * height, 0), y0, y1) - y0
    bottom = np.clip(np.minimum(last[run] - col * height, height), y0, y1) - y0
    inside = (col >= x0) & (col < x1) & (bottom > top)
    col, top, bottom = col[inside] - x0, top[inside], bottom[inside]
    # Runs are separated by background, so no two pieces share a start or an end: plain assignment.
    marks = np.zeros(w * (h + 1), dtype=np.int8)  # column-major, one spare row per column for end marks
    marks[col * (h + 1) + top] = 1
    marks[col * (h + 1) + bottom] = -1
    filled = np.cumsum(marks, dtype=np.int8).reshape(w, h + 1)[:, :h]
    return np.ascontiguousarray(filled.T).view(bool)


def decode_one(counts: bytes, height: int, width: int) -> np.ndarray:
    """One whole mask as bool (H, W), C-ordered (``pycocotools.mask.decode``)."""
    if height * width == 0:
        return np.zeros((height, width), dtype=bool)
    decoded = coco_mask.decode({"size": [height, width], "counts": counts})  # column-major uint8
    return np.ascontiguousarray(decoded).view(bool)


def decode_all(counts: Sequence[bytes], height: int, width: int) -> np.ndarray:
    """All masks as bool (N, H, W), C-ordered."""
    if not counts or height * width == 0:
        return np.zeros((len(counts), height, width), dtype=bool)
    decoded = coco_mask.decode(_objects(counts, height, width))  # uint8 (H, W, N), column-major
    return np.ascontiguousarray(decoded.transpose(2, 0, 1)).view(bool)


# pycocotools 2.0.x ``mask.area`` builds its result from ``np.array((n,), dtype=np.uint8)``: 256 masks or more in one
# call overflow (``OverflowError``). Its areas themselves are uint32, so calls of at most 255 masks are exact.
_AREA_BATCH = 255


def areas(counts: Sequence[bytes], height: int, width: int) -> np.ndarray:
    """Pixel count of each mask, int64 (N,), read from the runs (``pycocotools.mask.area``, in batches of
    ``_AREA_BATCH`` masks: see there)."""
    if not counts or height * width == 0:
        return np.zeros(len(counts), dtype=np.int64)
    objects = _objects(counts, height, width)
    return np.concatenate([
        np.asarray(coco_mask.area(objects[start:start + _AREA_BATCH]), dtype=np.int64).reshape(-1)
        for start in range(0, len(objects), _AREA_BATCH)
    ])


def tight_boxes(counts: Sequence[bytes], height: int, width: int) -> np.ndarray:
    """Tight boxes around the masks, float32 (N, 4), xyxy pixels with x2/y2 exclusive; zeros for an empty mask.

    The same convention as ``imaging.postprocess.boxes_from_masks``; read from the runs (``pycocotools.mask.toBbox``).
    """
    if not counts or height * width == 0:
        return np.zeros((len(counts), 4), dtype=np.float32)
    xywh = np.asarray(coco_mask.toBbox(_objects(counts, height, width)), dtype=np.float64).reshape(-1, 4)
    boxes = xywh.copy()
    boxes[:, 2:] += xywh[:, :2]
    return boxes.astype(np.float32)


def intersections(one: bytes, others: Sequence[bytes], height: int, width: int, area: int) -> np.ndarray:
    """Pixels shared by mask ``one`` (of ``area`` pixels) and each of ``others``, int64 (len(others),).

    ``pycocotools.mask.iou`` with every other mask marked "crowd" returns intersection / area(``one``)
    (COCO's crowd rule), computed on the runs; pairs whose boxes do not overlap are skipped there and give 0.
    """
    if not others or area == 0:
        return np.zeros(len(others), dtype=np.int64)
    ratio = coco_mask.iou(_objects([one], height, width), _objects(others, height, width), [1] * len(others))
    return np.rint(np.asarray(ratio, dtype=np.float64).reshape(-1) * area).astype(np.int64)


def text(counts: bytes) -> str:
    """The counts as the JSON string COCO files hold."""
    return counts.decode("ascii")


def encode_rle(masks: np.ndarray) -> list[dict[str, Any]]:
    """COCO compressed RLE of each mask (via ``pycocotools.mask.encode``).

    Args:
        masks: bool (N, H, W); a single (H, W) mask is treated as N = 1.

    Returns:
        N dicts ``{"size": [H, W], "counts": str}`` (counts decoded to ASCII text so that the
        result is JSON-serialisable).

    Raises:
        ValueError: on an array that is not 2- or 3-dimensional.
    """
    arr = np.asarray(masks)
    if arr.ndim == 2:
        arr = arr[None]
    arr = check_mask_array(arr)
    n, h, w = arr.shape
    return [{"size": [int(h), int(w)], "counts": text(c)} for c in encode(arr, h, w)]


def _check_size(size: Any, index: int) -> tuple[int, int]:
    if (
        not isinstance(size, (list, tuple))
        or len(size) != 2
        or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0 for v in size)
    ):
        raise ValueError(f"RLE {index}: 'size' must be [height, width] as two non-negative integers; got {size!r}")
    return int(size[0]), int(size[1])


def _compressed_counts_total(counts: bytes, index: int) -> int:
    """Sum of the run lengths in a COCO compressed counts string (``rle.run_lengths``).

    Only used to validate input before handing it to pycocotools, whose decoder leaves pixels
    uninitialised when the runs cover fewer than H*W pixels.
    """
    try:
        runs = run_lengths(counts)
    except ValueError as error:
        raise ValueError(f"RLE {index}: {error}") from None
    if np.any(runs < 0):
        raise ValueError(f"RLE {index}: 'counts' decodes to a negative run length")
    return int(runs.sum())


def validated_counts(
    rles: Any, height: int | None = None, width: int | None = None
) -> tuple[tuple[bytes, ...], tuple[int, int]]:
    """Check COCO RLEs read from a file without decoding them; the one check every loader applies.

    Args:
        rles: dicts ``{"size": [H, W], "counts": str | bytes}`` (compressed RLE) or with ``counts`` as a
            list of run lengths (uncompressed RLE); all of the same size.
        height, width: the expected mask size; required when ``rles`` is empty.

    Returns:
        (compressed counts as ``bytes``, one per RLE, in order; the mask size (H, W)).

    Raises:
        ValueError: a malformed RLE (missing keys, bad size, counts that are not valid COCO RLE or that do
            not cover exactly H*W pixels), mixed or unexpected sizes, or an empty list without a size.
    """
    if not isinstance(rles, (list, tuple)):
        raise ValueError(f"rles must be a list of RLE dicts; got {type(rles).__name__}")
    expected = None if height is None or width is None else (int(height), int(width))
    if not rles and expected is None:
        raise ValueError("cannot decode an empty list of RLEs without height and width")
    out: list[bytes] = []
    for i, item in enumerate(rles):
        if not isinstance(item, dict) or "size" not in item or "counts" not in item:
            raise ValueError(f"RLE {i}: expected a dict with 'size' and 'counts'; got {item!r:.80}")
        h, w = _check_size(item["size"], i)
        if expected is None:
            expected = (h, w)
        elif (h, w) != expected:
            raise ValueError(f"RLE {i}: size {[h, w]} differs from the expected {list(expected)}")
        counts = item["counts"]
        if isinstance(counts, str):
            try:
                counts = counts.encode("ascii")
            except UnicodeEncodeError as exc:
                raise ValueError(f"RLE {i}: 'counts' must be ASCII COCO RLE text") from exc
        if isinstance(counts, (bytes, bytearray)):
            total = _compressed_counts_total(bytes(counts), i)
            if total != h * w:
                raise ValueError(f"RLE {i}: run lengths cover {total} pixels, expected {h}x{w} = {h * w}")
            out.append(bytes(counts))
        elif isinstance(counts, (list, tuple)):
            if not all(isinstance(c, (int, np.integer)) and not isinstance(c, bool) and c >= 0 for c in counts):
                raise ValueError(f"RLE {i}: uncompressed 'counts' must be non-negative integers")
            if sum(int(c) for c in counts) != h * w:
                raise ValueError(f"RLE {i}: run lengths cover {sum(counts)} pixels, expected {h}x{w} = {h * w}")
            compressed = coco_mask.frPyObjects({"size": [h, w], "counts": [int(c) for c in counts]}, h, w)
            out.append(bytes(compressed["counts"]))
        else:
            raise ValueError(f"RLE {i}: 'counts' must be str, bytes or a list of ints; got {type(counts).__name__}")
    return tuple(out), expected  # type: ignore[return-value]


def decode_rle(rles: list[dict[str, Any]], *, height: int | None = None, width: int | None = None) -> np.ndarray:
    """Decode COCO RLEs to boolean masks (via ``pycocotools.mask.decode``), after ``validated_counts``.

    Args:
        rles: dicts ``{"size": [H, W], "counts": str | bytes}`` (compressed RLE) or with
            ``counts`` as a list of run lengths (uncompressed RLE); all of the same size.
        height, width: the mask size; required only to decode an empty list, and checked against
            the RLEs when given.

    Returns:
        bool (N, H, W).

    Raises:
        ValueError: see ``validated_counts``.
    """
    counts, (h, w) = validated_counts(rles, height, width)
    return decode_all(counts, h, w)


def check_rle(rle: Any, height: int, width: int, what: str) -> None:
    """Check one COCO RLE (``{"size": [H, W], "counts": str}``) against the image it belongs to, without decoding.

    The declared size must be exactly the image's ``[height, width]`` (a transposed size is refused) and the run
    lengths must be valid COCO RLE covering exactly ``height * width`` pixels.

    Raises:
        TraceFormatError: the message names ``what`` and the problem.
    """
    if not isinstance(rle, dict) or "size" not in rle or "counts" not in rle:
        raise TraceFormatError(f"{what} is not an RLE mask (an object with 'size' and 'counts')")
    size = rle["size"]
    if (not isinstance(size, (list, tuple)) or len(size) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in size)):
        raise TraceFormatError(f"{what} has no valid size [height, width]")
    if list(size) != [height, width]:
        raise TraceFormatError(f"{what} is {size[1]}x{size[0]} pixels (width x height) but the image is "
                               f"{width}x{height}: every mask must be the size of the image")
    counts = rle["counts"]
    if not isinstance(counts, str) or not counts.isascii():
        raise TraceFormatError(f"{what} has counts that are not COCO compressed RLE text")
    try:
        total = _compressed_counts_total(counts.encode("ascii"), 0)
    except ValueError as error:
        raise TraceFormatError(f"{what} has malformed run lengths ({str(error).removeprefix('RLE 0: ')})") from None
    if total != height * width:
        raise TraceFormatError(f"{what} has run lengths covering {total:,} pixels, not the image's "
                               f"{height * width:,}")


def check_mask_array(masks: np.ndarray, what: str = "masks") -> np.ndarray:
    """Return ``masks`` as a bool (N, H, W) array or raise ValueError saying what is wrong."""
    arr = np.asarray(masks)
    if arr.ndim != 3:
        raise ValueError(f"{what} must be a bool array of shape (N, H, W); got shape {arr.shape}")
    if arr.dtype != bool:
        if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
            raise ValueError(f"{what} must be a bool array (N, H, W); got dtype {arr.dtype}")
        arr = arr > 0
    return arr
