"""A query over a clip: the image agent reasons on a keyframe, SAM 3's video tracker carries what it chose through
the clip, forward and backward (DESIGN §1, "A run over a clip").

``VideoAgent.start(clip, query, keyframes)`` gives a ``VideoRun``; iterate it for events (``video.events``). Each
keyframe's run is ``agent.loop.Agent``'s, unchanged (its trace is an image run's on that frame); each mask it
selects becomes an object prompted on the keyframe, or re-anchors the object it matches there (IoU of at least
``KEYFRAME_MATCH_IOU`` with that object's tracked mask) when the clip already has objects. ``run.trace`` is always
the video trace so far, so a stopped or failed run keeps every frame tracked until then.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..agent.config import _whole
from ..errors import BackendError, InputError
from ..events import RunFinished
from ..mask_set import Masks
from .events import KeyframeStarted, ObjectsChosen, TrackingFinished, TrackingStarted, VideoEvent, VideoRunFinished
from .newcomers import DEFAULT_MAX_CHECKS, NewcomerSearch
from .propagate import Propagation
from .records import KeyframeRun, VideoTrace
from .tracks import Span, Tracks, mask_iou

logger = logging.getLogger(__name__)

KEYFRAME_MATCH_IOU = 0.5  # trk_assoc_iou_thresh of transformers' Sam3VideoConfig: below it a track is "unmatched"


@dataclass(frozen=True)
class VideoConfig:
    """Options of a run over a clip (the keyframe runs use the image agent's ``AgentConfig``).

    Attributes:
        newcomers: also find objects that appear away from the keyframe (``video.newcomers``): the detector runs with
            the final phrase and each unmatched candidate is checked by the verifier. Off by default (it costs a
            detector call per frame and a VLM call per candidate).
        detect_every: in the newcomer mode, run the detector on every n-th frame (1: every frame).
        max_newcomer_checks: in the newcomer mode, most verifier calls per run.
    """

    newcomers: bool = False
    detect_every: int = 1
    max_newcomer_checks: int = DEFAULT_MAX_CHECKS

    def __post_init__(self) -> None:
        """Raises InputError for a count that is not a whole number of at least 1."""
        _whole("detect_every", self.detect_every, 1)
        _whole("max_newcomer_checks", self.max_newcomer_checks, 1)


class VideoAgent:
    """The image agent and SAM 3's video tracker, for queries over clips.

    Args:
        agent: the image ``agent.loop.Agent`` (its VLM, verifier and SAM 3 segmenter).
        tracker: a ``sam.video_tracker.VideoTracker``.
        config: the video options.
    """

    def __init__(self, agent: Any, tracker: Any, config: VideoConfig | None = None) -> None:
        self.agent = agent
        self.tracker = tracker
        self.config = config or VideoConfig()

    def settings(self) -> dict[str, Any]:
        """What a video trace records about how it was produced (JSON-compatible)."""
        return {"agent": self.agent.settings(), "tracker": getattr(self.tracker, "name", type(self.tracker).__name__),
                **asdict(self.config)}

    def start(self, clip: Any, query: str, keyframes: Sequence[int] = (0,)) -> VideoRun:
        """A new run over ``clip`` (a ``video.clip.Clip``); nothing happens until it is iterated.

        Args:
            query: the user's query (checked as for a photo).
            keyframes: frame indices the agent reasons on, in order (default: the first frame).

        Raises:
            InputError: no keyframe, a keyframe outside the clip, or a query the image agent refuses.
        """
        info = clip.info
        if not keyframes:
            raise InputError("give at least one keyframe (a frame index) for the agent to reason on")
        tracks = Tracks(info.frame_count, info.height, info.width)
        for frame in keyframes:
            tracks.check_frame(frame)
        trace = VideoTrace(query=query, clip=info, tracks=tracks, settings=self.settings(), started_at=time.time())
        return VideoRun(self, clip, trace, list(keyframes))


class VideoRun:
    """One run over a clip: iterate it for events; ``trace`` holds the video trace so far; ``cancel()`` stops it.

    After it ends, ``add_keyframe(frame)`` runs the agent on another frame and re-propagates what changed, and
    ``video.corrections`` edits the objects by hand; each gives events of its own.
    """

    def __init__(self, agent: VideoAgent, clip: Any, trace: VideoTrace, keyframes: list[int]) -> None:
        self.video_agent = agent
        self.clip = clip
        self.trace = trace
        self.stop = threading.Event()
        self._keyframes = keyframes
        self._agent_run: Any = None
        self._events: Iterator[VideoEvent] | None = None

    def cancel(self) -> None:
        """Stop: the agent's round in flight ends promptly, tracking after the frame in progress; every frame tracked
        so far is kept and the trace gets status ``cancelled``."""
        self.stop.set()
        if self._agent_run is not None:
            self._agent_run.cancel()

    def __iter__(self) -> Iterator[VideoEvent]:
        if self._events is None:
            self._events = self._run(self._keyframes)
        return self._events

    def add_keyframe(self, frame: int) -> Iterator[VideoEvent]:
        """Run the agent on ``frame`` too (after the run ended): its masks re-anchor the objects they match there
        and the others become new objects; each is re-propagated as far as its neighbouring fixed frames.

        Raises:
            InputError: ``frame`` is outside the clip (raised when iterated).
        """
        self.stop.clear()
        self.trace.status = "running"
        self.trace.finished_at = None
        return self._run([frame])

    # ------------------------------------------------------------------ the run

    def _run(self, keyframes: list[int]) -> Iterator[VideoEvent]:
        trace = self.trace
        status, error = "done", None
        try:
            for frame in keyframes:
                trace.tracks.check_frame(frame)
                status, error = yield from self._keyframe(frame)
                if status in ("failed", "cancelled"):
                    break
        except (BackendError, InputError) as fault:  # the tracker or the clip failed: the frames so far are kept
            logger.info("video run failed: %s", fault)
            status, error = "failed", str(fault)
        except Exception:  # a bug must still leave the trace
            logger.exception("video run failed unexpectedly")
            status, error = "failed", "an internal error stopped the run (a bug: the log has the details)"
        if self.stop.is_set() and status != "failed":
            status, error = "cancelled", "stopped by the user; every frame tracked until then is kept"
        if trace.tracks.objects and status in ("no_mask", "max_rounds"):
            status, error = "done", None  # an earlier keyframe's objects are the answer
        trace.status, trace.error, trace.finished_at = status, error, time.time()  # type: ignore[assignment]
        yield VideoRunFinished(trace)

    def _keyframe(self, frame: int) -> Iterator[VideoEvent]:
        """The agent on ``frame``, its masks made objects, then their tracking; returns (status, error)."""
        trace, video_agent = self.trace, self.video_agent
        seconds = trace.clip.timestamps[frame] if frame < len(trace.clip.timestamps) else 0.0
        yield KeyframeStarted(frame_index=frame, seconds=seconds)
        image = self.clip.frame(frame)
        started = time.perf_counter()
        run = self._agent_run = video_agent.agent.start(image, trace.query, image_name=_frame_name(trace, frame))
        if self.stop.is_set():
            run.cancel()
        try:
            for event in run:
                yield event
                if isinstance(event, RunFinished):
                    break
        finally:
            self._agent_run = None
            trace.add_time("agent", time.perf_counter() - started)
        image_trace = run.trace
        final = image_trace.final_masks
        if image_trace.status != "done" or final is None or len(final) == 0:
            trace.keyframes.append(KeyframeRun(frame_index=frame, trace=image_trace))
            return image_trace.status, image_trace.error
        pairs, new, matched = self._objects_from(frame, final)
        trace.keyframes.append(KeyframeRun(frame_index=frame, trace=image_trace, objects=tuple(pairs)))
        yield ObjectsChosen(frame_index=frame, new=tuple(new), matched=tuple(matched))
        yield from self._track(frame, sorted(new + matched), final.phrase)
        return "done", None

    def _objects_from(self, frame: int, final: Masks) -> tuple[list[tuple[int, int]], list[int], list[int]]:
        """Make the final masks objects on ``frame``: each matches the existing object whose mask there overlaps it
        most (IoU >= KEYFRAME_MATCH_IOU, each object once, best pairs first) or becomes a new one.

        Returns:
            (mask number, object id) pairs in mask order, the new ids, the matched ids.
        """
        tracks = self.trace.tracks
        present = tracks.masks_on(frame)
        pairs = sorted(
            ((mask_iou(counts, m.counts, tracks.height, tracks.width), number, object_id)
             for number, counts in enumerate(final.counts, start=1) for object_id, m in present.items()),
            reverse=True,
        )
        chosen: dict[int, int] = {}
        for iou, number, object_id in pairs:
            if iou < KEYFRAME_MATCH_IOU:
                break
            if number not in chosen and object_id not in chosen.values():
                chosen[number] = object_id
        new, matched = [], []
        for number in range(1, len(final) + 1):
            score = float(final.scores[number - 1])
            if number in chosen:
                object_id = chosen[number]
                matched.append(object_id)
            else:
                object_id = tracks.new_object(self.trace.query)
                chosen[number] = object_id
                new.append(object_id)
            tracks.fix(object_id, frame, final.mask(number - 1), "agent", score)
        return sorted(chosen.items()), new, sorted(matched)

    def _track(self, frame: int, object_ids: list[int], phrase: str) -> Iterator[VideoEvent]:
        """Propagate ``object_ids`` from their fixed masks on ``frame``; in the newcomer mode, search the frames for
        newcomers on the way and track those found afterwards."""
        trace, config = self.trace, self.video_agent.config
        propagation = Propagation(self.video_agent.tracker, self.clip, trace.tracks, self.stop)
        spans = trace.tracks.spans_from(object_ids, frame)
        propagation.plan(spans)
        yield TrackingStarted(spans=tuple(spans), total=propagation.total, reason="keyframe")
        search = None
        if config.newcomers and phrase:
            search = NewcomerSearch(self.video_agent.agent, trace, phrase, config.detect_every,
                                    config.max_newcomer_checks, self.stop)
        try:
            for span in spans:
                yield from propagation.run(span, search.after_frame if search else None)
            if search is not None:
                for object_id, found_on in search.accepted:
                    later: list[Span] = trace.tracks.spans_from([object_id], found_on)
                    propagation.plan(later)
                    yield TrackingStarted(spans=tuple(later), total=propagation.total, reason="newcomer")
                    for span in later:
                        yield from propagation.run(span)
        finally:
            trace.add_time("tracking", propagation.seconds)
            trace.timings["frames_tracked"] = trace.timings.get("frames_tracked", 0) + propagation.done
        yield TrackingFinished(done=propagation.done, total=propagation.total, seconds=propagation.seconds,
                               stopped=self.stop.is_set())


def _frame_name(trace: VideoTrace, frame: int) -> str:
    """The keyframe's name as an image: the clip's file stem and the frame number (``clip_frame00012.png``)."""
    stem = Path(trace.clip.file_name).stem if trace.clip.file_name else "clip"
    return f"{stem}_frame{frame:05d}.png"


def union_mask(tracks: Tracks, frame: int) -> np.ndarray:
    """bool (H, W): every object's mask on ``frame`` together (a referring expression's prediction)."""
    union = np.zeros((tracks.height, tracks.width), dtype=bool)
    for object_id in tracks.masks_on(frame):
        union |= tracks.mask(object_id, frame)
    return union
