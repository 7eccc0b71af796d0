"""OpenAIServerVLM against a real local HTTP server: request shape, streaming, reasoning, images sent."""

from __future__ import annotations

import base64
import io
import json
import socket
import threading
import time

import pytest
from fake_server import FakeServer, chunk, usage_chunk
from PIL import Image

from sam3_agent.errors import BackendError, InputError
from sam3_agent.limits import DEFAULT_MAX_PIXELS
from sam3_agent.messages import Generation, ImagePart, Message, TextPart, images_equal
from sam3_agent.package_files import ASSETS_DIR
from sam3_agent.vlm.base import generate
from sam3_agent.vlm.openai_server import OpenAIServerVLM, ServerTimeouts
from sam3_agent.vlm.server_retry import RetryPolicy

ASSETS = ASSETS_DIR  # the photos the package ships
QUICK = RetryPolicy(retries=2, backoff=0.01)  # retries are not what these tests are about


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


def decoded(url: str) -> Image.Image:
    header, data = url.split(",", 1)
    return Image.open(io.BytesIO(base64.b64decode(data)))


def test_request_body_carries_model_messages_and_images(server, coffee):
    server.answer(server.events([chunk("ok", "stop")]))
    vlm = OpenAIServerVLM(server.url, "Qwen/Qwen3-VL-8B-Instruct", api_key="sk-test", max_new_tokens=77)
    overlay = coffee.copy()
    messages = conversation(coffee) + [Message("user", (TextPart("masks"), ImagePart(overlay, "round1_overlay")))]
    generate(vlm, messages)

    assert server.paths == ["/v1/chat/completions"]
    body = server.bodies[0]
    assert body["model"] == "Qwen/Qwen3-VL-8B-Instruct"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert not {"temperature", "top_p", "top_k", "seed"} & body.keys()  # the server's own sampling applies
    assert body["max_tokens"] == 77
    assert body["messages"][0] == {"role": "system", "content": "You segment things."}
    user = body["messages"][1]
    assert [item["type"] for item in user["content"]] == ["image_url", "text"]
    assert user["content"][1] == {"type": "text", "text": "the cup on the left"}
    photo_url = user["content"][0]["image_url"]["url"]
    assert photo_url.startswith("data:image/jpeg;base64,")  # the photo as JPEG, at its size (within the bounds)
    assert decoded(photo_url).format == "JPEG" and decoded(photo_url).size == coffee.size
    overlay_url = body["messages"][2]["content"][1]["image_url"]["url"]
    assert overlay_url.startswith("data:image/png;base64,")  # rendered views stay exact
    assert images_equal(decoded(overlay_url).convert("RGB"), overlay)
    headers = server.headers[0]
    assert headers["Authorization"] == "Bearer sk-test" and headers["Accept-Encoding"] == "identity"


def test_a_12_megapixel_photo_is_sent_within_the_pixel_budget(server):
    from conftest import photo

    big = photo("astronaut.jpg").resize((4000, 3000))
    server.answer(server.events([chunk("ok", "stop")]))
    view = big.copy()
    messages = [Message("system", (TextPart("verify"),)),
                Message("user", (ImagePart(big, "raw"), ImagePart(view, "round2_mask1_view"),
                                 ImagePart(big.crop((0, 0, 4000, 300)), "round2_mask1_zoom"), TextPart("mask 1?")))]
    generate(OpenAIServerVLM(server.url, "m"), messages)
    images = [decoded(item["image_url"]["url"]) for item in server.bodies[0]["messages"][1]["content"][:3]]
    assert [im.format for im in images] == ["JPEG", "PNG", "PNG"]
    assert all(im.width * im.height <= DEFAULT_MAX_PIXELS for im in images)
    assert images[0].size == (1156, 867)  # 4000 x 3000 scaled into 1,003,520 px, aspect kept
    # before: three full-resolution PNGs, about 36 MB; now a few MB (the measured size is in the issue note)
    assert len(json.dumps(server.bodies[0])) < 6_000_000


def test_the_photo_is_encoded_once_for_every_request_of_a_run(server, coffee, monkeypatch):
    import sam3_agent.vlm.openai_server as module

    calls = []
    original = module.image_data_url
    monkeypatch.setattr(module, "image_data_url", lambda image, kind="PNG": calls.append(kind) or original(image, kind))
    server.answer(server.events([chunk("ok", "stop")]))
    vlm = OpenAIServerVLM(server.url, "m")
    generate(vlm, conversation(coffee))
    generate(vlm, conversation(coffee))
    assert calls == ["JPEG"]
    assert server.bodies[0]["messages"] == server.bodies[1]["messages"]


def test_streamed_pieces_and_final_generation_with_usage(server, coffee):
    server.answer(server.events([
        chunk("", None, role="assistant"),
        chunk("<tool>"),
        chunk('{"name": "report_no_mask"}'),
        chunk("</tool>", "stop"),
        usage_chunk(1234, 17),
    ]))
    vlm = OpenAIServerVLM(server.url + "/", "m")  # a trailing slash is tolerated
    items = list(vlm.stream(conversation(coffee), max_new_tokens=50))

    assert items[:-1] == ["<tool>", '{"name": "report_no_mask"}', "</tool>"]
    assert items[-1] == Generation('<tool>{"name": "report_no_mask"}</tool>', "stop", 1234, 17)
    assert server.bodies[0]["max_tokens"] == 50


def test_usage_missing_leaves_token_counts_unknown(server, coffee):
    server.answer(server.events([chunk("hello", "stop")]))
    result = generate(OpenAIServerVLM(server.url, "m"), conversation(coffee))
    assert result == Generation("hello", "stop", None, None)


def test_reasoning_content_is_used_closed_with_think_end_tag_and_marked(server, coffee):
    server.answer(server.events([
        chunk(None, None, reasoning_content="The cup is "),
        chunk(None, None, reasoning_content="on the left.\n"),
        chunk("\n\n<tool>x</tool>", "stop"),
    ]))
    items = list(OpenAIServerVLM(server.url, "m").stream(conversation(coffee)))
    assert items[:-1] == ["The cup is ", "on the left.\n", "</think>\n\n<tool>x</tool>"]
    assert items[-1] == Generation("The cup is on the left.\n</think>\n\n<tool>x</tool>", "stop", None, None, True)


def test_reasoning_field_name_of_newer_servers_is_used_too(server, coffee):
    server.answer(server.events([chunk("", None, reasoning="thinking"), chunk(None, "length", reasoning=" more")]))
    result = generate(OpenAIServerVLM(server.url, "m"), conversation(coffee))
    assert result == Generation("thinking more", "length", None, None, starts_in_reasoning=True)


def test_both_reasoning_field_names_in_one_chunk_are_not_doubled(server, coffee):
    server.answer(server.events([chunk("ok", "stop", reasoning_content="why", reasoning="why")]))
    assert generate(OpenAIServerVLM(server.url, "m"), conversation(coffee)).text == "why</think>ok"


def test_answer_without_reasoning_fields_is_not_marked(server, coffee):
    server.answer(server.events([chunk("<think>a</think><tool>x</tool>", "stop")]))
    assert not generate(OpenAIServerVLM(server.url, "m"), conversation(coffee)).starts_in_reasoning


def test_reasoning_and_content_in_one_chunk_are_both_kept(server, coffee):
    server.answer(server.events([chunk("answer", "stop", reasoning_content="why\n")]))
    result = generate(OpenAIServerVLM(server.url, "m"), conversation(coffee))
    assert result.text == "why\n</think>answer"


def test_finish_reason_length_is_reported_as_length(server, coffee):
    server.answer(server.events([chunk("partial "), chunk("answer", "length"), usage_chunk(10, 2)]))
    result = generate(OpenAIServerVLM(server.url, "m"), conversation(coffee), max_new_tokens=2)
    assert result == Generation("partial answer", "length", 10, 2)


def test_closed_port_raises_backend_error_naming_url_model_and_how_to_start_it(coffee):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    vlm = OpenAIServerVLM(url, "Qwen/Qwen3-VL-8B-Instruct", timeouts=ServerTimeouts(connect=5), retry=QUICK)
    with pytest.raises(BackendError) as info:
        generate(vlm, conversation(coffee))
    message = str(info.value)
    assert message.startswith(f"cannot reach the VLM server at {url} (model Qwen/Qwen3-VL-8B-Instruct) after 3 attempt(s)")
    assert "Connection refused" in message and "vllm serve Qwen/Qwen3-VL-8B-Instruct" in message
    assert "Error" not in message  # no exception class names


def test_stop_event_cancels_a_stalled_stream_promptly(server, coffee):
    server.answer(server.events([chunk("first "), chunk("never", "stop")], stall_after=1))
    stop = threading.Event()
    stream = OpenAIServerVLM(server.url, "m").stream(conversation(coffee), stop=stop)
    assert next(stream) == "first "
    stop.set()
    rest = list(stream)  # without the stop the stalled stream would end in a read-timeout error, not this
    assert rest == [Generation("first ", "cancelled", None, None)]
    # the reading thread saw the connection shut down and ended too (so the server can abort)
    deadline = time.perf_counter() + 60  # the stall lasts until teardown: only a stop ends the thread
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


def test_timeouts_come_from_flags_then_environment_then_defaults():
    env = {"SAM3_AGENT_VLM_SERVER_READ_TIMEOUT": "30", "SAM3_AGENT_VLM_SERVER_DEADLINE": "90"}
    assert ServerTimeouts.resolve(deadline=45, environ=env) == ServerTimeouts(connect=10.0, read=30.0, deadline=45.0)
    assert ServerTimeouts.resolve(environ={}) == ServerTimeouts(10.0, 120.0, 600.0)
    with pytest.raises(InputError, match="SAM3_AGENT_VLM_SERVER_CONNECT_TIMEOUT='soon' is not a number"):
        ServerTimeouts.resolve(environ={"SAM3_AGENT_VLM_SERVER_CONNECT_TIMEOUT": "soon"})
    with pytest.raises(InputError, match="deadline timeout must be a positive number"):
        ServerTimeouts(deadline=0)


def test_the_sampling_asked_for_is_sent_and_a_view_shares_the_server_with_its_own(server, coffee):
    server.answer(server.events([chunk("ok", "stop")]))
    vlm = OpenAIServerVLM(server.url, "m", max_new_tokens=50, sampling={"temperature": 0.6, "top_k": 20, "seed": 3})
    verifier = vlm.with_sampling({"temperature": 0}, max_new_tokens=9)
    generate(vlm, conversation(coffee))
    generate(verifier, conversation(coffee))
    sent = [{k: b[k] for k in ("temperature", "top_p", "top_k", "seed", "max_tokens") if k in b} for b in server.bodies]
    assert sent == [{"temperature": 0.6, "top_k": 20, "seed": 3, "max_tokens": 50}, {"temperature": 0, "max_tokens": 9}]
    assert verifier.gate is vlm.gate and verifier._encoded is vlm._encoded
