"""The Video tab's handlers that fix frames: ``fix`` / ``add`` hand the scrubbed frame to the Correct tab, ``apply``
brings its mask back and re-propagates, ``remove`` and ``undo_edit`` edit the objects (``VideoEditHandlers``, a part
of ``handlers.VideoHandlers``, which holds the sessions, the factory and the Correct tab's handlers these read).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import gradio as gr

from ...errors import BackendError, InputError
from ...video.corrections import ADDED_LABEL, VideoEditor
from ..correct.handlers import CorrectHandlers
from ..html import render_status
from ..run.runner import AgentFactory
from ..view import StatusLine, sentence
from .clips import checked_frame
from .fixes import ADD_LABEL, corrected_masks, fixed_mask, frame_trace
from .frames import frame_caption
from .outputs import (
    VideoOutputs,
    result,
    shown_frame,
    status_only,
    unchanged,
)
from .screen import VideoScreen
from .session import PendingFix, VideoSessions

logger = logging.getLogger(__name__)


def owner_of(request: Any) -> str | None:
    return getattr(request, "session_hash", None) if request is not None else None


def error_line(message: str) -> StatusLine:
    return StatusLine("error", sentence(message))



class VideoEditHandlers:
    """The fixing half of ``handlers.VideoHandlers`` (see there for the attributes it reads)."""

    sessions: VideoSessions
    correct: CorrectHandlers
    factory: AgentFactory
    warn: Callable[[str], None]


    def fix(self, key: Any, object_id: Any, frame: Any, correct_key: Any = None,
            request: gr.Request | None = None) -> list[Any]:
        """"Fix it on this frame": the scrubbed frame with object ``object_id``'s mask opens in the Correct tab; returns
        the Correct tab's outputs, then (apply group, its note, this tab's status)."""
        return self._hand_over(key, object_id, frame, correct_key, request, adding=False)

    def add(self, key: Any, frame: Any, correct_key: Any = None, request: gr.Request | None = None) -> list[Any]:
        """"Add an object": the scrubbed frame opens in the Correct tab without masks; what is drawn there becomes
        new objects."""
        return self._hand_over(key, None, frame, correct_key, request, adding=True)

    def _hand_over(self, key: Any, object_id: Any, frame: Any, correct_key: Any, request: Any,
                   adding: bool) -> list[Any]:
        skip = gr.skip()
        count = len(self.correct_outputs_fields())
        try:
            session = self._session(key)
            if session.trace is None:
                raise InputError("run the agent on the clip first: then fix its objects frame by frame")
            if session.busy:
                raise InputError("tracking is still going on: wait for it to end (or press Stop), then fix a frame")
            index = checked_frame(frame, session.info.frame_count)
            chosen = None if adding else _object_id(object_id)
            handed = frame_trace(session.trace, session.clip.frame(index).copy(), index, chosen)
        except InputError as error:
            return [*([skip] * count), skip, skip, render_status(error_line(str(error)))]
        has_mask = handed.final_masks is not None and len(handed.final_masks) > 0
        outputs = self.correct.load(handed, switch_tab=True, previous=correct_key, owner=owner_of(request),
                                    select=0 if has_mask else None)
        if not isinstance(outputs.session, str):  # refused: the Correct tab's status says why
            return [*outputs, skip, skip, skip]
        session.pending_fix = PendingFix(outputs.session, chosen, index)
        session.picked = chosen if chosen is not None else session.picked
        what = f"object {chosen}" if chosen is not None else "a new object (each mask you make becomes one)"
        note = (f"Frame {index} of {session.info.file_name or 'the clip'}: {what}. Edit the mask with the tools "
                "(points, box, brush), then apply it: it is tracked again from this frame as far as the object's "
                "next fixed frame each way.")
        return [*outputs, gr.update(visible=True), note, skip]

    @staticmethod
    def correct_outputs_fields() -> tuple[str, ...]:
        from ..correct.handlers import CorrectOutputs

        return CorrectOutputs._fields

    def fix_shown(self, key: Any, correct_key: Any) -> Any:
        """The Correct tab's apply group: shown while its canvas holds the frame this tab handed over."""
        try:
            pending = self._session(key).pending_fix
        except InputError:
            pending = None
        return gr.update(visible=pending is not None and pending.correct_key == correct_key)

    def apply(self, key: Any, correct_key: Any) -> Iterator[list[Any]]:
        """Apply the Correct tab's mask to the frame handed over and re-propagate it (progress as a run's); brings
        the Video tab to the front. Yields this tab's outputs, then (tabs, apply group)."""
        skip = gr.skip()
        try:
            session = self._session(key)
            pending = session.pending_fix
            if pending is None or pending.correct_key != correct_key:
                raise InputError("the Correct tab holds no frame of the clip now: press 'Fix it on this frame' (or "
                                 "'Add an object on this frame') in the Video tab")
            corrected = self.correct.session(correct_key)
            masks = corrected_masks(corrected)
            mask = fixed_mask(corrected)
            if pending.object_id is None and not masks:
                raise InputError("draw the new object first (points, a box or the brush), then apply")
        except InputError as error:
            self.warn(sentence(str(error)))
            yield [*unchanged(), skip, skip]
            return
        try:
            tracker = self.factory.require_video_tracker()
            clip = session.working_clip()
        except (BackendError, InputError) as error:  # the frame is fixed, nothing re-propagates
            logger.info("a fix without re-propagation: %s", error)
            tracker, clip = None, None
        editor = VideoEditor(session.trace, clip, tracker)
        try:
            session.begin(editor.cancel)
        except InputError as error:
            if clip is not None:
                clip.close()
            self.warn(sentence(str(error)))
            yield [*unchanged(), skip, skip]
            return
        session.pending_fix, session.shown_frame = None, pending.frame
        session.changed()
        screen = VideoScreen(0, "Re-propagating", with_rounds=False)
        what = f"object {pending.object_id}" if pending.object_id is not None else \
            f"{len(masks)} new object{'s' if len(masks) != 1 else ''}"
        screen.line = StatusLine("running", f"Fixing {what} on frame {pending.frame}: tracking again from there.")
        first = {"slider": gr.update(value=pending.frame), "frame": shown_frame(session),
                 "caption": frame_caption(session.info, pending.frame), "result": gr.update(visible=True),
                 "overlay": None, "downloads": None}
        try:
            if pending.object_id is not None:
                edits = [lambda: editor.replace(pending.object_id, pending.frame, mask)]
            else:
                edits = [lambda m=m, label=label: editor.add(pending.frame, mask=m,
                                                             label=ADDED_LABEL if label == ADD_LABEL else label)
                         for m, label in masks]
            pages = self._stream(session, _chained(edits), screen, first,
                                 final=lambda shown: _fixed_line(what, pending.frame, shown))
            for index, page in enumerate(pages):
                extra = [gr.Tabs(selected="video"), gr.update(visible=False)] if index == 0 else [skip, skip]
                yield [*page, *extra]
        except InputError as error:  # the fix was refused (a wrong size...): nothing changed
            yield [*status_only(error_line(str(error))), skip, skip]
        finally:
            if clip is not None:
                clip.close()
            session.end()

    def remove(self, key: Any, object_id: Any) -> VideoOutputs:
        """Remove object ``object_id`` from every frame (Undo brings it back)."""
        return self._edit(key, lambda editor: editor.remove(_object_id(object_id)),
                          lambda edit: f"Removed object {edit.object_id} from every frame (Undo brings it back).")

    def undo_edit(self, key: Any) -> VideoOutputs:
        """Take back the latest edit (a fix, an added object, a removal): its masks come back exactly."""
        def undone(edit: Any) -> str:
            if edit is None:
                return "Nothing to undo: no edit was made."
            where = f" on frame {edit.frame_index}" if edit.frame_index is not None else ""
            verb = {"replace": "the fix of object", "add": "the added object", "remove": "the removal of object"}
            return f"Undid {verb[edit.kind]} {edit.object_id}{where}."
        return self._edit(key, lambda editor: editor.undo(), undone)

    def _edit(self, key: Any, action: Callable[[VideoEditor], Any], words: Callable[[Any], str]) -> VideoOutputs:
        try:
            session = self._session(key)
            if session.trace is None:
                raise InputError("run the agent on the clip first")
            with session.lock:
                if session.busy:
                    raise InputError("tracking is still going on: wait for it to end, or press Stop")
                done = action(VideoEditor(session.trace))
                session.version += 1
        except InputError as error:
            return status_only(error_line(str(error)))
        session.hidden = session.hidden & frozenset(session.trace.tracks.object_ids())
        session.line = StatusLine("done", words(done))
        self._measure(session)
        return result(session, session.line, progress="", announce=gr.skip())

    # ------------------------------------------------------------------ context, closing, API


def _object_id(value: Any) -> int:
    """An object id from the object picker. Raises InputError: none picked."""
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InputError("pick an object first (the list under the objects table)") from None


def _chained(edits: list[Callable[[], Iterator[Any]]]) -> Iterator[Any]:
    """The events of each edit in turn (each started only when the one before ended)."""
    for start in edits:
        yield from start()


def _fixed_line(what: str, frame: int, screen: VideoScreen) -> StatusLine:
    progress = screen.progress
    if progress is not None and progress.stopped:
        return StatusLine("cancelled", f"Stopped: {what} fixed on frame {frame}; {progress.done} frame(s) tracked "
                                       "again until then are kept.")
    done = progress.done if progress is not None else 0
    return StatusLine("done", f"Fixed {what} on frame {frame} and tracked again over {done} frame(s).")

