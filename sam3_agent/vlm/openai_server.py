"""A VLM served over an OpenAI-compatible chat-completions API (vLLM, SGLang, Ollama, LiteLLM, DashScope...).

Requests are streamed (server-sent events). Every image is fitted to the Qwen-VL processor limits and
scaled into the same pixel bounds as the local path (``image_fit``), then sent as a data URL: the user's
photo as JPEG, rendered views (overlays, mask and zoom views, whose thin outlines and digits must stay
exact) as PNG. The HTTP side (retries, compressed or non-streamed bodies, error chunks, size limits) is
``server_stream`` (with ``sse_answer`` and ``server_retry``); this module owns the request, the per-call deadline
and the stop event.

Why not the official ``openai`` client: it would carry retries and timeouts, but several answers real
servers give are outside what it handles: it reads a JSON body sent to a streaming request as an empty
stream, passes older vLLM's ``{"object": "error"}`` chunks on as empty chunks, has no deadline for a
whole call (its timeouts are per read, as ``requests``' are), and offers no way to unblock a read from
another thread, which a prompt Stop needs. Handling those means reading the raw bytes anyway, so the
transport stays on ``requests``/``urllib3`` (already required), with the retry rules of the official
clients (statuses, backoff, ``Retry-After``) written out in ``server_retry``.
"""

from __future__ import annotations

import base64
import io
import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from PIL import Image

from ..errors import BackendError, InputError
from ..messages import Generation, ImagePart, Message, chat_messages
from .base import StreamItem
from .image_fit import ImageLimits, fit_image
from .server_retry import RetryPolicy
from .server_stream import END, CompletionReader, ServerRequest
from .sse_answer import Delta
from .timeouts import TIMEOUT_ENVIRONMENT, ServerTimeouts

logger = logging.getLogger(__name__)

_STOP_POLL_SECONDS = 0.05  # how often a waiting call checks its stop event and deadline
_THINK_END = "</think>"
JPEG_QUALITY = 92  # the user's photo; visually lossless at the pixel budget the model sees
PHOTO_PART = "raw"  # ImagePart name of the user's photo (agent and verification messages)
MAX_CHARS_PER_TOKEN = 32  # client-side cap on a reply: max_tokens x this many characters (Qwen averages ~4)
MAX_BYTES_PER_TOKEN = 2048  # and on the bytes of its event stream (a chunk per token is ~200-400 bytes)
_ENCODED_CACHE_ENTRIES = 8  # data URLs kept: the photo recurs in every request of a run

def image_data_url(image: Image.Image, kind: str = "PNG") -> str:
    """A ``data:image/png;base64,...`` (or ``image/jpeg``) URL holding ``image`` (RGB) encoded as ``kind``."""
    buffer = io.BytesIO()
    if kind == "JPEG":
        image.convert("RGB").save(buffer, format="JPEG", quality=JPEG_QUALITY)
    else:
        image.save(buffer, format="PNG")
    return f"data:image/{kind.lower()};base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


_NOTHING_YET = object()  # no item from the reader within one poll


@dataclass
class _AnswerSoFar:
    """What one call has received: its text pieces, finish reason, usage report, whether it reasoned or was stopped."""

    pieces: list[str] = field(default_factory=list)
    finish: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    in_reasoning: bool = False
    reasoned: bool = False
    cancelled: bool = False

    def add(self, delta: Delta) -> str:
        """Record ``delta``; returns its text piece: reasoning, then ``</think>`` where the answer begins, then content."""
        self.usage = delta.usage or self.usage
        piece = ""
        if delta.reasoning:
            piece, self.in_reasoning, self.reasoned = delta.reasoning, True, True
        if delta.content:
            piece += (_THINK_END if self.in_reasoning else "") + delta.content
            self.in_reasoning = False
        if piece:
            self.pieces.append(piece)
        self.finish = delta.finish_reason or self.finish
        return piece

    def generation(self, where: str) -> Generation:
        """The call's ``Generation``.

        Raises:
            BackendError: the answer ended without a finish reason (the reader always sends one or an error).
        """
        prompt_tokens = self.usage.get("prompt_tokens")
        output_tokens = self.usage.get("completion_tokens")
        text = "".join(self.pieces)
        if self.cancelled:
            return Generation(text, "cancelled", prompt_tokens, output_tokens, self.reasoned)
        if self.finish is None:  # the reader always ends with a finish reason or an error; guard anyway
            raise BackendError(f"{where} ended the answer without a finish reason: check the server log")
        finish = "length" if self.finish == "length" else "stop"
        return Generation(text, finish, prompt_tokens, output_tokens, self.reasoned)


class OpenAIServerVLM:
    """A chat model behind ``POST {base_url}/chat/completions`` with ``"stream": true``.

    Decoding uses temperature 0. Text comes from each chunk's ``delta.content``; a reasoning
    server (vLLM with a reasoning parser) sends the thinking as ``delta.reasoning_content`` (or
    ``delta.reasoning``): that text is streamed too, ``</think>`` is inserted where the answer begins,
    and the ``Generation`` is marked ``starts_in_reasoning`` (the text has the form a Thinking model
    writes after a template that opened ``<think>``; an answer that ended inside the reasoning holds
    only reasoning and runs nothing).

    Args:
        base_url: the API root, e.g. ``"http://127.0.0.1:8000/v1"``.
        model: the served model name sent as ``"model"``.
        api_key: sent as ``Authorization: Bearer ...`` when given.
        timeouts: connect / read timeouts and the deadline of a call (``ServerTimeouts``).
        max_new_tokens: default output-token limit (``max_tokens``) of a call; also bounds, on this side,
            the characters taken from an answer (``MAX_CHARS_PER_TOKEN`` per token).
        min_pixels / max_pixels: pixel bounds every image is scaled into before it is sent (``None``: the
            local path's defaults, ``limits.DEFAULT_MIN_PIXELS`` / ``DEFAULT_MAX_PIXELS``).
        retry: how failed attempts are retried (``server_retry.RetryPolicy``).

    Attributes:
        image_limits: the limits every image is fitted to.
        sends_stream_options: False once the server refused ``stream_options`` (then never sent again).

    Raises:
        InputError: ``base_url`` without ``http://``/``https://``, ``max_new_tokens`` below 1, or bad
            pixel bounds.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeouts: ServerTimeouts | None = None,
        max_new_tokens: int = 1024,
        *,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise InputError(f"base_url must start with http:// or https://, got {base_url!r}")
        if max_new_tokens < 1:
            raise InputError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.name = model
        self.api_key = api_key
        self.timeouts = timeouts or ServerTimeouts()
        self.max_new_tokens = max_new_tokens
        self.image_limits = ImageLimits.with_bounds(min_pixels, max_pixels)
        self.retry = retry or RetryPolicy()
        self.sends_stream_options = True
        self._encoded: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._encoded_lock = threading.Lock()

    @property
    def url(self) -> str:
        """The chat-completions endpoint."""
        return self.base_url + "/chat/completions"

    @property
    def where(self) -> str:
        """How messages name this server."""
        return f"the VLM server at {self.base_url} (model {self.model})"

    def to_openai_messages(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        """Messages in the chat-completions format (see ``base.chat_messages``), images as
        ``{"type": "image_url", "image_url": {"url": "data:image/...;base64,..."}}`` items, fitted and encoded."""
        urls = iter([self._data_url(part) for message in messages for part in message.images])
        # chat_messages asks for the images in the same order (messages, then parts)
        return chat_messages(messages, lambda image: {"type": "image_url", "image_url": {"url": next(urls)}})

    def request_body(self, messages: Sequence[Message], max_new_tokens: int | None = None) -> dict[str, Any]:
        """The JSON body sent for ``messages``."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": self.to_openai_messages(messages),
            "stream": True,
            "temperature": 0,
            "max_tokens": self.max_new_tokens if max_new_tokens is None else max_new_tokens,
        }
        if self.sends_stream_options:
            body["stream_options"] = {"include_usage": True}
        return body

    def stream(
        self,
        messages: Sequence[Message],
        *,
        max_new_tokens: int | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[StreamItem]:
        """Send the conversation and yield the answer in pieces, then one ``Generation``.

        ``finish_reason`` is ``"length"`` when the server says so or the answer outgrew what
        ``max_tokens`` allows, ``"cancelled"`` when ``stop`` was set (the connection is closed at once),
        else ``"stop"``. Token counts come from the server's usage report (``None`` when it sends none).

        Raises:
            BackendError: the server cannot be reached, answers an HTTP error (after the retries), sends a
                malformed or error chunk, falls silent past the read timeout, ends the stream early, or the
                call outlasts its deadline; the message says which, with the server's words where it sent any.
        """
        stop = stop if stop is not None else threading.Event()
        if stop.is_set():
            yield Generation("", "cancelled", None, 0)
            return
        limit = self.max_new_tokens if max_new_tokens is None else max_new_tokens
        answer = _AnswerSoFar()
        yield from self._relay(self._request(messages, limit), stop, answer)
        yield answer.generation(self.where)

    # ------------------------------------------------------------------ internals

    def _relay(self, request: ServerRequest, stop: threading.Event, answer: _AnswerSoFar) -> Iterator[str]:
        """Run ``request`` in a reader thread and yield its text pieces (recorded in ``answer``) until the answer
        ends or ``stop`` is set; the read is interrupted when it ends early, so the server stops too.

        Raises:
            BackendError: the reader's fault, or the call outlasted its deadline.
        """
        events: queue.Queue[Any] = queue.Queue()
        halt = threading.Event()
        reader = CompletionReader(request, events, halt)
        thread = threading.Thread(target=reader.run, name=f"sse[{self.model}]", daemon=True)
        deadline = time.monotonic() + self.timeouts.deadline
        thread.start()
        try:
            while True:
                event = self._next_event(events, deadline, answer)
                if event is _NOTHING_YET:
                    if stop.is_set():
                        answer.cancelled = True
                        break
                    continue
                if event is END:
                    break
                if isinstance(event, BackendError):
                    raise event
                if stop.is_set():
                    answer.cancelled = True
                    break
                piece = answer.add(event)
                if piece:
                    yield piece
        finally:
            halt.set()
            if thread.is_alive():
                reader.interrupt()  # stopped early: end the read, so the server stops too

    def _next_event(self, events: queue.Queue[Any], deadline: float, answer: _AnswerSoFar) -> Any:
        """The reader's next item (a ``Delta``, a ``BackendError`` or ``END``), or ``_NOTHING_YET`` after a short wait.

        Raises:
            BackendError: the deadline (``time.monotonic`` seconds) has passed.
        """
        left = deadline - time.monotonic()
        if left <= 0:
            raise BackendError(
                f"{self.where} did not finish its answer within {self.timeouts.deadline:g} s (the deadline "
                f"of one call; {sum(map(len, answer.pieces))} characters had arrived): raise it with "
                f"--vlm-server-deadline or {TIMEOUT_ENVIRONMENT['deadline']}"
            )
        try:
            return events.get(timeout=min(_STOP_POLL_SECONDS, left))
        except queue.Empty:
            return _NOTHING_YET

    def _request(self, messages: Sequence[Message], limit: int) -> ServerRequest:
        body = self.request_body(messages, limit)
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream", "Accept-Encoding": "identity"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        logger.debug("request to %s with %d image(s)", self.where, sum(len(m.images) for m in messages))

        def stream_options_rejected() -> None:
            self.sends_stream_options = False

        return ServerRequest(
            url=self.url, body=body, headers=headers, where=self.where, connect_timeout=self.timeouts.connect,
            read_timeout=self.timeouts.read, retry=self.retry, max_chars=limit * MAX_CHARS_PER_TOKEN,
            max_bytes=1024**2 + limit * MAX_BYTES_PER_TOKEN, on_stream_options_rejected=stream_options_rejected,
            unreachable_hint=f"is it running? start it with `vllm serve {self.model}` (see the README) and check "
            "the URL, which usually ends in /v1",
        )

    def _data_url(self, part: ImagePart) -> str:
        """The data URL of one image: fitted and scaled into the pixel bounds; JPEG for the photo, PNG for the
        rendered views. Remembered per image content (the photo recurs in every request)."""
        kind = "JPEG" if part.name == PHOTO_PART else "PNG"
        key = (part.digest, kind)
        with self._encoded_lock:
            url = self._encoded.get(key)
            if url is not None:
                self._encoded.move_to_end(key)
                return url
        url = image_data_url(fit_image(part.image, self.image_limits, resize=True), kind)
        with self._encoded_lock:
            self._encoded[key] = url
            while len(self._encoded) > _ENCODED_CACHE_ENTRIES:
                self._encoded.popitem(last=False)
        return url
