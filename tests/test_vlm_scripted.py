"""ScriptedVLM replay and load_script parsing."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from PIL import Image

from sam3_agent.errors import BackendError, InputError
from sam3_agent.messages import Generation, ImagePart, Message, TextPart
from sam3_agent.package_files import ASSETS_DIR
from sam3_agent.vlm.base import generate
from sam3_agent.vlm.scripted import ScriptedVLM, load_script, split_pieces

ASSETS = ASSETS_DIR  # the photos the package ships


@pytest.fixture(scope="module")
def chelsea() -> Image.Image:
    with Image.open(ASSETS / "chelsea.jpg") as img:
        return img.convert("RGB")


def user(text: str) -> list[Message]:
    return [Message("user", (TextPart(text),))]


def test_split_pieces_keeps_whitespace_with_each_word():
    assert split_pieces("  <think>a cat\n</think> ok ") == ["  ", "<think>a ", "cat\n", "</think> ", "ok "]
    assert split_pieces("") == []


def test_responses_are_streamed_in_word_pieces_then_a_generation():
    vlm = ScriptedVLM(["find the  cat\nnow"])
    items = list(vlm.stream(user("q")))
    assert items == ["find ", "the  ", "cat\n", "now", Generation("find the  cat\nnow", "stop", None, 4)]


def test_responses_are_replayed_in_order():
    vlm = ScriptedVLM(["first", Generation("second", "length", 100, 7)])
    assert generate(vlm, user("a")) == Generation("first", "stop", None, 1)
    assert generate(vlm, user("b")) == Generation("second", "length", 100, 7)
    assert vlm.calls == 2
    assert vlm.remaining == 0


def test_every_request_is_recorded_with_its_images(chelsea):
    vlm = ScriptedVLM(["x", "y"])
    first = [Message("system", (TextPart("sys"),)), Message("user", (ImagePart(chelsea, "raw"), TextPart("the cat")))]
    generate(vlm, first)
    generate(vlm, user("again"))
    assert vlm.requests == [first, user("again")]
    assert vlm.requests[0][1].images[0].image is chelsea
    assert vlm.requests[0] is not first  # a copy of the caller's list


def test_running_out_of_responses_raises_backend_error_with_the_count():
    vlm = ScriptedVLM(["only one"], name="main-script")
    generate(vlm, user("a"))
    with pytest.raises(BackendError, match=r"scripted VLM 'main-script' ran out of responses after 1 calls"):
        generate(vlm, user("b"))


def test_a_function_script_sees_the_messages_of_each_call():
    def respond(messages):
        return "echo: " + messages[-1].text

    vlm = ScriptedVLM(respond)
    assert generate(vlm, user("one")).text == "echo: one"
    assert generate(vlm, user("two")).text == "echo: two"
    assert vlm.remaining is None
    assert [r[-1].text for r in vlm.requests] == ["one", "two"]


def test_a_function_returning_something_else_raises_backend_error():
    vlm = ScriptedVLM(lambda messages: 42)
    with pytest.raises(BackendError, match="returned 'int' on call 1"):
        generate(vlm, user("q"))


def test_stop_set_before_the_call_cancels_with_no_text():
    stop = threading.Event()
    stop.set()
    vlm = ScriptedVLM(["never shown"])
    assert list(vlm.stream(user("q"), stop=stop)) == [Generation("", "cancelled", None, 0)]


def test_stop_set_mid_stream_cancels_with_the_text_so_far():
    stop = threading.Event()
    stream = ScriptedVLM(["one two three"]).stream(user("q"), stop=stop)
    assert next(stream) == "one "
    assert next(stream) == "two "
    stop.set()
    assert list(stream) == [Generation("one two ", "cancelled", None, 2)]


def test_bad_response_types_are_refused_at_construction():
    with pytest.raises(TypeError, match="response 1 is 'int'"):
        ScriptedVLM(["ok", 3])


# ---------------------------------------------------------------- load_script


def write(tmp_path: Path, content: str) -> Path:
    path = tmp_path / "script.json"
    path.write_text(content, encoding="utf-8")
    return path


def test_a_list_script_is_all_main_responses(tmp_path):
    path = write(tmp_path, json.dumps(["a", {"text": "b", "finish_reason": "length"}, {"text": "c"}]))
    assert load_script(path) == {
        "main": ["a", Generation("b", "length"), Generation("c", "stop")],
        "verify": [],
    }


def test_an_object_script_has_main_and_verify(tmp_path):
    path = write(tmp_path, json.dumps({"main": ["m1"], "verify": ["<verdict>Accept</verdict>", {"text": "v2"}]}))
    assert load_script(str(path)) == {"main": ["m1"], "verify": ["<verdict>Accept</verdict>", Generation("v2")]}


def test_verify_may_be_left_out(tmp_path):
    assert load_script(write(tmp_path, '{"main": []}')) == {"main": [], "verify": []}


def test_a_missing_file_raises_input_error_naming_it(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(InputError, match=f"script file {missing} does not exist"):
        load_script(missing)


def test_bad_json_raises_input_error_with_line_and_column(tmp_path):
    path = write(tmp_path, '["a",\n  "b" "c"]')
    with pytest.raises(InputError, match=rf"script file {path} is not valid JSON \(line 2, column 7"):
        load_script(path)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ('"just text"', "must hold a list of responses or an object"),
        ('{"verify": []}', 'has no "main" list'),
        ('{"main": [], "extra": []}', "unknown keys \\['extra'\\]"),
        ('{"main": "a"}', '"main" must be a list of responses, got a string'),
        ('["a", 5]', "the list item 1: expected a string or an object"),
        ('{"main": [{"txt": "a"}]}', '"main" item 0: unknown keys'),
        ('{"main": [], "verify": [{"text": 3}]}', '"verify" item 0: "text" must be a string, got a number'),
        ('[{"text": "a", "finish_reason": "cancelled"}]', "must be \"stop\" or \"length\", got 'cancelled'"),
    ],
)
def test_wrong_shapes_raise_input_error_naming_the_problem(tmp_path, content, problem):
    path = write(tmp_path, content)
    with pytest.raises(InputError, match=problem) as info:
        load_script(path)
    assert str(path) in str(info.value)
