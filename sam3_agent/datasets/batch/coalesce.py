"""Several items in flight, one local model: their VLM requests are answered together in shared batches.

A batch run with several items in flight calls the VLM from several threads. A local model answers one request
at a time (``TransformersQwenVLM`` holds a lock), so threads alone would only queue. ``CoalescingVLM`` sits in
front of it: requests that arrive together (main-model calls and per-mask verifications of different items) are
answered by one ``generate_batch`` call of the model's public API, whose rows decode together. Greedy output is
the same as answering each request alone (``vlm.base.BatchVLM``'s contract), so items give the same traces
whether they ran one at a time or side by side; only timings differ.

What it costs: a shared batch decodes its rows together (one step for all), but ``generate_batch`` reuses only the
prompt prefix common to all its rows, so requests of different items recompute the part of their prompt their own run
had cached (the raw image and query after the system prompt). Sharing therefore pays when replies are long next to
that part (decoding dominates: reasoning models, GPUs) and can cost more than it saves with short replies on a CPU;
``python -m sam3_agent.bench.batch`` measures both (see docs/datasets.md).

When to answer: the first waiting request opens a window; the batch goes as soon as every item in flight
(``client()``) is waiting, the batch holds ``max_batch`` conversations, or ``max_wait_s`` has passed (an item busy
in SAM 3 is not waited for longer than that). Requests with different token budgets never share a batch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from ...errors import BackendError
from ...messages import Generation, Message
from ...vlm.base import StreamItem, generate_each, supports_batches

logger = logging.getLogger(__name__)

# Conversations per shared batch: the verification batches (8 masks) of 4 items; lower --concurrency to use less memory.
DEFAULT_MAX_BATCH = 32
DEFAULT_MAX_WAIT_S = 0.05  # how long a request waits for others; small next to one VLM call


@dataclass(eq=False)
class _Request:
    conversations: list[list[Message]]
    max_new_tokens: int | None
    stop: threading.Event | None
    client: int
    arrived: float
    done: threading.Event = field(default_factory=threading.Event)
    results: list[Generation] | None = None
    error: BaseException | None = None

    @property
    def cancelled(self) -> bool:
        return self.stop is not None and self.stop.is_set()


class _AllStopped:
    """Looks like a ``threading.Event`` that is set once every request of a batch was stopped (a batch shared by
    several items goes on while any of them still wants its answer)."""

    def __init__(self, requests: Sequence[_Request]) -> None:
        self._requests = list(requests)

    def is_set(self) -> bool:
        return bool(self._requests) and all(r.cancelled for r in self._requests)


class CoalescingVLM:
    """A VLM that answers the concurrent requests of several threads with shared batches of ``inner``.

    Args:
        inner: a VLM with ``generate_batch`` (``vlm.base.BatchVLM``), e.g. ``TransformersQwenVLM``.
        max_batch: most conversations in one batch (>= 1); a single request larger than this goes alone.
        max_wait_s: longest wait for other requests before a batch goes (seconds, >= 0).

    Use ``client()`` around each item's run so the batch goes as soon as every item in flight is waiting, and
    ``close()`` when done (ends the dispatching thread). ``batch_sizes`` lists the conversations of every batch
    sent to ``inner``, in order.

    Raises:
        TypeError: ``inner`` has no ``generate_batch``.
        ValueError: ``max_batch`` below 1 or a negative ``max_wait_s``.
    """

    def __init__(
        self, inner: object, *, max_batch: int = DEFAULT_MAX_BATCH, max_wait_s: float = DEFAULT_MAX_WAIT_S
    ) -> None:
        if not supports_batches(inner):  # type: ignore[arg-type]
            raise TypeError(f"{getattr(inner, 'name', inner)!r} has no generate_batch: nothing to share")
        if max_batch < 1 or max_wait_s < 0:
            raise ValueError(f"max_batch must be >= 1 and max_wait_s >= 0, got {max_batch} and {max_wait_s}")
        self.inner = inner
        self.name = getattr(inner, "name", type(inner).__name__)
        self.max_batch = int(max_batch)
        self.max_wait_s = float(max_wait_s)
        self.batch_sizes: list[int] = []
        self._cond = threading.Condition()
        self._pending: list[_Request] = []
        self._clients = 0
        self._closed = False
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ the VLM protocol

    def stream(
        self, messages: Sequence[Message], *, max_new_tokens: int | None = None, stop: threading.Event | None = None
    ) -> Iterator[StreamItem]:
        """The reply to ``messages``, answered within a shared batch: the whole text as one piece, then the
        ``Generation`` (a batch yields no token-by-token stream).

        Raises:
            BackendError: the model failed, or the VLM was closed.
        """
        generation = self._submit([list(messages)], max_new_tokens, stop)[0]
        if generation.text:
            yield generation.text
        yield generation

    def generate_batch(
        self,
        conversations: Sequence[Sequence[Message]],
        *,
        max_new_tokens: int | None = None,
        stop: threading.Event | None = None,
    ) -> list[Generation]:
        """One ``Generation`` per conversation, in order, answered within a shared batch.

        Raises:
            BackendError: the model failed, or the VLM was closed.
        """
        return self._submit([list(c) for c in conversations], max_new_tokens, stop)

    # ------------------------------------------------------------------ clients and life cycle

    @contextmanager
    def client(self) -> Iterator[None]:
        """Count the calling item as in flight while the block runs (batches then wait for it, up to
        ``max_wait_s``)."""
        with self._cond:
            self._clients += 1
        try:
            yield
        finally:
            with self._cond:
                self._clients -= 1
                self._cond.notify_all()

    def close(self) -> None:
        """Answer what is pending, then end the dispatching thread; later requests raise ``BackendError``."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()

    # ------------------------------------------------------------------ dispatching

    def _submit(
        self, conversations: list[list[Message]], max_new_tokens: int | None, stop: threading.Event | None
    ) -> list[Generation]:
        if not conversations:
            return []
        if stop is not None and stop.is_set():
            return [Generation("", "cancelled", None, 0) for _ in conversations]
        request = _Request(conversations, max_new_tokens, stop, threading.get_ident(), time.monotonic())
        with self._cond:
            if self._closed:
                raise BackendError(f"the shared VLM {self.name!r} was closed: start a new batch")
            self._pending.append(request)
            if self._thread is None:
                self._thread = threading.Thread(target=self._dispatch, name=f"coalesce[{self.name}]", daemon=True)
                self._thread.start()
            self._cond.notify_all()
        request.done.wait()
        if request.error is not None:
            raise request.error
        if request.results is None:
            raise BackendError(f"the shared VLM {self.name!r} gave no answer to a request")
        return request.results

    def _group(self) -> list[_Request]:
        """The next batch: pending requests with the oldest one's token budget, in arrival order, up to
        ``max_batch`` conversations (the oldest always goes)."""
        first = self._pending[0]
        group, rows = [], 0
        for request in self._pending:
            if request.max_new_tokens != first.max_new_tokens:
                continue
            if group and rows + len(request.conversations) > self.max_batch:
                break
            group.append(request)
            rows += len(request.conversations)
        return group

    def _ready(self, group: list[_Request]) -> bool:
        rows = sum(len(r.conversations) for r in group)
        waiting = len({r.client for r in self._pending})
        return self._closed or rows >= self.max_batch or waiting >= max(1, self._clients)

    def _dispatch(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return
                deadline = self._pending[0].arrived + self.max_wait_s
                while not self._ready(self._group()) and (remaining := deadline - time.monotonic()) > 0:
                    self._cond.wait(remaining)
                group = self._group()
                self._pending = [r for r in self._pending if r not in group]
            self._answer(group)

    def _answer(self, group: list[_Request]) -> None:
        live = [r for r in group if not r.cancelled]
        for request in group:
            if request.cancelled:
                request.results = [Generation("", "cancelled", None, 0) for _ in request.conversations]
        if live:
            conversations = [c for r in live for c in r.conversations]
            self.batch_sizes.append(len(conversations))
            try:
                results = generate_each(
                    self.inner, conversations, max_new_tokens=live[0].max_new_tokens,  # type: ignore[arg-type]
                    stop=_AllStopped(live),  # type: ignore[arg-type]
                )
                start = 0
                for request in live:
                    request.results = list(results[start : start + len(request.conversations)])
                    start += len(request.conversations)
            except BaseException as error:  # handed to every waiting caller, raised in its own thread
                logger.info("shared batch of %d failed: %s", len(conversations), error)
                for request in live:
                    request.error = error
        for request in group:
            request.done.set()
