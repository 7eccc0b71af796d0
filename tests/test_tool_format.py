"""The native tool format (``--tool-format native``): the tools as the chat template's function schema, calls in
Qwen's own forms, the same parsing rules, the feedback in the format's terms, the format recorded in the trace, and
the flag end to end where users give it (command line, ``batch``, the app)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import KnownSegmenter
from test_function_calls import xml

from sam3_agent.agent.config import AgentConfig
from sam3_agent.agent.loop import Agent
from sam3_agent.agent.parsing import parse_response
from sam3_agent.agent.prompts import load_prompts, template_fields
from sam3_agent.agent.tool_format import function_schemas, native_prompts, native_system_prompt
from sam3_agent.cli.main import main
from sam3_agent.errors import InputError
from sam3_agent.messages import Message, TextPart, ToolCall
from sam3_agent.package_files import ASSETS_DIR
from sam3_agent.presets import Backends
from sam3_agent.trace.io import load_trace, load_trace_zip
from sam3_agent.ui.run.handlers import Handlers
from sam3_agent.ui.run.runner import AgentFactory
from sam3_agent.ui.run.slot import RunSlot
from sam3_agent.ui.settings import parse_settings
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


# ------------------------------------------------------------------ what the model is told, what is stored


def test_the_native_feedback_replaces_each_text_that_spells_the_reference_syntax():
    native = native_prompts(PROMPTS)
    spelled = {key for key, text in PROMPTS.feedback.items() if "<tool>" in text or '"parameters"' in text}
    changed = {key for key in PROMPTS.feedback if native.feedback[key] != PROMPTS.feedback[key]}
    assert spelled == changed == {"empty_output", "no_tool_call", "unclosed_think", "bad_json", "bad_call",
                                  "untagged_call", "listed_call", "several_calls", "call_in_reasoning"}
    assert not any("<tool>" in native.feedback[key] or '"parameters"' in native.feedback[key] for key in changed)
    assert all(template_fields(native.feedback[k]) == template_fields(PROMPTS.feedback[k]) for k in changed)
    assert native.hashes()["feedback"] != PROMPTS.hashes()["feedback"]  # a trace tells the two apart


def test_a_native_run_stores_each_call_in_the_form_the_model_wrote(segmenter, astronaut):
    main = ScriptedVLM([native("segment_phrase", text_prompt="person"), native("report_no_mask")], name="main")
    agent = Agent(main, segmenter, AgentConfig(tool_format="native"), verifier=ScriptedVLM([], name="verifier"))
    run = agent.start(astronaut, "the astronaut")
    list(run)
    assert [m.text for m in run.trace.messages if m.role == "assistant"] == [
        '<think>reasoning</think>\n<tool_call>\n{"name": "segment_phrase", "arguments": {"text_prompt": "person"}}\n'
        "</tool_call>",
        '<think>reasoning</think>\n<tool_call>\n{"name": "report_no_mask", "arguments": {}}\n</tool_call>']


def test_how_the_schema_reaches_the_model_is_recorded(segmenter):
    server = OpenAIServerVLM("http://127.0.0.1:9/v1", "m")
    assert Agent(server, segmenter, AgentConfig(tool_format="native")).settings()["tool_schema"] == "request"
    assert "tool_schema" not in Agent(server, segmenter).settings()


# ------------------------------------------------------------------ the flag where users use it


def native_script(folder: Path) -> Path:
    """A script file whose main replies are written in the native styles (Qwen3.5's XML, Qwen3-VL's JSON)."""
    path = folder / "native.json"
    path.write_text(json.dumps({
        "main": [xml("segment_phrase", text_prompt="spoon"), native("examine_each_mask"),
                 xml("select_masks_and_return", final_answer_masks="[1]")],
        "verify": ["<think>ok</think><verdict>Accept</verdict>"] * 16,
    }))
    return path


def test_the_cli_runs_the_native_format_and_records_it(tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["run", "--preset", "tiny", "--script", str(native_script(tmp_path)), "--tool-format", "native",
                 "--image", str(ASSETS_DIR / "coffee.jpg"), "--query", "the spoon", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    trace = load_trace(out)
    assert (trace.status, trace.settings["tool_format"]) == ("done", "native")
    assert [r.call.name for r in trace.rounds] == ["segment_phrase", "examine_each_mask", "select_masks_and_return"]
    examined = trace.rounds[1].result.masks
    assert np.array_equal(trace.final_masks.masks, examined.masks[:1])  # mask 1 of the examined masks


def test_batch_takes_the_flag_and_each_items_trace_records_it(tmp_path, capsys):
    photos = tmp_path / "photos"
    photos.mkdir()
    for name in ("astronaut.jpg", "coffee.jpg"):
        (photos / name).symlink_to(ASSETS_DIR / name)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"main": [xml("segment_phrase", text_prompt="object"),
                                           native("select_masks_and_return", final_answer_masks=[1])]}))
    out = tmp_path / "out"
    code = main(["batch", "--preset", "tiny", "--script", str(script), "--tool-format", "native", "--input",
                 str(photos), "--query", "the main object", "--out", str(out), "--no-progress"])
    assert code == 0, capsys.readouterr().err
    traces = sorted(out.glob("items/*/trace.json"))
    assert [json.loads(t.read_text())["settings"]["tool_format"] for t in traces] == ["native", "native"]


def test_the_app_setting_reaches_the_agent_and_its_traces(tmp_path):
    settings, _ = parse_settings([], environ={"SAM3_AGENT_TOOL_FORMAT": "native"})
    assert settings.tool_format == "native"
    assert parse_settings(["--tool-format", "reference"], environ={"SAM3_AGENT_TOOL_FORMAT": "native"})[
        0].tool_format == "reference"  # the flag wins
    script = {"main": [xml("segment_phrase", text_prompt="person"),
                       xml("select_masks_and_return", final_answer_masks="[2]")], "verify": []}
    idle = ScriptedVLM([])
    backends = Backends(idle, idle, KnownSegmenter({"person": [((10, 10, 110, 210), 0.7), ((200, 50, 300, 250), 0.9)]}),
                        {"vlm_model": "scripted"})
    factory = AgentFactory(settings, backends, script)
    agent = factory.new_agent(10, 0.5)
    assert agent.config.tool_format == "native" and agent.vlm.tools == SCHEMAS
    handlers = Handlers(factory, warn=[].append, root=tmp_path / "app")
    slot = RunSlot()
    list(handlers.run(str(ASSETS_DIR / "astronaut.jpg"), "the right person", 10, 0.5, slot))
    trace = load_trace_zip(handlers.trace_download(slot)[1])
    assert (trace.status, trace.settings["tool_format"]) == ("done", "native")
    assert trace.final_masks.boxes.tolist() == [[10.0, 10.0, 110.0, 210.0]]  # mask 2 of the two, by score


@pytest.mark.slow
def test_the_tiny_qwen2_5_vl_preset_runs_native_with_the_schema_in_its_system_turn(tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["run", "--preset", "tiny", "--tiny-vlm", "qwen2_5_vl", "--tool-format", "native", "--max-rounds", "1",
                 "--max-new-tokens", "8", "--image", str(ASSETS_DIR / "coffee.jpg"), "--query", "the cup",
                 "--out", str(out)])
    assert code == 4, capsys.readouterr().err  # random weights never answer: the round budget ends the run
    settings = json.loads((out / "trace.json").read_text())["settings"]
    assert (settings["tool_format"], settings["tool_schema"]) == ("native", "system_turn")


def test_a_family_whose_template_drops_the_schema_and_whose_form_is_unknown_is_refused_before_the_run():
    from sam3_agent.presets import tiny_model_paths
    from sam3_agent.vlm.transformers_qwen import TransformersQwenVLM

    gemma = TransformersQwenVLM.from_pretrained(str(tiny_model_paths("gemma3")[1]), device="cpu")
    with pytest.raises(InputError, match="^the chat template of this gemma3 model ignores the function schema "
                                         r"\(tools=\), and its family's own function-calling form is not known here: "
                                         r"use the reference tool format \(--tool-format reference\)$"):
        Agent(gemma, KnownSegmenter({}), AgentConfig(tool_format="native"))
