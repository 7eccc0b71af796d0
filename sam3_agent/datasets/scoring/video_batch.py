"""A video benchmark run as a batch: each expression a video item, its prediction read back from the item's trace.

``video_items`` turns ReVOS samples (``formats.revos``) into ``batch.items.VideoItem`` s: the clip is the video's
frame folder (``JPEGImages/<video>/``, opened by ``video.clip.open_clip`` as a folder of frames, in natural order; no
frame rate, as the release has none), the query the expression's text, the keyframe the first frame unless asked
otherwise. A folder whose frame files are not exactly the frames the expressions file lists, in that order, is
refused before anything runs (frame k of the clip must be frame k of the ground truth).

``evaluate_video_batch`` scores the batch: an expression's prediction on a frame is the union of its run's objects
there (``video.run.union_mask``, read lazily from the saved video trace, one frame at a time), as its target is the
union of its annotated objects. As in the image evaluation (``evaluate``), a run that answered (``done`` /
``no_mask``) is scored from its trace, and one that failed, ran out of rounds or was stopped counts as nothing
predicted on every frame (failures lower the scores instead of vanishing from them); an expression not run yet, or
whose trace cannot be read, is listed with the reason and left out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...errors import InputError, TraceFormatError
from ...video.clip_caps import DEFAULT_CLIP_CAPS, ClipCaps
from ...video.frame_folder import FolderFrames
from ...video.run import union_mask
from ...video.saved import load_video_trace
from ...video.tracks import Tracks
from ..batch.items import VideoItem
from ..batch.jsonl import MAX_LISTED
from ..batch.layout import BatchLayout
from ..batch.outputs import model_notes
from ..batch.records import ANSWERED, ItemRecord
from ..formats.revos import FRAMES_DIR, VideoSample
from .evaluate import Unscored
from .video_evaluate import VideoEvaluation, evaluate_videos


def video_items(samples: Sequence[VideoSample], root: str | Path, keyframe: int = 0,
                caps: ClipCaps = DEFAULT_CLIP_CAPS) -> list[VideoItem]:
    """One video item per sample, in sample order (see the module docstring).

    Args:
        samples: the expressions (``read_revos``).
        root: the dataset folder (``video_ref`` is the frame folder relative to it, ``JPEGImages/<video>``).
        keyframe: the frame each run's agent reasons on.
        caps: the clip caps the frame folders are listed within.

    Raises:
        InputError: a video whose frame folder holds other frame files than those listed (or in another order); one
            message names each such video.
    """
    root = Path(root)
    problems: list[str] = []
    checked: set[str] = set()
    items = []
    for sample in samples:
        folder = sample.frames[0].parent
        if sample.video not in checked:
            checked.add(sample.video)
            _check_frames(sample, folder, caps, problems)
        items.append(VideoItem(sample.id, folder, sample.expression, f"{FRAMES_DIR}/{sample.video}", keyframe))
    if problems:
        listed = "\n".join(f"  {p}" for p in problems[:MAX_LISTED])
        more = f"\n  and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED else ""
        raise InputError(f"{len(problems)} video(s) of {root} cannot be run as clips; nothing was run: each frame "
                         f"folder must hold exactly the frames its expressions file lists\n{listed}{more}")
    return items


def _check_frames(sample: VideoSample, folder: Path, caps: ClipCaps, problems: list[str]) -> None:
    """Note a problem unless ``folder`` read as a clip gives exactly ``sample.frames``, in order."""
    try:
        files = FolderFrames(folder, repr(str(folder)), caps)
    except InputError as error:
        problems.append(f"video {sample.video!r}: {error}")
        return
    try:
        names = list(files.names)
    finally:
        files.close()
    listed = [path.name for path in sample.frames]
    if names == listed:
        return
    extra = sorted(set(names) - set(listed))
    if extra:
        problems.append(f"video {sample.video!r}: {folder} also holds {len(extra)} frame file(s) the expressions file "
                        f"does not list ({', '.join(extra[:3])}{', ...' if len(extra) > 3 else ''})")
    else:
        problems.append(f"video {sample.video!r}: the expressions file lists its frames in another order than their "
                        "names sort (natural order)")


class TracksUnion(Mapping[int, np.ndarray]):
    """frame index -> bool (H, W): the union of every object's mask on that frame, decoded when read (a
    ``video_evaluate.Prediction``)."""

    def __init__(self, tracks: Tracks) -> None:
        self.tracks = tracks

    def __getitem__(self, frame: int) -> np.ndarray:
        if not isinstance(frame, (int, np.integer)) or not 0 <= frame < self.tracks.frame_count:
            raise KeyError(frame)
        return union_mask(self.tracks, int(frame))

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.tracks.frame_count))

    def __len__(self) -> int:
        return self.tracks.frame_count


@dataclass(frozen=True)
class VideoBatchEvaluation:
    """A video benchmark's scores, with what the batch says about each run.

    Attributes:
        evaluation: the scores (``video_evaluate.VideoEvaluation``).
        records: the item record of each expression that has one, by sample id.
        notes: what the models were when that makes the numbers meaningless (``outputs.model_notes``).
        models: the VLMs that answered, as the records name them (sorted).
    """

    evaluation: VideoEvaluation
    records: dict[str, ItemRecord]
    notes: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)


def prediction_of(record: ItemRecord | None, folder: Path) -> tuple[Mapping[int, np.ndarray] | None, str | None]:
    """One expression's prediction from its record and item folder: ``(prediction, None)``, or ``(None, reason)``
    when it cannot be scored (see the module docstring)."""
    if record is None:
        return None, "not run yet (run the evaluation again to finish the batch)"
    if record.status not in ANSWERED:
        return {}, None  # failed, out of rounds or stopped: nothing predicted
    try:
        trace = load_video_trace(folder)
    except TraceFormatError as error:
        return None, f"its video trace cannot be read: {error}"
    return TracksUnion(trace.tracks), None


def evaluate_video_batch(samples: Sequence[VideoSample], items: Sequence[VideoItem], layout: BatchLayout,
                         protocol: str | None = None) -> VideoBatchEvaluation:
    """Score every sample of a batch that ran them (``items = video_items(samples, ...)``, in the same order) by
    ``protocol`` (``video_evaluate.PROTOCOLS``; ``None``: revos-visa).

    Raises:
        InputError: an unknown protocol, or ``items`` that are not the samples'.
    """
    if [item.id for item in items] != [sample.id for sample in samples]:
        raise InputError("the batch's items are not the evaluation's samples (a bug: build them with video_items)")
    predictions: dict[str, Mapping[int, np.ndarray]] = {}
    reasons: dict[str, str] = {}
    records: dict[str, ItemRecord] = {}
    for sample, item in zip(samples, items):
        record = layout.read_record(item)
        if record is not None:
            records[sample.id] = record
        prediction, reason = prediction_of(record, layout.folder(item))
        if prediction is None:
            reasons[sample.id] = reason or "not scored"
        else:
            predictions[sample.id] = prediction
    evaluation = evaluate_videos(samples, predictions, protocol)
    unscored = [Unscored(u.id, reasons.get(u.id, u.reason)) for u in evaluation.unscored]
    evaluation = dataclasses.replace(evaluation, unscored=unscored)
    models = sorted({r.models["vlm"] for r in records.values() if r.models.get("vlm")})
    return VideoBatchEvaluation(evaluation, records, model_notes(list(records.values())), models)
