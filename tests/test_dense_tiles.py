"""A dense set's extra view, an opt-in since issue 30 (``AgentConfig.dense_tiles``): the overlay cut into four enlarged
tiles with the same numbers (``imaging.tiles``), when the agent sends it, what the model is told, how the context keeps
it, how a trace stores and redraws it, and how the page shows it. (The default, two images: tests/test_image_cap.py.)"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import KnownSegmenter, photo, rect_mask, tool
from PIL import Image

from sam3_agent.agent.config import AgentConfig
from sam3_agent.agent.loop import Agent
from sam3_agent.agent.prompts import load_prompts
from sam3_agent.bench.labels import measure, measure_tiles, view_tokens
from sam3_agent.imaging.draw import DrawStyle, blend_fill, mask_colors
from sam3_agent.imaging.legibility import DEFAULT_BOUNDS, PixelBounds
from sam3_agent.imaging.tiles import (
    TILE_PLACES,
    numbered_tiles,
    render_tile,
    shows_tiles,
    tile_layouts,
    tile_masks,
)
from sam3_agent.imaging.views import MaskView
from sam3_agent.mask_set import Masks
from sam3_agent.trace.io import load_trace, save_trace
from sam3_agent.ui.html import ImageUrls, render_round
from sam3_agent.ui.view import round_view
from sam3_agent.vlm.scripted import ScriptedVLM

PROMPTS = load_prompts()


def masks_of(*rects: tuple[int, int, int, int], height: int = 100, width: int = 200) -> Masks:
    arr = np.stack([rect_mask(height, width, *r) if r[2] > r[0] else np.zeros((height, width), bool) for r in rects])
    return Masks(arr, np.full(len(rects), 0.9, np.float32), np.zeros((len(rects), 4), np.float32))


# ---------------------------------------------------------------- geometry


def test_the_four_tiles_overlap_by_an_eighth_and_each_costs_what_the_overlay_costs():
    layouts = tile_layouts(640, 427)
    assert [t.box for t in layouts] == [(0, 0, 360, 241), (280, 0, 640, 241), (0, 186, 360, 427), (280, 186, 640, 427)]
    assert {t.size for t in layouts} == {(638, 427)}  # 360 x 241 enlarged 1.775x: the overlay's 273,280 px, not more
    assert layouts[0].scale == pytest.approx((640 * 427 / (360 * 241)) ** 0.5)
    # a 12 MP photo, which the VLM sees shrunk to 1,003,520 px: each tile is drawn at that pixel count too
    big = tile_layouts(4000, 3000)
    assert big[3].box == (1750, 1312, 4000, 3000) and big[3].size == (1156, 867)
    assert big[3].size[0] * big[3].size[1] <= DEFAULT_BOUNDS.max_pixels
    # a VLM with --max-pixels 100352 sees the overlay at 388 x 259: its tiles are drawn at that size
    assert {t.size for t in tile_layouts(640, 427, PixelBounds(100_352, 100_352))} == {(387, 259)}


def test_a_mask_no_wider_than_the_overlap_lies_whole_in_a_tile_column_wherever_it_is():
    left, right = tile_layouts(640, 427)[:2]
    overlap = left.box[2] - right.box[0]
    assert overlap == 80  # an eighth of 640
    for x0 in range(0, 640 - overlap + 1):
        x1 = x0 + overlap
        assert left.box[0] <= x0 and x1 <= left.box[2] or right.box[0] <= x0 and x1 <= right.box[2], x0


def test_a_mask_is_numbered_where_it_is_whole_else_where_most_of_it_is():
    # 200 x 100: columns [0, 113) and [87, 200), rows [0, 57) and [43, 100)
    masks = masks_of((90, 10, 110, 20),   # in the overlap: whole in top left and top right
                     (0, 0, 200, 100),    # everywhere: whole nowhere, tied: the first tile
                     (150, 0, 200, 100),  # right column, tied top and bottom: top right
                     (150, 30, 200, 100),  # most of it bottom right
                     (0, 0, 0, 0))        # empty: numbered nowhere
    per_tile = numbered_tiles(masks, tile_layouts(200, 100))
    assert [{t for t in range(4) if per_tile[t][k]} for k in range(5)] == [{0, 1}, {0}, {1}, {3}, set()]


def test_a_tile_shows_every_mask_touching_it_in_the_overlay_colour_and_numbers_only_its_own():
    image = Image.new("RGB", (200, 100), (100, 100, 100))
    masks = masks_of((10, 10, 40, 40), (150, 30, 200, 100), (120, 70, 140, 90))
    layouts = tile_layouts(200, 100)
    shown = tile_masks(masks, layouts, 3, DrawStyle.for_size(*layouts[3].size))
    assert shown.indices == [1, 2] and shown.numbered == [True, True]  # mask 1 lies far from the bottom right
    top_right = tile_masks(masks, layouts, 1, DrawStyle.for_size(*layouts[1].size))
    assert top_right.indices == [1] and top_right.numbered == [False]  # cut by the edge, numbered bottom right
    tile = np.asarray(render_tile(image, masks, 1))
    assert tile.shape == (layouts[1].size[1], layouts[1].size[0], 3)
    colour = mask_colors(3)[1]
    x, y = round((175 - 87) * layouts[1].scale), round((50 - 0) * layouts[1].scale)  # deep inside mask 2
    assert tile[y, x].tolist() == blend_fill(np.array([100, 100, 100], np.uint8), colour).tolist()
    assert (tile[:, : round(50 * layouts[1].scale)] == 100).all()  # no mask there: the photo, no label


def test_a_tile_out_of_range_or_of_another_size_is_refused():
    masks = masks_of((10, 10, 40, 40))
    with pytest.raises(ValueError, match="tile 4 is out of range: a photo has 4 tiles"):
        render_tile(Image.new("RGB", (200, 100)), masks, 4)
    with pytest.raises(ValueError, match="do not match the 100x100 photo"):
        render_tile(Image.new("RGB", (100, 100)), masks, 0)
    with pytest.raises(ValueError, match="needs a tile number"):
        MaskView("tile", Image.new("RGB", (200, 100)), masks)


# ---------------------------------------------------------------- when, and how legible


@pytest.mark.parametrize(("count", "bounds", "shown"), [
    (20, DEFAULT_BOUNDS, False),                 # at most DENSE_LABELS labels: never crowded
    (74, DEFAULT_BOUNDS, False),                 # 74 labels fit in the legible font
    (75, DEFAULT_BOUNDS, True),                  # 75 do not: the overlay shrinks them, the tiles come
    (50, PixelBounds(30_000, 30_000), True),     # a small --max-pixels needs bigger digits: crowded sooner
])
def test_tiles_come_when_the_overlays_labels_lack_room(count, bounds, shown):
    assert shows_tiles(640, 427, count, bounds) is shown


def test_the_tiles_of_200_crowd_masks_are_legible_with_larger_digits_than_the_overlay():
    tiles, overlay = measure_tiles("rocket.jpg", 200), measure("rocket.jpg", 200)
    assert tiles["shown"] and tiles["legible"] >= 0.95 and tiles["numbered"] == 1.0
    assert tiles["digits_px"] >= 1.5 * overlay["digits_px"]  # 19 px against 12


def test_the_four_tiles_cost_four_overlays_in_qwen3_vl_image_tokens():
    # 640 x 427 -> 640 x 416 in whole 32 px tokens: 20 x 13; each 638 x 427 tile the same
    assert view_tokens(640, 427) == (260, 4 * 260)
    # --max-pixels 100352: the overlay is seen at 388 x 259 -> 384 x 256, 12 x 8 tokens
    assert view_tokens(640, 427, PixelBounds(50_000, 100_352)) == (96, 4 * 96)


def test_the_tiles_read_where_a_small_pixel_bound_makes_the_overlay_illegible():
    small = PixelBounds(50_000, 50_000)  # --max-pixels 50000: rocket seen at 274 x 183
    assert measure("rocket.jpg", 200, bounds=small)["legible"] < 0.2  # 10 % of the overlay's labels
    assert measure_tiles("rocket.jpg", 200, bounds=small)["legible"] >= 0.95


# ---------------------------------------------------------------- in a run

GRID = [(((k % 12) * 42 + 2, (k // 12) * 50 + 2, (k % 12) * 42 + 38, (k // 12) * 50 + 44), 0.9) for k in range(120)]


@pytest.fixture(scope="module")
def dense_run():
    vlm = ScriptedVLM([tool("segment_phrase", text_prompt="bird"), tool("segment_phrase", text_prompt="big bird"),
                       tool("select_masks_and_return", final_answer_masks=[1])])
    segmenter = KnownSegmenter({"bird": GRID, "big bird": GRID[:3]})
    trace = Agent(vlm, segmenter, AgentConfig(dense_tiles=True)).run(photo("astronaut.jpg"), "all birds")
    return trace, vlm.requests


def test_a_dense_set_is_sent_as_its_overlay_then_four_tiles_and_the_text_says_what_they_are(dense_run):
    trace, _ = dense_run
    reply = trace.messages[trace.rounds[0].reply_index]
    assert [p.name for p in reply.images] == ["round1_overlay"] + [f"round1_tile{t}" for t in range(1, 5)]
    assert [(p.view.kind, p.view.tile) for p in reply.images] == [("overlay", None)] + [("tile", t) for t in range(4)]
    note = PROMPTS.format("dense_tiles", count=4, places="top left, top right, bottom left, bottom right")
    assert reply.text == PROMPTS.format("segment_result", count=120, phrase="bird") + "\n\n" + note


def test_the_next_request_holds_the_photo_the_overlay_and_its_tiles(dense_run):
    _, requests = dense_run
    assert [p.name for m in requests[1] for p in m.images] == ["raw", "round1_overlay"] + [
        f"round1_tile{t}" for t in range(1, 5)]


def test_a_new_phrase_turns_the_dense_overlay_and_its_tiles_into_one_placeholder(dense_run):
    trace, requests = dense_run
    assert [p.name for m in requests[2] for p in m.images] == ["raw", "round2_overlay"]  # 3 masks: no tiles
    assert trace.rounds[2].context.image_count == 2


def test_a_saved_trace_stores_the_tiles_as_recipes_and_draws_them_again_identically(dense_run, tmp_path):
    trace, _ = dense_run
    save_trace(trace, tmp_path)
    document = json.loads((tmp_path / "trace.json").read_text())
    tile = document["messages"][3]["parts"][4]  # text, overlay, tiles 1, 2, 3
    assert tile == {"type": "image", "name": "round1_tile3",
                    "view": {"kind": "tile", "masks": 0, "tile": 2, "bounds": [200_704, 1_003_520]}}
    assert len(list((tmp_path / "images").iterdir())) == 1  # the photo only: no view is stored as pixels
    again = load_trace(tmp_path)
    for before, after in zip(trace.messages[3].images, again.messages[3].images):
        assert after.view == before.view and np.array_equal(np.asarray(after.image), np.asarray(before.image))


def test_the_page_shows_the_tiles_under_the_overlay(dense_run):
    trace, _ = dense_run
    view = round_view(trace.rounds[0], 30)
    assert view.overlay.name == "round1_overlay" and [t.name for t in view.tiles] == [
        f"round1_tile{t}" for t in range(1, 5)]
    html = render_round(view, ImageUrls())
    assert html.count('<img class="tile"') == 4 and html.index('class="overlay"') < html.index('class="tiles"')
    assert round_view(trace.rounds[1], 30).tiles == ()


def test_the_tile_places_are_what_the_model_is_told_and_only_when_tiles_come():
    assert TILE_PLACES == ("top left", "top right", "bottom left", "bottom right")
    note = PROMPTS.format("dense_tiles", count=4, places=", ".join(TILE_PLACES))
    assert "4 more images follow it" in note and "top left, top right, bottom left, bottom right" in note
    assert "overlapping parts" not in PROMPTS.main_system  # the system prompt of every run never speaks of tiles
