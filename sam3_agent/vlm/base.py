"""The VLM backend protocol shared by the transformers, server and scripted backends."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Protocol, runtime_checkable

from ..messages import Generation, Message

StreamItem = str | Generation


class VLM(Protocol):
    """A vision-language model that continues a conversation.

    ``stream`` yields the generated text in pieces (``str``) as they are produced and, last,
    exactly one ``Generation`` with the full text and the finish reason. Setting ``stop`` ends
    generation promptly with ``finish_reason == "cancelled"``. Raises ``BackendError`` for
    backend faults (never for bad model output).
    """

    name: str

    def stream(
        self,
        messages: Sequence[Message],
        *,
        max_new_tokens: int | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[StreamItem]: ...


def generate(
    vlm: VLM,
    messages: Sequence[Message],
    *,
    max_new_tokens: int | None = None,
    stop: threading.Event | None = None,
) -> Generation:
    """Run ``vlm.stream`` to the end and return its final ``Generation``.

    Raises:
        BackendError: when the backend's stream ends without a ``Generation``.
    """
    from ..errors import BackendError

    result: Generation | None = None
    for item in vlm.stream(messages, max_new_tokens=max_new_tokens, stop=stop):
        if isinstance(item, Generation):
            result = item
    if result is None:
        raise BackendError(f"VLM backend {vlm.name!r} ended its stream without a result")
    return result


@runtime_checkable
class BatchVLM(VLM, Protocol):
    """A VLM that can also answer several independent conversations in one batch (optional).

    ``generate_batch`` returns one ``Generation`` per conversation, in order, equal to what
    ``generate`` gives for each alone (greedy backends). When ``stop`` is set, unfinished rows end
    with ``finish_reason == "cancelled"``. Raises ``BackendError`` for backend faults.
    """

    def generate_batch(
        self,
        conversations: Sequence[Sequence[Message]],
        *,
        max_new_tokens: int | None = None,
        stop: threading.Event | None = None,
    ) -> list[Generation]: ...


def supports_batches(vlm: VLM) -> bool:
    """True when ``vlm`` implements ``generate_batch``."""
    return callable(getattr(vlm, "generate_batch", None))


def generate_each(
    vlm: VLM,
    conversations: Sequence[Sequence[Message]],
    *,
    max_new_tokens: int | None = None,
    stop: threading.Event | None = None,
) -> list[Generation]:
    """One ``Generation`` per conversation, in order: one batch when the backend supports it, else one by one.

    One by one, a cancelled generation ends the loop: the conversations not run yet get
    ``Generation("", "cancelled", None, 0)``.

    Raises:
        BackendError: when the backend fails or a stream ends without a result.
    """
    if not conversations:
        return []
    if len(conversations) > 1 and supports_batches(vlm):
        results = list(vlm.generate_batch(conversations, max_new_tokens=max_new_tokens, stop=stop))  # type: ignore[attr-defined]
        if len(results) != len(conversations):
            from ..errors import BackendError

            raise BackendError(
                f"VLM backend {vlm.name!r} answered {len(results)} of {len(conversations)} conversations in a batch"
            )
        return results
    results = []
    for messages in conversations:
        if results and results[-1].finish_reason == "cancelled":
            results.append(Generation("", "cancelled", None, 0))
            continue
        results.append(generate(vlm, messages, max_new_tokens=max_new_tokens, stop=stop))
    return results


