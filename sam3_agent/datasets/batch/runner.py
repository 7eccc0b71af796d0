"""Running a batch on one machine: several items in flight, a progress bar, resumable, stoppable.

Each item runs as the CLI's ``run`` does (load the image, ``Agent.start``, iterate its events) in a worker thread, a
video item as the ``video`` command does (``video_runner``);
``concurrency`` items are in flight at once over one set of loaded models (``agents.BatchAgents``). When an item
ends, its trace and then its record are written (``layout.BatchLayout.write_item``); at the end of the batch, also
a stopped one, the dataset-level files are rewritten from all records (``outputs.write_dataset_files``).

Resuming: items whose record says ``done``, ``no_mask`` or ``max_rounds`` (and whose image and query are unchanged)
are skipped; ``failed`` and ``cancelled`` ones run again. Ctrl-C (or SIGTERM through the CLI) cancels the items in
flight, which end within moments and are written as ``cancelled``; nothing finished is lost. A crash loses at most
the items in flight (no record was written for them; a rerun runs them).

An item that fails (unreadable image, model fault, a bug in one run) is recorded with its reason and the batch goes
on; only an output folder that cannot be written stops it. A VLM server that allows fewer requests at once than
``concurrency`` answers 429: its client holds requests back and retries (``vlm.server_gate``), so items wait rather
than fail, and the summary says how often it happened.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, TextIO

from tqdm import tqdm

from ...agent.loop import AgentRun
from ...errors import InputError, Sam3AgentError
from ...images import MAX_PIXELS, ImageSource, load_image
from ...messages import terminal_safe
from ...trace.encode import photo_file_of
from ...types import Trace
from .agents import AgentSource
from .items import BatchItem, Item, VideoItem
from .layout import BatchLayout
from .outputs import write_dataset_files
from .records import ANSWERED, STOP_REASON, ItemRecord
from .video_runner import DEFAULT_VIDEO_OPTIONS, VideoOptions, run_video_item

__all__ = ["STOP_REASON", "BatchProgress", "BatchResult", "VideoOptions", "execute_item", "run_batch", "run_item"]

logger = logging.getLogger(__name__)

# The main thread waits for items in slices this long, so Ctrl-C is seen within it even when the signal reached
# another thread (a blocked wait is only interrupted in the thread the signal was delivered to).
POLL_SECONDS = 0.2


@dataclass(frozen=True)
class BatchResult:
    """What a batch invocation did.

    Attributes:
        records: the current record of every item that has one (earlier runs included), by id.
        ran: items run by this invocation.
        skipped: items skipped because an earlier run finished them.
        stopped: True when the invocation was stopped (Ctrl-C / SIGTERM) before running every item.
        seconds: wall time of this invocation's runs (model loading excluded).
        summary: the ``summary.json`` document written at the end.
    """

    records: dict[str, ItemRecord]
    ran: int
    skipped: int
    stopped: bool
    seconds: float
    summary: dict[str, Any]

    @property
    def items_per_minute(self) -> float:
        """Items run per minute of wall time in this invocation (0 when none ran)."""
        return 60.0 * self.ran / self.seconds if self.ran and self.seconds > 0 else 0.0


def unfinished_items(items: Sequence[Item], records: dict[str, ItemRecord]) -> list[Item]:
    """The items a run of the batch runs: those without a finished record (``records``: ``layout.read_records``;
    never run, changed since, failed or cancelled)."""
    return [item for item in items if not (item.id in records and records[item.id].finished)]


class BatchProgress:
    """Book-keeping shared by the local and the Ray runners: which items remain, the progress bar (``tqdm``, with
    rate and ETA), the records of this invocation and the final dataset files.

    Args:
        layout: the output folder.
        items: every item of the batch.
        stream: where the progress bar and per-item failure lines go (``None``: nowhere).
    """

    def __init__(self, layout: BatchLayout, items: Sequence[Item], stream: TextIO | None) -> None:
        self.layout = layout
        self.items = list(items)
        self.records = layout.read_records(self.items)
        self.todo = unfinished_items(self.items, self.records)
        self.skipped = len(self.items) - len(self.todo)
        self.ran = 0
        self._statuses: Counter[str] = Counter()
        self._stream = stream
        self._started = time.perf_counter()
        self._bar = tqdm(total=len(self.items), initial=self.skipped, unit="item", desc="batch", file=stream,
                         disable=stream is None, dynamic_ncols=True, smoothing=0.1)

    def finished(self, item: Item, record: ItemRecord) -> None:
        """Account for an item whose record was just written."""
        self.records[item.id] = record
        self.ran += 1
        self._statuses[record.status] += 1
        if record.status not in ANSWERED and self._stream is not None:
            # the reason may quote a model or a server, a folder's file name anything: shown, never obeyed
            self._bar.write(terminal_safe(f"{item.id}: {record.status}: {record.reason}"), file=self._stream)
        self._bar.set_postfix_str(", ".join(f"{k} {v}" for k, v in sorted(self._statuses.items())), refresh=False)
        self._bar.update(1)

    def close(self, stopped: bool, server: dict[str, Any] | None = None) -> BatchResult:
        """Close the bar and write the dataset-level files (``server``: what the VLM server's gate saw); returns
        the invocation's result.

        Raises:
            OSError: the output folder cannot be written.
        """
        seconds = time.perf_counter() - self._started
        self._bar.close()
        summary = write_dataset_files(self.layout, self.items, self.records, server)
        return BatchResult(dict(self.records), self.ran, self.skipped, stopped, seconds, summary)


def execute_item(
    item: BatchItem,
    image_source: ImageSource,
    agents: AgentSource,
    *,
    stop: threading.Event,
    max_image_pixels: int = MAX_PIXELS,
    started_runs: dict[str, AgentRun] | None = None,
) -> tuple[Trace | None, str | None]:
    """Run one item to its end (nothing is written).

    Args:
        item: the item.
        image_source: its image (a path, or the file's bytes as a Ray worker gets them).
        agents: a new agent for the item.
        stop: when set (before or during the run), the run ends as ``cancelled``.
        max_image_pixels: larger images are refused.
        started_runs: receives the run while it goes (keyed by item id), so another thread can cancel it.

    Returns:
        ``(trace, None)`` for a run (any status), or ``(None, reason)`` when it could not start (unreadable image,
        bad query).
    """
    try:
        return _execute(item, image_source, agents, stop, max_image_pixels, started_runs)
    except Sam3AgentError as error:  # a fault of this item (e.g. a backend error before its run started)
        return None, str(error)
    except Exception as error:  # a bug must not stop the batch: the item is recorded as failed
        logger.exception("item %s failed unexpectedly", item.id)
        return None, f"internal error (details in the log): {error}"


def _execute(item: BatchItem, image_source: ImageSource, agents: AgentSource, stop: threading.Event,
             max_image_pixels: int, started_runs: dict[str, AgentRun] | None) -> tuple[Trace | None, str | None]:
    try:
        image = load_image(image_source, max_pixels=max_image_pixels)
    except InputError as error:
        return None, str(error)
    with agents.in_flight():
        try:
            run = agents.new_agent().start(image, item.query, image_name=item.image_ref,
                                           image_file=photo_file_of(image_source))
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
    if stop.is_set() and run.trace.status == "running":
        run.abandon(STOP_REASON)
    elif run.trace.status == "cancelled":
        run.trace.error = STOP_REASON
    return run.trace, None


def run_item(
    item: Item,
    layout: BatchLayout,
    agents: AgentSource,
    *,
    stop: threading.Event,
    max_image_pixels: int = MAX_PIXELS,
    started_runs: dict[str, AgentRun] | None = None,
    video: VideoOptions = DEFAULT_VIDEO_OPTIONS,
) -> ItemRecord:
    """Run one item (``execute_item``; a video item: ``video_runner.run_video_item`` with ``video``) and write its
    trace and record; returns the record.

    Raises:
        OSError: the output folder cannot be written.
    """
    if isinstance(item, VideoItem):
        return run_video_item(item, layout, agents, stop=stop, options=video, started_runs=started_runs)
    started = time.perf_counter()
    layout.begin_item(item)
    trace, reason = execute_item(item, item.image, agents, stop=stop, max_image_pixels=max_image_pixels,
                                 started_runs=started_runs)
    return layout.write_item(item, trace, time.perf_counter() - started, reason)


class _InFlight:
    """The items of a local batch submitted to the thread pool and not yet accounted for, at most ``concurrency``
    at a time, with the runs going so that a stop can cancel them."""

    def __init__(self, pool: ThreadPoolExecutor, book: BatchProgress, agents: AgentSource, concurrency: int,
                 max_image_pixels: int, video: VideoOptions) -> None:
        self._pool = pool
        self._video = video
        self._book = book
        self._agents = agents
        self._concurrency = concurrency
        self._max_image_pixels = max_image_pixels
        self._queue = iter(book.todo)
        self._futures: dict[Future, Item] = {}
        self._stop = threading.Event()
        self._runs: dict[str, AgentRun] = {}

    def run_all(self) -> None:
        """Keep ``concurrency`` items in flight until every item has run and been accounted for."""
        self._fill()
        while self._futures:
            done, _ = wait(self._futures, timeout=POLL_SECONDS, return_when=FIRST_COMPLETED)
            self._collect(done)
            self._fill()

    def stop_and_collect(self) -> None:
        """Cancel the items in flight and account for each as it ends (written as ``cancelled``)."""
        self._cancel_all()
        logger.info("stopping: %d item(s) in flight are cancelled and written", len(self._futures))
        while self._futures:
            done, _ = wait(self._futures, return_when=FIRST_COMPLETED)
            self._collect(done)

    def abandon(self) -> None:
        """Cancel the items in flight and wait for them to end, accounting for none (the batch is failing)."""
        self._cancel_all()
        wait(self._futures)

    def _fill(self) -> None:
        while len(self._futures) < self._concurrency and not self._stop.is_set():
            item = next(self._queue, None)
            if item is None:
                return
            future = self._pool.submit(run_item, item, self._book.layout, self._agents, stop=self._stop,
                                       max_image_pixels=self._max_image_pixels, started_runs=self._runs,
                                       video=self._video)
            self._futures[future] = item

    def _collect(self, done: set[Future]) -> None:
        for future in done:
            item = self._futures.pop(future)
            self._book.finished(item, future.result())

    def _cancel_all(self) -> None:
        self._stop.set()
        for run in list(self._runs.values()):
            run.cancel()


def run_batch(
    items: Sequence[Item],
    layout: BatchLayout,
    agents: AgentSource,
    *,
    concurrency: int = 1,
    max_image_pixels: int = MAX_PIXELS,
    progress: TextIO | None = None,
    video: VideoOptions = DEFAULT_VIDEO_OPTIONS,
) -> BatchResult:
    """Run every unfinished item, ``concurrency`` at a time, then write the dataset-level files.

    Args:
        items: the batch (ids unique; see ``items.read_items``).
        layout: the output folder (``BatchLayout(out, items)``; ``prepare()`` it first).
        agents: a new agent per item (``agents.BatchAgents``).
        concurrency: items in flight at once (>= 1).
        max_image_pixels: images with more pixels are recorded as failed.
        progress: stream for the progress bar and failure lines (``None``: silent).
        video: how video items run (``video_runner.VideoOptions``); their tracker is ``agents.tracker``.

    Returns:
        the invocation's result. On Ctrl-C the items in flight are cancelled and written, the dataset files are
        written, and the result has ``stopped=True`` (the ``KeyboardInterrupt`` does not propagate).

    Raises:
        InputError: ``concurrency`` below 1.
        OSError: the output folder cannot be written (items in flight are cancelled first).
    """
    if concurrency < 1:
        raise InputError(f"concurrency must be at least 1, got {concurrency}")
    book = BatchProgress(layout, items, progress)
    gate = server_gate_of(agents)
    refused_before = gate.report().rate_limited if gate is not None else 0
    stopped = False
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="batch-item") as pool:
        in_flight = _InFlight(pool, book, agents, concurrency, max_image_pixels, video)
        try:
            in_flight.run_all()
        except KeyboardInterrupt:
            stopped = True
            in_flight.stop_and_collect()
        except BaseException:
            in_flight.abandon()
            raise
    if gate is None:
        return book.close(stopped)
    report = gate.report()
    return book.close(stopped, {"rate_limited": report.rate_limited - refused_before,
                                "lowest_concurrency": report.lowest_limit})


def server_gate_of(agents: AgentSource) -> Any:
    """The request gate of the VLM server behind ``agents`` (``vlm.server_gate.RequestGate``), or ``None``."""
    backends = getattr(agents, "backends", None)
    return getattr(getattr(backends, "vlm", None), "gate", None)
