"""A genuinely different image-text-to-text family (a tiny random-weight Gemma 3, ``sam3_agent.tiny.gemma3``) runs on
the plain ``generate`` path: its own processor and chat template build its inputs, the engine says once why it does
not use the cached decoder and the trace records it, its verification calls run one at a time, and with random
weights a run ends on its round budget, never in a crash."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import pytest
import torch
from conftest import KnownSegmenter
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor, GenerationConfig

from sam3_agent import Agent, AgentConfig, BackendSettings, build_backends
from sam3_agent.agent.prompts import load_prompts
from sam3_agent.agent.verify import verification_messages
from sam3_agent.engine.decoding import DecodingSettings
from sam3_agent.engine.sampling import GREEDY
from sam3_agent.images import load_image
from sam3_agent.messages import Generation, ImagePart, Message, TextPart
from sam3_agent.package_files import ASSETS_DIR
from sam3_agent.presets import tiny_model_paths
from sam3_agent.vlm.base import generate
from sam3_agent.vlm.image_fit import DEFAULT_LIMITS
from sam3_agent.vlm.scripted import ScriptedVLM
from sam3_agent.vlm.transformers_qwen import TransformersQwenVLM

REASON = ("Gemma3ForConditionalGeneration has no Qwen-VL 3-D position index (get_rope_index): the cached decoder "
          "cannot place its tokens")
PATH = {"path": "generate", "cache": "sliding window + full attention", "prefix_cache": False, "reason": REASON}
IMAGE_TOKENS = 16  # tiny.gemma3.IMAGE_TOKENS


@pytest.fixture(scope="module")
def folders() -> tuple[Path, Path]:
    """(tiny SAM 3, tiny Gemma 3), built once into the test cache like every tiny preset."""
    return tiny_model_paths("gemma3")


@pytest.fixture(scope="module")
def gemma(folders) -> TransformersQwenVLM:
    """The tiny Gemma 3 loaded as ``--vlm-model FOLDER`` loads it, greedy with a short budget."""
    loaded = TransformersQwenVLM.from_pretrained(str(folders[1]), device="cpu")
    return loaded.with_decoding(DecodingSettings(6, GREEDY))


def test_the_folder_loads_as_gemma3_with_its_processor_template_and_generation_config(folders):
    model = AutoModelForImageTextToText.from_pretrained(str(folders[1]))
    processor = AutoProcessor.from_pretrained(str(folders[1]))
    assert (type(model).__name__, type(processor).__name__, type(processor.tokenizer).__name__) == (
        "Gemma3ForConditionalGeneration", "Gemma3Processor", "GemmaTokenizer")
    assert model.config.text_config.layer_types == ["sliding_attention", "full_attention"]
    chat = [{"role": "system", "content": [{"type": "text", "text": "You segment."}]},
            {"role": "user", "content": [{"type": "image", "image": Image.new("RGB", (40, 30))},
                                         {"type": "text", "text": " the cup "}]},
            {"role": "assistant", "content": "I look."}, {"role": "user", "content": "found 2"}]
    assert processor.apply_chat_template(chat, add_generation_prompt=True, tokenize=False) == (
        "<bos><start_of_turn>user\nYou segment.\n\n<start_of_image>the cup<end_of_turn>\n"
        "<start_of_turn>model\nI look.<end_of_turn>\n<start_of_turn>user\nfound 2<end_of_turn>\n<start_of_turn>model\n")
    saved = GenerationConfig.from_pretrained(str(folders[1]))
    tokenizer = processor.tokenizer
    assert (saved.do_sample, saved.top_k, saved.top_p, saved.cache_implementation) == (True, 64, 0.95, "hybrid")
    assert saved.eos_token_id == [tokenizer.convert_tokens_to_ids("<eos>"),
                                  tokenizer.convert_tokens_to_ids("<end_of_turn>")]


def test_the_probe_picks_generate_with_its_reason_logged_once(folders, caplog):
    with caplog.at_level(logging.WARNING, logger="sam3_agent"):
        vlm = TransformersQwenVLM.from_pretrained(str(folders[1]), device="cpu", max_pixels=200_000)
    assert vlm.decoding_paths() == PATH
    assert vlm.prefix_store is None and vlm.prefill_system_prompts(["You segment."]) == 0
    assert [r.getMessage() for r in caplog.records] == [
        f"{folders[1]}: its image processor (Gemma3ImageProcessor) resizes images to a size of its own; min/max "
        "pixels are not applied",
        f"{folders[1]} decodes with generate() (no prefix reuse, no batching): {REASON}"]
    assert (vlm.image_size, vlm.image_limits, vlm.starts_in_reasoning) == (None, DEFAULT_LIMITS, False)
    assert (vlm.defaults.family, vlm.defaults.main.sampling.top_k) == ("other", 64)


def test_requests_are_encoded_by_the_models_own_processor_and_template(gemma):
    photo = load_image(ASSETS_DIR / "coffee.jpg")
    messages = [Message("system", (TextPart("You segment."),)),
                Message("user", (ImagePart(photo, "raw"), TextPart("the cup")))]
    encoded = gemma.encode(messages)
    expected = gemma.processor.apply_chat_template(
        [{"role": "system", "content": [{"type": "text", "text": "You segment."}]},
         {"role": "user", "content": [{"type": "image", "image": photo}, {"type": "text", "text": "the cup"}]}],
        add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt")
    assert encoded["input_ids"].tolist() == expected["input_ids"].tolist()
    assert tuple(encoded["pixel_values"].shape) == (1, 3, 112, 112)  # the processor's own size, not pixel bounds
    assert int(encoded["token_type_ids"].sum()) == IMAGE_TOKENS
    assert gemma.render_prompt(messages).startswith("<bos><start_of_turn>user\nYou segment.\n\n<start_of_image>")


def test_verification_calls_run_one_at_a_time_and_give_what_each_gives_alone(gemma):
    photo = load_image(ASSETS_DIR / "coffee.jpg")
    prompts = load_prompts()
    mask = torch.zeros(photo.height, photo.width, dtype=torch.bool)
    conversations = []
    for n, (x0, x1) in enumerate(((0, 200), (250, 500))):
        single = mask.clone()
        single[100:300, x0:x1] = True
        view = Image.fromarray((single.numpy()[..., None] * 255).repeat(3, 2).astype("uint8"))
        conversations.append(verification_messages(prompts, photo, "the cup", ImagePart(view, f"mask{n + 1}_view"),
                                                   ImagePart(photo.crop((x0, 100, x1, 300)), f"mask{n + 1}_zoom"),
                                                   n + 1))
    alone = [generate(gemma, c) for c in conversations]
    before = gemma.usage().requests
    batch = gemma.generate_batch(conversations, stop=threading.Event())
    assert batch == alone and all(isinstance(g, Generation) and g.output_tokens for g in batch)
    assert gemma.usage().requests - before == 2  # one request per verification: nothing was batched
    assert alone[0].prompt_tokens == int(gemma.encode(conversations[0])["input_ids"].shape[1])


def test_a_library_run_ends_on_its_round_budget_with_the_path_recorded(folders):
    backends = build_backends(BackendSettings(preset="real", vlm_model=str(folders[1]), sam3_model=str(folders[0]),
                                              device="cpu", max_new_tokens=8))
    agent = Agent.from_backends(backends, AgentConfig(max_rounds=2))
    trace = agent.run(load_image(ASSETS_DIR / "coffee.jpg"), "the cup")
    assert (trace.status, len(trace.rounds)) == ("max_rounds", 2)  # random weights never call a tool: no crash
    assert trace.settings["decoding_path"] == PATH
    assert all(r.prompt_tokens and r.output_tokens for r in trace.rounds)


def test_an_examine_round_sends_every_mask_to_the_gemma3_verifier(gemma):
    segmenter = KnownSegmenter({"cup": [((10, 10, 200, 150), 0.9), ((250, 200, 500, 380), 0.8)]})
    script = ScriptedVLM(['<tool>{"name": "segment_phrase", "parameters": {"text_prompt": "cup"}}</tool>',
                          '<tool>{"name": "examine_each_mask", "parameters": {}}</tool>',
                          '<tool>{"name": "report_no_mask", "parameters": {}}</tool>'])
    before = gemma.usage().requests
    trace = Agent(script, segmenter, AgentConfig(max_rounds=3), verifier=gemma).run(
        load_image(ASSETS_DIR / "coffee.jpg"), "the cup")
    verdicts = trace.rounds[1].result.verdicts
    assert trace.status == "no_mask" and [v.mask_number for v in verdicts] == [1, 2]
    assert all(v.outputs and v.prompt_tokens for v in verdicts)  # each mask was asked of the model
    assert gemma.usage().requests - before == sum(len(v.outputs) for v in verdicts)


@pytest.mark.slow
def test_the_cli_runs_a_gemma3_folder_to_its_round_budget_with_the_path_recorded(folders, tmp_path, capsys):
    from sam3_agent.cli.main import main

    out = tmp_path / "out"
    code = main(["run", "--vlm-model", str(folders[1]), "--sam3-model", str(folders[0]), "--device", "cpu",
                 "--image", str(ASSETS_DIR / "coffee.jpg"), "--query", "the cup", "--out", str(out),
                 "--max-rounds", "2", "--max-new-tokens", "8"])
    stderr = capsys.readouterr().err
    assert code == 4, stderr  # the round budget ran out: random weights never answer
    assert json.loads((out / "trace.json").read_text())["settings"]["decoding_path"] == PATH
    assert stderr.count("decodes with generate()") <= 1


def test_a_conversation_its_template_refuses_is_a_named_backend_fault_not_a_crash(gemma):
    from sam3_agent.errors import BackendError

    twice = [Message("user", (TextPart("the cup"),)), Message("user", (TextPart("again"),))]
    with pytest.raises(BackendError) as refused:
        generate(gemma, twice)
    assert str(refused.value) == (f"{gemma.name}: could not prepare the request for the model: Conversation roles "
                                  "must alternate user/assistant/user/assistant/...")
