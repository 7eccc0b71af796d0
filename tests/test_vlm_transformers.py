"""TransformersQwenVLM on tiny random-weight Qwen3-VL / Qwen2.5-VL checkpoints built offline."""

from __future__ import annotations

import functools
import json
import threading
import time
from pathlib import Path

import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from sam3_agent.engine.qwen_inputs import to_chat
from sam3_agent.engine.sampling import GREEDY
from sam3_agent.errors import BackendError, InputError
from sam3_agent.messages import Generation, ImagePart, Message, TextPart
from sam3_agent.package_files import ASSETS_DIR
from sam3_agent.tiny.qwen import BUILD_VERSION, MARKER_FILE, build_tiny_qwen
from sam3_agent.vlm.base import generate
from sam3_agent.vlm.qwen_load import DEFAULT_VLM_MODEL
from sam3_agent.vlm.transformers_qwen import TransformersQwenVLM

ASSETS = ASSETS_DIR  # the photos the package ships

# coffee.jpg is 600x400. The tiny processors have the released pixel bounds, tightened to the defaults
# (at most 1280*28*28 px): Qwen3-VL (32 px per image token) resizes it to 608x384 -> 19x12 = 228 tokens;
# Qwen2.5-VL (28 px per token) to 588x392 -> 21x14 = 294 tokens. With max_pixels=256*256 Qwen3-VL resizes
# it to 288x192 -> 9x6 = 54 tokens.
QWEN3_COFFEE_IMAGE_TOKENS = 228
QWEN3_COFFEE_IMAGE_TOKENS_256 = 54
QWEN25_COFFEE_IMAGE_TOKENS = 294


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny_qwen")
    return {
        "qwen3_vl": build_tiny_qwen(root / "qwen3_vl", kind="qwen3_vl"),
        "qwen3_vl_thinking": build_tiny_qwen(root / "qwen3_vl_thinking", kind="qwen3_vl", thinking=True),
        "qwen2_5_vl": build_tiny_qwen(root / "qwen2_5_vl", kind="qwen2_5_vl"),
    }


@pytest.fixture(scope="module")
def qwen3(tiny_dirs) -> TransformersQwenVLM:
    return TransformersQwenVLM.from_pretrained(str(tiny_dirs["qwen3_vl"]), max_new_tokens=12, sampling=GREEDY)


@pytest.fixture(scope="module")
def coffee() -> Image.Image:
    with Image.open(ASSETS / "coffee.jpg") as img:
        return img.convert("RGB")


def conversation(image: Image.Image, query: str = "the cup on the left") -> list[Message]:
    return [
        Message("system", (TextPart("You segment what the user asks for."),)),
        Message("user", (ImagePart(image, "raw"), TextPart(query))),
    ]


def image_token_count(vlm: TransformersQwenVLM, messages: list[Message]) -> int:
    ids = vlm.encode(messages)["input_ids"][0]
    return int((ids == vlm.model.config.image_token_id).sum())


def test_streamed_pieces_concatenate_to_the_greedy_decoding(qwen3, coffee):
    messages = conversation(coffee)
    items = list(qwen3.stream(messages))
    *pieces, result = items
    assert all(isinstance(p, str) and p for p in pieces)
    assert isinstance(result, Generation)
    assert "".join(pieces) == result.text
    # the same as generating directly and decoding all new tokens at once
    inputs = qwen3.encode(messages)
    sequences = qwen3.model.generate(**inputs, max_new_tokens=12, do_sample=False)
    new_tokens = sequences[0, inputs["input_ids"].shape[1]:]
    assert result.text == qwen3.processor.tokenizer.decode(new_tokens, skip_special_tokens=True)
    assert result.prompt_tokens == inputs["input_ids"].shape[1]
    assert result.output_tokens == 12
    assert result.finish_reason == "length"  # random weights never pick <|im_end|> here


def test_greedy_decoding_is_deterministic(qwen3, coffee):
    assert generate(qwen3, conversation(coffee)) == generate(qwen3, conversation(coffee))


def test_prompt_tokens_count_text_and_bounded_image_tokens(tiny_dirs, qwen3, coffee):
    messages = conversation(coffee)
    text_only = [messages[0], Message("user", (TextPart("the cup on the left"),))]
    # vision start/end markers are text tokens; the image adds its image tokens
    expected = generate(qwen3, text_only).prompt_tokens + 2 + QWEN3_COFFEE_IMAGE_TOKENS
    assert image_token_count(qwen3, messages) == QWEN3_COFFEE_IMAGE_TOKENS
    assert generate(qwen3, messages).prompt_tokens == expected

    smaller = TransformersQwenVLM.from_pretrained(str(tiny_dirs["qwen3_vl"]), max_pixels=256 * 256)
    assert smaller.image_size == {"shortest_edge": 256 * 256, "longest_edge": 256 * 256}
    assert image_token_count(smaller, messages) == QWEN3_COFFEE_IMAGE_TOKENS_256
    shrunk = generate(smaller, messages, max_new_tokens=1).prompt_tokens
    assert shrunk == expected + QWEN3_COFFEE_IMAGE_TOKENS_256 - QWEN3_COFFEE_IMAGE_TOKENS


def test_max_new_tokens_reached_gives_finish_reason_length(qwen3, coffee):
    result = generate(qwen3, conversation(coffee), max_new_tokens=5)
    assert result.finish_reason == "length"
    assert result.output_tokens == 5


def test_end_of_turn_token_gives_finish_reason_stop(tiny_dirs, coffee):
    vlm = TransformersQwenVLM.from_pretrained(str(tiny_dirs["qwen3_vl"]), sampling=GREEDY)
    # all logits equal -> greedy picks the lowest id, 0 = <|endoftext|>, one of the model's end tokens
    with torch.no_grad():
        vlm.model.lm_head.weight.zero_()
    items = list(vlm.stream(conversation(coffee), max_new_tokens=8))
    assert items == [Generation("", "stop", items[-1].prompt_tokens, 1)]


def test_stop_set_before_start_cancels_without_generating(qwen3, coffee):
    stop = threading.Event()
    stop.set()
    items = list(qwen3.stream(conversation(coffee), stop=stop))
    assert items == [Generation("", "cancelled", None, 0)]


def test_a_caller_waiting_for_the_model_can_cancel(qwen3, coffee):
    first = qwen3.stream(conversation(coffee), max_new_tokens=2000)
    next(first)  # holds the model
    stop = threading.Event()
    stop.set()
    started = time.perf_counter()
    assert list(qwen3.stream(conversation(coffee), stop=stop)) == [Generation("", "cancelled", None, 0)]
    assert time.perf_counter() - started < 60  # a guard against waiting for the first caller (it never ends)
    first.close()


def test_stop_set_mid_stream_ends_generation_promptly(qwen3, coffee):
    stop = threading.Event()
    stream = qwen3.stream(conversation(coffee), max_new_tokens=2000, stop=stop)
    first = next(stream)
    stop.set()
    *rest, result = list(stream)
    assert result.finish_reason == "cancelled"
    assert result.output_tokens < 2000
    assert result.text == first + "".join(rest)


def test_thinking_template_opens_think_and_keeps_think_tags(tiny_dirs, coffee):
    vlm = TransformersQwenVLM.from_pretrained(str(tiny_dirs["qwen3_vl_thinking"]))
    assert vlm.render_prompt(conversation(coffee)).endswith("<|im_start|>assistant\n<think>\n")
    tokenizer = vlm.processor.tokenizer
    ids = tokenizer.encode("<think>cup</think><tool_call>x</tool_call><|im_end|>", add_special_tokens=False)
    assert tokenizer.convert_tokens_to_ids("<think>") in ids
    # <think> and </think> are added tokens but not special: decoding keeps them
    assert tokenizer.decode(ids, skip_special_tokens=True) == "<think>cup</think><tool_call>x</tool_call>"
    instruct = TransformersQwenVLM.from_pretrained(str(tiny_dirs["qwen3_vl"]))
    assert instruct.render_prompt(conversation(coffee)).endswith("<|im_start|>assistant\n")


def test_generations_of_a_thinking_template_are_marked_as_starting_in_reasoning(tiny_dirs, qwen3, coffee):
    thinking = TransformersQwenVLM.from_pretrained(str(tiny_dirs["qwen3_vl_thinking"]), max_new_tokens=3)
    assert thinking.starts_in_reasoning and not qwen3.starts_in_reasoning
    assert generate(thinking, conversation(coffee)).starts_in_reasoning
    assert [g.starts_in_reasoning for g in thinking.generate_batch([conversation(coffee)] * 2)] == [True, True]
    assert not generate(qwen3, conversation(coffee), max_new_tokens=3).starts_in_reasoning


def test_image_limits_come_from_the_processor_and_its_pixel_bounds(tiny_dirs, qwen3):
    qwen25 = TransformersQwenVLM.from_pretrained(str(tiny_dirs["qwen2_5_vl"]))
    assert qwen3.image_limits.token_side == 32 and qwen25.image_limits.token_side == 28
    assert (qwen3.image_limits.min_pixels, qwen3.image_limits.max_pixels) == (
        qwen3.image_size["shortest_edge"], qwen3.image_size["longest_edge"])


@pytest.mark.parametrize("size", [(3000, 12), (12, 3000)])
def test_strip_the_processor_refuses_is_padded_and_answered(qwen3, coffee, size):
    strip = coffee.resize(size)
    with pytest.raises(ValueError, match="aspect ratio"):  # the processor alone refuses it
        qwen3.processor.image_processor(images=[strip], return_tensors="pt")
    result = generate(qwen3, conversation(strip), max_new_tokens=3)
    assert result.finish_reason in ("stop", "length") and result.prompt_tokens > 0


def test_rendered_prompt_has_turns_and_one_placeholder_per_image(qwen3, coffee):
    messages = conversation(coffee) + [
        Message("assistant", (TextPart("<tool>seg</tool>"),)),
        Message("user", (TextPart("overlay:"), ImagePart(coffee, "overlay"))),
    ]
    assert qwen3.render_prompt(messages) == (
        "<|im_start|>system\nYou segment what the user asks for.<|im_end|>\n"
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>the cup on the left<|im_end|>\n"
        "<|im_start|>assistant\n<tool>seg</tool><|im_end|>\n"
        "<|im_start|>user\noverlay:<|vision_start|><|image_pad|><|vision_end|><|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_to_chat_uses_strings_for_single_text_parts_and_lists_otherwise(coffee):
    chat = to_chat(conversation(coffee))
    assert chat[0] == {"role": "system", "content": "You segment what the user asks for."}
    assert chat[1]["content"][0]["type"] == "image"
    assert chat[1]["content"][0]["image"] is coffee
    assert chat[1]["content"][1] == {"type": "text", "text": "the cup on the left"}


def test_qwen2_5_vl_streams_with_its_own_image_tokens(tiny_dirs, coffee):
    vlm = TransformersQwenVLM.from_pretrained(str(tiny_dirs["qwen2_5_vl"]))
    assert type(vlm.model).__name__ == "Qwen2_5_VLForConditionalGeneration"
    assert image_token_count(vlm, conversation(coffee)) == QWEN25_COFFEE_IMAGE_TOKENS
    *pieces, result = list(vlm.stream(conversation(coffee), max_new_tokens=6))
    assert "".join(pieces) == result.text
    assert (result.finish_reason, result.output_tokens) == ("length", 6)
    assert result == generate(vlm, conversation(coffee), max_new_tokens=6)


def test_concurrent_streams_get_their_own_outputs(qwen3, coffee):
    with Image.open(ASSETS / "rocket.jpg") as img:
        rocket = img.convert("RGB")
    conversations = [conversation(coffee, "the cup"), conversation(rocket, "the rocket")]
    sequential = [generate(qwen3, c, max_new_tokens=20) for c in conversations]
    assert sequential[0].text != sequential[1].text

    results: list[list] = [[], []]

    def run(i: int) -> None:
        results[i] = list(qwen3.stream(conversations[i], max_new_tokens=20))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for i in range(2):
        *pieces, result = results[i]
        assert result == sequential[i]
        assert "".join(pieces) == sequential[i].text


def test_abandoned_stream_releases_the_model(qwen3, coffee):
    stream = qwen3.stream(conversation(coffee), max_new_tokens=2000)
    next(stream)
    stream.close()  # consumer walked away mid-generation
    started = time.perf_counter()
    result = generate(qwen3, conversation(coffee), max_new_tokens=3)
    assert result.output_tokens == 3
    assert time.perf_counter() - started < 60  # a guard: a model still held would block for good


def test_generation_errors_become_backend_errors(qwen3, coffee, monkeypatch):
    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    # forward, not generate: with the prefix cache requests are decoded without model.generate
    monkeypatch.setattr(qwen3.model, "forward", functools.wraps(qwen3.model.forward)(out_of_memory))
    with pytest.raises(BackendError, match="ran out of memory while generating: reduce max_pixels"):
        generate(qwen3, conversation(coffee))
    monkeypatch.undo()
    assert generate(qwen3, conversation(coffee), max_new_tokens=2).output_tokens == 2  # lock released


def test_missing_local_folder_raises_backend_error_naming_it(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(BackendError, match=f"the model folder {missing} does not exist"):
        TransformersQwenVLM.from_pretrained(str(missing))


def test_hub_id_unavailable_offline_raises_backend_error_with_fixes(monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(BackendError) as info:
        TransformersQwenVLM.from_pretrained("sam3-agent-tests/no-such-repo")
    message = str(info.value)
    assert message.startswith("cannot load the VLM sam3-agent-tests/no-such-repo: ")
    assert "`hf auth login`" in message
    assert "(HF_HUB_OFFLINE=1) only works when the Hugging Face cache already holds the files" in message


def test_folder_without_a_model_raises_backend_error(tmp_path):
    with pytest.raises(BackendError, match=f"the folder {tmp_path} holds no model"):
        TransformersQwenVLM.from_pretrained(str(tmp_path))


def test_min_pixels_above_max_pixels_is_refused(tiny_dirs):
    with pytest.raises(InputError, match="min_pixels \\(5000\\) is larger than max_pixels \\(4000\\)"):
        TransformersQwenVLM.from_pretrained(str(tiny_dirs["qwen3_vl"]), min_pixels=5000, max_pixels=4000)


def test_default_model_is_qwen3_vl_8b_instruct():
    assert DEFAULT_VLM_MODEL == "Qwen/Qwen3-VL-8B-Instruct"


# ---------------------------------------------------------------- the tiny builder


def test_tiny_build_is_skipped_when_complete(tiny_dirs):
    folder = tiny_dirs["qwen3_vl"]
    weights = folder / "model.safetensors"
    before = weights.stat().st_mtime_ns
    assert build_tiny_qwen(folder, kind="qwen3_vl") == folder
    assert weights.stat().st_mtime_ns == before
    assert (folder / MARKER_FILE).read_text().startswith(BUILD_VERSION)


def test_tiny_build_is_seeded_and_rebuilt_when_arguments_change(tiny_dirs, tmp_path):
    again = build_tiny_qwen(tmp_path / "same_seed", kind="qwen3_vl")
    reference = load_file(str(tiny_dirs["qwen3_vl"] / "model.safetensors"))
    same = load_file(str(again / "model.safetensors"))
    assert reference.keys() == same.keys()
    assert all(torch.equal(reference[k], same[k]) for k in reference)
    assert (again / "tokenizer.json").read_text() == (tiny_dirs["qwen3_vl"] / "tokenizer.json").read_text()

    build_tiny_qwen(again, kind="qwen3_vl", seed=1)  # same folder, other seed: rebuilt
    other = load_file(str(again / "model.safetensors"))
    assert not torch.equal(reference["lm_head.weight"], other["lm_head.weight"])
    assert (again / MARKER_FILE).read_text().endswith("seed=1\n")


def test_the_native_view_renders_the_function_schema_as_qwen3_vl_does(qwen3, coffee):
    from sam3_agent.agent.prompts import load_prompts
    from sam3_agent.agent.tool_format import function_schemas

    schemas = function_schemas(load_prompts().main_system)
    view = qwen3.with_tools(schemas)
    messages = conversation(coffee)
    prompt = view.render_prompt(messages)
    signatures = "\n".join(json.dumps(s, ensure_ascii=False) for s in schemas)
    assert prompt.startswith(
        f"<|im_start|>system\n{messages[0].text}\n\n# Tools\n\nYou may call one or more functions to assist with the "
        "user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        f"{signatures}\n</tools>\n\nFor each function call, return a json object with function name and arguments "
        'within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": '
        "<args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\n")
    assert "<tools>" not in qwen3.render_prompt(messages)  # the plain model (the verifier's) is untouched
    result = generate(view, messages)  # the cached decoder's system prefix holds the schema too
    assert result.finish_reason in ("stop", "length") and result.prompt_tokens > len(qwen3.encode(messages)["input_ids"][0])


def test_a_template_that_drops_the_schema_gets_it_in_the_system_turn_noticed_once(tiny_dirs, qwen3, coffee, caplog):
    from conftest import KnownSegmenter

    from sam3_agent.agent.config import AgentConfig
    from sam3_agent.agent.loop import Agent
    from sam3_agent.agent.prompts import load_prompts
    from sam3_agent.agent.tool_format import function_schemas

    schemas = function_schemas(load_prompts().main_system)
    vlm = TransformersQwenVLM.from_pretrained(str(tiny_dirs["qwen2_5_vl"]), max_new_tokens=4, sampling=GREEDY)
    messages = conversation(coffee)
    plain = vlm.render_prompt(messages)
    assert vlm.processor.apply_chat_template(to_chat(messages), tools=schemas, tokenize=False,
                                             add_generation_prompt=True) == plain  # the released template drops them
    with caplog.at_level("INFO", logger="sam3_agent.engine.qwen_prepare"):
        view = vlm.with_tools(schemas)
        vlm.with_tools(schemas)
    assert [r.getMessage() for r in caplog.records if "ignores tools" in r.getMessage()] == [
        "the chat template of this model ignores tools=: the function schema is written into the system turn in "
        "Qwen's function-calling form instead"]  # noticed and said once per model
    assert (view.tool_schema, vlm.tool_schema, qwen3.with_tools(schemas).tool_schema) == (
        "system_turn", None, "chat_template")
    # the system turn Qwen3-VL's template renders with the schema (Qwen2.5's own block), then Qwen2.5-VL's turns
    with_schema = qwen3.with_tools(schemas).render_prompt(messages)
    system_turn = with_schema[:with_schema.index("<|im_start|>user")]
    assert system_turn.startswith(f"<|im_start|>system\n{messages[0].text}\n\n# Tools\n\nYou may call one or more")
    assert view.render_prompt(messages) == system_turn + plain[plain.index("<|im_start|>user"):]
    # the cached decoder finds the longer system turn and answers as generate does
    assert view._engine.system_turn_ids(messages[0].text) == vlm.processor.tokenizer(
        system_turn, add_special_tokens=False)["input_ids"]
    result = generate(view, messages)
    assert result.prompt_tokens == len(view.encode(messages)["input_ids"][0]) > len(vlm.encode(messages)["input_ids"][0])
    # a native run on it records how the schema reached the model
    assert Agent(vlm, KnownSegmenter({}), AgentConfig(tool_format="native")).settings()["tool_schema"] == "system_turn"
