"""The Correct tab's sessions: a ``ui.session_store.SessionStore`` keyed by each session's own key (it names the
session's export folder), with the Correct tab's words in its messages."""

from __future__ import annotations

from collections.abc import Callable

from ..session_store import (
    DEFAULT_MAX_SESSION_BYTES,
    DEFAULT_MAX_TOTAL_BYTES,
    DEFAULT_TTL_S,
    SessionStore,
    StoreTexts,
)
from ..session_store import expired_message as _expired_message
from .session import CorrectSession

__all__ = ["DEFAULT_MAX_SESSION_BYTES", "DEFAULT_MAX_TOTAL_BYTES", "DEFAULT_TTL_S", "CorrectSessions",
           "expired_message"]

CORRECT_TEXTS = StoreTexts(
    what="correction session",
    reopen="load the run or the trace again",
    smaller="export what you have (bundle), or correct a trace with a smaller photo or fewer masks",
    use="edit",
)


def expired_message(ttl_s: float) -> str:
    """What a person is told when their correction session was dropped (or never existed in this process)."""
    return _expired_message(ttl_s, CORRECT_TEXTS)


class CorrectSessions(SessionStore):
    """Correction sessions by key (``CorrectSession.key``), bounded in time and memory (``SessionStore``)."""

    def __init__(self, ttl_s: float = DEFAULT_TTL_S, max_session_bytes: int = DEFAULT_MAX_SESSION_BYTES,
                 max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES, on_drop: Callable[[str], None] | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        extra = {} if clock is None else {"clock": clock}
        super().__init__(ttl_s, max_session_bytes, max_total_bytes, on_drop, texts=CORRECT_TEXTS, **extra)

    def put(self, session: CorrectSession, owner: str | None = None, key: str | None = None) -> str:
        """Keep a new session under its own key; returns it (see ``SessionStore.put``)."""
        return super().put(session, owner, key or session.key)

    def get(self, key: str | None) -> CorrectSession:
        return super().get(key)
