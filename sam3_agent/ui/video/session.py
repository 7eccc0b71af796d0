"""A tab's clip state (``VideoSession``) and where every tab's lives (``VideoSessions``: a ``ui.session_store``).

What a session holds, and why it stays small: the scrubber's reader (its decoder, and at most
``clips.SCRUB_CACHE_FRAMES`` decoded frames), the video trace (masks as RLE; the keyframe's photo), the session's
folder on disk (its link to the upload, the downloads). Nothing that reaches a model: the run in progress is reached
only through its ``cancel`` (a callable, which ``ui.memory_size`` does not follow), so measuring a session never
walks into the models. A session is closed (run stopped, clip closed, folder removed) when the store drops it: its
tab closed, 30 minutes unused, or the sessions together over their bound.

No Gradio here.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import InputError
from ...video.clip import Clip
from ...video.clip_caps import ClipCaps
from ...video.clip_info import ClipInfo
from ...video.records import KeyframeRun, VideoTrace
from ...video.tracks import TrackedObject, Tracks
from ..context_view import ContextPanel
from ..session_store import SessionStore, StoreTexts
from ..view import StatusLine
from .clips import open_working

logger = logging.getLogger(__name__)

RESULT_PREFIX = "result"  # the downloads of each result go into <session folder>/result<version>/
VIDEO_TEXTS = StoreTexts(what="clip", reopen="upload the clip again",
                         smaller="use a shorter clip or one with smaller frames", use="use")


@dataclass(frozen=True)
class PendingFix:
    """A frame handed to the Correct tab: the Correct session's key, the object fixed (``None``: an object to add) and
    the frame."""

    correct_key: str
    object_id: int | None
    frame: int


@dataclass(eq=False)
class VideoSession:
    """One tab's clip and its result (kept in ``VideoSessions``; changed in place under ``lock``).

    Attributes:
        key: the session's key in the store (random).
        owner: the browser session it belongs to.
        path: the session's own copy of the upload (``clips.keep_upload``).
        name: the upload's own file name.
        caps: the caps it was opened with (a working reader is opened with them too).
        clip: the scrubber's reader.
        folder: the session's folder (the copy of the upload, the downloads).
        trace: the latest run's video trace with its edits (``None`` before a run).
        contexts: the keyframe run's context panel per round (the rounds' "Context sent").
        shown_frame: the frame the scrubber shows now.
        hidden: object ids drawn off on the scrubbed frame.
        pending_fix: the frame handed to the Correct tab, until it is applied.
        picked: the object last handed to the Correct tab (the object picker keeps it).
        line: the status line of the latest result (the downloads add to it).
        version: counts changes of ``trace`` (a run, an edit): downloads of an older version are not offered.
        cancel: stops the run or re-propagation in progress (``None`` when there is none).
        ended: set when that work has ended.
    """

    key: str
    owner: str | None
    path: Path
    name: str | None
    caps: ClipCaps
    clip: Clip
    folder: Path
    trace: VideoTrace | None = None
    contexts: dict[int, ContextPanel] = field(default_factory=dict)
    shown_frame: int = 0
    hidden: frozenset[int] = frozenset()
    pending_fix: PendingFix | None = None
    picked: int | None = None
    line: StatusLine | None = None
    version: int = 0
    cancel: Callable[[], None] | None = None
    ended: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def info(self) -> ClipInfo:
        return self.clip.info

    @property
    def busy(self) -> bool:
        """True while a run or a re-propagation of this session goes on."""
        return self.cancel is not None

    def begin(self, cancel: Callable[[], None]) -> None:
        """Work (a run, a re-propagation) starts; ``cancel`` stops it.

        Raises:
            InputError: other work of this session is going on.
        """
        with self.lock:
            if self.cancel is not None:
                raise InputError("tracking is still going on: wait for it to end, or press Stop")
            self.cancel = cancel
            self.ended = threading.Event()

    def end(self) -> None:
        """The work begun last has ended."""
        with self.lock:
            self.cancel = None
            self.ended.set()

    def changed(self) -> int:
        """The trace changed (a run, an edit): returns the new version."""
        with self.lock:
            self.version += 1
            return self.version

    def working_clip(self) -> Clip:
        """A reader for one run, re-propagation or overlay video (``clips.open_working``); close it when done.

        Raises:
            InputError: the session's copy of the clip is gone.
        """
        return open_working(self.path, self.caps, self.name)

    def close(self) -> None:
        """Stop the work in progress, close the reader and remove the session's folder (the store drops it)."""
        cancel = self.cancel
        if cancel is not None:
            cancel()
        self.clip.close()
        self.remove_folder(self.folder)

    @staticmethod
    def remove_folder(folder: Path) -> None:
        """Remove a session's folder and everything in it (nothing happens when it is gone)."""
        shutil.rmtree(folder, ignore_errors=True)

    @staticmethod
    def prune_results(folder: Path, keep: Path) -> None:
        """Remove the downloads of earlier results in ``folder``, all but ``keep`` (a download in progress of the
        one before may still read it: Gradio serves copies it made when they were offered)."""
        for result in folder.glob(f"{RESULT_PREFIX}*"):
            if result != keep and result.is_dir():
                shutil.rmtree(result, ignore_errors=True)


def close_session(session: VideoSession) -> None:
    """The store's ``close`` hook."""
    session.close()


class VideoSessions(SessionStore):
    """Every tab's clip by key, bounded in time and memory (``SessionStore``); a dropped one is closed."""

    def __init__(self, **bounds: float) -> None:
        super().__init__(texts=VIDEO_TEXTS, close=close_session, **bounds)  # type: ignore[arg-type]

    def get(self, key: str | None) -> VideoSession:
        return super().get(key)


def trace_snapshot(trace: VideoTrace) -> VideoTrace:
    """A copy of ``trace`` that later edits do not change (the masks are shared: they are immutable records), for
    exports written while the person goes on editing."""
    tracks = Tracks(trace.tracks.frame_count, trace.tracks.height, trace.tracks.width)
    for object_id in trace.tracks.object_ids():
        obj = trace.tracks.objects[object_id]
        tracks.restore_object(TrackedObject(obj.object_id, obj.label, dict(obj.masks)))
    return dataclasses.replace(trace, tracks=tracks, settings=dict(trace.settings),
                               keyframes=[KeyframeRun(k.frame_index, k.trace, k.objects) for k in trace.keyframes],
                               edits=list(trace.edits), checks=list(trace.checks), timings=dict(trace.timings))
