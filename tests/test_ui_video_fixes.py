"""Fixing a frame from the Video tab: the frame handed to the Correct tab for one object, edited there with its tools,
applied and re-propagated only as far as the object's next fixed frame; an object added on a frame; removed; undone.
Exact masks from the tracker double (each prompt moved 2 px a frame)."""

from __future__ import annotations

import types

import numpy as np
import pytest
from test_ui_video_handlers import KEYFRAME, QUERY, finished, make_handlers, opened, rabbit_on, skipped, status_words
from video_doubles import shifted

from sam3_agent.ui.correct import actions as correct

TAB = types.SimpleNamespace(session_hash="tab-a")


@pytest.fixture
def app(tmp_path):
    handlers, tracker = make_handlers(tmp_path)
    key = opened(handlers.video)
    finished(handlers.video, key)
    yield handlers, key, tracker
    handlers.close()


def handed(handlers, key, object_id, frame):
    """Press "Fix it on this frame" (or "Add an object on this frame" for ``None``) on ``frame``; returns (Correct key, the rest)."""
    video = handlers.video
    outputs = video.fix(key, object_id, frame, None, TAB) if object_id else video.add(key, frame, None, TAB)
    return outputs[0], outputs


def painted(handlers, correct_key, box):
    """Paint the rectangle ``box`` (xyxy px) into the Correct session's selected mask (or a new one) by hand."""
    session = handlers.correct.session(correct_key)
    x0, y0, x1, y1 = box
    rows = [[[float(x), float(y)] for x in range(x0, x1)] for y in range(y0, y1, 4)]
    for points in rows:
        session = correct.brush(session, points, 3, erase=False)
    handlers.correct.sessions.replace(correct_key, session)
    return session


def test_fix_opens_the_frame_in_the_correct_tab_with_that_objects_mask_alone(app):
    handlers, key, _ = app
    correct_key, outputs = handed(handlers, key, 1, 20)
    session = handlers.correct.session(correct_key)
    assert np.array_equal(np.asarray(session.trace.image), np.asarray(handlers.video.sessions.get(key).clip.frame(20)))
    assert session.trace.image_name == "bigbuckbunny_frame00020.png"
    assert [it.label for it in session.state.items] == ["object 1"]
    assert np.array_equal(session.state.items[0].mask, rabbit_on(20))
    group, note, video_status = outputs[-3:]
    assert group == {"__type__": "update", "visible": True} and skipped(video_status)
    assert note.startswith("Frame 20 of bigbuckbunny.mp4: object 1.")
    assert outputs[len(outputs) - 4].selected == "correct"  # the Correct tab comes to the front
    assert session.selected == 0  # the object's mask is selected: clicks and the brush act on it
    assert handlers.video.fix_shown(key, correct_key) == {"__type__": "update", "visible": True}
    assert handlers.video.fix_shown(key, "another correct session") == {"__type__": "update", "visible": False}


def test_a_fixed_frame_is_tracked_again_only_as_far_as_the_next_fixed_frame_each_way(app):
    handlers, key, tracker = app
    video = handlers.video
    correct_key, _ = handed(handlers, key, 1, 30)  # the keyframe (10) is the object's other fixed frame
    session = painted(handlers, correct_key, (380, 200, 420, 240))
    new_mask = session.state.items[0].mask  # the rabbit's mask with the painted square added (it was selected)
    assert len(session.state.items) == 1 and new_mask.sum() > rabbit_on(30).sum() and new_mask[220, 400]
    before = video.sessions.get(key).trace.tracks
    kept = {f: before.mask(1, f) for f in range(50)}
    pages = list(video.apply(key, correct_key))
    first, last = pages[0], pages[-1]
    assert first[-2].selected == "video"  # the Video tab comes to the front
    assert first[-1] == {"__type__": "update", "visible": False}
    assert first[2] == {"__type__": "update", "value": 30}  # the scrubber goes to the fixed frame
    assert all(skipped(page[7]) and skipped(page[8]) and skipped(page[9]) for page in pages)  # the run's rounds stay
    assert status_words(last[1]) == "Fixed object 1 on frame 30 and tracked again over 38 frame(s)."
    # forward 31..49 and backward 29..11: the keyframe 10 stays the agent's
    assert tracker.calls[-2:] == [(30, (1,), False, 19), (30, (1,), True, 19)]
    tracks = video.sessions.get(key).trace.tracks
    for frame in range(50):
        expected = kept[frame] if frame <= KEYFRAME else shifted(new_mask, 2 * (frame - 30), 0)
        assert np.array_equal(tracks.mask(1, frame), expected), frame
    edit = video.sessions.get(key).trace.edits[-1]
    assert (edit.kind, edit.object_id, edit.frame_index, edit.prompt, edit.spans, edit.tracked) == (
        "replace", 1, 30, "mask", ((30, 49), (30, 11)), 38)
    assert tracks.summary()[0].fixed_frames == (10, 30)


def test_applying_twice_or_after_another_trace_was_opened_there_is_refused(app):
    handlers, key, _ = app
    messages = []
    handlers.video.warn = messages.append
    correct_key, _ = handed(handlers, key, 1, 20)
    list(handlers.video.apply(key, correct_key))
    pages = list(handlers.video.apply(key, correct_key))
    assert len(pages) == 1 and all(skipped(v) for v in pages[0])
    assert messages == ["The Correct tab holds no frame of the clip now: press 'Fix it on this frame' (or 'Add an "
                        "object on this frame') in the Video tab."]


def test_an_object_added_on_a_frame_is_tracked_through_the_whole_clip(app):
    handlers, key, tracker = app
    correct_key, _ = handed(handlers, key, None, 25)
    assert handlers.correct.session(correct_key).state.items == ()
    session = painted(handlers, correct_key, (20, 20, 60, 60))
    drawn = session.state.items[0].mask
    pages = list(handlers.video.apply(key, correct_key))
    assert status_words(pages[-1][1]) == "Fixed 1 new object on frame 25 and tracked again over 49 frame(s)."
    tracks = handlers.video.sessions.get(key).trace.tracks
    assert tracks.object_ids() == [1, 2] and tracks.get(2).label == "added by hand"
    assert tracker.calls[-2:] == [(25, (2,), False, 24), (25, (2,), True, 25)]
    for frame in (0, 24, 25, 26, 49):
        assert np.array_equal(tracks.mask(2, frame), shifted(drawn, 2 * (frame - 25), 0)), frame
    assert 'data-object="2"' in pages[-1][11]  # the objects table


def test_adding_with_nothing_drawn_is_refused_and_changes_nothing(app):
    handlers, key, _ = app
    messages = []
    handlers.video.warn = messages.append
    correct_key, _ = handed(handlers, key, None, 25)
    pages = list(handlers.video.apply(key, correct_key))
    assert messages == ["Draw the new object first (points, a box or the brush), then apply."]
    assert handlers.video.sessions.get(key).trace.tracks.object_ids() == [1] and len(pages) == 1


def test_remove_then_undo_brings_the_object_back_exactly(app):
    handlers, key, _ = app
    video = handlers.video
    before = {f: video.sessions.get(key).trace.tracks.mask(1, f) for f in range(50)}
    page = video.remove(key, 1)
    assert status_words(page.status) == "Removed object 1 from every frame (Undo brings it back)."
    assert "No objects." in page.table and page.shown["choices"] == []
    page = video.undo_edit(key)
    assert status_words(page.status) == "Undid the removal of object 1."
    tracks = video.sessions.get(key).trace.tracks
    assert all(np.array_equal(tracks.mask(1, f), before[f]) for f in range(50))
    assert status_words(video.undo_edit(key).status) == "Nothing to undo: no edit was made."


def test_undo_of_a_fix_puts_every_re_propagated_frame_back(app):
    handlers, key, _ = app
    video = handlers.video
    before = {f: video.sessions.get(key).trace.tracks.mask(1, f) for f in range(50)}
    correct_key, _ = handed(handlers, key, 1, 40)
    painted(handlers, correct_key, (10, 10, 30, 30))
    list(video.apply(key, correct_key))
    assert not np.array_equal(video.sessions.get(key).trace.tracks.mask(1, 45), before[45])
    page = video.undo_edit(key)
    assert status_words(page.status) == "Undid the fix of object 1 on frame 40."
    tracks = video.sessions.get(key).trace.tracks
    assert all(np.array_equal(tracks.mask(1, f), before[f]) for f in range(50))
    assert video.sessions.get(key).trace.edits == []


def test_the_toggles_draw_an_object_off_the_scrubbed_frame(app):
    handlers, key, _ = app
    video = handlers.video
    video.scrub(key, 20)
    image, table = video.show_objects(key, [])
    raw = video.sessions.get(key).clip.frame(20)
    assert np.array_equal(np.asarray(image), np.asarray(raw))
    assert 'class="object-off"' in table
    image, table = video.show_objects(key, [1])
    assert not np.array_equal(np.asarray(image), np.asarray(raw)) and "object-off" not in table


def test_fix_before_a_run_or_during_tracking_is_refused_in_the_video_tabs_status(tmp_path):
    handlers, _ = make_handlers(tmp_path)
    key = opened(handlers.video)
    outputs = handlers.video.fix(key, 1, 0, None, TAB)
    assert status_words(outputs[-1]) == "Run the agent on the clip first: then fix its objects frame by frame."
    run = handlers.video.run(key, QUERY, KEYFRAME, 5, 0.5)
    next(run)
    outputs = handlers.video.fix(key, 1, 0, None, TAB)
    assert status_words(outputs[-1]).startswith("Tracking is still going on")
    run.close()
