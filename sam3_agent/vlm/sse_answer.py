"""Reading a chat-completions answer off the wire: server-sent events, or one JSON body, into ``Delta`` records.

``AnswerReader.read`` decodes a response body and puts its deltas on a queue: server-sent events per the SSE
format (multi-line ``data:``, comments, ``event:`` lines, lines ended by CRLF, LF or a bare CR), ``[DONE]`` as the
end (a finish reason is then not required), error chunks in both forms (``{"error": ...}`` and older vLLM's
``{"object": "error", "message": ...}``), chunks whose ``choices`` / ``delta`` do not have the documented shape,
calls a server's tool parser moved into ``delta.tool_calls`` (vLLM ``--enable-auto-tool-choice``, Ollama; the
arguments arrive in pieces), a server that answers a streaming request with one JSON body, and a web page (HTML)
where the API was expected. Text beyond ``max_chars`` ends the reply as ``"length"``; a body beyond ``max_bytes``
is a fault (``BackendError``).

Why hand-written: the SSE parsers on the package index (``sseclient-py``, ``httpx-sse``) read the format but none of
the rest (one JSON body, error chunks, the size limits, an HTML page), and the line splitting is a few lines here.
"""

from __future__ import annotations

import itertools
import json
import logging
import queue
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import requests
import urllib3

from ..errors import BackendError
from .server_retry import connection_reason, error_hint, short

logger = logging.getLogger(__name__)

_READ_SIZE = 65536  # most bytes taken from the socket at once
_LINE_END = re.compile(rb"\r\n|\r|\n")  # the SSE format's three line endings
_TITLE = re.compile(r"<title[^>]*>([^<]{1,200})</title>", re.IGNORECASE)
_HTML_PEEK_CHARS = 16384  # how much of a web page is searched for its title


@dataclass(frozen=True)
class CallPiece:
    """A piece of a tool call a server's tool parser sent in ``tool_calls``: the call's position, and its name and a
    piece of its JSON arguments text when they came (the name usually in the first piece, the arguments over many)."""

    index: int
    name: str = ""
    arguments: str = ""


@dataclass(frozen=True)
class Delta:
    """One piece of an answer: text, reasoning text, tool-call pieces, the finish reason when it came, usage when
    sent."""

    content: str = ""
    reasoning: str = ""
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    calls: tuple[CallPiece, ...] = ()


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
        max_bytes: int, web_page_hint: str = "",
    ) -> None:
        self.events = events
        self.halt = halt
        self.where = where
        self.read_timeout = read_timeout
        self.max_chars = max_chars
        self.max_bytes = max_bytes
        self.web_page_hint = web_page_hint
        self._chars = 0  # characters of content, reasoning and call arguments put on the queue

    def read(self, response: requests.Response) -> None:
        """Decode the body (an event stream, or one JSON completion) into deltas on the queue.

        Raises:
            BackendError: a body that is neither an event stream nor JSON (a web page among them), a malformed or
                error chunk, a stream closed without an end, more than ``max_bytes``, a read timeout or a broken
                connection.
        """
        lines = body_lines(response, self.max_bytes, self.where, self.read_timeout)
        first = ""
        for first in lines:
            if first.strip():
                break
        if first.lstrip().startswith("<") or "text/html" in response.headers.get("Content-Type", "").lower():
            raise BackendError(self._web_page(first, lines))
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

    def _web_page(self, first: str, lines: Iterator[str]) -> str:
        """What to say about a web page sent where the API's answer was expected (its title, when it has one)."""
        page = first
        for line in lines:
            page += "\n" + line
            if len(page) > _HTML_PEEK_CHARS:
                break
        title = _TITLE.search(page)
        named = f" titled {' '.join(title.group(1).split())!r}" if title else ""
        return (f"{self.where} answered with a web page{named} (HTML), not the chat-completions API: the URL "
                "probably points at a web UI or a proxy's login page" + self.web_page_hint)

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
        """Put ``delta`` on the queue, cut to the characters left (call pieces beyond the limit dropped); False once
        the limit is reached."""
        left = self.max_chars - self._chars
        size = len(delta.content) + len(delta.reasoning) + sum(len(c.arguments) for c in delta.calls)
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
        raise BackendError(f"{where} reported an error: {short(message)}{error_hint(None, short(message))}")
    if chunk.get("object") == "error":  # older vLLM: the error fields at the top level
        message = short(chunk.get("message", chunk))
        raise BackendError(f"{where} reported an error: {message}{error_hint(None, message)}")
    choices = chunk.get("choices")
    choices = [] if choices is None else choices
    usage = chunk.get("usage")
    if not isinstance(choices, list) or (usage is not None and not isinstance(usage, dict)):
        raise BackendError(f"{where} sent a malformed chunk (choices must be a list, usage an object): {short(chunk)}")
    content, reasoning, calls, finish = [], [], [], None
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
        calls.extend(call_pieces(part.get("tool_calls"), where, key))
        reason = choice.get("finish_reason")
        if reason is not None and not isinstance(reason, str):
            raise BackendError(f"{where} sent a malformed chunk (finish_reason is not text): {short(chunk)}")
        finish = reason or finish
    return Delta("".join(content), "".join(reasoning), finish, usage or None, tuple(calls))


def call_pieces(tool_calls: Any, where: str, key: str = "delta") -> list[CallPiece]:
    """The ``CallPiece`` s of a ``tool_calls`` list (``None``: none). A streamed piece names its call by ``index``;
    a whole message's calls have none and are numbered in order.

    Raises:
        BackendError: ``tool_calls`` that is not a list of objects with a ``function`` object of text fields.
    """
    if tool_calls is None:
        return []
    malformed = f"{where} sent a malformed chunk ({key}.tool_calls must be a list of calls with a function " \
                f"object whose name and arguments are text): {short(tool_calls)}"
    if not isinstance(tool_calls, list):
        raise BackendError(malformed)
    pieces = []
    for position, call in enumerate(tool_calls):
        function = call.get("function") if isinstance(call, dict) else None
        index = call.get("index", position) if isinstance(call, dict) else None
        if function is None and isinstance(call, dict):
            function = {}
        if not isinstance(function, dict) or not isinstance(index, int):
            raise BackendError(malformed)
        name, arguments = function.get("name") or "", function.get("arguments") or ""
        if isinstance(arguments, dict):  # Ollama's native form sends the arguments as an object
            arguments = json.dumps(arguments, ensure_ascii=False)
        if not isinstance(name, str) or not isinstance(arguments, str):
            raise BackendError(malformed)
        pieces.append(CallPiece(index, name, arguments))
    return pieces


def body_lines(response: requests.Response, max_bytes: int, where: str, read_timeout: float) -> Iterator[str]:
    """The lines of a body as soon as each is complete (``\\r\\n``, ``\\n`` or a bare ``\\r`` ending, as the SSE format
    allows), content encodings undone.

    ``iter_lines`` waits for 512-byte blocks on close-delimited bodies; ``read1`` returns what has arrived.

    Raises:
        BackendError: more than ``max_bytes``, a read timeout, a broken connection or an undecodable body.
    """
    raw = response.raw
    buffer = b""
    total = 0
    after_cr = False  # the last read ended with a CR
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
        buffer += data[1:] if after_cr and data.startswith(b"\n") else data  # the LF of a CRLF split by the read
        after_cr = buffer.endswith(b"\r")
        *complete, buffer = _LINE_END.split(buffer)
        for line in complete:
            yield line.decode("utf-8", errors="replace")
    if buffer:
        yield buffer.decode("utf-8", errors="replace")
