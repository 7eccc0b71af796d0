"""Every image sent to a VLM fits its processor (sam3_agent.vlm.image_fit), and a photo with no sensible view is
refused before any model runs."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import KnownSegmenter, photo, tool

from sam3_agent.agent.config import AgentConfig
from sam3_agent.agent.loop import Agent
from sam3_agent.errors import InputError
from sam3_agent.imaging.verify_views import processor_size
from sam3_agent.imaging.views import render_zoom_view
from sam3_agent.messages import ImagePart, Message, TextPart
from sam3_agent.vlm.image_fit import (
    DEFAULT_LIMITS,
    PROCESSOR_MAX_ASPECT_RATIO,
    ImageLimits,
    check_photo,
    fit_image,
    fit_messages,
    limits_of,
)
from sam3_agent.vlm.scripted import ScriptedVLM


def solid(width: int, height: int, value: int = 200):
    from PIL import Image

    return Image.new("RGB", (width, height), (value, value, value))


def test_an_image_that_fits_is_returned_unchanged():
    image = photo("coffee.jpg")
    assert fit_image(image, DEFAULT_LIMITS) is image


def test_a_strip_is_padded_centred_to_the_safe_aspect_ratio_without_distortion():
    strip = solid(3000, 10)
    fitted = fit_image(strip, DEFAULT_LIMITS)
    assert fitted.size == (3000, 32)  # at least one token tall (3000 / 150 = 20 < 32)
    pixels = np.asarray(fitted)
    assert (pixels[11:21] == 200).all() and (pixels[:11] == 0).all() and (pixels[21:] == 0).all()


def test_a_very_long_strip_is_padded_to_the_aspect_ratio():
    fitted = fit_image(solid(12000, 40), DEFAULT_LIMITS)
    assert fitted.size == (12000, 80)
    assert max(fitted.size) / min(fitted.size) == 150 < PROCESSOR_MAX_ASPECT_RATIO


def test_a_tall_strip_is_padded_sideways():
    assert fit_image(solid(10, 3000), ImageLimits(token_side=28)).size == (28, 3000)


def test_a_tiny_image_is_padded_to_one_token_each_side():
    assert fit_image(solid(5, 7), DEFAULT_LIMITS).size == (32, 32)


def test_resize_scales_into_the_pixel_bounds_keeping_the_aspect():
    limits = ImageLimits(min_pixels=10_000, max_pixels=40_000)
    big = fit_image(solid(4000, 3000), limits, resize=True)
    assert big.size == (230, 173) and big.size[0] * big.size[1] <= 40_000
    small = fit_image(solid(40, 30), limits, resize=True)
    assert small.size == (116, 87) and small.size[0] * small.size[1] >= 10_000


def test_resize_of_a_strip_pads_before_scaling_so_the_request_stays_small():
    fitted = fit_image(solid(100_000, 40), ImageLimits(), resize=True)
    assert fitted.size[0] * fitted.size[1] <= ImageLimits().max_pixels + fitted.size[0]
    assert max(fitted.size) / min(fitted.size) <= 150


def test_fit_messages_keeps_names_and_unchanged_messages():
    raw = photo("coffee.jpg")
    messages = [
        Message("system", (TextPart("s"),)),
        Message("user", (ImagePart(raw, "raw"), TextPart("q"))),
        Message("user", (TextPart("zoom"), ImagePart(solid(9000, 20), "round2_mask1_zoom"))),
    ]
    fitted = fit_messages(messages, DEFAULT_LIMITS)
    assert fitted[0] is messages[0] and fitted[1] is messages[1]
    assert [p.name for p in fitted[2].images] == ["round2_mask1_zoom"]
    assert fitted[2].images[0].image.size == (9000, 60)
    assert fitted[2].text == "zoom"


def test_limits_validate_their_values():
    with pytest.raises(ValueError, match="min_pixels"):
        ImageLimits(min_pixels=10, max_pixels=5)
    with pytest.raises(ValueError, match="max_aspect_ratio"):
        ImageLimits(max_aspect_ratio=200)
    assert ImageLimits.with_bounds(None, 1000) == ImageLimits(min_pixels=1000, max_pixels=1000)


def test_limits_of_a_backend_without_images_are_the_defaults():
    assert limits_of(ScriptedVLM([])) == DEFAULT_LIMITS


@pytest.mark.parametrize("size", [(20000, 20), (3000, 10), (1, 1)])
def test_a_photo_with_no_sensible_view_is_refused_with_a_clear_message(size):
    with pytest.raises(InputError) as info:
        check_photo(solid(*size))
    message = str(info.value)
    assert message.startswith(f"the photo is {size[0]} x {size[1]} pixels")
    assert "less than one image token (32 px)" in message and "crop it" in message


@pytest.mark.parametrize("size", [(12000, 50), (6000, 40), (16, 16), (4000, 3000)])
def test_a_photo_with_a_sensible_view_is_accepted(size):
    check_photo(solid(*size))


def test_agent_refuses_a_too_thin_photo_before_any_model_runs():
    vlm = ScriptedVLM([tool("report_no_mask")])
    agent = Agent(vlm, KnownSegmenter({}), AgentConfig())
    with pytest.raises(InputError, match="the photo is 3000 x 10 pixels"):
        agent.start(solid(3000, 10), "the line")
    assert vlm.requests == []


def test_zoom_view_of_a_long_thin_mask_on_a_panorama_crosses_the_limit_and_is_fitted():
    mask = np.zeros((300, 12000), dtype=bool)
    mask[140:146, 100:11900] = True
    zoom = render_zoom_view(solid(12000, 300), mask)
    assert max(zoom.size) / min(zoom.size) > PROCESSOR_MAX_ASPECT_RATIO  # what the processor would refuse
    fitted = fit_image(zoom, DEFAULT_LIMITS)
    assert fitted.size == (zoom.width, 161) and max(fitted.size) / min(fitted.size) <= 150


def test_run_on_a_panorama_verifies_a_long_thin_mask_with_a_real_processor_and_ends_done(tmp_path_factory):
    from sam3_agent.tiny.qwen import build_tiny_qwen
    from sam3_agent.vlm.transformers_qwen import TransformersQwenVLM

    folder = build_tiny_qwen(tmp_path_factory.mktemp("tiny_qwen") / "qwen3_vl", kind="qwen3_vl")
    # random weights: no verdict; 256x256 px per image, so the 39:1 panorama stays visible (short side 41 px)
    verifier = TransformersQwenVLM.from_pretrained(str(folder), max_new_tokens=4, max_pixels=256 * 256)
    panorama = photo("astronaut.jpg").resize((7000, 180))  # its old zoom view of the line was 14004 x 64 (ratio 219)
    line = (100, 85, 6900, 91)
    segmenter = KnownSegmenter({"power line": [(line, 0.9)]})
    vlm = ScriptedVLM([tool("segment_phrase", text_prompt="power line"), tool("examine_each_mask"),
                       tool("select_masks_and_return", final_answer_masks=[1])])
    agent_run = Agent(vlm, segmenter, AgentConfig(), verifier=verifier).start(panorama, "the power line")
    list(agent_run)
    trace = agent_run.trace
    assert trace.status == "done", trace.error
    [checked] = trace.rounds[1].result.verdicts
    assert checked.source == "fallback" and checked.error is None  # the model answered (randomly); no failure
    # drawn for the verifier's bounds at the size its processor keeps: whole tokens, within its ratio limit
    closeup = checked.zoom_view.image
    bounds = checked.zoom_view.view.bounds
    assert (bounds.min_pixels, bounds.max_pixels) == (256 * 256, 256 * 256)
    assert closeup.size == processor_size(*closeup.size, bounds) == (2048, 32)
    assert max(closeup.size) / min(closeup.size) < PROCESSOR_MAX_ASPECT_RATIO
    expected = np.zeros((180, 7000), dtype=bool)
    expected[85:91, 100:6900] = True
    assert np.array_equal(trace.final_masks.masks, expected[None])
