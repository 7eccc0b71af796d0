"""The records of a run over a clip: the video trace and what it holds (keyframe runs, edits, newcomer checks).

A ``VideoTrace`` is to a clip what ``types.Trace`` is to a photo: everything needed to show, inspect, correct and
export the result again, without the models and without the clip (the keyframe runs keep their frames as photos,
the masks are RLE). ``video.saved`` writes and reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..types import Trace
from .clip_info import ClipInfo
from .tracks import Snapshot, TrackedObject, Tracks

VIDEO_SCHEMA_VERSION = 1

VideoStatus = Literal["running", "done", "no_mask", "max_rounds", "failed", "cancelled"]
EditKind = Literal["replace", "add", "remove"]
PromptKind = Literal["points", "box", "mask"]
CheckOutcome = Literal["accepted", "rejected", "unconfirmed"]


@dataclass(frozen=True)
class KeyframeRun:
    """The agent's run on one keyframe and what its answer became.

    Attributes:
        frame_index: the keyframe.
        trace: the image run on that frame, the same as an image run on the frame as a photo.
        objects: (mask number in the run's final masks, 1-based; object id) for each final mask: a new object or
            the existing one it matched on that frame (``ObjectsChosen``).
    """

    frame_index: int
    trace: Trace
    objects: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class NewcomerCheck:
    """One candidate of SAM 3's detector that matched no object, checked by the verifier (the newcomer mode).

    Attributes:
        frame_index: the frame where the candidate first appeared (and was checked).
        phrase: the phrase the detector ran with (the keyframe run's final phrase).
        counts: the candidate's mask, COCO compressed RLE at the clip's frame size.
        score: the detector's score, in [0, 1].
        verdict: the verifier's verdict (``"accept"`` / ``"reject"``, the same isolated check and rules as
            ``examine_each_mask``), or ``None`` when the run was stopped during the check.
        verdict_source: where the verdict came from (``types.MaskVerdict.source``: ``"model"`` when read from the
            output), or ``None``.
        outputs: the verifier's raw outputs, first try first.
        outcome: ``"accepted"`` (it became object ``object_id``), ``"rejected"`` (the verifier said no) or
            ``"unconfirmed"`` (no usable verdict, or the verification failed: not added).
        object_id: the new object's id when accepted, else ``None``.
        seconds: wall time of the check.
    """

    frame_index: int
    phrase: str
    counts: bytes
    score: float
    verdict: str | None
    verdict_source: str | None
    outputs: tuple[str, ...]
    outcome: CheckOutcome
    object_id: int | None = None
    seconds: float = 0.0


@dataclass(frozen=True)
class VideoEdit:
    """One correction a person made, as applied (``video.corrections``).

    Attributes:
        kind: ``"replace"`` (object ``object_id``'s mask on ``frame_index``), ``"add"`` (a new object from a mask on
            ``frame_index``) or ``"remove"`` (the whole object).
        object_id: the object changed, added or removed.
        frame_index: the frame fixed (``None`` for a removal).
        prompt: how the mask was given: ``"points"``, ``"box"``, ``"mask"`` (``None`` for a removal).
        points: (x, y) clicks in frame pixels, with ``labels`` (1 positive, 0 negative), for ``"points"`` (and the
            clicks after a box).
        box: xyxy in frame pixels for ``"box"``.
        counts: the fixed mask, COCO compressed RLE (``None`` for a removal).
        spans: (start, end) of each re-propagation it ran, in order (``tracks.Span``); frames from start to end.
        tracked: frames the re-propagation computed (fewer than the spans hold when it was stopped).
        before: the masks it replaced, to put back on undo (object id -> frame -> mask or ``None``).
        removed: the object as it was, for a removal (put back on undo).
        at: UNIX time in seconds.
    """

    kind: EditKind
    object_id: int
    frame_index: int | None = None
    prompt: PromptKind | None = None
    points: tuple[tuple[float, float], ...] = ()
    labels: tuple[int, ...] = ()
    box: tuple[float, float, float, float] | None = None
    counts: bytes | None = None
    spans: tuple[tuple[int, int], ...] = ()
    tracked: int = 0
    before: Snapshot = field(default_factory=dict)
    removed: TrackedObject | None = None
    at: float = 0.0


@dataclass(eq=False)
class VideoTrace:
    """Everything about one run over a clip; saved by ``video.saved`` (JSON, the keyframe traces, masks as RLE).

    Mutable while the run and its corrections go on.

    Attributes:
        query: the user's query.
        clip: the clip's identity (file name, bytes, sha256, frame count, fps, size, timestamps).
        settings: how it was produced: the keyframe agent's settings, the tracker, the video options.
        keyframes: the agent's runs, in the order they ran.
        tracks: every object and its masks per frame.
        edits: corrections, in the order applied (an undone one is taken out).
        checks: the newcomer mode's verifier checks, in order.
        status: ``"running"`` while it runs, then the keyframe run's status (``"done"``, ``"no_mask"``,
            ``"max_rounds"``, ``"failed"``), or ``"cancelled"`` when stopped (every frame tracked until then kept).
        error: one line for ``failed`` / ``cancelled`` / ``max_rounds``, else ``None``.
        started_at / finished_at: UNIX times in seconds.
        timings: seconds spent: ``"agent"`` (keyframe runs), ``"tracking"``, ``"newcomers"`` (detector and checks),
            and ``"frames_tracked"`` (a count).
    """

    query: str
    clip: ClipInfo
    tracks: Tracks
    settings: dict[str, Any] = field(default_factory=dict)
    keyframes: list[KeyframeRun] = field(default_factory=list)
    edits: list[VideoEdit] = field(default_factory=list)
    checks: list[NewcomerCheck] = field(default_factory=list)
    status: VideoStatus = "running"
    error: str | None = None
    started_at: float = 0.0
    finished_at: float | None = None
    timings: dict[str, float] = field(default_factory=dict)

    def add_time(self, key: str, seconds: float) -> None:
        """Add ``seconds`` to ``timings[key]``."""
        self.timings[key] = self.timings.get(key, 0.0) + seconds
