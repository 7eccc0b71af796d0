"""Items in flight share one local model's batches: who waits for whom, what goes together, and same output."""

from __future__ import annotations

import threading

import pytest

from sam3_agent.datasets.batch.coalesce import CoalescingVLM
from sam3_agent.errors import BackendError
from sam3_agent.messages import Generation, Message, TextPart


def conversation(text: str) -> list[Message]:
    return [Message("system", (TextPart("sys"),)), Message("user", (TextPart(text),))]


class RecordingBatchVLM:
    """A batch VLM whose answer to a conversation is its last text upper-cased; records every batch."""

    name = "recording"

    def __init__(self, fail: bool = False) -> None:
        self.batches: list[tuple[list[str], int | None]] = []
        self.stops: list[bool] = []
        self.fail = fail

    def _answer(self, messages) -> Generation:
        return Generation(messages[-1].text.upper(), "stop", 3, 1)

    def stream(self, messages, *, max_new_tokens=None, stop=None):
        self.batches.append(([messages[-1].text], max_new_tokens))
        if self.fail:
            raise BackendError("model 'recording' ran out of memory")
        yield self._answer(messages)

    def generate_batch(self, conversations, *, max_new_tokens=None, stop=None):
        self.batches.append(([c[-1].text for c in conversations], max_new_tokens))
        self.stops.append(stop.is_set())
        if self.fail:
            raise BackendError("model 'recording' ran out of memory")
        return [self._answer(c) for c in conversations]


def in_threads(shared: CoalescingVLM, calls: dict[str, callable]) -> dict[str, object]:
    """Run each call in its own client thread, all registered before any asks; returns results (or exceptions)."""
    results: dict[str, object] = {}
    registered = threading.Barrier(len(calls))

    def work(name, call):
        with shared.client():
            registered.wait()
            try:
                results[name] = call()
            except Exception as error:  # noqa: BLE001 - the test inspects it
                results[name] = error

    threads = [threading.Thread(target=work, args=item) for item in calls.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


def stream_text(shared: CoalescingVLM, text: str, **kw) -> Generation:
    items = list(shared.stream(conversation(text), **kw))
    assert "".join(i for i in items if isinstance(i, str)) == items[-1].text
    return items[-1]


def test_every_waiting_item_goes_in_one_batch_with_its_own_answer():
    inner = RecordingBatchVLM()
    shared = CoalescingVLM(inner, max_batch=8, max_wait_s=30)
    results = in_threads(shared, {name: (lambda n=name: stream_text(shared, n)) for name in ("a", "b", "c", "d")})
    shared.close()
    assert {k: v.text for k, v in results.items()} == {"a": "A", "b": "B", "c": "C", "d": "D"}
    assert len(inner.batches) == 1 and sorted(inner.batches[0][0]) == ["a", "b", "c", "d"]
    assert shared.batch_sizes == [4]


def test_a_verification_batch_and_a_main_call_share_a_batch_in_order():
    inner = RecordingBatchVLM()
    shared = CoalescingVLM(inner, max_batch=8, max_wait_s=30)
    results = in_threads(shared, {
        "verify": lambda: shared.generate_batch([conversation(t) for t in ("m1", "m2", "m3")]),
        "main": lambda: stream_text(shared, "round"),
    })
    shared.close()
    assert [g.text for g in results["verify"]] == ["M1", "M2", "M3"]
    assert results["main"].text == "ROUND"
    assert shared.batch_sizes == [4]


def test_batches_hold_at_most_max_batch_conversations():
    inner = RecordingBatchVLM()
    shared = CoalescingVLM(inner, max_batch=2, max_wait_s=30)
    results = in_threads(shared, {n: (lambda n=n: stream_text(shared, n)) for n in "abcde"})
    shared.close()
    assert sorted(v.text for v in results.values()) == list("ABCDE")
    assert sorted(shared.batch_sizes) == [1, 2, 2]


def test_different_token_budgets_never_share_a_batch():
    inner = RecordingBatchVLM()
    shared = CoalescingVLM(inner, max_batch=8, max_wait_s=30)
    in_threads(shared, {
        "a": lambda: stream_text(shared, "a", max_new_tokens=16),
        "b": lambda: stream_text(shared, "b", max_new_tokens=64),
        "c": lambda: stream_text(shared, "c", max_new_tokens=16),
    })
    shared.close()
    assert sorted((sorted(texts), limit) for texts, limit in inner.batches) == [(["a", "c"], 16), (["b"], 64)]


def test_a_lone_request_goes_after_max_wait_when_others_are_busy():
    inner = RecordingBatchVLM()
    shared = CoalescingVLM(inner, max_batch=8, max_wait_s=0.05)
    with shared.client():  # an item in flight that never asks (e.g. busy in SAM 3)
        results = in_threads(shared, {"a": lambda: stream_text(shared, "a")})
    shared.close()
    assert results["a"].text == "A" and shared.batch_sizes == [1]


def test_a_stopped_request_is_cancelled_without_model_work():
    inner = RecordingBatchVLM()
    shared = CoalescingVLM(inner)
    stop = threading.Event()
    stop.set()
    assert shared.generate_batch([conversation("x"), conversation("y")], stop=stop) == [
        Generation("", "cancelled", None, 0)] * 2
    assert stream_text(shared, "z", stop=stop).finish_reason == "cancelled"
    shared.close()
    assert inner.batches == []


def test_a_model_fault_reaches_every_caller_of_the_batch():
    shared = CoalescingVLM(RecordingBatchVLM(fail=True), max_wait_s=30)
    results = in_threads(shared, {n: (lambda n=n: stream_text(shared, n)) for n in "ab"})
    shared.close()
    assert all(isinstance(v, BackendError) and "ran out of memory" in str(v) for v in results.values())


def test_a_closed_vlm_refuses_new_requests():
    shared = CoalescingVLM(RecordingBatchVLM())
    shared.close()
    with pytest.raises(BackendError, match="was closed"):
        stream_text(shared, "late")


def test_a_vlm_without_batches_cannot_be_shared():
    class Plain:
        name = "plain"

        def stream(self, messages, **kw):
            yield Generation("x")

    with pytest.raises(TypeError, match="has no generate_batch"):
        CoalescingVLM(Plain())


@pytest.fixture(scope="module")
def tiny_backends():
    from sam3_agent.presets import BackendSettings, build_backends

    return build_backends(BackendSettings(preset="tiny", device="cpu", max_new_tokens=24))


def test_items_sharing_the_tiny_model_give_the_same_traces_as_one_at_a_time(tiny_backends):
    """Greedy decoding: a run's outputs do not depend on which other items shared its batches."""
    from conftest import photo

    from sam3_agent.agent.config import AgentConfig
    from sam3_agent.datasets.batch.agents import BatchAgents

    config = AgentConfig(max_rounds=2)
    jobs = [("astronaut.jpg", "the flag"), ("coffee.jpg", "the spoon"), ("chelsea.jpg", "the cat's left ear")]
    alone = BatchAgents(tiny_backends, config)
    expected = {q: alone.new_agent().run(photo(p), q) for p, q in jobs}

    shared = BatchAgents(tiny_backends, config, share_batches=True, max_wait_s=30)
    traces = {}

    def work(image: str, query: str) -> None:
        with shared.in_flight():
            traces[query] = shared.new_agent().run(photo(image), query)

    threads = [threading.Thread(target=work, args=job) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)  # a guard against a run waiting for a batch that never fills, not a speed bound
    shared.close()
    assert not any(thread.is_alive() for thread in threads)  # every run ended
    assert max(shared.coalescer.batch_sizes) == 3  # the three first rounds went together
    for query, trace in traces.items():
        assert [r.output for r in trace.rounds] == [r.output for r in expected[query].rounds]
        assert trace.status == expected[query].status and trace.final_masks == expected[query].final_masks
