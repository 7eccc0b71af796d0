"""The request gate: a server's 429 lowers the requests let through at once, and the rest wait for a slot."""

from __future__ import annotations

import threading
import time

import pytest
from fake_server import FakeServer, chunk
from PIL import Image

from sam3_agent.errors import BackendError
from sam3_agent.messages import Generation, ImagePart, Message, TextPart
from sam3_agent.vlm.base import generate
from sam3_agent.vlm.openai_server import OpenAIServerVLM
from sam3_agent.vlm.server_gate import GateReport, RequestGate
from sam3_agent.vlm.server_retry import RetryPolicy

MESSAGES = [Message("user", (ImagePart(Image.new("RGB", (64, 48), (9, 90, 200)), "raw"), TextPart("the cup")))]
NEVER = threading.Event()


def wait_until(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the condition never came true"
        time.sleep(0.01)


def test_a_429_lets_through_one_fewer_than_were_open_and_never_fewer_than_one():
    gate = RequestGate()
    for _ in range(4):
        assert gate.enter(NEVER)
    assert (gate.too_many(), gate.too_many()) == (3, 2)
    for _ in range(3):
        gate.leave()
    assert gate.open == 1 and gate.too_many() == 1
    assert gate.report() == GateReport(rate_limited=3, lowest_limit=1)


def test_the_limit_rises_by_one_after_enough_answers_in_a_row():
    gate = RequestGate(raise_after=2)
    gate.enter(NEVER)
    gate.enter(NEVER)
    gate.too_many()
    assert gate.limit == 1
    gate.answered()
    assert gate.limit == 1
    gate.answered()
    assert gate.limit == 2 and gate.report() == GateReport(1, 1)


def test_a_request_waiting_for_a_slot_gives_up_when_its_call_is_abandoned():
    gate = RequestGate()
    gate.enter(NEVER)
    gate.too_many()
    halt, result = threading.Event(), []
    waiter = threading.Thread(target=lambda: result.append(gate.enter(halt, lambda: None)))
    waiter.start()
    wait_until(lambda: gate.waiting == 1)
    halt.set()
    waiter.join(30)
    assert result == [False] and (gate.open, gate.waiting) == (1, 0)


@pytest.fixture()
def server():
    fake = FakeServer()
    yield fake
    fake.close()


def test_after_a_429_the_second_request_waits_for_the_first_instead_of_failing(server):
    """A server with one slot: A is answered (held open), B is refused with Retry-After 0; B then queues for the
    only slot and reaches the server again only once A is over."""
    release_a = threading.Event()

    def held(handler, body):
        release_a.wait(30)
        server.events([chunk("A", "stop")])(handler, body)

    server.answers(held, server.json_body({"error": {"message": "too many requests"}}, 429, {"Retry-After": "0"}),
                   server.events([chunk("B", "stop")]))
    vlm = OpenAIServerVLM(server.url, "m", retry=RetryPolicy(retries=0, rate_limit_retries=1))
    results: dict[str, Generation] = {}
    first = threading.Thread(target=lambda: results.setdefault("A", generate(vlm, MESSAGES)))
    first.start()
    wait_until(lambda: server.requests == 1)
    second = threading.Thread(target=lambda: results.setdefault("B", generate(vlm, MESSAGES)))
    second.start()
    wait_until(lambda: vlm.gate.waiting == 1)  # refused once, now queued behind A
    assert (server.requests, vlm.gate.limit) == (2, 1)
    release_a.set()
    first.join(30)
    second.join(30)
    assert results == {"A": Generation("A", "stop"), "B": Generation("B", "stop")}
    assert server.requests == 3 and vlm.gate.report() == GateReport(rate_limited=1, lowest_limit=1)


def test_429s_past_their_own_budget_fail_naming_the_attempts(server):
    server.answer(server.json_body({"error": {"message": "too many requests"}}, 429, {"Retry-After": "0"}))
    vlm = OpenAIServerVLM(server.url, "m", retry=RetryPolicy(retries=2, rate_limit_retries=3))
    with pytest.raises(BackendError) as info:
        generate(vlm, MESSAGES)
    assert str(info.value) == (f"the VLM server at {server.url} (model m) answered HTTP 429 Too Many Requests after 4 "
                               'attempts: {"error": {"message": "too many requests"}}')
    assert server.requests == 4
