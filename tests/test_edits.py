"""Hand corrections: each edit on exact masks, undo/redo, strokes on a scaled view, edits saved in traces."""

from __future__ import annotations

import dataclasses
import json
import logging

import numpy as np
import pytest
from conftest import people_run, rect_mask

from sam3_agent.correct.edits import (
    EditState,
    bring_in_mask,
    delete_mask,
    erase,
    paint,
    relabel_mask,
    rounds_with_masks,
    toggle_mask,
)
from sam3_agent.correct.prompted import refine_with_points
from sam3_agent.correct.strokes import stroke_from_editor, stroke_from_view_mask, stroke_from_view_points
from sam3_agent.edit_ops import (
    BringInMask,
    BrushStroke,
    ClickMask,
    DeleteMask,
    MaskRle,
    RelabelMask,
    ToggleMask,
    op_from_json,
    op_to_json,
)
from sam3_agent.errors import InputError, TraceFormatError
from sam3_agent.sam.prompts import check_clicks
from sam3_agent.sam.tracker import PointMask
from sam3_agent.trace.io import load_trace, load_trace_zip, save_trace, trace_to_zip_bytes

H, W = 512, 512  # astronaut.jpg
PERSON_BOXES = [(200, 50, 300, 250), (10, 10, 110, 210), (350, 300, 450, 500)]  # display order (score .9, .7, .6)


@pytest.fixture
def trace():
    """astronaut.jpg: segment 'person' (3 masks) -> examine rejects mask 3 -> select masks 1 and 2."""
    return people_run()


@pytest.fixture
def state(trace) -> EditState:
    return EditState.from_trace(trace)


def box(index: int) -> np.ndarray:
    return rect_mask(H, W, *PERSON_BOXES[index])


def test_state_of_a_trace_starts_with_the_agent_masks(state):
    assert [it.origin for it in state.items] == ["agent", "agent"]
    assert [it.label for it in state.items] == ["the people", "the people"]
    assert np.array_equal(state.items[0].mask, box(0)) and np.array_equal(state.items[1].mask, box(1))
    assert [it.score for it in state.items] == pytest.approx([0.9, 0.7])
    assert not state.can_undo and not state.can_redo


def test_erasing_a_known_rectangle_gives_the_known_mask_and_undo_restores_it_bit_for_bit(state):
    stroke = rect_mask(H, W, 250, 0, 512, 100)  # covers x 250..299, y 50..99 of mask 1
    edited = erase(state, 0, stroke)
    expected = box(0)
    expected[50:100, 250:300] = False
    assert np.array_equal(edited.items[0].mask, expected)
    assert int(edited.items[0].mask.sum()) == 100 * 200 - 50 * 50
    assert edited.items[0].edited and edited.items[0].score is None
    assert np.array_equal(state.items[0].mask, box(0))  # the old state is untouched
    undone = edited.undo()
    assert np.array_equal(undone.items[0].mask, box(0)) and undone.items[0].score == pytest.approx(0.9)
    assert not undone.items[0].edited
    assert np.array_equal(undone.redo().items[0].mask, expected)


def test_paint_adds_the_stroke_pixels(state):
    edited = paint(state, 1, rect_mask(H, W, 100, 0, 130, 20))
    assert np.array_equal(edited.items[1].mask, box(1) | rect_mask(H, W, 100, 0, 130, 20))
    assert edited.applied == (BrushStroke(1, MaskRle.from_mask(rect_mask(H, W, 100, 0, 130, 20)), False),)


def test_paint_with_nothing_selected_makes_a_new_mask_labelled_with_the_query(state):
    stroke = rect_mask(H, W, 400, 20, 450, 60)
    edited = paint(state, None, stroke)
    assert len(edited.items) == 3
    new = edited.items[2]
    assert np.array_equal(new.mask, stroke) and new.label == "the people" and new.origin == "brush"
    assert new.edited and new.score is None


def test_toggle_hides_and_shows_a_mask(state):
    hidden = toggle_mask(state, 0)
    assert not hidden.items[0].on
    assert hidden.corrected_indices() == [1]
    shown = toggle_mask(hidden, 0)
    assert shown.items[0].on and shown.corrected_indices() == [0, 1]
    assert shown.applied == (ToggleMask(0, False), ToggleMask(0, True))


def test_delete_keeps_indices_stable_and_undo_brings_the_mask_back(state):
    deleted = delete_mask(state, 0)
    assert deleted.items[0].deleted and deleted.corrected_indices() == [1]
    with pytest.raises(InputError, match="mask 1 was deleted"):
        toggle_mask(deleted, 0)
    assert deleted.undo().corrected_indices() == [0, 1]


def test_relabel_changes_the_label_and_refuses_an_empty_one(state):
    relabelled = relabel_mask(state, 1, "  astronaut ")
    assert relabelled.items[1].label == "astronaut" and relabelled.items[0].label == "the people"
    assert relabelled.applied == (RelabelMask(1, "astronaut"),)
    assert relabel_mask(relabelled, 1, "astronaut") is relabelled  # same label: nothing recorded
    with pytest.raises(InputError, match="cannot be empty"):
        relabel_mask(state, 1, "   ")


def test_bring_in_adds_a_mask_that_verification_rejected(state, trace):
    assert [(r, len(m)) for r, m in rounds_with_masks(trace)] == [(1, 3), (2, 2), (3, 2)]
    edited = bring_in_mask(state, trace, 1, 3)
    new = edited.items[2]
    assert np.array_equal(new.mask, box(2)) and new.origin == "round 1 mask 3"
    assert new.score == pytest.approx(0.6) and not new.edited and new.label == "the people"
    assert edited.corrected_indices() == [0, 1, 2]


def test_bring_in_refuses_a_mask_already_in_the_answer_and_unknown_ones(state, trace):
    with pytest.raises(InputError, match="already mask 1"):
        bring_in_mask(state, trace, 1, 1)
    with pytest.raises(InputError, match="no mask 4"):
        bring_in_mask(state, trace, 1, 4)
    with pytest.raises(InputError, match="round 7 left no masks"):
        bring_in_mask(state, trace, 7, 1)


def test_undo_and_redo_walk_the_history_and_a_new_edit_drops_the_redo_tail(state):
    s = toggle_mask(delete_mask(state, 1), 0)
    assert s.cursor == 2 and len(s.ops) == 2
    back = s.undo().undo()
    assert back.cursor == 0 and back.can_redo and not back.can_undo
    assert back.undo() is back
    assert back.redo().applied == (DeleteMask(1),)
    branched = relabel_mask(back.redo(), 0, "left person")
    assert branched.ops == (DeleteMask(1), RelabelMask(0, "left person"))
    assert not branched.can_redo


def test_erasing_a_mask_to_nothing_keeps_it_out_of_exports_and_says_so(state):
    emptied = erase(state, 1, rect_mask(H, W, 0, 0, 200, 300))
    assert emptied.items[1].is_empty and not emptied.items[1].deleted
    assert emptied.corrected_indices() == [0]
    assert emptied.notes() == [
        "mask 2 is empty after erasing: it is left out of exports; paint on it, undo, or delete it"]
    refilled = paint(emptied, 1, rect_mask(H, W, 0, 0, 5, 5))
    assert refilled.corrected_indices() == [0, 1] and refilled.notes() == []


def test_bad_edits_raise_and_record_nothing(state):
    with pytest.raises(InputError, match="no mask 5"):
        delete_mask(state, 4)
    with pytest.raises(InputError, match="select a mask to erase"):
        erase(state, None, box(0))
    with pytest.raises(InputError, match="stroke is empty"):
        paint(state, 0, np.zeros((H, W), dtype=bool))
    with pytest.raises(InputError, match=r"map strokes on a scaled view"):
        paint(state, 0, np.ones((128, 128), dtype=bool))
    assert state.ops == ()


class FixedPointSegmenter:
    """A point segmenter returning a known mask (checks the clicks like the real one)."""

    name = "fixed"

    def __init__(self, mask: np.ndarray) -> None:
        self.mask = mask
        self.calls = 0

    def segment_points(self, image, points, labels):
        check_clicks(points, labels, image.width, image.height)
        self.calls += 1
        return PointMask(self.mask, 0.75)


def test_point_refinement_replaces_the_selected_mask_and_stores_its_result(state, trace):
    result = rect_mask(H, W, 210, 60, 290, 240)
    segmenter = FixedPointSegmenter(result)
    edited = refine_with_points(state, 0, trace.image, [(250, 150), (205, 55)], [1, 0], segmenter)
    assert np.array_equal(edited.items[0].mask, result) and edited.items[0].edited
    op = edited.applied[0]
    assert isinstance(op, ClickMask) and op.points == ((250.0, 150.0), (205.0, 55.0)) and op.labels == (1, 0)
    # replay from the trace needs no model
    replayed = EditState.from_trace(edited.to_trace(trace))
    assert np.array_equal(replayed.items[0].mask, result) and segmenter.calls == 1


def test_a_click_with_nothing_selected_adds_a_new_mask(state, trace):
    edited = refine_with_points(state, None, trace.image, [(400, 400)], [1], FixedPointSegmenter(box(2)))
    assert len(edited.items) == 3 and edited.items[2].origin == "clicks"
    assert np.array_equal(edited.items[2].mask, box(2))


def test_clicks_outside_the_image_or_an_empty_result_are_refused(state, trace):
    with pytest.raises(InputError, match=r"click \(600, 10\) lies outside the 512x512 image"):
        refine_with_points(state, 0, trace.image, [(600, 10)], [1], FixedPointSegmenter(box(0)))
    with pytest.raises(InputError, match="found no mask"):
        refine_with_points(state, 0, trace.image, [(5, 5)], [1], FixedPointSegmenter(np.zeros((H, W), bool)))
    with pytest.raises(InputError, match="at least one positive"):
        refine_with_points(state, 0, trace.image, [(5, 5)], [0], FixedPointSegmenter(box(0)))


# ------------------------------------------------------------------ strokes on a scaled view


def test_a_view_mask_at_quarter_scale_maps_each_view_pixel_to_its_4x4_block():
    view = np.zeros((10, 15), dtype=bool)  # a 60 x 40 image shown at 15 x 10
    view[2, 3] = True
    view[9, 14] = True
    full = stroke_from_view_mask(view, 40, 60)
    expected = np.zeros((40, 60), dtype=bool)
    expected[8:12, 12:16] = True
    expected[36:40, 56:60] = True
    assert np.array_equal(full, expected)


def test_a_view_mask_of_another_aspect_ratio_is_refused():
    with pytest.raises(InputError, match="same aspect ratio"):
        stroke_from_view_mask(np.ones((10, 10), dtype=bool), 40, 60)


def test_a_brush_point_on_a_quarter_scale_view_paints_the_disk_under_it_at_full_resolution():
    # view pixel (10, 20) covers full pixels x 40..43, y 80..83; radius 0.5 view px = 2 full px around
    # (41.5, 81.5): the 4 x 4 block minus its corners (at distance 2.12).
    full = stroke_from_view_points([(10, 20)], radius=0.5, view_scale=0.25, height=200, width=100)
    expected = np.zeros((200, 100), dtype=bool)
    expected[80:84, 40:44] = True
    for y, x in ((80, 40), (80, 43), (83, 40), (83, 43)):
        expected[y, x] = False
    assert np.array_equal(full, expected)


def test_a_brush_line_covers_the_segment_between_its_points():
    full = stroke_from_view_points([(2, 5), (8, 5)], radius=1, view_scale=1.0, height=12, width=12)
    expected = np.zeros((12, 12), dtype=bool)
    expected[4:7, 2:9] = True  # within 1 px of the segment y = 5, x in [2, 8] ...
    expected[5, 1] = expected[5, 9] = True  # ... and the round caps
    assert np.array_equal(full, expected)


def test_a_stroke_over_the_edge_is_clipped_with_a_warning_and_one_outside_is_refused(caplog):
    with caplog.at_level(logging.WARNING, logger="sam3_agent.correct.edits"):
        full = stroke_from_view_points([(0, 0)], radius=1, view_scale=1.0, height=5, width=5)
    assert np.array_equal(np.argwhere(full), [[0, 0], [0, 1], [1, 0]])
    assert "clipped" in caplog.text
    with pytest.raises(InputError, match="entirely outside the image"):
        stroke_from_view_points([(50, 50)], radius=2, view_scale=1.0, height=5, width=5)


def test_an_image_editor_value_becomes_a_full_size_stroke():
    background = np.zeros((10, 15, 4), dtype=np.uint8)
    layer1 = np.zeros((10, 15, 4), dtype=np.uint8)
    layer1[2, 3] = (255, 0, 0, 255)
    layer2 = np.zeros((10, 15, 4), dtype=np.uint8)
    layer2[5, 5] = (0, 0, 0, 40)  # faint but painted
    full = stroke_from_editor({"background": background, "layers": [layer1, layer2], "composite": background}, 40, 60)
    expected = np.zeros((40, 60), dtype=bool)
    expected[8:12, 12:16] = True
    expected[20:24, 20:24] = True
    assert np.array_equal(full, expected)
    with pytest.raises(InputError, match="nothing was painted"):
        stroke_from_editor({"background": background, "layers": [], "composite": background}, 40, 60)


# ------------------------------------------------------------------ JSON form and traces


def every_kind_of_edit(state: EditState, trace) -> EditState:
    s = erase(state, 0, rect_mask(H, W, 250, 0, 512, 100))
    s = bring_in_mask(s, trace, 1, 3)
    clicked = FixedPointSegmenter(rect_mask(H, W, 20, 30, 40, 50))
    s = refine_with_points(s, None, trace.image, [(30.5, 40)], [1], clicked)
    s = paint(s, None, rect_mask(H, W, 480, 480, 500, 500))
    s = toggle_mask(s, 1)
    s = relabel_mask(s, 2, "rejected person")
    return delete_mask(s, 4)


def test_every_edit_survives_its_json_form(state, trace):
    s = every_kind_of_edit(state, trace)
    kinds = [op_to_json(op)["op"] for op in s.ops]
    assert kinds == ["brush", "bring_in", "clicks", "brush", "toggle", "relabel", "delete"]
    document = json.loads(json.dumps([op_to_json(op) for op in s.ops]))
    assert tuple(op_from_json(d) for d in document) == s.ops


@pytest.mark.parametrize(
    "data, message",
    [({"op": "zap", "index": 0}, "unknown edit 'zap'"),
     ({"op": "toggle", "index": "0", "on": True}, "index must be an integer"),
     ({"op": "delete"}, "edit 'delete' is malformed: the field 'index' is missing"),
     ({"op": "brush", "index": 0, "stroke": {"size": [4, 4], "counts": "zz"}}, "RLE mask has malformed run lengths")],
)
def test_malformed_edits_are_refused_with_what_was_wrong(data, message):
    with pytest.raises(TraceFormatError, match=message):
        op_from_json(data)


def test_a_trace_with_edits_round_trips_through_a_folder_and_a_zip(state, trace, tmp_path):
    edited = every_kind_of_edit(state, trace).to_trace(trace)
    assert len(edited.edits) == 7 and trace.edits == []  # the original trace is not changed
    loaded = load_trace(save_trace(edited, tmp_path / "run"))
    assert loaded == edited and loaded != trace
    assert load_trace_zip(trace_to_zip_bytes(edited)) == edited
    again = EditState.from_trace(loaded)
    assert again.items == EditState.from_trace(edited).items
    assert np.array_equal(again.items[0].mask, every_kind_of_edit(state, trace).items[0].mask)


def test_a_reloaded_trace_shows_both_answers_and_can_continue_editing(state, trace, tmp_path):
    edited = delete_mask(state, 0).to_trace(trace)
    reloaded = EditState.from_trace(load_trace(save_trace(edited, tmp_path)))
    assert np.array_equal(reloaded.original[0].mask, box(0))  # the agent's answer is kept
    assert reloaded.corrected_indices() == [1]
    assert reloaded.can_undo and reloaded.undo().corrected_indices() == [0, 1]


def test_a_trace_saved_without_edits_loads_with_none(trace, tmp_path):
    save_trace(trace, tmp_path)
    document = json.loads((tmp_path / "trace.json").read_text())
    del document["edits"]  # as written before edits existed
    (tmp_path / "trace.json").write_text(json.dumps(document))
    loaded = load_trace(tmp_path)
    assert loaded.edits == [] and loaded == trace


def test_edits_that_do_not_apply_to_the_trace_are_refused_on_load(trace):
    broken = dataclasses.replace(trace, edits=[DeleteMask(5)])
    with pytest.raises(TraceFormatError, match="do not apply to its masks: there is no mask 6"):
        EditState.from_trace(broken)
    wrong_size = dataclasses.replace(trace, edits=[BringInMask(1, 1, MaskRle.from_mask(np.ones((4, 4), bool)), 0.5)])
    with pytest.raises(TraceFormatError, match="4x4 pixels but the image is 512x512"):
        EditState.from_trace(wrong_size)
