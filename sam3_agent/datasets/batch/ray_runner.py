"""The same batch on a Ray cluster: one model set per worker, items spread over the workers.

Each worker is a Ray actor that loads the backends once (``agents.BatchAgents.load``: one GPU each when the cluster
has GPUs, else one CPU) and runs up to ``concurrency`` items at a time (threads sharing its model's batches, as on
one machine). The driver (the process that ran the CLI) reads each image file and sends its bytes, so workers need
no shared file system; a worker sends back the item's ``Trace``, and the driver writes it into the same output
layout as a local batch (``layout.BatchLayout``), so resuming, the dataset files and the evaluation are the same.

Before joining a cluster at an address (``--ray ADDRESS`` or ``RAY_ADDRESS``) the driver checks within
``CONNECT_SECONDS`` that something answers there (``ray.init`` itself waits for a dead head without end), and names the
address and what to check when nothing does. Workers are started only where the cluster has room now (one free GPU,
or CPU, each): asked for more, the batch runs on those that fit and a warning says how many could not be placed.

Video items go the same way: the driver sends each clip's bytes (``clip_payload``), a worker (which loaded SAM 3's
video tracker once, when the batch has video items) writes them to a temporary folder, runs the item there
(``video_runner``) and sends back the video trace; the driver writes the item's files, opening its own copy of the
clip when an overlay video is asked for.

Items go to the least busy worker as earlier ones finish. Ctrl-C asks every worker to cancel its items, which come
back as ``cancelled`` and are written; a worker that dies (out of memory, node lost) fails only its items in
flight, recorded with the reason, and the batch goes on with the others.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from ...agent.config import AgentConfig
from ...agent.loop import AgentRun
from ...errors import BackendError, InputError
from ...images import MAX_PIXELS
from ...presets import BackendSettings
from ...types import Trace
from ...video.clip import open_clip
from ...video.records import VideoTrace
from .agents import BatchAgents
from .clip_payload import ClipPayload, clip_payload, payload_on_disk
from .items import BatchItem, Item, VideoItem
from .layout import BatchLayout
from .runner import POLL_SECONDS, BatchProgress, BatchResult, execute_item
from .video_runner import DEFAULT_VIDEO_OPTIONS, VideoOptions, execute_video_item

logger = logging.getLogger(__name__)

FORWARDED_ENV = ("SAM3_AGENT_CACHE", "HF_HOME", "HF_HUB_OFFLINE")  # set on the workers as on the driver
CONNECT_SECONDS = 10.0  # a head that does not accept a connection within this is reported unreachable
RAY_CLIENT_PORT = 10001  # Ray's defaults: ``ray://`` client server, and the head's GCS port
RAY_HEAD_PORT = 6379


class BatchWorker:
    """One Ray worker: a model set and up to ``concurrency`` items in flight (made a Ray actor by
    ``run_batch_on_ray``; a plain class so it can be tested and pickled as code).

    Args:
        settings: which backends to load.
        config: limits and thresholds of every run.
        concurrency: items in flight in this worker.
        env: environment variables to set before loading (e.g. ``SAM3_AGENT_CACHE``).
        video: load SAM 3's video tracker too (the batch has video items).

    Raises:
        InputError / BackendError: the backends cannot be built (the actor then fails to start).
    """

    def __init__(self, settings: BackendSettings, config: AgentConfig, concurrency: int, env: dict[str, str],
                 video: bool = False) -> None:
        for key, value in env.items():
            os.environ[key] = value
        self.agents = BatchAgents.load(settings, config, concurrency=concurrency, video=video)
        self.stop = threading.Event()
        self.runs: dict[str, AgentRun] = {}

    def ready(self) -> str:
        """Where this worker runs (host and process id), once its models are loaded."""
        import socket

        return f"{socket.gethostname()}:{os.getpid()}"

    def run(self, item: BatchItem, image: bytes, max_image_pixels: int) -> tuple[Trace | None, str | None, float]:
        """Run one item from its image bytes; returns ``(trace, reason, seconds)`` (see ``runner.execute_item``)."""
        started = time.perf_counter()
        trace, reason = execute_item(item, image, self.agents, stop=self.stop, max_image_pixels=max_image_pixels,
                                     started_runs=self.runs)
        return trace, reason, time.perf_counter() - started

    def run_video(self, item: VideoItem, payload: ClipPayload,
                  options: VideoOptions) -> tuple[VideoTrace | None, str | None, float]:
        """Run one video item from its clip's bytes; returns ``(video trace, reason, seconds)`` (see
        ``video_runner.execute_video_item``; a clip that cannot be opened here: ``(None, reason, seconds)``)."""
        started = time.perf_counter()
        try:
            with payload_on_disk(payload) as path, open_clip(path, options.caps, name=payload.name) as clip:
                trace, reason = execute_video_item(item, clip, self.agents, stop=self.stop, options=options,
                                                   started_runs=self.runs)
        except InputError as error:
            trace, reason = None, str(error)
        return trace, reason, time.perf_counter() - started

    def cancel(self) -> None:
        """Cancel every item in flight and every later one."""
        self.stop.set()
        for run in list(self.runs.values()):
            run.cancel()


@dataclass
class _Slot:
    actor: Any
    busy: int = 0
    alive: bool = True
    ran: int = 0


def _error_text(error: BaseException) -> str:
    cause = getattr(error, "cause", None) or error
    text = str(cause).strip().splitlines()
    return text[-1] if text else type(cause).__name__


def run_batch_on_ray(
    items: Sequence[Item],
    layout: BatchLayout,
    settings: BackendSettings,
    config: AgentConfig,
    *,
    address: str | None = None,
    workers: int | None = None,
    concurrency: int = 1,
    max_image_pixels: int = MAX_PIXELS,
    progress: TextIO | None = None,
    init_options: dict[str, Any] | None = None,
    video: VideoOptions = DEFAULT_VIDEO_OPTIONS,
) -> BatchResult:
    """Run every unfinished item on a Ray cluster, then write the dataset-level files (as ``runner.run_batch``). The
    output folder is prepared (``layout.prepare()``) once the workers have loaded their models.

    Args:
        items, layout: as ``runner.run_batch``.
        settings, config: the backends each worker loads, and the runs' limits.
        address: the cluster to join (``ray.init(address=...)``; ``None``: ``RAY_ADDRESS`` or a new local Ray).
            An already initialised Ray in this process is used as it is (and left running).
        workers: how many workers (model sets); default the cluster's GPU count, or 1 without GPUs.
        concurrency: items in flight per worker.
        max_image_pixels, progress: as ``runner.run_batch``.
        init_options: more ``ray.init`` keyword arguments (e.g. ``num_cpus`` for a local Ray).
        video: how video items run (their workers load the video tracker when the batch has any).

    Raises:
        BackendError: Ray cannot start or be reached (nothing answers at the address within ``CONNECT_SECONDS``), no
            worker can be placed or could load its models, or every worker died.
        InputError: the output folder cannot be made or written.
        OSError: the output folder cannot be written.
    """
    import ray

    started_here = _join_ray(ray, address, init_options)
    slots: list[_Slot] = []
    try:
        has_video = any(isinstance(item, VideoItem) for item in items)
        slots = _start_workers(ray, settings, config, workers, concurrency, has_video)
        _wait_for_workers(ray, slots)
        layout.prepare()  # the batch starts: now its folder may be made (idempotent)
        return _drive(ray, slots, items, layout, concurrency, max_image_pixels, progress, video)
    finally:
        for slot in slots:
            ray.kill(slot.actor)
        if started_here:
            ray.shutdown()


def _join_ray(ray: Any, address: str | None, init_options: dict[str, Any] | None) -> bool:
    """Start or join Ray unless this process already did; returns whether it was started here (and so is to be
    shut down at the end).

    Raises:
        BackendError: Ray cannot start or be reached.
    """
    if ray.is_initialized():
        return False
    target = address or os.environ.get("RAY_ADDRESS") or None
    if target is not None:
        check_reachable(target, "--ray" if address else "RAY_ADDRESS")
    options: dict[str, Any] = {"logging_level": logging.WARNING, **(init_options or {})}
    if address is None and "RAY_ADDRESS" not in os.environ:
        options.setdefault("include_dashboard", False)  # a new local Ray: no dashboard to serve
    try:
        ray.init(address=address, **options)
    except (ConnectionError, RuntimeError, ValueError) as error:
        raise BackendError(f"cannot start or join Ray{f' at {address}' if address else ''}: {error}") from None
    return True


def head_endpoint(address: str) -> tuple[str, int] | None:
    """``(host, port)`` a Ray address connects to first (``ray://host[:port]``, ``host[:port]``, ``[v6]:port``), or
    ``None`` for one Ray resolves itself (``auto``, ``local``, an empty string)."""
    text = address.strip()
    client = text.startswith("ray://")
    text = text.removeprefix("ray://").split("/", 1)[0]
    if not text or text in ("auto", "local"):
        return None
    host, separator, port = text.rpartition(":")
    if not (separator and port.isdigit()):
        host, port = text, ""
    return host.strip("[]"), int(port) if port else (RAY_CLIENT_PORT if client else RAY_HEAD_PORT)


def check_reachable(address: str, source: str, seconds: float = CONNECT_SECONDS) -> None:
    """Check that a connection to the Ray head at ``address`` opens within ``seconds``.

    Raises:
        BackendError: nothing answers there; the message names the address, where it came from (``source``: the
            flag or the environment variable) and what to check.
    """
    endpoint = head_endpoint(address)
    if endpoint is None:
        return
    try:
        with socket.create_connection(endpoint, timeout=seconds):
            return
    except OSError as error:
        reason = "no answer" if isinstance(error, TimeoutError) else (error.strerror or str(error))
    raise BackendError(
        f"cannot reach the Ray cluster at {address} (from {source}) within {seconds:g} s: {reason}. Check that its "
        "head is running (`ray status` on the head node), that the host and port are right and that no firewall "
        f"blocks them; or {'leave out ADDRESS' if source == '--ray' else 'unset RAY_ADDRESS'} to start a local Ray"
    )


def _start_workers(ray: Any, settings: BackendSettings, config: AgentConfig, workers: int | None,
                   concurrency: int, video: bool = False) -> list[_Slot]:
    """Create the worker actors (one GPU each when the cluster has GPUs, else one CPU) where the cluster has room
    now; they load their models in the background.

    Raises:
        BackendError: no worker can be placed (every GPU or CPU is in use).
    """
    gpus = int(ray.cluster_resources().get("GPU", 0))
    asked = workers if workers is not None else max(1, gpus)
    unit = "GPU" if gpus else "CPU"
    free = int(ray.available_resources().get(unit, 0))
    count = min(asked, free)
    if count == 0:
        raise BackendError(f"the Ray cluster has no free {unit} for a worker (each needs one): wait for other jobs "
                           "to end, or add a node")
    if count < asked:
        logger.warning("%d Ray workers asked for, but the cluster has room for %d (%d free %ss, one per worker): the "
                       "batch runs on %d; %d could not be placed", asked, count, free, unit, count, asked - count)
    resources = {"num_gpus": 1} if gpus else {"num_cpus": 1}
    actor_class = ray.remote(BatchWorker).options(max_concurrency=concurrency + 1, **resources)
    env = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}
    return [_Slot(actor_class.remote(settings, config, concurrency, env, video)) for _ in range(count)]


def _wait_for_workers(ray: Any, slots: list[_Slot]) -> None:
    """Wait until each worker has loaded its models; one that could not is marked dead and logged.

    Raises:
        BackendError: no worker could load its models.
    """
    last_error = ""
    for slot in slots:
        try:
            logger.info("Ray worker ready on %s", ray.get(slot.actor.ready.remote()))
        except ray.exceptions.RayError as error:
            slot.alive = False
            logger.error("a Ray worker could not load its models: %s", _error_text(error))
            last_error = _error_text(error)
    if not any(slot.alive for slot in slots):
        raise BackendError(f"no Ray worker could load its models: {last_error}")


class _RayInFlight:
    """The items of a Ray batch sent to the workers and not yet accounted for: each goes to the least busy live
    worker with room (``concurrency`` items each), and its trace is written here when it comes back."""

    def __init__(self, ray: Any, slots: list[_Slot], book: BatchProgress, concurrency: int,
                 max_image_pixels: int, video: VideoOptions = DEFAULT_VIDEO_OPTIONS) -> None:
        self._ray = ray
        self._video = video
        self._slots = slots
        self._book = book
        self._concurrency = concurrency
        self._max_image_pixels = max_image_pixels
        self._queue = iter(book.todo)
        self._refs: dict[Any, tuple[Item, _Slot, float]] = {}
        self._stopped = False

    def run_all(self) -> None:
        """Keep the workers busy until every item has run on one (or no worker is left alive)."""
        self._submit()
        while self._refs:
            done, _ = self._ray.wait(list(self._refs), num_returns=1, timeout=POLL_SECONDS)
            for ref in done:
                self._collect(ref)
            self._submit()

    def stop_and_collect(self) -> None:
        """Ask every live worker to cancel its items and account for each as it comes back (``cancelled``)."""
        self._stopped = True
        for slot in self._slots:
            if slot.alive:
                slot.actor.cancel.remote()
        while self._refs:
            done, _ = self._ray.wait(list(self._refs), num_returns=1)
            self._collect(done[0])

    def _submit(self) -> None:
        layout = self._book.layout
        while not self._stopped:
            live = [s for s in self._slots if s.alive and s.busy < self._concurrency]
            if not live:
                return
            item = next(self._queue, None)
            if item is None:
                return
            slot = min(live, key=lambda s: s.busy)
            layout.begin_item(item)
            if isinstance(item, VideoItem):
                try:
                    payload = clip_payload(item, self._video.caps)
                except (InputError, OSError) as error:
                    reason = f"cannot read the clip {item.video_ref}: {getattr(error, 'strerror', None) or error}"
                    self._book.finished(item, layout.write_video_item(item, None, None, 0.0, reason))
                    continue
                ref = slot.actor.run_video.remote(item, payload, self._video)
            else:
                try:
                    data = item.image.read_bytes()
                except OSError as error:
                    reason = f"cannot read the image {item.image_ref}: {error.strerror or error}"
                    self._book.finished(item, layout.write_item(item, None, 0.0, reason))
                    continue
                ref = slot.actor.run.remote(item, data, self._max_image_pixels)
            slot.busy += 1
            self._refs[ref] = (item, slot, time.perf_counter())

    def _collect(self, ref: Any) -> None:
        ray = self._ray
        item, slot, submitted = self._refs.pop(ref)
        slot.busy -= 1
        try:
            trace, reason, seconds = ray.get(ref)
        except ray.exceptions.RayError as error:
            if isinstance(error, ray.exceptions.RayActorError):
                slot.alive = False  # the worker died (out of memory, node lost): it gets no more items
            reason = f"the Ray worker running this item failed: {_error_text(error)}"
            trace, seconds = None, time.perf_counter() - submitted
        slot.ran += 1
        if isinstance(item, VideoItem):
            self._book.finished(item, self._write_video(item, trace, seconds, reason))
        else:
            self._book.finished(item, self._book.layout.write_item(item, trace, seconds, reason))

    def _write_video(self, item: VideoItem, trace: VideoTrace | None, seconds: float, reason: str | None) -> Any:
        """Write a video item the worker ran; its overlay video (when asked for) from the driver's copy of the clip."""
        layout = self._book.layout
        if trace is None or not self._video.overlay_video:
            return layout.write_video_item(item, trace, None, seconds, reason)
        try:
            clip = open_clip(item.video, self._video.caps)
        except InputError as error:
            return layout.write_video_item(item, None, None, seconds,
                                           f"its overlay video could not be written: {error}")
        with clip:
            return layout.write_video_item(item, trace, clip, seconds, reason, overlay_video=True)


def _drive(ray: Any, slots: list[_Slot], items: Sequence[Item], layout: BatchLayout, concurrency: int,
           max_image_pixels: int, progress: TextIO | None, video: VideoOptions = DEFAULT_VIDEO_OPTIONS) -> BatchResult:
    """Run the unfinished items on the workers, then write the dataset-level files (also when stopped).

    Raises:
        BackendError: every worker died before the batch ended (what ran is kept).
    """
    book = BatchProgress(layout, items, progress)
    in_flight = _RayInFlight(ray, slots, book, concurrency, max_image_pixels, video)
    stopped = False
    try:
        in_flight.run_all()
    except KeyboardInterrupt:
        stopped = True
        in_flight.stop_and_collect()
    result = book.close(stopped)
    logger.info("items per Ray worker: %s", [slot.ran for slot in slots])
    if not stopped and book.ran < len(book.todo):
        raise BackendError(f"every Ray worker failed before the batch ended ({book.ran} of {len(book.todo)} items "
                           "ran; they are kept): run the batch again to go on")
    return result
