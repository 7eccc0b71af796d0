"""The tracking progress bar and what a screen reader is told about it.

The bar (``render_progress``: frames done of total, frames per second, time left) changes with every frame; what is
announced (``announcement``) changes only at a quarter of the way, half, three quarters and the end, so a screen
reader is not talked over frame by frame (it lives in a polite live region of its own: ``ui.html.LIVE_STATUS_JS``).

No Gradio here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

ANNOUNCE_STEPS = 4  # announced at 0, 25, 50, 75 and 100 %


@dataclass(frozen=True)
class Progress:
    """Frames ``done`` of ``total`` of ``what`` (``"Tracking"``, ``"Re-propagating"``, ``"Writing the overlay
    video"``) at ``frames_per_second``; ``ended``: it finished (or was stopped: ``stopped``)."""

    what: str
    done: int
    total: int
    frames_per_second: float = 0.0
    ended: bool = False
    stopped: bool = False

    @property
    def share(self) -> float:
        """Done as a share of the total, in [0, 1] (1 for nothing to do)."""
        return 1.0 if self.total <= 0 else min(1.0, self.done / self.total)

    @property
    def seconds_left(self) -> float | None:
        """Seconds to the end at the rate so far (``None`` before a rate is known or once ended)."""
        if self.ended or self.frames_per_second <= 0 or self.done <= 0:
            return None
        return max(0, self.total - self.done) / self.frames_per_second


def time_words(seconds: float) -> str:
    """``"4 s"``, ``"2 min 5 s"`` (whole seconds, rounded up: a promise of time left errs long)."""
    whole = max(1, math.ceil(seconds))
    if whole < 60:
        return f"{whole} s"
    minutes, rest = divmod(whole, 60)
    return f"{minutes} min {rest} s" if rest else f"{minutes} min"


def progress_text(progress: Progress) -> str:
    """``"Tracking: 23 of 49 frames · 12.3 frames/s · about 3 s left"``; once ended, what it came to."""
    head = f"{progress.what}: {progress.done} of {progress.total} frame{'s' if progress.total != 1 else ''}"
    if progress.stopped:
        return f"{head}, stopped (every frame done until then is kept)"
    if progress.ended:
        rate = f" at {progress.frames_per_second:.1f} frames/s" if progress.frames_per_second > 0 else ""
        return f"{head}, done{rate}"
    parts = [head]
    if progress.frames_per_second > 0:
        parts.append(f"{progress.frames_per_second:.1f} frames/s")
    left = progress.seconds_left
    if left is not None:
        parts.append(f"about {time_words(left)} left")
    return " · ".join(parts)


def render_progress(progress: Progress | None) -> str:
    """The bar (``role="progressbar"`` with its values, for assistive technology that asks) and its text; ``""``
    when there is nothing in progress."""
    if progress is None:
        return ""
    percent = round(100 * progress.share, 1)
    state = "stopped" if progress.stopped else "ended" if progress.ended else "running"
    return (f'<div class="video-progress video-progress-{state}" data-done="{progress.done}" '
            f'data-total="{progress.total}">'
            f'<div class="video-bar" role="progressbar" aria-label="{escape(progress.what)}" aria-valuemin="0" '
            f'aria-valuemax="{progress.total}" aria-valuenow="{progress.done}" '
            f'aria-valuetext="{escape(progress_text(progress))}"><span style="width: {percent}%"></span></div>'
            f'<div class="video-progress-text">{escape(progress_text(progress))}</div></div>')


def announce_step(progress: Progress) -> int:
    """Which announcement ``progress`` is at: 0 .. ``ANNOUNCE_STEPS`` by quarters, ``ANNOUNCE_STEPS + 1`` once
    ended."""
    if progress.ended:
        return ANNOUNCE_STEPS + 1
    return min(ANNOUNCE_STEPS, int(progress.share * ANNOUNCE_STEPS))


def announcement(progress: Progress) -> str:
    """What a screen reader is told at an announcement step (``announce_step``), e.g. ``"Tracking: 50 % done, 25 of
    49 frames, about 2 s left."``."""
    if progress.ended:
        return progress_text(progress) + "."
    percent = round(100 * progress.share)
    left = progress.seconds_left
    tail = f", about {time_words(left)} left" if left is not None else ""
    return f"{progress.what}: {percent} % done, {progress.done} of {progress.total} frames{tail}."
