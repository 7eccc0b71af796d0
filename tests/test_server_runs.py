"""Whole agent runs against a real local HTTP server that behaves like real deployments (issue 10): a proxy that
compresses, rejects ``stream_options``, rate-limits and never sends a finish reason; a vLLM with a per-request
image limit; a server that sends a malformed chunk. The runs that failed before end ``done`` with the right masks."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import KnownSegmenter, rect_mask, tool, verdict
from fake_server import FakeServer, chunk, tool_call_chunks

from sam3_agent.agent.config import AgentConfig
from sam3_agent.agent.loop import Agent
from sam3_agent.agent.prompts import load_prompts
from sam3_agent.vlm.openai_server import OpenAIServerVLM
from sam3_agent.vlm.server_retry import RetryPolicy

H = W = 512
CHILD_2 = rect_mask(H, W, 300, 300, 400, 400)
PROMPTS = load_prompts()
MAIN_CALLS = [("segment_phrase", {"text_prompt": "child"}), ("examine_each_mask", {}),
              ("select_masks_and_return", {"final_answer_masks": [1]})]
MAIN = [tool(name, **parameters) for name, parameters in MAIN_CALLS]


@pytest.fixture()
def server():
    fake = FakeServer()
    yield fake
    fake.close()


def images_in(body) -> int:
    return sum(1 for m in body["messages"] if isinstance(m["content"], list)
               for item in m["content"] if item["type"] == "image_url")


def model_reply(body) -> str:
    """What the scripted 'model' behind the server answers: the main script in order; verification: reject mask 1,
    accept the others."""
    if body["messages"][0]["content"] == PROMPTS.verify_system:
        return verdict("Reject" if "mask 1." in body["messages"][1]["content"][-1]["text"] else "Accept")
    main_calls = sum(1 for m in body["messages"] if m["role"] == "assistant")
    return MAIN[main_calls] if main_calls < len(MAIN) else tool("report_no_mask")


def run(server, astronaut, segmenter, **vlm_options):
    vlm = OpenAIServerVLM(server.url, "qwen", retry=RetryPolicy(backoff=0.01), **vlm_options)
    agent_run = Agent(vlm, segmenter, AgentConfig(verify_batch_size=1)).start(astronaut, "the child on the right")
    list(agent_run)
    return agent_run.trace


def test_run_through_a_difficult_proxy_ends_done_with_the_right_mask(server, astronaut, segmenter):
    def proxy(handler, body):
        if "stream_options" in body:
            return server.json_body({"detail": "extra fields not permitted: stream_options"}, 422)(handler, body)
        if server.requests == 2:  # the first request that gets through is rate-limited once
            return server.json_body({"error": {"message": "slow down"}}, 429, {"Retry-After": "0"})(handler, body)
        text = model_reply(body)
        half = len(text) // 2
        return server.events([chunk(text[:half]), chunk(text[half:])], gzip=True)(handler, body)  # no finish reason

    server.answer(proxy)
    trace = run(server, astronaut, segmenter)
    assert trace.status == "done", trace.error
    assert np.array_equal(trace.final_masks.masks, CHILD_2[None])
    assert [v.verdict for v in trace.rounds[1].result.verdicts] == ["reject", "accept"]
    assert ["stream_options" in b for b in server.bodies[:3]] == [True, False, False]
    assert not any("stream_options" in b for b in server.bodies[3:])


def vllm_with_image_limit(server, limit: int):
    """A server that, like vLLM with --limit-mm-per-prompt '{"image": N}', refuses requests with more images."""

    def handle(handler, body):
        count = images_in(body)
        if count > limit:
            message = f"At most {limit} image(s) may be provided in one prompt."
            return server.json_body({"object": "error", "message": message, "type": "BadRequestError", "code": 400},
                                    400)(handler, body)
        return server.events([chunk(model_reply(body), "stop")])(handler, body)

    return handle


def test_three_images_per_request_are_enough_for_every_request_of_a_run(server, astronaut, segmenter):
    server.answer(vllm_with_image_limit(server, 3))
    trace = run(server, astronaut, segmenter)
    assert trace.status == "done" and np.array_equal(trace.final_masks.masks, CHILD_2[None])
    verify_counts = {images_in(b) for b in server.bodies if b["messages"][0]["content"] == PROMPTS.verify_system}
    main_counts = {images_in(b) for b in server.bodies if b["messages"][0]["content"] != PROMPTS.verify_system}
    assert verify_counts == {3} and main_counts <= {1, 2}


def dense_run(server, astronaut, limit: int, **config):
    """A run whose phrase finds 120 small masks (a dense set: the overlay drawn at the VLM's budget; with
    ``dense_tiles=True`` also its 4 tiles) against a server allowing ``limit`` images per request; the 'model' selects
    them all."""
    boxes = [(((k % 12) * 42 + 2, (k // 12) * 50 + 2, (k % 12) * 42 + 38, (k // 12) * 50 + 44), 0.9) for k in range(120)]
    script = [tool("segment_phrase", text_prompt="bird"), tool("select_masks_and_return", final_answer_masks=["1-120"])]

    def handle(handler, body):
        if images_in(body) > limit:
            message = f"At most {limit} image(s) may be provided in one request."
            return server.json_body({"object": "error", "message": message, "type": "BadRequestError", "code": 400},
                                    400)(handler, body)
        calls = sum(1 for m in body["messages"] if m["role"] == "assistant")
        return server.events([chunk(script[calls], "stop")])(handler, body)

    server.answer(handle)
    vlm = OpenAIServerVLM(server.url, "qwen", retry=RetryPolicy(backoff=0.01))
    agent_run = Agent(vlm, KnownSegmenter({"bird": boxes}), AgentConfig(verify_batch_size=1, **config)).start(
        astronaut, "the child on the right")
    list(agent_run)
    return agent_run.trace


def test_two_images_per_request_carry_a_dense_set_by_default(server, astronaut):
    trace = dense_run(server, astronaut, 2)
    assert trace.status == "done" and len(trace.final_masks) == 120
    assert [images_in(b) for b in server.bodies] == [1, 2]  # the photo; then the photo and the enlarged overlay


def test_six_images_per_request_carry_a_dense_set_with_its_opt_in_tiles(server, astronaut):
    trace = dense_run(server, astronaut, 6, dense_tiles=True)
    assert trace.status == "done" and len(trace.final_masks) == 120
    assert [images_in(b) for b in server.bodies] == [1, 6]  # the photo; then the photo, the overlay and 4 tiles


def test_a_server_allowing_three_images_fails_a_dense_round_with_tiles_saying_how_to_start_it(server, astronaut):
    trace = dense_run(server, astronaut, 3, dense_tiles=True)
    assert trace.status == "failed"
    assert trace.error.endswith("(the server takes fewer images per request than the agent sends: up to 2 in a main "
                                "request (the photo and the overlay; 6 with --dense-tiles) and 3 in a verification; "
                                """start it with vLLM's --limit-mm-per-prompt '{"image": 3}' (6 with --dense-tiles))""")


def test_a_server_allowing_two_images_fails_each_verification_and_the_run_says_so(server, astronaut, segmenter):
    server.answer(vllm_with_image_limit(server, 2))
    trace = run(server, astronaut, segmenter)
    verdicts = trace.rounds[1].result.verdicts
    assert [(v.verdict, v.source) for v in verdicts] == [("unconfirmed", "error"), ("unconfirmed", "error")]
    assert "At most 2 image(s) may be provided in one prompt." in verdicts[0].error
    reply = trace.messages[trace.rounds[1].reply_index].text
    assert reply.endswith(PROMPTS.format("examine_unchecked", numbers="1, 2"))
    assert trace.status == "done"  # the main model still chose, from the unchecked masks


def test_a_malformed_chunk_fails_the_run_with_its_name_and_the_round_recorded(server, astronaut, segmenter):
    server.answer(server.events([{"choices": "oops"}]))
    trace = run(server, astronaut, segmenter)
    assert trace.status == "failed"
    assert trace.error.startswith(f"the VLM server at {server.url} (model qwen) sent a malformed chunk (choices must ")
    assert [(r.index, r.error) for r in trace.rounds] == [(1, "backend_error")]


def test_a_run_through_a_server_whose_tool_parser_sends_tool_calls_ends_done_with_the_right_mask(
        server, astronaut, segmenter):
    """vLLM with --enable-auto-tool-choice --tool-call-parser hermes (or Ollama): the main calls arrive in
    delta.tool_calls, the content holds only the reasoning; verdicts stay text."""

    def tool_parser(handler, body):
        if body["messages"][0]["content"] == PROMPTS.verify_system:
            return server.events([chunk(model_reply(body), "stop")])(handler, body)
        main_calls = sum(1 for m in body["messages"] if m["role"] == "assistant")
        name, parameters = MAIN_CALLS[main_calls]
        return server.events(tool_call_chunks(name, parameters, content="<think>reasoning</think>"))(handler, body)

    server.answer(tool_parser)
    trace = run(server, astronaut, segmenter)
    assert trace.status == "done", trace.error
    assert [r.call.name for r in trace.rounds] == ["segment_phrase", "examine_each_mask", "select_masks_and_return"]
    assert [r.error for r in trace.rounds] == [None, None, None]
    assert np.array_equal(trace.final_masks.masks, CHILD_2[None])


def test_an_engine_that_keeps_aborting_fails_the_round_as_a_backend_fault_naming_the_reason(
        server, astronaut, segmenter):
    server.answer(server.events([chunk("", "abort")]))
    trace = run(server, astronaut, segmenter)
    assert trace.status == "failed"
    assert trace.error == (
        f"the VLM server at {server.url} (model qwen) ended its answer with finish reason 'abort': the engine aborted "
        "the request (it may have been scaled down, paused, restarted or preempted); 0 characters had arrived. Check "
        "the server's log (3 attempts)")
    assert [(r.index, r.error, r.error_detail) for r in trace.rounds] == [(1, "backend_error", trace.error)]
    assert server.requests == 3
