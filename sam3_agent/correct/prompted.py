"""The edits SAM 3's point-prompt model makes: clicks, or a box (with clicks after it), on the photo give one mask
that replaces the selected mask or is added as a new one.

Each edit stores the model's result (``edit_ops.ClickMask`` / ``edit_ops.BoxMask``), so its replay
(``edits.apply_op``) needs no model and gives the same pixels. The model is a ``sam.tracker.PointSegmenter``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..edit_ops import BoxMask, ClickMask, MaskRle
from ..errors import InputError
from ..sam.prompts import check_box, check_clicks
from .edits import EditState, live_item


def refine_with_points(
    state: EditState,
    index: int | None,
    image: Any,
    points: Sequence[tuple[float, float]],
    labels: Sequence[int],
    segmenter: Any,
) -> EditState:
    """Run SAM 3's point-prompt model on the clicks; its mask replaces mask ``index``, or is added when None.

    Args:
        state: current state.
        index: the selected mask, or ``None`` (nothing selected: a new mask).
        image: the trace's PIL image.
        points: (x, y) clicks in original-image pixels (x right, y down); labels: 1 positive / 0 negative.
        segmenter: a ``sam.tracker.PointSegmenter``.

    Raises:
        InputError: bad clicks (outside the image, no positive one...), unknown/deleted mask, or an empty result.
        BackendError: the model failed.
    """
    if index is not None:
        live_item(state.items, index)
    result = segmenter.segment_points(image, points, labels)
    mask = np.asarray(result.mask, dtype=bool)
    if not mask.any():
        raise InputError("SAM 3 found no mask at these clicks: click on the object itself, or use the brush")
    op = ClickMask(index, tuple((float(x), float(y)) for x, y in points), tuple(int(v) for v in labels),
                   MaskRle.from_mask(mask), float(result.score))
    return state.apply(op)


def segment_box(
    state: EditState,
    index: int | None,
    image: Any,
    box: Sequence[float],
    segmenter: Any,
    points: Sequence[tuple[float, float]] = (),
    labels: Sequence[int] = (),
) -> EditState:
    """Run SAM 3's point-prompt model inside ``box`` (plus clicks made after it on the same mask, if any); its mask
    replaces mask ``index``, or is added when None.

    Args:
        state: current state.
        index: the selected mask, or ``None`` (nothing selected: a new mask).
        image: the trace's PIL image.
        box: (x1, y1, x2, y2) in original-image pixels on pixel edges (x right, y down): x1 < x2, y1 < y2, inside
            [0, width] x [0, height] (a drag running over the photo's edge is clipped by the caller first).
        segmenter: a ``sam.tracker.PointSegmenter`` (called with ``box=``).
        points: (x, y) clicks in original-image pixels; labels: 1 positive / 0 negative (negative clicks alone are
            fine: the box says where the object is).

    Raises:
        InputError: a box with no area or reaching outside the image (checked before the model runs), bad clicks,
            an unknown or deleted mask, or an empty result; nothing is recorded.
        BackendError: the model failed.
    """
    if index is not None:
        live_item(state.items, index)
    corners = check_box(box, state.width, state.height)
    check_clicks(points, labels, state.width, state.height, with_box=True)
    result = segmenter.segment_points(image, points, labels, box=corners)
    mask = np.asarray(result.mask, dtype=bool)
    if not mask.any():
        raise InputError("SAM 3 found no mask in this box: draw it around the object, or use the brush")
    op = BoxMask(index, corners, MaskRle.from_mask(mask), float(result.score),
                 tuple((float(x), float(y)) for x, y in points), tuple(int(v) for v in labels))
    return state.apply(op)
