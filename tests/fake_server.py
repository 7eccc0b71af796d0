"""A real local HTTP server that answers chat-completions requests the ways real servers and proxies do.

Each test says how the server answers with ``FakeServer.answer(...)`` (one handler for every request) or
``FakeServer.answers(...)`` (one per request in order, the last one repeated). Handlers write to a real
socket through ``http.server``: chunked event streams, gzip, JSON bodies, errors, stalls, endless drips.
Nothing here sleeps to make a test pass: stalls wait on ``release`` (set at teardown) or for the client to
hang up.
"""

from __future__ import annotations

import json
import threading
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Handler = Callable[[BaseHTTPRequestHandler, dict[str, Any]], None]


def chunk(content: str | None = None, finish: str | None = None, **delta_extra: Any) -> dict[str, Any]:
    """A ``chat.completion.chunk`` with one choice."""
    delta: dict[str, Any] = dict(delta_extra)
    if content is not None:
        delta["content"] = content
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"id": "c1", "object": "chat.completion.chunk", "choices": [choice]}


def tool_call_chunks(name: str, parameters: dict[str, Any], content: str = "", pieces: int = 3,
                     finish: str = "tool_calls") -> list[dict[str, Any]]:
    """A call as vLLM's tool parser (``--tool-call-parser hermes``) streams it: any text before the call as content,
    then the call's id and name, then its JSON arguments in ``pieces`` pieces, then the finish reason."""
    arguments = json.dumps(parameters)
    size = -(-len(arguments) // pieces)
    items = [chunk(content)] if content else []
    items.append(chunk("", None, tool_calls=[{"index": 0, "id": "chatcmpl-tool-1", "type": "function",
                                              "function": {"name": name}}]))
    items += [chunk(None, None, tool_calls=[{"index": 0, "function": {"arguments": arguments[i:i + size]}}])
              for i in range(0, len(arguments), size)]
    return items + [chunk("", finish)]


def usage_chunk(prompt: int, completion: int) -> dict[str, Any]:
    return {"id": "c1", "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                                 "total_tokens": prompt + completion}}


def sse(items: list[Any], done: bool = True) -> list[bytes]:
    """Events of an SSE body: one ``data:`` event per item (dicts as JSON, strings as written; bytes are sent
    as they are, e.g. a ``: keep-alive`` comment), then [DONE]."""
    events = [i if isinstance(i, bytes) else
              b"data: " + (json.dumps(i) if not isinstance(i, str) else i).encode() + b"\r\n\r\n" for i in items]
    return events + ([b"data: [DONE]\r\n\r\n"] if done else [])


def _chunked(handler: BaseHTTPRequestHandler, data: bytes) -> None:
    handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
    handler.wfile.flush()


class FakeServer:
    """A chat-completions server on 127.0.0.1; ``bodies`` and ``headers`` record every request."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        self.release = threading.Event()  # lets stalled answers finish at teardown
        self._handlers: list[Handler] = [lambda h, body: None]
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep pytest output clean
                pass

            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                body = json.loads(self.rfile.read(length))
                with server._lock:
                    index = len(server.bodies)
                    server.bodies.append(body)
                    server.headers.append(dict(self.headers))
                    server.paths.append(self.path)
                    handler = server._handlers[min(index, len(server._handlers) - 1)]
                try:
                    handler(self, body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client hung up (stop, deadline, limit)
                self.close_connection = True  # one request per connection: no keep-alive wait

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def requests(self) -> int:
        return len(self.bodies)

    def answer(self, handler: Handler) -> None:
        self._handlers = [handler]

    def answers(self, *handlers: Handler) -> None:
        self._handlers = list(handlers)

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    # ------------------------------------------------------------------ handlers

    def events(self, items: list[Any], *, done: bool = True, stall_after: int | None = None, gzip: bool = False,
               content_type: str = "text/event-stream") -> Handler:
        """An event stream (chunked), optionally gzip-compressed (flushed per event, as proxies do) and stalled
        after ``stall_after`` events until ``release``."""

        def handle(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
            handler.send_response(200)
            handler.send_header("Content-Type", content_type)
            handler.send_header("Transfer-Encoding", "chunked")
            if gzip:
                handler.send_header("Content-Encoding", "gzip")
            handler.end_headers()
            compressor = zlib.compressobj(wbits=31) if gzip else None
            for i, event in enumerate(sse(items, done)):
                if stall_after is not None and i == stall_after:
                    self.release.wait(30)
                if compressor is not None:
                    event = compressor.compress(event) + compressor.flush(zlib.Z_SYNC_FLUSH)
                _chunked(handler, event)
            if compressor is not None:
                _chunked(handler, compressor.flush())
            _chunked(handler, b"")

        return handle

    def forever(self, event: bytes, every: float) -> Handler:
        """An event stream that repeats ``event`` every ``every`` seconds until the client hangs up."""

        def handle(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
            handler.send_response(200)
            handler.send_header("Content-Type", "text/event-stream")
            handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()
            while not self.release.is_set():
                _chunked(handler, event)
                self.release.wait(every)

        return handle

    def json_body(self, payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Handler:
        """One JSON body (a completion, or an error with ``status``)."""

        def handle(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
            data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(data)

        return handle

    def html_page(self, page: str, status: int = 200) -> Handler:
        """A web page (a web UI, a proxy's login or error page) as ``text/html``."""

        def handle(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
            data = page.encode()
            handler.send_response(status)
            handler.send_header("Content-Type", "text/html; charset=utf-8")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)

        return handle

    def hang_up(self) -> Handler:
        """Close the connection without any answer."""

        def handle(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
            handler.close_connection = True
            handler.connection.close()

        return handle

    def stall_before_headers(self) -> Handler:
        def handle(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
            self.release.wait(30)

        return handle


def completion(content: str, finish: str = "stop", reasoning: str | None = None) -> dict[str, Any]:
    """A non-streamed ``chat.completion`` body."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return {"id": "c1", "object": "chat.completion", "choices": [{"index": 0, "message": message,
                                                                  "finish_reason": finish}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 7, "total_tokens": 57}}
