"""The objects of a clip and their masks frame by frame (``Tracks``), and which frames a fixed mask re-propagates.

Masks are held as COCO compressed RLE counts (``rle.encode``) from the moment they are tracked: a 3,000-frame clip
with a few objects holds a few megabytes, whatever its resolution. An object's *fixed* frames (anchors) are those
whose mask was given rather than tracked: by the agent on a keyframe, by a person's correction, or by the newcomer
check (a verified detection). Fixing a mask on frame k re-propagates that object from k only as far as its next
fixed frame in each direction (``spans_from``): frames a person or the agent fixed are never overwritten by the
tracker.

Pure: no model, no clip, no disk. The run (``video.run``) and the corrections (``video.corrections``) drive it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from .. import rle
from ..errors import InputError

MAX_OBJECTS = 255  # object ids are palette PNG pixel values 1..255 (DAVIS convention: 0 = background)

MaskSource = Literal["agent", "person", "detector", "tracker"]
FIXED_SOURCES: tuple[MaskSource, ...] = ("agent", "person", "detector")  # given, not tracked: the frame is an anchor


@dataclass(frozen=True)
class FrameMask:
    """One object's mask on one frame.

    Attributes:
        counts: COCO compressed RLE counts (``bytes``) of a bool (H, W) mask at the clip's frame size; may be an
            empty mask only on a fixed frame (a person said the object is absent there).
        score: in [0, 1]: SAM 3's detection score for an agent's or detector's mask, the tracker's object score
            (sigmoid of its object logit) for a tracked frame, 1.0 for a person's mask.
        source: who made it (``MaskSource``); ``FIXED_SOURCES`` mark the object's anchors.
    """

    counts: bytes
    score: float
    source: MaskSource

    @property
    def fixed(self) -> bool:
        return self.source in FIXED_SOURCES


@dataclass(frozen=True)
class Span:
    """One tracker call: the objects ``object_ids`` are prompted with their masks on frame ``start`` and tracked
    frame by frame to ``end`` (inclusive), forward when ``end > start``, backward when ``end < start``."""

    object_ids: tuple[int, ...]
    start: int
    end: int

    @property
    def reverse(self) -> bool:
        return self.end < self.start

    @property
    def frames(self) -> range:
        """The frames the tracker reads, the prompt frame first."""
        step = -1 if self.reverse else 1
        return range(self.start, self.end + step, step)

    @property
    def tracked(self) -> int:
        """How many frames the tracker computes (all but the prompt frame)."""
        return abs(self.end - self.start)


@dataclass
class TrackedObject:
    """One object of the clip: its id, a label (what it was found as), and its masks by frame.

    Attributes:
        object_id: positive int, stable for the clip; the pixel value in palette PNG exports.
        label: a short text for tables and exports (the query, or "added by hand").
        masks: frame index -> ``FrameMask``; a frame without an entry has no mask of this object.
    """

    object_id: int
    label: str
    masks: dict[int, FrameMask] = field(default_factory=dict)

    def anchors(self) -> list[int]:
        """The fixed frames, ascending."""
        return sorted(frame for frame, mask in self.masks.items() if mask.fixed)


@dataclass(frozen=True)
class ObjectSummary:
    """One row of the objects table: where an object is and how sure the models were.

    Attributes:
        first_frame / last_frame: the first and last frame with a non-empty mask (``None`` when it has none).
        frames_present: frames with a non-empty mask.
        mean_score: mean ``FrameMask.score`` over those frames (0.0 when none).
        fixed_frames: the anchors (frames the agent, a person or the newcomer check fixed), ascending.
    """

    object_id: int
    label: str
    first_frame: int | None
    last_frame: int | None
    frames_present: int
    mean_score: float
    fixed_frames: tuple[int, ...]


# A snapshot of some objects' masks on some frames, to put back on undo: object id -> frame -> mask or None (absent).
Snapshot = dict[int, dict[int, FrameMask | None]]


class Tracks:
    """Every object of one clip and its masks per frame, as RLE.

    Args:
        frame_count: frames in the clip (>= 1).
        height, width: the clip's frame size in pixels (after rotation).

    Raises:
        ValueError: a frame count or size below 1.
    """

    def __init__(self, frame_count: int, height: int, width: int) -> None:
        if frame_count < 1 or height < 1 or width < 1:
            raise ValueError(f"a clip has at least one frame of at least 1 x 1 pixels, got {frame_count} frames of "
                             f"{width} x {height}")
        self.frame_count = frame_count
        self.height = height
        self.width = width
        self.objects: dict[int, TrackedObject] = {}
        self._next_id = 1

    # ------------------------------------------------------------------ reading

    def object_ids(self) -> list[int]:
        """The objects' ids, ascending."""
        return sorted(self.objects)

    def get(self, object_id: int) -> TrackedObject:
        """The object ``object_id``.

        Raises:
            InputError: no such object (the message lists the ids there are).
        """
        found = self.objects.get(object_id)
        if found is None:
            ids = ", ".join(str(i) for i in self.object_ids()) or "none"
            raise InputError(f"there is no object {object_id} in this clip (objects: {ids})")
        return found

    def masks_on(self, frame: int) -> dict[int, FrameMask]:
        """The non-empty masks on ``frame``: object id -> ``FrameMask``, ascending ids."""
        self.check_frame(frame)
        found = {}
        for object_id in self.object_ids():
            mask = self.present(object_id, frame)
            if mask is not None:
                found[object_id] = mask
        return found

    def present(self, object_id: int, frame: int) -> FrameMask | None:
        """Object ``object_id``'s mask on ``frame`` when it is non-empty, else ``None``."""
        mask = self.get(object_id).masks.get(frame)
        return None if mask is None or _is_empty(mask.counts) else mask

    def mask(self, object_id: int, frame: int) -> np.ndarray:
        """bool (H, W): object ``object_id`` on ``frame`` (all False where it has no mask)."""
        self.check_frame(frame)
        found = self.get(object_id).masks.get(frame)
        if found is None:
            return np.zeros((self.height, self.width), dtype=bool)
        return rle.decode_one(found.counts, self.height, self.width)

    def summary(self) -> list[ObjectSummary]:
        """One ``ObjectSummary`` per object, ascending ids."""
        rows = []
        for object_id in self.object_ids():
            obj = self.objects[object_id]
            present = sorted(f for f, m in obj.masks.items() if not _is_empty(m.counts))
            scores = [obj.masks[f].score for f in present]
            rows.append(ObjectSummary(
                object_id=object_id, label=obj.label, first_frame=present[0] if present else None,
                last_frame=present[-1] if present else None, frames_present=len(present),
                mean_score=float(np.mean(scores)) if scores else 0.0, fixed_frames=tuple(obj.anchors()),
            ))
        return rows

    def check_frame(self, frame: int) -> None:
        """Raises InputError unless ``frame`` is a frame index of the clip."""
        if isinstance(frame, bool) or not isinstance(frame, int | np.integer) or not 0 <= frame < self.frame_count:
            raise InputError(f"frame {frame!r} is not in the clip: frames are numbered 0 to {self.frame_count - 1}")

    # ------------------------------------------------------------------ changing

    def new_object(self, label: str, object_id: int | None = None) -> int:
        """Add an object without masks; returns its id (the next unused one unless ``object_id`` is given: a trace
        being read back). Ids are never reused within a clip, so an id removed stays removed.

        Raises:
            InputError: ``MAX_OBJECTS`` objects already exist, or ``object_id`` is taken or not in 1..MAX_OBJECTS.
        """
        if object_id is None:
            self.check_room()
            object_id = self._next_id
        if not 1 <= object_id <= MAX_OBJECTS or object_id in self.objects:
            raise InputError(
                f"cannot add object {object_id}: ids run from 1 to {MAX_OBJECTS} (a palette PNG's pixel values) and "
                "each is used once; remove objects you do not need, or split the clip"
            )
        self.objects[object_id] = TrackedObject(object_id, label)
        self._next_id = max(self._next_id, object_id + 1)
        return object_id

    def check_room(self) -> None:
        """Raises InputError when no new object id is left (ids are never reused, up to ``MAX_OBJECTS``)."""
        if self._next_id > MAX_OBJECTS:
            raise InputError(f"this clip has used all {MAX_OBJECTS} object ids (a palette PNG's pixel values): no "
                             "object can be added; split the clip to track more")

    def remove_object(self, object_id: int) -> TrackedObject:
        """Take object ``object_id`` out (returned, so that undo can put it back)."""
        self.get(object_id)
        return self.objects.pop(object_id)

    def restore_object(self, obj: TrackedObject) -> None:
        """Put back an object that ``remove_object`` returned."""
        self.objects[obj.object_id] = obj
        self._next_id = max(self._next_id, obj.object_id + 1)

    def set_mask(self, object_id: int, frame: int, mask: FrameMask | None) -> None:
        """Set (or, with ``None``, clear) object ``object_id``'s mask on ``frame``."""
        self.check_frame(frame)
        masks = self.get(object_id).masks
        if mask is None:
            masks.pop(frame, None)
        else:
            masks[frame] = mask

    def set_tracked(self, object_id: int, frame: int, mask: np.ndarray, score: float) -> FrameMask | None:
        """Store what the tracker found for ``object_id`` on ``frame``: a non-empty bool (H, W) ``mask`` as RLE
        (source ``"tracker"``), an empty one as no mask. A fixed frame is never overwritten (returned unchanged).

        Returns:
            the object's mask on that frame now (``None``: none).

        Raises:
            ValueError: a mask of another size than the clip's frames.
        """
        current = self.get(object_id).masks.get(frame)
        if current is not None and current.fixed:
            return current
        if not np.any(mask):
            self.set_mask(object_id, frame, None)
            return None
        counts = rle.encode([mask], self.height, self.width)[0]
        stored = FrameMask(counts, float(score), "tracker")
        self.set_mask(object_id, frame, stored)
        return stored

    def fix(self, object_id: int, frame: int, mask: np.ndarray, source: MaskSource, score: float = 1.0) -> FrameMask:
        """Make ``mask`` (bool (H, W), may be empty: the object is absent there) object ``object_id``'s fixed mask on
        ``frame``.

        Raises:
            ValueError: ``source`` is ``"tracker"`` (not a fixed source) or the mask has another size.
        """
        if source not in FIXED_SOURCES:
            raise ValueError(f"a fixed mask comes from one of {FIXED_SOURCES}, not {source!r}")
        counts = rle.encode([np.asarray(mask, dtype=bool)], self.height, self.width)[0]
        stored = FrameMask(counts, float(score), source)
        self.set_mask(object_id, frame, stored)
        return stored

    def snapshot(self, spans: Iterable[Span], extra: Mapping[int, Iterable[int]] = ()) -> Snapshot:
        """The current masks of the spans' objects on the spans' frames (and of ``extra``: object id -> frames),
        to put back with ``restore`` (undo)."""
        taken: Snapshot = {}
        for span in spans:
            for object_id in span.object_ids:
                masks = self.get(object_id).masks
                taken.setdefault(object_id, {}).update({f: masks.get(f) for f in span.frames})
        for object_id, frames in dict(extra).items():
            masks = self.get(object_id).masks
            taken.setdefault(object_id, {}).update({f: masks.get(f) for f in frames})
        return taken

    def restore(self, snapshot: Snapshot) -> None:
        """Put back the masks of a ``snapshot`` (objects removed since are skipped)."""
        for object_id, frames in snapshot.items():
            obj = self.objects.get(object_id)
            if obj is None:
                continue
            for frame, mask in frames.items():
                if mask is None:
                    obj.masks.pop(frame, None)
                else:
                    obj.masks[frame] = mask

    # ------------------------------------------------------------------ planning

    def spans_from(self, object_ids: Iterable[int], frame: int) -> list[Span]:
        """The tracker calls that re-propagate the objects from their (fixed) masks on ``frame``: forward to the
        frame before each object's next fixed frame (or the clip's end), backward to the frame after its previous
        one (or the clip's start). Objects with the same reach share a call; calls that would track no frame are
        left out. Forward calls come first, then backward ones, each ordered by its objects' ids.
        """
        self.check_frame(frame)
        forward: dict[int, list[int]] = {}
        backward: dict[int, list[int]] = {}
        for object_id in sorted(set(object_ids)):
            anchors = self.get(object_id).anchors()
            later = [a for a in anchors if a > frame]
            earlier = [a for a in anchors if a < frame]
            end = (later[0] - 1) if later else self.frame_count - 1
            start = (earlier[-1] + 1) if earlier else 0
            if end > frame:
                forward.setdefault(end, []).append(object_id)
            if start < frame:
                backward.setdefault(start, []).append(object_id)
        spans = [Span(tuple(ids), frame, end) for end, ids in sorted(forward.items(), key=lambda kv: kv[1])]
        spans += [Span(tuple(ids), frame, start) for start, ids in sorted(backward.items(), key=lambda kv: kv[1])]
        return spans


def _is_empty(counts: bytes) -> bool:
    """Whether RLE ``counts`` hold no foreground pixel (one background run over the whole frame)."""
    runs = rle.run_lengths(counts)
    return len(runs) <= 1 or not np.any(runs[1::2])


def mask_iou(a: bytes, b: bytes, height: int, width: int) -> float:
    """IoU of two masks given as RLE counts of (height, width), in [0, 1]; 0.0 when both are empty."""
    area_a = int(rle.areas([a], height, width)[0])
    area_b = int(rle.areas([b], height, width)[0])
    if area_a == 0 and area_b == 0:
        return 0.0
    inter = int(rle.intersections(a, [b], height, width, area_a)[0])
    return inter / (area_a + area_b - inter)
