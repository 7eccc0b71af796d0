"""How OpenAIServerVLM reads the answers of issue 20's servers, against a real local HTTP server: calls a tool parser
moved into ``delta.tool_calls``, finish reasons that mean a server fault, a web page where the API was expected,
bare-CR line endings. One behaviour per test, with the exact Generation or message."""

from __future__ import annotations

import json
import logging

import pytest
from fake_server import FakeServer, chunk, tool_call_chunks
from PIL import Image

from sam3_agent.errors import BackendError
from sam3_agent.messages import Generation, ImagePart, Message, TextPart
from sam3_agent.vlm.base import generate
from sam3_agent.vlm.openai_server import OpenAIServerVLM
from sam3_agent.vlm.server_retry import RetryPolicy
from sam3_agent.vlm.sse_answer import body_lines

QUICK = RetryPolicy(retries=2, backoff=0.01)
MESSAGES = [
    Message("system", (TextPart("You segment things."),)),
    Message("user", (ImagePart(Image.new("RGB", (64, 48), (9, 90, 200)), "raw"), TextPart("the cup"))),
]


@pytest.fixture()
def server():
    fake = FakeServer()
    yield fake
    fake.close()


def ask(server, **kwargs) -> Generation:
    return generate(OpenAIServerVLM(server.url, "m", retry=kwargs.pop("retry", QUICK), **kwargs), MESSAGES)


def error_of(server, **kwargs) -> str:
    with pytest.raises(BackendError) as info:
        ask(server, **kwargs)
    return str(info.value)


# ------------------------------------------------------------------ tool calls in delta.tool_calls


def test_a_call_streamed_in_tool_calls_with_empty_content_becomes_the_text_the_parser_reads(server):
    server.answer(server.events(tool_call_chunks("segment_phrase", {"text_prompt": "cup"})))
    assert ask(server) == Generation('<tool>{"name": "segment_phrase", "parameters": {"text_prompt": "cup"}}</tool>')


def test_text_before_the_call_comes_first_and_the_call_is_the_last_piece(server):
    server.answer(server.events(tool_call_chunks("report_no_mask", {}, content="<think>no cup</think>")))
    items = list(OpenAIServerVLM(server.url, "m", retry=QUICK).stream(MESSAGES))
    call = '<tool>{"name": "report_no_mask", "parameters": {}}</tool>'
    assert items == ["<think>no cup</think>", "\n" + call, Generation("<think>no cup</think>\n" + call)]


def test_a_call_after_reasoning_sent_apart_closes_the_reasoning(server):
    server.answer(server.events([chunk(None, None, reasoning="the cup is there")]
                                + tool_call_chunks("select_masks_and_return", {"final_answer_masks": [1]})))
    assert ask(server) == Generation('the cup is there</think>\n<tool>{"name": "select_masks_and_return", '
                                     '"parameters": {"final_answer_masks": [1]}}</tool>', starts_in_reasoning=True)


def test_arguments_that_are_not_json_reach_the_parser_as_written(server):
    server.answer(server.events([chunk("", None, tool_calls=[{"index": 0, "function": {
        "name": "segment_phrase", "arguments": "{'text_prompt': 'cup'"}}]), chunk("", "tool_calls")]))
    assert ask(server).text == '<tool>{"name": "segment_phrase", "parameters": {\'text_prompt\': \'cup\'}</tool>'


def test_two_calls_are_both_written_in_order(server):
    server.answer(server.events([chunk("", None, tool_calls=[
        {"index": 1, "function": {"name": "report_no_mask", "arguments": ""}},
        {"index": 0, "function": {"name": "examine_each_mask", "arguments": "{}"}}]), chunk("", "tool_calls")]))
    assert ask(server).text == ('<tool>{"name": "examine_each_mask", "parameters": {}}</tool>\n'
                                '<tool>{"name": "report_no_mask", "parameters": {}}</tool>')


def test_a_json_body_with_tool_calls_and_arguments_as_an_object_is_read(server):
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "segment_phrase", "arguments": {"text_prompt": "cup"}}}]}
    server.answer(server.json_body({"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}))
    assert ask(server).text == '<tool>{"name": "segment_phrase", "parameters": {"text_prompt": "cup"}}</tool>'


def test_malformed_tool_calls_are_named(server):
    server.answer(server.events([chunk("", None, tool_calls={"function": "x"})]))
    assert error_of(server) == (f"the VLM server at {server.url} (model m) sent a malformed chunk (delta.tool_calls "
                                "must be a list of calls with a function object whose name and arguments are text): "
                                '{"function": "x"}')


# ------------------------------------------------------------------ finish reasons that are server faults


def test_an_abort_before_any_text_is_asked_again_and_the_answer_is_the_second(server, caplog):
    server.answers(server.events([chunk("", "abort")]), server.events([chunk("ok", "stop")]))
    with caplog.at_level(logging.INFO, logger="sam3_agent.vlm.openai_server"):
        assert ask(server) == Generation("ok", "stop")
    assert server.requests == 2
    assert caplog.messages[-1].startswith(f"the VLM server at {server.url} (model m) ended its answer with finish "
                                          "reason 'abort'")


def test_aborts_past_the_retry_budget_fail_the_call_naming_the_reason(server):
    server.answer(server.events([chunk("", "abort")]))
    assert error_of(server) == (
        f"the VLM server at {server.url} (model m) ended its answer with finish reason 'abort': the engine aborted "
        "the request (it may have been scaled down, paused, restarted or preempted); 0 characters had arrived. Check "
        "the server's log (3 attempts)")
    assert server.requests == 3


def test_a_fault_after_text_was_streamed_fails_at_once(server):
    server.answer(server.events([chunk('<tool>{"name": "segm'), chunk("", "content_filter")]))
    assert error_of(server) == (
        f"the VLM server at {server.url} (model m) ended its answer with finish reason 'content_filter': a content "
        "filter on the server or a proxy cut the answer off; 20 characters had arrived. Check the server's log (not "
        "asked again: part of the answer had already been shown)")
    assert server.requests == 1


@pytest.mark.parametrize(("reason", "meaning"), [
    ("error", "the engine reported an error while generating"),
    ("overloaded", "a finish reason that is neither a normal end nor the token limit"),
])
def test_other_fault_reasons_are_named_with_their_meaning(server, reason, meaning):
    server.answer(server.events([chunk("", reason)]))
    assert f"ended its answer with finish reason {reason!r}: {meaning}; 0 characters" in error_of(server)


@pytest.mark.parametrize(("reason", "finish"), [("tool_calls", "stop"), ("eos_token", "stop"), ("stop", "stop"),
                                                 ("length", "length")])
def test_normal_ends_are_not_faults(server, reason, finish):
    server.answer(server.events([chunk("ok", reason)]))
    assert ask(server) == Generation("ok", finish)


# ------------------------------------------------------------------ a web page where the API was expected


def test_a_web_ui_at_the_base_url_is_named_with_where_the_api_usually_is(server):
    server.answer(server.html_page("<!DOCTYPE html>\n<html><head><title>Open WebUI</title></head><body></body>"))
    base = server.url.removesuffix("/v1")
    with pytest.raises(BackendError) as info:
        generate(OpenAIServerVLM(base, "m", retry=QUICK), MESSAGES)
    assert str(info.value) == (
        f"the VLM server at {base} (model m) answered with a web page titled 'Open WebUI' (HTML), not the "
        "chat-completions API: the URL probably points at a web UI or a proxy's login page; the API usually lives "
        f"at .../v1: try --vlm-server {base}/v1")


def test_a_proxy_login_page_at_a_v1_url_says_to_check_the_port(server):
    server.answer(server.html_page("<html>\n<head>\n<title>\n  Sign in - Example SSO\n</title>\n</head></html>"))
    assert error_of(server) == (
        f"the VLM server at {server.url} (model m) answered with a web page titled 'Sign in - Example SSO' (HTML), "
        "not the chat-completions API: the URL probably points at a web UI or a proxy's login page; the API usually "
        "lives at .../v1 on the port the server itself listens on (vLLM: 8000, Ollama: 11434): check --vlm-server")


def test_a_page_sent_as_an_event_stream_is_named_too(server):
    server.answer(server.events([b"<html><body>Bad gateway</body></html>\n\n"], done=False))
    assert "answered with a web page (HTML), not the chat-completions API" in error_of(server)


# ------------------------------------------------------------------ line endings


def test_bare_cr_line_endings_are_read(server):
    events = [b'data: {"choices": [{"index": 0, "delta": {"content": "a"}}]}\r\r',
              b': keep-alive\r\r', b'data: {"choices": [{"index": 0,\rdata: "delta": {"content": "b"}, '
              b'"finish_reason": "stop"}]}\r\r', b"data: [DONE]\r\r"]
    server.answer(server.events(events, done=False))
    assert ask(server) == Generation("ab", "stop")


class Pieces:
    """A response whose body arrives in the given reads."""

    def __init__(self, *reads: bytes) -> None:
        self.raw = self
        self._reads = list(reads)

    def read1(self, size: int, decode_content: bool = True) -> bytes:
        return self._reads.pop(0) if self._reads else b""


@pytest.mark.parametrize(("reads", "lines"), [
    ((b"data: a\r", b"\ndata: b\r\n\r\n"), ["data: a", "data: b", ""]),  # a CRLF split by the reads is one end
    ((b"data: a\r", b"\rdata: b"), ["data: a", "", "data: b"]),  # two bare CRs are two ends
    ((b"a\nb\r\nc\rd",), ["a", "b", "c", "d"]),
])
def test_lines_end_at_crlf_lf_or_cr_also_across_reads(reads, lines):
    assert list(body_lines(Pieces(*reads), 10_000, "the server", 1.0)) == lines


def test_json_dumps_of_tool_call_chunks_is_what_a_server_sends():
    items = tool_call_chunks("segment_phrase", {"text_prompt": "cup"}, pieces=2)
    arguments = "".join(i["choices"][0]["delta"]["tool_calls"][0]["function"].get("arguments", "") for i in items[1:-1])
    assert json.loads(arguments) == {"text_prompt": "cup"}
    assert items[-1]["choices"][0]["finish_reason"] == "tool_calls"
