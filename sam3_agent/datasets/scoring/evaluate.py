"""Scoring a batch's answers against a benchmark's ground truth.

Each sample ran as a batch item (same id); its answer is read from the item's record (``records``): the union of
its final masks, or nothing when the run answered "no mask", failed or ran out of rounds (those count as empty
answers, so failures lower the scores instead of vanishing from them). A sample cannot be scored when it has no
record (not run yet), its image could not be read, or its ground truth does not fit the image; such samples are
listed with the reason and left out of the metrics. On a photo with an EXIF orientation the ground truth is scored in
the answer's (upright) frame, each format's frame followed and a frame the sizes cannot tell noted (``frames``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ...deviations import summary_lines
from ...errors import InputError
from ...rle import decode_rle
from ..batch.layout import BatchLayout
from ..batch.outputs import model_notes
from ..batch.records import ItemRecord
from ..formats.ground_truth import EvalSample
from .frames import upright_truth
from .metrics import Metrics, SampleScore, breakdowns, intersection_union, summarize


@dataclass(frozen=True)
class Unscored:
    """A sample left out of the metrics, and why."""

    id: str
    reason: str


@dataclass(frozen=True)
class Evaluation:
    """The scores of a dataset.

    Attributes:
        scores: one per scored sample, in dataset order.
        unscored: samples left out, with reasons.
        metrics: over ``scores`` (``metrics.summarize``).
        breakdowns: ``{breakdown: {group: Metrics}}`` (``metrics.breakdowns``).
        notes: what the models were when that makes the numbers meaningless (``outputs.model_notes``).
        models: the VLMs that answered, as the records name them (sorted; for the published numbers' rows).
        deviations: one line per deviation from the reference agent in effect in any run, with how many runs it was
            in (``deviations.summary_lines``; docs/reference.md says what each is).
    """

    scores: list[SampleScore]
    unscored: list[Unscored]
    metrics: Metrics
    breakdowns: dict[str, dict[str, Metrics]]
    notes: list[str]
    models: list[str] = field(default_factory=list)
    deviations: list[str] = field(default_factory=list)


def prediction_mask(record: ItemRecord, height: int, width: int) -> np.ndarray:
    """The union of a record's final masks, bool (H, W) (all False when it has none).

    Raises:
        ValueError: a mask of another size or malformed RLE in the record.
    """
    if not record.masks:
        return np.zeros((height, width), dtype=bool)
    return decode_rle([m["segmentation"] for m in record.masks], height=height, width=width).any(axis=0)


def score_sample(sample: EvalSample, record: ItemRecord | None) -> SampleScore | Unscored:
    """Score one sample from its item's record (see the module docstring)."""
    if record is None:
        return Unscored(sample.id, "not run yet (run the evaluation again to finish the batch)")
    if record.width is None or record.height is None:
        return Unscored(sample.id, f"the image could not be read: {record.reason}")
    height, width = record.height, record.width
    try:
        target, ignore, note = upright_truth(sample, height, width)
        prediction = prediction_mask(record, height, width)
    except (InputError, ValueError) as error:
        return Unscored(sample.id, str(error))
    intersection, union = intersection_union(prediction, target, ignore)
    return SampleScore(
        id=sample.id, query=sample.query, intersection=intersection, union=union,
        target_pixels=int((target & ~ignore).sum()), predicted_pixels=int((prediction & ~ignore).sum()),
        status=record.status, rounds=record.rounds, mistakes=dict(record.mistakes), seconds=record.seconds,
        attributes=dict(sample.attributes), note=note or "",
    )


def evaluate(samples: Sequence[EvalSample], layout: BatchLayout) -> Evaluation:
    """Score every sample of a batch that ran them (``layout`` over ``[s.item() for s in samples]``)."""
    scores, unscored, records = [], [], []
    for sample in samples:
        record = layout.read_record(sample.item())
        if record is not None:
            records.append(record)
        result = score_sample(sample, record)
        (scores if isinstance(result, SampleScore) else unscored).append(result)
    models = sorted({r.models["vlm"] for r in records if r.models.get("vlm")})
    return Evaluation(scores, unscored, summarize(scores), breakdowns(scores), model_notes(records), models,
                      summary_lines([r.deviations for r in records]))
