"""A VLM served over an OpenAI-compatible chat-completions API (vLLM, SGLang, llama.cpp server...).

Requests are streamed (server-sent events); images travel as base64 PNG data URLs. Reading runs
in a helper thread so that a set ``stop`` event ends the call at once, whatever the server does.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import queue
import threading
from typing import Any, Iterator, Sequence

import requests
from PIL import Image

from ..errors import BackendError, InputError
from ..types import Generation, Message
from .base import StreamItem, chat_messages

logger = logging.getLogger(__name__)

_STOP_POLL_SECONDS = 0.05  # how often a waiting call checks its stop event
_BODY_EXCERPT_CHARS = 500  # how much of an HTTP error body goes into the error message
_THINK_END = "</think>"
_READ_SIZE = 65536  # most bytes taken from the socket at once

_END = object()  # queue sentinel: the stream is over


def image_data_url(image: Image.Image) -> str:
    """A ``data:image/png;base64,...`` URL holding ``image`` losslessly (PNG, its own mode and size)."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def to_openai_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages in the chat-completions format: images as
    ``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}`` items (see ``base.chat_messages``)."""
    return chat_messages(messages, lambda image: {"type": "image_url", "image_url": {"url": image_data_url(image)}})


class OpenAIServerVLM:
    """A chat model behind ``POST {base_url}/chat/completions`` with ``"stream": true``.

    Decoding uses temperature 0. Text comes from each chunk's ``delta.content``; a reasoning
    server (vLLM with a reasoning parser) sends the thinking as ``delta.reasoning_content`` (or
    ``delta.reasoning``): that text is streamed too, and ``</think>`` is inserted where the
    answer begins, so the text has the form a Thinking model writes itself
    (``reasoning</think>answer``, opening tag already in the prompt).

    Args:
        base_url: the API root, e.g. ``"http://127.0.0.1:8000/v1"``.
        model: the served model name sent as ``"model"``.
        api_key: sent as ``Authorization: Bearer ...`` when given.
        timeout: seconds to connect and to wait for each piece of the answer.
        max_new_tokens: default output-token limit (``max_tokens``) of a call.

    Raises:
        InputError: ``base_url`` without ``http://``/``https://``, or ``max_new_tokens`` below 1.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 120.0,
        max_new_tokens: int = 1024,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise InputError(f"base_url must start with http:// or https://, got {base_url!r}")
        if max_new_tokens < 1:
            raise InputError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.name = model
        self.api_key = api_key
        self.timeout = timeout
        self.max_new_tokens = max_new_tokens

    @property
    def url(self) -> str:
        """The chat-completions endpoint."""
        return self.base_url + "/chat/completions"

    def request_body(self, messages: Sequence[Message], max_new_tokens: int | None = None) -> dict[str, Any]:
        """The JSON body sent for ``messages``."""
        return {
            "model": self.model,
            "messages": to_openai_messages(messages),
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": 0,
            "max_tokens": self.max_new_tokens if max_new_tokens is None else max_new_tokens,
        }

    def stream(
        self,
        messages: Sequence[Message],
        *,
        max_new_tokens: int | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[StreamItem]:
        """Send the conversation and yield the answer in pieces, then one ``Generation``.

        ``finish_reason`` is ``"length"`` when the server says so, ``"cancelled"`` when ``stop``
        was set (the connection is closed at once), else ``"stop"``. Token counts come from the
        server's usage report (``None`` when it sends none).

        Raises:
            BackendError: the server cannot be reached, times out, answers an HTTP error (the
                message includes the start of its body), reports an error in the stream, or ends
                the stream without a finish reason.
        """
        stop = stop if stop is not None else threading.Event()
        if stop.is_set():
            yield Generation("", "cancelled", None, 0)
            return
        body = self.request_body(messages, max_new_tokens)
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"

        events: queue.Queue = queue.Queue()
        holder: dict[str, requests.Response] = {}
        reader = threading.Thread(
            target=self._read, args=(body, headers, events, holder), name=f"sse[{self.model}]", daemon=True
        )
        reader.start()
        pieces: list[str] = []
        finish: str | None = None
        usage: dict[str, Any] = {}
        in_reasoning = False
        cancelled = False
        try:
            while True:
                try:
                    event = events.get(timeout=_STOP_POLL_SECONDS)
                except queue.Empty:
                    if stop.is_set():
                        cancelled = True
                        break
                    continue
                if event is _END:
                    break
                if isinstance(event, BackendError):
                    raise event
                if stop.is_set():
                    cancelled = True
                    break
                if event.get("usage"):
                    usage = event["usage"]
                for choice in event.get("choices") or []:
                    delta = choice.get("delta") or {}
                    content = delta.get("content") or ""
                    reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
                    piece = ""
                    if reasoning:
                        piece, in_reasoning = reasoning, True
                    if content:
                        piece += (_THINK_END if in_reasoning else "") + content
                        in_reasoning = False
                    if piece:
                        pieces.append(piece)
                        yield piece
                    if choice.get("finish_reason"):
                        finish = choice["finish_reason"]
        finally:
            if reader.is_alive():
                _interrupt(holder.get("response"))  # stopped early: end the read, so the server stops too

        prompt_tokens = usage.get("prompt_tokens")
        output_tokens = usage.get("completion_tokens")
        if cancelled:
            yield Generation("".join(pieces), "cancelled", prompt_tokens, output_tokens)
            return
        if finish is None:
            raise BackendError(
                f"the VLM server at {self.base_url} (model {self.model}) ended the stream without a finish reason "
                "(connection dropped?): check the server log"
            )
        yield Generation("".join(pieces), "length" if finish == "length" else "stop", prompt_tokens, output_tokens)

    # ------------------------------------------------------------------ reader thread

    def _read(
        self,
        body: dict[str, Any],
        headers: dict[str, str],
        events: "queue.Queue[Any]",
        holder: dict[str, requests.Response],
    ) -> None:
        """POST the request and put each decoded SSE chunk on ``events``, then ``_END``.

        Errors are put on the queue as ``BackendError`` (then ``_END``); nothing is raised here.
        """
        where = f"the VLM server at {self.base_url} (model {self.model})"
        try:
            response = requests.post(self.url, json=body, headers=headers, stream=True, timeout=self.timeout)
            holder["response"] = response
            if response.status_code >= 400:
                excerpt = response.text[:_BODY_EXCERPT_CHARS].strip()
                raise BackendError(
                    f"{where} answered HTTP {response.status_code} {response.reason}: {excerpt or '(empty body)'}"
                    + _http_hint(response.status_code, self.model)
                )
            for line in _lines(response):
                if not line or not line.startswith("data:"):
                    continue  # blank separators, ": keep-alive" comments, "event:" lines
                data = line[len("data:"):].strip()
                if data == "[DONE]":
                    break
                try:
                    chunk = json.loads(data)
                except json.JSONDecodeError:
                    raise BackendError(f"{where} sent a malformed stream chunk: {data[:200]!r}") from None
                if isinstance(chunk, dict) and chunk.get("error"):
                    raise BackendError(f"{where} reported an error: {json.dumps(chunk['error'])[:_BODY_EXCERPT_CHARS]}")
                if isinstance(chunk, dict):
                    events.put(chunk)
        except BackendError as exc:
            events.put(exc)
        except requests.exceptions.ConnectionError as exc:
            if "response" in holder:  # connected, then lost (or closed by us on stop)
                events.put(BackendError(f"{where} closed the connection mid-answer: {exc}"))
            else:
                events.put(BackendError(
                    f"cannot reach {where}: is it running? start it with `vllm serve {self.model}` "
                    f"and check the URL ({type(exc).__name__})"
                ))
        except requests.exceptions.Timeout as exc:
            events.put(BackendError(
                f"{where} did not answer within {self.timeout:g} s: the server may be overloaded or the "
                f"request too large; raise the timeout or reduce the image size ({type(exc).__name__})"
            ))
        except requests.exceptions.RequestException as exc:
            events.put(BackendError(f"request to {where} failed: {type(exc).__name__}: {exc}"))
        except Exception as exc:  # e.g. a socket error after we closed the response on stop
            events.put(BackendError(f"reading the answer of {where} failed: {type(exc).__name__}: {exc}"))
        finally:
            if "response" in holder:
                holder["response"].close()  # here, not in the caller: close() waits for a blocked read
            events.put(_END)


def _interrupt(response: requests.Response | None) -> None:
    """Unblock a read of ``response`` running in another thread (socket shut down for reading).

    The reading thread then sees the end of the body and closes the connection, which tells the
    server to abort the request. Does nothing before the response headers arrived.
    """
    if response is None:
        return
    try:
        response.raw.shutdown()  # urllib3 >= 2.3
    except (AttributeError, ValueError, RuntimeError, OSError) as exc:
        logger.debug("could not interrupt the read of a cancelled request: %s", exc)


def _lines(response: requests.Response) -> Iterator[str]:
    """The lines of a streamed body as soon as each is complete (``\r\n`` or ``\n`` endings).

    ``iter_lines`` waits for 512-byte blocks on close-delimited bodies; ``read1`` returns what
    has arrived (urllib3 2), with chunked transfer encoding and content encodings undone.
    """
    raw = response.raw
    if not hasattr(raw, "read1"):  # urllib3 1.x
        yield from response.iter_lines(decode_unicode=True)
        return
    buffer = b""
    while True:
        data = raw.read1(_READ_SIZE)
        if not data:
            break
        buffer += data
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            yield line.rstrip(b"\r").decode("utf-8", errors="replace")
    if buffer:
        yield buffer.rstrip(b"\r").decode("utf-8", errors="replace")


def _http_hint(status: int, model: str) -> str:
    if status in (401, 403):
        return " (check the API key)"
    if status == 404:
        return f" (check the base URL, usually ending in /v1, and that the server serves the model {model!r})"
    return ""
