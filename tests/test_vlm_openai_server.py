"""OpenAIServerVLM against a real local HTTP server that speaks the streaming chat-completions protocol."""

from __future__ import annotations

import base64
import io
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

import pytest
from PIL import Image

from sam3_agent.errors import BackendError, InputError
from sam3_agent.types import Generation, ImagePart, Message, TextPart, images_equal
from sam3_agent.vlm.base import generate
from sam3_agent.vlm.openai_server import OpenAIServerVLM

ASSETS = Path(__file__).resolve().parent.parent / "assets"


def chunk(content: str | None = None, finish: str | None = None, **delta_extra: Any) -> dict[str, Any]:
    delta: dict[str, Any] = dict(delta_extra)
    if content is not None:
        delta["content"] = content
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"id": "c1", "object": "chat.completion.chunk", "choices": [choice]}


def usage_chunk(prompt: int, completion: int) -> dict[str, Any]:
    return {"id": "c1", "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                                 "total_tokens": prompt + completion}}


class FakeServer:
    """A chat-completions server on 127.0.0.1 whose answer each test sets with ``reply``."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.release = threading.Event()  # lets a stalled answer finish at teardown
        self.reply: Callable[[BaseHTTPRequestHandler], None] = lambda h: None
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep pytest output clean
                pass

            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                server.bodies.append(json.loads(self.rfile.read(length)))
                server.headers.append(dict(self.headers))
                server.path = self.path
                server.reply(self)
                self.close_connection = True  # one request per connection: no keep-alive wait

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def stream_chunks(self, chunks: list[dict[str, Any]], *, done: bool = True, stall_after: int | None = None):
        """Answer with these SSE chunks (then ``[DONE]``); optionally stall after ``stall_after`` chunks."""

        def send(handler: BaseHTTPRequestHandler, event: bytes) -> None:
            # HTTP/1.1 chunked transfer encoding, as uvicorn (vLLM, SGLang) streams
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            handler.wfile.flush()

        def reply(handler: BaseHTTPRequestHandler) -> None:
            handler.send_response(200)
            handler.send_header("Content-Type", "text/event-stream")
            handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()
            try:
                for i, item in enumerate(chunks):
                    if stall_after is not None and i == stall_after:
                        self.release.wait(10)
                    send(handler, b"data: " + json.dumps(item).encode() + b"\r\n\r\n")
                if done:
                    send(handler, b"data: [DONE]\r\n\r\n")
                send(handler, b"")  # last chunk
            except (BrokenPipeError, ConnectionResetError):
                pass

        self.reply = reply

    def error(self, status: int, text: str) -> None:
        def reply(handler: BaseHTTPRequestHandler) -> None:
            payload = text.encode()
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload)

        self.reply = reply

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def server():
    fake = FakeServer()
    yield fake
    fake.close()


@pytest.fixture(scope="module")
def coffee() -> Image.Image:
    with Image.open(ASSETS / "coffee.jpg") as img:
        return img.convert("RGB")


def conversation(image: Image.Image) -> list[Message]:
    return [
        Message("system", (TextPart("You segment things."),)),
        Message("user", (ImagePart(image, "raw"), TextPart("the cup on the left"))),
    ]


def test_request_body_carries_model_messages_and_lossless_image(server, coffee):
    server.stream_chunks([chunk("ok", "stop")])
    vlm = OpenAIServerVLM(server.url, "Qwen/Qwen3-VL-8B-Instruct", api_key="sk-test", max_new_tokens=77)
    generate(vlm, conversation(coffee))

    assert server.path == "/v1/chat/completions"
    body = server.bodies[0]
    assert body["model"] == "Qwen/Qwen3-VL-8B-Instruct"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["temperature"] == 0
    assert body["max_tokens"] == 77
    assert body["messages"][0] == {"role": "system", "content": "You segment things."}
    user = body["messages"][1]
    assert user["role"] == "user"
    assert [item["type"] for item in user["content"]] == ["image_url", "text"]
    assert user["content"][1] == {"type": "text", "text": "the cup on the left"}
    url = user["content"][0]["image_url"]["url"]
    prefix = "data:image/png;base64,"
    assert url.startswith(prefix)
    decoded = Image.open(io.BytesIO(base64.b64decode(url[len(prefix):])))
    assert decoded.format == "PNG"
    assert images_equal(decoded.convert("RGB"), coffee)
    assert server.headers[0]["Authorization"] == "Bearer sk-test"


def test_streamed_pieces_and_final_generation_with_usage(server, coffee):
    server.stream_chunks([
        chunk("", None, role="assistant"),
        chunk("<tool>"),
        chunk('{"name": "report_no_mask"}'),
        chunk("</tool>", "stop"),
        usage_chunk(1234, 17),
    ])
    vlm = OpenAIServerVLM(server.url + "/", "m")  # a trailing slash is tolerated
    items = list(vlm.stream(conversation(coffee), max_new_tokens=50))

    assert items[:-1] == ["<tool>", '{"name": "report_no_mask"}', "</tool>"]
    assert items[-1] == Generation('<tool>{"name": "report_no_mask"}</tool>', "stop", 1234, 17)
    assert server.bodies[0]["max_tokens"] == 50


def test_usage_missing_leaves_token_counts_unknown(server, coffee):
    server.stream_chunks([chunk("hello", "stop")])
    result = generate(OpenAIServerVLM(server.url, "m"), conversation(coffee))
    assert result == Generation("hello", "stop", None, None)


def test_reasoning_content_is_used_and_closed_with_think_end_tag(server, coffee):
    server.stream_chunks([
        chunk(None, None, reasoning_content="The cup is "),
        chunk(None, None, reasoning_content="on the left.\n"),
        chunk("\n\n<tool>x</tool>", "stop"),
    ])
    items = list(OpenAIServerVLM(server.url, "m").stream(conversation(coffee)))
    assert items[:-1] == ["The cup is ", "on the left.\n", "</think>\n\n<tool>x</tool>"]
    assert items[-1].text == "The cup is on the left.\n</think>\n\n<tool>x</tool>"


def test_reasoning_field_name_of_newer_servers_is_used_too(server, coffee):
    server.stream_chunks([chunk("", None, reasoning="thinking"), chunk(None, "length", reasoning=" more")])
    result = generate(OpenAIServerVLM(server.url, "m"), conversation(coffee))
    assert result == Generation("thinking more", "length", None, None)


def test_reasoning_and_content_in_one_chunk_are_both_kept(server, coffee):
    server.stream_chunks([chunk("answer", "stop", reasoning_content="why\n")])
    result = generate(OpenAIServerVLM(server.url, "m"), conversation(coffee))
    assert result.text == "why\n</think>answer"


def test_finish_reason_length_is_reported_as_length(server, coffee):
    server.stream_chunks([chunk("partial "), chunk("answer", "length"), usage_chunk(10, 2)])
    result = generate(OpenAIServerVLM(server.url, "m"), conversation(coffee), max_new_tokens=2)
    assert result == Generation("partial answer", "length", 10, 2)


def test_http_500_raises_backend_error_with_url_model_and_body(server, coffee):
    server.error(500, '{"error": "CUDA out of memory while allocating"}')
    vlm = OpenAIServerVLM(server.url, "qwen-vl")
    with pytest.raises(BackendError) as info:
        generate(vlm, conversation(coffee))
    message = str(info.value)
    assert server.url in message
    assert "qwen-vl" in message
    assert "HTTP 500" in message
    assert "CUDA out of memory while allocating" in message


def test_http_404_hints_at_the_base_url(server, coffee):
    server.error(404, "Not Found")
    with pytest.raises(BackendError, match=r"HTTP 404.*check the base URL"):
        generate(OpenAIServerVLM(server.url, "m"), conversation(coffee))


def test_error_inside_the_stream_raises_backend_error(server, coffee):
    server.stream_chunks([chunk("a"), {"error": {"message": "engine died"}}])
    with pytest.raises(BackendError, match="engine died"):
        generate(OpenAIServerVLM(server.url, "m"), conversation(coffee))


def test_stream_ending_without_finish_reason_raises_backend_error(server, coffee):
    server.stream_chunks([chunk("a")], done=False)
    with pytest.raises(BackendError, match="without a finish reason"):
        generate(OpenAIServerVLM(server.url, "m"), conversation(coffee))


def test_closed_port_raises_backend_error_naming_url_and_model(coffee):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    vlm = OpenAIServerVLM(url, "Qwen/Qwen3-VL-8B-Instruct", timeout=5)
    with pytest.raises(BackendError) as info:
        generate(vlm, conversation(coffee))
    message = str(info.value)
    assert f"cannot reach the VLM server at {url} (model Qwen/Qwen3-VL-8B-Instruct)" in message
    assert "vllm serve Qwen/Qwen3-VL-8B-Instruct" in message


def test_stop_event_cancels_a_stalled_stream_promptly(server, coffee):
    server.stream_chunks([chunk("first "), chunk("never", "stop")], stall_after=1)
    stop = threading.Event()
    stream = OpenAIServerVLM(server.url, "m").stream(conversation(coffee), stop=stop)
    assert next(stream) == "first "
    stop.set()
    started = time.perf_counter()
    rest = list(stream)
    assert time.perf_counter() - started < 1.0
    assert rest == [Generation("first ", "cancelled", None, None)]
    # the reading thread saw the connection shut down and ended too (so the server can abort)
    deadline = time.perf_counter() + 1.0
    while any(t.name == "sse[m]" for t in threading.enumerate()) and time.perf_counter() < deadline:
        time.sleep(0.01)
    assert not any(t.name == "sse[m]" for t in threading.enumerate())


def test_stop_set_before_the_call_sends_nothing(server, coffee):
    stop = threading.Event()
    stop.set()
    items = list(OpenAIServerVLM(server.url, "m").stream(conversation(coffee), stop=stop))
    assert items == [Generation("", "cancelled", None, 0)]
    assert server.bodies == []


def test_text_only_messages_are_sent_as_strings_and_multi_part_as_lists():
    vlm = OpenAIServerVLM("http://127.0.0.1:1/v1", "m")
    body = vlm.request_body([
        Message("assistant", (TextPart("a"),)),
        Message("user", (TextPart("b"), TextPart("c"))),
    ])
    assert body["messages"] == [
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": [{"type": "text", "text": "b"}, {"type": "text", "text": "c"}]},
    ]


def test_base_url_without_scheme_is_refused():
    with pytest.raises(InputError, match="http://"):
        OpenAIServerVLM("127.0.0.1:8000/v1", "m")
