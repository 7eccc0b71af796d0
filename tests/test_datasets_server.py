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
                server.all_open.wait(5)
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
