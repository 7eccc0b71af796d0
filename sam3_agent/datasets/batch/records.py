"""The record of one batch item: what happened to it, written once its trace is saved.

``item.json`` (in the item's folder) is the item's commit mark: a batch writes the trace first, then this record
(atomically), so a record on disk always describes a complete trace, and an item with a trace but no record was
in flight when the batch stopped (a rerun runs it again). Its fields are read from the trace when it is written;
the trace stays the source of truth for everything else (rounds, contexts, verdicts).

Layout (JSON object)::

    format "sam3_agent.batch_item", version 1
    id, image (as the input gave it; null for a video item), query
    kind        "image", or "video" for a clip (the fields below marked "video" are written for clips only)
    status      done | no_mask | max_rounds | failed | cancelled     (trace status; "failed" also without a trace)
    reason      why it failed / was cancelled / ran out of rounds (null when finished with an answer)
    rounds      rounds run; mistakes {kind: count} (``Round.error`` keys: model mistakes, "backend_error"...)
    seconds     wall time of the item (loading its image and running it)
    width, height   of the image (null when it could not be read)
    trace       "trace.json" (relative to the item's folder), or null when no trace exists (image unreadable)
    masks       the final masks in COCO results form (``mask_set.to_coco_results``; [] for no mask or no answer)
    models      names of the VLM, verifier and segmenter and the preset, from the trace's settings (so a report
                can say when the models were random or scripted); a video item's also its tracker
    deviations  the keys of ``deviations.DEVIATIONS`` in effect in the run (``deviations_in``; absent in records
                written before they were, read as null; a video item's: its keyframe runs')
    video       (video) the clip as the input gave it
    keyframe    (video) the frame the agent reasoned on (0-based); keyframe_time: the time the input gave, or null
    frames      (video) the clip's frame count; objects: objects tracked; frames_tracked: frames the tracker computed
    (a video item's trace is "video_trace.json" (``video.saved``) and its masks are in that folder's exports, not
    in ``masks``: a record stays small whatever the clip's length)

Records written before video items existed have no ``kind``: they read as photos.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ...deviations import KEYS, deviations_in
from ...mask_set import to_coco_results
from ...types import Trace
from ...verification import final_mask_checks
from ...video.records import VideoTrace
from .items import BatchItem, Item, VideoItem

RECORD_FILE = "item.json"
RECORD_FORMAT = "sam3_agent.batch_item"
RECORD_VERSION = 1
FINISHED = ("done", "no_mask", "max_rounds")  # a rerun skips these; "failed" and "cancelled" run again
ANSWERED = ("done", "no_mask")  # the model gave an answer (possibly "no mask")
STOP_REASON = "stopped by the user (Ctrl-C or SIGTERM); a rerun runs this item again"


@dataclass(frozen=True)
class ItemRecord:
    """What happened to one item (see the module docstring for the fields)."""

    id: str
    image: str | None
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
    kind: str = "image"
    video: str | None = None
    keyframe: int | None = None
    keyframe_time: float | None = None
    frames: int | None = None
    objects: int | None = None
    frames_tracked: int | None = None

    @property
    def finished(self) -> bool:
        """True when a rerun must skip this item (``done``, ``no_mask`` or ``max_rounds``)."""
        return self.status in FINISHED

    def matches(self, item: Item) -> bool:
        """True when this record is about ``item`` as it is now: same kind, id, input and query, and for a clip the
        same keyframe as given (an index, or a time)."""
        if isinstance(item, VideoItem):
            same_keyframe = (self.keyframe_time == item.keyframe_time if item.keyframe_time is not None
                             else self.keyframe_time is None and self.keyframe == (item.keyframe or 0))
            return self.kind == "video" and (self.id, self.video, self.query) == (item.id, item.video_ref,
                                                                                  item.query) and same_keyframe
        return self.kind == "image" and (self.id, self.image, self.query) == (item.id, item.image_ref, item.query)

    def to_json(self) -> dict[str, Any]:
        document = asdict(self)
        if self.kind == "image":  # a photo's record keeps its version-1 form
            for key in VIDEO_FIELDS:
                document.pop(key)
        return {"format": RECORD_FORMAT, "version": RECORD_VERSION, **document}


VIDEO_FIELDS = ("kind", "video", "keyframe", "keyframe_time", "frames", "objects", "frames_tracked")


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


def record_from_video_trace(item: VideoItem, trace: VideoTrace, seconds: float, trace_file: str) -> ItemRecord:
    """The record of a video item whose run produced ``trace`` (any status): rounds and mistakes summed over its
    keyframe runs, the clip's size and length, the objects and the frames tracked."""
    rounds = [r for run in trace.keyframes for r in run.trace.rounds]
    mistakes = Counter(r.error for r in rounds if r.error)
    keyframe = trace.keyframes[0].frame_index if trace.keyframes else (item.keyframe or 0)
    models = models_of(trace.settings.get("agent") or {})
    if trace.settings.get("tracker"):
        models["tracker"] = str(trace.settings["tracker"])
    in_effect = {key for run in trace.keyframes for key in deviations_in(run.trace)}
    return ItemRecord(
        id=item.id, image=None, query=item.query, status=trace.status,
        reason=None if trace.status in ANSWERED else trace.error, rounds=len(rounds),
        mistakes=dict(sorted(mistakes.items())), seconds=round(float(seconds), 3), width=trace.clip.width,
        height=trace.clip.height, trace=trace_file, models=models, kind="video", video=item.video_ref,
        keyframe=keyframe, keyframe_time=item.keyframe_time, frames=trace.clip.frame_count,
        objects=len(trace.tracks.objects), frames_tracked=int(trace.timings.get("frames_tracked", 0)),
        deviations=[key for key in KEYS if key in in_effect] if trace.keyframes else None,
    )


MODEL_KEYS = ("vlm", "verifier", "segmenter", "preset", "vlm_model", "sam3_model")


def models_of(settings: dict[str, Any]) -> dict[str, str]:
    """The model names and preset recorded in a trace's settings (``Agent.settings``), as strings."""
    return {key: str(settings[key]) for key in MODEL_KEYS if settings.get(key) is not None}


def failure_record(item: Item, reason: str, seconds: float) -> ItemRecord:
    """The record of an item that could not start (unreadable image or clip, bad query): no trace exists."""
    if isinstance(item, VideoItem):
        return ItemRecord(id=item.id, image=None, query=item.query, status="failed", reason=reason,
                          seconds=round(float(seconds), 3), kind="video", video=item.video_ref,
                          keyframe=None if item.keyframe_time is not None else (item.keyframe or 0),
                          keyframe_time=item.keyframe_time)
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
    if not (isinstance(record.masks, list) and isinstance(record.mistakes, dict) and isinstance(record.models, dict)
            and record.kind in ("image", "video")):
        return None
    if record.deviations is not None and not (isinstance(record.deviations, list)
                                              and all(isinstance(k, str) for k in record.deviations)):
        return None
    return record
