"""Mask post-processing (score threshold, empty drop, sort, overlap removal) and COCO RLE I/O.

Masks inside the core are ``bool (N, H, W)`` arrays at the original image resolution; RLE
(COCO compressed, ``{"size": [H, W], "counts": str}``) is used only at the edges (traces,
exports). All RLE encoding and decoding goes through ``pycocotools``.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from pycocotools import mask as coco_mask

from sam3_agent.types import Masks

logger = logging.getLogger(__name__)

SCORE_THRESHOLD = 0.5  # default of the reference agent
IOM_THRESHOLD = 0.3  # overlap rule of the reference agent

# Pixels per chunk when counting pairwise intersections: keeps the float32 matmul exact
# (every partial sum stays below 2**24) and the temporary buffers small on huge images.
_INTERSECTION_CHUNK = 1 << 20


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


def pairwise_intersections(masks: np.ndarray) -> np.ndarray:
    """Pixel counts of the intersection of every pair of masks.

    Args:
        masks: bool (N, H, W).

    Returns:
        int64 (N, N): entry [i, j] is the number of pixels in both mask i and mask j (the
        diagonal holds the areas). Computed as chunked matrix products of the flattened masks.
    """
    arr = _check_mask_array(masks)
    n = arr.shape[0]
    flat = arr.reshape(n, arr.shape[1] * arr.shape[2])
    total = np.zeros((n, n), dtype=np.int64)
    for start in range(0, flat.shape[1], _INTERSECTION_CHUNK):
        chunk = flat[:, start : start + _INTERSECTION_CHUNK].astype(np.float32)
        total += np.rint(chunk @ chunk.T).astype(np.int64)
    return total


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

    Args:
        masks: the candidate masks; ``masks.masks`` bool (N, H, W), ``scores`` float32 (N,),
            ``boxes`` float32 (N, 4) xyxy pixels.
        score_threshold: minimum detection score, default ``SCORE_THRESHOLD`` (reference agent).
        iom_threshold: maximum intersection-over-minimum with a kept mask, default
            ``IOM_THRESHOLD`` (reference agent).

    Returns:
        A new ``Masks`` with the survivors in display order (boxes and scores kept in step,
        same phrase).

    Raises:
        ValueError: when masks, scores and boxes disagree in count or have the wrong shape.
    """
    arr = _check_mask_array(masks.masks)
    n = arr.shape[0]
    scores = np.asarray(masks.scores, dtype=np.float32).reshape(-1)
    boxes = np.asarray(masks.boxes, dtype=np.float32)
    if scores.shape[0] != n or boxes.shape != (n, 4):
        raise ValueError(
            f"masks, scores and boxes must describe the same N masks: got masks {arr.shape}, "
            f"scores {scores.shape}, boxes {boxes.shape} (boxes must be (N, 4))"
        )

    areas = arr.reshape(n, arr.shape[1] * arr.shape[2]).sum(axis=1)
    candidates = np.flatnonzero((scores >= score_threshold) & (areas > 0))
    order = candidates[np.argsort(-scores[candidates], kind="stable")]

    inter = pairwise_intersections(arr[order])
    cand_areas = areas[order].astype(np.float64)
    kept_pos: list[int] = []
    for pos in range(order.shape[0]):
        if kept_pos:
            kept = np.asarray(kept_pos)
            smaller = np.minimum(cand_areas[pos], cand_areas[kept])
            iom = inter[pos, kept] / smaller
            if np.any(iom > iom_threshold):
                continue
        kept_pos.append(pos)

    keep = order[np.asarray(kept_pos, dtype=np.int64)]
    logger.debug(
        "postprocess_masks: %d in, %d above score/non-empty, %d after overlap removal",
        n,
        order.shape[0],
        keep.shape[0],
    )
    return Masks(arr[keep], scores[keep], boxes[keep], masks.phrase)


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
    if n == 0:
        return []
    fortran = np.asfortranarray(arr.transpose(1, 2, 0).astype(np.uint8))
    encoded = coco_mask.encode(fortran)
    return [{"size": [int(h), int(w)], "counts": r["counts"].decode("ascii")} for r in encoded]


def _check_size(size: Any, index: int) -> tuple[int, int]:
    if (
        not isinstance(size, (list, tuple))
        or len(size) != 2
        or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0 for v in size)
    ):
        raise ValueError(f"RLE {index}: 'size' must be [height, width] as two non-negative integers; got {size!r}")
    return int(size[0]), int(size[1])


def _compressed_counts_total(counts: bytes, index: int) -> int:
    """Sum of the run lengths in a COCO compressed counts string.

    Only used to validate input before handing it to pycocotools, whose decoder leaves pixels
    uninitialised when the runs cover fewer than H*W pixels. Format (COCO mask API): runs are
    written as 6-bit chunks offset by 48, low 5 bits data, bit 0x20 "more", bit 0x10 of the last
    chunk the sign; from the fourth run on, each value is a delta to the run two places before.
    """
    runs: list[int] = []
    pos = 0
    length = len(counts)
    while pos < length:
        value = 0
        shift = 0
        more = True
        while more:
            if pos >= length:
                raise ValueError(f"RLE {index}: 'counts' ends in the middle of a run length")
            chunk = counts[pos] - 48
            if not 0 <= chunk < 64:
                raise ValueError(f"RLE {index}: 'counts' has a character outside the COCO RLE alphabet")
            value |= (chunk & 0x1F) << shift
            more = bool(chunk & 0x20)
            pos += 1
            shift += 5
            if not more and chunk & 0x10:
                value -= 1 << shift
        if len(runs) > 2:
            value += runs[-2]
        if value < 0:
            raise ValueError(f"RLE {index}: 'counts' decodes to a negative run length")
        runs.append(value)
    return sum(runs)


def decode_rle(rles: list[dict[str, Any]], *, height: int | None = None, width: int | None = None) -> np.ndarray:
    """Decode COCO RLEs to boolean masks (via ``pycocotools.mask.decode``).

    Args:
        rles: dicts ``{"size": [H, W], "counts": str | bytes}`` (compressed RLE) or with
            ``counts`` as a list of run lengths (uncompressed RLE); all of the same size.
        height, width: the mask size; required only to decode an empty list, and checked against
            the RLEs when given.

    Returns:
        bool (N, H, W).

    Raises:
        ValueError: on a malformed RLE (missing keys, bad size, counts that are not valid
            COCO RLE or that do not cover exactly H*W pixels), mixed sizes, or an empty list
            without ``height``/``width``.
    """
    if not isinstance(rles, (list, tuple)):
        raise ValueError(f"rles must be a list of RLE dicts; got {type(rles).__name__}")
    expected = None if height is None or width is None else (int(height), int(width))
    if not rles:
        if expected is None:
            raise ValueError("cannot decode an empty list of RLEs without height and width")
        return np.zeros((0, *expected), dtype=bool)

    prepared: list[dict[str, Any]] = []
    for i, rle in enumerate(rles):
        if not isinstance(rle, dict) or "size" not in rle or "counts" not in rle:
            raise ValueError(f"RLE {i}: expected a dict with 'size' and 'counts'; got {rle!r:.80}")
        h, w = _check_size(rle["size"], i)
        if expected is None:
            expected = (h, w)
        elif (h, w) != expected:
            raise ValueError(f"RLE {i}: size {[h, w]} differs from the expected {list(expected)}")
        counts = rle["counts"]
        if isinstance(counts, str):
            try:
                counts = counts.encode("ascii")
            except UnicodeEncodeError as exc:
                raise ValueError(f"RLE {i}: 'counts' must be ASCII COCO RLE text") from exc
        if isinstance(counts, (bytes, bytearray)):
            total = _compressed_counts_total(bytes(counts), i)
            if total != h * w:
                raise ValueError(f"RLE {i}: run lengths cover {total} pixels, expected {h}x{w} = {h * w}")
            prepared.append({"size": [h, w], "counts": bytes(counts)})
        elif isinstance(counts, (list, tuple)):
            if not all(isinstance(c, (int, np.integer)) and not isinstance(c, bool) and c >= 0 for c in counts):
                raise ValueError(f"RLE {i}: uncompressed 'counts' must be non-negative integers")
            if sum(int(c) for c in counts) != h * w:
                raise ValueError(f"RLE {i}: run lengths cover {sum(counts)} pixels, expected {h}x{w} = {h * w}")
            prepared.append(coco_mask.frPyObjects({"size": [h, w], "counts": [int(c) for c in counts]}, h, w))
        else:
            raise ValueError(f"RLE {i}: 'counts' must be str, bytes or a list of ints; got {type(counts).__name__}")

    h, w = expected
    if h * w == 0:
        return np.zeros((len(prepared), h, w), dtype=bool)
    decoded = coco_mask.decode(prepared)  # uint8 (H, W, N), Fortran order
    return np.ascontiguousarray(decoded.transpose(2, 0, 1)).astype(bool)


def to_coco_results(masks: Masks, image_id: int = 1, category_id: int = 1) -> list[dict[str, Any]]:
    """The masks in COCO results format (one dict per mask, in order).

    Each dict: ``image_id`` int, ``category_id`` int, ``segmentation`` compressed RLE with
    ``counts`` as str, ``bbox`` ``[x, y, w, h]`` float pixels (``pycocotools.mask.toBbox``),
    ``score`` float, ``area`` int pixel count (``pycocotools.mask.area``).
    """
    rles = encode_rle(masks.masks)
    if not rles:
        return []
    coco_rles = [{"size": r["size"], "counts": r["counts"].encode("ascii")} for r in rles]
    bboxes = coco_mask.toBbox(coco_rles)
    areas = coco_mask.area(coco_rles)
    scores = np.asarray(masks.scores, dtype=np.float32).reshape(-1)
    return [
        {
            "image_id": int(image_id),
            "category_id": int(category_id),
            "segmentation": rle,
            "bbox": [float(v) for v in bbox],
            "score": float(score),
            "area": int(area),
        }
        for rle, bbox, area, score in zip(rles, bboxes, areas, scores)
    ]
