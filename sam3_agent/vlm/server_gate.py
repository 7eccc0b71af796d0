"""How many requests one client has open at a server at once, lowered when the server says it has too many.

A server or proxy that allows fewer requests at once than a batch sends (``batch --concurrency 4`` against a
server with one slot) answers the rest ``429 Too Many Requests``. Retrying each alone would fail half the items
once the retries run out; instead the client learns the server's limit: each 429 lowers the number of requests
let through to one below those open at that moment (at least 1), the request waits (``Retry-After`` honoured,
``server_retry.RetryPolicy``) and then queues for a slot like any other. The limit rises again by one after
``RAISE_AFTER`` answers in a row per slot at that limit (a limit learnt from answers, as TCP's congestion control
learns its window), so a passing burst does not slow a long batch for good. ``RequestGate.report`` is what a batch summary says about it.

Why hand-written: ``urllib3``'s ``Retry`` retries one request (it honours ``Retry-After``) but knows nothing of the
other requests in flight; the limiters on the package index limit a rate fixed in advance, not one learnt from a
server's answers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

logger = logging.getLogger(__name__)

RAISE_AFTER = 8  # answers in a row at the current limit before one more request may be open
_HALT_POLL_SECONDS = 0.05  # how often a request waiting for a slot checks that its call still wants it


@dataclass(frozen=True)
class GateReport:
    """What the gate saw: 429 answers, and the fewest requests it let through at once (``None``: never limited)."""

    rate_limited: int
    lowest_limit: int | None

    def as_record(self) -> dict[str, int | None]:
        return {"rate_limited": self.rate_limited, "lowest_concurrency": self.lowest_limit}


class RequestGate:
    """The slots of one server, shared by every thread that calls it (thread-safe).

    Attributes:
        limit: requests let through at once (``None``: no limit learnt yet).
        open: requests holding a slot now.
        waiting: requests waiting for a slot now.
    """

    def __init__(self, raise_after: int = RAISE_AFTER) -> None:
        self.limit: int | None = None
        self.open = 0
        self.waiting = 0
        self._raise_after = raise_after
        self._in_a_row = 0
        self._rate_limited = 0
        self._lowest: int | None = None
        self._changed = threading.Condition()

    def enter(self, halt: threading.Event, on_wait: Callable[[], None] = lambda: None) -> bool:
        """Take a slot, waiting while all are taken (``on_wait`` is called once when it has to wait); False when
        ``halt`` was set before one was free."""
        with self._changed:
            waited = False
            try:
                while self.limit is not None and self.open >= self.limit and not halt.is_set():
                    if not waited:
                        waited = True
                        self.waiting += 1
                        on_wait()
                    self._changed.wait(_HALT_POLL_SECONDS)
            finally:
                self.waiting -= waited
            if halt.is_set():
                return False
            self.open += 1
            return True

    def leave(self) -> None:
        """Give a slot back."""
        with self._changed:
            self.open -= 1
            self._changed.notify_all()

    def answered(self) -> None:
        """A request holding a slot got an answer that was not a 429: after ``raise_after`` in a row, one more
        request may be open."""
        with self._changed:
            if self.limit is None:
                return
            self._in_a_row += 1
            if self._in_a_row >= self._raise_after * self.limit:
                self.limit += 1
                self._in_a_row = 0
                self._changed.notify_all()

    def too_many(self) -> int:
        """A request holding a slot was answered 429: let through one fewer than are open now (at least 1).
        Returns the new limit."""
        with self._changed:
            self._rate_limited += 1
            self._in_a_row = 0
            lowered = max(1, min(self.open, self.limit or self.open) - 1)
            if lowered != self.limit:
                logger.info("the server refused a request as one too many: at most %d request(s) at once now", lowered)
            self.limit = lowered
            self._lowest = lowered if self._lowest is None else min(self._lowest, lowered)
            return lowered

    def report(self) -> GateReport:
        with self._changed:
            return GateReport(self._rate_limited, self._lowest)
