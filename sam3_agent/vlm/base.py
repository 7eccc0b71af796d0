"""The VLM backend protocol shared by the transformers, server and scripted backends."""

from __future__ import annotations

import threading
from typing import Iterator, Protocol, Sequence, Union

from ..types import Generation, Message

StreamItem = Union[str, Generation]


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
