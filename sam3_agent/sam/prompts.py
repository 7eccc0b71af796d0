"""What SAM 3's point-prompt model is asked with, checked before it runs: clicks and a box, in original-image pixels.

Both are refused with an ``InputError`` that says what was wrong (nothing is clipped here: a caller that takes a
drag running over the photo's edge clips it first, see ``ui.correct.actions.box``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..errors import InputError

Box = tuple[float, float, float, float]  # x1, y1, x2, y2 in original-image pixels (pixel edges: 0..width, 0..height)


def check_clicks(
    points: Sequence[tuple[float, float]], labels: Sequence[int], width: int, height: int, with_box: bool = False
) -> tuple[list[list[float]], list[int]]:
    """Validate clicks on a ``width`` x ``height`` image; returns them as plain lists.

    Args:
        points: (x, y) pixel coordinates in the original image, x to the right, y down; pixel (col, row) covers
            [col, col + 1) x [row, row + 1), so valid values lie in [0, width) x [0, height).
        labels: 1 for a positive click (on the object), 0 for a negative one (not on it), one per point.
        with_box: a box comes with the clicks: then no click at all, or only negative ones, is fine (the box says
            where the object is).

    Raises:
        InputError: no click (without a box), counts differ, a label other than 0/1, no positive click (without a
            box), a coordinate that is not a finite number, or a click outside the image (clicks are not clipped: a
            click off the image is a mistake, not a stroke running over the edge).
    """
    pts = [list(p) for p in points]
    labs = list(labels)
    if not pts and not with_box:
        raise InputError("no click given: click on the object (positive) to get a mask")
    if len(pts) != len(labs):
        raise InputError(f"{len(pts)} click(s) but {len(labs)} label(s): give one label (1 or 0) per click")
    for lab in labs:
        if isinstance(lab, bool) or lab not in (0, 1):
            raise InputError(f"click label {lab!r} is not 1 (positive) or 0 (negative)")
    if 1 not in labs and not with_box:
        raise InputError("every click is negative: add at least one positive click on the object")
    out: list[list[float]] = []
    for point in pts:
        if len(point) != 2:
            raise InputError(f"a click must be (x, y); got {point!r}")
        try:
            x, y = float(point[0]), float(point[1])
        except (TypeError, ValueError):
            raise InputError(f"a click must be two numbers (x, y); got {point!r}") from None
        if not (math.isfinite(x) and math.isfinite(y)):
            raise InputError(f"click ({x}, {y}) is not a finite position")
        if not (0.0 <= x < width and 0.0 <= y < height):
            raise InputError(
                f"click ({x:g}, {y:g}) lies outside the {width}x{height} image: click inside it "
                "(coordinates are pixels of the original image, x to the right, y down)"
            )
        out.append([x, y])
    return out, [int(lab) for lab in labs]


def check_box(box: Sequence[float], width: int, height: int) -> Box:
    """Validate a box on a ``width`` x ``height`` image; returns it as four floats.

    Args:
        box: (x1, y1, x2, y2) in original-image pixels, x to the right, y down, on pixel edges: the box covers
            [x1, x2) x [y1, y2), so a box around the whole photo is (0, 0, width, height).

    Raises:
        InputError: not four finite numbers, corners in the wrong order or a box with no area (x2 <= x1 or
            y2 <= y1), or a box reaching outside the image; the message gives the box and the image size.
    """
    try:
        x1, y1, x2, y2 = (float(v) for v in box)
    except (TypeError, ValueError):
        raise InputError(f"a box must be four numbers (x1, y1, x2, y2); got {box!r}") from None
    shown = f"({x1:g}, {y1:g}, {x2:g}, {y2:g})"
    if not all(math.isfinite(v) for v in (x1, y1, x2, y2)):
        raise InputError(f"the box {shown} is not a finite position")
    if x2 <= x1 or y2 <= y1:
        raise InputError(f"the box {shown} has no area (it needs x1 < x2 and y1 < y2): drag a box around the object")
    if x1 < 0 or y1 < 0 or x2 > width or y2 > height:
        raise InputError(f"the box {shown} reaches outside the {width}x{height} image: keep it inside the photo "
                         "(coordinates are pixels of the original image, x to the right, y down)")
    return x1, y1, x2, y2
