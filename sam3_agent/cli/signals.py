"""SIGINT and SIGTERM during a command: the first stops a run like Ctrl-C (``KeyboardInterrupt``); one that arrives
while the outputs are written waits until they are complete (``signals_deferred``)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


class _StopSignals:
    """SIGINT and SIGTERM stop a run (``KeyboardInterrupt``) once; a later one, or one that arrives while the outputs
    are written (``signals_deferred``), is noted and waits, so that a second Ctrl-C never cuts the writing short."""

    def __init__(self) -> None:
        self.deferring = False
        self.received: list[str] = []

    def __call__(self, signum: int, frame: object) -> None:
        if self.deferring:
            self.received.append(signal.Signals(signum).name)
            return
        self.deferring = True
        raise KeyboardInterrupt


_STOP = _StopSignals()


@contextlib.contextmanager
def signals_deferred() -> Iterator[list[str]]:
    """Hold SIGINT/SIGTERM (when ``main`` installed its handlers) until the block ends; yields the names of those
    that arrived meanwhile."""
    _STOP.deferring = True
    try:
        yield _STOP.received
    finally:
        _STOP.deferring = False


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """Install the handlers of SIGINT and SIGTERM for the duration of a command (then restore the previous ones)."""
    _STOP.deferring, _STOP.received = False, []
    previous = {sig: signal.signal(sig, _STOP) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
