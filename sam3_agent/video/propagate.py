"""Tracker calls over a clip: each ``tracks.Span`` is given to the video tracker, and every frame it returns is
stored in ``Tracks`` (as RLE, at once) and announced as a ``FrameTracked`` event.

One ``Propagation`` counts the frames of every call it runs (done of total, frames/s) so that a run's progress is
one bar, and stops at once when its stop event is set: every frame tracked until then stays in ``Tracks``; frames a
stopped call did not reach keep what they held before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any

from PIL import Image

from .events import FrameTracked, VideoEvent
from .tracks import Span, Tracks

logger = logging.getLogger(__name__)

# Called after each tracked frame with (frame index, the frame); yields events of its own (the newcomer mode checks
# the frame there).
FrameHook = Callable[[int, Image.Image], Iterator[VideoEvent]]


class Propagation:
    """Runs spans through ``tracker`` on ``clip`` into ``tracks``, with one progress count for all of them.

    Args:
        tracker: a ``sam.video_tracker.VideoTracker``.
        clip: a ``video.clip.Clip`` (frames read as needed).
        tracks: where the masks go.
        stop: set to stop (the tracker returns after the frame in progress).
    """

    def __init__(self, tracker: Any, clip: Any, tracks: Tracks, stop: threading.Event) -> None:
        self.tracker = tracker
        self.clip = clip
        self.tracks = tracks
        self.stop = stop
        self.done = 0
        self.total = 0
        self.started: float | None = None

    @property
    def seconds(self) -> float:
        return 0.0 if self.started is None else time.perf_counter() - self.started

    def plan(self, spans: Iterable[Span]) -> None:
        """Count the frames ``spans`` will compute into the total."""
        self.total += sum(span.tracked for span in spans)
        if self.started is None:
            self.started = time.perf_counter()

    def run(self, span: Span, after_frame: FrameHook | None = None) -> Generator[VideoEvent, None, int]:
        """Track ``span``: its objects are prompted with their masks on ``span.start`` (read from ``tracks``).
        Yields a ``FrameTracked`` per frame (then ``after_frame``'s events); returns the frames computed.

        Objects whose mask on the start frame is empty are not prompted (an absent object is not propagated).

        Raises:
            BackendError: the tracker failed (the frames tracked until then are kept).
            InputError: the clip could not be read on the way (likewise).
        """
        if self.started is None:
            self.started = time.perf_counter()
        prompts = {}
        for object_id in span.object_ids:
            mask = self.tracks.mask(object_id, span.start)
            if mask.any():
                prompts[object_id] = mask
        if not prompts or span.tracked == 0 or self.stop.is_set():
            return 0
        recent: dict[int, Image.Image] = {}

        def frames() -> Iterator[tuple[int, Image.Image]]:
            for index, image in self.clip.frames(span.frames):
                recent[index] = image
                recent.pop(index + (2 if span.reverse else -2), None)  # the tracker reads one frame at a time
                yield index, image

        computed = 0
        results = self.tracker.track(frames(), prompts, num_frames=self.tracks.frame_count, reverse=span.reverse,
                                     stop=self.stop)
        try:
            for result in results:
                frame = result.frame_index
                for object_id in prompts:
                    mask = result.masks.get(object_id)
                    if mask is not None:
                        self.tracks.set_tracked(object_id, frame, mask, result.scores.get(object_id, 0.0))
                computed += 1
                self.done += 1
                seconds = self.seconds
                yield FrameTracked(frame_index=frame, masks=self.tracks.masks_on(frame), done=self.done,
                                   total=max(self.total, self.done),
                                   frames_per_second=self.done / seconds if seconds > 0 else 0.0)
                image = recent.get(frame)
                if after_frame is not None and image is not None and not self.stop.is_set():
                    yield from after_frame(frame, image)
                if self.stop.is_set():
                    break
        finally:
            close = getattr(results, "close", None)
            if close is not None:
                close()
        if not self.stop.is_set():  # a call the clip ended early: the total follows what happened (a stopped one's
            self.total -= span.tracked - computed  # total stays what was planned)
        return computed
