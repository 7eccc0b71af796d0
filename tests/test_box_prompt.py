"""The box prompt of the Correct tab: SAM 3's point-prompt model segments inside a box; the edit (``BoxMask``) stores
its result, replays without the model, loads from JSON (old records too) and undoes like any edit; the canvas's box
reaches the model in original-image pixels, clipped to the photo; a box with no area is refused with a message."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest
from conftest import people_run, photo, rect_mask
from PIL import Image

from sam3_agent.correct.edits import EditState
from sam3_agent.correct.prompted import segment_box
from sam3_agent.edit_ops import BoxMask, ClickMask, MaskRle, op_from_json, op_to_json
from sam3_agent.errors import InputError, TraceFormatError
from sam3_agent.mask_set import Masks
from sam3_agent.sam.prompts import check_box, check_clicks
from sam3_agent.sam.tracker import PointMask, Sam3PointSegmenter
from sam3_agent.tiny.tracker import build_tiny_sam3_tracker
from sam3_agent.trace.io import load_trace, save_trace
from sam3_agent.types import Trace
from sam3_agent.ui.correct import actions as correct
from sam3_agent.ui.correct.handlers import CorrectHandlers
from sam3_agent.ui.correct.tools import TOOL_NEGATIVE, TOOL_POSITIVE

H, W = 512, 512  # astronaut.jpg


class BoxSegmenter:
    """A point model double: a box gives its pixels (rounded to whole pixels), less 21x21 squares at negative clicks;
    checks its prompts like the real model."""

    name = "fake-box"

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[float, ...] | None, list[tuple[float, float]], list[int]]] = []

    def segment_points(self, image, points, labels, *, box=None) -> PointMask:
        width, height = image.size
        corners = None if box is None else check_box(box, width, height)
        check_clicks(points, labels, width, height, with_box=corners is not None)
        self.calls.append((corners, [tuple(p) for p in points], list(labels)))
        x1, y1, x2, y2 = (round(v) for v in corners)
        mask = rect_mask(height, width, x1, y1, x2, y2)
        for (x, y), lab in zip(points, labels):
            if lab == 0:
                mask &= ~rect_mask(height, width, int(x) - 10, int(y) - 10, int(x) + 11, int(y) + 11)
        return PointMask(mask, 0.625)


@pytest.fixture
def trace() -> Trace:
    return people_run()


@pytest.fixture
def state(trace) -> EditState:
    return EditState.from_trace(trace)


# ------------------------------------------------------------------ the edit


def test_a_box_with_nothing_selected_adds_its_mask_and_replays_without_the_model(state, trace):
    model = BoxSegmenter()
    boxed = segment_box(state, None, trace.image, (40.0, 60.0, 140.0, 200.0), model)
    assert len(boxed.items) == 3 and boxed.items[2].origin == "box" and boxed.items[2].edited
    assert np.array_equal(boxed.items[2].mask, rect_mask(H, W, 40, 60, 140, 200))
    op = boxed.applied[-1]
    assert op == BoxMask(None, (40.0, 60.0, 140.0, 200.0), MaskRle.from_mask(rect_mask(H, W, 40, 60, 140, 200)), 0.625)
    assert op.describe() == "box -> new mask"
    replayed = EditState.from_trace(boxed.to_trace(trace))
    assert replayed.items == boxed.items and len(model.calls) == 1


def test_a_box_replaces_the_selected_mask_and_clicks_after_it_are_kept_with_it(state, trace):
    model = BoxSegmenter()
    boxed = segment_box(state, 0, trace.image, (200, 50, 300, 250), model, [(250.0, 100.0)], [0])
    expected = rect_mask(H, W, 200, 50, 300, 250) & ~rect_mask(H, W, 240, 90, 261, 111)
    assert np.array_equal(boxed.items[0].mask, expected) and boxed.items[0].score is None
    assert boxed.applied[-1].describe() == "box + 1 click(s) -> mask 1"
    assert model.calls == [((200.0, 50.0, 300.0, 250.0), [(250.0, 100.0)], [0])]
    assert boxed.undo().items == state.items and boxed.undo().redo().items == boxed.items


@pytest.mark.parametrize(("box", "message"), [
    ((100, 100, 100, 200), r"the box \(100, 100, 100, 200\) has no area"),
    ((100, 200, 150, 120), r"has no area \(it needs x1 < x2 and y1 < y2\)"),
    ((-5, 10, 50, 60), r"reaches outside the 512x512 image"),
    ((10, 10, 50, 513), r"reaches outside the 512x512 image"),
    ((10, float("nan"), 50, 60), "is not a finite position"),
    ((10, 10, 50), "must be four numbers"),
])
def test_a_degenerate_box_is_refused_before_the_model_runs_and_nothing_is_recorded(state, trace, box, message):
    model = BoxSegmenter()
    with pytest.raises(InputError, match=message):
        segment_box(state, None, trace.image, box, model)
    assert model.calls == [] and state.ops == ()


def test_an_empty_result_or_a_deleted_mask_is_refused(state, trace):
    class Nothing(BoxSegmenter):
        def segment_points(self, image, points, labels, *, box=None):
            return PointMask(np.zeros((H, W), dtype=bool), 0.1)

    with pytest.raises(InputError, match="found no mask in this box"):
        segment_box(state, None, trace.image, (10, 10, 50, 50), Nothing())
    from sam3_agent.correct.edits import delete_mask

    with pytest.raises(InputError, match="mask 1 was deleted"):
        segment_box(delete_mask(state, 0), 0, trace.image, (10, 10, 50, 50), BoxSegmenter())


# ------------------------------------------------------------------ the record in a trace


def test_the_box_record_round_trips_through_json_and_a_saved_trace(state, trace, tmp_path):
    boxed = segment_box(state, 1, trace.image, (10.5, 20.25, 100, 200), BoxSegmenter(), [(50.0, 60.0)], [1])
    op = boxed.applied[-1]
    data = op_to_json(op)
    assert {k: v for k, v in data.items() if k != "mask"} == {
        "op": "box", "index": 1, "box": [10.5, 20.25, 100.0, 200.0], "score": 0.625,
        "points": [[50.0, 60.0]], "labels": [1]}
    assert op_from_json(json.loads(json.dumps(data))) == op
    save_trace(boxed.to_trace(trace), tmp_path / "run")
    assert EditState.from_trace(load_trace(tmp_path / "run")).items == boxed.items


def test_a_box_record_without_clicks_and_an_older_click_record_still_load(state):
    mask = MaskRle.from_mask(rect_mask(H, W, 1, 2, 3, 4))
    bare = {"op": "box", "index": None, "box": [1, 2, 3, 4], "mask": mask.to_json(), "score": 0.5}
    assert op_from_json(bare) == BoxMask(None, (1.0, 2.0, 3.0, 4.0), mask, 0.5)
    older = {"op": "clicks", "index": 0, "points": [[5, 6]], "labels": [1], "mask": mask.to_json(), "score": 0.5}
    assert op_from_json(older) == ClickMask(0, ((5.0, 6.0),), (1,), mask, 0.5)


@pytest.mark.parametrize(("change", "message"), [
    ({"box": [1, 2, 3]}, "edit 'box' is malformed"),
    ({"box": [3, 2, 1, 4]}, r"is not \(x1, y1, x2, y2\) with x1 < x2"),
    ({"points": [[1, 1]]}, "a different number of points and labels"),
    ({"labels": [1]}, "a different number of points and labels"),
])
def test_a_malformed_box_record_is_refused_with_what_is_wrong(change, message):
    data = {"op": "box", "index": None, "box": [1, 2, 3, 4],
            "mask": MaskRle.from_mask(rect_mask(H, W, 1, 2, 3, 4)).to_json(), "score": 0.5, **change}
    with pytest.raises(TraceFormatError, match=message):
        op_from_json(data)


# ------------------------------------------------------------------ the real model (tiny, random weights)


@pytest.fixture(scope="module")
def tracker(tmp_path_factory) -> Sam3PointSegmenter:
    folder = build_tiny_sam3_tracker(tmp_path_factory.mktemp("tracker") / "sam3_tracker")
    return Sam3PointSegmenter.from_pretrained(str(folder), device="cpu")


def test_the_tiny_model_segments_in_a_box_and_the_edit_replays_its_mask_exactly(tracker, tmp_path):
    coffee = photo("coffee.jpg")  # 600 x 400
    final = rect_mask(400, 600, 20, 10, 90, 50)[None]
    trace = Trace(query="the cup", image=coffee, status="done",
                  final_masks=Masks(final, np.array([0.8], np.float32), np.array([[20, 10, 90, 50]], np.float32)))
    box = (150.0, 20.0, 420.0, 300.0)
    alone = tracker.segment_points(coffee, [], [], box=box)
    with_click = tracker.segment_points(coffee, [(200.0, 100.0)], [0], box=box)
    assert alone.mask.shape == (400, 600) and alone.mask.dtype == bool and 0.0 <= alone.score <= 1.0
    elsewhere = tracker.segment_points(coffee, [], [], box=(10.0, 200.0, 200.0, 390.0))
    assert not np.array_equal(alone.mask, elsewhere.mask)  # the box reaches the model
    assert not np.array_equal(alone.mask, with_click.mask)  # and the click with it
    assert not np.array_equal(alone.mask, tracker.segment_points(coffee, [(285.0, 160.0)], [1]).mask)  # and the box
    state = segment_box(EditState.from_trace(trace), None, coffee, box, tracker, [(200.0, 100.0)], [0])
    assert np.array_equal(state.items[1].mask, with_click.mask)
    save_trace(state.to_trace(trace), tmp_path / "run")
    assert np.array_equal(EditState.from_trace(load_trace(tmp_path / "run")).items[1].mask, with_click.mask)
    assert tracker.encode_count == 1  # the photo was encoded once for every prompt


# ------------------------------------------------------------------ the canvas and the handler


@pytest.fixture(scope="module")
def big_session():
    """A 4000 x 3000 photo shown at 1024 x 768 (scale 0.256)."""
    image = photo("rocket.jpg").resize((4000, 3000), Image.Resampling.BILINEAR)
    final = rect_mask(3000, 4000, 400, 400, 1600, 2400)[None]
    trace = Trace(query="rocket", image=image, status="done",
                  final_masks=Masks(final, np.array([0.8], np.float32), np.array([[400, 400, 1600, 2400]], np.float32)))
    return correct.start_session(trace)


def boxed(x1, y1, x2, y2):
    """What the canvas sends for a box (``canvas.js``), as Gradio hands it over (``gr.SelectData``)."""
    return types.SimpleNamespace(index=None, value={"kind": "box", "tool": "box", "x1": x1, "y1": y1, "x2": x2,
                                                    "y2": y2})


def handlers_with(tmp_path, segmenter):
    return CorrectHandlers(lambda: segmenter, warn=lambda message: None, root=tmp_path / "app")


def test_a_box_on_a_scaled_view_reaches_the_model_in_photo_pixels_corners_in_any_order(big_session):
    model = BoxSegmenter()
    edited = correct.box(big_session, 512, 384, 256, 128, model)  # dragged up and to the left
    assert model.calls == [((1000.0, 500.0, 2000.0, 1500.0), [], [])]
    assert edited.selected == 1 and np.array_equal(edited.state.items[1].mask,
                                                   rect_mask(3000, 4000, 1000, 500, 2000, 1500))


def test_a_box_running_over_the_photo_edge_is_clipped_to_it(big_session):
    model = BoxSegmenter()
    correct.box(big_session, -40, 700, 100.5, 900, model)  # view 1024 x 768: clipped to x 0..100.5, y 700..768
    assert model.calls == [((0.0, 700 / 0.256, 100.5 / 0.256, 3000.0), [], [])]


def test_point_clicks_after_a_box_refine_its_mask_with_the_box(big_session):
    model = BoxSegmenter()
    edited = correct.box(big_session, 256, 128, 512, 384, model)
    refined = correct.click(edited, TOOL_NEGATIVE, 300, 200, model)
    assert model.calls[-1] == ((1000.0, 500.0, 2000.0, 1500.0), [(300 / 0.256, 200 / 0.256)], [0])
    assert refined.state.applied[-1].describe() == "box + 1 click(s) -> mask 2"
    assert correct.pending_prompt(refined) == ((1000.0, 500.0, 2000.0, 1500.0), ((300 / 0.256, 200 / 0.256),), (0,))
    # a new box starts afresh
    again = correct.box(refined, 0, 0, 100, 100, model)
    assert model.calls[-1] == ((0.0, 0.0, 100 / 0.256, 100 / 0.256), [], [])
    assert correct.pending_prompt(correct.click(again, TOOL_POSITIVE, 50, 50, model))[2] == (1,)


def test_the_handler_applies_a_box_and_refuses_a_degenerate_one_with_a_message(big_session, tmp_path):
    model = BoxSegmenter()
    handlers = handlers_with(tmp_path, model)
    key = handlers.sessions.put(big_session)
    out = handlers.canvas(key, boxed(256, 128, 512, 384))
    assert "Last edit: box -&gt; new mask." in out.status and "Selected: mask 2." in out.status
    for data, said in ((boxed(300, 300, 300, 500), "has no area on the image: drag a box around the object"),
                       (boxed(1100, 10, 1200, 50), "lies outside the image (1024x768 as shown)"),
                       (boxed(None, 1, 2, 3), "he box gave no position on the image")):
        out = handlers.canvas(key, data)
        assert said in out.status and "Nothing was changed." in out.status and out.canvas == {"__type__": "update"}
    assert len(model.calls) == 1 and len(handlers.session(key).state.items) == 2  # nothing lost, nothing added
    handlers.undo(key)
    assert len(handlers.session(key).state.items) == 1
    handlers.redo(key)
    assert np.array_equal(handlers.session(key).state.items[1].mask, rect_mask(3000, 4000, 1000, 500, 2000, 1500))


def test_a_box_without_the_point_model_says_why(big_session, tmp_path):
    from sam3_agent.errors import BackendError

    def missing():
        raise BackendError("SAM 3's point-prompt model 'x' could not be loaded")

    handlers = CorrectHandlers(missing, warn=lambda message: None, root=tmp_path / "app")
    out = handlers.canvas(handlers.sessions.put(big_session), boxed(10, 10, 100, 100))
    assert "could not be loaded" in out.status and "Nothing was changed." in out.status


def test_the_pending_box_is_drawn_on_the_canvas_until_the_mask_is_changed_otherwise():
    from sam3_agent.ui.correct.view import corrected_overlay

    class Inside(BoxSegmenter):  # the box's lower right quarter: the frame runs where no mask is
        def segment_points(self, image, points, labels, *, box=None):
            result = super().segment_points(image, points, labels, box=box)
            mask = result.mask.copy()
            mask[:, :300] = False
            mask[:160] = False
            return PointMask(mask, result.score)

    coffee = photo("coffee.jpg")  # 600 x 400, shown at its own size
    final = rect_mask(400, 600, 20, 10, 90, 50)[None]
    trace = Trace(query="the cup", image=coffee, status="done",
                  final_masks=Masks(final, np.array([0.8], np.float32), np.array([[20, 10, 90, 50]], np.float32)))
    boxed_session = correct.box(correct.start_session(trace), 180, 20, 420, 300, Inside())
    frame = np.asarray(corrected_overlay(boxed_session))
    assert (frame[20, 200:280] == 255).all() and (frame[100:140, 180] == 255).all()  # the top and left sides
    painted = correct.brush(boxed_session, [[350.0, 250.0]], 4, erase=False)  # the mask changed by other means
    assert not (np.asarray(corrected_overlay(painted))[20, 200:280] == 255).all()
