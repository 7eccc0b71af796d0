"""Reading a chat-completions answer off the wire: server-sent events, or one JSON body, into ``Delta`` records.

``AnswerReader.read`` decodes a response body and puts its deltas on a queue: server-sent events per the SSE
format (multi-line ``data:``, comments, ``event:`` lines), ``[DONE]`` as the end (a finish reason is then not
required), error chunks in both forms (``{"error": ...}`` and older vLLM's ``{"object": "error", "message":
...}``), chunks whose ``choices`` / ``delta`` do not have the documented shape, and a server that answers a
streaming request with one JSON body. Text beyond ``max_chars`` ends the reply as ``"length"``; a body beyond
``max_bytes`` is a fault (``BackendError``).
"""

from __future__ import annotations

import itertools
import json
import logging
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import requests
import urllib3

from ..errors import BackendError
from .server_retry import connection_reason, short

logger = logging.getLogger(__name__)

_READ_SIZE = 65536  # most bytes taken from the socket at once
_SSE_FIELDS = ("data:", ":", "event:", "id:", "retry:")


@dataclass(frozen=True)
class Delta:
    """One piece of an answer: text, reasoning text, the finish reason when it came, usage when sent."""

    content: str = ""
    reasoning: str = ""
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None


class AnswerReader:
    """Decodes one response body into ``Delta`` s on ``events`` (the caller puts the end marker).

    Args:
        events: the queue the deltas go to.
        halt: set by the consumer: a stream that ends without a finish reason is then not a fault.
        where: how messages name the server.
        read_timeout: seconds of silence allowed between two reads (named in the message when it passes).
        max_chars: most characters of content and reasoning taken; beyond, the answer ends as ``"length"``.
        max_bytes: most bytes of body read; beyond, the call fails.
    """

    def __init__(
        self, events: queue.Queue[Any], halt: threading.Event, *, where: str, read_timeout: float, max_chars: int,
        max_bytes: int,
    ) -> None:
        self.events = events
        self.halt = halt
        self.where = where
        self.read_timeout = read_timeout
        self.max_chars = max_chars
        self.max_bytes = max_bytes
        self._chars = 0  # characters of content and reasoning put on the queue

    def read(self, response: requests.Response) -> None:
        """Decode the body (an event stream, or one JSON completion) into deltas on the queue.

        Raises:
            BackendError: a body that is neither an event stream nor JSON, a malformed or error chunk, a stream
                closed without an end, more than ``max_bytes``, a read timeout or a broken connection.
        """
        lines = body_lines(response, self.max_bytes, self.where, self.read_timeout)
        first = ""
        for first in lines:
            if first.strip():
                break
        if first.lstrip().startswith("{"):  # one JSON completion, although a stream was asked for
            text = "\n".join([first, *lines])
            try:
                completion = json.loads(text)
            except json.JSONDecodeError:
                raise BackendError(f"{self.where} sent a body that is neither an event stream nor JSON: "
                                   f"{text[:200]!r}") from None
            delta = completion_delta(completion, self.where)
            self._put_limited(delta if delta.finish_reason else replace(delta, finish_reason="stop"))  # it is whole
            return
        self._read_events(itertools.chain([first], lines, [""]))  # the blank line ends a last unterminated event

    def _read_events(self, lines: Iterator[str]) -> None:
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
            delta = chunk_delta(event, self.where)
            chunks += 1
            finished = finished or delta.finish_reason is not None
            if not self._put_limited(delta):
                return
        if not finished and not self.halt.is_set():
            raise BackendError(
                f"{self.where} closed the stream after {chunks} chunk(s) without a finish reason or [DONE]: "
                "the answer is incomplete (the server may have crashed or dropped the connection); check its log"
            )

    def _put_limited(self, delta: Delta) -> bool:
        """Put ``delta`` on the queue, cut to the characters left; False once the limit is reached."""
        left = self.max_chars - self._chars
        size = len(delta.content) + len(delta.reasoning)
        if size <= left:
            self._chars += size
            self.events.put(delta)
            return True
        reasoning = delta.reasoning[:left]
        content = delta.content[: max(0, left - len(reasoning))]
        logger.warning("%s sent more than %d characters (more than max_tokens allows); the reply is cut there",
                       self.where, self.max_chars)
        self.events.put(Delta(content, reasoning, "length", delta.usage))
        return False


def chunk_delta(event: str, where: str) -> Delta:
    """The ``Delta`` of one event-stream chunk.

    Raises:
        BackendError: not JSON, an error chunk, or ``choices``/``delta`` not of the documented shape.
    """
    try:
        chunk = json.loads(event)
    except json.JSONDecodeError:
        raise BackendError(f"{where} sent a stream chunk that is not JSON: {event[:200]!r}") from None
    return completion_delta(chunk, where, key="delta")


def completion_delta(chunk: Any, where: str, key: str = "message") -> Delta:
    """The ``Delta`` of a chunk (``key="delta"``) or of a whole completion (``key="message"``)."""
    if not isinstance(chunk, dict):
        raise BackendError(f"{where} sent a malformed chunk (not a JSON object): {short(chunk)}")
    if chunk.get("error"):
        error = chunk["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        raise BackendError(f"{where} reported an error: {short(message)}")
    if chunk.get("object") == "error":  # older vLLM: the error fields at the top level
        raise BackendError(f"{where} reported an error: {short(chunk.get('message', chunk))}")
    choices = chunk.get("choices")
    choices = [] if choices is None else choices
    usage = chunk.get("usage")
    if not isinstance(choices, list) or (usage is not None and not isinstance(usage, dict)):
        raise BackendError(f"{where} sent a malformed chunk (choices must be a list, usage an object): {short(chunk)}")
    content, reasoning, finish = [], [], None
    for choice in choices:
        if not isinstance(choice, dict):
            raise BackendError(f"{where} sent a malformed chunk (a choice is not an object): {short(chunk)}")
        if choice.get("index", 0) != 0:
            continue  # we ask for one choice; ignore any other
        part = choice.get(key) or {}
        if not isinstance(part, dict):
            raise BackendError(f"{where} sent a malformed chunk ({key} is not an object): {short(chunk)}")
        for field_name, target in (("content", content), ("reasoning_content", reasoning), ("reasoning", reasoning)):
            value = part.get(field_name)
            if value is None:
                continue
            if not isinstance(value, str):
                raise BackendError(f"{where} sent a malformed chunk ({key}.{field_name} is not text): {short(chunk)}")
            target.append(value)
            if field_name == "reasoning_content" and value:
                break  # servers that send both names send the same text twice
        reason = choice.get("finish_reason")
        if reason is not None and not isinstance(reason, str):
            raise BackendError(f"{where} sent a malformed chunk (finish_reason is not text): {short(chunk)}")
        finish = reason or finish
    return Delta("".join(content), "".join(reasoning), finish, usage or None)


def body_lines(response: requests.Response, max_bytes: int, where: str, read_timeout: float) -> Iterator[str]:
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
            raise BackendError(f"{where} closed the connection mid-answer: {connection_reason(exc)}") from None
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
