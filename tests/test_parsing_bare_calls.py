"""Calls written without their tag or inside a list (run with a note when they are the only call), and a call
written only inside the reasoning (issue 20)."""

from __future__ import annotations

import pytest

from sam3_agent.agent.parsing import ParsedResponse, parse_response

DOG = '{"name": "segment_phrase", "parameters": {"text_prompt": "dog"}}'
NO_MASK = '{"name": "report_no_mask", "parameters": {}}'
STORED_DOG = '<think>{}</think>\n<tool>{{"name": "segment_phrase", "parameters": {{"text_prompt": "dog"}}}}</tool>'
DOG_CALL_FIELDS = {"name": "segment_phrase", "parameters": {"text_prompt": "dog"}}


def ran(thinking: str, notes: tuple[str, ...]) -> ParsedResponse:
    from sam3_agent.messages import ToolCall

    call = ToolCall("segment_phrase", {"text_prompt": "dog"}, "segment_phrase")
    return ParsedResponse(thinking, call, STORED_DOG.format(thinking), notes=notes)


def failed(text: str, key: str, thinking: str, fields: dict[str, str] | None = None) -> ParsedResponse:
    return ParsedResponse(thinking, None, text, key, fields or {})


@pytest.mark.parametrize(
    "after",
    [
        f"\n{DOG}",  # bare JSON
        f"\n```json\n{DOG}\n```",  # a fence
        f"\n{DOG}</tool>",  # opening tag missing
        f"\n<tools>{DOG}</tools>",  # the tag of the template's tool list
        f"\n<tools>\n{DOG}\n</tools>\nDone.",
    ],
)
def test_a_lone_call_without_its_tag_runs_with_a_note(after):
    assert parse_response(f"<think>The dog.</think>{after}") == ran("The dog.", ("untagged_call",))


def test_a_bare_call_without_think_tags_keeps_the_text_before_it_as_reasoning():
    text = f"I will look for the dog.\n```json\n{DOG}\n```"
    assert parse_response(text) == ran("I will look for the dog.", ("untagged_call",))


def test_a_one_element_list_in_the_tag_runs_with_a_note():
    assert parse_response(f"<think>t</think><tool>[{DOG}]</tool>") == ran("t", ("listed_call",))


def test_a_bare_one_element_list_runs_with_both_notes():
    assert parse_response(f"<think>t</think>[{DOG}]") == ran("t", ("untagged_call", "listed_call"))


def test_two_bare_calls_are_a_mistake_and_none_runs():
    text = f"<think>t</think>\n{DOG}\n{NO_MASK}"
    assert parse_response(text) == failed(text, "several_calls", "t", {"count": "2"})


def test_a_list_of_two_calls_is_a_mistake_tagged_or_not():
    tagged = f"<think>t</think><tool>[{DOG}, {NO_MASK}]</tool>"
    assert parse_response(tagged) == failed(tagged, "several_calls", "t", {"count": "2"})
    bare = f"<think>t</think>```json\n[{DOG}, {NO_MASK}]\n```"
    assert parse_response(bare) == failed(bare, "several_calls", "t", {"count": "2"})


def test_json_that_is_not_call_shaped_is_still_no_tool_call():
    text = '<think>t</think>\nI found {"text_prompt": "dog"} and {2} masks.'
    assert parse_response(text) == failed(text, "no_tool_call", "t")


def test_a_bare_call_naming_no_tool_is_unknown_tool():
    text = '<think>t</think>{"name": "find_dog", "parameters": {}}'
    assert parse_response(text).error == "unknown_tool"


def test_a_tagged_call_still_wins_over_bare_json_after_it():
    text = f"<think>t</think><tool>{DOG}</tool>\n{NO_MASK}"
    assert parse_response(text) == ran("t", ())


# ---------------------------------------------------------------- a call only inside the reasoning


def test_a_call_only_inside_closed_reasoning_is_call_in_reasoning():
    # a Thinking model: the template opened the reasoning, the call is in it, then prose claims success
    reasoning = f"I segment the dog: <tool>{DOG}</tool>"
    text = f"{reasoning}</think>\nI have segmented the dog."
    assert parse_response(text, starts_in_reasoning=True) == failed(text, "call_in_reasoning", reasoning)


def test_a_bare_call_only_inside_closed_reasoning_is_call_in_reasoning():
    text = f"<think>I will send {DOG}</think> Done, the dog is segmented."
    assert parse_response(text) == failed(text, "call_in_reasoning", f"I will send {DOG}")


def test_reasoning_without_any_call_and_no_call_after_is_no_tool_call():
    text = "<think>The dog is there.</think> Done."
    assert parse_response(text) == failed(text, "no_tool_call", "The dog is there.")


def test_a_call_inside_the_reasoning_cut_by_the_limit_after_it_closed_is_truncated():
    text = f"<think><tool>{DOG}</tool></think> I will now"
    assert parse_response(text, "length").error == "truncated"
