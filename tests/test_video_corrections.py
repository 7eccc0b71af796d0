"""Corrections by hand: a fix on frame k changes only the frames up to the object's neighbouring fixed frames, each
edit is recorded and undone exactly, objects are added and removed.

The run is the one of test_video_run (keyframe 4 of 12, the cup tracked by a tracker double moving 2 px a frame).
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import rect_mask
from test_video_run import CUP, H, W, _run
from video_doubles import ShiftTracker, shifted

from sam3_agent.errors import InputError
from sam3_agent.sam.tracker import PointMask
from sam3_agent.video.corrections import ADDED_LABEL, VideoEditor
from sam3_agent.video.events import FrameTracked, TrackingFinished, TrackingStarted
from sam3_agent.video.tracks import Span

FIX = (30, 20, 38, 30)  # the person's box for the cup on frame 8


def _editor(tracker=None, point_segmenter=None):
    run, _, tracker0, clip = _run()
    tracker = tracker or tracker0
    return VideoEditor(run.trace, clip, tracker, point_segmenter), run.trace, tracker


def _masks(trace, object_id):
    return {f: trace.tracks.mask(object_id, f).copy() for f in range(trace.tracks.frame_count)}


def test_a_fix_on_a_later_frame_changes_only_the_frames_it_should():
    editor, trace, tracker = _editor()
    before = _masks(trace, 1)
    fixed = rect_mask(H, W, *FIX)
    events = list(editor.replace(1, 8, fixed))
    started = events[0]
    assert isinstance(started, TrackingStarted) and started.reason == "edit"
    assert started.spans == (Span((1,), 8, 11), Span((1,), 8, 5)) and started.total == 6
    assert [e.frame_index for e in events if isinstance(e, FrameTracked)] == [9, 10, 11, 7, 6, 5]
    assert isinstance(events[-1], TrackingFinished) and events[-1].done == 6
    after = _masks(trace, 1)
    for frame in range(12):
        if frame <= 4:  # the keyframe and everything before it: untouched
            assert np.array_equal(after[frame], before[frame]), frame
        else:
            assert np.array_equal(after[frame], shifted(fixed, 2 * (frame - 8), 0)), frame
    assert trace.tracks.objects[1].masks[8].source == "person"
    assert trace.tracks.objects[1].anchors() == [4, 8]
    assert tracker.calls[2:] == [(8, (1,), False, 3), (8, (1,), True, 3)]


def test_a_fix_between_two_fixed_frames_stops_at_both():
    editor, trace, tracker = _editor()
    list(editor.replace(1, 8, rect_mask(H, W, *FIX)))
    before = _masks(trace, 1)
    second = rect_mask(H, W, 20, 5, 26, 12)
    list(editor.replace(1, 6, second))
    after = _masks(trace, 1)
    assert np.array_equal(after[7], shifted(second, 2, 0)) and np.array_equal(after[5], shifted(second, -2, 0))
    for frame in (0, 1, 2, 3, 4, 8, 9, 10, 11):
        assert np.array_equal(after[frame], before[frame]), frame
    assert tracker.calls[4:] == [(6, (1,), False, 1), (6, (1,), True, 1)]


def test_each_edit_is_recorded_with_its_prompt_and_reach():
    editor, trace, _ = _editor()
    list(editor.replace(1, 8, rect_mask(H, W, *FIX)))
    edit = trace.edits[-1]
    assert (edit.kind, edit.object_id, edit.frame_index, edit.prompt) == ("replace", 1, 8, "mask")
    assert edit.spans == ((8, 11), (8, 5)) and edit.tracked == 6
    assert edit.counts == trace.tracks.objects[1].masks[8].counts
    assert sorted(edit.before[1]) == [5, 6, 7, 8, 9, 10, 11]


def test_undo_puts_back_exactly_the_masks_before_the_edit():
    editor, trace, _ = _editor()
    before = dict(trace.tracks.objects[1].masks)
    list(editor.replace(1, 8, rect_mask(H, W, *FIX)))
    undone = editor.undo()
    assert undone is not None and undone.kind == "replace"
    assert trace.tracks.objects[1].masks == before and trace.edits == []
    assert editor.undo() is None


def test_an_added_object_is_tracked_through_the_whole_clip_and_undo_removes_it():
    editor, trace, _ = _editor()
    new = rect_mask(H, W, 44, 30, 52, 40)
    events = list(editor.add(2, new))
    assert events[0].spans == (Span((2,), 2, 11), Span((2,), 2, 0))
    assert trace.tracks.objects[2].label == ADDED_LABEL
    for frame in range(12):
        assert np.array_equal(trace.tracks.mask(2, frame), shifted(new, 2 * (frame - 2), 0)), frame
    assert trace.edits[-1].kind == "add" and trace.edits[-1].object_id == 2
    editor.undo()
    assert trace.tracks.object_ids() == [1]


def test_a_removed_object_comes_back_whole_on_undo():
    editor, trace, _ = _editor()
    kept = dict(trace.tracks.objects[1].masks)
    editor.remove(1)
    assert trace.tracks.object_ids() == [] and trace.tracks.masks_on(6) == {}
    editor.undo()
    assert trace.tracks.object_ids() == [1] and trace.tracks.objects[1].masks == kept


class ClickModel:
    """A point model double: returns a known mask and records what it was asked."""

    def __init__(self, mask):
        self.mask = mask
        self.asked = []

    def segment_points(self, image, points, labels, *, box=None):
        self.asked.append((image.info["frame_index"], points, labels, box))
        return PointMask(mask=self.mask, score=0.9)


def test_clicks_go_through_the_point_model_on_that_frame():
    clicked = rect_mask(H, W, *FIX)
    model = ClickModel(clicked)
    editor, trace, _ = _editor(point_segmenter=model)
    list(editor.replace(1, 8, points=[(33.0, 25.0)], labels=[1]))
    assert model.asked == [(8, [(33.0, 25.0)], [1], None)]
    assert np.array_equal(trace.tracks.mask(1, 8), clicked)
    edit = trace.edits[-1]
    assert (edit.prompt, edit.points, edit.labels, edit.box) == ("points", ((33.0, 25.0),), (1,), None)
    list(editor.replace(1, 9, box=(30, 20, 38, 30)))
    assert trace.edits[-1].prompt == "box" and trace.edits[-1].box == (30.0, 20.0, 38.0, 30.0)


def test_stopping_a_re_propagation_keeps_the_edit_and_the_frames_done():
    editor, trace, tracker = _editor()
    tracker.stop_after = 2
    list(editor.replace(1, 8, rect_mask(H, W, *FIX)))
    assert trace.edits[-1].tracked == 2
    assert np.array_equal(trace.tracks.mask(1, 10), shifted(rect_mask(H, W, *FIX), 4, 0))
    assert np.array_equal(trace.tracks.mask(1, 11), shifted(rect_mask(H, W, *CUP), 14, 0))  # not reached: as before


def test_without_the_clip_a_fix_changes_its_frame_only():
    editor, trace, _ = _editor()
    editor.clip = None
    before = _masks(trace, 1)
    events = list(editor.replace(1, 8, rect_mask(H, W, *FIX)))
    assert not editor.can_propagate and events[0].spans == ()
    after = _masks(trace, 1)
    assert all(np.array_equal(after[f], before[f]) for f in range(12) if f != 8)


@pytest.mark.parametrize(("call", "message"), [
    (lambda e: e.replace(1, 8, np.zeros((10, 10), bool)), r"the mask has shape \(10, 10\) but the clip's frames are "
                                                          r"48 x 64 \(height x width\)"),
    (lambda e: e.replace(1, 8), "give the object's mask, or clicks on it, or a box around it"),
    (lambda e: e.replace(1, 8, np.zeros((H, W), bool), points=[(1, 1)], labels=[1]), "not both"),
    (lambda e: e.replace(1, 8, points=[(1, 1)], labels=[1]), "need SAM 3's point model"),
    (lambda e: e.replace(7, 8, np.zeros((H, W), bool)), "there is no object 7"),
    (lambda e: e.replace(1, 12, np.zeros((H, W), bool)), "frame 12 is not in the clip"),
    (lambda e: e.add(3, np.zeros((H, W), bool)), "the new object's mask is empty"),
])
def test_bad_corrections_are_refused_before_anything_changes(call, message):
    editor, trace, _ = _editor()
    before = dict(trace.tracks.objects[1].masks)
    with pytest.raises(InputError, match=message):
        call(editor)
    assert trace.tracks.objects[1].masks == before and trace.edits == [] and trace.tracks.object_ids() == [1]


def test_a_point_model_that_finds_nothing_is_told_in_words():
    editor, _, _ = _editor(point_segmenter=ClickModel(np.zeros((H, W), bool)))
    with pytest.raises(InputError, match="SAM 3's point model found nothing there"):
        editor.replace(1, 8, points=[(5, 5)], labels=[1])


def test_an_empty_fix_hides_the_object_on_that_frame_and_propagates_nothing():
    editor, trace, _ = _editor(tracker=ShiftTracker())
    events = list(editor.replace(1, 8, np.zeros((H, W), bool)))
    assert events[0].spans == () and 1 not in trace.tracks.masks_on(8)
