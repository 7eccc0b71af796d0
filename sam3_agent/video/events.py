"""The events of a run over a clip, in the order ``VideoRun`` yields them (one stream for every front end).

A keyframe's run is the image agent's, unchanged: between ``KeyframeStarted`` and ``ObjectsChosen`` come that run's
own events (``events.RoundStarted`` ... ``events.RunFinished``), so a front end that shows a photo's rounds shows a
keyframe's the same way. Then tracking: ``TrackingStarted``, one ``FrameTracked`` per frame as it is computed (with
every object's mask on that frame), ``NewcomerChecked`` in the newcomer mode, ``TrackingFinished``; the run ends with
``VideoRunFinished``. Corrections (``video.corrections``) yield the same tracking events.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .records import NewcomerCheck, VideoTrace
from .tracks import FrameMask, Span


@dataclass(frozen=True)
class KeyframeStarted:
    """The agent starts on keyframe ``frame_index`` (at ``seconds`` into the clip)."""

    frame_index: int
    seconds: float


@dataclass(frozen=True)
class ObjectsChosen:
    """The keyframe run's final masks became objects.

    Attributes:
        frame_index: the keyframe.
        new: ids of the objects created from it, ascending.
        matched: ids of existing objects its masks matched on that frame (re-anchored there), ascending.
    """

    frame_index: int
    new: tuple[int, ...]
    matched: tuple[int, ...]


@dataclass(frozen=True)
class TrackingStarted:
    """Propagation begins: ``spans`` are the tracker calls planned (more may follow: newcomers), ``total`` the frames
    they compute; ``reason`` says what asked for it."""

    spans: tuple[Span, ...]
    total: int
    reason: Literal["keyframe", "newcomer", "edit"]


@dataclass(frozen=True)
class FrameTracked:
    """Frame ``frame_index`` was tracked.

    Attributes:
        masks: every object's mask on that frame now (object id -> ``FrameMask``; objects absent there are left out).
        done / total: frames computed so far / planned (``total`` grows when a newcomer adds a call).
        frames_per_second: ``done`` over the seconds since tracking started.
    """

    frame_index: int
    masks: dict[int, FrameMask]
    done: int
    total: int
    frames_per_second: float


@dataclass(frozen=True)
class NewcomerChecked:
    """A detector candidate that matched no object was checked by the verifier (``check.outcome`` says how)."""

    check: NewcomerCheck


@dataclass(frozen=True)
class TrackingFinished:
    """Propagation ended: ``done`` of ``total`` frames in ``seconds``; ``stopped`` when Stop ended it early."""

    done: int
    total: int
    seconds: float
    stopped: bool


@dataclass(frozen=True)
class VideoRunFinished:
    """The run over the clip ended (any status); ``trace`` is complete."""

    trace: VideoTrace


VideoEvent = (KeyframeStarted | ObjectsChosen | TrackingStarted | FrameTracked | NewcomerChecked | TrackingFinished
              | VideoRunFinished)
