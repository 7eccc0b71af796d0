"""Handlers of the "Correct" view: a session's actions (``actions``, here ``correct``) turned into component values.

Every handler returns a ``CorrectOutputs`` (the values of all the view's components, in the order ``ui.correct.layout``
binds them); a refused action (``InputError``, a model failure, a bad file) changes nothing but the status line, which
says why, so nothing is lost and the app keeps serving. The page's ``gr.State`` holds only a session's key: the
sessions live in a ``ui.correct.store.CorrectSessions`` (bounded in time and memory). Exports are written under
``root/correct/<session key>/`` (removed with the session).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import gradio as gr

from ...correct.export import write_bundle
from ...errors import BackendError, InputError, TraceFormatError
from ...sam.tracker import PointMask
from ...shared import SharedObject
from ...trace.load_limits import LoadLimits
from ...types import Trace
from ..html import render_status
from ..view import StatusLine
from . import actions as correct
from .exports import (
    BUNDLE_ZIP_FILE,
    write_corrected_coco,
    write_corrected_pngs,
    write_corrected_polygons,
    write_corrected_trace,
    write_corrected_yolo,
)
from .session import CorrectSession
from .store import CorrectSessions
from .tools import BRUSH_TOOLS, TOOL_ERASE, TOOL_NEGATIVE, TOOL_POSITIVE
from .trace_upload import app_load_limits, trace_from_upload
from .view import (
    agent_overlay,
    corrected_overlay,
    mask_number_choices,
    mask_rows,
    render_canvas,
    render_mask_table,
    round_choices,
    round_preview,
    selected_choices,
    shown_choices,
    status_text,
)

logger = logging.getLogger(__name__)

EMPTY_MESSAGE = "Nothing to correct yet: finish a run and press 'Correct these masks', or upload a bundle / trace .zip."


class CorrectOutputs(NamedTuple):
    """Values of the Correct view's components (``gr.skip()`` leaves one as it is); ``session`` is the session's key."""

    session: Any
    status: Any
    canvas: Any
    compare: Any
    shown: Any
    selected: Any
    label: Any
    table: Any
    undo: Any
    redo: Any
    round_pick: Any
    number_pick: Any
    preview: Any
    tabs: Any


class ExportOutputs(NamedTuple):
    """Values of (status line, download file) after an export."""

    status: Any
    file: Any


def refused(message: str) -> CorrectOutputs:
    """Only the status line changes: it says what was wrong and that nothing changed."""
    skip = gr.skip()
    status = render_status(StatusLine("error", f"{message[0].upper()}{message[1:]}. Nothing was changed."))
    return CorrectOutputs(skip, status, *([skip] * (len(CorrectOutputs._fields) - 2)))


def screen(session: CorrectSession, loaded: bool = False, switch_tab: bool = False) -> CorrectOutputs:
    """Every component's value for ``session``; ``loaded`` also refreshes what only changes with the trace (the
    round picker); ``switch_tab`` brings the Correct tab to the front."""
    skip = gr.skip()
    state = session.state
    shown, shown_values = shown_choices(session)
    choices, value = selected_choices(session)
    label = state.items[session.selected].label if session.selected is not None else None
    overlay = corrected_overlay(session)
    rounds = round_choices(session.trace) if loaded else []
    first_round = rounds[0][1] if rounds else None
    numbers = mask_number_choices(session.trace, first_round) if loaded else []
    return CorrectOutputs(
        session=session.key,
        status=render_status(StatusLine("done", status_text(session))),
        canvas=render_canvas(overlay),
        compare=(agent_overlay(session), overlay),
        shown=gr.update(choices=shown, value=shown_values),
        selected=gr.update(choices=choices, value=value),
        label=gr.update(choices=list(session.labels), value=label),
        table=render_mask_table(mask_rows(session)),
        undo=gr.update(interactive=state.can_undo),
        redo=gr.update(interactive=state.can_redo),
        round_pick=gr.update(choices=rounds, value=first_round) if loaded else skip,
        number_pick=gr.update(choices=numbers, value=numbers[0][1] if numbers else None) if loaded else skip,
        preview=round_preview(session, first_round) if loaded else skip,
        tabs=gr.Tabs(selected="correct") if switch_tab else skip,
    )


class CorrectHandlers(SharedObject):
    """The Correct view's handlers around SAM 3's shared point-prompt model.

    Args:
        point_segmenter: returns the loaded ``sam.tracker.PointSegmenter`` (raising ``BackendError`` with the reason when
            it could not be loaded); called on point clicks and boxes only.
        warn: shows a message to the user (``gr.Warning`` in the app); used for unreadable files.
        root: folder for exports (a ``correct/`` folder per session is made inside).
        sessions: where the sessions live (default: a ``CorrectSessions`` with its default bounds whose dropped
            sessions' exports are removed).
        gpu: wraps the point model's call (``spaces.GPU`` on ZeroGPU Spaces; default: none). Only the model call
            takes a GPU, with plain arguments (image, clicks, box) and result (``PointMask``): the session never leaves
            this process.
        limits: what an upload may cost (default ``trace_upload.app_load_limits()``).
    """

    def __init__(
        self,
        point_segmenter: Callable[[], Any],
        warn: Callable[[str], None],
        root: Path,
        sessions: CorrectSessions | None = None,
        gpu: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None,
        limits: LoadLimits | None = None,
    ) -> None:
        self.point_segmenter = point_segmenter
        self.limits = limits or app_load_limits()
        self.warn = warn
        self.root = root
        self.sessions = sessions if sessions is not None else CorrectSessions(on_drop=self._remove_exports)
        self._gpu = gpu
        self._on_gpu: tuple[Any, Callable[..., PointMask]] | None = None  # (model, its GPU-wrapped call)

    def session(self, key: str | None) -> CorrectSession:
        """The open session under ``key`` (what the page's state holds).

        Raises:
            InputError: no such session (expired, dropped, or never opened); the message says what to do.
        """
        return self.sessions.get(key)

    def _previous(self, key: Any) -> CorrectSession | None:
        """This tab's earlier session, when it is still open (it hands on the view style and the label list)."""
        try:
            return self.sessions.get(key) if isinstance(key, str) else None
        except InputError:
            return None

    # ------------------------------------------------------------------ loading

    def load(self, trace: Trace | None, switch_tab: bool = False, previous: Any = None,
             owner: str | None = None, select: int | None = None) -> CorrectOutputs:
        """Start correcting ``trace`` (a finished run or a loaded trace, saved edits included); ``previous`` (the key of
        this tab's earlier session, if any) hands on the view style and the label list.

        With ``switch_tab`` (a button in another tab) the Correct tab comes to the front, and a refusal is also
        shown as a warning there, since the Correct tab's status line is out of sight. ``owner``: the browser
        session (its sessions are dropped when its tab closes, ``drop_owner``). ``select``: the mask selected at once
        (clicks and the brush then act on it), e.g. the one object of a video frame handed over to be fixed.
        """
        try:
            if trace is None:
                raise InputError(EMPTY_MESSAGE.rstrip("."))
            session = correct.start_session(trace, previous=self._previous(previous))
            if select is not None:
                session = correct.select(session, select)
            self.sessions.put(session, owner)
            if isinstance(previous, str) and previous != session.key:
                self.sessions.drop(previous)  # one open session per tab: the new trace replaces the earlier one
        except (InputError, TraceFormatError) as error:
            if switch_tab:
                self.warn(str(error)[0].upper() + str(error)[1:])
            return refused(str(error))
        return screen(session, loaded=True, switch_tab=switch_tab)

    def from_run(self, slot: Any, previous: Any = None, request: gr.Request | None = None) -> CorrectOutputs:
        """The session's latest run (``ui.run.slot.RunSlot``), once it has ended; switches to the Correct tab."""
        run = getattr(slot, "run", None)
        if run is None:
            self.warn("There is no run to correct yet: press Run first.")
            return refused("there is no run to correct yet: press Run first")
        return self.load(run.trace, switch_tab=True, previous=previous, owner=_owner(request))

    def from_inspected(self, inspected: Any, previous: Any = None, request: gr.Request | None = None) -> CorrectOutputs:
        """The trace loaded in the Inspect tab (``ui.inspect.handlers.InspectedTrace``); switches to the Correct tab.

        One function opens any trace here, so a list of traces (a review queue) can step through them with it."""
        trace = getattr(inspected, "trace", None)
        if trace is None:
            self.warn("Upload a trace or bundle .zip in this tab first.")
            return refused("upload a trace or bundle .zip in the Inspect tab first")
        return self.load(trace, switch_tab=True, previous=previous, owner=_owner(request))

    def upload(self, path: str | None, previous: Any = None, request: gr.Request | None = None) -> CorrectOutputs:
        """An uploaded bundle or trace .zip; a malformed or oversized file is refused with a message."""
        if not path:
            return refused("no file: upload a bundle or trace .zip saved by this app")
        try:
            trace = trace_from_upload(path, self.limits)
        except TraceFormatError as error:
            self.warn(f"Cannot read this file: {error}")
            return refused(f"cannot read this file: {error}")
        return self.load(trace, previous=previous, owner=_owner(request))

    # ------------------------------------------------------------------ edits

    def _apply(self, key: str | None, action: Callable[[CorrectSession], CorrectSession]) -> CorrectOutputs:
        if key is None:
            return refused(EMPTY_MESSAGE.rstrip("."))
        try:
            edited = action(self.sessions.get(key))
            self.sessions.replace(key, edited)
            return screen(edited)
        except InputError as error:
            return refused(str(error))
        except BackendError as error:
            logger.warning("point-prompt model failed: %s", error)
            return refused(str(error))

    def _point_model(self) -> Any:
        """The point model, its calls wrapped by ``gpu`` when one was given."""
        model = self.point_segmenter()
        if self._gpu is None:
            return model
        if self._on_gpu is None or self._on_gpu[0] is not model:
            self._on_gpu = (model, self._gpu(model.segment_points))
        return _CallThrough(model.name, self._on_gpu[1])

    def canvas(self, session: str | None, event: gr.SelectData) -> CorrectOutputs:
        """What the canvas sent (``event.value``, see ``canvas.js``): a click of a click tool at view pixel (x, y), a
        box from (x1, y1) to (x2, y2) (view pixels), a brush stroke (view points and radius), or Escape (select
        nothing)."""
        data = getattr(event, "value", None)
        kind = data.get("kind") if isinstance(data, dict) else None
        if kind == "deselect":
            return self._apply(session, lambda s: correct.select(s, None))
        if kind == "click":
            tool = data.get("tool")

            def action(s: CorrectSession) -> CorrectSession:
                model = self._point_model() if tool in (TOOL_POSITIVE, TOOL_NEGATIVE) else None
                return correct.click(s, tool, data.get("x"), data.get("y"), model)

            return self._apply(session, action)
        if kind == "box":
            corners = [data.get(name) for name in ("x1", "y1", "x2", "y2")]

            def boxed(s: CorrectSession) -> CorrectSession:
                s.geometry.box_to_image(*corners)  # a box with no area is refused before the model is loaded
                return correct.box(s, *corners, self._point_model())

            return self._apply(session, boxed)
        if kind == "stroke" and data.get("tool") in BRUSH_TOOLS:
            erase = data.get("tool") == TOOL_ERASE
            return self._apply(session, lambda s: correct.brush(s, data.get("points"), data.get("radius"), erase))
        return refused("the canvas sent no click or stroke: click or paint on the picture itself")

    def style(self, session: str | None, opacity: Any, outline: Any) -> CorrectOutputs:
        """Redraw with this mask opacity (0..1) or as outlines only (no edit is recorded)."""
        return self._apply(session, lambda s: correct.set_style(s, opacity, outline))

    def set_shown(self, session: str | None, shown: list[int] | None) -> CorrectOutputs:
        return self._apply(session, lambda s: correct.set_shown(s, shown or []))

    def select(self, session: str | None, index: int | None) -> CorrectOutputs:
        return self._apply(session, lambda s: correct.select(s, index))

    def relabel(self, session: str | None, label: str) -> CorrectOutputs:
        return self._apply(session, lambda s: correct.relabel(s, label))

    def delete(self, session: str | None) -> CorrectOutputs:
        return self._apply(session, correct.delete_selected)

    def bring_in(self, session: str | None, round_index: Any, number: Any) -> CorrectOutputs:
        return self._apply(session, lambda s: correct.bring_in(s, round_index, number))

    def undo(self, session: str | None) -> CorrectOutputs:
        return self._apply(session, correct.undo)

    def redo(self, session: str | None) -> CorrectOutputs:
        return self._apply(session, correct.redo)

    def pick_round(self, session: str | None, round_index: Any) -> tuple[Any, Any]:
        """(mask-number list, preview image) for the round chosen to bring a mask in from."""
        if session is None or round_index is None:
            return gr.update(choices=[], value=None), None
        try:
            opened = self.sessions.get(session)
        except InputError:
            return gr.update(choices=[], value=None), None
        numbers = mask_number_choices(opened.trace, int(round_index))
        return gr.update(choices=numbers, value=numbers[0][1] if numbers else None), round_preview(opened,
                                                                                                  int(round_index))

    # ------------------------------------------------------------------ exports

    def _folder(self, session: CorrectSession) -> Path:
        folder = self.root / "correct" / session.key
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def _export(self, key: str | None, write: Callable[[CorrectSession, Path], Path], what: str) -> ExportOutputs:
        if key is None:
            return ExportOutputs(render_status(StatusLine("error", EMPTY_MESSAGE)), gr.skip())
        try:
            session = self.sessions.get(key)
            path = write(session, self._folder(session))
        except InputError as error:
            message = str(error)
            return ExportOutputs(render_status(StatusLine("error", f"{message[0].upper()}{message[1:]}.")), gr.skip())
        except (TraceFormatError, OSError) as error:
            return ExportOutputs(render_status(StatusLine("error", f"Export failed: {error}")), gr.skip())
        count = len(session.state.corrected_indices())
        line = f"Exported {what} ({count} mask{'s' if count != 1 else ''}): {path.name}. {status_text(session)}"
        return ExportOutputs(render_status(StatusLine("done", line)), str(path))

    def export_coco(self, session: str | None) -> ExportOutputs:
        """COCO instance JSON of the corrected answer (``export.coco_document``)."""
        return self._export(session, write_corrected_coco, "COCO JSON")

    def export_polygons(self, session: str | None) -> ExportOutputs:
        """COCO instance JSON with polygon segmentations (holes cut in; ``correct.polygons``)."""
        return self._export(session, write_corrected_polygons, "COCO polygons")

    def export_yolo(self, session: str | None) -> ExportOutputs:
        """YOLO segmentation labels, data.yaml and the photo, zipped (``correct.yolo``)."""
        return self._export(session, write_corrected_yolo, "YOLO labels")

    def export_pngs(self, session: str | None) -> ExportOutputs:
        """One binary PNG per corrected mask, zipped (``mask_001.png`` = COCO annotation 1)."""
        return self._export(session, write_corrected_pngs, "PNG masks")

    def export_bundle(self, session: str | None) -> ExportOutputs:
        """The bundle (.zip): image, query, both answers, the trace with the edits."""
        return self._export(session, lambda s, f: write_bundle(s.trace, f / BUNDLE_ZIP_FILE, s.state), "the bundle")

    def export_trace(self, session: str | None) -> ExportOutputs:
        """The trace .zip with the edits in effect (opens in the Inspect tab and here)."""
        return self._export(session, write_corrected_trace, "the trace")

    # ------------------------------------------------------------------ closing

    def forget(self, session: str | None) -> None:
        """Drop a session and its exports (Gradio calls this when it drops the page's state)."""
        self.sessions.drop(session)

    def drop_owner(self, owner: str | None) -> None:
        """Drop every session of a browser session whose tab closed (the page's unload event)."""
        self.sessions.drop_owner(owner)

    def _remove_exports(self, key: str) -> None:
        shutil.rmtree(self.root / "correct" / key, ignore_errors=True)


class _CallThrough:
    """A point model whose ``segment_points`` is another callable (the model's call wrapped by ``spaces.GPU``)."""

    def __init__(self, name: str, segment_points: Callable[..., PointMask]) -> None:
        self.name = name
        self.segment_points = segment_points


def _owner(request: Any) -> str | None:
    """The browser session of a Gradio request (``None`` outside one)."""
    return getattr(request, "session_hash", None) if request is not None else None
