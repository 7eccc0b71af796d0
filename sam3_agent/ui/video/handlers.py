"""The Video tab's handlers: plain functions and generators that return component values (``outputs.VideoOutputs``).

``open`` takes an uploaded clip (refused in words, before any frame is decoded, when it is over the caps), ``scrub``
shows a frame, ``run`` streams a run over the clip (the keyframe's rounds as a photo's, then the tracking with its bar
and the scrubbed frame redrawn as soon as it is tracked), ``downloads`` writes the result's files after it, ``stop``
ends a run or re-propagation keeping every frame tracked, ``show_objects`` draws objects on or off; ``fix`` / ``add``
hand the scrubbed frame to the Correct tab and ``apply`` brings its mask back and re-propagates; ``remove`` and
``undo_edit`` edit the objects (these five in ``edit_handlers``);
``context`` opens a keyframe round's context; ``unload`` drops a closed tab's clip. Each
tab's clip state is a ``session.VideoSession`` in a bounded store; the page's ``gr.State`` holds only its key.
The ``/segment_video`` endpoint is ``api``.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gradio as gr

from ...errors import BackendError, InputError
from ...events import TokenStreamed
from ...messages import checked_query
from ...shared import SharedObject
from ...video.events import FrameTracked, VideoRunFinished
from ...video.run import VideoAgent
from ..correct.handlers import CorrectHandlers
from ..html import ImageUrls, RunPage, render_context, render_status
from ..run.runner import AgentFactory
from ..view import StatusLine
from . import api
from .clips import app_clip_caps, checked_frame, keep_upload, open_scrubber, upload_name
from .edit_handlers import VideoEditHandlers, error_line, owner_of
from .exports import OverlayVideo, write_files
from .frames import frame_caption
from .gpu_time import gpu_note
from .outputs import (
    EMPTY,
    Announcer,
    VideoOutputs,
    cleared,
    opened,
    result,
    rounds_shown,
    running,
    shown_frame,
    status_only,
)
from .progress import render_progress
from .screen import VideoScreen
from .session import RESULT_PREFIX, VideoSession, VideoSessions, trace_snapshot

logger = logging.getLogger(__name__)

STREAM_INTERVAL_S = 0.05  # token-only and frame-only updates at most 20 a second (ui.run.handlers' pace)
TOUCH_INTERVAL_S = 60.0  # a long run marks its session used this often, so the store never drops it meanwhile
STOP_GRACE_S = 5.0  # Stop waits this long for the work to end by itself
DOWNLOAD_POLL_S = 0.5  # how often the overlay video's progress is shown while it is written
STOPPING = "Stopping: tracking ends after the frame in progress; every frame tracked until then is kept."


class VideoHandlers(VideoEditHandlers, SharedObject):
    """The Video tab's handlers around the shared models.

    Args:
        factory: the loaded models (the image agent's, and the video tracker: ``AgentFactory.require_video_tracker``).
        correct: the Correct tab's handlers (a frame to fix is opened there).
        root: folder for the sessions' files (a ``video/`` folder is made inside).
        warn: shows a message to the user (``gr.Warning`` in the app).
        sessions: where the tabs' clips live (default: a ``VideoSessions`` with its default bounds).
    """

    def __init__(self, factory: AgentFactory, correct: CorrectHandlers, root: Path,
                 warn: Callable[[str], None] | None = None, sessions: VideoSessions | None = None) -> None:
        self.factory = factory
        self.correct = correct
        self.root = root
        self.warn = warn or (lambda message: gr.Warning(message))
        self.sessions = sessions if sessions is not None else VideoSessions()
        self.caps = app_clip_caps(factory.settings.max_image_pixels)

    def _session(self, key: Any) -> VideoSession:
        """The tab's session. Raises InputError: none (never opened, expired or dropped), in words."""
        if not isinstance(key, str):
            raise InputError("upload a clip first (or pick the example)")
        return self.sessions.get(key)

    # ------------------------------------------------------------------ the clip

    def open(self, path: str | None, previous: Any = None, request: gr.Request | None = None) -> VideoOutputs:
        """An uploaded (or example) clip: kept and opened within the app's caps, its first frame shown; the tab's
        previous clip is dropped. A clip over the caps, damaged or not a clip is refused in words; nothing is kept."""
        self.sessions.drop(previous if isinstance(previous, str) else None)
        if not path:
            return cleared(StatusLine("idle", EMPTY))
        name = upload_name(path)
        folder = self.root / "video" / uuid.uuid4().hex
        try:
            kept = keep_upload(path, folder)
            clip = open_scrubber(kept, self.caps, name)
        except InputError as error:
            VideoSession.remove_folder(folder)
            return cleared(error_line(f"{error}. Upload another clip"))
        session = VideoSession(key=uuid.uuid4().hex, owner=owner_of(request), path=kept, name=name, caps=self.caps,
                               clip=clip, folder=folder)
        try:
            self.sessions.put(session, session.owner, key=session.key)
        except InputError as error:
            session.close()
            return cleared(error_line(str(error)))
        info = clip.info
        rate = f", {info.fps:g} fps, {info.timestamps[-1] + 1 / info.fps:.1f} s" if info.fps else ""
        line = StatusLine("idle", f"Clip ready: {info.file_name or 'the clip'}, {info.frame_count} frames of "
                                  f"{info.width}x{info.height}{rate}. Pick the keyframe with the slider (the agent "
                                  "reasons on it), add a query, then press Run.")
        return opened(session, line, gpu_note(info))

    def scrub(self, key: Any, frame: Any) -> tuple[Any, Any]:
        """(frame picture, caption) of the frame the slider is on, with the objects tracked there so far."""
        try:
            session = self._session(key)
            index = checked_frame(frame, session.info.frame_count)
            session.shown_frame = index
            return shown_frame(session), frame_caption(session.info, index)
        except InputError:
            return gr.skip(), gr.skip()

    def show_objects(self, key: Any, shown: list[int] | None) -> tuple[Any, Any]:
        """(frame picture, objects table) with only the ``shown`` objects drawn on the scrubbed frame."""
        try:
            session = self._session(key)
        except InputError:
            return gr.skip(), gr.skip()
        ids = set(session.trace.tracks.object_ids()) if session.trace is not None else set()
        session.hidden = frozenset(ids - {int(i) for i in shown or ()})
        from .tables import render_objects

        return shown_frame(session), render_objects(session.trace.tracks if session.trace else None, session.hidden)

    # ------------------------------------------------------------------ running

    @staticmethod
    def queued() -> str:
        """The status at once when Run is pressed (outside the queue)."""
        return render_status(StatusLine("running", "Queued: waiting for the model (it serves one run at a time)."))

    def run(self, key: Any, query: str, frame: Any, max_rounds: Any, score_threshold: Any,
            request: gr.Request | None = None) -> Iterator[VideoOutputs]:
        """Run the agent on the keyframe ``frame`` and track what it chose through the clip; yields the page after
        every event (token and frame updates at most every ``STREAM_INTERVAL_S``, the scrubbed frame as soon as it
        is tracked) and ends with the result. Bad input and missing models end at once with the status saying why.
        When the generator is closed early (tab closed, event cancelled) the run is stopped, its frames kept."""
        try:
            session = self._session(key)
            keyframe = checked_frame(frame, session.info.frame_count)
            query = checked_query(query)
            agent = self.factory.new_agent(int(max_rounds), float(score_threshold))
            tracker = self.factory.require_video_tracker()
        except (InputError, BackendError) as error:
            yield status_only(error_line(str(error)))
            return
        except (TypeError, ValueError):
            yield status_only(error_line("the round budget and the score threshold must be numbers"))
            return
        try:
            clip = session.working_clip()
        except InputError as error:
            yield status_only(error_line(str(error)))
            return
        video_run = VideoAgent(agent, tracker).start(clip, query, keyframes=[keyframe])
        try:
            session.begin(video_run.cancel)
        except InputError as error:
            clip.close()
            yield status_only(error_line(str(error)))
            return
        screen = VideoScreen(int(max_rounds))
        session.trace, session.contexts, session.pending_fix = video_run.trace, screen.contexts, None
        session.shown_frame, session.hidden, session.line = keyframe, frozenset(), None
        session.changed()
        try:
            yield from self._stream(session, video_run, screen, first=dict(
                slider=gr.update(value=keyframe), frame=shown_frame(session), result=gr.update(visible=False),
                caption=frame_caption(session.info, keyframe), overlay=None, downloads=None),
                final=lambda shown: shown.line)
        finally:
            if video_run.trace.status == "running":  # closed early: stop, and let it record what it tracked
                video_run.cancel()
                for _event in video_run:
                    pass
            clip.close()
            session.end()

    def _stream(self, session: VideoSession, events: Any, screen: VideoScreen, first: dict[str, Any],
                final: Callable[[VideoScreen], StatusLine]) -> Iterator[VideoOutputs]:
        """The page after each event of ``events`` (a run, or a re-propagation's; ``first``: what the first page
        also sets), then the result, whose status is ``final(screen)``."""
        page, announce = RunPage(), Announcer()
        yield running(screen, page, announce)._replace(**first)
        last = touched = time.monotonic()
        for event in events:
            screen.apply(event)
            if isinstance(event, VideoRunFinished):
                break
            now = time.monotonic()
            if now - touched >= TOUCH_INTERVAL_S:
                self.sessions.get(session.key)  # used: not dropped while it works
                touched = now
            redraw = isinstance(event, FrameTracked) and event.frame_index == session.shown_frame
            quiet = isinstance(event, TokenStreamed | FrameTracked) and not redraw and not announce.changes(
                screen.progress)
            if quiet and now - last < STREAM_INTERVAL_S:
                continue
            yield running(screen, page, announce, shown_frame(session) if redraw else None)
            last = now
        line = final(screen)
        session.line = line
        self._measure(session)
        yield result(session, line, progress=render_progress(screen.progress), announce=announce(screen.progress),
                     **rounds_shown(screen, page))

    def _measure(self, session: VideoSession) -> None:
        """Let the store count what the session holds now (its result added its masks and the keyframe's photo)."""
        try:
            self.sessions.replace(session.key, session)
        except InputError as error:  # over one session's bound, or dropped meanwhile: it goes with the next drop
            logger.warning("a clip session outgrew its bound: %s", error)

    def stop(self, key: Any) -> Iterator[Any]:
        """Stop the tab's run or re-propagation (every frame tracked until then is kept); yields the status."""
        try:
            session = self._session(key)
        except InputError:
            yield gr.skip()
            return
        cancel = session.cancel
        if cancel is None:
            yield gr.skip()
            return
        cancel()
        yield render_status(StatusLine("stopping", STOPPING))
        session.ended.wait(STOP_GRACE_S)  # the work shows its own last page
        yield gr.skip()

    def stop_button(self, key: Any) -> Any:
        """Stop red and enabled while the tab's run or re-propagation goes on, grey and disabled otherwise."""
        try:
            busy = self._session(key).busy
        except InputError:
            busy = False
        return gr.Button(interactive=busy, variant="stop" if busy else "secondary")

    @staticmethod
    def stop_offered() -> Any:
        """Stop enabled at once on a press of Run or Apply."""
        return gr.Button(interactive=True, variant="stop")

    # ------------------------------------------------------------------ downloads

    def downloads(self, key: Any) -> Iterator[tuple[Any, Any, Any, Any, Any]]:
        """(status, progress, announcement, overlay video, downloads) for the tab's latest result: the palette PNGs,
        the YouTube-VIS JSON and the trace at once, the overlay video with its progress bar. A result superseded
        meanwhile (a new run, an edit) offers nothing."""
        skip = gr.skip()
        try:
            session = self._session(key)
        except InputError:
            yield skip, skip, skip, skip, skip
            return
        with session.lock:
            if session.trace is None or session.busy:
                yield skip, skip, skip, skip, skip
                return
            version, snapshot = session.version, trace_snapshot(session.trace)
        folder = session.folder / f"{RESULT_PREFIX}{version}"
        line = session.line or StatusLine("done", "Done.")
        try:
            files = write_files(snapshot, folder)
            clip = session.working_clip()
        except (OSError, InputError) as error:
            reason = getattr(error, "strerror", None) or str(error)
            yield render_status(error_line(f"{line.text} Its files could not be written on the server ({reason}); try "
                                       "again later")), skip, skip, skip, skip
            return
        overlay, announce = OverlayVideo(snapshot, clip, folder), Announcer()
        while True:  # the bar at once, then as the frames are encoded
            progress = overlay.progress
            yield skip, render_progress(progress), announce(progress), skip, skip
            if overlay.wait(DOWNLOAD_POLL_S):
                break
        if session.version != version:
            yield skip, skip, skip, skip, skip
            return
        progress = overlay.progress
        if overlay.error is not None:
            text = f"{line.text} The overlay video could not be written ({overlay.error}); the other files can be " \
                   "downloaded."
            yield (render_status(StatusLine("error", text)), render_progress(progress), announce(progress), None,
                   [str(p) for p in files])
            return
        VideoSession.prune_results(session.folder, keep=folder)
        yield (render_status(StatusLine(line.kind, f"{line.text} Downloads ready.")), render_progress(progress),
               announce(progress), str(overlay.path), [str(p) for p in files] + [str(overlay.path)])

    def context(self, key: Any, event: gr.SelectData) -> str:
        """The context panel of the keyframe round whose "Context sent" was pressed (``event.index``: its number)."""
        try:
            contexts = self._session(key).contexts
        except InputError:
            contexts = {}
        if not contexts:
            return render_context(None, ImageUrls())
        latest = max(contexts)
        try:
            number = int(getattr(event, "index", None) or latest)
        except (TypeError, ValueError):
            number = latest
        return render_context(contexts.get(number, contexts[latest]), ImageUrls(), latest=latest)

    def forget(self, key: Any) -> None:
        """Drop a session (Gradio calls this when it drops the tab's state)."""
        self.sessions.drop(key if isinstance(key, str) else None)

    def unload(self, request: gr.Request) -> None:
        """A browser tab closed: its clips are dropped (their runs stopped)."""
        self.sessions.drop_owner(owner_of(request))

    def segment_video(self, clip: str, query: str, keyframe: Any) -> Iterator[tuple[Any, Any, Any]]:
        """API ``/segment_video`` (``api.segment_video``)."""
        yield from api.segment_video(self.factory, self.root, self.caps, clip, query, keyframe)
