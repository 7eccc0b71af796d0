"""How OpenAIServerVLM meets each way real servers and proxies answer (issue 10), against a real local HTTP server.

One behaviour per test, with the exact outcome: the Generation, or the BackendError's message. Tests with
timeouts wait for the client's own timeout or deadline to fire; none asserts how long anything took.
"""

from __future__ import annotations

import logging
import threading
from json import dumps as json_dumps

import pytest
from fake_server import FakeServer, chunk, completion, usage_chunk
from PIL import Image

from sam3_agent.errors import BackendError
from sam3_agent.messages import Generation, ImagePart, Message, TextPart
from sam3_agent.vlm.base import generate
from sam3_agent.vlm.openai_server import MAX_CHARS_PER_TOKEN, OpenAIServerVLM, ServerTimeouts
from sam3_agent.vlm.server_retry import RetryPolicy

QUICK = RetryPolicy(retries=2, backoff=0.01)


@pytest.fixture()
def server():
    fake = FakeServer()
    yield fake
    fake.close()


def ask(server, **kwargs) -> Generation:
    vlm = OpenAIServerVLM(server.url, "m", retry=kwargs.pop("retry", QUICK), **kwargs)
    return generate(vlm, MESSAGES)


MESSAGES = [
    Message("system", (TextPart("You segment things."),)),
    Message("user", (ImagePart(Image.new("RGB", (64, 48), (9, 90, 200)), "raw"), TextPart("the cup"))),
]


def error_of(server, **kwargs) -> str:
    with pytest.raises(BackendError) as info:
        ask(server, **kwargs)
    return str(info.value)


# ------------------------------------------------------------------ bodies as proxies send them


def test_gzip_compressed_event_stream_is_decoded(server):
    server.answer(server.events([chunk("<tool>"), chunk("x</tool>", "stop"), usage_chunk(9, 2)], gzip=True))
    assert ask(server) == Generation("<tool>x</tool>", "stop", 9, 2)


def test_one_json_body_for_a_streaming_request_is_read(server):
    server.answer(server.json_body(completion("<tool>x</tool>", "stop", reasoning="the cup")))
    assert ask(server) == Generation("the cup</think><tool>x</tool>", "stop", 50, 7, True)


def test_json_body_sent_as_an_event_stream_content_type_is_read_too(server):
    server.answer(server.json_body(completion("done", "length")))
    assert ask(server) == Generation("done", "length", 50, 7)


def test_server_that_rejects_stream_options_is_asked_again_without_and_it_is_remembered(server):
    def strict(handler, body):
        if "stream_options" in body:
            return server.json_body({"error": {"message": "Unrecognized request argument supplied: stream_options"}},
                                    status=400)(handler, body)
        return server.events([chunk("ok", "stop")])(handler, body)

    server.answer(strict)
    vlm = OpenAIServerVLM(server.url, "m", retry=QUICK)
    assert generate(vlm, MESSAGES) == Generation("ok", "stop")
    assert generate(vlm, MESSAGES) == Generation("ok", "stop")
    assert ["stream_options" in body for body in server.bodies] == [True, False, False]
    assert vlm.sends_stream_options is False


def test_done_without_a_finish_reason_ends_the_answer(server):
    server.answer(server.events([chunk("<tool>"), chunk("x</tool>")]))
    assert ask(server) == Generation("<tool>x</tool>", "stop")


def test_multi_line_data_events_and_comments_are_read_per_the_sse_format(server):
    server.answer(server.events([b": keep-alive\r\n\r\n", b"event: message\r\n",
                                 '{"choices": [{"index": 0,\ndata: "delta": {"content": "a"}}]}', chunk("b", "stop")]))
    assert ask(server).text == "ab"


def test_stream_ending_without_finish_reason_or_done_is_an_incomplete_answer(server):
    server.answer(server.events([chunk("a")], done=False))
    assert error_of(server) == (
        f"the VLM server at {server.url} (model m) closed the stream after 1 chunk(s) without a finish reason or "
        "[DONE]: the answer is incomplete (the server may have crashed or dropped the connection); check its log"
    )


# ------------------------------------------------------------------ errors in the stream


def test_error_chunk_keeps_the_servers_message(server):
    server.answer(server.events([chunk("a"), {"error": {"message": "engine died", "code": 500}}]))
    assert error_of(server) == f"the VLM server at {server.url} (model m) reported an error: engine died"


CONTEXT_HINT = (" (the request is longer than the model's context on the server: send smaller images with "
                "--max-pixels, or start the server with a longer context, e.g. vLLM's --max-model-len 32768)")


def test_older_vllm_error_chunk_keeps_the_servers_message_and_says_what_to_change(server):
    message = "This model's maximum context length is 32768 tokens. However, you requested 35012 tokens."
    server.answer(server.events([{"object": "error", "message": message, "type": "BadRequestError", "code": 400}]))
    assert error_of(server) == f"the VLM server at {server.url} (model m) reported an error: {message}{CONTEXT_HINT}"


@pytest.mark.parametrize("message", [
    "This model's maximum context length is 16384 tokens. However, you requested 17020 tokens (16000 in the "
    "messages, 1020 in the completion). Please reduce the length of the messages or completion.",  # vLLM
    "The input (17020 tokens) is longer than the model's context length (16384 tokens).",  # SGLang
])
def test_context_length_400_says_to_lower_max_pixels_or_raise_max_model_len(server, message):
    error = {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": 400}
    server.answer(server.json_body(error, 400))
    body = json_dumps(error)
    assert error_of(server) == (f"the VLM server at {server.url} (model m) answered HTTP 400 Bad Request: {body}"
                                f"{CONTEXT_HINT}")
    assert server.requests == 1


def test_a_400_about_something_else_gets_no_context_hint(server):
    server.answer(server.json_body({"error": {"message": "temperature must be non-negative"}}, 400))
    assert error_of(server).endswith('answered HTTP 400 Bad Request: {"error": {"message": "temperature must be '
                                     'non-negative"}}')


@pytest.mark.parametrize(("item", "what"), [
    ({"choices": "oops"}, "choices must be a list, usage an object"),
    ({"choices": ["text"]}, "a choice is not an object"),
    ({"choices": [{"index": 0, "delta": "text"}]}, "delta is not an object"),
    ({"choices": [{"index": 0, "delta": {"content": 5}}]}, "delta.content is not text"),
    ("not json at all", None),
])
def test_malformed_chunk_is_named(server, item, what):
    server.answer(server.events([item]))
    message = error_of(server)
    if what is None:
        assert message == f"the VLM server at {server.url} (model m) sent a stream chunk that is not JSON: 'not json at all'"
    else:
        assert message.startswith(f"the VLM server at {server.url} (model m) sent a malformed chunk ({what}): ")


# ------------------------------------------------------------------ retries


def test_429_with_retry_after_is_retried_after_the_wait_it_asks_for(server, caplog):
    server.answers(server.json_body({"error": {"message": "rate limited"}}, 429, {"Retry-After": "1"}),
                   server.events([chunk("ok", "stop")]))
    with caplog.at_level(logging.INFO, logger="sam3_agent.vlm.server_stream"):
        assert ask(server, retry=RetryPolicy()) == Generation("ok", "stop")
    assert server.requests == 2
    assert f"the VLM server at {server.url} (model m): HTTP 429; retrying in 1.0 s" in caplog.messages


def test_retry_after_longer_than_the_cap_is_capped(server, caplog):
    server.answers(server.json_body("busy", 503, {"Retry-After": "3600"}), server.events([chunk("ok", "stop")]))
    with caplog.at_level(logging.INFO, logger="sam3_agent.vlm.server_stream"):
        assert ask(server, retry=RetryPolicy(max_retry_after=0.05)).text == "ok"
    assert any(m.endswith("HTTP 503; retrying in 0.1 s") for m in caplog.messages)


def test_server_errors_are_retried_a_bounded_number_of_times_then_named(server):
    server.answer(server.json_body('{"error": "overloaded"}', 503))
    assert error_of(server) == (
        f'the VLM server at {server.url} (model m) answered HTTP 503 Service Unavailable after 3 attempts: '
        '{"error": "overloaded"}'
    )
    assert server.requests == 3


def test_a_proxys_413_is_not_retried_and_names_the_size_and_what_to_change(server):
    server.answer(server.html_page("<html><head><title>413 Request Entity Too Large</title></head><body><center>"
                                   "<h1>413 Request Entity Too Large</h1></center><hr><center>nginx</center>",
                                   status=413))
    sent = len(json_dumps(OpenAIServerVLM(server.url, "m").request_body(MESSAGES)).encode())
    assert error_of(server) == (
        f"the VLM server at {server.url} (model m) answered HTTP 413 Request Entity Too Large: <html><head><title>413 "
        "Request Entity Too Large</title></head><body><center><h1>413 Request Entity Too Large</h1></center><hr>"
        f"<center>nginx</center> (the request of {sent:,} bytes is larger than the server or a proxy in front of it "
        "accepts: send smaller images with --max-pixels, or raise the proxy's body limit, e.g. nginx's "
        "client_max_body_size)"
    )
    assert server.requests == 1


def test_http_404_hints_at_the_base_url(server):
    server.answer(server.json_body("Not Found", 404))
    assert "answered HTTP 404 Not Found: Not Found (check the base URL" in error_of(server)


def test_a_dropped_connection_before_any_answer_is_retried(server):
    server.answers(server.hang_up(), server.events([chunk("ok", "stop")]))
    assert ask(server) == Generation("ok", "stop")
    assert server.requests == 2


def test_error_body_excerpt_is_bounded(server):
    server.answer(server.json_body("x" * 100_000, 400))
    message = error_of(server)
    assert message.endswith("x" * 500) and len(message) < 700


# ------------------------------------------------------------------ time limits


def test_server_silent_before_answering_hits_the_read_timeout(server):
    server.answer(server.stall_before_headers())
    assert error_of(server, timeouts=ServerTimeouts(read=0.5)) == (
        f"the VLM server at {server.url} (model m) did not start answering within 0.5 s (read timeout): it may be "
        "overloaded or the request too large; raise --vlm-server-read-timeout or send smaller images (--max-pixels)"
    )


def test_server_silent_mid_answer_hits_the_read_timeout(server):
    server.answer(server.events([chunk("a"), chunk("b", "stop")], stall_after=1))
    assert error_of(server, timeouts=ServerTimeouts(read=0.5)) == (
        f"the VLM server at {server.url} (model m) sent nothing for 0.5 s in the middle of its answer "
        "(read timeout, --vlm-server-read-timeout)"
    )


@pytest.mark.parametrize("event", [b"data: " + b'{"choices": [{"index": 0, "delta": {"content": "a"}}]}' + b"\n\n",
                                   b": keep-alive\n\n"])
def test_server_that_drips_forever_is_stopped_by_the_deadline(server, event):
    server.answer(server.forever(event, every=0.05))
    message = error_of(server, timeouts=ServerTimeouts(read=5, deadline=1))
    assert message.startswith(f"the VLM server at {server.url} (model m) did not finish its answer within 1 s "
                              "(the deadline of one call; ")
    assert message.endswith("raise it with --vlm-server-deadline or SAM3_AGENT_VLM_SERVER_DEADLINE")


# ------------------------------------------------------------------ size limits


def test_server_that_ignores_max_tokens_is_cut_at_the_client_side_limit(server):
    server.answer(server.events([chunk("abcdefgh" * 10) for _ in range(500)] + [chunk("", "stop")]))
    result = generate(OpenAIServerVLM(server.url, "m", retry=QUICK), MESSAGES, max_new_tokens=3)
    assert result.finish_reason == "length"
    assert result.text == ("abcdefgh" * 20)[: 3 * MAX_CHARS_PER_TOKEN]  # the first chunk whole, the second cut


def test_json_body_longer_than_allowed_is_cut_too(server):
    server.answer(server.json_body(completion("y" * 10_000)))
    result = generate(OpenAIServerVLM(server.url, "m", retry=QUICK), MESSAGES, max_new_tokens=1)
    assert result == Generation("y" * MAX_CHARS_PER_TOKEN, "length", 50, 7)


def test_endless_empty_chunks_are_stopped_by_the_byte_limit(server):
    filler = chunk("", None, role="assistant")
    server.answer(server.events([filler] * 20_000))
    message = error_of(server, max_new_tokens=1)
    assert message == (f"the VLM server at {server.url} (model m) sent more than 1,050,624 bytes for one answer; the "
                       "call was stopped (a server that ignores max_tokens or never ends its stream)")


# ------------------------------------------------------------------ cancel


def test_stop_during_a_retry_wait_ends_the_call_at_once(server):
    server.answer(server.json_body("busy", 503, {"Retry-After": "30"}))
    stop = threading.Event()
    vlm = OpenAIServerVLM(server.url, "m", retry=RetryPolicy())
    stream = vlm.stream(MESSAGES, stop=stop)
    threading.Timer(0.3, stop.set).start()
    assert list(stream) == [Generation("", "cancelled", None, None)]
    assert server.requests == 1  # the reader gave up waiting: no second attempt
