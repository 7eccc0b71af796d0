"""The tiny Qwen3.5 / Qwen3.5-MoE presets: the real configuration classes with hybrid layers, Qwen3.5's Thinking-by-default
template and generation config, loaded back through ``from_pretrained`` and run end to end through the CLI
(``sam3_agent.tiny.qwen3_5``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jinja2 import TemplateError
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor, GenerationConfig

from sam3_agent.cli.main import main
from sam3_agent.engine.decoding import DecodingSettings, model_decoding
from sam3_agent.engine.sampling import GREEDY, Sampling
from sam3_agent.tiny.qwen3_5 import build_tiny_qwen3_5
from sam3_agent.vlm.transformers_qwen import TransformersQwenVLM

ASSETS = Path(__file__).resolve().parent.parent / "sam3_agent" / "assets"
IMAGE = Image.new("RGB", (64, 64))
VISION = "<|vision_start|><|image_pad|><|vision_end|>"
THINKING = Sampling(True, 1.0, 0.95, 20)


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("qwen3_5")
    return {kind: build_tiny_qwen3_5(root / kind, kind=kind) for kind in ("qwen3_5", "qwen3_5_moe")}


@pytest.mark.parametrize("kind, cls", [("qwen3_5", "Qwen3_5ForConditionalGeneration"),
                                       ("qwen3_5_moe", "Qwen3_5MoeForConditionalGeneration")])
def test_the_folder_loads_as_the_real_class_with_hybrid_layers(folders, kind, cls):
    model = AutoModelForImageTextToText.from_pretrained(str(folders[kind]))
    text = model.config.text_config
    assert (type(model).__name__, model.config.model_type) == (cls, kind)
    assert text.layer_types == ["linear_attention"] * 3 + ["full_attention"]
    assert text.rope_parameters["partial_rotary_factor"] == 0.25
    if kind == "qwen3_5_moe":
        assert (text.num_experts, text.num_experts_per_tok) == (4, 2)


def test_the_template_opens_think_unless_thinking_is_switched_off(folders):
    processor = AutoProcessor.from_pretrained(str(folders["qwen3_5"]))
    chat = [{"role": "system", "content": "You segment."},
            {"role": "user", "content": [{"type": "image", "image": IMAGE}, {"type": "text", "text": "the cup"}]},
            {"role": "assistant", "content": "I look.\n</think>\n\n<tool>cup</tool>"},
            {"role": "user", "content": "found 2"}]
    head = (f"<|im_start|>system\nYou segment.<|im_end|>\n<|im_start|>user\n{VISION}the cup<|im_end|>\n"
            "<|im_start|>assistant\n<tool>cup</tool><|im_end|>\n<|im_start|>user\nfound 2<|im_end|>\n")
    assert processor.apply_chat_template(chat, add_generation_prompt=True, tokenize=False) == (
        head + "<|im_start|>assistant\n<think>\n")
    assert processor.apply_chat_template(chat, add_generation_prompt=True, tokenize=False, enable_thinking=False) == (
        head + "<|im_start|>assistant\n<think>\n\n</think>\n\n")


# What the released Qwen3.5 template renders for this schema and system text (a public copy of Qwen/Qwen3.5-4B's
# chat_template.jinja, rendered with transformers 5.24): the signatures and the XML-style instruction, then the system
# text after a blank line, in one system turn.
FIND = {"type": "function", "function": {"name": "find", "description": "Find it.", "parameters": {
    "type": "object", "properties": {"masks": {"type": "array", "items": {"type": "integer"}}}, "required": []}}}
RELEASED_TOOLS_TURN = (
    "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n"
    '{"type": "function", "function": {"name": "find", "description": "Find it.", "parameters": {"type": "object", '
    '"properties": {"masks": {"type": "array", "items": {"type": "integer"}}}, "required": []}}}\n</tools>\n\n'
    "If you choose to call a function ONLY reply in the following format with NO suffix:\n\n<tool_call>\n"
    "<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
    "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified "
    "format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n- You may provide optional reasoning for your function call in natural "
    "language BEFORE the function call, but NOT after\n- If there is no function call available, answer the question "
    "like normal with your current knowledge and do not tell the user about function calls\n</IMPORTANT>\n\n"
    "You segment.<|im_end|>\n")


def test_the_template_renders_a_schema_as_the_released_one_does(folders):
    processor = AutoProcessor.from_pretrained(str(folders["qwen3_5"]))
    chat = [{"role": "system", "content": "You segment.\n"},  # the system text is stripped, as released
            {"role": "user", "content": [{"type": "image", "image": IMAGE}, {"type": "text", "text": "the cup"}]}]
    rendered = processor.apply_chat_template(chat, tools=[FIND], add_generation_prompt=True, tokenize=False)
    assert rendered == RELEASED_TOOLS_TURN + f"<|im_start|>user\n{VISION}the cup<|im_end|>\n<|im_start|>assistant\n<think>\n"


def test_the_template_refuses_a_chat_without_a_user_query_and_the_engine_still_caches_system_turns(folders):
    processor = AutoProcessor.from_pretrained(str(folders["qwen3_5"]))
    with pytest.raises(TemplateError, match="No user query found in messages"):
        processor.apply_chat_template([{"role": "system", "content": "You segment."}], tokenize=False)
    vlm = TransformersQwenVLM.from_pretrained(str(folders["qwen3_5"]))
    turn = processor.tokenizer("<|im_start|>system\nYou segment.<|im_end|>\n", add_special_tokens=False)["input_ids"]
    assert vlm._engine.system_turn_ids("You segment.") == list(turn)  # rendered before a probe user turn, cut there
    assert vlm.prefill_system_prompts(["You segment."]) == len(turn)


@pytest.mark.parametrize("kind", ["qwen3_5", "qwen3_5_moe"])
def test_the_generation_config_is_qwen3_5s_and_sets_thinking_defaults(folders, kind):
    saved = GenerationConfig.from_pretrained(str(folders[kind]))
    assert (saved.do_sample, saved.temperature, saved.top_p, saved.top_k) == (True, 1.0, 0.95, 20)
    tokenizer = AutoProcessor.from_pretrained(str(folders[kind])).tokenizer
    assert saved.eos_token_id == [tokenizer.convert_tokens_to_ids("<|im_end|>"),
                                  tokenizer.convert_tokens_to_ids("<|endoftext|>")]
    vlm = TransformersQwenVLM.from_pretrained(str(folders[kind]))
    assert (vlm.defaults.main, vlm.defaults.verify) == (DecodingSettings(8192, THINKING),
                                                        DecodingSettings(4096, THINKING))
    assert (vlm.defaults.thinking, vlm.defaults.family, vlm.starts_in_reasoning) == (True, "qwen3_5", True)
    assert vlm.decoding_paths()["path"] == "cached decoder" and vlm.prefix_store.whole_entries


def test_a_qwen3_5_folder_without_sampling_settings_gets_the_model_cards():
    empty = GenerationConfig()
    assert model_decoding(empty, "qwen3_5_moe", thinking=True).main.sampling == THINKING
    assert model_decoding(empty, "qwen3_5", thinking=False).main.sampling == Sampling(True, 0.7, 0.8, 20)
    assert model_decoding(empty, "qwen3_5", thinking=False).verify.sampling == GREEDY


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["qwen3_5", "qwen3_5_moe"])
def test_a_cli_run_with_the_default_settings_ends_on_its_budget_with_the_path_recorded(tmp_path, capsys, kind):
    out = tmp_path / "out"
    code = main(["run", "--preset", "tiny", "--tiny-vlm", kind, "--image", str(ASSETS / "coffee.jpg"),
                 "--query", "the cup", "--out", str(out), "--max-rounds", "2"])
    stderr = capsys.readouterr().err
    assert code == 4, stderr  # random weights never answer: the round budget ends the run, no crash
    settings = json.loads((out / "trace.json").read_text())["settings"]
    assert settings["decoding_path"] == {
        "path": "cached decoder", "cache": "hybrid (linear + full attention)", "prefix_cache": True,
        "reason": "hybrid cache (linear attention): prompt prefixes are reused only whole, as snapshots of the "
                  "state after them"}
