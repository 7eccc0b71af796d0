"""What the Video tab shows of a run or a re-propagation, folded from its events (``video.events``): the keyframe's
rounds (the image agent's own events, into ``ui.run_view.RunView`` exactly as a photo's), the tracking progress, the
frames tracked, and the status line; ``video_status_line`` words a finished video trace.

No Gradio here.
"""

from __future__ import annotations

from ...events import Event as ImageEvent
from ...video.events import (
    FrameTracked,
    KeyframeStarted,
    ObjectsChosen,
    TrackingFinished,
    TrackingStarted,
    VideoRunFinished,
)
from ...video.records import VideoTrace
from ..context_view import ContextPanel
from ..run_view import RunView
from ..view import StatusLine, sentence
from .progress import Progress


def _count(number: int, word: str) -> str:
    return f"{number} {word}{'s' if number != 1 else ''}"


def video_status_line(trace: VideoTrace) -> StatusLine:
    """The status line of a finished (or stopped) run over a clip."""
    frames = trace.tracks.frame_count
    objects = len(trace.tracks.objects)
    keyframes = ", ".join(str(k.frame_index) for k in trace.keyframes) or "none"
    rounds = sum(len(k.trace.rounds) for k in trace.keyframes)
    tracked = int(trace.timings.get("frames_tracked", 0))
    status = trace.status
    if status == "done":
        text = (f"Done: {_count(objects, 'object')} over {_count(frames, 'frame')} (keyframe {keyframes}, "
                f"{_count(rounds, 'round')}, {_count(tracked, 'frame')} tracked).")
    elif status == "no_mask":
        text = (f"No object: the agent reported that nothing on frame {keyframes} matches the query (after "
                f"{_count(rounds, 'round')}).")
    elif status == "max_rounds":
        text = f"Round budget exhausted on frame {keyframes}: no object after {_count(rounds, 'round')}."
    elif status == "failed":
        text = sentence(f"Failed: {trace.error or 'unknown error'}")
        if tracked:
            text += f" The {_count(tracked, 'frame')} tracked until then are kept."
    elif status == "cancelled":
        text = (f"Stopped: {_count(objects, 'object')}, {_count(tracked, 'frame')} tracked; every frame tracked until "
                "then is kept.")
    else:
        text = "Running."
    return StatusLine(status, text)


class VideoScreen:
    """The screen of one run over a clip (or of one re-propagation), updated event by event.

    Args:
        max_rounds: the keyframe run's round budget.
        what: how the progress bar names the work (``"Tracking"``, ``"Re-propagating"``).
        with_rounds: a run (the keyframe's rounds are shown); False for a re-propagation, which leaves the rounds of
            the run before it on the page.

    Attributes:
        rounds: the keyframe run's screen (``RunView``); ``contexts``: its context panel per round.
        progress: the tracking progress (``None`` before tracking starts).
        tracked: the frame the latest ``FrameTracked`` was about (``None`` until one came).
        trace: the video trace, once the run ended.
        line: the status line now.
    """

    def __init__(self, max_rounds: int, what: str = "Tracking", with_rounds: bool = True) -> None:
        self.rounds = RunView(max_rounds)
        self.with_rounds = with_rounds
        self.what = what
        self.contexts: dict[int, ContextPanel] = {}
        self.progress: Progress | None = None
        self.tracked: int | None = None
        self.keyframe: int | None = None
        self.objects = 0
        self.trace: VideoTrace | None = None
        self.line = StatusLine("running", "Running: opening the clip")

    def apply(self, event: object) -> None:
        """Fold one event in."""
        if isinstance(event, KeyframeStarted):
            self.keyframe = event.frame_index
            self.line = StatusLine("running", f"Keyframe {event.frame_index} ({event.seconds:.2f} s): the agent "
                                              "reasons on it")
        elif isinstance(event, ObjectsChosen):
            chosen = len(event.new) + len(event.matched)
            self.objects = chosen
            self.line = StatusLine("running", f"The agent chose {_count(chosen, 'object')} on frame "
                                              f"{event.frame_index}: tracking forward and backward.")
        elif isinstance(event, TrackingStarted):
            done = self.progress.done if self.progress is not None else 0
            self.progress = Progress(self.what, done, event.total)
        elif isinstance(event, FrameTracked):
            self.tracked = event.frame_index
            self.progress = Progress(self.what, event.done, event.total, event.frames_per_second)
        elif isinstance(event, TrackingFinished):
            rate = event.done / event.seconds if event.seconds > 0 else 0.0
            self.progress = Progress(self.what, event.done, event.total, rate, ended=True, stopped=event.stopped)
        elif isinstance(event, VideoRunFinished):
            self.trace = event.trace
            self.line = video_status_line(event.trace)
        else:  # the keyframe run's own events
            self.rounds.apply(event)  # type: ignore[arg-type]
            panel = self.rounds.context
            if panel is not None:
                self.contexts[panel.round_index] = panel
            if self.keyframe is not None and self.rounds.trace is None:
                line = self.rounds.status_line()
                self.line = StatusLine("running", f"Keyframe {self.keyframe}: {line.text}")

    @staticmethod
    def is_image_event(event: object) -> bool:
        """Whether ``event`` is the keyframe run's own (``events.Event``) rather than the clip's."""
        return isinstance(event, ImageEvent)
