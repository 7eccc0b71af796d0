"""How the Correct tab shows a photo: its view size, and positions and masks mapped between view and full size.

The page shows the photo at ``ViewGeometry`` size (longer side at most ``VIEW_MAX_SIDE``); clicks, boxes and brush
strokes arrive in those view pixels (x right, y down, in the shown image's own pixels, whatever the canvas zoom) and are
mapped to the trace image's full resolution, where every edit happens. No Gradio here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import InputError

VIEW_MAX_SIDE = 1024  # px: longer side of the photo as the page shows it (a 4000 px photo is shown at 1024 px)


@dataclass(frozen=True)
class ViewGeometry:
    """How the page shows an image: full size ``width`` x ``height`` at ``view_width`` x ``view_height`` pixels."""

    width: int
    height: int
    view_width: int
    view_height: int

    @staticmethod
    def for_size(width: int, height: int, max_side: int = VIEW_MAX_SIDE) -> ViewGeometry:
        """The view of a ``width`` x ``height`` image: unchanged when its longer side fits ``max_side``, else scaled
        down (aspect ratio kept, sides rounded to whole pixels)."""
        scale = min(1.0, max_side / max(width, height))
        return ViewGeometry(width, height, max(1, round(width * scale)), max(1, round(height * scale)))

    @property
    def scaled(self) -> bool:
        """True when the view is smaller than the image."""
        return (self.view_width, self.view_height) != (self.width, self.height)

    def to_image(self, x: Any, y: Any) -> tuple[float, float]:
        """A click at view pixel (x, y) as a position in full-resolution pixels: ``(x * W / w, y * H / h)``.

        At scale 1 this is (x, y) itself. Raises InputError for a missing or non-numeric position or one outside
        ``[0, view_width) x [0, view_height)``.
        """
        try:
            fx, fy = float(x), float(y)
        except (TypeError, ValueError):
            raise InputError("the click gave no position on the image: click on the picture itself") from None
        if not (math.isfinite(fx) and math.isfinite(fy) and 0 <= fx < self.view_width and 0 <= fy < self.view_height):
            raise InputError(f"the click at ({x}, {y}) is outside the image ({self.view_width}x{self.view_height} "
                             "as shown): click on the picture itself")
        return fx * self.width / self.view_width, fy * self.height / self.view_height

    def box_to_image(self, x1: Any, y1: Any, x2: Any, y2: Any) -> tuple[float, float, float, float]:
        """A box dragged between view positions (x1, y1) and (x2, y2) (pixel edges, corners in any order) as
        (x1, y1, x2, y2) in full-resolution pixels, x1 < x2 and y1 < y2, clipped to the image (a drag may run over
        the photo's edge, as a brush stroke may).

        Raises:
            InputError: a corner that is not a number; a box wholly outside the photo; or one narrower or lower than
                a pixel of the photo as shown once clipped (a tap, or a line): it has no area to segment in.
        """
        try:
            xs = sorted((float(x1), float(x2)))
            ys = sorted((float(y1), float(y2)))
        except (TypeError, ValueError):
            raise InputError("the box gave no position on the image: drag a box on the picture itself") from None
        if not all(math.isfinite(v) for v in (*xs, *ys)):
            raise InputError("the box gave no position on the image: drag a box on the picture itself")
        shown = f"({xs[0]:g}, {ys[0]:g}) to ({xs[1]:g}, {ys[1]:g})"
        if xs[1] <= 0 or ys[1] <= 0 or xs[0] >= self.view_width or ys[0] >= self.view_height:
            raise InputError(f"the box from {shown} lies outside the image ({self.view_width}x{self.view_height} as "
                             "shown): drag it on the picture itself")
        left, right = max(0.0, xs[0]), min(float(self.view_width), xs[1])
        top, bottom = max(0.0, ys[0]), min(float(self.view_height), ys[1])
        if right - left < 1 or bottom - top < 1:
            raise InputError(f"the box from {shown} has no area on the image: drag a box around the object "
                             "(or tap two opposite corners)")
        sx, sy = self.width / self.view_width, self.height / self.view_height
        # min(): the scaled edge may round past the image by a hair
        return left * sx, top * sy, min(self.width, right * sx), min(self.height, bottom * sy)


def view_mask(mask: np.ndarray, geometry: ViewGeometry) -> np.ndarray:
    """A full-resolution bool (H, W) mask at the view size, bool (h, w): a view pixel is set when the full
    pixel under its centre is (nearest neighbour, the inverse of ``strokes.stroke_from_view_mask``)."""
    if not geometry.scaled:
        return mask
    rows = np.minimum(((np.arange(geometry.view_height) + 0.5) * geometry.height / geometry.view_height)
                      .astype(np.int64), geometry.height - 1)
    cols = np.minimum(((np.arange(geometry.view_width) + 0.5) * geometry.width / geometry.view_width)
                      .astype(np.int64), geometry.width - 1)
    return mask[rows[:, None], cols[None, :]]
