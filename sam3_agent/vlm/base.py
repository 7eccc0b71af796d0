"""The VLM backend protocol shared by the transformers, server and scripted backends."""

from __future__ import annotations

import re
import threading
from typing import Any, Callable, Iterator, Protocol, Sequence, Union, runtime_checkable

from PIL import Image

from ..types import Generation, ImagePart, Message, TextPart

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


CONTROL_TOKEN = re.compile(r"<\|[A-Za-z0-9_]{1,40}\|>")  # Qwen's <|im_end|>, <|vision_start|>, <|image_pad|>...


def strip_control_tokens(text: str) -> str:
    """``text`` without chat-template control tokens (``<|im_end|>``, ``<|image_pad|>``, ``<|video_pad|>``...).

    Written as text they would end a turn early or claim images and videos that were never sent. Removal
    repeats until none is left, so a token hidden inside another (``<|vid<|x|>eo_pad|>``) cannot reassemble.
    """
    while True:
        cleaned = CONTROL_TOKEN.sub("", text)
        if cleaned == text:
            return cleaned
        text = cleaned


def chat_messages(messages: Sequence[Message], image_item: Callable[[Image.Image], dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as ``[{"role", "content"}]`` chat dicts, the shape both Hugging Face processors and chat-completions
    servers take.

    A message with exactly one text part gets a plain string as content (the form every template and server
    handles for every role); other messages get a list of items in order: ``{"type": "text", "text": str}`` for
    text and ``image_item(image)`` for each image. Every text goes through ``strip_control_tokens``: the query,
    the model's own replies and phrases it echoes never reach the model as control tokens (traces keep them).

    Raises:
        TypeError: a part that is neither ``TextPart`` nor ``ImagePart``.
    """
    chat: list[dict[str, Any]] = []
    for message in messages:
        parts = message.parts
        if len(parts) == 1 and isinstance(parts[0], TextPart):
            content: Any = strip_control_tokens(parts[0].text)
        else:
            content = []
            for part in parts:
                if isinstance(part, ImagePart):
                    content.append(image_item(part.image))
                elif isinstance(part, TextPart):
                    content.append({"type": "text", "text": strip_control_tokens(part.text)})
                else:
                    raise TypeError(f"unsupported message part {type(part).__name__}: use TextPart or ImagePart")
        chat.append({"role": message.role, "content": content})
    return chat
