"""Legible numbering at any count: the legibility measure, the size the VLM sees, the label font for dense sets,
labels beside their mask on leader lines, the 200-mask scene pinned at >= 95 % legible, and labels sized for the
main VLM's own pixel bound (``--max-pixels``), recorded in the overlay's recipe."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import KnownSegmenter, photo, tool

from sam3_agent.agent.config import AgentConfig
from sam3_agent.agent.loop import Agent
from sam3_agent.bench.labels import crowd, measure
from sam3_agent.errors import TraceFormatError
from sam3_agent.imaging.draw import DrawStyle, draw_leader, mask_colors
from sam3_agent.imaging.labels import LABEL_GAP, MIN_DIGIT_PX_SEEN, label_style, overlay_labels
from sam3_agent.imaging.legibility import DEFAULT_BOUNDS, PixelBounds, legible_share, seen_scale
from sam3_agent.imaging.overlay import render_numbered_overlay
from sam3_agent.models.gpu_calls import GpuVLM
from sam3_agent.trace.io import load_trace, save_trace
from sam3_agent.vlm.image_fit import DEFAULT_LIMITS, ImageLimits, bounded_size
from sam3_agent.vlm.openai_server import OpenAIServerVLM
from sam3_agent.vlm.scripted import ScriptedVLM


def test_legible_share_counts_labels_clear_of_other_labels_and_of_the_border():
    boxes = [(0, 0, 10, 10), (5, 5, 15, 15), (20, 20, 30, 30), (95, 0, 105, 10), None]
    assert legible_share(boxes, 100, 100) == 0.25  # 0 and 1 overlap, 3 crosses the right border, None not counted
    assert legible_share([(0, 0, 10, 10), (10, 0, 20, 10)], 100, 100) == 1.0  # touching is not overlapping
    assert legible_share([], 100, 100) == 1.0


@pytest.mark.parametrize("limits", [DEFAULT_LIMITS, ImageLimits.with_bounds(None, 100_352),
                                    ImageLimits.with_bounds(500_000, 4_000_000)])
@pytest.mark.parametrize("size", [(512, 512), (451, 300), (4000, 3000), (64, 48), (1200, 900)])
def test_seen_scale_is_the_resize_of_the_vlm_image_fit(size, limits):
    width, height = size
    scale = seen_scale(width, height, limits.pixel_bounds)
    assert (int(width * scale), int(height * scale)) == pytest.approx(bounded_size(width, height, limits), abs=1)


def test_a_few_labels_keep_the_style_of_the_image_size():
    assert label_style(512, 512, [1, 2, 3]) == DrawStyle.for_size(512, 512)


def test_200_labels_shrink_their_font_but_not_below_the_legible_height():
    style = label_style(512, 512, list(range(1, 201)))
    # five 10 % steps down from 512 / 700; a sixth would still keep digits >= 10 px but is not needed: the labels
    # already cover at most a quarter of the photo
    assert style.font_scale == pytest.approx(512 / 700 * 0.9 ** 5, abs=1e-12)
    assert (style.text_thickness, style.padding, style.contour_width) == (1, 2, 1)


@pytest.mark.parametrize("photo", ["astronaut.jpg", "coffee.jpg", "chelsea.jpg", "rocket.jpg"])
def test_200_crowd_masks_on_a_real_photo_are_at_least_95_percent_legible_at_the_vlm_size(photo):
    row = measure(photo, 200)
    assert row["legible"] >= 0.95  # today's 100 %; the placement before this scored 5.5 % to 19.5 % here
    assert row["digits_px"] >= MIN_DIGIT_PX_SEEN


def test_neighbouring_labels_keep_a_gap():
    boxes = [p.box for p in overlay_labels(crowd(512, 512, 200)).placements if p is not None]
    grown = [(x0, y0, x1 + LABEL_GAP, y1 + LABEL_GAP) for x0, y0, x1, y1 in boxes]
    assert legible_share(grown, 513, 513) == 1.0


def test_a_label_with_no_room_inside_its_mask_goes_beside_it_on_a_leader_line():
    masks = np.zeros((2, 512, 512), dtype=bool)
    masks[0, 100:104, 100:104] = True
    masks[1, 100:104, 104:108] = True  # a tiny neighbour: its label cannot sit on it
    first, second = overlay_labels(masks).placements
    # "1" is 10 x 17 px of ink at 512 px (scale 512 / 700, 1 px pen), plus 3 px padding: a 16 x 23 box centred on
    # the mask's deepest point (101, 101)
    assert first.box == (93, 90, 109, 113) and not first.leader
    # the first free place on the rings around (105, 101) (radius 11, 22, ... px, starting straight above)
    assert second.box == (110, 74, 126, 97) and second.anchor == (105, 101) and second.leader


def test_a_leader_line_joins_the_label_to_a_dot_on_its_mask():
    out = np.zeros((40, 60, 3), dtype=np.uint8)
    color = mask_colors(1)[0]
    draw_leader(out, (40, 10, 56, 30), (5, 20), color, DrawStyle.for_size(60, 40))
    assert out[20, 5].tolist() == color.tolist()  # the dot on the mask
    assert out[20, 25].tolist() == color.tolist()  # the line between
    assert out[5, 25].tolist() == [0, 0, 0]  # nothing away from the line


# ---------------------------------------------------------------- the VLM's own pixel bound sizes the labels

SMALL = ImageLimits.with_bounds(None, 50_000)  # e.g. --max-pixels 50000: the VLM sees astronaut.jpg at 223 x 223


@pytest.fixture(scope="module")
def small_bound_run():
    vlm = ScriptedVLM([tool("segment_phrase", text_prompt="person"), tool("select_masks_and_return",
                                                                          final_answer_masks=[1])])
    vlm.image_limits = SMALL  # what a local model, a server or ZeroGPU's plan reports for --max-pixels 50000
    segmenter = KnownSegmenter({"person": [((10, 10, 110, 210), 0.9), ((200, 50, 300, 250), 0.8)]})
    return Agent(vlm, segmenter, AgentConfig()).run(photo("astronaut.jpg"), "the people")


def test_the_overlay_is_drawn_for_the_main_vlms_pixel_bound_not_the_default(small_bound_run):
    overlay = small_bound_run.messages[3].images[0]
    assert overlay.view.bounds == PixelBounds(50_000, 50_000) == SMALL.pixel_bounds
    masks = overlay.view.masks
    seen = seen_scale(512, 512, SMALL.pixel_bounds)
    drawn = overlay_labels(masks, bounds=SMALL.pixel_bounds)
    assert drawn.digit_height * seen >= MIN_DIGIT_PX_SEEN  # readable where this VLM sees it ...
    assert overlay_labels(masks).digit_height * seen < MIN_DIGIT_PX_SEEN  # ... which the default sizing is not
    assert np.array_equal(np.asarray(overlay.image),
                          np.asarray(render_numbered_overlay(small_bound_run.image, masks, bounds=SMALL.pixel_bounds)))
    assert not np.array_equal(np.asarray(overlay.image),
                              np.asarray(render_numbered_overlay(small_bound_run.image, masks)))


def _server_vlm():
    return OpenAIServerVLM("http://127.0.0.1:9/v1", "m", max_pixels=50_000)  # --vlm-server ... --max-pixels 50000


def _zerogpu_vlm():
    local = ScriptedVLM([])
    local.image_limits = SMALL  # the local model loaded with ZeroGPU's plan or --max-pixels
    return GpuVLM(local, "test-label-bounds")


@pytest.mark.parametrize("make_vlm", [_server_vlm, _zerogpu_vlm], ids=["server", "zerogpu"])
def test_the_bound_comes_from_the_main_vlm_however_it_is_served(make_vlm):
    agent = Agent(make_vlm(), KnownSegmenter({}), AgentConfig(), verifier=ScriptedVLM([]))
    assert agent.tools.view_bounds == PixelBounds(50_000, 50_000)


def test_a_saved_overlay_records_its_bound_and_is_drawn_again_identically(small_bound_run, tmp_path):
    save_trace(small_bound_run, tmp_path)
    view = json.loads((tmp_path / "trace.json").read_text())["messages"][3]["parts"][1]["view"]
    assert view["bounds"] == [50_000, 50_000]
    again = load_trace(tmp_path).messages[3].images[0]
    assert again.view.bounds == PixelBounds(50_000, 50_000)
    assert np.array_equal(np.asarray(again.image), np.asarray(small_bound_run.messages[3].images[0].image))


@pytest.mark.parametrize(("bounds", "why"), [([1, 2, 3], "must be \\[min_pixels, max_pixels\\]"),
                                             ([9, 3], "min_pixels \\(9\\) is larger than max_pixels \\(3\\)"),
                                             (["a", 3], "whole numbers of at least 1")])
def test_a_trace_with_bad_view_bounds_is_refused_naming_them(small_bound_run, tmp_path, bounds, why):
    save_trace(small_bound_run, tmp_path)
    path = tmp_path / "trace.json"
    document = json.loads(path.read_text())
    document["messages"][3]["parts"][1]["view"]["bounds"] = bounds
    path.write_text(json.dumps(document))
    with pytest.raises(TraceFormatError, match=why):
        load_trace(tmp_path)


def test_a_trace_from_before_views_recorded_bounds_draws_its_overlays_for_the_default(small_bound_run, tmp_path):
    save_trace(small_bound_run, tmp_path)
    path = tmp_path / "trace.json"
    document = json.loads(path.read_text())
    del document["messages"][3]["parts"][1]["view"]["bounds"]
    path.write_text(json.dumps(document))
    assert load_trace(tmp_path).messages[3].images[0].view.bounds == DEFAULT_BOUNDS
