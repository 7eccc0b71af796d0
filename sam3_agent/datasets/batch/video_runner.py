"""Running one video item of a batch: the clip opened within its caps, the video agent over it, its files written.

A video item runs as the ``video`` command does: the image agent on the keyframe (the batch's model flags), SAM 3's
video tracker carrying its answer forward and backward (``video.run.VideoAgent``), the newcomer mode when asked. Its
folder then gets what ``video --out`` writes (``video.outputs``), the overlay video only when asked (it decodes,
draws and encodes every frame), and last its record (``layout.BatchLayout.write_video_item``). Stop (Ctrl-C) cancels
the run after the frame in progress; the item is written as ``cancelled`` with every frame tracked so far, and a
rerun runs it again, as for a photo.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ...errors import InputError, Sam3AgentError
from ...video.clip import Clip, open_clip
from ...video.clip_caps import DEFAULT_CLIP_CAPS, ClipCaps
from ...video.records import VideoTrace
from ...video.run import VideoAgent, VideoConfig
from .agents import AgentSource
from .clip_checks import keyframe_of
from .items import VideoItem
from .layout import BatchLayout
from .records import STOP_REASON, ItemRecord

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class VideoOptions:
    """How a batch runs its video items.

    Attributes:
        config: the video options (the newcomer mode and its limits).
        caps: what each clip may hold (checked when the items are read, and again when each one opens).
        overlay_video: also write each item's ``overlay.mp4``.
    """

    config: VideoConfig = field(default_factory=VideoConfig)
    caps: ClipCaps = DEFAULT_CLIP_CAPS
    overlay_video: bool = False


DEFAULT_VIDEO_OPTIONS = VideoOptions()


def execute_video_item(item: VideoItem, clip: Clip, agents: AgentSource, *, stop: threading.Event,
                       options: VideoOptions = DEFAULT_VIDEO_OPTIONS,
                       started_runs: dict[str, Any] | None = None) -> tuple[VideoTrace | None, str | None]:
    """Run one video item over its open ``clip`` to its end (nothing is written).

    Args:
        item: the item.
        clip: its clip, open.
        agents: a new agent for the item, and the batch's tracker (``agents.tracker``).
        stop: when set (before or during the run), the run ends as ``cancelled`` after the frame in progress.
        options: the video options.
        started_runs: receives the run while it goes (keyed by item id), so another thread can cancel it.

    Returns:
        ``(video trace, None)`` for a run (any status), or ``(None, reason)`` when it could not start (a keyframe
        outside the clip, a bad query, no tracker).
    """
    try:
        return _execute(item, clip, agents, stop, options, started_runs)
    except Sam3AgentError as error:
        return None, str(error)
    except Exception as error:  # a bug must not stop the batch: the item is recorded as failed
        logger.exception("video item %s failed unexpectedly", item.id)
        return None, f"internal error (details in the log): {error}"


def _execute(item: VideoItem, clip: Clip, agents: AgentSource, stop: threading.Event, options: VideoOptions,
             started_runs: dict[str, Any] | None) -> tuple[VideoTrace | None, str | None]:
    tracker = getattr(agents, "tracker", None)
    if tracker is None:
        return None, "no video tracker was loaded for this batch (a bug: video items load one)"
    with agents.in_flight():
        try:
            keyframe = keyframe_of(item, clip.info)
            run = VideoAgent(agents.new_agent(), tracker, options.config).start(clip, item.query,
                                                                                keyframes=[keyframe])
        except InputError as error:
            return None, str(error)
        if started_runs is not None:
            started_runs[item.id] = run
        try:
            if stop.is_set():
                run.cancel()
            for _event in run:
                pass
        finally:
            if started_runs is not None:
                started_runs.pop(item.id, None)
    trace = run.trace
    if trace.status in ("running", "cancelled") and stop.is_set():
        trace.status, trace.error = "cancelled", STOP_REASON  # type: ignore[assignment]
    return trace, None


def run_video_item(item: VideoItem, layout: BatchLayout, agents: AgentSource, *, stop: threading.Event,
                   options: VideoOptions = DEFAULT_VIDEO_OPTIONS, started_runs: dict[str, Any] | None = None) -> ItemRecord:
    """Open the item's clip, run it (``execute_video_item``) and write its files and record; returns the record. A
    clip that cannot be opened now (moved, changed past a cap since the items were read) fails the item alone.

    Raises:
        OSError: the output folder cannot be written.
    """
    started = time.perf_counter()
    layout.begin_item(item)
    try:
        clip = open_clip(item.video, options.caps)
    except InputError as error:
        return layout.write_video_item(item, None, None, time.perf_counter() - started, str(error))
    with clip:
        trace, reason = execute_video_item(item, clip, agents, stop=stop, options=options, started_runs=started_runs)
        return layout.write_video_item(item, trace, clip, time.perf_counter() - started, reason,
                                       overlay_video=options.overlay_video)
