"""The Run tab's handlers: plain functions and generators that return component values.

``Handlers.queued`` answers a Run press at once (it numbers the press: a later press supersedes an earlier
one that has not started, and stops the run going on); ``run`` streams a run (one update per event, token
updates at most every ``STREAM_INTERVAL_S``) and ends with the answer (final overlay, mask table, COCO file) as
soon as the run ends; ``trace_download`` then offers the trace ``.zip``, written meanwhile on a background
thread, as its own event, so the next run never waits for it; ``stop`` ends a run, or withdraws a run still
waiting in the queue;
``stop_button`` offers Stop only while there is a run to stop; ``run_context`` opens any round's context;
``unload`` ends a closed tab's run; ``segment``
is the API endpoint (``api``);
``correct``, ``inspect`` and ``video`` hold the Correct, Inspect and Video tabs' handlers (``ui.correct.handlers``,
``ui.inspect.handlers``, ``ui.video.handlers``). Per-session data
lives in a ``slot.RunSlot`` held in ``gr.State``; models are shared through the ``AgentFactory``.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gradio as gr

from ...agent.loop import AgentRun
from ...errors import BackendError, InputError
from ...events import RoundFinished, RunFinished, TokenStreamed
from ...shared import SharedObject
from ...trace.io import TraceWriter
from ...types import Trace
from ..context_view import context_panel
from ..correct.handlers import CorrectHandlers
from ..correct.trace_upload import app_load_limits
from ..html import ImageUrls, RunPage, render_context, render_status
from ..inspect.handlers import InspectHandlers
from ..run_view import RunView
from ..video.handlers import VideoHandlers
from ..view import StatusLine, final_status_line, sentence
from . import api
from .outputs import (
    QUEUED,
    REPLACING,
    STOPPING,
    WITHDRAWN,
    RunOutputs,
    not_started,
    run_outputs,
    save_failed_status,
    unchanged,
)
from .runner import (
    TRACE_DIR,
    TRACE_ZIP_FILE,
    AgentFactory,
    TraceDownload,
    display_overlay,
    write_answer,
    write_run_files,
)
from .slot import RunSlot
from .start import checked_photo, start_run

logger = logging.getLogger(__name__)

UPLOADED = "Photo ready: add a query (if there is none yet), then press Run."

STREAM_INTERVAL_S = 0.05  # token-only updates at most 20 per second; other events update at once
STOP_GRACE_S = 5.0  # Stop waits this long for the run to end by itself before abandoning it


class Handlers(SharedObject):
    """The app's handlers around shared backends.

    Args:
        factory: the loaded models.
        warn: shows a message to the user (``gr.Warning`` in the app).
        root: folder for per-session downloads (default: a new temporary folder).
        gpu: wraps the point model's calls in the Correct view (``CorrectHandlers``; ``spaces.GPU`` on ZeroGPU).
    """

    def __init__(
        self,
        factory: AgentFactory,
        warn: Callable[[str], None] | None = None,
        root: Path | None = None,
        gpu: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None,
    ) -> None:
        self.factory = factory
        self.warn = warn or (lambda message: gr.Warning(message))
        self.root = root or Path(tempfile.mkdtemp(prefix="sam3_agent_app_"))
        self._sessions: dict[str, RunSlot] = {}
        self._lock = threading.Lock()
        limits = app_load_limits(factory.settings.max_image_pixels)
        self.correct = CorrectHandlers(factory.require_point_segmenter, self.warn, self.root, gpu=gpu, limits=limits)
        self.inspect = InspectHandlers(self.warn, limits)
        self.video = VideoHandlers(factory, self.correct, self.root, self.warn)

    def close(self) -> None:
        """Remove every file this process wrote for downloads."""
        shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------------ running

    def uploaded(self, image: Any) -> tuple[Any, Any]:
        """(status, image) right after a photo is uploaded: one a run would refuse is refused at once, by the checks
        Run makes (``start.checked_photo``: file, size, the models' own pixel bounds), with the status saying why and
        what to do and the box emptied for the next one."""
        if not image:
            return gr.skip(), gr.skip()
        try:
            checked_photo(self.factory, image)
        except InputError as error:
            return render_status(StatusLine("error", f"{sentence(str(error))} Upload another photo.")), None
        return render_status(StatusLine("idle", UPLOADED)), gr.skip()

    @staticmethod
    def queued(slot: RunSlot | None = None) -> tuple[str, int]:
        """Answer a Run press at once (outside the queue): (status, this press's ticket for ``run``).

        A run of this session still going is asked to stop: the new one replaces it as soon as it has ended.
        """
        if slot is None:
            return render_status(StatusLine("running", QUEUED)), 0
        slot.latest_ticket += 1
        if slot.active and slot.run is not None:
            slot.run.cancel()
            line = StatusLine("stopping", REPLACING)
        else:
            line = StatusLine("running", QUEUED)
        return render_status(line), slot.latest_ticket

    def run(
        self,
        image: Any,
        query: str,
        max_rounds: float,
        score_threshold: float,
        slot: RunSlot | None,
        request: gr.Request | None = None,
        ticket: float | None = None,
    ) -> Iterator[RunOutputs]:
        """Run the agent and yield the page after every event.

        Args:
            image: path of the uploaded image (or any ``images.load_image`` source).
            query: what to segment.
            max_rounds / score_threshold: this run's budget and SAM 3 threshold.
            slot: the session's ``RunSlot``.
            request: the Gradio request (its session id lets ``unload`` stop the run).
            ticket: the Run press this run answers (``queued``); ``None``/0: unnumbered (tests, scripts).

        A press that a later one superseded before it started changes nothing; one withdrawn by Stop while
        it waited says so. Bad input and unloadable models end at once with an error status; the app
        keeps serving. When the generator is closed early (tab closed, event cancelled) the run is
        abandoned: its trace gets status ``cancelled``.
        """
        slot = slot if slot is not None else RunSlot()
        number = int(ticket or 0)
        refused = self._take_press(slot, number)
        if refused is not None:
            yield refused
            return
        try:
            agent_run = start_run(self.factory, image, query, max_rounds, score_threshold)
        except (InputError, BackendError) as error:  # the status line, in view, says it: no pop-up as well
            yield not_started(StatusLine("error", sentence(str(error))))
            return
        session, folder, writer = self._hold(slot, agent_run, request)
        view = RunView(int(max_rounds))
        slot.view = view
        page = RunPage()
        handed_over = False
        try:
            yield run_outputs(view, page)
            last = time.monotonic()
            for event in agent_run:
                view.apply(event)
                if isinstance(event, RunFinished):
                    break
                if isinstance(event, RoundFinished):
                    writer.submit(agent_run.trace)
                if isinstance(event, TokenStreamed) and time.monotonic() - last < STREAM_INTERVAL_S:
                    continue
                yield run_outputs(view, page, self._stopping_line(slot, number, agent_run))
                last = time.monotonic()
            trace = agent_run.trace
            if view.trace is None:
                view.finish_from(trace)
            last_page, handed_over = self._answer_page(slot, trace, view, page, writer, folder)
            yield last_page
        finally:
            self._release(slot, agent_run, session, writer, handed_over)

    @staticmethod
    def _take_press(slot: RunSlot, number: int) -> RunOutputs | None:
        """The page of a Run press that does not start: one a later press superseded changes nothing; one withdrawn
        by Stop while it waited says so. ``None`` for a press that starts: it is marked started, and the session's
        run going on is asked to stop."""
        if number and number < slot.latest_ticket:  # a later press replaces this one
            return unchanged()
        if number and number <= slot.withdrawn_ticket:
            return not_started(StatusLine("cancelled", WITHDRAWN))
        slot.started_ticket = max(slot.started_ticket, number)
        if slot.active and slot.run is not None:  # one run per session: a new Run replaces the old one
            slot.run.cancel()
        return None

    @staticmethod
    def _stopping_line(slot: RunSlot, number: int, agent_run: AgentRun) -> StatusLine | None:
        """The status of a run asked to stop that has not ended yet (``None`` while it is not asked to)."""
        if not agent_run.stop_event.is_set():
            return None
        replaced = number and slot.latest_ticket > number  # a newer Run press waits for this one to end
        return StatusLine("stopping", REPLACING if replaced else STOPPING)

    def _hold(self, slot: RunSlot, agent_run: AgentRun,
              request: gr.Request | None) -> tuple[str | None, Path, TraceWriter]:
        """Make ``agent_run`` the slot's run, found by its browser session's id (``unload``), with a new download
        folder and the writer of the app's own copy of its trace; returns (that id, the folder, the writer)."""
        session = getattr(request, "session_hash", None) if request is not None else None
        slot.begin(agent_run)
        slot.download = None
        if session:
            with self._lock:
                self._sessions[session] = slot
        folder = slot.run_folder(self.root)
        writer = TraceWriter(folder / TRACE_DIR)  # the app's own copy, saved after every round off the hot path
        writer.submit(agent_run.trace)
        return session, folder, writer

    @staticmethod
    def _answer_page(slot: RunSlot, trace: Trace, view: RunView, page: RunPage, writer: TraceWriter,
                     folder: Path) -> tuple[RunOutputs, bool]:
        """The last page of the ended run ``trace``, with its answer files written in ``folder``, and whether
        ``writer`` was handed to the slot's ``TraceDownload`` (it then writes the trace .zip and closes itself)."""
        try:
            answer = write_answer(trace, folder)
        except OSError as error:  # disk full...: the answer is shown, the status says the files are missing
            failed = run_outputs(view, page)
            return failed._replace(status=save_failed_status(trace, error), final_image=display_overlay(trace),
                                   downloads=[]), False
        slot.download = TraceDownload(writer, trace, answer.masks, folder / TRACE_ZIP_FILE)
        return run_outputs(view, page, answer=answer), True

    def _release(self, slot: RunSlot, agent_run: AgentRun, session: str | None, writer: TraceWriter,
                 handed_over: bool) -> None:
        """A run's generator has ended, however it ended: an unfinished run is abandoned, the app's copy of the
        trace gets its final state (unless the trace download took the writer) and the session lets the run go."""
        if agent_run.trace.status == "running":
            agent_run.abandon("the run was closed before it finished (browser tab closed or event cancelled)")
        if not handed_over:  # stopped or closed early: the app's copy still gets the final state
            writer.submit(agent_run.trace)
            writer.close(wait=False)
        slot.end(agent_run)
        if session:
            with self._lock:
                if self._sessions.get(session) is slot:
                    del self._sessions[session]

    # ------------------------------------------------------------------ downloads, stop, context, closing

    def trace_download(self, slot: RunSlot | None, timeout: float | None = None) -> Any:
        """The downloads once the latest finished run's trace ``.zip`` is written: ``[final_masks.json, trace.zip]``;
        "no change" while it is still being written after ``timeout`` or when it could not be written."""
        download = slot.download if slot is not None else None
        if download is None:
            return gr.skip()
        path = download.wait(timeout)
        if path is None:
            return gr.skip()
        return [str(download.masks), str(path)]

    def trace_download_page(self, slot: RunSlot | None) -> tuple[Any, Any]:
        """(status, downloads) once the trace ``.zip`` is written (``trace_download``).

        Bound as its own event after ``run`` (outside the agent's queue), so waiting here never delays the next
        run. A zip that could not be written leaves the COCO file alone on offer, and the status line says the
        trace is missing (in view, as every run outcome: no pop-up as well).
        """
        download = slot.download if slot is not None else None
        downloads = self.trace_download(slot)
        if download is None or download.error is None:
            return gr.skip(), downloads
        line = final_status_line(download.trace)
        message = (f"{line.text} Its trace could not be saved on the server ({download.error}), so only its masks "
                   "can be downloaded; try again later.")
        return render_status(StatusLine("error", message)), downloads

    def stop(self, slot: RunSlot | None) -> Iterator[tuple[Any, Any]]:
        """Stop the session's run; yields (status, downloads).

        A run still waiting in the queue is withdrawn: it will not start. A running one is asked to stop
        and the status says so at once; it normally ends within moments (generation checks the stop flag
        between tokens, tools between masks) and shows its own final page. A run stuck in a long model call
        is abandoned after ``STOP_GRACE_S``: its trace so far is kept with status ``cancelled`` and offered
        for download.
        """
        if slot is not None and not slot.active and slot.waiting:
            slot.withdrawn_ticket = slot.latest_ticket
            yield render_status(StatusLine("cancelled", WITHDRAWN)), gr.skip()
            return
        if slot is None or not slot.active or slot.run is None or slot.ended is None:
            yield gr.skip(), gr.skip()
            return
        agent_run = slot.run
        agent_run.cancel()
        yield render_status(StatusLine("stopping", STOPPING)), gr.skip()
        if slot.ended.wait(STOP_GRACE_S):  # the run has shown its final page; this repeats its status last
            yield render_status(final_status_line(agent_run.trace)), gr.skip()
            return
        agent_run.abandon("stopped by the user")
        logger.warning("a run did not end within %.0f s of Stop; abandoned it", STOP_GRACE_S)
        try:
            files = write_run_files(agent_run.trace, slot.run_folder(self.root))
        except OSError as error:
            yield save_failed_status(agent_run.trace, error), None
            return
        yield render_status(final_status_line(agent_run.trace)), [str(p) for p in files]

    @staticmethod
    def stop_button(slot: RunSlot | None) -> Any:
        """Stop as the session's state calls for it: red and enabled while a run of the session goes on or waits in
        the queue, grey and disabled otherwise (pressing it then did nothing, which a red button did not say).

        Run's press enables it at once (``stop_offered``); this is asked again once a run or a Stop has ended, so a
        later press that still waits keeps it enabled.
        """
        busy = slot is not None and (slot.active or slot.waiting)
        return gr.Button(interactive=busy, variant="stop" if busy else "secondary")

    @staticmethod
    def stop_offered() -> Any:
        """Stop enabled and red: a Run press was just made (it waits in the queue or starts)."""
        return gr.Button(interactive=True, variant="stop")

    @staticmethod
    def run_context(slot: RunSlot | None, event: gr.SelectData) -> str:
        """The context panel of the round whose "Context sent" button was pressed (``event.index``: its number).

        Finished rounds come from the run's trace, the round in progress from the live view; a round that
        does not exist (yet) shows the latest one.
        """
        run = slot.run if slot is not None else None
        if run is None:
            return render_context(None, ImageUrls())
        trace = run.trace
        live = slot.view.context if slot.view is not None else None
        latest = max(len(trace.rounds), live.round_index if live is not None else 0)
        try:
            number = int(getattr(event, "index", None) or latest)
        except (TypeError, ValueError):
            number = latest
        finished = {r.index: r for r in trace.rounds}
        if number in finished:
            chosen = finished[number]
            panel = context_panel(trace.messages, chosen.context, number, chosen.prompt_tokens)
        else:
            panel = live
        return render_context(panel, ImageUrls(), latest=latest)

    def correct_inspected(self, key: str | None, previous: Any = None, request: gr.Request | None = None) -> Any:
        """"Correct this trace" in the Inspect tab: the trace loaded under ``key`` opens in the Correct tab."""
        return self.correct.from_inspected(self.inspect.loaded(key), previous, request)

    def unload(self, request: gr.Request) -> None:
        """A browser tab closed: stop its run so the model is free for others, and drop its correction sessions,
        inspected traces and clips."""
        session = getattr(request, "session_hash", None)
        self.correct.drop_owner(session)
        self.inspect.drop_owner(session)
        self.video.unload(request)
        with self._lock:
            slot = self._sessions.pop(session, None) if session else None
        if slot is not None and slot.run is not None and slot.active:
            slot.run.cancel()

    # ------------------------------------------------------------------ API

    def segment(self, image: str, query: str) -> Iterator[tuple[Any, Any]]:
        """API ``/segment`` (``api.segment``): run to the end; yields (final masks COCO JSON path, trace .zip path)
        last, "no change" meanwhile (where Gradio can stop a cancelled job).

        Raises:
            gr.Error: bad image or query, or models that could not be loaded.
        """
        yield from api.segment(self.factory, self.root, image, query)
