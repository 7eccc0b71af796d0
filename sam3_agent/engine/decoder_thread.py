"""Running a ``CachedDecoder`` in a worker thread: one request streamed as its tokens come, or a batch to its end.

The decoding runs in a thread of its own (as ``generate`` with a streamer does) so that the caller can relay
text as tokens come and stop listening at any time; each call has its own collector, counters and stop
check, so concurrent callers never see each other's tokens. The caller holds the engine's lock.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

from .decoded import Decoded, EngineError
from .qwen_decode import CachedDecoder, DecodeCounters, RowResult
from .qwen_request import EncodedRequest
from .sampling import Sampling
from .usage import UsageCounter
from .workers import EitherEvent, PieceCollector, consume_steps, row_finish

logger = logging.getLogger(__name__)


def stream_decoder(
    decoder: CachedDecoder, request: EncodedRequest, limit: int, stop: threading.Event, sampling: Sampling, *,
    tokenizer: Any, usage: UsageCounter, name: str,
) -> Iterator[str | Decoded]:
    """Decode one request in a worker thread, relaying text pieces as tokens come, then its ``Decoded``.

    Args:
        decoder / request: what runs (``request`` from ``RequestPreparer.prepare``).
        limit: most tokens generated.
        stop: ends decoding at its next step (the row ends ``"cancelled"``); so does leaving the iteration early.
        sampling: how tokens are chosen.
        tokenizer: turns tokens into text pieces (``TextIteratorStreamer``'s chunking).
        usage: counts the work done; name: the model, for logs.

    Raises:
        EngineError: the model failed (stage ``"generate"``).
    """
    collector = PieceCollector(tokenizer)
    counters = DecodeCounters()
    started = time.perf_counter()
    tokens: queue.Queue[int | None] = queue.Queue()
    abandoned = threading.Event()  # set when the consumer stops iterating early
    halt = EitherEvent(stop, abandoned)
    outcome: dict[str, Any] = {}

    def relay(emitted: list[int | None]) -> None:
        if emitted[0] is not None:
            tokens.put(emitted[0])

    def work() -> None:
        try:
            consume_steps(lambda: decoder.run([request], limit, halt, counters, sampling), relay, outcome)
        finally:
            tokens.put(None)

    worker = threading.Thread(target=work, name=f"decode[{name}]", daemon=True)
    worker.start()
    try:
        while (token := tokens.get()) is not None:
            yield from collector.add(token)
    finally:
        abandoned.set()  # no-op when decoding already ended; stops it when the consumer left early
        worker.join()
    if "error" in outcome:
        raise EngineError("generate", outcome["error"]) from outcome["error"]
    yield from collector.finish()
    row = outcome["rows"][0]
    usage.add(counters, [request], outcome["rows"])
    logger.debug(
        "%s: %d prompt tokens (%d run) + %d output tokens in %.2f s",
        name, len(request), counters.prefill_tokens, len(row.output_ids), time.perf_counter() - started,
    )
    yield Decoded(collector.text(), row_finish(row, limit), len(request), len(row.output_ids))


def decode_batch(
    decoder: CachedDecoder, requests: list[EncodedRequest], limit: int, stop: threading.Event, sampling: Sampling,
    *, tokenizer: Any, usage: UsageCounter, name: str,
) -> list[Decoded]:
    """Decode several requests together (``CachedDecoder.run``) in a worker thread; one ``Decoded`` per request.

    Arguments as ``stream_decoder``'s; ``stop`` ends every unfinished row as ``"cancelled"``.

    Raises:
        EngineError: the model failed (stage ``"generate"``).
    """
    collectors = [PieceCollector(tokenizer) for _ in requests]
    counters = DecodeCounters()
    started = time.perf_counter()
    rows = _run_to_end(decoder, requests, limit, stop, counters, collectors, sampling, name)
    for collector in collectors:
        collector.finish()
    results = [
        Decoded(collector.text(), row_finish(row, limit), len(request), len(row.output_ids))
        for request, row, collector in zip(requests, rows, collectors)
    ]
    usage.add(counters, requests, rows)
    logger.debug(
        "%s: batch of %d, %d prompt tokens (%d run) in %.2f s",
        name, len(requests), sum(len(r) for r in requests), counters.prefill_tokens, time.perf_counter() - started,
    )
    return results


def _run_to_end(
    decoder: CachedDecoder, requests: list[EncodedRequest], limit: int, stop: threading.Event,
    counters: DecodeCounters, collectors: list[PieceCollector], sampling: Sampling, name: str,
) -> list[RowResult]:
    """Run ``decoder`` to the end in a worker thread (as ``generate`` runs), feeding each row's collector.

    An exception in the caller's thread while it waits (Ctrl-C or SIGTERM arrive there as ``KeyboardInterrupt``) stops
    the decoding at its next step and waits for it before going on: the engine's lock is released only once its model
    is idle, and a process that exits after the interrupt never ends with a thread still inside the model (the CLI
    stopped by SIGTERM during a verification batch was once killed by SIGABRT instead of exiting with 130).
    """
    outcome: dict[str, Any] = {}
    abandoned = threading.Event()  # set when the caller stops waiting

    def feed(emitted: list[int | None]) -> None:
        for token, collector in zip(emitted, collectors):
            if token is not None:
                collector.add(token)

    done = threading.Event()  # waited on instead of ``Thread.join``: an interrupted join marks the thread ended
    # (Python 3.11, bpo-45274's fix), so a second join would return while it still decodes

    def work() -> None:
        try:
            consume_steps(lambda: decoder.run(requests, limit, EitherEvent(stop, abandoned), counters, sampling), feed,
                          outcome)
        finally:
            done.set()

    threading.Thread(target=work, name=f"decode[{name}]", daemon=True).start()
    try:
        done.wait()
    finally:
        abandoned.set()  # no-op when decoding already ended
        done.wait()
    if "error" in outcome:
        raise EngineError("generate", outcome["error"]) from outcome["error"]
    return outcome["rows"]
