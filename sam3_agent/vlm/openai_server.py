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
another thread, which a prompt Stop needs. Handling those means reading the raw bytes anyway.

Why not ``httpx`` (installed with Gradio, and under the ``openai`` client): its line decoder would replace the few
lines of ``sse_answer.body_lines`` (it splits at CR, LF and CRLF too), but it has the same per-read timeouts and no
supported way to end a blocked read from another thread, and everything else here (one JSON body, error chunks,
web pages, size limits, tool-call pieces) would be written again on top of it: more code moved, no guarantee gained.

Why not ``urllib3``'s ``Retry`` for the retries: it retries statuses and honours ``Retry-After``, but it waits with
``time.sleep`` inside the request (a Stop during a 30-second ``Retry-After`` would wait it out; ours ends at once),
it knows nothing of the other requests in flight (a 429 must lower those, ``server_gate``), nothing of a finish
reason that means a fault inside a 200 answer, and its exhausted-retries error would be reworded anyway. So the
transport stays on ``requests``/``urllib3`` (already required), with the retry rules of the official clients
(statuses, backoff, ``Retry-After``) written out in ``server_retry`` and the 429 limit in ``server_gate``.
"""

from __future__ import annotations

import base64
import copy
import io
import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from PIL import Image

from ..errors import BackendError, InputError
from ..messages import Generation, ImagePart, Message, chat_messages
from .base import StreamItem
from .image_fit import ImageLimits, fit_image
from .server_answer import AnswerSoFar
from .server_gate import RequestGate
from .server_retry import RetryPolicy
from .server_stream import ADMITTED, END, QUEUED, CompletionReader, ServerRequest
from .timeouts import TIMEOUT_ENVIRONMENT, ServerTimeouts

logger = logging.getLogger(__name__)

_STOP_POLL_SECONDS = 0.05  # how often a waiting call checks its stop event and deadline
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


class OpenAIServerVLM:
    """A chat model behind ``POST {base_url}/chat/completions`` with ``"stream": true``.

    Sampling: only the fields in ``sampling`` are sent (none by default: the server decodes with its own settings,
    which for vLLM and SGLang are the model's ``generation_config.json``, what its authors recommend; a Thinking
    model then samples as Qwen advises instead of decoding greedily). Text comes from each chunk's
    ``delta.content``, calls a tool parser moved into ``delta.tool_calls`` are written back into it
    (``server_answer``); a reasoning
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
        sampling: decoding fields sent with every request (``temperature``, ``top_p``, ``top_k``, ``seed``), or
            none (``None``/empty: the server's own).

    Attributes:
        image_limits: the limits every image is fitted to.
        sends_stream_options: False once the server refused ``stream_options`` (then never sent again).
        gate: how many requests are let through at once (lowered after a 429; ``server_gate``), shared with the
            views ``with_sampling`` makes.

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
        sampling: Mapping[str, float | int] | None = None,
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
        self.sampling = dict(sampling or {})
        self.sends_stream_options = True
        self.tools: list[dict[str, Any]] = []  # function schemas sent as "tools" (``with_tools``)
        self.gate = RequestGate()
        self._encoded: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._encoded_lock = threading.Lock()

    def with_sampling(self, sampling: Mapping[str, float | int] | None,
                      max_new_tokens: int | None = None) -> OpenAIServerVLM:
        """The same server (connection settings, image cache and request gate shared) sending ``sampling``, with
        ``max_new_tokens`` as its default budget (``None``: this one's).

        Raises:
            InputError: ``max_new_tokens`` below 1.
        """
        if max_new_tokens is not None and max_new_tokens < 1:
            raise InputError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
        view = copy.copy(self)
        view.sampling = dict(sampling or {})
        view.max_new_tokens = self.max_new_tokens if max_new_tokens is None else max_new_tokens
        return view

    def with_tools(self, tools: list[dict[str, Any]]) -> OpenAIServerVLM:
        """The same server sending ``tools`` (OpenAI function schemas: the native tool format) with every request;
        the calls its tool parser returns in ``delta.tool_calls`` are read back as usual."""
        view = copy.copy(self)
        view.tools = list(tools)
        return view

    @property
    def tool_schema(self) -> str | None:
        """``"request"`` once ``with_tools`` gave a schema (sent as the request's ``tools``: the server's chat template
        and tool parser decide what the model sees), else ``None``."""
        return "request" if self.tools else None

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
            "max_tokens": self.max_new_tokens if max_new_tokens is None else max_new_tokens,
            **self.sampling,
        }
        if self.tools:
            body["tools"] = self.tools
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
        deadline = [time.monotonic() + self.timeouts.deadline]  # moved on while a request waits for a slot
        for retry in range(self.retry.retries + 1):
            answer = AnswerSoFar()
            yield from self._relay(self._request(messages, limit), stop, answer, deadline)
            calls = answer.calls_text()
            if calls:
                yield calls
            fault = answer.fault(self.where)
            if fault is None:
                break
            if answer.pieces:  # what was streamed cannot be taken back
                raise BackendError(fault + " (not asked again: part of the answer had already been shown)")
            if retry == self.retry.retries:
                raise BackendError(fault + f" ({retry + 1} attempts)")
            wait = self.retry.wait(retry, None)
            logger.info("%s; asking again in %.1f s", fault, wait)
            if stop.wait(wait):
                answer = AnswerSoFar(cancelled=True)
                break
        yield answer.generation(self.where)

    # ------------------------------------------------------------------ internals

    def _relay(self, request: ServerRequest, stop: threading.Event, answer: AnswerSoFar,
               deadline: list[float]) -> Iterator[str]:
        """Run ``request`` in a reader thread and yield its text pieces (recorded in ``answer``) until the answer
        ends or ``stop`` is set; the read is interrupted when it ends early, so the server stops too.
        ``deadline[0]`` (``time.monotonic`` seconds) does not run while the request waits for a slot.

        Raises:
            BackendError: the reader's fault, or the call outlasted its deadline.
        """
        events: queue.Queue[Any] = queue.Queue()
        halt = threading.Event()
        reader = CompletionReader(request, events, halt)
        thread = threading.Thread(target=reader.run, name=f"sse[{self.model}]", daemon=True)
        queued_at: float | None = None
        thread.start()
        try:
            while True:
                event = self._next_event(events, deadline[0] if queued_at is None else float("inf"), answer)
                if event is QUEUED:
                    queued_at = time.monotonic()
                    continue
                if event is ADMITTED and queued_at is not None:
                    deadline[0] += time.monotonic() - queued_at
                    queued_at = None
                    continue
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

    def _next_event(self, events: queue.Queue[Any], deadline: float, answer: AnswerSoFar) -> Any:
        """The reader's next item (a ``Delta``, a ``BackendError`` or ``END``), or ``_NOTHING_YET`` after a short wait.

        Raises:
            BackendError: the deadline (``time.monotonic`` seconds) has passed.
        """
        left = min(deadline - time.monotonic(), _STOP_POLL_SECONDS)
        if left <= 0:
            raise BackendError(
                f"{self.where} did not finish its answer within {self.timeouts.deadline:g} s (the deadline "
                f"of one call; {sum(map(len, answer.pieces))} characters had arrived): raise it with "
                f"--vlm-server-deadline or {TIMEOUT_ENVIRONMENT['deadline']}"
            )
        try:
            return events.get(timeout=left)
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
            unreachable_hint=f"is it running? start it with `vllm serve {self.model}` (see docs/serving.md) and check "
            "the URL, which usually ends in /v1", web_page_hint=self._web_page_hint(), gate=self.gate,
        )

    def _web_page_hint(self) -> str:
        """Where the API usually is, said when the URL answered with a web page."""
        if self.base_url.endswith("/v1"):
            return ("; the API usually lives at .../v1 on the port the server itself listens on (vLLM: 8000, "
                    "Ollama: 11434): check --vlm-server")
        return f"; the API usually lives at .../v1: try --vlm-server {self.base_url}/v1"

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
