"""Mask post-processing (score threshold, empty drop, sort, overlap removal) and COCO RLE I/O.

``mask_set.Masks`` holds masks as COCO compressed RLE (``sam3_agent.rle``), decoded to ``bool (N, H, W)`` at the
original image resolution where pixels are needed; at the edges (traces, exports) RLE is written as
``{"size": [H, W], "counts": str}``. All RLE encoding and decoding goes through ``pycocotools``.
"""

from __future__ import annotations

import logging

import numpy as np

from .. import rle
from ..limits import DEFAULT_SCORE_THRESHOLD
from ..mask_set import Masks
from ..rle import check_mask_array

logger = logging.getLogger(__name__)

SCORE_THRESHOLD = DEFAULT_SCORE_THRESHOLD  # default of the reference agent
IOM_THRESHOLD = 0.3  # overlap rule of the reference agent


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
    arr = check_mask_array(masks)
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


