"""Scoring per-frame predictions against a video segmentation benchmark's expressions (``formats.revos``).

A sample is one expression over one video; its prediction gives each frame one mask, the union of the run's final
objects on that frame. Every frame of the video is scored (``video_metrics.frame_score``) against the union of
the expression's objects on it; a frame the prediction leaves out (or gives as ``None``) is a frame where nothing
was predicted, and a frame where neither side has anything scores J = F = 1. The expression's J and F are the means
over all its frames, J&F = (J + F) / 2.

**Protocols** (``PROTOCOLS``; the number a paper prints is comparable only under its own):

- ``revos-visa`` (ReVOS's default): VISA's ``tools/eval_revos.py``, the evaluator of the ReVOS paper's tables.
  Per expression as above, over **every** frame of the video. Dataset: J and F are averaged over the referring
  expressions (``type_id`` 0) and over the reasoning ones (1), each subset's J&F = (J + F) / 2, and **overall** is
  the mean of the two subsets' values (not the mean over all expressions). Expressions of type 2 (named "nan" by
  that script) are scored one by one but enter neither average. (VISA rounds each expression's J and F to two
  decimals in percent before averaging; this does not, a difference of at most 0.005 points.)
- ``all-expressions``: every expression, J and F averaged over all of them, J&F = (J + F) / 2: the arithmetic of
  MeViS's ``tools/eval_mevis.py``. On ReVOS it is not the published protocol.

Neither leaves a frame out or matches objects: DAVIS 2017's semi-supervised evaluation drops each sequence's first
frame (its mask is given) and last (``all_gt_masks[:, 1:-1]`` in davis2017-evaluation's ``evaluation.py``), and its
unsupervised evaluation keeps every frame but first assigns proposals to objects (Hungarian, on J&F). A referring
or reasoning expression has one target, so the prediction is one mask per frame and nothing is matched.

A sample without a prediction (not run yet), or whose prediction does not fit (a frame outside the video, a mask
of another size), is listed with the reason and left out of the metrics, as in the image evaluation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import InputError
from ..formats.revos import VideoSample
from .evaluate import Unscored
from .video_metrics import FrameScore, frame_score, mean_j_f

Prediction = Mapping[int, Any]  # frame index -> bool (H, W) mask, (N, H, W) masks, {object id: mask}, or None


@dataclass(frozen=True)
class VideoProtocol:
    """How a benchmark's expressions are averaged.

    Attributes:
        name: as a command line takes it.
        subsets: ``(name, type_id)`` pairs averaged apart; empty: one average over every expression.
        description: one sentence for a report.
        source: where the protocol is defined.
    """

    name: str
    subsets: tuple[tuple[str, int], ...]
    description: str
    source: str


PROTOCOLS = {p.name: p for p in (
    VideoProtocol("revos-visa", (("referring", 0), ("reasoning", 1)),
                  "ReVOS as VISA scores it: per expression the mean J and F over every frame; J and F averaged over "
                  "referring (type 0) and reasoning (type 1) expressions apart; overall = the mean of the two",
                  "github.com/cilinyan/VISA tools/eval_revos.py"),
    VideoProtocol("all-expressions", (),
                  "every expression: per expression the mean J and F over every frame; J and F averaged over all "
                  "expressions (MeViS's arithmetic; not ReVOS's published protocol)",
                  "github.com/henghuiding/MeViS tools/eval_mevis.py"),
)}
DEFAULT_PROTOCOL = "revos-visa"


def protocol_named(name: str | None) -> VideoProtocol:
    """The protocol ``name`` (``None``: the default).

    Raises:
        InputError: an unknown name (the message lists the protocols).
    """
    name = name or DEFAULT_PROTOCOL
    if name not in PROTOCOLS:
        raise InputError(f"no video protocol {name!r}; use one of: {', '.join(PROTOCOLS)}")
    return PROTOCOLS[name]


@dataclass(frozen=True)
class ExpressionScore:
    """One expression scored over every frame of its video.

    Attributes:
        id, video, expression_id, expression, type_id: the sample.
        frames: one score per frame, in frame order.
    """

    id: str
    video: str
    expression_id: str
    expression: str
    type_id: int | None
    frames: tuple[FrameScore, ...]

    @property
    def j(self) -> float:
        return mean_j_f(self.frames)[0]

    @property
    def f(self) -> float:
        return mean_j_f(self.frames)[1]

    @property
    def j_and_f(self) -> float:
        j, f = mean_j_f(self.frames)
        return (j + f) / 2

    def to_json(self) -> dict[str, Any]:
        j, f = mean_j_f(self.frames)
        return {"id": self.id, "video": self.video, "expression_id": self.expression_id,
                "expression": self.expression, "type_id": self.type_id, "frames": len(self.frames),
                "J": j, "F": f, "J&F": (j + f) / 2,
                "per_frame": {"J": [s.j for s in self.frames], "F": [s.f for s in self.frames]}}


@dataclass(frozen=True)
class JFMeans:
    """J and F averaged over a set of expressions (``None`` when the set is empty)."""

    expressions: int
    j: float | None
    f: float | None

    @property
    def j_and_f(self) -> float | None:
        return None if self.j is None or self.f is None else (self.j + self.f) / 2

    def to_json(self) -> dict[str, Any]:
        return {"expressions": self.expressions, "J": self.j, "F": self.f, "J&F": self.j_and_f}


def _means(scores: Sequence[ExpressionScore]) -> JFMeans:
    if not scores:
        return JFMeans(0, None, None)
    pairs = [mean_j_f(s.frames) for s in scores]
    return JFMeans(len(scores), math.fsum(j for j, _ in pairs) / len(pairs), math.fsum(f for _, f in pairs) / len(pairs))


@dataclass(frozen=True)
class VideoEvaluation:
    """A dataset's scores under one protocol.

    Attributes:
        protocol: the protocol averaged by.
        scores: one per scored expression, in dataset order.
        unscored: expressions left out, with reasons.
        subsets: ``{subset: JFMeans}`` of the protocol's subsets (empty for ``all-expressions``).
        overall: the headline J, F and J&F (``revos-visa``: the mean of the subsets' values, ``None`` unless both
            have expressions; its ``expressions`` counts those in the subsets).
    """

    protocol: VideoProtocol
    scores: list[ExpressionScore]
    unscored: list[Unscored]
    subsets: dict[str, JFMeans]
    overall: JFMeans

    def to_json(self) -> dict[str, Any]:
        """A JSON-compatible record: the protocol, the means (fractions in [0, 1]), every expression, the unscored."""
        return {"protocol": {"name": self.protocol.name, "description": self.protocol.description,
                             "source": self.protocol.source},
                "overall": self.overall.to_json(),
                "subsets": {name: means.to_json() for name, means in self.subsets.items()},
                "expressions": [s.to_json() for s in self.scores],
                "unscored": [{"id": u.id, "reason": u.reason} for u in self.unscored]}


def _frame_mask(value: Any, size: tuple[int, int], where: str) -> np.ndarray | None:
    """A prediction's value on one frame as one bool (H, W) mask (a union where several objects are given)."""
    if value is None:
        return None
    if isinstance(value, Mapping):  # object id -> mask, as a tracker gives them
        masks = [m for m in value.values() if m is not None]
        return None if not masks else np.logical_or.reduce([_frame_mask(m, size, where) for m in masks])
    mask = np.asarray(value)
    if mask.dtype != bool:
        if not (np.issubdtype(mask.dtype, np.integer) or np.issubdtype(mask.dtype, np.floating)):
            raise InputError(f"{where}: a mask must be a bool array, got {mask.dtype}")
        mask = mask != 0
    if mask.ndim == 3:
        mask = mask.any(axis=0)
    if mask.ndim != 2:
        raise InputError(f"{where}: a mask must be (height, width) or (N, height, width), got shape {mask.shape}")
    if mask.shape != size:
        raise InputError(f"{where}: the mask is {mask.shape[1]}x{mask.shape[0]} pixels (width x height) but the "
                         f"video's frames are {size[1]}x{size[0]}")
    return mask


def score_expression(sample: VideoSample, prediction: Prediction) -> ExpressionScore:
    """Score one expression's prediction over every frame of its video.

    Args:
        sample: the expression and its ground truth.
        prediction: frame index (0-based) -> the predicted mask on that frame: bool (H, W) at the frame size,
            (N, H, W) or ``{object id: mask}`` (their union is scored), or ``None``; a frame left out is a frame
            with nothing predicted. It may be a lazy mapping: each frame's value is read once, when scored.

    Raises:
        InputError: a frame index outside the video, or a mask of another size or type.
    """
    size = (sample.truth.height, sample.truth.width)
    count = len(sample.frames)
    outside = [k for k in prediction if isinstance(k, bool) or not isinstance(k, (int, np.integer))
               or not 0 <= k < count]
    if outside:
        shown = ", ".join(repr(k) for k in outside[:5])
        raise InputError(f"the prediction for {sample.id} names frame(s) {shown}{' ...' if len(outside) > 5 else ''}"
                         f" but the video has {count} frames, indices 0 to {count - 1}")
    frames = tuple(
        frame_score(_frame_mask(prediction.get(k), size, f"the prediction for {sample.id}, frame {k}"),
                    sample.truth.mask(k))
        for k in range(count))
    return ExpressionScore(sample.id, sample.video, sample.expression_id, sample.expression, sample.type_id, frames)


def evaluate_videos(samples: Sequence[VideoSample], predictions: Mapping[str, Prediction],
                    protocol: str | None = None) -> VideoEvaluation:
    """Score every sample that has a prediction and average them by ``protocol`` (see the module docstring).

    Args:
        samples: the dataset's expressions (``formats.revos.read_revos``).
        predictions: sample id -> its ``Prediction`` (see ``score_expression``); samples without one are listed as
            not run yet.
        protocol: a name of ``PROTOCOLS``; ``None`` for ``revos-visa``.

    Raises:
        InputError: an unknown protocol.
    """
    chosen = protocol_named(protocol)
    scores: list[ExpressionScore] = []
    unscored: list[Unscored] = []
    for sample in samples:
        if sample.id not in predictions:
            unscored.append(Unscored(sample.id, "no prediction (not run yet)"))
            continue
        try:
            scores.append(score_expression(sample, predictions[sample.id]))
        except InputError as error:
            unscored.append(Unscored(sample.id, str(error)))
    if not chosen.subsets:
        return VideoEvaluation(chosen, scores, unscored, {}, _means(scores))
    subsets = {name: _means([s for s in scores if s.type_id == type_id]) for name, type_id in chosen.subsets}
    parts = list(subsets.values())
    counted = sum(m.expressions for m in parts)
    if any(m.expressions == 0 for m in parts):
        overall = JFMeans(counted, None, None)
    else:
        overall = JFMeans(counted, math.fsum(m.j for m in parts) / len(parts),  # type: ignore[misc]
                          math.fsum(m.f for m in parts) / len(parts))  # type: ignore[misc]
    return VideoEvaluation(chosen, scores, unscored, subsets, overall)
