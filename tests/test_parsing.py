"""Parsing of the main model's answers and of per-mask verdicts: one behaviour per test."""

from __future__ import annotations

import json

import pytest

from sam3_agent.agent.parsing import ParsedResponse, canonical_tool_name, parse_response
from sam3_agent.agent.verdicts import parse_group_verdicts, parse_verdict
from sam3_agent.messages import ToolCall

SEGMENT_DOG = '{"name": "segment_phrase", "parameters": {"text_prompt": "dog"}}'
STORED_DOG = '<think>{}</think>\n<tool>{{"name": "segment_phrase", "parameters": {{"text_prompt": "dog"}}}}</tool>'
DOG_CALL = ToolCall("segment_phrase", {"text_prompt": "dog"}, "segment_phrase")
ALL_TOOLS = "segment_phrase, examine_each_mask, select_masks_and_return, report_no_mask"


def _ok(thinking: str, call: ToolCall, **extra: object) -> ParsedResponse:
    """The expected result of a usable answer whose normalised text holds ``call``."""
    payload = json.dumps({"name": call.name, "parameters": call.parameters}, ensure_ascii=False)
    return ParsedResponse(
        thinking=thinking,
        call=call,
        stored_text=f"<think>{thinking}</think>\n<tool>{payload}</tool>",
        **extra,  # type: ignore[arg-type]
    )


def _err(text: str, key: str, thinking: str = "", fields: dict[str, str] | None = None) -> ParsedResponse:
    """The expected result of an answer with the mistake ``key`` (raw text stored, no call)."""
    return ParsedResponse(thinking, None, text, key, fields or {}, 0, False)


# ---------------------------------------------------------------- thinking


def test_well_formed_answer_gives_thinking_call_and_normalised_text():
    text = f"<think>\nThe query wants the dog.\n</think>\n\n<tool>{SEGMENT_DOG}</tool>\n"
    assert parse_response(text) == ParsedResponse(
        thinking="The query wants the dog.",
        call=DOG_CALL,
        stored_text=STORED_DOG.format("The query wants the dog."),
        error=None,
        error_fields={},
        ignored_calls=0,
        name_corrected=False,
    )


def test_only_closing_think_tag_is_normal_for_thinking_templates():
    text = f"The template opened the reasoning.</think><tool>{SEGMENT_DOG}</tool>"
    assert parse_response(text) == _ok("The template opened the reasoning.", DOG_CALL)


def test_thinking_ends_at_first_closing_tag_and_calls_inside_it_are_ignored():
    text = (
        "<think>Example: <tool>{\"name\": \"report_no_mask\"}</tool></think> second thought"
        f"<tool>{SEGMENT_DOG}</tool>"
    )
    result = parse_response(text)
    assert result.thinking == 'Example: <tool>{"name": "report_no_mask"}</tool>'
    assert result.call == DOG_CALL
    assert result.ignored_calls == 0


def test_two_think_then_call_pairs_run_the_first_call():
    text = f"<think>a</think><tool>{SEGMENT_DOG}</tool><think>b</think><tool>{{\"name\": \"report_no_mask\"}}</tool>"
    result = parse_response(text)
    assert result.thinking == "a" and result.call == DOG_CALL and result.ignored_calls == 1


def test_call_without_think_tags_is_accepted_with_empty_thinking():
    assert parse_response(f"<tool>{SEGMENT_DOG}</tool>") == _ok("", DOG_CALL)


def test_text_before_the_tool_tag_without_think_tags_becomes_thinking():
    assert parse_response(f"I need every dog first.\n<tool>{SEGMENT_DOG}</tool>") == _ok(
        "I need every dog first.", DOG_CALL
    )


def test_thinking_keeps_text_written_before_the_opening_tag():
    text = f"Sure.<think>The dog.</think><tool>{SEGMENT_DOG}</tool>"
    assert parse_response(text).thinking == "Sure.\nThe dog."


def test_unclosed_think_is_reported():
    text = f"<think>I will segment the dog <tool>{SEGMENT_DOG}</tool>"
    assert parse_response(text) == _err(text, "unclosed_think", thinking=f"I will segment the dog <tool>{SEGMENT_DOG}</tool>")


def test_unclosed_think_at_the_length_limit_is_truncated():
    text = "<think>There are many dogs and"
    assert parse_response(text, finish_reason="length") == _err(text, "truncated", thinking="There are many dogs and")


def test_length_limit_inside_the_call_is_truncated():
    text = '<think>ok</think><tool>{"name": "segment_phrase", "parameters": {"text_pro'
    assert parse_response(text, finish_reason="length") == _err(text, "truncated", thinking="ok")


def test_length_limit_before_any_call_is_truncated():
    text = "<think>ok</think>Now I will"
    assert parse_response(text, finish_reason="length") == _err(text, "truncated", thinking="ok")


def test_length_limit_after_a_complete_call_keeps_the_call():
    text = f"<think>ok</think><tool>{SEGMENT_DOG}</tool> and then I would"
    assert parse_response(text, finish_reason="length") == _ok("ok", DOG_CALL)


# ---------------------------------------------------------------- no call


@pytest.mark.parametrize("text", ["", "  \n\t "])
def test_empty_or_whitespace_output_is_reported(text):
    assert parse_response(text) == _err(text, "empty_output")


def test_text_without_tool_tag_is_no_tool_call():
    text = "I think it is the child on the left."
    assert parse_response(text) == _err(text, "no_tool_call", thinking=text)


def test_nothing_after_closing_think_is_no_tool_call():
    text = "<think>The child on the left.</think>\n"
    assert parse_response(text) == _err(text, "no_tool_call", thinking="The child on the left.")


# ---------------------------------------------------------------- tags


def test_qwen_tool_call_tag_and_arguments_key_are_accepted():
    text = '<think>t</think>\n<tool_call>\n{"name": "segment_phrase", "arguments": {"text_prompt": "dog"}}\n</tool_call>'
    assert parse_response(text) == _ok("t", DOG_CALL)


def test_missing_closing_tag_uses_the_balanced_object():
    text = f"<think>t</think><tool>{SEGMENT_DOG}\nThat should find them."
    assert parse_response(text) == _ok("t", DOG_CALL)


def test_closing_tag_replaced_by_junk_uses_the_balanced_object():
    text = f"<think>t</think><tool>{SEGMENT_DOG}</tol>>"
    assert parse_response(text) == _ok("t", DOG_CALL)


def test_balanced_extraction_ignores_braces_and_quotes_inside_strings():
    text = '<think>t</think><tool>{"name": "segment_phrase", "parameters": {"text_prompt": "a }{ \\"sign\\""}} junk'
    assert parse_response(text).call == ToolCall("segment_phrase", {"text_prompt": 'a }{ "sign"'}, "segment_phrase")


# ---------------------------------------------------------------- JSON repairs


def test_code_fence_inside_the_tags_is_removed():
    text = f"<think>t</think><tool>\n```json\n{SEGMENT_DOG}\n```\n</tool>"
    assert parse_response(text) == _ok("t", DOG_CALL)


def test_trailing_commas_are_removed():
    text = '<think>t</think><tool>{"name": "select_masks_and_return", "parameters": {"final_answer_masks": [1, 3,],},}</tool>'
    call = ToolCall("select_masks_and_return", {"final_answer_masks": [1, 3]}, "select_masks_and_return")
    assert parse_response(text) == _ok("t", call)


def test_comma_inside_a_string_before_a_brace_is_kept():
    text = '<think>t</think><tool>{"name": "segment_phrase", "parameters": {"text_prompt": "a, }"},}</tool>'
    assert parse_response(text).call == ToolCall("segment_phrase", {"text_prompt": "a, }"}, "segment_phrase")


def test_surplus_closing_braces_are_dropped():
    text = f"<think>t</think><tool>{SEGMENT_DOG}}}}}</tool>"
    assert parse_response(text) == _ok("t", DOG_CALL)


def test_missing_closing_braces_before_the_closing_tag_are_added():
    text = '<think>t</think><tool>{"name": "segment_phrase", "parameters": {"text_prompt": "dog"}</tool>'
    assert parse_response(text) == _ok("t", DOG_CALL)


def test_typographic_double_quotes_are_read_as_json_quotes():
    text = ("<think>t</think><tool>{\u201cname\u201d: \u201csegment_phrase\u201d, "
            "\u201cparameters\u201d: {\u201ctext_prompt\u201d: \u201cdog\u201d}}</tool>")
    assert parse_response(text) == _ok("t", DOG_CALL)


def test_typographic_single_quotes_are_read_as_json_quotes():
    text = "<think>t</think><tool>{\u2018name\u2019: \u2018report_no_mask\u2019, \u2018parameters\u2019: {}}</tool>"
    assert parse_response(text) == _ok("t", ToolCall("report_no_mask", {}, "report_no_mask"))


def test_apostrophe_inside_typographic_double_quotes_survives():
    text = (
        "<think>t</think><tool>{\u201cname\u201d: \u201csegment_phrase\u201d, \u201cparameters\u201d: "
        "{\u201ctext_prompt\u201d: \u201cchild\u2019s kite\u201d}}</tool>"
    )
    assert parse_response(text).call == ToolCall("segment_phrase", {"text_prompt": "child\u2019s kite"}, "segment_phrase")


def test_typographic_quotes_inside_valid_json_are_left_alone():
    text = '<think>t</think><tool>{"name": "segment_phrase", "parameters": {"text_prompt": "\u201cstop\u201d sign"}}</tool>'
    assert parse_response(text).call == ToolCall("segment_phrase", {"text_prompt": "\u201cstop\u201d sign"}, "segment_phrase")


def test_unrepairable_json_is_bad_json_with_the_parser_message():
    text = '<think>t</think><tool>{"name": "segment_phrase", "parameters": {"text_prompt": dog}}</tool>'
    assert parse_response(text) == _err(
        text, "bad_json", thinking="t", fields={"detail": "Expecting value: line 1 column 58 (char 57)"}
    )


def test_tag_without_json_is_bad_json():
    text = "<think>t</think><tool>segment the dogs</tool>"
    assert parse_response(text) == _err(
        text, "bad_json", thinking="t", fields={"detail": "Expecting value: line 1 column 1 (char 0)"}
    )


# ---------------------------------------------------------------- call shape


def test_json_that_is_not_an_object_is_bad_call():
    text = '<think>t</think><tool>["segment_phrase", "dog"]</tool>'
    assert parse_response(text) == _err(
        text, "bad_call", thinking="t", fields={"detail": 'expected a JSON object with a "name" key, got a JSON array'}
    )


def test_object_without_name_is_bad_call():
    text = '<think>t</think><tool>{"parameters": {"text_prompt": "dog"}}</tool>'
    assert parse_response(text) == _err(text, "bad_call", thinking="t", fields={"detail": 'the JSON object has no "name" key'})


def test_name_that_is_not_a_string_is_bad_call():
    text = '<think>t</think><tool>{"name": 3}</tool>'
    assert parse_response(text) == _err(
        text, "bad_call", thinking="t", fields={"detail": 'the JSON object has a "name" that is not a non-empty string'}
    )


def test_parameters_that_are_not_an_object_are_bad_call():
    text = '<think>t</think><tool>{"name": "segment_phrase", "parameters": "dog"}</tool>'
    assert parse_response(text) == _err(
        text, "bad_call", thinking="t", fields={"detail": '"parameters" must be a JSON object, got a JSON string'}
    )


@pytest.mark.parametrize("params", ["", ', "parameters": null'])
def test_absent_or_null_parameters_become_an_empty_object(params):
    text = f'<think>t</think><tool>{{"name": "examine_each_mask"{params}}}</tool>'
    assert parse_response(text) == _ok("t", ToolCall("examine_each_mask", {}, "examine_each_mask"))


def test_parameter_values_are_not_validated():
    text = '<think>t</think><tool>{"name": "segment_phrase", "parameters": {"text_prompt": 5, "extra": [1]}}</tool>'
    assert parse_response(text).call == ToolCall("segment_phrase", {"text_prompt": 5, "extra": [1]}, "segment_phrase")


def test_unknown_tool_is_reported_with_the_name_as_written_and_the_tool_list():
    text = '<think>t</think><tool>{"name": "segment", "parameters": {"text_prompt": "dog"}}</tool>'
    assert parse_response(text) == _err(text, "unknown_tool", thinking="t", fields={"name": "segment", "tools": ALL_TOOLS})


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("segment_phrase", "segment_phrase"),
        ("Segment_Phrase", "segment_phrase"),
        ("segment-phrase", "segment_phrase"),
        (" SEGMENT PHRASE ", "segment_phrase"),
        ("ExamineEachMask", "examine_each_mask"),
        ("select-masks-and-return", "select_masks_and_return"),
        ("report no mask", "report_no_mask"),
        ("segment", None),
        ("segment_phrases", None),
        ("", None),
    ],
)
def test_canonical_tool_name_maps_spelling_variants(raw, expected):
    assert canonical_tool_name(raw) == expected


def test_spelling_variant_in_a_call_is_corrected_and_flagged():
    text = '<think>t</think><tool>{"name": "Report-No-Mask", "parameters": {}}</tool>'
    assert parse_response(text) == _ok("t", ToolCall("report_no_mask", {}, "Report-No-Mask"), name_corrected=True)


def test_only_the_first_of_several_calls_is_returned_and_stored():
    text = (
        f"<think>t</think><tool>{SEGMENT_DOG}</tool>\n"
        '<tool>{"name": "examine_each_mask", "parameters": {}}</tool>\n'
        '<tool_call>{"name": "report_no_mask"}</tool_call>'
    )
    assert parse_response(text) == _ok("t", DOG_CALL, ignored_calls=2)


def test_several_calls_without_closing_tags_are_split_at_the_next_opening_tag():
    text = f'<think>t</think><tool>{SEGMENT_DOG}<tool>{{"name": "report_no_mask"}}'
    assert parse_response(text) == _ok("t", DOG_CALL, ignored_calls=1)


def test_stored_text_keeps_non_ascii_characters():
    text = '<think>Café</think><tool>{"name": "segment_phrase", "parameters": {"text_prompt": "crème brûlée"}}</tool>'
    assert parse_response(text).stored_text == (
        '<think>Café</think>\n<tool>{"name": "segment_phrase", "parameters": {"text_prompt": "crème brûlée"}}</tool>'
    )


# ---------------------------------------------------------------- verdicts


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>It is the cup.</think>\n<verdict>Accept</verdict>", ("accept", None)),
        ("<think>Wrong cup.</think><verdict>Reject</verdict>", ("reject", None)),
        ("<verdict> ACCEPT </verdict>", ("accept", None)),
        ("<verdict>\nreject\n</verdict>", ("reject", None)),
        ("<VERDICT>Accept</VERDICT>", ("accept", None)),
    ],
)
def test_verdict_is_read_case_insensitively_with_whitespace(text, expected):
    assert parse_verdict(text) == expected


def test_verdict_inside_thinking_is_ignored():
    assert parse_verdict("<think>Maybe <verdict>Reject</verdict>?</think>\n<verdict>Accept</verdict>") == ("accept", None)


def test_verdict_only_inside_thinking_is_missing():
    assert parse_verdict("<think>I would say <verdict>Reject</verdict></think> done") == (None, "missing_verdict")


def test_answer_without_verdict_tag_is_missing_verdict():
    assert parse_verdict("<think>It is the cup.</think> Accept") == (None, "missing_verdict")


def test_verdict_tag_without_either_word_is_missing_verdict():
    assert parse_verdict("<verdict>unsure</verdict>") == (None, "missing_verdict")


def test_verdict_tag_holding_both_words_is_ambiguous():
    assert parse_verdict("<verdict>Accept or Reject</verdict>") == (None, "ambiguous_verdict")


def test_a_later_verdict_tag_overrides_an_earlier_one_in_both_orders():
    assert parse_verdict("<verdict>Accept</verdict> no wait <verdict>Reject</verdict>") == ("reject", None)
    assert parse_verdict("<verdict>Reject</verdict> no wait <verdict>Accept</verdict>") == ("accept", None)


def test_two_tags_offered_as_alternatives_are_ambiguous():
    text = "<think>t</think>I must end with <verdict>Accept</verdict> or <verdict>Reject</verdict>."
    assert parse_verdict(text) == (None, "ambiguous_verdict")


def test_agreeing_verdict_tags_give_that_verdict():
    assert parse_verdict("<verdict>Reject</verdict>\n<verdict>reject</verdict>") == ("reject", None)


def test_verdict_without_closing_tag_is_read():
    assert parse_verdict("<think>ok</think><verdict>Accept") == ("accept", None)


# ---------------------------------------------------------------- calls found by structure (issue 10)


def test_closing_tag_inside_a_string_value_does_not_end_the_call():
    text = '<think>t</think><tool>{"name": "segment_phrase", "parameters": {"text_prompt": "sign saying </tool>"}}</tool>'
    assert parse_response(text) == _ok("t", ToolCall("segment_phrase", {"text_prompt": "sign saying </tool>"}, "segment_phrase"))


def test_opening_tag_inside_a_string_value_is_not_an_ignored_call():
    text = '<think>t</think><tool>{"name": "segment_phrase", "parameters": {"text_prompt": "<tool> icon"}}</tool>'
    assert parse_response(text) == _ok("t", ToolCall("segment_phrase", {"text_prompt": "<tool> icon"}, "segment_phrase"))


def test_full_width_punctuation_as_json_syntax_is_read_and_string_values_keep_theirs():
    text = (
        "<think>t</think><tool>\uff5b\u201cname\u201d\uff1a\u201csegment_phrase\u201d\uff0c"
        "\u201cparameters\u201d\uff1a\uff5b\u201ctext_prompt\u201d\uff1a\u201c\u7ea2\u8272\uff0c\u6c7d\u8f66\uff1a\u5de6\u201d\uff5d\uff5d</tool>"
    )
    call = ToolCall("segment_phrase", {"text_prompt": "\u7ea2\u8272\uff0c\u6c7d\u8f66\uff1a\u5de6"}, "segment_phrase")
    assert parse_response(text) == _ok("t", call)


def test_full_width_brackets_in_a_selection_are_read():
    text = '<think>t</think><tool>{"name": "select_masks_and_return", "parameters": {"final_answer_masks": \uff3b1\uff0c 2\uff3d}}</tool>'
    call = ToolCall("select_masks_and_return", {"final_answer_masks": [1, 2]}, "select_masks_and_return")
    assert parse_response(text) == _ok("t", call)


def test_python_literal_dict_is_read_with_literal_eval():
    text = "<think>t</think><tool>{'name': 'segment_phrase', 'parameters': {'text_prompt': \"dog's bowl\"}}</tool>"
    assert parse_response(text) == _ok("t", ToolCall("segment_phrase", {"text_prompt": "dog's bowl"}, "segment_phrase"))


def test_python_constants_are_read_as_json_ones():
    text = "<think>t</think><tool>{'name': 'examine_each_mask', 'parameters': None}</tool>"
    assert parse_response(text) == _ok("t", ToolCall("examine_each_mask", {}, "examine_each_mask"))
    text = "<think>t</think><tool>{'name': 'segment_phrase', 'parameters': {'text_prompt': True}}</tool>"
    assert parse_response(text).call == ToolCall("segment_phrase", {"text_prompt": True}, "segment_phrase")


def test_python_expression_is_never_evaluated():
    text = "<think>t</think><tool>{'name': __import__('os').getcwd(), 'parameters': {}}</tool>"
    result = parse_response(text)
    assert result.call is None and result.error == "bad_json"


def test_python_set_or_bytes_value_is_not_a_call():
    for literal in ("{'text_prompt'}", "b'dog'"):
        text = f"<think>t</think><tool>{{'name': 'segment_phrase', 'parameters': {literal}}}</tool>"
        assert parse_response(text).error in ("bad_json", "bad_call")


def test_parameters_given_as_a_json_string_are_decoded():
    inner = json.dumps({"text_prompt": "dog"})
    text = "<think>t</think><tool>" + json.dumps({"name": "segment_phrase", "parameters": inner}) + "</tool>"
    assert parse_response(text) == _ok("t", DOG_CALL)


def test_arguments_given_as_a_json_string_are_decoded():
    text = '<think>t</think><tool_call>{"name": "select_masks_and_return", "arguments": "{\\"final_answer_masks\\": [2]}"}</tool_call>'
    call = ToolCall("select_masks_and_return", {"final_answer_masks": [2]}, "select_masks_and_return")
    assert parse_response(text) == _ok("t", call)


def test_empty_parameters_string_is_an_empty_object():
    text = '<think>t</think><tool>{"name": "report_no_mask", "parameters": ""}</tool>'
    assert parse_response(text) == _ok("t", ToolCall("report_no_mask", {}, "report_no_mask"))


def test_raw_control_characters_inside_a_string_are_kept():
    text = '<think>t</think><tool>{"name": "segment_phrase", "parameters": {"text_prompt": "red\tcar\nleft"}}</tool>'
    assert parse_response(text) == _ok("t", ToolCall("segment_phrase", {"text_prompt": "red\tcar\nleft"}, "segment_phrase"))


def test_repairs_outside_strings_never_change_a_string_value():
    value = 'a, } ] \uff0c\uff1a\uff5b True None \u201cq\u201d'
    text = (
        "<think>t</think><tool>\uff5b\"name\"\uff1a\"segment_phrase\"\uff0c\"parameters\"\uff1a{\"text_prompt\": "
        + json.dumps(value, ensure_ascii=False) + ",},}</tool>"
    )
    assert parse_response(text).call == ToolCall("segment_phrase", {"text_prompt": value}, "segment_phrase")


def test_only_the_first_of_two_structural_calls_runs_even_with_tags_in_strings():
    first = '{"name": "segment_phrase", "parameters": {"text_prompt": "</tool><tool>"}}'
    text = f'<think>t</think><tool>{first}</tool><tool>{{"name": "report_no_mask"}}</tool>'
    result = parse_response(text)
    assert result.call == ToolCall("segment_phrase", {"text_prompt": "</tool><tool>"}, "segment_phrase")
    assert result.ignored_calls == 1


def test_array_holding_a_value_that_is_not_a_call_is_bad_call():
    text = '<think>t</think><tool>[{"text_prompt": "dog"}]</tool>'
    assert parse_response(text).error == "bad_call"


# ---------------------------------------------------------------- replies that ended inside the reasoning (issue 10)


def test_cut_inside_reasoning_opened_by_the_template_runs_no_drafted_call():
    text = f"I could call <tool>{SEGMENT_DOG}</tool> but first"
    result = parse_response(text, finish_reason="length", starts_in_reasoning=True)
    assert result == _err(text, "truncated", thinking=text)


def test_stop_inside_reasoning_opened_by_the_template_is_unclosed_think():
    text = f"Drafting <tool>{SEGMENT_DOG}</tool>"
    assert parse_response(text, "stop", starts_in_reasoning=True) == _err(text, "unclosed_think", thinking=text)


def test_reasoning_closed_after_the_template_opened_it_runs_the_call():
    text = f"The dog.</think>\n<tool>{SEGMENT_DOG}</tool>"
    assert parse_response(text, "stop", starts_in_reasoning=True) == _ok("The dog.", DOG_CALL)


def test_cut_reply_without_any_think_tag_runs_nothing():
    # a server without a reasoning parser serving a Thinking template: the reasoning has no tags at all
    text = f"Let me try <tool>{SEGMENT_DOG}</tool> and then check whether"
    assert parse_response(text, finish_reason="length") == _err(text, "truncated", thinking="Let me try")


# ---------------------------------------------------------------- verdict grammar (issue 10)


@pytest.mark.parametrize(
    ("tag", "expected"),
    [
        ("Accept", ("accept", None)),
        ("Accepted.", ("accept", None)),
        ("**Accept**", ("accept", None)),
        ("`reject`", ("reject", None)),
        ("Rejected!", ("reject", None)),
        ('"Reject"', ("reject", None)),
        ("Probably accept", (None, "unclear_verdict")),
        ("Accept (partly)", (None, "unclear_verdict")),
        ("Accept?", (None, "unclear_verdict")),
        ("Should I accept?", (None, "unclear_verdict")),
        ("Not reject", (None, "unclear_verdict")),
        ("Accept or Reject", (None, "ambiguous_verdict")),
        ("accept/reject", (None, "ambiguous_verdict")),
        ("Reject?", (None, "unclear_verdict")),
        ("Probably reject", (None, "unclear_verdict")),
        # an explicit rejection wins whatever else the tag mentions (issue 20)
        ("Accept, reject", ("reject", None)),
        ("Reject, not accept", ("reject", None)),
        ("not accept: reject", ("reject", None)),
        ("I reject this; I cannot accept it", ("reject", None)),
        ("It is the plate, so I reject it", ("reject", None)),
        ("Rejected - do not accept", ("reject", None)),
        ("Accept: do not reject", ("accept", None)),
        ("unsure", (None, "missing_verdict")),
    ],
)
def test_only_an_unambiguous_verdict_word_counts(tag, expected):
    assert parse_verdict(f"<think>checking</think>\n<verdict>{tag}</verdict>") == expected


# ---------------------------------------------------------------- a negated acceptance is a rejection (issue 30)

NEGATED_ACCEPTANCES = [
    "Not Accept", "not accept", "NOT ACCEPT", "Do not accept", "do NOT accept", "Don't accept", "Don\u2019t accept",
    "Dont accept", "Not accepted", "not accepted.", "I would not accept this mask", "Would not accept",
    "I wouldn't accept this mask", "Cannot accept this mask", "Can't accept", "can not accept", "Won't accept",
    "Never accept", "No accept", "Not acceptable", "This is not acceptable.", "It isn't acceptable", "Unacceptable",
    "**Unacceptable**", "not accepted (the mask is the plate)", "I could not accept this mask",
    "I couldn't accept it", "Should not accept", "Non-accept", "Accept, not accept", "Accept. No, not accept.",
]


@pytest.mark.parametrize("tag", NEGATED_ACCEPTANCES)
def test_a_negated_acceptance_that_is_not_hedged_or_asked_is_a_rejection(tag):
    assert parse_verdict(f"<think>checking</think>\n<verdict>{tag}</verdict>") == ("reject", None)


@pytest.mark.parametrize("tag", [
    "Reject (not Accept)", "Reject [not accept]", "Reject {do not accept}", "Reject - not accept", "Reject/not accept",
    "Reject not accept", "(Reject) not accept", "not accept (reject)", "Not Accept: Reject", "REJECT (NOT ACCEPT)",
    "Reject \u2014 not accept", "Do not accept or reject",  # "do not (accept or reject)" still says reject plainly
])
def test_an_explicit_rejection_wins_over_a_negated_acceptance_whatever_lies_between(tag):
    assert parse_verdict(f"<verdict>{tag}</verdict>") == ("reject", None)


@pytest.mark.parametrize(("tag", "expected"), [
    ("Probably not accept", "unclear_verdict"), ("Maybe not accept", "unclear_verdict"),
    ("Not accept?", "unclear_verdict"), ("Should I not accept?", "unclear_verdict"),
    ("I might not accept this", "unclear_verdict"), ("I'm not sure I can accept it", "unclear_verdict"),
    ("not sure whether to accept", "unclear_verdict"), ("I doubt I can accept it", "unclear_verdict"),
    ("Do not accept, not reject", "unclear_verdict"), ("Neither accept nor reject", "unclear_verdict"),
    ("not unacceptable", "unclear_verdict"), ("no acceptance", "unclear_verdict"),
    ("Accept or not accept", "reject"),  # a plain negated acceptance in the tag: a rejection
])
def test_a_hedged_or_asked_negation_stays_unclear(tag, expected):
    read = parse_verdict(f"<verdict>{tag}</verdict>")
    assert (read[0] or read[1]) == expected


@pytest.mark.parametrize(("tag", "expected"), [
    ("Accept (not Reject)", "accept"), ("Accept [do not reject]", "accept"), ("Accept: do not reject", "accept"),
    ("(Accept)", "accept"), ("Accept or Reject", "ambiguous_verdict"), ("accept/reject", "ambiguous_verdict"),
    ("Not reject", "unclear_verdict"), ("I accept this mask", "unclear_verdict"),
])
def test_a_negated_rejection_beside_a_plain_accept_leaves_the_acceptance(tag, expected):
    read = parse_verdict(f"<verdict>{tag}</verdict>")
    assert (read[0] or read[1]) == expected


def test_a_verifier_that_says_no_in_a_later_tag_or_a_group_line_loses_the_mask():
    assert parse_verdict("<verdict>Accept</verdict> on second thought <verdict>Not Accept</verdict>") == ("reject", None)
    text = "<think>x</think>\nMask 3: <verdict>Not Accept</verdict>\nMask 4: <verdict>Reject (not Accept)</verdict>"
    assert parse_group_verdicts(text, [3, 4]) == {3: ("reject", None), 4: ("reject", None)}


def test_one_unclear_tag_makes_the_whole_answer_unclear():
    assert parse_verdict("<verdict>Accept</verdict> <verdict>maybe accept</verdict>") == (None, "unclear_verdict")


def test_verdict_without_closing_tag_is_its_first_line_only():
    assert parse_verdict("<think>ok</think><verdict>Accept\nThe mask covers the cup.") == ("accept", None)
    assert parse_verdict("<think>ok</think><verdict>\nDo not accept\nit is the plate") == ("reject", None)
    assert parse_verdict("<think>ok</think><verdict>\nProbably accept\nit is the cup") == (None, "unclear_verdict")


def test_prose_after_a_tag_that_withdraws_it_wins_in_both_orders():
    # the last explicit verdict wins: a bare verdict word as its own clause after the tag withdraws it (issue 20)
    assert parse_verdict("<think>t</think><verdict>Accept</verdict> ... no wait: reject") == ("reject", None)
    assert parse_verdict("<think>t</think><verdict>Reject</verdict> ... no wait: accept") == ("accept", None)
    assert parse_verdict("<verdict>Accept</verdict>\nActually, **Reject**.") == ("reject", None)


def test_prose_after_a_tag_without_a_bare_verdict_word_leaves_the_tag():
    assert parse_verdict("<verdict>Reject</verdict> I would accept only the cup itself.") == ("reject", None)
    assert parse_verdict("<verdict>Accept</verdict> Reasons to reject: none.") == ("accept", None)
    assert parse_verdict("<verdict>Reject</verdict> Accept? No.") == ("reject", None)


def test_prose_before_the_first_tag_never_counts():
    assert parse_verdict("<think>t</think>Reject, I thought first. <verdict>Accept</verdict>") == ("accept", None)


def test_verdict_drafted_inside_reasoning_cut_by_the_token_limit_is_not_read():
    text = "The mask is on the cup, so <verdict>Accept</verdict> unless the"
    assert parse_verdict(text, "length", starts_in_reasoning=True) == (None, "truncated")
    assert parse_verdict("<think>" + text, "length") == (None, "truncated")
    assert parse_verdict(text, "length") == (None, "truncated")


def test_verdict_inside_reasoning_that_never_closed_is_not_read():
    text = "I lean to <verdict>Reject</verdict>"
    assert parse_verdict(text, "stop", starts_in_reasoning=True) == (None, "unclosed_think")
    assert parse_verdict("<think>" + text) == (None, "unclosed_think")


def test_verdict_after_closed_reasoning_counts_even_when_cut_later():
    assert parse_verdict("fine</think><verdict>Reject</verdict> because", "length", True) == ("reject", None)


# ---------------------------------------------------------------- a reasoning block that quotes </think> (issue 20)


@pytest.mark.parametrize("quoted", ["`</think>`", '"</think>"', "'</think>'", "\u201c</think>\u201d"])
def test_a_quoted_closing_think_tag_does_not_end_the_reasoning(quoted):
    thinking = f"The tag {quoted} ends the reasoning, then comes <tool>{{...}}</tool> with the call."
    text = f"<think>{thinking}</think>\n<tool>{SEGMENT_DOG}</tool>"
    assert parse_response(text) == _ok(thinking, DOG_CALL)


def test_a_quoted_closing_think_tag_in_template_opened_reasoning_does_not_end_it():
    thinking = "I close with `</think>` and then write <tool>{\"name\": ...}</tool>."
    text = f"{thinking}</think><tool>{SEGMENT_DOG}</tool>"
    assert parse_response(text, starts_in_reasoning=True) == _ok(thinking, DOG_CALL)


def test_reasoning_that_only_quotes_its_closing_tag_is_still_unclosed():
    text = "I will end with `</think>` and <tool>{...}</tool>"
    assert parse_response(text, starts_in_reasoning=True) == _err(text, "unclosed_think", thinking=text)


def test_a_quoted_closing_think_tag_does_not_end_a_verifiers_reasoning():
    text = "<think>After `</think>` I must write <verdict>Accept</verdict> or reject.</think>\n<verdict>Reject</verdict>"
    assert parse_verdict(text) == ("reject", None)


def test_front_ends_split_a_reply_quoting_its_closing_tag_as_the_parser_does():
    from sam3_agent.agent.output_parts import split_output

    text = f"<think>The tag `</think>` ends it.</think>\n<tool>{SEGMENT_DOG}</tool>"
    assert split_output(text) == ("The tag `</think>` ends it.", SEGMENT_DOG)
