"""Per-session user data of every tab (a Correct session, a trace loaded in Inspect), kept in this process and
bounded in time and memory: one mechanism for every tab that holds user data.

A value (``correct.session.CorrectSession``: the photo, every round's masks, the edit history; an inspected trace) can take
tens of megabytes. Gradio keeps a ``gr.State`` value for an hour after its tab closes, whatever its ``time_to_live``:
40 sessions that imported a trace and left pinned 734 MB for that hour. So ``gr.State`` holds only a value's
key, and the values live here. A session is dropped when its tab closes (``drop_owner``, from the page's unload
event), after ``ttl_s`` seconds without use, or, least recently used first, when the sessions together exceed
``max_total_bytes``; a session larger than ``max_session_bytes`` is refused. A value that holds more than memory
(an open clip's decoder, files) is given to ``close`` when it is dropped.

No Gradio here.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from ..shared import SharedObject
from .memory_size import held_bytes

logger = logging.getLogger(__name__)

DEFAULT_TTL_S = 30 * 60  # a session unused for 30 minutes is dropped
DEFAULT_MAX_SESSION_BYTES = 512 * 1024**2  # one session: e.g. a 12 MP photo with a few hundred full-size masks
DEFAULT_MAX_TOTAL_BYTES = 2 * 1024**3  # all sessions of the process together
MIB = 1024**2


@dataclass
class _Entry:
    session: Any
    nbytes: int
    owner: str | None
    used_at: float


@dataclass(frozen=True)
class StoreTexts:
    """How a store's messages name what it holds and what to do.

    Attributes:
        what: the value, e.g. ``"correction session"``.
        reopen: what to do once it is gone, e.g. ``"load the run or the trace again"``.
        smaller: what to do when one is too large.
        use: what counts as a use (``"edit"``: a session closes that long after its last edit).
    """

    what: str = "session"
    reopen: str = "open it again"
    smaller: str = "use a smaller photo or fewer masks"
    use: str = "use"


def expired_message(ttl_s: float, texts: StoreTexts = StoreTexts()) -> str:  # noqa: B008 - a frozen record
    """What a person is told when their session was dropped (or never existed in this process)."""
    return (f"this {texts.what} is no longer open (sessions close {ttl_s / 60:.0f} minutes after their last "
            f"{texts.use}, when their tab closes, or when the app needs the memory): {texts.reopen}")


class SessionStore(SharedObject):
    """Values by key, bounded in time and memory; thread-safe.

    Args:
        ttl_s: seconds a session may go unused before it is dropped.
        max_session_bytes: most bytes one session may hold (``memory_size.held_bytes``); larger ones are refused.
        max_total_bytes: most bytes all sessions together may hold; the least recently used go first.
        on_drop: called with the key of every session dropped (not for ``replace``), e.g. to remove its exports.
        close: called with the value of every session dropped (not for ``replace``), e.g. to close a clip it holds.
        clock: seconds, monotonic (tests pass their own).
        texts: how messages name the values.

    Raises:
        ValueError: a bound that is not positive.
    """

    def __init__(
        self,
        ttl_s: float = DEFAULT_TTL_S,
        max_session_bytes: int = DEFAULT_MAX_SESSION_BYTES,
        max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES,
        on_drop: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        texts: StoreTexts = StoreTexts(),  # noqa: B008 - a frozen record
        close: Callable[[Any], None] | None = None,
    ) -> None:
        if ttl_s <= 0 or max_session_bytes <= 0 or max_total_bytes <= 0:
            raise ValueError(f"session bounds must be positive, got ttl {ttl_s} s, {max_session_bytes} bytes per "
                             f"session, {max_total_bytes} bytes in all")
        self.ttl_s = ttl_s
        self.max_session_bytes = max_session_bytes
        self.max_total_bytes = max_total_bytes
        self._on_drop = on_drop or (lambda key: None)
        self._close = close or (lambda value: None)
        self._clock = clock
        self.texts = texts
        self._entries: OrderedDict[str, _Entry] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()

    def _measure(self, session: Any) -> int:
        nbytes = held_bytes(session)
        if nbytes > self.max_session_bytes:
            raise InputError(
                f"this {self.texts.what} would hold about {nbytes / MIB:.0f} MB, more than the "
                f"{self.max_session_bytes / MIB:.0f} MB one session may use: {self.texts.smaller}"
            )
        return nbytes

    def put(self, session: Any, owner: str | None = None, key: str | None = None) -> str:
        """Keep a new value under ``key`` (default: a new random key); returns the key. ``owner``: the browser
        session it belongs to (``drop_owner``).

        Raises:
            InputError: the session is larger than ``max_session_bytes`` (nothing is kept).
        """
        nbytes = self._measure(session)
        key = key or secrets.token_hex(16)
        with self._lock:
            self._store(key, _Entry(session, nbytes, owner, self._clock()))
            dropped = self._evict()
        self._dropped(dropped)
        return key

    def get(self, key: str | None) -> Any:
        """The session under ``key``, marked as used now.

        Raises:
            InputError: no such session (never opened here, expired, or dropped); the message says what to do.
        """
        with self._lock:
            dropped = self._evict()
            entry = self._entries.get(key) if isinstance(key, str) else None
            if entry is not None:
                entry.used_at = self._clock()
                self._entries.move_to_end(key)  # type: ignore[arg-type]
        self._dropped(dropped)
        if entry is None:
            raise InputError(expired_message(self.ttl_s, self.texts))
        return entry.session

    def replace(self, key: str, session: Any) -> None:
        """Store the edited ``session`` under ``key`` (same key: the session's own).

        Raises:
            InputError: the edited session is larger than ``max_session_bytes`` (the stored one is kept), or the
                session under ``key`` was dropped meanwhile.
        """
        nbytes = self._measure(session)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                raise InputError(expired_message(self.ttl_s, self.texts))
            self._store(key, _Entry(session, nbytes, entry.owner, self._clock()))
            dropped = [(k, e) for k, e in self._evict() if k != key]
        self._dropped(dropped)

    def drop(self, key: str | None) -> None:
        """Forget the session under ``key`` (nothing happens for an unknown key)."""
        with self._lock:
            found = self._entries.pop(key, None) if isinstance(key, str) else None
        if found is not None:
            self._dropped([(key, found)])  # type: ignore[list-item]

    def drop_owner(self, owner: str | None) -> None:
        """Forget every session of the browser session ``owner`` (its tab closed)."""
        if not owner:
            return
        with self._lock:
            dropped = [(key, entry) for key, entry in self._entries.items() if entry.owner == owner]
            for key, _entry in dropped:
                del self._entries[key]
        self._dropped(dropped)

    def info(self) -> tuple[int, int]:
        """``(sessions, bytes)`` held now (expired sessions are dropped first)."""
        with self._lock:
            dropped = self._evict()
            info = len(self._entries), sum(entry.nbytes for entry in self._entries.values())
        self._dropped(dropped)
        return info

    # ------------------------------------------------------------------ internals

    def _store(self, key: str, entry: _Entry) -> None:
        self._entries[key] = entry
        self._entries.move_to_end(key)

    def _evict(self) -> list[tuple[str, _Entry]]:
        """Drop expired sessions, then the least recently used ones beyond the total bound (lock held)."""
        now = self._clock()
        dropped = [(key, entry) for key, entry in self._entries.items() if now - entry.used_at > self.ttl_s]
        for key, _entry in dropped:
            del self._entries[key]
        total = sum(entry.nbytes for entry in self._entries.values())
        while total > self.max_total_bytes and len(self._entries) > 1:
            key, entry = self._entries.popitem(last=False)
            total -= entry.nbytes
            dropped.append((key, entry))
        return dropped

    def _dropped(self, dropped: list[tuple[str, _Entry]]) -> None:
        """Outside the lock: the drop hooks of each dropped session (its key, then its value)."""
        for key, entry in dropped:
            logger.debug("%s %s dropped", self.texts.what, key[:8])
            try:
                self._on_drop(key)
                self._close(entry.session)
            except OSError as error:  # removing its exports failed: the session is gone all the same
                logger.warning("could not clean up %s %s: %s", self.texts.what, key[:8], error)

