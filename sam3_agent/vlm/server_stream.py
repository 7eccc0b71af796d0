"""The HTTP side of a chat-completions call, as servers and proxies really answer it.

``CompletionReader.run`` POSTs one request and turns the answer into ``Delta`` records on a queue, in a
helper thread (``openai_server.OpenAIServerVLM`` consumes them and owns the deadline and the stop event).
What it handles, each with a message that names what happened:

- connection errors, connect timeouts and HTTP 408/429/500/502/503/504 are retried a bounded number
  of times with exponential backoff, honouring ``Retry-After`` (seconds or an HTTP date, capped);
  waits end at once when the call is abandoned;
- a 400/422 that names ``stream_options`` (servers that do not know the field) is retried once without it,
  and the caller is told so that it stops sending the field;
- compressed bodies are decoded (``Accept-Encoding: identity`` is asked for, but proxies may compress
  anyway); a server that answers a streaming request with one JSON body is read as that body;
- server-sent events per the SSE format (multi-line ``data:``, comments, ``event:`` lines), ``[DONE]`` as
  the end (a finish reason is then not required), error chunks in both forms (``{"error": ...}`` and
  older vLLM's ``{"object": "error", "message": ...}``), and chunks whose ``choices`` / ``delta`` do not
  have the documented shape;
- the size of the answer: text beyond ``max_chars`` ends the reply as ``"length"`` (``max_tokens`` is a
  request, not a guarantee), and a body beyond ``max_bytes`` is a fault.

Nothing here raises into the caller: faults are put on the queue as ``BackendError``.
"""

from __future__ import annotations

import email.utils
import itertools
import json
import logging
import queue
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import requests
import urllib3

from ..errors import BackendError

logger = logging.getLogger(__name__)

EXCERPT_CHARS = 500  # how much of a server's error body goes into a message
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})  # the statuses the official OpenAI clients retry
_READ_SIZE = 65536  # most bytes taken from the socket at once
_SSE_FIELDS = ("data:", ":", "event:", "id:", "retry:")

END = object()  # queue sentinel: the answer is over


@dataclass(frozen=True)
class RetryPolicy:
    """How failed attempts are retried.

    Attributes:
        retries: further attempts after the first (connection errors, connect timeouts, ``RETRY_STATUSES``).
        backoff: seconds before the first retry; doubled for each further one (0.5 s, 1 s, 2 s...).
        max_backoff: the longest backoff wait.
        max_retry_after: the longest wait a server's ``Retry-After`` may ask for (longer asks are capped).
    """

    retries: int = 2
    backoff: float = 0.5
    max_backoff: float = 8.0
    max_retry_after: float = 30.0

    def wait(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        return min(self.backoff * 2**attempt, self.max_backoff)


@dataclass(frozen=True)
class Delta:
    """One piece of an answer: text, reasoning text, the finish reason when it came, usage when sent."""

    content: str = ""
    reasoning: str = ""
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None


@dataclass(frozen=True)
class ServerRequest:
    """One chat-completions call.

    Attributes:
        url: the endpoint (``.../chat/completions``).
        body: the JSON body.
        headers: HTTP headers (content type, authorisation...).
        where: how messages name the server (``"the VLM server at URL (model M)"``).
        connect_timeout / read_timeout: seconds to connect; seconds of silence allowed between two reads.
        retry: the retry policy.
        max_chars: most characters of content and reasoning taken; beyond, the answer ends as ``"length"``.
        max_bytes: most bytes of body read; beyond, the call fails.
        on_stream_options_rejected: called when the server refused ``stream_options`` (retried without it).
        unreachable_hint: what to do when the server cannot be reached (e.g. how to start it).
    """

    url: str
    body: dict[str, Any]
    headers: dict[str, str]
    where: str
    connect_timeout: float
    read_timeout: float
    retry: RetryPolicy
    max_chars: int
    max_bytes: int
    on_stream_options_rejected: Callable[[], None] = lambda: None
    unreachable_hint: str = "is it running, and is the URL right?"


class CompletionReader:
    """Runs one ``ServerRequest`` (in a helper thread) and puts ``Delta`` s, then ``END``, on ``events``.

    ``halt`` set by the consumer ends retry waits at once and stops further attempts; ``interrupt()``
    ends a blocked read of the response (from another thread).
    """

    def __init__(self, request: ServerRequest, events: queue.Queue[Any], halt: threading.Event) -> None:
        self.request = request
        self.events = events
        self.halt = halt
        self._response: requests.Response | None = None
        self._lock = threading.Lock()
        self._chars = 0  # characters of content and reasoning put on the queue

    def run(self) -> None:
        try:
            self._attempts()
        except BackendError as fault:
            self.events.put(fault)
        except Exception as exc:  # a socket error after an interrupt, a decoder fault...: never lost
            if not self.halt.is_set():
                self.events.put(BackendError(f"reading the answer of {self.request.where} failed: {exc}"))
        finally:
            with self._lock:
                if self._response is not None:
                    self._response.close()
            self.events.put(END)

    def interrupt(self) -> None:
        """Unblock a read of the response running in the reader thread (socket shut down for reading); the
        reader then closes the connection, which tells the server to abort. Nothing before headers arrived."""
        with self._lock:
            response = self._response
        if response is None:
            return
        try:
            response.raw.shutdown()  # urllib3 >= 2.3
        except (AttributeError, ValueError, RuntimeError, OSError) as exc:
            logger.debug("could not interrupt the read of an abandoned request: %s", exc)

    # ------------------------------------------------------------------ attempts

    def _attempts(self) -> None:
        request = self.request
        body = dict(request.body)
        attempt = 0
        data = json.dumps(body).encode("utf-8")
        logger.info("POST %s: %s bytes", request.url, f"{len(data):,}")
        while not self.halt.is_set():
            try:
                response = requests.post(
                    request.url, data=data, headers=request.headers, stream=True,
                    timeout=(request.connect_timeout, request.read_timeout),
                )
            except (requests.exceptions.ConnectionError, requests.exceptions.ConnectTimeout) as exc:
                if attempt < request.retry.retries:
                    self._wait(request.retry.wait(attempt, None), f"cannot connect ({_reason(exc)})")
                    attempt += 1
                    continue
                raise BackendError(
                    f"cannot reach {request.where} after {attempt + 1} attempt(s) ({_reason(exc)}): "
                    f"{request.unreachable_hint}"
                ) from None
            except requests.exceptions.ReadTimeout:
                raise BackendError(
                    f"{request.where} did not start answering within {request.read_timeout:g} s (read timeout): "
                    "it may be overloaded or the request too large; raise --vlm-server-read-timeout or send "
                    "smaller images (--max-pixels)"
                ) from None
            except requests.exceptions.RequestException as exc:
                raise BackendError(f"the request to {request.where} failed: {_reason(exc)}") from None
            with self._lock:
                self._response = response
            if response.status_code < 400:
                self._read(response)
                return
            excerpt = _excerpt(response)
            response.close()
            if "stream_options" in body and response.status_code in (400, 422) and "stream_options" in excerpt:
                logger.info("%s refused stream_options (HTTP %d); retrying without it", request.where,
                            response.status_code)
                body.pop("stream_options")
                data = json.dumps(body).encode("utf-8")
                request.on_stream_options_rejected()
                continue
            if response.status_code in RETRY_STATUSES and attempt < request.retry.retries:
                wait = request.retry.wait(attempt, _retry_after(response))
                self._wait(wait, f"HTTP {response.status_code}")
                attempt += 1
                continue
            raise BackendError(
                f"{request.where} answered HTTP {response.status_code} {response.reason}"
                f"{f' after {attempt + 1} attempts' if attempt else ''}: {excerpt or '(empty body)'}"
                + _http_hint(response.status_code)
            )

    def _wait(self, seconds: float, why: str) -> None:
        logger.info("%s: %s; retrying in %.1f s", self.request.where, why, seconds)
        self.halt.wait(seconds)

    # ------------------------------------------------------------------ the body

    def _read(self, response: requests.Response) -> None:
        """Decode the body (an event stream, or one JSON completion) into deltas on the queue."""
        request = self.request
        lines = _lines(response, request.max_bytes, request.where, request.read_timeout)
        first = ""
        for first in lines:
            if first.strip():
                break
        if first.lstrip().startswith("{"):  # one JSON completion, although a stream was asked for
            text = "\n".join([first, *lines])
            try:
                completion = json.loads(text)
            except json.JSONDecodeError:
                raise BackendError(f"{request.where} sent a body that is neither an event stream nor JSON: "
                                   f"{text[:200]!r}") from None
            delta = _completion_delta(completion, request.where)
            self._put_limited(delta if delta.finish_reason else replace(delta, finish_reason="stop"))  # it is whole
            return
        self._read_events(itertools.chain([first], lines, [""]))  # the blank line ends a last unterminated event

    def _read_events(self, lines: Iterator[str]) -> None:
        request = self.request
        data: list[str] = []
        chunks = 0
        finished = False
        for line in lines:
            if line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
                continue
            if line.strip() or not data:
                continue  # comments (": keep-alive"), event:/id:/retry: fields, blank lines between events
            event, data = "\n".join(data), []
            if event.strip() == "[DONE]":  # the end, with or without a finish reason before it
                if not finished:
                    self.events.put(Delta(finish_reason="stop"))
                return
            delta = _chunk_delta(event, request.where)
            chunks += 1
            finished = finished or delta.finish_reason is not None
            if not self._put_limited(delta):
                return
        if not finished and not self.halt.is_set():
            raise BackendError(
                f"{request.where} closed the stream after {chunks} chunk(s) without a finish reason or [DONE]: "
                "the answer is incomplete (the server may have crashed or dropped the connection); check its log"
            )

    def _put_limited(self, delta: Delta) -> bool:
        """Put ``delta`` on the queue, cut to the characters left; False once the limit is reached."""
        left = self.request.max_chars - self._chars
        size = len(delta.content) + len(delta.reasoning)
        if size <= left:
            self._chars += size
            self.events.put(delta)
            return True
        reasoning = delta.reasoning[:left]
        content = delta.content[: max(0, left - len(reasoning))]
        logger.warning("%s sent more than %d characters (more than max_tokens allows); the reply is cut there",
                       self.request.where, self.request.max_chars)
        self.events.put(Delta(content, reasoning, "length", delta.usage))
        return False


# ---------------------------------------------------------------- wire format


def _chunk_delta(event: str, where: str) -> Delta:
    """The ``Delta`` of one event-stream chunk.

    Raises:
        BackendError: not JSON, an error chunk, or ``choices``/``delta`` not of the documented shape.
    """
    try:
        chunk = json.loads(event)
    except json.JSONDecodeError:
        raise BackendError(f"{where} sent a stream chunk that is not JSON: {event[:200]!r}") from None
    return _completion_delta(chunk, where, key="delta")


def _completion_delta(chunk: Any, where: str, key: str = "message") -> Delta:
    """The ``Delta`` of a chunk (``key="delta"``) or of a whole completion (``key="message"``)."""
    if not isinstance(chunk, dict):
        raise BackendError(f"{where} sent a malformed chunk (not a JSON object): {_short(chunk)}")
    if chunk.get("error"):
        error = chunk["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        raise BackendError(f"{where} reported an error: {_short(message)}")
    if chunk.get("object") == "error":  # older vLLM: the error fields at the top level
        raise BackendError(f"{where} reported an error: {_short(chunk.get('message', chunk))}")
    choices = chunk.get("choices")
    choices = [] if choices is None else choices
    usage = chunk.get("usage")
    if not isinstance(choices, list) or (usage is not None and not isinstance(usage, dict)):
        raise BackendError(f"{where} sent a malformed chunk (choices must be a list, usage an object): {_short(chunk)}")
    content, reasoning, finish = [], [], None
    for choice in choices:
        if not isinstance(choice, dict):
            raise BackendError(f"{where} sent a malformed chunk (a choice is not an object): {_short(chunk)}")
        if choice.get("index", 0) != 0:
            continue  # we ask for one choice; ignore any other
        part = choice.get(key) or {}
        if not isinstance(part, dict):
            raise BackendError(f"{where} sent a malformed chunk ({key} is not an object): {_short(chunk)}")
        for field_name, target in (("content", content), ("reasoning_content", reasoning), ("reasoning", reasoning)):
            value = part.get(field_name)
            if value is None:
                continue
            if not isinstance(value, str):
                raise BackendError(f"{where} sent a malformed chunk ({key}.{field_name} is not text): {_short(chunk)}")
            target.append(value)
            if field_name == "reasoning_content" and value:
                break  # servers that send both names send the same text twice
        reason = choice.get("finish_reason")
        if reason is not None and not isinstance(reason, str):
            raise BackendError(f"{where} sent a malformed chunk (finish_reason is not text): {_short(chunk)}")
        finish = reason or finish
    return Delta("".join(content), "".join(reasoning), finish, usage or None)


def _lines(response: requests.Response, max_bytes: int, where: str, read_timeout: float) -> Iterator[str]:
    """The lines of a body as soon as each is complete (``\\r\\n`` or ``\\n`` endings), content encodings undone.

    ``iter_lines`` waits for 512-byte blocks on close-delimited bodies; ``read1`` returns what has arrived.

    Raises:
        BackendError: more than ``max_bytes``, a read timeout, a broken connection or an undecodable body.
    """
    raw = response.raw
    buffer = b""
    total = 0
    while True:
        try:
            data = raw.read1(_READ_SIZE, decode_content=True)
        except (urllib3.exceptions.ReadTimeoutError, TimeoutError):
            raise BackendError(f"{where} sent nothing for {read_timeout:g} s in the middle of its answer "
                               "(read timeout, --vlm-server-read-timeout)") from None
        except urllib3.exceptions.DecodeError as exc:
            raise BackendError(f"{where} sent a compressed body that does not decode: {exc}") from None
        except (urllib3.exceptions.ProtocolError, ConnectionError) as exc:
            raise BackendError(f"{where} closed the connection mid-answer: {_reason(exc)}") from None
        if not data:
            break
        total += len(data)
        if total > max_bytes:
            raise BackendError(f"{where} sent more than {max_bytes:,} bytes for one answer; the call was stopped "
                               "(a server that ignores max_tokens or never ends its stream)")
        buffer += data
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            yield line.rstrip(b"\r").decode("utf-8", errors="replace")
    if buffer:
        yield buffer.rstrip(b"\r").decode("utf-8", errors="replace")


def _excerpt(response: requests.Response) -> str:
    """The start of an error body (bounded read; never the whole of a huge body)."""
    try:
        data = response.raw.read(EXCERPT_CHARS * 4, decode_content=True) or b""
    except (urllib3.exceptions.HTTPError, OSError):
        return ""
    return data.decode("utf-8", errors="replace").strip()[:EXCERPT_CHARS]


def _retry_after(response: requests.Response) -> float | None:
    """Seconds asked for by ``Retry-After`` (seconds or an HTTP date), or ``None``."""
    value = (response.headers.get("Retry-After") or "").strip()
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return when.timestamp() - time.time()


def _http_hint(status: int) -> str:
    if status in (401, 403):
        return " (check the API key: OPENAI_API_KEY)"
    if status == 404:
        return " (check the base URL, usually ending in /v1, and that the server serves this model name)"
    if status == 413:
        return " (the request is too large: lower --max-pixels)"
    return ""


def _reason(exc: BaseException) -> str:
    """A connection failure as a short reason a user can act on (never a Python class name)."""
    text = str(exc)
    logger.debug("connection failure: %r", exc)
    errno = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", text)
    if errno:
        return errno.group(1).strip()
    lowered = text.lower()
    if "timed out" in lowered or "timeout" in lowered:
        return "timed out"
    if "remotedisconnected" in lowered or "without response" in lowered:
        return "the server closed the connection without answering"
    if "incompleteread" in lowered or "connection broken" in lowered or "reset" in lowered:
        return "the connection broke off"
    return "the connection failed"


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 3] + "..."
