"""With a VLM server, the items in flight send their requests at the same time (so the server can batch them)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from conftest import KnownSegmenter, tool
from dataset_fixtures import ASSETS

from sam3_agent.agent.config import AgentConfig
from sam3_agent.datasets.batch.agents import BatchAgents
from sam3_agent.datasets.batch.items import BatchItem
from sam3_agent.datasets.batch.layout import BatchLayout
from sam3_agent.datasets.batch.runner import run_batch
from sam3_agent.presets import Backends
from sam3_agent.vlm.openai_server import OpenAIServerVLM

# How long an answer is held for the other requests of the batch to arrive: a hang guard, not a timing (on a busy
# 2-core machine the items' first requests can be many seconds apart).
HOLD_GUARD_S = 120


class CountingServer:
    """A streaming chat-completions server that holds each answer until ``expected`` requests are open at once (or
    5 s pass), and records the most requests it ever had open."""

    def __init__(self, expected: int) -> None:
        self.open = 0
        self.most_open = 0
        self.lock = threading.Lock()
        self.all_open = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.open += 1
                    server.most_open = max(server.most_open, server.open)
                    if server.open >= expected:
                        server.all_open.set()
                server.all_open.wait(HOLD_GUARD_S)
                segmented = any(m["role"] == "assistant" and "segment_phrase" in str(m["content"])
                                for m in body["messages"])
                text = tool("select_masks_and_return", final_answer_masks=[1]) if segmented else tool(
                    "segment_phrase", text_prompt="cup")
                chunks = [{"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}]}]
                payload = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                with server.lock:
                    server.open -= 1
                self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_items_in_flight_send_concurrent_requests_to_the_server(tmp_path):
    server = CountingServer(expected=3)
    try:
        vlm = OpenAIServerVLM(server.url, "served-model")
        backends = Backends(vlm, vlm, KnownSegmenter({"cup": [((200, 40, 420, 310), 0.9)]}), {"vlm_server": server.url})
        agents = BatchAgents(backends, AgentConfig(max_rounds=3), share_batches=True)
        assert agents.coalescer is None  # a server batches by itself: requests go straight to it
        items = [BatchItem(f"cup{n}", ASSETS / "coffee.jpg", f"the cup {n}") for n in range(3)]
        layout = BatchLayout(tmp_path / "out", items)
        layout.prepare()
        result = run_batch(items, layout, agents, concurrency=3)
    finally:
        server.close()
    assert result.summary["statuses"] == {"done": 3}
    assert server.most_open == 3


class OneSlotServer(CountingServer):
    """A server that answers one request at a time and refuses any other with 429 (Retry-After 0), as a proxy in
    front of a single-slot engine does; counts the refusals."""

    def __init__(self) -> None:
        self.refused = 0
        self.slot_taken = False
        self.first_refusal = threading.Event()
        super().__init__(expected=10**9)  # never "all open": the first answer waits for a refusal (all_open below)
        outer = self
        answer = self.httpd.RequestHandlerClass.do_POST

        def do_post(handler: BaseHTTPRequestHandler) -> None:
            with outer.lock:
                busy = outer.slot_taken
                outer.refused += busy
                outer.slot_taken = True
            if not busy:
                try:
                    return answer(handler)
                finally:
                    with outer.lock:
                        outer.slot_taken = False
            handler.rfile.read(int(handler.headers["Content-Length"]))
            data = b'{"error": {"message": "too many requests"}}'
            handler.send_response(429)
            handler.send_header("Retry-After", "0")
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
            handler.close_connection = True
            outer.first_refusal.set()

        self.httpd.RequestHandlerClass.do_POST = do_post
        self.all_open = self.first_refusal  # the first answer is held until a request was refused (or the guard)


def test_a_batch_against_a_one_slot_server_waits_instead_of_failing_and_says_how_often(tmp_path):
    server = OneSlotServer()
    try:
        vlm = OpenAIServerVLM(server.url, "served-model")
        backends = Backends(vlm, vlm, KnownSegmenter({"cup": [((200, 40, 420, 310), 0.9)]}), {"vlm_server": server.url})
        items = [BatchItem(f"cup{n}", ASSETS / "coffee.jpg", f"the cup {n}") for n in range(4)]
        layout = BatchLayout(tmp_path / "out", items)
        layout.prepare()
        result = run_batch(items, layout, BatchAgents(backends, AgentConfig(max_rounds=3)), concurrency=4)
    finally:
        server.close()
    assert result.summary["statuses"] == {"done": 4}
    lowest = vlm.gate.report().lowest_limit  # 1 to 3: how many overlaps it took depends on timing
    assert server.refused >= 1 and server.most_open == 1 and lowest in (1, 2, 3)
    assert result.summary["server"] == {"rate_limited": server.refused, "lowest_concurrency": lowest}
    assert result.summary["notes"] == [
        f"The VLM server answered 429 (too many requests) {server.refused} time(s): requests were held back, at most "
        f"{lowest} at once at the lowest, and retried; start the server with more concurrent requests (or lower "
        "--concurrency) to go faster."]
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["server"] == result.summary["server"]
