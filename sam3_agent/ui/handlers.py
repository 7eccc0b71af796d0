"""Event handlers of the app: plain functions and generators that return component values.

``Handlers.run`` streams a run (one update per event, token updates at most every
``STREAM_INTERVAL_S``) and ends with the answer (final overlay, mask table, COCO file) as soon as the run
ends; ``trace_download`` then offers the trace ``.zip``, written meanwhile on a background thread, as its
own event, so the next run never waits for it; ``stop`` ends a run; ``unload`` ends a closed tab's run;
``segment`` is the API endpoint; ``load_trace`` / ``show_round`` / ``step_round`` inspect a saved trace (or bundle);
``correct`` holds the Correct view's handlers (``correct_handlers``). Per-session data
lives in a ``RunSlot`` held in ``gr.State``; models are shared through the ``AgentFactory``.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import gradio as gr
from PIL import Image

from ..agent import AgentRun
from ..errors import BackendError, InputError, TraceFormatError
from ..images import load_image
from ..trace_io import MAX_ZIP_BYTES, TraceWriter
from ..types import RoundFinished, RunFinished, TokenStreamed, Trace
from .correct import trace_from_upload
from .correct_handlers import CorrectHandlers
from .html import (
    ImageUrls,
    RunPage,
    render_context,
    render_final_masks,
    render_round,
    render_status,
)
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
from .view import (
    InspectedRound,
    RunView,
    StatusLine,
    final_mask_rows,
    final_status_line,
    trace_round_views,
)

logger = logging.getLogger(__name__)

STREAM_INTERVAL_S = 0.05  # token-only updates at most 20 per second; other events update at once
STOP_GRACE_S = 5.0  # Stop waits this long for the run to end by itself before abandoning it
API_FILES_TTL_S = 3600.0  # API result files are kept this long (the client fetches them at once)


class RunOutputs(NamedTuple):
    """Values of the run panel's components, in the order ``layout`` binds them."""

    status: str
    rounds: str
    live: str
    context: str
    final_image: str | None
    final_masks: str
    downloads: list[str] | None


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


@dataclass
class InspectedTrace:
    """A loaded trace and its views (kept in the inspection tab's ``gr.State``)."""

    trace: Trace
    rounds: list[InspectedRound]
    urls: ImageUrls


def round_slider(count: int) -> dict[str, Any]:
    """The round slider's update for a trace of ``count`` rounds (Gradio needs minimum < maximum, so a
    trace of one round or none gets a fixed 1..2 slider; ``show_round`` keeps the number in range)."""
    if count >= 2:
        return gr.update(minimum=1, maximum=count, value=1, step=1, interactive=True)
    return gr.update(minimum=1, maximum=2, value=1, step=1, interactive=False)


class Handlers:
    """The app's handlers around shared backends.

    Args:
        factory: the loaded models.
        warn: shows a message to the user (``gr.Warning`` in the app).
        root: folder for per-session downloads (default: a new temporary folder).
    """

    def __init__(
        self,
        factory: AgentFactory,
        warn: Callable[[str], None] | None = None,
        root: Path | None = None,
    ) -> None:
        self.factory = factory
        self.warn = warn or (lambda message: gr.Warning(message))
        self.root = root or Path(tempfile.mkdtemp(prefix="sam3_agent_app_"))
        self._sessions: dict[str, RunSlot] = {}
        self._lock = threading.Lock()
        self.correct = CorrectHandlers(factory.require_point_segmenter, self.warn, self.root)

    def close(self) -> None:
        """Remove every file this process wrote for downloads."""
        shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------------ running

    @staticmethod
    def queued() -> str:
        """The status shown the moment Run is pressed, until the run leaves the queue."""
        return render_status(StatusLine("running", "Queued: waiting for the model (it serves one run at a time)."))

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
        return agent.start(load_image(image), query or "", image_name=image if isinstance(image, str) else None)

    def run(
        self,
        image: Any,
        query: str,
        max_rounds: float,
        score_threshold: float,
        slot: RunSlot | None,
        request: gr.Request | None = None,
    ) -> Iterator[RunOutputs]:
        """Run the agent and yield the page after every event.

        Args:
            image: path of the uploaded image (or any ``images.load_image`` source).
            query: what to segment.
            max_rounds / score_threshold: this run's budget and SAM 3 threshold.
            slot: the session's ``RunSlot``.
            request: the Gradio request (its session id lets ``unload`` stop the run).

        Bad input and unloadable models end at once with an error status (and a warning); the app
        keeps serving. When the generator is closed early (tab closed, event cancelled) the run is
        abandoned: its trace gets status ``cancelled``.
        """
        slot = slot if slot is not None else RunSlot()
        if slot.active and slot.run is not None:  # one run per session: a new Run replaces the old one
            slot.run.cancel()
        try:
            agent_run = self._start(image, query, max_rounds, score_threshold)
        except (InputError, BackendError) as error:
            self.warn(str(error))
            yield RunOutputs(render_status(StatusLine("error", str(error))), "", "", render_context(None, ImageUrls()),
                             None, "", None)
            return
        session = getattr(request, "session_hash", None) if request is not None else None
        slot.begin(agent_run)
        slot.download = None
        if session:
            with self._lock:
                self._sessions[session] = slot
        view = RunView(int(max_rounds))
        page = RunPage()
        folder = slot.run_folder(self.root)
        writer = TraceWriter(folder / TRACE_DIR)  # the app's own copy, saved after every round off the hot path
        writer.submit(agent_run.trace)
        handed_over = False
        try:
            yield self._outputs(view, page)
            last = time.monotonic()
            for event in agent_run:
                view.apply(event, agent_run.trace.messages)
                if isinstance(event, RunFinished):
                    break
                if isinstance(event, RoundFinished):
                    writer.submit(agent_run.trace)
                if isinstance(event, TokenStreamed) and time.monotonic() - last < STREAM_INTERVAL_S:
                    continue
                yield self._outputs(view, page)
                last = time.monotonic()
            trace = agent_run.trace
            if view.trace is None:
                view.finish_from(trace)
            if trace.status == "failed":
                self.warn(f"The run failed: {trace.error}")
            answer = write_answer(trace, folder)
            slot.download = TraceDownload(writer, trace, answer.masks, folder / TRACE_ZIP_FILE)
            handed_over = True
            yield self._outputs(view, page, answer)
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
    def _outputs(view: RunView, page: RunPage, answer: Answer | None = None) -> RunOutputs:
        live = view.live.view() if view.live is not None else None
        finished = answer is not None
        return RunOutputs(
            status=render_status(view.status_line()),
            rounds=page.rounds_html(view.rounds),
            live=page.live_html(live),
            context=page.context_html(view.context),
            final_image=str(answer.overlay) if answer is not None and answer.overlay is not None else None,
            final_masks=render_final_masks(final_mask_rows(view.final_masks)) if finished else "",
            downloads=[str(answer.masks)] if answer is not None else None,
        )

    def trace_download(self, slot: RunSlot | None, timeout: float | None = None) -> Any:
        """The downloads once the latest finished run's trace ``.zip`` is written: ``[final_masks.json, trace.zip]``.

        Bound as its own event after ``run`` (outside the agent's queue), so waiting here never delays the next
        run. A zip that could not be written leaves the COCO file alone on offer, with a warning.
        """
        download = slot.download if slot is not None else None
        if download is None:
            return gr.skip()
        path = download.wait(timeout)
        if path is None:
            if download.error is not None:
                self.warn(f"The trace could not be saved: {download.error}")
            return gr.skip()
        return [str(download.masks), str(path)]

    def stop(self, slot: RunSlot | None) -> tuple[Any, Any]:
        """Stop the session's run; returns (status, downloads).

        The run normally ends by itself within moments (generation checks the stop flag between
        tokens, tools between masks) and shows its own final page: then nothing is changed here. A run
        stuck in a long model call is abandoned after ``STOP_GRACE_S``: its trace so far is kept
        with status ``cancelled`` and offered for download.
        """
        if slot is None or not slot.active or slot.run is None or slot.ended is None:
            return gr.skip(), gr.skip()
        agent_run = slot.run
        agent_run.cancel()
        if slot.ended.wait(STOP_GRACE_S):
            return gr.skip(), gr.skip()
        agent_run.abandon("stopped by the user")
        logger.warning("a run did not end within %.0f s of Stop; abandoned it", STOP_GRACE_S)
        files = write_run_files(agent_run.trace, slot.run_folder(self.root))
        return render_status(final_status_line(agent_run.trace)), [str(p) for p in files]

    def unload(self, request: gr.Request) -> None:
        """A browser tab closed: stop its run so the model is free for others."""
        session = getattr(request, "session_hash", None)
        with self._lock:
            slot = self._sessions.pop(session, None) if session else None
        if slot is not None and slot.run is not None and slot.active:
            slot.run.cancel()

    # ------------------------------------------------------------------ API

    def segment(self, image: str, query: str) -> tuple[str, str]:
        """API ``/segment``: run to the end; return (final masks COCO JSON path, trace .zip path).

        Both files are returned for every finished status (done, no mask, budget exhausted, failed):
        ``trace.json`` inside the .zip says which, and why.

        Raises:
            gr.Error: bad image or query, or models that could not be loaded.
        """
        try:
            agent_run = self._start(image, query, self.factory.settings.max_rounds, self.factory.settings.score_threshold)
        except (InputError, BackendError) as error:
            raise gr.Error(str(error)) from None
        try:
            for _event in agent_run:
                pass
        finally:
            if agent_run.trace.status == "running":
                agent_run.abandon("the API request was closed before the run finished")
        self._prune_api_files()
        folder = self.root / "api" / uuid.uuid4().hex
        masks_path, zip_path = write_run_files(agent_run.trace, folder)
        return str(masks_path), str(zip_path)

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

    # ------------------------------------------------------------------ trace inspection

    def load_trace(self, path: str | None) -> tuple[InspectedTrace | None, str, Any, Image.Image | None, str]:
        """Load an uploaded trace .zip or bundle .zip; returns (state, message, slider update, final overlay,
        final masks).

        A malformed or oversized file gives a clear message (and a warning) instead of a state.
        """
        if not path:
            return None, render_status(StatusLine("idle", "Upload a trace .zip saved by this app.")), \
                gr.update(value=1), None, ""
        try:
            size = os.path.getsize(path)
            if size > MAX_ZIP_BYTES:
                raise TraceFormatError(f"the trace file is larger than {MAX_ZIP_BYTES // (1024 * 1024)} MB")
            with open(path, "rb") as handle:
                trace = trace_from_upload(handle.read())  # a trace .zip or a bundle .zip
            rounds = trace_round_views(trace)
        except (TraceFormatError, ValueError, OSError) as error:
            message = f"Cannot read this trace: {error}"
            self.warn(message)
            return None, render_status(StatusLine("error", message)), gr.update(value=1), None, ""
        state = InspectedTrace(trace, rounds, ImageUrls())
        line = final_status_line(trace)
        text = f"Query: {trace.query!r}. {line.text} Models: {trace.settings.get('vlm_model', trace.settings.get('vlm'))}."
        if trace.edits:
            count = len(trace.edits)
            text += (f" {count} hand correction{'s' if count != 1 else ''} saved with it: press 'Correct this trace' "
                     "to see them and go on editing.")
        slider = round_slider(len(rounds))
        return (state, render_status(StatusLine(line.kind, text)), slider, display_overlay(trace),
                render_final_masks(final_mask_rows(trace.final_masks)))

    @staticmethod
    def show_round(state: InspectedTrace | None, number: float | None) -> tuple[str, str]:
        """The round view and context panel of round ``number`` (1-based) of the loaded trace."""
        if state is None or not state.rounds:
            return "", render_context(None, ImageUrls())
        index = min(max(int(number or 1), 1), len(state.rounds)) - 1
        shown = state.rounds[index]
        return render_round(shown.round, state.urls), render_context(shown.context, state.urls)

    @staticmethod
    def step_round(state: InspectedTrace | None, number: float | None, delta: int) -> int:
        """The round number after moving ``delta`` rounds (kept within the trace)."""
        count = len(state.rounds) if state is not None else 1
        return min(max(int(number or 1) + delta, 1), max(count, 1))
