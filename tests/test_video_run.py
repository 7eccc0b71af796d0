"""A run over a clip: the agent on a keyframe, its masks tracked both ways, Stop, more keyframes, newcomers.

The clip is a real photo's frames (``video_doubles.PhotoClip``), the tracker a double that moves each mask by 2 px a
frame (``video_doubles.ShiftTracker``), so every frame's mask is known exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import KnownSegmenter, photo, rect_mask, tool, verdict
from video_doubles import TRACKED_SCORE, PhotoClip, ShiftTracker, shifted

from sam3_agent import rle
from sam3_agent.agent.loop import Agent
from sam3_agent.errors import BackendError, InputError
from sam3_agent.events import RoundStarted, RunFinished
from sam3_agent.mask_set import Masks
from sam3_agent.video.events import (
    FrameTracked,
    KeyframeStarted,
    NewcomerChecked,
    ObjectsChosen,
    TrackingFinished,
    TrackingStarted,
    VideoRunFinished,
)
from sam3_agent.video.run import VideoAgent, VideoConfig
from sam3_agent.vlm.scripted import ScriptedVLM

H, W = 48, 64
CUP = (10, 10, 20, 20)  # the cup's box on the keyframe (xyxy)


def _agent(responses, segmenter=None, verifier=None) -> Agent:
    segmenter = segmenter or KnownSegmenter({"cup": [(CUP, 0.8)]})
    return Agent(ScriptedVLM(responses), segmenter, verifier=verifier or ScriptedVLM([verdict("Accept")]))


def _select_cup():
    return [tool("segment_phrase", text_prompt="cup"), tool("select_masks_and_return", final_answer_masks=[1])]


def _run(frames=12, keyframe=4, tracker=None, config=None, agent=None):
    clip = PhotoClip(photo("coffee.jpg"), frames, (W, H))
    tracker = tracker or ShiftTracker()
    video = VideoAgent(agent or _agent(_select_cup()), tracker, config)
    run = video.start(clip, "the cup", keyframes=[keyframe])
    events = list(run)
    return run, events, tracker, clip


def test_the_keyframes_mask_is_tracked_forward_then_backward_frame_by_frame():
    run, events, tracker, _ = _run()
    kinds = [type(e).__name__ for e in events]
    assert kinds[0] == "KeyframeStarted" and isinstance(events[1], RoundStarted)
    agent_end = kinds.index("RunFinished")
    assert kinds[agent_end + 1:] == ["ObjectsChosen", "TrackingStarted"] + ["FrameTracked"] * 11 + [
        "TrackingFinished", "VideoRunFinished"]
    tracked = [e for e in events if isinstance(e, FrameTracked)]
    assert [e.frame_index for e in tracked] == [5, 6, 7, 8, 9, 10, 11, 3, 2, 1, 0]
    assert [e.done for e in tracked] == list(range(1, 12)) and {e.total for e in tracked} == {11}
    assert tracker.calls == [(4, (1,), False, 7), (4, (1,), True, 4)]
    cup = rect_mask(H, W, *CUP)
    tracks = run.trace.tracks
    for frame in range(12):
        assert np.array_equal(tracks.mask(1, frame), shifted(cup, 2 * (frame - 4), 0)), frame
    assert tracks.objects[1].masks[4].source == "agent" and tracks.objects[1].masks[4].score == pytest.approx(0.8)
    assert tracks.objects[1].masks[7].source == "tracker" and tracks.objects[1].masks[7].score == TRACKED_SCORE
    assert run.trace.status == "done" and run.trace.error is None


def test_each_frame_event_carries_that_frames_masks_as_rle():
    run, events, _, _ = _run()
    event = next(e for e in events if isinstance(e, FrameTracked) and e.frame_index == 6)
    expected = rle.encode([shifted(rect_mask(H, W, *CUP), 4, 0)], H, W)[0]
    assert list(event.masks) == [1] and event.masks[1].counts == expected


def test_the_keyframe_run_is_an_image_run_on_that_frame():
    run, events, _, clip = _run()
    keyframe = run.trace.keyframes[0]
    assert keyframe.frame_index == 4 and keyframe.objects == ((1, 1),)
    image_trace = keyframe.trace
    assert image_trace.status == "done" and image_trace.image_name == "coffee_frame00004.png"
    assert np.array_equal(np.asarray(image_trace.image), np.asarray(clip.frame(4)))
    alone = _agent(_select_cup()).run(clip.frame(4), "the cup")
    assert image_trace.final_masks == alone.final_masks
    assert [r.call for r in image_trace.rounds] == [r.call for r in alone.rounds]
    finished = next(e for e in events if isinstance(e, RunFinished))
    assert finished.trace is image_trace


def test_no_mask_on_the_keyframe_tracks_nothing():
    run, events, tracker, _ = _run(agent=_agent([tool("report_no_mask")]))
    assert run.trace.status == "no_mask" and run.trace.tracks.objects == {}
    assert tracker.calls == [] and not any(isinstance(e, TrackingStarted) for e in events)
    assert isinstance(events[-1], VideoRunFinished)


def test_stop_keeps_every_frame_tracked_until_then():
    tracker = ShiftTracker(stop_after=3)
    run, events, _, _ = _run(tracker=tracker)
    assert run.trace.status == "cancelled"
    assert run.trace.error == "stopped by the user; every frame tracked until then is kept"
    assert sorted(run.trace.tracks.objects[1].masks) == [4, 5, 6, 7]
    finished = next(e for e in events if isinstance(e, TrackingFinished))
    assert (finished.done, finished.total, finished.stopped) == (3, 11, True)
    assert tracker.calls == [(4, (1,), False, 3)]  # the backward call never started


def test_cancel_during_the_keyframe_run_stops_before_tracking():
    clip = PhotoClip(photo("coffee.jpg"), 12, (W, H))
    tracker = ShiftTracker()
    run = VideoAgent(_agent(_select_cup()), tracker).start(clip, "the cup", keyframes=[4])
    for event in run:
        if isinstance(event, RoundStarted):
            run.cancel()
    assert run.trace.status == "cancelled" and tracker.calls == []
    assert run.trace.keyframes[0].trace.status == "cancelled"


class FailingTracker(ShiftTracker):
    def track(self, frames, prompts, **kwargs):
        for n, result in enumerate(super().track(frames, prompts, **kwargs)):
            if n == 2:
                raise BackendError("SAM 3's video tracker ran out of memory on frame 7")
            yield result


def test_a_tracker_fault_fails_the_run_and_keeps_the_frames_so_far():
    run, events, _, _ = _run(tracker=FailingTracker())
    assert run.trace.status == "failed"
    assert run.trace.error == "SAM 3's video tracker ran out of memory on frame 7"
    assert sorted(run.trace.tracks.objects[1].masks) == [4, 5, 6]
    assert isinstance(events[-1], VideoRunFinished)


def test_a_keyframe_outside_the_clip_is_refused_before_the_run():
    clip = PhotoClip(photo("coffee.jpg"), 12, (W, H))
    with pytest.raises(InputError, match="frame 12 is not in the clip: frames are numbered 0 to 11"):
        VideoAgent(_agent(_select_cup()), ShiftTracker()).start(clip, "the cup", keyframes=[12])
    with pytest.raises(InputError, match="at least one keyframe"):
        VideoAgent(_agent(_select_cup()), ShiftTracker()).start(clip, "the cup", keyframes=[])


def test_a_second_keyframe_re_anchors_the_object_it_matches_and_adds_the_rest():
    # frame 10: the cup has moved 12 px (tracked there), and a saucer is new
    moved = (CUP[0] + 12, CUP[1], CUP[2] + 12, CUP[3])
    saucer = (40, 30, 60, 44)
    segmenter = KnownSegmenter({"cup": [(CUP, 0.8)], "cup and saucer": [((moved[0] + 1, *moved[1:]), 0.7),
                                                                        (saucer, 0.6)]})
    responses = _select_cup() + [tool("segment_phrase", text_prompt="cup and saucer"),
                                 tool("select_masks_and_return", final_answer_masks=[1, 2])]
    run, _, tracker, _ = _run(agent=_agent(responses, segmenter))
    events = list(run.add_keyframe(10))
    chosen = next(e for e in events if isinstance(e, ObjectsChosen))
    assert (chosen.frame_index, chosen.new, chosen.matched) == (10, (2,), (1,))
    assert run.trace.keyframes[1].objects == ((1, 1), (2, 2))
    # object 1: frames 5..9 re-propagated backward from 10, 11 forward; 4 (the first keyframe) stays
    new_cup = rect_mask(H, W, moved[0] + 1, *moved[1:])
    tracks = run.trace.tracks
    for frame in (11, 9, 5):
        assert np.array_equal(tracks.mask(1, frame), shifted(new_cup, 2 * (frame - 10), 0)), frame
    assert np.array_equal(tracks.mask(1, 4), rect_mask(H, W, *CUP))
    assert np.array_equal(tracks.mask(1, 2), shifted(rect_mask(H, W, *CUP), -4, 0))  # before the first keyframe
    assert tracker.calls[2:] == [(10, (1, 2), False, 1), (10, (1,), True, 5), (10, (2,), True, 10)]
    assert run.trace.status == "done"


def _frame_segmenter(newcomers):
    """A detector double whose 'cup' detections depend on the frame (``image.info['frame_index']``): the cup
    moving 2 px a frame from the keyframe 4, plus ``newcomers``: (first frame, box, score)."""

    class FrameSegmenter:
        name = "frame-segmenter"

        def __init__(self):
            self.frames = []

        def segment(self, image, phrase, score_threshold=0.5):
            frame = image.info["frame_index"]
            self.frames.append(frame)
            boxes = [((CUP[0] + 2 * (frame - 4), CUP[1], CUP[2] + 2 * (frame - 4), CUP[3]), 0.8)]
            boxes += [(box, s) for first, box, s in newcomers if frame >= first]
            boxes = [(b, s) for b, s in boxes if s >= score_threshold]
            masks = np.stack([rect_mask(H, W, *b) for b, _ in boxes])
            return Masks(masks, [s for _, s in boxes], [b for b, _ in boxes], phrase)

    return FrameSegmenter()


def test_the_newcomer_mode_adds_a_verified_newcomer_and_skips_a_rejected_one():
    segmenter = _frame_segmenter([(8, (40, 5, 50, 15), 0.9), (9, (30, 30, 40, 40), 0.85)])
    verifier = ScriptedVLM([verdict("Accept"), verdict("Reject")])
    agent = _agent(_select_cup(), segmenter, verifier)
    run, events, tracker, _ = _run(agent=agent, config=VideoConfig(newcomers=True))
    checks = [e.check for e in events if isinstance(e, NewcomerChecked)]
    assert [(c.frame_index, c.outcome, c.object_id, c.verdict, c.verdict_source) for c in checks] == [
        (8, "accepted", 2, "accept", "model"), (9, "rejected", None, "reject", "model")]
    assert run.trace.checks == checks
    assert checks[0].counts == rle.encode([rect_mask(H, W, 40, 5, 50, 15)], H, W)[0]
    assert checks[0].phrase == "cup" and checks[0].score == pytest.approx(0.9)
    tracks = run.trace.tracks
    assert tracks.object_ids() == [1, 2]
    assert tracks.objects[2].masks[8].source == "detector" and tracks.objects[2].anchors() == [8]
    assert np.array_equal(tracks.mask(2, 11), shifted(rect_mask(H, W, 40, 5, 50, 15), 6, 0))
    # the keyframe's two calls (detector on every frame they track), then the newcomer's own two
    assert tracker.calls == [(4, (1,), False, 7), (4, (1,), True, 4), (8, (2,), False, 3), (8, (2,), True, 8)]
    assert segmenter.frames[0] == 4 and segmenter.frames[1:] == [5, 6, 7, 8, 9, 10, 11, 3, 2, 1, 0]
    reasons = [e.reason for e in events if isinstance(e, TrackingStarted)]
    assert reasons == ["keyframe", "newcomer"]


def test_an_unusable_verdict_does_not_add_a_newcomer():
    segmenter = _frame_segmenter([(8, (40, 5, 50, 15), 0.9)])
    verifier = ScriptedVLM(["I am not sure.", "Still not sure."])
    run, events, _, _ = _run(agent=_agent(_select_cup(), segmenter, verifier), config=VideoConfig(newcomers=True))
    assert [c.outcome for c in run.trace.checks] == ["unconfirmed"]
    assert run.trace.tracks.object_ids() == [1]


def test_newcomer_checks_stop_at_the_runs_limit():
    newcomers = [(5 + i, (2 + 6 * i, 30, 6 + 6 * i, 34), 0.9) for i in range(5)]
    verifier = ScriptedVLM([verdict("Reject")] * 5)
    config = VideoConfig(newcomers=True, max_newcomer_checks=2)
    run, _, _, _ = _run(agent=_agent(_select_cup(), _frame_segmenter(newcomers), verifier), config=config)
    assert [c.frame_index for c in run.trace.checks] == [5, 6]


def test_video_options_are_checked():
    with pytest.raises(InputError, match="detect_every must be at least 1"):
        VideoConfig(detect_every=0)
    with pytest.raises(InputError, match="max_newcomer_checks must be a whole number"):
        VideoConfig(max_newcomer_checks=2.5)


def test_keyframe_started_names_the_frames_time():
    _, events, _, _ = _run(keyframe=5)
    assert events[0] == KeyframeStarted(frame_index=5, seconds=pytest.approx(0.2))
