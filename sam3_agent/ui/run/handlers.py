"""Event handlers of the app: plain functions and generators that return component values.

``Handlers.queued`` answers a Run press at once (it numbers the press: a later press supersedes an earlier
one that has not started, and stops the run going on); ``run`` streams a run (one update per event, token
updates at most every ``STREAM_INTERVAL_S``) and ends with the answer (final overlay, mask table, COCO file) as
soon as the run ends; ``trace_download`` then offers the trace ``.zip``, written meanwhile on a background
thread, as its own event, so the next run never waits for it; ``stop`` ends a run, or withdraws a run still
waiting in the queue; ``run_context`` opens any round's context; ``unload`` ends a closed tab's run; ``segment``
is the API endpoint;
``correct`` and ``inspect`` hold the Correct and Inspect tabs' handlers (``ui.correct.handlers``,
``ui.inspect.handlers``). Per-session data
lives in a ``RunSlot`` held in ``gr.State``; models are shared through the ``AgentFactory``.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import gradio as gr

from ...agent.loop import AgentRun
from ...errors import BackendError, InputError
from ...events import RoundFinished, RunFinished, TokenStreamed
from ...images import file_name_of, load_image
from ...shared import SharedObject
from ...trace.encode import photo_file_of
from ...trace.io import TraceWriter
from ...types import Trace
from ..context_view import context_panel
from ..correct.handlers import CorrectHandlers
from ..html import ImageUrls, RunPage, render_context, render_final_masks, render_status
from ..inspect.handlers import InspectHandlers
from ..run_view import RunView
from ..view import StatusLine, final_mask_rows, final_status_line, sentence
from .runner import (
    TRACE_DIR,
    TRACE_ZIP_FILE,
    AgentFactory,
    Answer,
    TraceDownload,
    display_overlay,
    write_answer,
    write_run_files,
)

logger = logging.getLogger(__name__)

STREAM_INTERVAL_S = 0.05  # token-only updates at most 20 per second; other events update at once
STOP_GRACE_S = 5.0  # Stop waits this long for the run to end by itself before abandoning it
API_FILES_TTL_S = 3600.0  # API result files are kept this long (the client fetches them at once)
API_YIELD_INTERVAL_S = 0.5  # how often /segment gives Gradio a chance to stop a cancelled job


class RunOutputs(NamedTuple):
    """Values of the run panel's components, in the order ``layout`` binds them."""

    status: str
    rounds: str
    live: str
    context: str
    final_image: str | None
    final_masks: str
    downloads: list[str] | None
    answer: Any  # the answer group: shown once the run has ended


class RunSlot:
    """Per-session state (kept in ``gr.State``): the session's current run and its download folder.

    ``gr.State`` deep-copies its initial value for every new session; a copy is always a new, empty
    slot, so sessions never share one.
    """

    def __init__(self) -> None:
        self.run: AgentRun | None = None
        self.ended: threading.Event | None = None
        self.folder: Path | None = None
        self.runs = 0
        self.download: TraceDownload | None = None  # the latest finished run's trace .zip, being written
        self.view: RunView | None = None  # the screen of the current run (its live round's context)
        # Run presses are numbered ("tickets"): the newest press, the newest that started, the newest withdrawn
        # by Stop while it waited in the queue. An older ticket than the newest never starts.
        self.latest_ticket = 0
        self.started_ticket = 0
        self.withdrawn_ticket = 0

    def __deepcopy__(self, memo: dict[int, Any]) -> RunSlot:
        return RunSlot()

    def __getstate__(self) -> dict[str, Any]:  # pickled (e.g. by spaces.GPU): a run never travels
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]

    @property
    def active(self) -> bool:
        """True while a run of this session is being driven."""
        return self.run is not None and self.ended is not None and not self.ended.is_set()

    @property
    def waiting(self) -> bool:
        """True while a Run press of this session waits in the queue (neither started nor withdrawn)."""
        return self.latest_ticket > max(self.started_ticket, self.withdrawn_ticket)

    def begin(self, run: AgentRun) -> None:
        self.run = run
        self.ended = threading.Event()

    def end(self, run: AgentRun) -> None:
        if self.run is run and self.ended is not None:
            self.ended.set()

    def run_folder(self, root: Path) -> Path:
        """A new folder for the next run's downloads, inside this session's folder under ``root``."""
        if self.folder is None:
            self.folder = root / f"session_{uuid.uuid4().hex}"
        self.runs += 1
        return self.folder / f"run{self.runs}"

    def cleanup(self) -> None:
        """Remove the session's files (called when Gradio deletes the session state)."""
        if self.run is not None and self.run.trace.status == "running":
            self.run.abandon("the browser session ended")
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


WITHDRAWN = "Stopped before it started: the run was still waiting in the queue."
STOPPING = "Stopping: the model finishes its current step, then the trace so far is kept."
REPLACING = "Stopping the current run: the new one starts as soon as it has ended."


def photo_limit(max_pixels: int) -> str:
    """The app's photo size limit in words, e.g. ``"8 megapixels (such as 3464x2309)"``."""
    width = int((max_pixels * 1.5) ** 0.5)  # a 3:2 photo, the shape of most camera pictures
    return f"{max_pixels / 1e6:g} megapixels (such as {width}x{max_pixels // width})"


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
        self.correct = CorrectHandlers(factory.require_point_segmenter, self.warn, self.root, gpu=gpu)
        self.inspect = InspectHandlers(self.warn)

    def close(self) -> None:
        """Remove every file this process wrote for downloads."""
        shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------------ running

    @staticmethod
    def queued(slot: RunSlot | None = None) -> tuple[str, int]:
        """Answer a Run press at once (outside the queue): (status, this press's ticket for ``run``).

        A run of this session still going is asked to stop: the new one replaces it as soon as it has ended.
        """
        if slot is None:
            return render_status(StatusLine("running", "Queued: waiting for the model (it serves one run at a "
                                                        "time).")), 0
        slot.latest_ticket += 1
        if slot.active and slot.run is not None:
            slot.run.cancel()
            line = StatusLine("stopping", REPLACING)
        else:
            line = StatusLine("running", "Queued: waiting for the model (it serves one run at a time).")
        return render_status(line), slot.latest_ticket

    def _start(self, image: Any, query: str, max_rounds: float, score_threshold: float) -> AgentRun:
        if image is None or (isinstance(image, str) and not image):
            raise InputError("add an image first: upload, paste or pick an example")
        try:
            rounds, threshold = int(max_rounds), float(score_threshold)
        except (TypeError, ValueError, OverflowError):
            raise InputError(
                f"the round budget and the score threshold must be numbers, got {max_rounds!r} and {score_threshold!r}"
            ) from None
        agent = self.factory.new_agent(rounds, threshold)
        name = file_name_of(image) if isinstance(image, str) else None  # never the server's temporary path
        cap = self.factory.settings.max_image_pixels
        photo = load_image(image, max_pixels=cap, name=name,
                           limit_advice=f"this app takes photos up to {photo_limit(cap)}: downscale it")
        return agent.start(photo, query or "", image_name=name,
                           image_file=photo_file_of(image))  # the trace keeps the upload as given

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
        if number and number < slot.latest_ticket:  # a later press replaces this one
            yield RunOutputs(*([gr.skip()] * len(RunOutputs._fields)))
            return
        if number and number <= slot.withdrawn_ticket:
            yield self._not_started(StatusLine("cancelled", WITHDRAWN))
            return
        slot.started_ticket = max(slot.started_ticket, number)
        if slot.active and slot.run is not None:  # one run per session: a new Run replaces the old one
            slot.run.cancel()
        try:
            agent_run = self._start(image, query, max_rounds, score_threshold)
        except (InputError, BackendError) as error:  # the status line, in view, says it: no pop-up as well
            yield self._not_started(StatusLine("error", sentence(str(error))))
            return
        session = getattr(request, "session_hash", None) if request is not None else None
        slot.begin(agent_run)
        slot.download = None
        if session:
            with self._lock:
                self._sessions[session] = slot
        view = RunView(int(max_rounds))
        slot.view = view
        page = RunPage()
        folder = slot.run_folder(self.root)
        writer = TraceWriter(folder / TRACE_DIR)  # the app's own copy, saved after every round off the hot path
        writer.submit(agent_run.trace)
        handed_over = False
        try:
            yield self._outputs(view, page)
            last = time.monotonic()
            for event in agent_run:
                view.apply(event)
                if isinstance(event, RunFinished):
                    break
                if isinstance(event, RoundFinished):
                    writer.submit(agent_run.trace)
                if isinstance(event, TokenStreamed) and time.monotonic() - last < STREAM_INTERVAL_S:
                    continue
                replaced = number and slot.latest_ticket > number  # a newer Run press waits for this one to end
                stopping = StatusLine("stopping", REPLACING if replaced else STOPPING)
                yield self._outputs(view, page, stopping if agent_run.stop_event.is_set() else None)
                last = time.monotonic()
            trace = agent_run.trace
            if view.trace is None:
                view.finish_from(trace)
            try:
                answer = write_answer(trace, folder)
            except OSError as error:  # disk full...: the answer is shown, the status says the files are missing
                failed = self._outputs(view, page)
                yield failed._replace(status=self._save_failed(trace, error), final_image=display_overlay(trace),
                                      downloads=[])
                return
            slot.download = TraceDownload(writer, trace, answer.masks, folder / TRACE_ZIP_FILE)
            handed_over = True
            yield self._outputs(view, page, answer=answer)
        finally:
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

    @staticmethod
    def _not_started(line: StatusLine) -> RunOutputs:
        """The page of a run that did not start: only the status line says why; the rest is cleared."""
        return RunOutputs(render_status(line), "", "", render_context(None, ImageUrls()), None, "", None,
                          gr.update(visible=False))

    @staticmethod
    def _outputs(view: RunView, page: RunPage, stopping: StatusLine | None = None,
                 answer: Answer | None = None) -> RunOutputs:
        """The page for ``view``; ``stopping``: the status while a stopped run has not ended yet; ``answer``:
        the finished run's files (``runner.write_answer``), shown at once."""
        live = view.live.view() if view.live is not None else None
        ended = view.trace is not None
        line = stopping if stopping is not None and not ended else view.status_line()
        return RunOutputs(
            status=render_status(line),
            rounds=page.rounds_html(view.rounds),
            live=page.live_html(live),
            context=page.context_html(view.context),
            final_image=str(answer.overlay) if answer is not None and answer.overlay is not None else None,
            final_masks=render_final_masks(final_mask_rows(view.final_masks)) if ended else "",
            downloads=[str(answer.masks)] if answer is not None else None,
            answer=gr.update(visible=ended),
        )

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
            yield self._save_failed(agent_run.trace, error), None
            return
        yield render_status(final_status_line(agent_run.trace)), [str(p) for p in files]

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

    def _save_failed(self, trace: Trace, error: OSError) -> str:
        """The status line of a run whose download files could not be written (in view: no pop-up as well)."""
        line = final_status_line(trace)
        message = (f"{line.text} Its files could not be saved on the server ({error.strerror or 'write failed'}), "
                   "so there is nothing to download; try again later.")
        logger.error("could not write a run's files: %s", error)
        return render_status(StatusLine("error", message))

    def unload(self, request: gr.Request) -> None:
        """A browser tab closed: stop its run so the model is free for others, and drop its correction sessions."""
        session = getattr(request, "session_hash", None)
        self.correct.drop_owner(session)
        with self._lock:
            slot = self._sessions.pop(session, None) if session else None
        if slot is not None and slot.run is not None and slot.active:
            slot.run.cancel()

    # ------------------------------------------------------------------ API

    def segment(self, image: str, query: str) -> Iterator[tuple[Any, Any]]:
        """API ``/segment``: run to the end; yields (final masks COCO JSON path, trace .zip path) last.

        Both files are returned for every finished status (done, no mask, budget exhausted, failed):
        ``trace.json`` inside the .zip says which, and why. While the run goes on it yields "no change" at most
        every ``API_YIELD_INTERVAL_S``: a generator is where Gradio can stop, so a cancelled job
        (``gradio_client``'s ``Job.cancel()``) stops its run at the next event instead of holding the queue's slot
        (and the GPU) to the end.

        Raises:
            gr.Error: bad image or query, or models that could not be loaded.
        """
        try:
            agent_run = self._start(image, query, self.factory.settings.max_rounds, self.factory.settings.score_threshold)
        except (InputError, BackendError) as error:
            raise gr.Error(str(error)) from None
        try:
            last = time.monotonic()
            for _event in agent_run:
                if time.monotonic() - last >= API_YIELD_INTERVAL_S:
                    yield gr.skip(), gr.skip()
                    last = time.monotonic()
        finally:
            if agent_run.trace.status == "running":
                agent_run.abandon("the API request was cancelled or closed before the run finished")
        self._prune_api_files()
        folder = self.root / "api" / uuid.uuid4().hex
        try:
            masks_path, zip_path = write_run_files(agent_run.trace, folder)
        except OSError as error:
            logger.error("could not write a run's files: %s", error)
            raise gr.Error(f"the run ended ({agent_run.trace.status}) but its files could not be saved on the "
                           f"server ({error.strerror or 'write failed'}); try again later") from None
        yield str(masks_path), str(zip_path)

    def _prune_api_files(self, max_age_s: float = API_FILES_TTL_S) -> None:
        """Remove API result folders older than ``max_age_s`` (Gradio has served copies of them by then)."""
        api = self.root / "api"
        if not api.is_dir():
            return
        cutoff = time.time() - max_age_s
        for folder in api.iterdir():
            try:
                if folder.stat().st_mtime < cutoff:
                    shutil.rmtree(folder, ignore_errors=True)
            except OSError:
                continue
