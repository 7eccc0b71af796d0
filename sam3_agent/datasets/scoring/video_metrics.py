"""Region similarity J and contour accuracy F of video object segmentation, as the DAVIS benchmark defines them.

Per object (or referring expression) per frame, ``frame_score`` compares a predicted and a true bool (H, W) mask:

- **J**, region similarity: the IoU of the two masks (``metrics.intersection_union``), 1 when both are empty
  (DAVIS's ``db_eval_iou``).
- **F**, contour accuracy: the F-measure of boundary precision and recall. Each mask's boundary is one pixel wide,
  drawn as DAVIS's ``seg2bmap`` draws it: a pixel is on it when it differs from its right, lower or lower-right
  neighbour, where the row below the last and the column after the last repeat the edge (so the image border is
  never a boundary, and the boundary lies half a pixel towards the origin of the region's edge). A boundary pixel
  of one mask is matched when a boundary pixel of the other lies within ``tolerance`` pixels (Euclidean: a
  dilation by the disk of offsets dy² + dx² <= tolerance², the footprint DAVIS takes from
  ``skimage.morphology.disk``), where ``tolerance`` = ceil(0.008 x the frame's diagonal) (DAVIS's ``bound_th``;
  8 px at 480p, 12 px at 720p). Precision P = matched predicted boundary pixels / predicted boundary pixels, recall
  R = matched true / true; F = 2PR / (P + R), 0 when P + R = 0. With no boundary on either side F is 1; with none
  on one side only, 0. (A mask filling the whole frame has no boundary: DAVIS scores it so, and so does this.)
- **J&F** = (J + F) / 2.

Over the frames of one object, J and F are the means of the per-frame values (``mean_j_f``; DAVIS's
``db_statistics`` "mean"). Which frames count is the evaluation protocol's (``video_evaluate``).

Why our own few lines: the DAVIS evaluation code (github.com/davisvideochallenge/davis2017-evaluation) is not on
PyPI (``pip download davis2017-evaluation`` finds no distribution; it installs from a git checkout). The two PyPI
packages that carry copies of it, vos-benchmark 0.1.0 (2023) and esdft-segmetric 0.1.0 (2025), one release each,
require opencv-python, which cannot sit beside this project's opencv-python-headless (both install ``cv2``), and
scikit-image for the disk footprint alone; they read folders of PNG files rather than masks in memory and check
their input with ``assert``. What remains is a few array operations over OpenCV's dilation; the counts stay
integers, so F is computed exactly from them. ``tests/test_video_metrics.py`` pins it with hand-computed values and
against a brute-force distance definition.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import cv2
import numpy as np

from .metrics import intersection_union, iou

BOUNDARY_FRACTION = 0.008  # bound_th of DAVIS's f_measure: the boundary tolerance as a fraction of the diagonal


def boundary_tolerance(height: int, width: int, fraction: float = BOUNDARY_FRACTION) -> int:
    """The boundary tolerance in pixels for a frame of ``height`` x ``width``: ceil(fraction x diagonal), computed
    in DAVIS's order of operations (fraction times the rounded square root of h² + w²); a ``fraction`` of 1 or more
    is taken as pixels already, as DAVIS does."""
    if fraction >= 1:
        return int(fraction)
    return math.ceil(fraction * math.sqrt(height * height + width * width))


@lru_cache(maxsize=16)
def _disk(radius: int) -> np.ndarray:
    offsets = np.arange(-radius, radius + 1)
    return (offsets[:, None] ** 2 + offsets[None, :] ** 2 <= radius * radius).astype(np.uint8)


def boundary_map(mask: np.ndarray) -> np.ndarray:
    """The one-pixel boundary of a mask as DAVIS's ``seg2bmap`` draws it (see the module docstring).

    Args:
        mask: bool (H, W).

    Returns:
        bool (H, W): True on the boundary.
    """
    mask = np.asarray(mask, dtype=bool)
    if mask.size == 0:
        return np.zeros(mask.shape, dtype=bool)
    after = np.pad(mask, ((0, 1), (0, 1)), mode="edge")  # one row and column more, repeating the edge
    return (mask != after[:-1, 1:]) | (mask != after[1:, :-1]) | (mask != after[1:, 1:])


@dataclass(frozen=True)
class FrameScore:
    """One object on one frame, as pixel counts (J and F are derived from them).

    Attributes:
        intersection, union: pixels of the predicted and true masks.
        predicted_boundary, true_boundary: boundary pixels of each (``boundary_map``).
        predicted_matched: predicted boundary pixels within the tolerance of the true boundary.
        true_matched: true boundary pixels within the tolerance of the predicted boundary.
    """

    intersection: int
    union: int
    predicted_boundary: int
    true_boundary: int
    predicted_matched: int
    true_matched: int

    @property
    def j(self) -> float:
        """Region similarity: intersection / union, 1 when both masks are empty."""
        return iou(self.intersection, self.union)

    @property
    def precision(self) -> float:
        """Boundary precision; 1 without a predicted boundary (DAVIS)."""
        return 1.0 if self.predicted_boundary == 0 else self.predicted_matched / self.predicted_boundary

    @property
    def recall(self) -> float:
        """Boundary recall; 1 without a true boundary (DAVIS)."""
        return 1.0 if self.true_boundary == 0 else self.true_matched / self.true_boundary

    @property
    def f(self) -> float:
        """Contour accuracy 2PR / (P + R): 1 without a boundary on either side, 0 without one on one side only."""
        if self.predicted_boundary == 0 or self.true_boundary == 0:
            return 1.0 if self.predicted_boundary == self.true_boundary else 0.0
        # 2PR / (P + R) with P = a / n_p and R = b / n_t is 2ab / (a n_t + b n_p): one rounding, from integers
        a, b = self.predicted_matched, self.true_matched
        denominator = a * self.true_boundary + b * self.predicted_boundary
        return 0.0 if denominator == 0 else 2 * a * b / denominator

    @property
    def j_and_f(self) -> float:
        return (self.j + self.f) / 2


EMPTY_FRAME = FrameScore(0, 0, 0, 0, 0, 0)  # nothing to find and nothing found: J = F = 1


def frame_score(
    prediction: np.ndarray | None, truth: np.ndarray | None, fraction: float = BOUNDARY_FRACTION
) -> FrameScore:
    """J and F counts of one predicted mask against one true mask on one frame.

    Args:
        prediction, truth: bool (H, W), the same shape; ``None`` for an empty mask (at least one must be given
            unless both are empty: two ``None`` give ``EMPTY_FRAME``).
        fraction: the boundary tolerance as a fraction of the frame's diagonal (``boundary_tolerance``).

    Raises:
        ValueError: masks of different shapes.
    """
    if prediction is None and truth is None:
        return EMPTY_FRAME
    if prediction is None:
        prediction = np.zeros(np.shape(truth), dtype=bool)
    if truth is None:
        truth = np.zeros(np.shape(prediction), dtype=bool)
    prediction, truth = np.asarray(prediction, dtype=bool), np.asarray(truth, dtype=bool)
    intersection, union = intersection_union(prediction, truth)  # raises on different shapes
    predicted_edge, true_edge = boundary_map(prediction), boundary_map(truth)
    n_predicted, n_true = int(np.count_nonzero(predicted_edge)), int(np.count_nonzero(true_edge))
    if n_predicted == 0 or n_true == 0:  # nothing to match: F follows from the counts alone
        return FrameScore(intersection, union, n_predicted, n_true, 0, 0)
    footprint = _disk(boundary_tolerance(*truth.shape, fraction))
    near_true = cv2.dilate(true_edge.view(np.uint8), footprint).view(bool)
    near_predicted = cv2.dilate(predicted_edge.view(np.uint8), footprint).view(bool)
    return FrameScore(intersection, union, n_predicted, n_true,
                      int(np.count_nonzero(predicted_edge & near_true)),
                      int(np.count_nonzero(true_edge & near_predicted)))


def mean_j_f(frames: Sequence[FrameScore]) -> tuple[float, float]:
    """``(J, F)``: the means over ``frames`` of the per-frame J and F (the object's J and F; J&F is their mean).

    Raises:
        ValueError: no frames.
    """
    if not frames:
        raise ValueError("J and F need at least one frame")
    return math.fsum(s.j for s in frames) / len(frames), math.fsum(s.f for s in frames) / len(frames)
