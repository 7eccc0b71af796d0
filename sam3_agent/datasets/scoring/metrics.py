"""Segmentation metrics of reasoning / referring segmentation benchmarks, per sample and over a dataset.

Per sample, the prediction is the union of the agent's final masks (nothing for "no mask", a failed run or an
exhausted round budget) and is compared with the target region, pixels in the ignore region left out:

- intersection ``I`` and union ``U`` in pixels; IoU = I / U, and 1.0 when U = 0 (no target and nothing
  predicted: counted as right, as LISA's evaluation of ReasonSeg does).

Over a dataset (``summarize``):

- gIoU: the mean of the per-sample IoUs (LISA's definition for ReasonSeg);
- cIoU: cumulative intersection over cumulative union, sum(I) / sum(U) (``None`` when sum(U) = 0);
- precision at IoU t, t in 0.5, 0.6, 0.7, 0.8, 0.9: the fraction of samples *with a target* whose IoU >= t
  (the referring-segmentation convention, e.g. LAVT's evaluation);
- no-target accuracy: the fraction of samples *without a target* answered with nothing (``None`` without such
  samples); and, for samples with a target, how many were answered with nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

PRECISION_THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9)


def intersection_union(prediction: np.ndarray, target: np.ndarray, ignore: np.ndarray | None = None) -> tuple[int, int]:
    """Pixels in both and in either of ``prediction`` and ``target``, leaving out ``ignore``.

    Args:
        prediction, target: bool (H, W).
        ignore: bool (H, W) or ``None``.

    Returns:
        ``(intersection, union)`` pixel counts.

    Raises:
        ValueError: arrays of different shapes.
    """
    if prediction.shape != target.shape or (ignore is not None and ignore.shape != target.shape):
        raise ValueError(f"prediction {prediction.shape}, target {target.shape} and ignore "
                         f"{None if ignore is None else ignore.shape} must have one shape")
    both = np.logical_and(prediction, target)
    either = np.logical_or(prediction, target)
    if ignore is not None:
        both &= ~ignore
        either &= ~ignore
    return int(both.sum()), int(either.sum())


def iou(intersection: int, union: int) -> float:
    """``intersection / union``, or 1.0 when ``union`` is 0 (nothing to find and nothing found)."""
    return 1.0 if union == 0 else intersection / union


@dataclass(frozen=True)
class SampleScore:
    """One scored sample.

    Attributes:
        id, query: the sample.
        intersection, union: pixels (ignore region left out).
        target_pixels, predicted_pixels: pixels of the target and of the prediction outside the ignore region.
        status: the run's status (``done``, ``no_mask``, ``max_rounds``, ``failed``, ``cancelled``).
        rounds: rounds the run took.
        mistakes: ``{kind: count}`` of the run's rounds that ended in a mistake or fault.
        seconds: wall time of the item.
        attributes: the sample's breakdown keys (e.g. ``{"query_type": "long"}``).
        note: how the ground truth's frame was chosen on a photo with an EXIF orientation ("" when nothing to say).
    """

    id: str
    query: str
    intersection: int
    union: int
    target_pixels: int
    predicted_pixels: int
    status: str
    rounds: int = 0
    mistakes: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    attributes: dict[str, str] = field(default_factory=dict)
    note: str = ""

    @property
    def iou(self) -> float:
        return iou(self.intersection, self.union)

    @property
    def no_target(self) -> bool:
        """True when the query refers to nothing in the image."""
        return self.target_pixels == 0


@dataclass(frozen=True)
class Metrics:
    """Dataset metrics (see the module docstring); ``None`` where a quantity is undefined (no such samples).

    Attributes:
        samples: samples scored.
        giou, ciou: see the module docstring.
        precision: ``{threshold: fraction}`` over samples with a target.
        target_samples: samples with a target; ``empty_on_target``: those answered with nothing.
        no_target_samples: samples without a target; ``no_target_accuracy``: fraction answered with nothing.
        mean_rounds, mean_seconds: per sample.
    """

    samples: int
    giou: float | None
    ciou: float | None
    precision: dict[float, float | None]
    target_samples: int
    empty_on_target: int
    no_target_samples: int
    no_target_accuracy: float | None
    mean_rounds: float | None
    mean_seconds: float | None

    def to_json(self) -> dict[str, object]:
        return {
            "samples": self.samples, "gIoU": self.giou, "cIoU": self.ciou,
            "precision": {f"{t:.1f}": p for t, p in self.precision.items()},
            "target_samples": self.target_samples, "empty_on_target": self.empty_on_target,
            "no_target_samples": self.no_target_samples, "no_target_accuracy": self.no_target_accuracy,
            "mean_rounds": self.mean_rounds, "mean_seconds": self.mean_seconds,
        }


def summarize(scores: Sequence[SampleScore], thresholds: Sequence[float] = PRECISION_THRESHOLDS) -> Metrics:
    """The dataset metrics of ``scores`` (see the module docstring)."""
    n = len(scores)
    targets = [s for s in scores if not s.no_target]
    empties = [s for s in scores if s.no_target]
    total_union = sum(s.union for s in scores)
    return Metrics(
        samples=n,
        giou=sum(s.iou for s in scores) / n if n else None,
        ciou=sum(s.intersection for s in scores) / total_union if total_union else None,
        precision={t: (sum(s.iou >= t for s in targets) / len(targets) if targets else None) for t in thresholds},
        target_samples=len(targets),
        empty_on_target=sum(s.predicted_pixels == 0 for s in targets),
        no_target_samples=len(empties),
        no_target_accuracy=sum(s.predicted_pixels == 0 for s in empties) / len(empties) if empties else None,
        mean_rounds=sum(s.rounds for s in scores) / n if n else None,
        mean_seconds=sum(s.seconds for s in scores) / n if n else None,
    )


def breakdown(scores: Iterable[SampleScore], groups_of: Callable[[SampleScore], Iterable[str]]) -> dict[str, Metrics]:
    """Metrics per group: ``groups_of(score)`` names the groups a sample belongs to (one or several)."""
    grouped: dict[str, list[SampleScore]] = {}
    for score in scores:
        for group in groups_of(score):
            grouped.setdefault(group, []).append(score)
    return {group: summarize(members) for group, members in grouped.items()}


def breakdowns(scores: Sequence[SampleScore]) -> dict[str, dict[str, Metrics]]:
    """The report's breakdowns: by run status, by rounds taken, by mistake kind (a sample counts once in each kind
    it made; ``none`` for runs without mistakes), by target presence, and by each sample attribute."""
    result = {
        "status": breakdown(scores, lambda s: [s.status]),
        "rounds": breakdown(sorted(scores, key=lambda s: s.rounds), lambda s: [str(s.rounds)]),
        "mistake": breakdown(scores, lambda s: sorted(s.mistakes) or ["none"]),
        "target": breakdown(scores, lambda s: ["no target" if s.no_target else "target"]),
    }
    for key in sorted({k for s in scores for k in s.attributes}):
        result[key] = breakdown(scores, lambda s, key=key: [s.attributes[key]] if key in s.attributes else [])
    return result
