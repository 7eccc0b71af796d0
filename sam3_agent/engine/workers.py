"""Decoding in a worker thread while the caller's thread relays its text, as ``generate`` with a streamer runs.

A request's decoding runs in a thread of its own so that the caller can stream text as tokens come and stop
listening at any time (the worker then ends at its next step). These are the small pieces both decoding
paths share: the step loop of a ``CachedDecoder.run`` generator, the text chunking of ``transformers``'
streamers, and the stop checks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator
from typing import Any

import torch

from .qwen_decode import RowResult


def consume_steps(
    start: Callable[[], Generator[list[int | None], None, list[RowResult]]],
    on_step: Callable[[list[int | None]], None],
    outcome: dict[str, Any],
) -> None:
    """Run a ``CachedDecoder.run`` generator to its end under ``torch.inference_mode`` (in a worker thread),
    handing each step's tokens to ``on_step``; leaves ``outcome["rows"]``, or ``outcome["error"]`` for the caller's
    thread to re-raise."""
    try:
        with torch.inference_mode():
            steps = start()
            while True:
                try:
                    emitted = next(steps)
                except StopIteration as done:
                    outcome["rows"] = done.value
                    return
                on_step(emitted)
    except BaseException as exc:  # re-raised in the caller's thread
        outcome["error"] = exc


class EitherEvent:
    """Looks like a ``threading.Event`` that is set when either of two events is."""

    def __init__(self, first: threading.Event, second: threading.Event) -> None:
        self._events = (first, second)

    def is_set(self) -> bool:
        return any(event.is_set() for event in self._events)


class PieceCollector:
    """Turns tokens into the text pieces ``TextIteratorStreamer`` would produce (same chunking, specials skipped)."""

    def __init__(self, tokenizer: Any) -> None:
        from transformers import TextStreamer

        pieces: list[str] = []

        class _Streamer(TextStreamer):
            def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
                if text:
                    pieces.append(text)

        self._streamer = _Streamer(tokenizer, skip_prompt=False, skip_special_tokens=True)
        self._pieces = pieces
        self._given = 0

    def _new(self) -> list[str]:
        fresh = self._pieces[self._given :]
        self._given = len(self._pieces)
        return fresh

    def add(self, token: int) -> list[str]:
        """Feed one token; returns the pieces it completed."""
        self._streamer.put(torch.tensor([token]))
        return self._new()

    def finish(self) -> list[str]:
        """Flush the text held back; returns the last pieces."""
        self._streamer.end()
        return self._new()

    def text(self) -> str:
        """All text so far (after ``finish``: the whole output)."""
        return "".join(self._pieces)


class EventStopper:
    """``generate`` stopping criterion: ends generation once the user's ``stop`` or the internal ``abandoned`` is set."""

    def __init__(self, stop: threading.Event, abandoned: threading.Event) -> None:
        self._stop = stop
        self._abandoned = abandoned

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        done = self._stop.is_set() or self._abandoned.is_set()
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)


def row_finish(row: RowResult, limit: int) -> str:
    """The finish reason of a decoded row, with ``generate``'s precedence: stop, length, cancelled."""
    if row.finish_reason == "stop":
        return "stop"
    if len(row.output_ids) >= limit:
        return "length"
    return row.finish_reason
