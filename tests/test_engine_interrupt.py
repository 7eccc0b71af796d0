"""An interrupt in the thread that waits for a decoding (Ctrl-C and SIGTERM arrive there as ``KeyboardInterrupt``)
leaves no decoding running: the worker thread has ended by the time the exception comes out.

A decoder double decodes until told to stop; a signal, sent once it has started, raises in the waiting thread.
Without the wait on the way out, the double was still decoding (and the engine's lock released over a busy model).
"""

from __future__ import annotations

import signal
import sys
import threading
import time

import pytest

from sam3_agent.engine.decoder_thread import decode_batch
from sam3_agent.engine.sampling import GREEDY
from sam3_agent.engine.usage import UsageCounter

WAITS = {"wait", "join", "_wait_for_tstate_lock"}  # what the waiting thread's innermost frames are named
GUARD_STEPS = 12_000  # about 60 s of steps: a decoding nothing stops ends there, and the test fails


class Interrupted(BaseException):
    """What the test's signal handler raises, as Python's raises ``KeyboardInterrupt``."""


class EndlessDecoder:
    """Decodes steps of no token until its stop flag is set (or, so that a failing test ends, for 60 s); says when it
    started and when it ended."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.ended = threading.Event()
        self.steps = 0

    def run(self, requests, limit, stop, counters, sampling):
        self.started.set()
        try:
            while not stop.is_set() and self.steps < GUARD_STEPS:
                self.steps += 1
                yield [None] * len(requests)
                time.sleep(0.005)
            return []
        finally:
            self.ended.set()


class NoTokenizer:
    """Enough of a tokenizer for the collectors of a decoding that emits no token."""

    def decode(self, ids, **kwargs):
        return ""


@pytest.fixture
def interrupted() -> threading.Event:
    """Set once SIGUSR1 has raised ``Interrupted`` in the test's thread; later ones are ignored, as the CLI defers a
    second Ctrl-C or SIGTERM (``cli.signals``)."""
    fired = threading.Event()

    def interrupt(signum, frame):
        if not fired.is_set():
            fired.set()
            raise Interrupted

    previous = signal.signal(signal.SIGUSR1, interrupt)
    yield fired
    signal.signal(signal.SIGUSR1, previous)


def test_an_interrupt_while_a_batch_decodes_stops_the_decoding_and_waits_for_it(interrupted):
    decoder = EndlessDecoder()
    waiting = threading.current_thread().ident

    def send_when_waiting() -> None:  # once the decoding runs and this thread waits for it in _run_to_end
        decoder.started.wait()
        while True:
            frame = sys._current_frames().get(waiting)
            names = []
            while frame is not None:
                names.append(frame.f_code.co_name)
                frame = frame.f_back
            # innermost first: waits (an Event's, or Thread.join's) right under _run_to_end, not Thread.start's
            if "_run_to_end" in names and set(names[:names.index("_run_to_end")]) <= WAITS:
                break
            time.sleep(0.001)
        # to the waiting thread itself, again until it is taken: one that lands just before the thread blocks in the
        # lock is only handled once the lock is released (CPython checks for signals between bytecodes)
        while not interrupted.is_set():
            signal.pthread_kill(waiting, signal.SIGUSR1)
            interrupted.wait(0.05)

    threading.Thread(target=send_when_waiting, daemon=True).start()
    stop = threading.Event()
    with pytest.raises(Interrupted):
        decode_batch(decoder, [object(), object()], 10, stop, GREEDY, tokenizer=NoTokenizer(), usage=UsageCounter(False),
                     name="double")
    assert decoder.ended.is_set() and not stop.is_set()  # ended by the interrupt, not by the caller's stop
    assert 1 <= decoder.steps < GUARD_STEPS
