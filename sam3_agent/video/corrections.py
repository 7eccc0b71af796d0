"""Corrections of a clip's objects by hand, shared by the app and the command line (``VideoEditor``).

A person replaces an object's mask on frame k (from clicks, a box or a mask), adds an object on frame k, or removes
one; each fix is re-propagated from k only as far as the object's next fixed frame in each direction (frames the
agent or a person fixed are never overwritten), and each edit is recorded in the trace (``records.VideoEdit``) with
the masks it replaced, so ``undo`` puts them back exactly, without the tracker. Clicks and boxes go through SAM 3's
point model (``sam.tracker.PointSegmenter``), as in the photo's Correct tab.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..errors import InputError
from ..sam.prompts import Box
from .events import TrackingFinished, TrackingStarted, VideoEvent
from .propagate import Propagation
from .records import PromptKind, VideoEdit, VideoTrace

ADDED_LABEL = "added by hand"


class VideoEditor:
    """Edits the objects of ``trace`` and re-propagates them through ``clip``.

    Args:
        trace: the video trace (a finished run's, or one read back with ``video.saved``).
        clip: the clip the trace was made on (``video.clip.Clip``); ``None`` when it is gone: then a fix changes its
            frame only and nothing is re-propagated (``can_propagate`` is False).
        tracker: a ``sam.video_tracker.VideoTracker`` (``None``: as without a clip).
        point_segmenter: SAM 3's point model for clicks and boxes (``None``: masks only).
    """

    def __init__(self, trace: VideoTrace, clip: Any = None, tracker: Any = None, point_segmenter: Any = None) -> None:
        self.trace = trace
        self.clip = clip
        self.tracker = tracker
        self.point_segmenter = point_segmenter
        self.stop = threading.Event()

    @property
    def can_propagate(self) -> bool:
        return self.clip is not None and self.tracker is not None

    def cancel(self) -> None:
        """Stop the re-propagation in progress (the frames tracked until then are kept, and the edit with them)."""
        self.stop.set()

    # ------------------------------------------------------------------ edits

    def replace(self, object_id: int, frame: int, mask: np.ndarray | None = None, *,
                points: Sequence[tuple[float, float]] = (), labels: Sequence[int] = (),
                box: Box | None = None) -> Iterator[VideoEvent]:
        """Replace object ``object_id``'s mask on ``frame`` and re-propagate it (events as the run's tracking).

        Give either ``mask`` (bool (H, W) at the clip's size; empty: the object is absent there, nothing propagates)
        or clicks (``points`` (x, y) in frame pixels with ``labels`` 1/0) and/or a ``box`` (xyxy pixels) for SAM 3's
        point model.

        Raises:
            InputError: no such object or frame, a mask of the wrong size, no prompt or two kinds, clicks or a box
                outside the frame, a point model's empty mask, or clicks without a point model (raised before any
                change).
        """
        tracks = self.trace.tracks
        tracks.get(object_id)
        tracks.check_frame(frame)
        fixed, prompt = self._mask_from(frame, mask, points, labels, box)
        return self._fix(_edit("replace", object_id, frame, prompt, points, labels, box), fixed)

    def add(self, frame: int, mask: np.ndarray | None = None, *, points: Sequence[tuple[float, float]] = (),
            labels: Sequence[int] = (), box: Box | None = None, label: str = ADDED_LABEL) -> Iterator[VideoEvent]:
        """Add a new object from a mask (or clicks / a box) on ``frame`` and track it through the whole clip.

        Raises:
            InputError: as ``replace``, an empty mask, or the clip's object limit reached.
        """
        tracks = self.trace.tracks
        tracks.check_frame(frame)
        fixed, prompt = self._mask_from(frame, mask, points, labels, box)
        if not fixed.any():
            raise InputError("the new object's mask is empty: draw or click on the object to add")
        tracks.check_room()
        return self._fix(_edit("add", 0, frame, prompt, points, labels, box), fixed, label=label)

    def remove(self, object_id: int) -> VideoEdit:
        """Remove object ``object_id`` from every frame (``undo`` brings it back).

        Raises:
            InputError: no such object.
        """
        removed = self.trace.tracks.remove_object(object_id)
        edit = VideoEdit(kind="remove", object_id=object_id, removed=removed, at=time.time())
        self.trace.edits.append(edit)
        return edit

    def undo(self) -> VideoEdit | None:
        """Take back the last edit: the masks it replaced come back as they were (no tracker needed). Returns the
        edit undone, or ``None`` when there is none."""
        if not self.trace.edits:
            return None
        edit = self.trace.edits.pop()
        tracks = self.trace.tracks
        if edit.kind == "remove" and edit.removed is not None:
            tracks.restore_object(edit.removed)
        elif edit.kind == "add":
            tracks.objects.pop(edit.object_id, None)
        else:
            tracks.restore(edit.before)
        return edit

    # ------------------------------------------------------------------ internals

    def _mask_from(self, frame: int, mask: np.ndarray | None, points: Sequence[tuple[float, float]],
                   labels: Sequence[int], box: Box | None) -> tuple[np.ndarray, PromptKind]:
        tracks = self.trace.tracks
        if mask is not None and (points or box is not None):
            raise InputError("give a mask, or clicks and/or a box, not both")
        if mask is not None:
            array = np.asarray(mask)
            if array.shape != (tracks.height, tracks.width):
                raise InputError(f"the mask has shape {array.shape} but the clip's frames are {tracks.height} x "
                                 f"{tracks.width} (height x width): draw it on the frame itself")
            return array.astype(bool), "mask"
        if not points and box is None:
            raise InputError("give the object's mask, or clicks on it, or a box around it")
        if self.point_segmenter is None:
            raise InputError("clicks and boxes need SAM 3's point model, which is not loaded: give a mask instead")
        if self.clip is None:
            raise InputError("the clip is not here, so its frame cannot be clicked on: give a mask, or open the "
                             "trace together with its clip")
        image = self.clip.frame(frame)
        result = self.point_segmenter.segment_points(image, list(points), list(labels), box=box)
        if not result.mask.any():
            raise InputError("SAM 3's point model found nothing there: click on the object itself, or draw a box "
                             "around it")
        return result.mask, "box" if box is not None else "points"

    def _fix(self, edit: VideoEdit, mask: np.ndarray, label: str = ADDED_LABEL) -> Iterator[VideoEvent]:
        """Fix ``mask`` on the edit's frame (a new object first, for an ``add``), then re-propagate; a generator:
        nothing changes until it is iterated."""
        trace, tracks = self.trace, self.trace.tracks
        self.stop.clear()
        if edit.kind == "add":
            edit = dataclasses.replace(edit, object_id=tracks.new_object(label))
        frame, object_id = edit.frame_index, edit.object_id
        spans = tracks.spans_from([object_id], frame) if self.can_propagate and mask.any() else []
        before = tracks.snapshot(spans, extra={object_id: [frame]}) if edit.kind == "replace" else {}
        tracks.fix(object_id, frame, mask, "person")
        edit = dataclasses.replace(edit, counts=tracks.get(object_id).masks[frame].counts, before=before,
                                   spans=tuple((s.start, s.end) for s in spans))
        trace.edits.append(edit)
        position = len(trace.edits) - 1
        propagation = Propagation(self.tracker, self.clip, tracks, self.stop)
        propagation.plan(spans)
        yield TrackingStarted(spans=tuple(spans), total=propagation.total, reason="edit")
        try:
            for span in spans:
                yield from propagation.run(span)
        finally:
            trace.edits[position] = dataclasses.replace(edit, tracked=propagation.done)
            trace.add_time("tracking", propagation.seconds)
        yield TrackingFinished(done=propagation.done, total=propagation.total, seconds=propagation.seconds,
                               stopped=self.stop.is_set())


def _edit(kind: str, object_id: int, frame: int, prompt: PromptKind, points: Sequence[tuple[float, float]],
          labels: Sequence[int], box: Box | None) -> VideoEdit:
    return VideoEdit(
        kind=kind,  # type: ignore[arg-type]
        object_id=object_id, frame_index=frame, prompt=prompt,
        points=tuple((float(x), float(y)) for x, y in points) if prompt != "mask" else (),
        labels=tuple(int(v) for v in labels) if prompt != "mask" else (),
        box=tuple(float(v) for v in box) if box is not None else None,  # type: ignore[arg-type]
        at=time.time(),
    )
