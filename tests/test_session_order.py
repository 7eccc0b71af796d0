"""Edits in the shared edit queue: one session's wait for each other in the order they came; other sessions' do not
wait behind them. Driven through a served Gradio page with gradio_client (each Client is one browser session)."""

from __future__ import annotations

import threading
import time

import gradio as gr
import pytest
from gradio_client import Client
from gradio_client.utils import Status

from sam3_agent.ui.session_order import EDIT_CONCURRENCY, EDIT_QUEUE, SessionOrder, in_session_order, order_by_session

WAIT_S = 30  # what a person would give up after; the events themselves take milliseconds


class SlowEdit:
    """``hold`` stands for a slow edit (a point click's model call): it runs until ``release`` is set."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.log: list[str] = []

    def hold(self, text: str) -> str:
        self.started.set()
        if not self.release.wait(WAIT_S):
            raise TimeoutError("the test never released the slow edit")
        self.log.append(f"hold {text}")
        return f"held {text}"

    def note(self, text: str, request: gr.Request) -> str:
        self.log.append(f"note {text}")
        return f"noted {text}"


@pytest.fixture
def page():
    edits = SlowEdit()
    with gr.Blocks() as demo:
        box = gr.Textbox()
        out = gr.Textbox()
        queue = {"concurrency_id": EDIT_QUEUE, "concurrency_limit": EDIT_CONCURRENCY}
        gr.Button("hold").click(edits.hold, inputs=[box], outputs=[out], api_name="hold", **queue)
        gr.Button("note").click(edits.note, inputs=[box], outputs=[out], api_name="note", **queue)
    assert order_by_session(demo) == 2
    demo.queue()
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True)
    try:
        yield edits, url
    finally:
        edits.release.set()
        demo.close()


def wait_until_processing(job) -> None:
    """Until the page has taken ``job`` from the queue (it then waits only for its own session's earlier events)."""
    deadline = time.monotonic() + WAIT_S
    while job.status().code not in (Status.PROCESSING, Status.FINISHED):
        assert time.monotonic() < deadline, f"the job never started: {job.status()}"
        time.sleep(0.02)


def test_another_sessions_edit_is_not_queued_behind_a_slow_one(page):
    edits, url = page
    annotator, other = Client(url, verbose=False), Client(url, verbose=False)
    slow = annotator.submit("a", api_name="/hold")
    assert edits.started.wait(WAIT_S)
    assert other.submit("b", api_name="/note").result(timeout=WAIT_S) == "noted b"
    assert edits.log == ["note b"]  # while the slow edit still runs
    edits.release.set()
    assert slow.result(timeout=WAIT_S) == "held a"


def test_one_sessions_edits_apply_in_the_order_they_came(page):
    edits, url = page
    annotator = Client(url, verbose=False)
    slow = annotator.submit("first", api_name="/hold")
    assert edits.started.wait(WAIT_S)
    quick = annotator.submit("second", api_name="/note")
    wait_until_processing(quick)
    assert edits.log == []  # taken from the queue, but waiting for the same session's slow edit
    edits.release.set()
    assert (slow.result(timeout=WAIT_S), quick.result(timeout=WAIT_S)) == ("held first", "noted second")
    assert edits.log == ["hold first", "note second"]


def test_a_sessions_lock_is_let_go_once_its_events_have_run():
    import asyncio

    order = SessionOrder()
    handler = in_session_order(lambda text: text.upper(), order)

    class Request:
        session_hash = "s1"

    assert asyncio.run(handler("ok", Request())) == "OK"
    assert order.busy_sessions() == 0


def test_a_streaming_handler_is_refused_a_place_in_session_order():
    def stream(text):
        yield text

    with pytest.raises(ValueError, match="only plain functions can be run in session order"):
        in_session_order(stream, SessionOrder())
