"""The HTTP side of a chat-completions call, as servers and proxies really answer it.

``CompletionReader.run`` POSTs one request and turns the answer into ``Delta`` records on a queue, in a
helper thread (``openai_server.OpenAIServerVLM`` consumes them and owns the deadline and the stop event).
What it handles, each with a message that names what happened:

- connection errors, connect timeouts and HTTP 408/500/502/503/504 are retried a bounded number
  of times with exponential backoff, honouring ``Retry-After`` (seconds or an HTTP date, capped);
  waits end at once when the call is abandoned;
- a 429 (too many requests) lowers how many requests the client lets through at once (``server_gate``), and the
  request waits (``Retry-After`` honoured), then queues for a slot: retried up to ``rate_limit_retries`` times;
- a 400/422 that names ``stream_options`` (servers that do not know the field) is retried once without it,
  and the caller is told so that it stops sending the field;
- compressed bodies are decoded (``Accept-Encoding: identity`` is asked for, but proxies may compress
  anyway);
- the body itself, an event stream or one JSON completion, and the size of the answer (``max_tokens`` is
  a request, not a guarantee): ``sse_answer``. The retry policy and the wording of faults: ``server_retry``.

Nothing here raises into the caller: faults are put on the queue as ``BackendError``.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import requests

from ..errors import BackendError
from .server_gate import RequestGate
from .server_retry import RETRY_STATUSES, RetryPolicy, connection_reason, error_hint, excerpt, retry_after
from .sse_answer import AnswerReader

logger = logging.getLogger(__name__)

END = object()  # queue sentinel: the answer is over
QUEUED = object()  # queue marker: the request waits for a slot at the server (``server_gate``)
ADMITTED = object()  # queue marker: after QUEUED, it has one now


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
        web_page_hint: said after "answered with a web page" (where the API usually is).
        gate: the server's slots, shared by the calls of one client (``server_gate.RequestGate``).
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
    web_page_hint: str = ""
    gate: RequestGate = field(default_factory=RequestGate)


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
        self._data = b""  # the request body as sent
        self._retried = 0  # retries after connection failures and RETRY_STATUSES other than 429
        self._rate_limited = 0  # retries after 429 (RetryPolicy.rate_limit_retries)

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
        body = dict(self.request.body)
        self._data = json.dumps(body).encode("utf-8")
        logger.info("POST %s: %s bytes", self.request.url, f"{len(self._data):,}")
        while not self.halt.is_set():
            if not self._enter():
                return
            try:
                pause = self._try(body)
            finally:
                self.request.gate.leave()
            if pause is None:
                return
            self._wait(*pause)  # outside the gate: a request waiting to retry holds no slot

    def _enter(self) -> bool:
        """Take a slot at the server (``server_gate``); a wait for one is marked on the queue (``QUEUED`` ...
        ``ADMITTED``: the caller's deadline does not run meanwhile). False when the call was abandoned."""
        queued = []

        def waiting() -> None:
            queued.append(True)
            self.events.put(QUEUED)

        admitted = self.request.gate.enter(self.halt, waiting)
        if admitted and queued:
            self.events.put(ADMITTED)
        return admitted

    def _try(self, body: dict[str, Any]) -> tuple[float, str] | None:
        """One attempt: ``None`` when the answer was read, else the wait before the next and why.

        Raises:
            BackendError: a failure that is not retried, or the retries are spent.
        """
        request = self.request
        try:
            response = requests.post(
                request.url, data=self._data, headers=request.headers, stream=True,
                timeout=(request.connect_timeout, request.read_timeout),
            )
        except (requests.exceptions.ConnectionError, requests.exceptions.ConnectTimeout) as exc:
            if self._retried < request.retry.retries:
                self._retried += 1
                return request.retry.wait(self._retried - 1, None), f"cannot connect ({connection_reason(exc)})"
            raise BackendError(
                f"cannot reach {request.where} after {self._retried + 1} attempt(s) ({connection_reason(exc)}): "
                f"{request.unreachable_hint}"
            ) from None
        except requests.exceptions.ReadTimeout:
            raise BackendError(
                f"{request.where} did not start answering within {request.read_timeout:g} s (read timeout): "
                "it may be overloaded or the request too large; raise --vlm-server-read-timeout or send "
                "smaller images (--max-pixels)"
            ) from None
        except requests.exceptions.RequestException as exc:
            raise BackendError(f"the request to {request.where} failed: {connection_reason(exc)}") from None
        with self._lock:
            self._response = response
        if response.status_code >= 400:
            return self._refused(response, body)
        request.gate.answered()
        AnswerReader(
            self.events, self.halt, where=request.where, read_timeout=request.read_timeout,
            max_chars=request.max_chars, max_bytes=request.max_bytes, web_page_hint=request.web_page_hint,
        ).read(response)
        return None

    def _refused(self, response: requests.Response, body: dict[str, Any]) -> tuple[float, str]:
        """What to do after an HTTP error: the wait before the next attempt and why.

        Raises:
            BackendError: the error is not retried, or the retries are spent.
        """
        request, status = self.request, response.status_code
        body_start = excerpt(response)
        response.close()
        if "stream_options" in body and status in (400, 422) and "stream_options" in body_start:
            body.pop("stream_options")
            self._data = json.dumps(body).encode("utf-8")
            request.on_stream_options_rejected()
            return 0.0, f"refused stream_options (HTTP {status}), asking again without it"
        if status == 429 and self._rate_limited < request.retry.rate_limit_retries:
            request.gate.too_many()  # fewer requests at once from now on; this one waits, then queues again
            self._rate_limited += 1
            return request.retry.wait(self._rate_limited - 1, retry_after(response)), "HTTP 429"
        if status in RETRY_STATUSES and status != 429 and self._retried < request.retry.retries:
            self._retried += 1
            return request.retry.wait(self._retried - 1, retry_after(response)), f"HTTP {status}"
        attempts = 1 + self._retried + self._rate_limited
        raise BackendError(
            f"{request.where} answered HTTP {status} {response.reason}"
            f"{f' after {attempts} attempts' if attempts > 1 else ''}: {body_start or '(empty body)'}"
            + error_hint(status, body_start, len(self._data))
        )

    def _wait(self, seconds: float, why: str) -> None:
        logger.info("%s: %s; retrying in %.1f s", self.request.where, why, seconds)
        self.halt.wait(seconds)
