"""Mask post-processing (score threshold, empty drop, sort, overlap removal) and COCO RLE I/O.

``types.Masks`` holds masks as COCO compressed RLE (``sam3_agent.rle``), decoded to ``bool (N, H, W)`` at the
original image resolution where pixels are needed; at the edges (traces, exports) RLE is written as
``{"size": [H, W], "counts": str}``. All RLE encoding and decoding goes through ``pycocotools``.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from pycocotools import mask as coco_mask

from sam3_agent import rle
from sam3_agent.types import Masks

logger = logging.getLogger(__name__)

SCORE_THRESHOLD = 0.5  # default of the reference agent
IOM_THRESHOLD = 0.3  # overlap rule of the reference agent

def _check_mask_array(masks: np.ndarray, what: str = "masks") -> np.ndarray:
    """Return ``masks`` as a bool (N, H, W) array or raise ValueError saying what is wrong."""
    arr = np.asarray(masks)
    if arr.ndim != 3:
        raise ValueError(f"{what} must be a bool array of shape (N, H, W); got shape {arr.shape}")
    if arr.dtype != bool:
        if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
            raise ValueError(f"{what} must be a bool array (N, H, W); got dtype {arr.dtype}")
        arr = arr > 0
    return arr


def overlapping_box_pairs(boxes: np.ndarray, one: int, others: np.ndarray) -> np.ndarray:
    """The entries of ``others`` whose box overlaps box ``one`` by at least one pixel.

    Args:
        boxes: float32 (N, 4), xyxy pixels, x2/y2 exclusive (tight boxes; an empty mask has a zero box).
        one: index of the box to test.
        others: int64 indices into ``boxes``.

    Returns:
        int64 subset of ``others``, in order. Masks whose boxes do not overlap share no pixel.
    """
    b = boxes[one]
    near = boxes[others]
    hit = (near[:, 0] < b[2]) & (b[0] < near[:, 2]) & (near[:, 1] < b[3]) & (b[1] < near[:, 3])
    return others[hit]


def postprocess_masks(
    masks: Masks,
    score_threshold: float = SCORE_THRESHOLD,
    iom_threshold: float = IOM_THRESHOLD,
) -> Masks:
    """Filter, sort and de-duplicate SAM 3 masks the way the agent shows them to the model.

    Steps, in order:
      1. drop masks whose score is below ``score_threshold`` (a score equal to it is kept;
         NaN scores are dropped);
      2. drop empty masks (no True pixel);
      3. sort by score, highest first (stable: ties keep their input order);
      4. greedy overlap removal: walking in that order, drop a mask when, for any mask already
         kept, ``intersection / min(area_a, area_b) > iom_threshold`` (intersection over the
         smaller mask, "IoM"; strictly greater). A small mask inside a big one is therefore
         dropped even though their IoU is tiny.

    Everything is read from the masks' RLE (areas, tight boxes, intersections; nothing is decoded), and a
    mask is compared only with the kept masks whose tight boxes overlap its own: the work grows with the
    overlapping pairs and their runs, not with masks squared times pixels.

    Args:
        masks: the candidate masks (``scores`` float32 (N,), ``boxes`` float32 (N, 4) xyxy pixels).
        score_threshold: minimum detection score, default ``SCORE_THRESHOLD`` (reference agent).
        iom_threshold: maximum intersection-over-minimum with a kept mask, default
            ``IOM_THRESHOLD`` (reference agent).

    Returns:
        A new ``Masks`` with the survivors in display order (boxes and scores kept in step, same phrase,
        the RLE shared with ``masks``).
    """
    scores = masks.scores
    areas = masks.areas
    candidates = np.flatnonzero((scores >= score_threshold) & (areas > 0))
    order = candidates[np.argsort(-scores[candidates], kind="stable")]
    boxes = masks.tight_boxes
    counts = masks.counts
    kept: list[int] = []
    for index in order:
        near = overlapping_box_pairs(boxes, int(index), np.asarray(kept, dtype=np.int64))
        if len(near):
            shared = rle.intersections(counts[index], [counts[k] for k in near], masks.height, masks.width,
                                       int(areas[index]))
            if np.any(shared / np.minimum(areas[index], areas[near]) > iom_threshold):
                continue
        kept.append(int(index))
    logger.debug(
        "postprocess_masks: %d in, %d above score/non-empty, %d after overlap removal",
        len(masks),
        order.shape[0],
        len(kept),
    )
    return masks.subset(kept)


def boxes_from_masks(masks: np.ndarray) -> np.ndarray:
    """Tight boxes around masks.

    Args:
        masks: bool (N, H, W).

    Returns:
        float32 (N, 4), xyxy in pixels with x2/y2 exclusive (``max index + 1``), so a single
        pixel at (x, y) gives ``[x, y, x+1, y+1]``; all zeros for an empty mask.

    Raises:
        ValueError: when ``masks`` is not 3-dimensional.
    """
    arr = _check_mask_array(masks)
    n, h, w = arr.shape
    if h == 0 or w == 0:
        return np.zeros((n, 4), dtype=np.float32)
    rows = arr.any(axis=2)  # (N, H)
    cols = arr.any(axis=1)  # (N, W)
    nonempty = rows.any(axis=1)
    y1 = rows.argmax(axis=1)
    y2 = h - rows[:, ::-1].argmax(axis=1)
    x1 = cols.argmax(axis=1)
    x2 = w - cols[:, ::-1].argmax(axis=1)
    boxes = np.stack([x1, y1, x2, y2], axis=1).astype(np.float32)
    boxes[~nonempty] = 0.0
    return boxes.reshape(n, 4)


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
    arr = _check_mask_array(arr)
    n, h, w = arr.shape
    return [{"size": [int(h), int(w)], "counts": rle.text(c)} for c in rle.encode(arr, h, w)]


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
        runs = rle.run_lengths(counts)
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
    return rle.decode_all(counts, h, w)


def to_coco_results(masks: Masks, image_id: int = 1, category_id: int = 1) -> list[dict[str, Any]]:
    """The masks in COCO results format (one dict per mask, in order), read from their RLE (no encoding).

    Each dict: ``image_id`` int, ``category_id`` int, ``segmentation`` compressed RLE with
    ``counts`` as str, ``bbox`` ``[x, y, w, h]`` float pixels (the tight box, as ``pycocotools.mask.toBbox``),
    ``score`` float, ``area`` int pixel count (``pycocotools.mask.area``).
    """
    boxes = masks.tight_boxes
    return [
        {
            "image_id": int(image_id),
            "category_id": int(category_id),
            "segmentation": {"size": [masks.height, masks.width], "counts": rle.text(counts)},
            "bbox": [float(box[0]), float(box[1]), float(box[2] - box[0]), float(box[3] - box[1])],
            "score": float(score),
            "area": int(area),
        }
        for counts, box, area, score in zip(masks.counts, boxes, masks.areas, masks.scores)
    ]
