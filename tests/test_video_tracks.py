"""Tracks: masks per object per frame as RLE, fixed frames never overwritten, and the spans a fix re-propagates."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import rect_mask

from sam3_agent import rle
from sam3_agent.errors import InputError
from sam3_agent.video.tracks import MAX_OBJECTS, FrameMask, Span, Tracks, mask_iou


def _tracks(frames: int = 10) -> Tracks:
    return Tracks(frames, 20, 30)


def test_a_fix_on_a_new_object_propagates_to_both_ends():
    tracks = _tracks()
    obj = tracks.new_object("ball")
    tracks.fix(obj, 4, rect_mask(20, 30, 2, 2, 8, 8), "agent", 0.8)
    assert tracks.spans_from([obj], 4) == [Span((1,), 4, 9), Span((1,), 4, 0)]


def test_a_fix_propagates_only_to_the_neighbouring_fixed_frames():
    tracks = _tracks(20)
    obj = tracks.new_object("ball")
    for frame in (2, 9, 15):
        tracks.fix(obj, frame, rect_mask(20, 30, 2, 2, 8, 8), "person")
    assert tracks.spans_from([obj], 9) == [Span((1,), 9, 14), Span((1,), 9, 3)]
    assert tracks.spans_from([obj], 2) == [Span((1,), 2, 8), Span((1,), 2, 0)]
    assert tracks.spans_from([obj], 15) == [Span((1,), 15, 19), Span((1,), 15, 10)]


def test_spans_leave_out_calls_that_would_track_nothing():
    tracks = _tracks(5)
    obj = tracks.new_object("ball")
    tracks.fix(obj, 0, rect_mask(20, 30, 2, 2, 8, 8), "agent")
    assert tracks.spans_from([obj], 0) == [Span((1,), 0, 4)]
    tracks.fix(obj, 1, rect_mask(20, 30, 2, 2, 8, 8), "person")
    assert tracks.spans_from([obj], 0) == []


def test_objects_with_the_same_reach_share_a_call():
    tracks = _tracks(12)
    a, b, c = (tracks.new_object(n) for n in "abc")
    for obj in (a, b, c):
        tracks.fix(obj, 5, rect_mask(20, 30, 2, 2, 8, 8), "agent")
    tracks.fix(c, 8, rect_mask(20, 30, 2, 2, 8, 8), "person")
    assert tracks.spans_from([a, b, c], 5) == [Span((1, 2), 5, 11), Span((3,), 5, 7), Span((1, 2, 3), 5, 0)]


def test_a_span_lists_its_frames_prompt_frame_first():
    assert list(Span((1,), 3, 6).frames) == [3, 4, 5, 6]
    assert list(Span((1,), 3, 0).frames) == [3, 2, 1, 0]
    assert Span((1,), 3, 0).reverse and Span((1,), 3, 0).tracked == 3


def test_a_tracked_mask_never_overwrites_a_fixed_one():
    tracks = _tracks()
    obj = tracks.new_object("ball")
    fixed = tracks.fix(obj, 3, rect_mask(20, 30, 0, 0, 5, 5), "person")
    kept = tracks.set_tracked(obj, 3, rect_mask(20, 30, 10, 10, 15, 15), 0.4)
    assert kept == fixed and tracks.objects[obj].masks[3] == fixed


def test_an_empty_tracked_mask_is_no_mask():
    tracks = _tracks()
    obj = tracks.new_object("ball")
    tracks.set_tracked(obj, 3, rect_mask(20, 30, 0, 0, 5, 5), 0.5)
    assert tracks.set_tracked(obj, 3, np.zeros((20, 30), bool), 0.1) is None
    assert 3 not in tracks.objects[obj].masks and tracks.masks_on(3) == {}


def test_masks_on_a_frame_are_rle_of_the_given_pixels():
    tracks = _tracks()
    obj = tracks.new_object("ball")
    mask = rect_mask(20, 30, 3, 4, 9, 12)
    tracks.set_tracked(obj, 6, mask, 0.75)
    found = tracks.masks_on(6)
    assert list(found) == [obj]
    assert found[obj] == FrameMask(rle.encode([mask], 20, 30)[0], 0.75, "tracker")
    assert np.array_equal(tracks.mask(obj, 6), mask)


def test_a_fixed_empty_mask_hides_the_object_on_that_frame():
    tracks = _tracks()
    obj = tracks.new_object("ball")
    tracks.fix(obj, 2, np.zeros((20, 30), bool), "person")
    assert tracks.masks_on(2) == {} and tracks.objects[obj].anchors() == [2]


def test_the_summary_gives_each_objects_extent_and_mean_score():
    tracks = _tracks()
    a, b = tracks.new_object("a"), tracks.new_object("b")
    tracks.fix(a, 2, rect_mask(20, 30, 0, 0, 4, 4), "agent", 0.9)
    tracks.set_tracked(a, 3, rect_mask(20, 30, 0, 0, 4, 4), 0.5)
    tracks.set_tracked(a, 7, rect_mask(20, 30, 0, 0, 4, 4), 0.4)
    rows = tracks.summary()
    assert [(r.object_id, r.first_frame, r.last_frame, r.frames_present, r.fixed_frames) for r in rows] == [
        (a, 2, 7, 3, (2,)), (b, None, None, 0, ())]
    assert rows[0].mean_score == pytest.approx(0.6)
    assert rows[1].mean_score == 0.0


def test_a_snapshot_puts_back_exactly_what_was_there():
    tracks = _tracks()
    obj = tracks.new_object("ball")
    tracks.set_tracked(obj, 5, rect_mask(20, 30, 0, 0, 4, 4), 0.5)
    before = {f: m for f, m in tracks.objects[obj].masks.items()}
    taken = tracks.snapshot([Span((obj,), 4, 6)])
    tracks.set_tracked(obj, 5, rect_mask(20, 30, 5, 5, 9, 9), 0.7)
    tracks.set_tracked(obj, 6, rect_mask(20, 30, 5, 5, 9, 9), 0.7)
    tracks.restore(taken)
    assert tracks.objects[obj].masks == before


def test_ids_are_never_reused_and_stop_at_the_palette_limit():
    tracks = _tracks()
    first = tracks.new_object("a")
    tracks.remove_object(first)
    assert tracks.new_object("b") == 2
    for _ in range(MAX_OBJECTS - 2):
        tracks.new_object("x")
    with pytest.raises(InputError, match="all 255 object ids"):
        tracks.new_object("one too many")


def test_a_frame_outside_the_clip_is_refused_in_words():
    tracks = _tracks(10)
    with pytest.raises(InputError, match="frame 10 is not in the clip: frames are numbered 0 to 9"):
        tracks.masks_on(10)
    with pytest.raises(InputError, match="there is no object 3 in this clip"):
        tracks.get(3)


def test_mask_iou_is_read_from_the_runs():
    a = rle.encode([rect_mask(20, 30, 0, 0, 10, 10)], 20, 30)[0]
    b = rle.encode([rect_mask(20, 30, 5, 0, 15, 10)], 20, 30)[0]
    assert mask_iou(a, b, 20, 30) == pytest.approx(50 / 150)
    empty = rle.encode([np.zeros((20, 30), bool)], 20, 30)[0]
    assert mask_iou(empty, empty, 20, 30) == 0.0
