"""The Correct view: its session actions, what it shows, its handlers, exports and imports (no browser, no model)."""

from __future__ import annotations

import io
import json
import types
import zipfile
from pathlib import Path

import gradio as gr
import numpy as np
import pytest
from conftest import ASSETS, KnownSegmenter, photo, rect_mask, tool, verdict
from PIL import Image
from pycocotools.coco import COCO

from sam3_agent.correct.export import bundle_bytes, load_bundle
from sam3_agent.correct.strokes import stroke_from_view_points
from sam3_agent.edit_ops import BringInMask, ClickMask
from sam3_agent.errors import BackendError, InputError
from sam3_agent.imaging.draw import blend_fill, mask_colors
from sam3_agent.mask_set import Masks
from sam3_agent.presets import Backends
from sam3_agent.sam.prompts import check_clicks
from sam3_agent.sam.tracker import PointMask
from sam3_agent.types import ContextRecord, Round, ToolResult, Trace
from sam3_agent.ui.correct import actions as correct
from sam3_agent.ui.correct.geometry import ViewGeometry
from sam3_agent.ui.correct.handlers import CorrectHandlers
from sam3_agent.ui.correct.tools import TOOL_NEGATIVE, TOOL_POSITIVE, TOOL_SELECT, TOOL_TOGGLE
from sam3_agent.ui.correct.view import (
    NO_SELECTION,
    MaskRow,
    agent_overlay,
    corrected_overlay,
    mask_rows,
    round_choices,
    selected_choices,
    shown_choices,
    status_text,
)
from sam3_agent.ui.run.handlers import Handlers
from sam3_agent.ui.run.runner import AgentFactory
from sam3_agent.ui.run.slot import RunSlot
from sam3_agent.ui.settings import AppSettings
from sam3_agent.vlm.scripted import ScriptedVLM

QUERY = "the people"
# astronaut.jpg is 512x512. Round 1 showed three masks (SAM 3 order by score); verification rejected the second;
# round 2 showed the two survivors and the agent chose both. Boxes are xyxy, pixels.
BIG, TALL, SMALL = (200, 50, 300, 250), (10, 10, 110, 210), (350, 300, 450, 400)


def masks_of(boxes, scores, size=(512, 512), phrase="person") -> Masks:
    height, width = size
    stack = np.stack([rect_mask(height, width, *b) for b in boxes])
    return Masks(stack, np.array(scores, dtype=np.float32), np.array(boxes, dtype=np.float32), phrase)


def make_trace(image: Image.Image, round_masks: list[Masks], final: Masks | None, status: str = "done") -> Trace:
    rounds = [
        Round(index=i + 1, context=ContextRecord((), ()), output="", finish_reason="stop", call=None, error=None,
              error_detail=None, result=ToolResult(reply=None, masks=m, summary=f"{len(m)} masks"),
              assistant_index=None, reply_index=None)
        for i, m in enumerate(round_masks)
    ]
    return Trace(QUERY, image, {"vlm_model": "hand-made"}, [], rounds, status, None, final, 1.0, 2.0)


@pytest.fixture(scope="module")
def trace() -> Trace:
    round1 = masks_of([BIG, TALL, SMALL], [0.9, 0.7, 0.6])
    final = masks_of([BIG, SMALL], [0.9, 0.6])
    return make_trace(photo("astronaut.jpg"), [round1, final], final)


@pytest.fixture
def session(trace):
    return correct.start_session(trace)


class FakePointSegmenter:
    """Clicks -> a 61x61 square centred on the mean positive click, minus 21x21 squares at negative clicks."""

    name = "fake-points"

    def __init__(self) -> None:
        self.calls: list[tuple[list[tuple[float, float]], list[int]]] = []

    def segment_points(self, image, points, labels) -> PointMask:
        width, height = image.size
        check_clicks(points, labels, width, height)  # the real model's checks
        self.calls.append(([tuple(p) for p in points], list(labels)))
        positive = np.array([p for p, lab in zip(points, labels) if lab == 1])
        cx, cy = positive.mean(axis=0).astype(int)
        mask = rect_mask(height, width, cx - 30, cy - 30, cx + 31, cy + 31)
        for (x, y), lab in zip(points, labels):
            if lab == 0:
                mask &= ~rect_mask(height, width, int(x) - 10, int(y) - 10, int(x) + 11, int(y) + 11)
        return PointMask(mask, 0.875)


def clicked(tool: str, x, y):
    """What the canvas sends for a click (``canvas.js``), as Gradio hands it over (``gr.SelectData``)."""
    return types.SimpleNamespace(index=[x, y], value={"kind": "click", "tool": tool, "x": x, "y": y})


def stroked(tool: str, points, radius: float):
    """What the canvas sends for a brush stroke through view pixels ``points``."""
    return types.SimpleNamespace(index=None, value={"kind": "stroke", "tool": tool, "points": points, "radius": radius})


def handlers_with(tmp_path: Path, segmenter=None, error: str = "the point model was not loaded"):
    def provider():
        if segmenter is None:
            raise BackendError(error)
        return segmenter

    return CorrectHandlers(provider, warn=lambda message: None, root=tmp_path / "app")


def opened(handlers: CorrectHandlers, session) -> str:
    """``session`` opened in ``handlers`` as loading a trace opens it; returns its key (what the page's state holds)."""
    return handlers.sessions.put(session)


def line(x0: int, x1: int, y: int) -> list[list[float]]:
    """A horizontal brush path through view pixel centres (x0, y) .. (x1, y)."""
    return [[float(x0), float(y)], [float(x1), float(y)]]


# ------------------------------------------------------------------ geometry


def test_a_small_photo_is_shown_at_its_own_size_and_clicks_are_its_pixels():
    geometry = ViewGeometry.for_size(600, 400)
    assert (geometry.view_width, geometry.view_height, geometry.scaled) == (600, 400, False)
    assert geometry.to_image(10, 399) == (10.0, 399.0)


def test_a_big_photo_is_shown_at_1024_px_and_clicks_map_to_full_resolution():
    geometry = ViewGeometry.for_size(4000, 3000)
    assert (geometry.view_width, geometry.view_height, geometry.scaled) == (1024, 768, True)
    assert geometry.to_image(256, 192) == (1000.0, 750.0)
    assert geometry.to_image(1023, 767) == (1023 * 4000 / 1024, 767 * 3000 / 768)


@pytest.mark.parametrize("x, y", [(1024, 5), (-1, 5), (5, 768), (None, 3), ("left", 3), (float("nan"), 2)])
def test_a_click_off_the_shown_image_is_refused(x, y):
    with pytest.raises(InputError, match="click on the picture itself"):
        ViewGeometry.for_size(4000, 3000).to_image(x, y)


# ------------------------------------------------------------------ what the view shows


def test_a_new_session_lists_the_agent_masks_all_shown_and_nothing_selected(session):
    assert mask_rows(session) == [
        MaskRow(1, QUERY, "agent", True, False, 100 * 200, 0.9, False),
        MaskRow(2, QUERY, "agent", True, False, 100 * 100, 0.6, False),
    ]
    assert shown_choices(session) == ([(f"1: {QUERY} (agent)", 0), (f"2: {QUERY} (agent)", 1)], [0, 1])
    assert selected_choices(session)[1] == NO_SELECTION
    assert round_choices(session.trace) == [("round 1: 3 masks for 'person'", 1), ("round 2: 2 masks for 'person'", 2)]
    assert status_text(session) == "Corrected answer: 2 masks (the agent chose 2). 0 edits in effect."


def test_toggling_mask_2_off_hides_it_in_the_corrected_overlay_and_the_list_but_not_in_the_agent_answer(session):
    edited = correct.set_shown(session, [0])
    assert [row.on for row in mask_rows(edited)] == [True, False]
    assert shown_choices(edited)[1] == [0]
    raw = np.asarray(session.view)
    inside_1, inside_2 = (215, 230), (370, 390)  # (x, y) away from borders and labels
    colors = mask_colors(2)
    overlay, agent = np.asarray(corrected_overlay(edited)), np.asarray(agent_overlay(edited))
    assert overlay[inside_1[1], inside_1[0]].tolist() == blend_fill(raw[inside_1[1], inside_1[0]], colors[0]).tolist()
    assert overlay[inside_2[1], inside_2[0]].tolist() == raw[inside_2[1], inside_2[0]].tolist()
    assert agent[inside_2[1], inside_2[0]].tolist() == blend_fill(raw[inside_2[1], inside_2[0]], colors[1]).tolist()
    assert status_text(edited) == ("Corrected answer: 1 mask (the agent chose 2). Last edit: hide mask 2. "
                                   "1 edit in effect.")


def test_a_toggle_click_hides_the_mask_under_it_and_a_second_click_shows_it_again(session):
    hidden = correct.click(session, TOOL_TOGGLE, 400, 380)
    assert [it.on for it in hidden.state.items] == [True, False]
    shown = correct.click(hidden, TOOL_TOGGLE, 400, 380)
    assert [it.on for it in shown.state.items] == [True, True] and shown.state.cursor == 2
    with pytest.raises(InputError, match="no mask under the click"):
        correct.click(session, TOOL_TOGGLE, 5, 500)


def test_a_select_click_selects_the_mask_under_it_and_marks_it(session):
    chosen = correct.click(session, TOOL_SELECT, 250, 100)
    assert chosen.selected == 0 and chosen.state.cursor == 0
    assert [row.selected for row in mask_rows(chosen)] == [True, False]
    overlay = np.asarray(corrected_overlay(chosen))
    assert overlay[100, 198].tolist() == [255, 255, 255]  # the white rim just outside mask 1's left edge (x = 200)
    assert correct.click(chosen, TOOL_SELECT, 5, 500).selected is None


def test_bring_in_adds_the_mask_verification_rejected_and_selects_it(session):
    brought = correct.bring_in(session, 1, 2)
    item = brought.state.items[2]
    assert np.array_equal(item.mask, rect_mask(512, 512, *TALL)) and item.origin == "round 1 mask 2"
    assert item.score == pytest.approx(0.7) and brought.selected == 2
    assert mask_rows(brought)[2] == MaskRow(3, QUERY, "round 1 mask 2", True, False, 100 * 200, 0.7, True)
    with pytest.raises(InputError, match="already mask 1"):
        correct.bring_in(session, 1, 1)
    with pytest.raises(InputError, match="choose a round and a mask number"):
        correct.bring_in(session, None, 1)


def test_undo_restores_the_previous_list_and_redo_brings_the_edit_back(session):
    edited = correct.delete_selected(correct.select(correct.bring_in(session, 1, 2), 0))
    assert [row.number for row in mask_rows(edited)] == [2, 3] and edited.selected is None
    back = correct.undo(edited)
    assert [row.number for row in mask_rows(back)] == [1, 2, 3]
    assert [row.number for row in mask_rows(correct.undo(back))] == [1, 2]
    assert [row.number for row in mask_rows(correct.redo(back))] == [2, 3]
    with pytest.raises(InputError, match="nothing to undo"):
        correct.undo(session)
    with pytest.raises(InputError, match="nothing to redo"):
        correct.redo(session)


def test_a_point_click_with_nothing_selected_makes_a_new_mask_and_later_clicks_refine_it(session):
    model = FakePointSegmenter()
    first = correct.click(session, TOOL_POSITIVE, 60, 300, model)
    assert first.selected == 2 and first.state.items[2].origin == "clicks" and first.state.items[2].edited
    assert np.array_equal(first.state.items[2].mask, rect_mask(512, 512, 30, 270, 91, 331))
    second = correct.click(first, TOOL_NEGATIVE, 80, 320, model)
    assert model.calls == [([(60.0, 300.0)], [1]), ([(60.0, 300.0), (80.0, 320.0)], [1, 0])]
    assert len(second.state.items) == 3 and second.selected == 2
    last = second.state.applied[-1]
    assert isinstance(last, ClickMask) and last.index == 2 and last.labels == (1, 0)
    expected = rect_mask(512, 512, 30, 270, 91, 331) & ~rect_mask(512, 512, 70, 310, 91, 331)
    assert np.array_equal(second.state.items[2].mask, expected)
    assert correct.pending_prompt(correct.undo(second)) == (None, ((60.0, 300.0),), (1,))


def test_relabelling_or_hiding_between_clicks_keeps_the_earlier_clicks_but_painting_does_not(session):
    model = FakePointSegmenter()
    first = correct.click(session, TOOL_POSITIVE, 60, 300, model)
    labelled = correct.toggle(correct.relabel(first, "spoon"), 0)  # no pixel of mask 3 changed
    assert correct.pending_prompt(labelled) == (None, ((60.0, 300.0),), (1,))
    second = correct.click(labelled, TOOL_NEGATIVE, 80, 320, model)
    assert model.calls[-1] == ([(60.0, 300.0), (80.0, 320.0)], [1, 0])
    assert second.state.items[2].label == "spoon"
    brushed = correct.brush(second, line(60, 100, 300), 20, erase=False)
    assert correct.pending_prompt(brushed) == (None, (), ())  # the mask's pixels changed by other means: start over


def test_a_point_click_replaces_the_selected_mask(session):
    replaced = correct.click(correct.select(session, 1), TOOL_POSITIVE, 400, 350, FakePointSegmenter())
    assert len(replaced.state.items) == 2 and replaced.selected == 1
    assert np.array_equal(replaced.state.items[1].mask, rect_mask(512, 512, 370, 320, 431, 381))
    assert replaced.state.items[1].score is None and replaced.state.items[1].edited


def test_only_negative_points_are_refused(session):
    with pytest.raises(InputError, match="every click is negative"):
        correct.click(session, TOOL_NEGATIVE, 60, 300, FakePointSegmenter())


def test_a_brush_stroke_with_nothing_selected_makes_a_new_mask_and_erase_removes_pixels(session):
    new = correct.brush(session, line(20, 60, 15), 10, erase=False)
    capsule = stroke_from_view_points(line(20, 60, 15), 10, 1.0, 512, 512)
    assert new.selected == 2 and np.array_equal(new.state.items[2].mask, capsule)
    assert capsule[15, 10:71].all() and not capsule[15, 9] and not capsule[15, 71] and capsule[5:26, 40].all()
    erased = correct.brush(correct.select(new, 0), line(190, 310, 60), 10, erase=True)
    # rows 50..70 of mask 1 (x 200..299) are gone, the rest stays
    assert not erased.state.items[0].mask[50:71, 200:300].any() and erased.state.items[0].mask[71:250, 200:300].all()


def test_erasing_with_nothing_selected_and_empty_strokes_are_refused(session):
    with pytest.raises(InputError, match="select a mask to erase from"):
        correct.brush(session, line(0, 5, 5), 4, erase=True)
    with pytest.raises(InputError, match="nothing was painted"):
        correct.brush(session, [], 4, erase=False)
    with pytest.raises(InputError, match="nothing was painted"):
        correct.brush(session, None, 4, erase=False)
    with pytest.raises(InputError, match="brush size must be a number"):
        correct.brush(session, line(0, 5, 5), "big", erase=False)
    with pytest.raises(InputError, match="radius"):
        correct.brush(session, line(0, 5, 5), 0, erase=False)


def test_a_stroke_sent_over_http_is_bounded_before_anything_is_drawn(session):
    # anyone who reaches the page can send the canvas event: too many points, or a brush wider than the view
    with pytest.raises(InputError, match="a brush stroke is a list of at most 20,000 points"):
        correct.brush(session, [[10.0, 10.0]] * (correct.MAX_STROKE_POINTS + 1), 4, erase=False)
    with pytest.raises(InputError, match="a brush stroke is a list"):
        correct.brush(session, {"x": 1}, 4, erase=False)
    with pytest.raises(InputError, match=r"the brush radius \(513 px\) is larger than the picture shown \(512x512\)"):
        correct.brush(session, line(0, 5, 5), 513, erase=False)
    with pytest.raises(InputError, match="larger than the picture shown"):
        correct.brush(session, line(0, 5, 5), float("nan"), erase=False)
    whole = correct.brush(session, [[255.5, 255.5]], 512, erase=False)  # the view's size is still a brush
    assert whole.state.items[whole.selected].mask.all()


def test_relabel_and_delete_need_a_selected_mask(session):
    with pytest.raises(InputError, match="select a mask first"):
        correct.relabel(session, "astronaut")
    with pytest.raises(InputError, match="select a mask to delete"):
        correct.delete_selected(session)
    named = correct.relabel(correct.select(session, 1), "  flag  ")
    assert [row.label for row in mask_rows(named)] == [QUERY, "flag"]


def test_a_run_that_is_still_going_cannot_be_corrected(trace):
    running = make_trace(trace.image, [], None, status="running")
    with pytest.raises(InputError, match="the run is still going"):
        correct.start_session(running)


# ------------------------------------------------------------------ a big photo


@pytest.fixture(scope="module")
def big_session():
    image = photo("rocket.jpg").resize((4000, 3000), Image.Resampling.BILINEAR)
    final = masks_of([(400, 400, 1600, 2400)], [0.8], size=(3000, 4000), phrase="rocket")
    return correct.start_session(make_trace(image, [final], final))


def test_a_big_photo_is_edited_on_a_scaled_view_and_exports_full_size_masks(big_session, tmp_path):
    assert big_session.view.size == (1024, 768) and corrected_overlay(big_session).size == (1024, 768)
    handlers = handlers_with(tmp_path, FakePointSegmenter())
    # a dab at view pixel (128, 64), radius 8: at scale 0.256 a disc of radius 31.25 full pixels centred on
    # ((128 + 0.5) / 0.256 - 0.5, (64 + 0.5) / 0.256 - 0.5) = (501.45, 251.45)
    key = opened(handlers, big_session)
    out = handlers.canvas(key, stroked("paint", [[128.0, 64.0]], 8))
    assert out.session == key
    edited = handlers.session(key)
    disc = edited.state.items[1].mask
    assert disc.shape == (3000, 4000)
    rows, cols = np.nonzero(disc)
    assert abs(rows.mean() - 251.45) < 0.5 and abs(cols.mean() - 501.45) < 0.5
    assert abs(disc.sum() - np.pi * 31.25 ** 2) < 0.02 * np.pi * 31.25 ** 2
    handlers.canvas(key, clicked(TOOL_POSITIVE, 512, 384))  # refines the new mask 2
    assert handlers.session(key).state.applied[-1].points == ((2000.0, 1500.0),)
    _, path = handlers.export_coco(key)
    coco = COCO(path)
    assert coco.imgs[1]["width"] == 4000 and coco.imgs[1]["height"] == 3000
    masks = [coco.annToMask(a) for a in coco.loadAnns(coco.getAnnIds())]
    assert [m.shape for m in masks] == [(3000, 4000), (3000, 4000)]
    assert np.array_equal(masks[1].astype(bool), rect_mask(3000, 4000, 1970, 1470, 2031, 1531))
    assert [a["attributes"]["edited_by_hand"] for a in coco.loadAnns(coco.getAnnIds())] == [False, True]


# ------------------------------------------------------------------ handlers


def test_a_refused_edit_changes_only_the_status_line(session, tmp_path):
    handlers = handlers_with(tmp_path)
    key = opened(handlers, session)
    out = handlers.canvas(key, stroked("erase", line(0, 5, 5), 4))
    assert out.session == {"__type__": "update"} and out.canvas == {"__type__": "update"}
    assert 'class="status status-error"' in out.status and "Select a mask to erase from" in out.status
    assert "Nothing was changed." in out.status and handlers.session(key) is session


def test_a_click_needing_the_point_model_says_why_it_is_missing(session, tmp_path):
    missing = handlers_with(tmp_path, None, "SAM 3's point-prompt model 'x' could not be loaded")
    out = missing.canvas(opened(missing, session), clicked(TOOL_POSITIVE, 60, 300))
    assert "could not be loaded" in out.status and out.session == {"__type__": "update"}
    handlers = handlers_with(tmp_path)
    key = opened(handlers, session)
    out = handlers.canvas(key, clicked(TOOL_TOGGLE, None, None))
    assert "gave no position" in out.status
    assert "sent no click or stroke" in handlers.canvas(key, types.SimpleNamespace(value=None)).status
    assert "does not take clicks" in handlers.canvas(key, clicked("paint", 5, 5)).status


def test_an_edit_updates_every_part_of_the_view(session, tmp_path):
    handlers = handlers_with(tmp_path)
    out = handlers.set_shown(opened(handlers, session), [0])
    assert out.shown == {"__type__": "update", "choices": shown_choices(handlers.session(out.session))[0],
                         "value": [0]}
    assert out.undo == {"__type__": "update", "interactive": True}
    assert out.redo == {"__type__": "update", "interactive": False}
    assert 'class="mask-off"' in out.table and '<img class="cv-image" src="data:image/jpeg;base64,' in out.canvas
    assert 'width="512" height="512"' in out.canvas
    agent, corrected = out.compare
    assert agent.size == corrected.size == (512, 512) and out.tabs == {"__type__": "update"}


def test_exported_coco_from_the_handler_decodes_to_the_edited_masks(session, tmp_path):
    handlers = handlers_with(tmp_path)
    key = opened(handlers, session)
    handlers.set_shown(key, [0])                                        # hide mask 2
    handlers.bring_in(key, 1, 2)                                        # the rejected mask
    handlers.canvas(key, stroked("paint", line(0, 59, 495), 16))        # paint on it (selected)
    status, path = handlers.export_coco(key)
    assert "Exported COCO JSON (2 masks): corrected_masks.json." in status
    coco = COCO(path)
    anns = coco.loadAnns(coco.getAnnIds())
    assert len(anns) == 2
    assert [a["attributes"] for a in anns] == [{"edited_by_hand": False, "origin": "agent", "verification": "not_examined"},
                                               {"edited_by_hand": True, "origin": "round 1 mask 2"}]
    assert np.array_equal(coco.annToMask(anns[0]).astype(bool), rect_mask(512, 512, *BIG))
    expected = rect_mask(512, 512, *TALL) | stroke_from_view_points(line(0, 59, 495), 16, 1.0, 512, 512)
    assert np.array_equal(coco.annToMask(anns[1]).astype(bool), expected)
    assert "score" in anns[0] and "score" not in anns[1]


def test_png_export_holds_one_full_size_binary_png_per_mask(session, tmp_path):
    edited = correct.bring_in(session, 1, 2)
    handlers = handlers_with(tmp_path)
    _, path = handlers.export_pngs(opened(handlers, edited))
    with zipfile.ZipFile(path) as archive:
        assert archive.namelist() == ["mask_001.png", "mask_002.png", "mask_003.png"]
        third = np.asarray(Image.open(io.BytesIO(archive.read("mask_003.png"))))
    assert third.dtype == np.uint8 and set(np.unique(third).tolist()) == {0, 255}
    assert np.array_equal(third == 255, rect_mask(512, 512, *TALL))


def test_an_exported_bundle_reloads_with_both_answers_and_editing_goes_on(session, tmp_path):
    handlers = handlers_with(tmp_path)
    edited = correct.set_shown(correct.bring_in(session, 1, 2), [0, 2])
    key = opened(handlers, edited)
    _, path = handlers.export_bundle(key)
    out = handlers.upload(path)
    reloaded = handlers.session(out.session)
    assert [type(op) for op in reloaded.state.applied] == [BringInMask, type(edited.state.applied[1])]
    assert mask_rows(reloaded) == [MaskRow(r.number, r.label, r.origin, r.on, r.edited, r.area, r.score, False)
                                   for r in mask_rows(edited)]
    assert out.compare[0].size == (512, 512) and out.round_pick["value"] == 1
    assert out.number_pick == {"__type__": "update", "choices": [("1", 1), ("2", 2), ("3", 3)], "value": 1}
    assert [row.on for row in mask_rows(correct.undo(reloaded))] == [True, True, True]
    _, trace_zip = handlers.export_trace(key)
    assert len(handlers.session(handlers.upload(trace_zip).session).state.applied) == 2


def test_a_malformed_bundle_or_file_is_refused_with_a_message(session, tmp_path):
    data = bundle_bytes(session.trace, correct.set_shown(session, [0]).state)
    source, damaged = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(damaged, "w") as target:
        for name in source.namelist():
            content = source.read(name)
            if name == "corrected_masks.json":
                document = json.loads(content)
                document["annotations"] = []
                content = json.dumps(document).encode()
            target.writestr(name, content)
    bad = tmp_path / "bundle.zip"
    bad.write_bytes(damaged.getvalue())
    warnings: list[str] = []
    handlers = CorrectHandlers(lambda: None, warn=warnings.append, root=tmp_path / "app")
    out = handlers.upload(str(bad))
    assert "corrected_masks.json does not match the trace" in out.status and out.session == {"__type__": "update"}
    junk = tmp_path / "junk.zip"
    junk.write_bytes(b"not a zip at all")
    assert "not a .zip trace" in handlers.upload(str(junk)).status and len(warnings) == 2


def test_forget_drops_the_session_and_its_exports(session, tmp_path):
    handlers = handlers_with(tmp_path)
    key = opened(handlers, session)
    _, path = handlers.export_coco(key)
    assert Path(path).is_file()
    handlers.forget(key)
    assert not Path(path).exists() and handlers.sessions.info() == (0, 0)
    assert "no longer open" in handlers.select(key, 0).status


# ------------------------------------------------------------------ with the app's other tabs

SEGMENTER = {"person": [(BIG, 0.9), (TALL, 0.7), (SMALL, 0.6)]}
SCRIPT = {
    "main": [tool("segment_phrase", "people", text_prompt="person"), tool("examine_each_mask", "check"),
             tool("select_masks_and_return", "both", final_answer_masks=[1, 2])],
    "verify": [verdict("Accept"), verdict("Reject"), verdict("Accept")],
}


@pytest.fixture(scope="module")
def app_handlers(tmp_path_factory):
    idle = ScriptedVLM([])
    backends = Backends(idle, idle, KnownSegmenter(SEGMENTER), {"vlm_model": "scripted"})
    factory = AgentFactory(AppSettings(max_rounds=5), backends, SCRIPT, None, FakePointSegmenter())
    return Handlers(factory, warn=lambda message: None, root=tmp_path_factory.mktemp("app"))


def test_correct_these_masks_loads_the_finished_run_and_brings_the_tab_forward(app_handlers):
    slot = RunSlot()
    assert "There is no run to correct yet: press Run first." in app_handlers.correct.from_run(slot).status
    list(app_handlers.run(str(ASSETS / "astronaut.jpg"), QUERY, 5, 0.5, slot))
    out = app_handlers.correct.from_run(slot)
    assert isinstance(out.tabs, gr.Tabs) and out.tabs.selected == "correct"
    assert [row.area for row in mask_rows(app_handlers.correct.session(out.session))] == [100 * 200, 100 * 100]
    assert out.round_pick["choices"][0] == ("round 1: 3 masks for 'person'", 1)
    app_handlers.correct.canvas(out.session, clicked(TOOL_POSITIVE, 60, 300))  # the shared model
    assert app_handlers.correct.session(out.session).state.items[2].origin == "clicks"


def test_the_inspect_tab_reads_a_bundle_says_it_holds_edits_and_hands_it_to_the_correct_view(session, tmp_path,
                                                                                             app_handlers):
    path = tmp_path / "bundle.zip"
    path.write_bytes(bundle_bytes(session.trace, correct.set_shown(session, [0]).state))
    inspected, message, *_ = app_handlers.inspect.load_trace(str(path))
    assert "1 hand correction saved with it" in message
    out = app_handlers.correct_inspected(inspected)  # the key the Inspect tab's state holds
    opened_session = app_handlers.correct.session(out.session)
    assert out.tabs.selected == "correct" and [row.on for row in mask_rows(opened_session)] == [True, False]
    assert load_bundle(path.read_bytes()).state.cursor == 1
    assert len(app_handlers.inspect.loaded(inspected).trace.edits) == 1


def test_a_point_model_that_cannot_load_leaves_the_app_serving_and_point_clicks_say_why(tmp_path, session):
    from sam3_agent.presets import BackendSettings

    missing = tmp_path / "no_sam3_here"
    settings = AppSettings(BackendSettings(preset="real", sam3_model=str(missing),
                                           vlm_server="http://127.0.0.1:9/v1", vlm_server_model="qwen"))
    factory = AgentFactory.load(settings)
    assert factory.point_segmenter is None
    assert f"Could not load SAM 3's point-prompt model from the folder '{missing}'" in factory.point_error
    handlers = Handlers(factory, warn=lambda message: None, root=tmp_path / "app")
    key = opened(handlers.correct, session)
    out = handlers.correct.canvas(key, clicked(TOOL_POSITIVE, 60, 300))
    assert "Could not load SAM 3&#x27;s point-prompt model from the folder" in out.status
    handlers.correct.canvas(key, clicked(TOOL_TOGGLE, 370, 390))
    assert handlers.correct.session(key).state.cursor == 1


# ------------------------------------------------------------------ the canvas, its style and what it names


def test_escape_on_the_canvas_selects_nothing(session, tmp_path):
    handlers = handlers_with(tmp_path)
    out = handlers.canvas(opened(handlers, correct.select(session, 1)), types.SimpleNamespace(value={"kind": "deselect"}))
    assert handlers.session(out.session).selected is None and out.selected["value"] == NO_SELECTION


def test_mask_opacity_and_outline_mode_redraw_without_an_edit(session, tmp_path):
    raw = np.asarray(session.view)
    x, y = 215, 230  # inside mask 1, away from its border and label
    color = mask_colors(2)[0].astype(int)
    solid = correct.set_style(session, 1.0, False)
    assert np.asarray(corrected_overlay(solid))[y, x].tolist() == color.tolist()
    clear = correct.set_style(session, 0.0, False)
    assert np.asarray(corrected_overlay(clear))[y, x].tolist() == raw[y, x].tolist()
    outlined = correct.set_style(session, 1.0, True)
    overlay = np.asarray(corrected_overlay(outlined))
    assert overlay[y, x].tolist() == raw[y, x].tolist()  # no fill...
    assert overlay[150, 200].tolist() == color.tolist()  # ...but the border (x = 200 is mask 1's left edge)
    assert outlined.state.cursor == 0  # a view style, not an edit
    handlers = handlers_with(tmp_path)
    key = opened(handlers, session)
    out = handlers.style(key, 0.8, True)
    assert (handlers.session(out.session).opacity, handlers.session(out.session).outline) == (0.8, True)
    assert "mask opacity must be from 0 to 1" in handlers.style(key, 1.5, False).status


def test_point_markers_are_black_and_white_so_they_never_look_like_a_mask(session):
    model = FakePointSegmenter()
    first = correct.click(session, TOOL_POSITIVE, 60, 300, model)
    second = correct.click(first, TOOL_NEGATIVE, 80, 320, model)
    overlay = np.asarray(corrected_overlay(second)).astype(int)
    rows, cols = np.mgrid[0:512, 0:512]
    for (x, y), face in (((60, 300), 255), ((80, 320), 0)):
        core = (rows - y) ** 2 + (cols - x) ** 2 <= 4 ** 2  # inside the marker's face (radius 5)
        pixels = overlay[core]
        assert (pixels.max(axis=1) - pixels.min(axis=1) == 0).all()  # grey only: black, white and between
        assert (pixels[:, 0] == face).sum() > 10  # mostly its face colour, with the "+" or "-" across it
    assert not any(c in ([0, 0, 0], [255, 255, 255]) for c in mask_colors(20).astype(int).tolist())


def test_the_bring_in_picker_marks_the_masks_verification_rejected(tmp_path):
    trace = examined_trace()
    from sam3_agent.ui.correct.view import mask_number_choices, rejected_numbers

    assert rejected_numbers(trace) == {1: {2}}
    assert mask_number_choices(trace, 1) == [("1", 1), ("2 (rejected by verification)", 2), ("3", 3)]
    assert mask_number_choices(trace, 2) == [("1", 1), ("2", 2)]  # the survivors, renumbered


@pytest.mark.parametrize(("status", "words"), [
    ("failed", "(the agent failed)"), ("cancelled", "(the agent was stopped)"),
    ("no_mask", "(the agent found no mask)"), ("max_rounds", "(the agent ran out of rounds)"),
])
def test_the_status_names_how_the_agent_ended_rather_than_a_choice_of_zero(trace, status, words):
    ended = make_trace(trace.image, trace_masks(trace), Masks.empty(512, 512) if status == "no_mask" else None, status)
    assert status_text(correct.start_session(ended)).startswith(f"Corrected answer: 0 masks {words}.")


def test_labels_used_once_are_offered_again_even_for_the_next_trace(session, tmp_path):
    handlers = handlers_with(tmp_path)
    named = handlers.relabel(opened(handlers, correct.select(session, 1)), "astronaut").session
    assert handlers.session(named).labels == (QUERY, "astronaut")
    out = handlers.load(session.trace, previous=named)  # a new trace in the same browser tab
    assert out.label["choices"] == [QUERY, "astronaut"] and handlers.session(out.session).labels == (QUERY, "astronaut")
    with pytest.raises(InputError, match="no longer open"):
        handlers.session(named)  # one open session per tab: the new trace replaced the earlier one
    handlers.style(out.session, 0.2, True)
    styled = handlers.session(handlers.load(session.trace, previous=out.session).session)
    assert (styled.opacity, styled.outline) == (0.2, True)


def test_the_canvas_html_holds_the_answer_at_view_size_or_says_there_is_nothing(session):
    from sam3_agent.ui.correct.view import render_canvas

    html = render_canvas(corrected_overlay(session))
    assert html.count('<img class="cv-image"') == 1 and 'width="512" height="512"' in html
    assert '<canvas class="cv-strokes" width="512" height="512">' in html and 'data-zoom="fit"' in html
    assert "Nothing to correct yet" in render_canvas(None)


def trace_masks(trace: Trace) -> list[Masks]:
    return [r.result.masks for r in trace.rounds]


def examined_trace() -> Trace:
    """Round 1: three masks; round 2 examines them (mask 2 rejected) and shows the two survivors."""
    from sam3_agent.messages import ImagePart
    from sam3_agent.types import MaskVerdict

    image = photo("astronaut.jpg")
    round1 = masks_of([BIG, TALL, SMALL], [0.9, 0.7, 0.6])
    survivors = masks_of([BIG, SMALL], [0.9, 0.6])
    view = ImagePart(image, "v")
    verdicts = tuple(MaskVerdict(n, v, "model", ("",), view, view) for n, v in
                     ((1, "accept"), (2, "reject"), (3, "accept")))
    trace = make_trace(image, [round1, survivors], survivors)
    examined = trace.rounds[1]
    trace.rounds[1] = Round(examined.index, examined.context, "", "stop", None, None, None,
                            ToolResult(None, survivors, verdicts=verdicts, summary="kept 2 of 3"), None, None)
    return trace
