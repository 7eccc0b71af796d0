"""Calls in the XML style Qwen3.5 / Qwen3.6 are trained to write (``agent.function_calls``): the exact call parsed for
each tool, values converted by the schema's types, the same rules as the other forms (one call per reply, a call
inside the reasoning does not run), and what the model is told about each malformed variant in a native run."""

from __future__ import annotations

import pytest
from conftest import KnownSegmenter  # noqa: F401  (the segmenter fixture's type)

from sam3_agent.agent.config import AgentConfig
from sam3_agent.agent.loop import Agent
from sam3_agent.agent.parsing import format_response, parse_response
from sam3_agent.messages import ToolCall
from sam3_agent.vlm.scripted import ScriptedVLM


def call_xml(name: str, **values: str) -> str:
    """A call in Qwen3.5's trained style: each parameter's value written as text on its own lines."""
    parameters = "".join(f"<parameter={key}>\n{value}\n</parameter>\n" for key, value in values.items())
    return f"<tool_call>\n<function={name}>\n{parameters}</function>\n</tool_call>"


def xml(name: str, thinking: str = "reasoning", **values: str) -> str:
    """A reply in Qwen3.5's trained style: reasoning, a blank line, then the call."""
    return f"<think>{thinking}</think>\n\n{call_xml(name, **values)}"


@pytest.mark.parametrize(("reply", "call"), [
    (xml("segment_phrase", text_prompt="mug"), ToolCall("segment_phrase", {"text_prompt": "mug"}, "segment_phrase")),
    (xml("segment_phrase", text_prompt="  the red mug \n"),
     ToolCall("segment_phrase", {"text_prompt": "the red mug"}, "segment_phrase")),
    (xml("examine_each_mask"), ToolCall("examine_each_mask", {}, "examine_each_mask")),
    (xml("examine_each_mask", masks='[4, "17-19"]'),
     ToolCall("examine_each_mask", {"masks": [4, "17-19"]}, "examine_each_mask")),
    (xml("select_masks_and_return", final_answer_masks='[2, "5-9"]'),
     ToolCall("select_masks_and_return", {"final_answer_masks": [2, "5-9"]}, "select_masks_and_return")),
    (xml("select_masks_and_return", final_answer_masks='["1-150"]'),
     ToolCall("select_masks_and_return", {"final_answer_masks": ["1-150"]}, "select_masks_and_return")),
    (xml("report_no_mask"), ToolCall("report_no_mask", {}, "report_no_mask")),
])
def test_each_tool_called_in_the_xml_style_parses_to_its_exact_call(reply, call):
    parsed = parse_response(reply)
    assert (parsed.error, parsed.call, parsed.thinking, parsed.form, parsed.notes) == (None, call, "reasoning", "xml", ())


@pytest.mark.parametrize(("value", "read"), [
    ("[1, 3]", [1, 3]),
    ("[1, 3,]", [1, 3]),  # the JSON slips a call's JSON may have are read the same way
    ("\uff3b1\uff0c 3\uff3d", [1, 3]),  # full-width brackets and comma
    ("2", 2),  # a JSON scalar stays one: the tool says it must be a list
    ("1, 3", "1, 3"),  # not JSON: kept as text, the tool says so
])
def test_a_list_parameter_is_read_as_the_json_its_text_holds(value, read):
    parsed = parse_response(xml("select_masks_and_return", final_answer_masks=value))
    assert parsed.call.parameters == {"final_answer_masks": read}


def test_a_parameter_of_an_unknown_type_or_an_unknown_tool_stays_text():
    assert parse_response(xml("segment_phrase", text_prompt="[1]", colour="red")).call.parameters == {
        "text_prompt": "[1]", "colour": "red"}
    assert parse_response(xml("report_none", masks="[1]")).error_fields["name"] == "report_none"


@pytest.mark.parametrize("reply", [
    # no </parameter>: the value ends at </function>
    "<think>r</think>\n<tool_call>\n<function=segment_phrase>\n<parameter=text_prompt>\nmug\n</function>\n</tool_call>",
    # no </function>: the call ends at </tool_call>
    "<think>r</think>\n<tool_call>\n<function=segment_phrase>\n<parameter=text_prompt>\nmug\n</parameter>\n</tool_call>",
    # the name quoted, the arguments as one JSON object (the <function=NAME>{...}</function> form)
    '<think>r</think>\n<tool_call>\n<function="segment_phrase">{"text_prompt": "mug"}</function>\n</tool_call>',
])
def test_slips_whose_intent_is_clear_are_read(reply):
    parsed = parse_response(reply)
    assert (parsed.error, parsed.call) == (None, ToolCall("segment_phrase", {"text_prompt": "mug"}, "segment_phrase"))


def test_a_call_without_its_tool_call_tags_runs_with_a_note():
    parsed = parse_response("<think>r</think>\n<function=report_no_mask>\n</function>")
    assert (parsed.call.name, parsed.notes) == ("report_no_mask", ("untagged_call",))
    parsed = parse_response("I looked.\n<function=report_no_mask>\n</function>")  # no think tags: the text before it
    assert (parsed.call.name, parsed.thinking, parsed.notes) == ("report_no_mask", "I looked.", ("untagged_call",))


def test_only_the_first_of_two_tagged_calls_runs():
    parsed = parse_response(xml("segment_phrase", text_prompt="mug") + "\n" + call_xml("report_no_mask"))
    assert (parsed.call.name, parsed.ignored_calls) == ("segment_phrase", 1)


@pytest.mark.parametrize(("reply", "finish", "error"), [
    ("<think>r</think>\n<function=report_no_mask>\n</function>\n<function=segment_phrase>\n</function>", "stop",
     "several_calls"),
    ("<think>r\n" + call_xml("report_no_mask") + "\n</think>\nDone.", "stop", "call_in_reasoning"),
    ("<think>r\n<function=report_no_mask>\n</function>\n</think>\n", "stop", "call_in_reasoning"),  # untagged
    ("<think>r</think>\n<tool_call>\n<function=segment_phrase>\n<parameter=text_prompt>\nmu", "length", "truncated"),
    ("<think>r</think>\n<tool_call>\n<function=>\n</function>\n</tool_call>", "stop", "bad_function_call"),
])
def test_the_rules_of_the_other_forms_hold(reply, finish, error):
    parsed = parse_response(reply, finish)
    assert (parsed.call, parsed.error) == (None, error)


def test_a_call_is_stored_back_in_the_style_it_was_written():
    call = ToolCall("select_masks_and_return", {"final_answer_masks": [2, "5-9"]}, "select_masks_and_return")
    assert format_response("r", call, "xml") == (
        '<think>r</think>\n<tool_call>\n<function=select_masks_and_return>\n<parameter=final_answer_masks>\n[2, "5-9"]'
        "\n</parameter>\n</function>\n</tool_call>")
    assert format_response("r", call, "json") == (
        '<think>r</think>\n<tool_call>\n{"name": "select_masks_and_return", "arguments": {"final_answer_masks": '
        '[2, "5-9"]}}\n</tool_call>')
    assert parse_response(format_response("r", call, "xml")).call == call  # it reads back as written


# ------------------------------------------------------------------ what a native run tells the model


def told(segmenter, astronaut, reply: str) -> str:
    """The reply the model gets to ``reply`` as its first answer in a native run (then it gives up)."""
    main = ScriptedVLM([reply, xml("report_no_mask")], name="main")
    agent = Agent(main, segmenter, AgentConfig(tool_format="native"), verifier=ScriptedVLM([], name="verifier"))
    run = agent.start(astronaut, "the astronaut")
    list(run)
    return run.trace.messages[run.trace.rounds[0].reply_index].text


@pytest.mark.parametrize(("reply", "said"), [
    ("<think>r</think>\n<tool_call>\n<function=segment_phrase>\nmug\n</function>\n</tool_call>",
     'The function call is malformed: the function holds text outside its <parameter=...></parameter> tags: "mug". '
     "Write it as the function-calling instructions show: <tool_call>, then <function=NAME>, each parameter as "
     "<parameter=NAME>, its value, </parameter>, then </function> and </tool_call>."),
    ("<think>r</think>\n<tool_call>\n<function=segment_phrase>\n<parameter=text_prompt>\nmug\n</parameter>\n"
     "<parameter=text_prompt>\ncup\n</parameter>\n</function>\n</tool_call>",
     'The function call is malformed: the parameter "text_prompt" is given twice. Write it as the function-calling '
     "instructions show: <tool_call>, then <function=NAME>, each parameter as <parameter=NAME>, its value, "
     "</parameter>, then </function> and </tool_call>."),
    (xml("find_masks", text_prompt="mug"),
     'There is no tool named "find_masks". Call one of: segment_phrase, examine_each_mask, select_masks_and_return, '
     "report_no_mask."),
    (xml("segment_phrase", text_prompt="mug", colour="red"),
     'segment_phrase does not take these parameters: colour. Call it like this: {"name": "segment_phrase", '
     '"arguments": {"text_prompt": "..."}}'),  # the function-calling word, as the schema the model was given
    ("<think>r</think>\n<function=report_no_mask>\n</function>\n<function=segment_phrase>\n</function>",
     "Your reply held 2 function calls written together, so none ran. Make exactly one function call per reply, "
     "after </think>."),
    ("<think>I will call <tool_call>\n<function=report_no_mask>\n</function>\n</tool_call></think>\n",
     "Your only function call was inside your reasoning (before </think>), so it did not run and nothing happened. A "
     "call runs only when written after the reasoning: close it with </think>, then write the call."),
])
def test_a_native_run_tells_the_model_each_mistake_in_its_own_terms(segmenter, astronaut, reply, said):
    assert told(segmenter, astronaut, reply) == said


def test_a_list_written_as_bare_numbers_is_told_to_be_a_list(segmenter, astronaut):
    main = ScriptedVLM([xml("segment_phrase", text_prompt="person"),
                        xml("select_masks_and_return", final_answer_masks="1, 3"),
                        xml("select_masks_and_return", final_answer_masks="[1, 3]")], name="main")
    agent = Agent(main, segmenter, AgentConfig(tool_format="native"), verifier=ScriptedVLM([], name="verifier"))
    run = agent.start(astronaut, "the people")
    list(run)
    trace = run.trace
    assert trace.messages[trace.rounds[1].reply_index].text == (
        'final_answer_masks must be a list of mask numbers such as [1, 3], not "1, 3". Call select_masks_and_return '
        "again with a list.")
    assert (trace.status, trace.rounds[2].call.parameters) == ("done", {"final_answer_masks": [1, 3]})
    # the conversation shows each call as the model wrote it (XML), never in the reference <tool> form
    stored = [m.text for m in trace.messages if m.role == "assistant"]
    assert stored[0] == xml("segment_phrase", text_prompt="person").replace("\n\n<tool_call>", "\n<tool_call>")
    assert not any("<tool>" in text for text in stored)
