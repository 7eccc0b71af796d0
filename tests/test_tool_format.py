"""The native tool format (``--tool-format native``): the tools as the chat template's function schema, calls in
Qwen's own ``<tool_call>`` form, the same parsing rules, and the format recorded in the trace."""

from __future__ import annotations

import json

import pytest
from conftest import KnownSegmenter  # noqa: F401  (the segmenter fixture's type)

from sam3_agent.agent.config import AgentConfig
from sam3_agent.agent.loop import Agent
from sam3_agent.agent.parsing import parse_response
from sam3_agent.agent.prompts import load_prompts
from sam3_agent.agent.tool_format import function_schemas, native_system_prompt
from sam3_agent.errors import InputError
from sam3_agent.messages import Message, TextPart, ToolCall
from sam3_agent.vlm.openai_server import OpenAIServerVLM
from sam3_agent.vlm.scripted import ScriptedVLM

PROMPTS = load_prompts()
SCHEMAS = function_schemas(PROMPTS.main_system)


def native(name: str, thinking: str = "reasoning", **arguments: object) -> str:
    """A reply in Qwen's trained format: the call's JSON on its own lines inside <tool_call> tags."""
    return f"<think>{thinking}</think>\n<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


@pytest.mark.parametrize(("reply", "call"), [
    (native("segment_phrase", text_prompt="mug"), ToolCall("segment_phrase", {"text_prompt": "mug"}, "segment_phrase")),
    (native("examine_each_mask"), ToolCall("examine_each_mask", {}, "examine_each_mask")),
    (native("select_masks_and_return", final_answer_masks=[2, "5-9"]),
     ToolCall("select_masks_and_return", {"final_answer_masks": [2, "5-9"]}, "select_masks_and_return")),
    (native("report_no_mask"), ToolCall("report_no_mask", {}, "report_no_mask")),
])
def test_each_tool_called_in_the_native_format_parses_to_its_exact_call(reply, call):
    parsed = parse_response(reply)
    assert parsed.error is None
    assert parsed.call == call


def test_the_function_schema_is_built_from_the_registry_and_the_prompts_tool_paragraphs():
    assert [s["function"]["name"] for s in SCHEMAS] == [
        "segment_phrase", "examine_each_mask", "select_masks_and_return", "report_no_mask"]
    assert SCHEMAS[0] == {"type": "function", "function": {
        "name": "segment_phrase",
        "description": "runs SAM 3 on the raw image with one noun phrase. Its masks replace all earlier masks and "
                       "are shown in a new image, numbered from 1. Parameter: \"text_prompt\", a string.",
        "parameters": {"type": "object", "required": ["text_prompt"], "properties": {
            "text_prompt": {"type": "string", "description": "a short, simple noun phrase for SAM 3"}}},
    }}
    assert SCHEMAS[2]["function"]["parameters"]["properties"]["final_answer_masks"]["items"] == {
        "type": ["integer", "string"]}
    assert SCHEMAS[3]["function"]["parameters"] == {"type": "object", "properties": {}, "required": []}
    # examine_each_mask's masks and in_groups are optional: offered, not required; in_groups is a JSON boolean
    examine = SCHEMAS[1]["function"]["parameters"]
    assert list(examine["properties"]) == ["masks", "in_groups"] and examine["required"] == []
    assert examine["properties"]["in_groups"]["type"] == "boolean"


def test_the_native_prompt_keeps_the_guidance_and_drops_the_reference_syntax():
    text = native_system_prompt(PROMPTS.main_system)
    assert "<tool>" not in text and "</tool>" not in text
    assert "Exactly one call of one of the functions you are given" in text
    assert '<tool_call>\n{"name": "segment_phrase", "arguments": {"text_prompt": "mug"}}\n</tool_call>' in text
    assert text.count("<tool_call>") == 4
    # everything after the reply section is the reference prompt's, example calls aside
    tail = PROMPTS.main_system[PROMPTS.main_system.index("# Reading the query"):]
    assert text.endswith(tail)


def test_a_native_run_sends_the_schema_uses_the_native_prompt_and_records_the_format(segmenter, astronaut):
    main = ScriptedVLM([native("segment_phrase", text_prompt="person"),
                        native("select_masks_and_return", final_answer_masks=[1])], name="main")
    verifier = ScriptedVLM([], name="verifier")
    agent = Agent(main, segmenter, AgentConfig(tool_format="native"), verifier=verifier)
    run = agent.start(astronaut, "the astronaut")
    list(run)
    assert run.trace.status == "done"
    assert [r.call for r in run.trace.rounds] == [
        ToolCall("segment_phrase", {"text_prompt": "person"}, "segment_phrase"),
        ToolCall("select_masks_and_return", {"final_answer_masks": [1]}, "select_masks_and_return"),
    ]
    assert agent.vlm.tools == SCHEMAS and main.tools is None  # the view got the schema; the verifier never does
    assert main.calls == 2  # the view shares the script
    assert run.trace.settings["tool_format"] == "native"
    assert run.trace.messages[0].text == native_system_prompt(PROMPTS.main_system)


def test_the_reference_format_stays_the_default_and_sends_no_schema(segmenter, astronaut):
    main = ScriptedVLM([native("report_no_mask")], name="main")
    agent = Agent(main, segmenter)
    run = agent.start(astronaut, "the astronaut")
    list(run)
    assert agent.vlm is main and main.tools is None
    assert run.trace.settings["tool_format"] == "reference"
    assert run.trace.messages[0].text == PROMPTS.main_system


def test_a_backend_that_cannot_take_a_schema_is_refused_before_the_run(segmenter):
    class Plain:
        name = "plain"

        def stream(self, messages, *, max_new_tokens=None, stop=None):
            yield from ()

    with pytest.raises(InputError, match="'plain' cannot be given the tools as a function schema"):
        Agent(Plain(), segmenter, AgentConfig(tool_format="native"))


def test_an_unknown_tool_format_is_refused():
    with pytest.raises(InputError, match="tool_format must be one of reference, native, got 'xml'"):
        AgentConfig(tool_format="xml")


def test_the_server_sends_the_schema_as_tools_only_in_the_native_view():
    server = OpenAIServerVLM("http://127.0.0.1:9/v1", "m")
    messages = [Message("user", (TextPart("hi"),))]
    assert "tools" not in server.request_body(messages)
    assert server.with_tools(SCHEMAS).request_body(messages)["tools"] == SCHEMAS
