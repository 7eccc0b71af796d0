"""How the Correct tab shows a photo: its view size, and positions and masks mapped between view and full size.

The page shows the photo at ``ViewGeometry`` size (longer side at most ``VIEW_MAX_SIDE``); clicks and brush strokes
arrive in those view pixels (x right, y down, in the shown image's own pixels, whatever the canvas zoom) and are
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
