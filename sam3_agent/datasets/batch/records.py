"""The record of one batch item: what happened to it, written once its trace is saved.

``item.json`` (in the item's folder) is the item's commit mark: a batch writes the trace first, then this record
(atomically), so a record on disk always describes a complete trace, and an item with a trace but no record was
in flight when the batch stopped (a rerun runs it again). Its fields are read from the trace when it is written;
the trace stays the source of truth for everything else (rounds, contexts, verdicts).

Layout (JSON object)::

    format "sam3_agent.batch_item", version 1
    id, image (as the input gave it), query
    status      done | no_mask | max_rounds | failed | cancelled     (trace status; "failed" also without a trace)
    reason      why it failed / was cancelled / ran out of rounds (null when finished with an answer)
    rounds      rounds run; mistakes {kind: count} (``Round.error`` keys: model mistakes, "backend_error"...)
    seconds     wall time of the item (loading its image and running it)
    width, height   of the image (null when it could not be read)
    trace       "trace.json" (relative to the item's folder), or null when no trace exists (image unreadable)
    masks       the final masks in COCO results form (``mask_set.to_coco_results``; [] for no mask or no answer)
    models      names of the VLM, verifier and segmenter and the preset, from the trace's settings (so a report
                can say when the models were random or scripted)
    deviations  the keys of ``deviations.DEVIATIONS`` in effect in the run (``deviations_in``; absent in records
                written before they were, read as null)
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ...deviations import deviations_in
from ...mask_set import to_coco_results
from ...types import Trace
from ...verification import final_mask_checks
from .items import BatchItem

RECORD_FILE = "item.json"
RECORD_FORMAT = "sam3_agent.batch_item"
RECORD_VERSION = 1
FINISHED = ("done", "no_mask", "max_rounds")  # a rerun skips these; "failed" and "cancelled" run again
ANSWERED = ("done", "no_mask")  # the model gave an answer (possibly "no mask")


@dataclass(frozen=True)
class ItemRecord:
    """What happened to one item (see the module docstring for the fields)."""

    id: str
    image: str
    query: str
    status: str
    reason: str | None = None
    rounds: int = 0
    mistakes: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    width: int | None = None
    height: int | None = None
    trace: str | None = None
    masks: list[dict[str, Any]] = field(default_factory=list)
    models: dict[str, str] = field(default_factory=dict)
    deviations: list[str] | None = None

    @property
    def finished(self) -> bool:
        """True when a rerun must skip this item (``done``, ``no_mask`` or ``max_rounds``)."""
        return self.status in FINISHED

    def matches(self, item: BatchItem) -> bool:
        """True when this record is about ``item`` as it is now (same id, image and query)."""
        return (self.id, self.image, self.query) == (item.id, item.image_ref, item.query)

    def to_json(self) -> dict[str, Any]:
        return {"format": RECORD_FORMAT, "version": RECORD_VERSION, **asdict(self)}


def mistake_counts(trace: Trace) -> dict[str, int]:
    """How many rounds of ``trace`` ended with each kind of mistake or fault (``Round.error``), sorted by kind."""
    counts = Counter(r.error for r in trace.rounds if r.error)
    return dict(sorted(counts.items()))


def record_from_trace(item: BatchItem, trace: Trace, seconds: float, trace_file: str) -> ItemRecord:
    """The record of an item whose run produced ``trace`` (any status)."""
    final = trace.final_masks
    masks = to_coco_results(final, checks=final_mask_checks(trace)) if final is not None and len(final) else []
    width, height = trace.image.size
    return ItemRecord(
        id=item.id, image=item.image_ref, query=item.query, status=trace.status,
        reason=None if trace.status in ANSWERED else trace.error, rounds=len(trace.rounds),
        mistakes=mistake_counts(trace), seconds=round(float(seconds), 3), width=width, height=height,
        trace=trace_file, masks=masks, models=models_of(trace.settings), deviations=deviations_in(trace),
    )


MODEL_KEYS = ("vlm", "verifier", "segmenter", "preset", "vlm_model", "sam3_model")


def models_of(settings: dict[str, Any]) -> dict[str, str]:
    """The model names and preset recorded in a trace's settings (``Agent.settings``), as strings."""
    return {key: str(settings[key]) for key in MODEL_KEYS if settings.get(key) is not None}


def failure_record(item: BatchItem, reason: str, seconds: float) -> ItemRecord:
    """The record of an item that could not start (unreadable image, bad query): no trace exists."""
    return ItemRecord(id=item.id, image=item.image_ref, query=item.query, status="failed", reason=reason,
                      seconds=round(float(seconds), 3))


def read_record(path: Path) -> ItemRecord | None:
    """The record at ``path``, or ``None`` when it is missing or not a record of this version (the item then
    runs again: a record is only ever a cache of its trace, never the only copy of a result)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict) or data.get("format") != RECORD_FORMAT or data.get("version") != RECORD_VERSION:
        return None
    try:
        fields = {k: data[k] for k in ItemRecord.__dataclass_fields__ if k in data}
        record = ItemRecord(**fields)
    except TypeError:
        return None
    if not (isinstance(record.masks, list) and isinstance(record.mistakes, dict) and isinstance(record.models, dict)):
        return None
    if record.deviations is not None and not (isinstance(record.deviations, list)
                                              and all(isinstance(k, str) for k in record.deviations)):
        return None
    return record
