"""SAM 3's video tracker on the tiny random-weight model and a real clip: the masks of transformers' own recipe,
frame by frame, lazily; checked inputs; clear load errors; the preset."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from tracker_reference import PROMPTS, as_tuples, assert_same, transformers_recipe
from video_frames import clip_frames, one_torch_thread  # noqa: F401 (a fixture)

from sam3_agent import presets
from sam3_agent.errors import BackendError, InputError
from sam3_agent.sam.video_tracker import Sam3VideoTracker, VideoTracker
from sam3_agent.tiny.tracker_video import TRACKER_MARKER_FILE, build_tiny_sam3_tracker_video

FRAMES = 40
PROMPT_FRAME = 10

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return build_tiny_sam3_tracker_video(tmp_path_factory.mktemp("tracker_video") / "sam3_tracker_video")


@pytest.fixture(scope="module")
def tracker(tiny_folder) -> Sam3VideoTracker:
    return Sam3VideoTracker.from_pretrained(str(tiny_folder), device="cpu")


@pytest.fixture(scope="module")
def frames():
    return clip_frames(FRAMES)


@pytest.mark.parametrize("reverse", [False, True])
def test_masks_and_scores_are_those_of_transformers_recipe_on_the_same_frames(tracker, frames, reverse):
    order = range(PROMPT_FRAME, -1, -1) if reverse else range(PROMPT_FRAME, FRAMES)
    ours = list(tracker.track(((i, frames[i]) for i in order), PROMPTS, num_frames=FRAMES, reverse=reverse))
    assert isinstance(tracker, VideoTracker)
    assert len(ours) == len(order) - 1  # every frame after the prompt frame, none for the prompt frame itself
    first = ours[0]
    assert first.frame_index == (PROMPT_FRAME - 1 if reverse else PROMPT_FRAME + 1)
    assert all(m.dtype == bool and m.shape == (90, 160) for m in first.masks.values())
    assert all(0 < int(m.sum()) < 90 * 160 for t in ours for m in t.masks.values())  # tiny model's biases
    assert all(0.0 <= s <= 1.0 for t in ours for s in t.scores.values())
    assert_same(as_tuples(ours), transformers_recipe(tracker, frames, PROMPT_FRAME, PROMPTS, reverse))


def test_frames_are_pulled_one_at_a_time(tracker, frames):
    pulled = []

    def source():
        for index in range(PROMPT_FRAME, FRAMES):
            pulled.append(index)
            yield index, frames[index]

    run = tracker.track(source(), PROMPTS, num_frames=FRAMES)
    assert next(run).frame_index == PROMPT_FRAME + 1
    assert pulled == [PROMPT_FRAME, PROMPT_FRAME + 1]  # the prompt frame and the one just tracked, nothing ahead
    next(run)
    assert pulled[-1] == PROMPT_FRAME + 2


def test_a_stop_returns_after_the_frame_in_progress_without_pulling_another(tracker, frames):
    stop, pulled, tracked = threading.Event(), [], []

    def source():
        for index in range(FRAMES):
            pulled.append(index)
            yield index, frames[index]

    for item in tracker.track(source(), {1: PROMPTS[3]}, num_frames=FRAMES, stop=stop):
        tracked.append(item.frame_index)
        if len(tracked) == 3:
            stop.set()
    assert tracked == [1, 2, 3] and pulled == [0, 1, 2, 3]


def test_the_last_frame_of_the_clip_as_prompt_frame_tracks_nothing_further(tracker, frames):
    assert list(tracker.track([(FRAMES - 1, frames[-1])], PROMPTS, num_frames=FRAMES)) == []


def test_bad_prompts_are_refused_with_what_to_do(tracker, frames):
    first = [(0, frames[0])]
    cases = [
        ({}, "give at least one object"),
        ({0: PROMPTS[3]}, "at least 1 .0 is the background"),
        ({1: np.zeros((90, 160), dtype=bool)}, "the mask of object 1 is empty"),
        ({1: PROMPTS[3][:-1]}, r"prompt frame's size \(90, 160\); got bool \(89, 160\)"),
        ({1: PROMPTS[3].astype(np.uint8)}, "must be a bool array"),
    ]
    for prompts, message in cases:
        with pytest.raises(InputError, match=message):
            list(tracker.track(first, prompts, num_frames=FRAMES))


def test_frames_out_of_order_of_another_size_or_outside_the_clip_are_refused(tracker, frames):
    with pytest.raises(InputError, match="no frames to track"):
        list(tracker.track([], PROMPTS, num_frames=FRAMES))
    with pytest.raises(InputError, match="frame 3 came after frame 1: .* forward .frame 2 next"):
        list(tracker.track([(1, frames[1]), (3, frames[3])], PROMPTS, num_frames=FRAMES))
    with pytest.raises(InputError, match="frame 1 came after frame 2: .* backward .frame 1 next|frame 3 came after"):
        list(tracker.track([(2, frames[2]), (3, frames[3])], PROMPTS, num_frames=FRAMES, reverse=True))
    small = frames[1].resize((80, 45))
    with pytest.raises(InputError, match="frame 1 is 80x45, the prompt frame 160x90"):
        list(tracker.track([(0, frames[0]), (1, small)], PROMPTS, num_frames=FRAMES))
    with pytest.raises(InputError, match="frame index 40 is outside the clip's 40 frames"):
        list(tracker.track([(40, frames[0])], PROMPTS, num_frames=FRAMES))
    with pytest.raises(InputError, match="num_frames is the clip's frame count"):
        list(tracker.track([(0, frames[0])], PROMPTS, num_frames=0))


def test_a_missing_folder_and_a_checkpoint_without_the_tracker_are_backend_errors(tmp_path):
    from sam3_agent.tiny.sam3 import build_tiny_sam3

    with pytest.raises(BackendError, match=f"SAM 3's video tracker from the folder '{tmp_path / 'nothing'}'"):
        Sam3VideoTracker.from_pretrained(str(tmp_path / "nothing"))
    detector_only = build_tiny_sam3(tmp_path / "sam3")  # a Sam3Model checkpoint: no tracker weights at all
    with pytest.raises(BackendError, match="SAM 3's video tracker"):
        Sam3VideoTracker.from_pretrained(str(detector_only), device="cpu")


def test_the_tiny_builder_is_idempotent(tiny_folder):
    weights = tiny_folder / "model.safetensors"
    before = weights.stat().st_mtime_ns
    assert build_tiny_sam3_tracker_video(tiny_folder) == tiny_folder
    assert weights.stat().st_mtime_ns == before and (tiny_folder / TRACKER_MARKER_FILE).is_file()


def test_the_tiny_preset_builds_one_video_tracker_per_process(tmp_path, monkeypatch, tiny_folder):
    monkeypatch.setenv("SAM3_AGENT_CACHE", str(tmp_path))
    path = presets.tiny_video_tracker_path()
    assert path == tmp_path / "tiny" / "sam3_tracker_video"
    assert (path / "model.safetensors").read_bytes() == (tiny_folder / "model.safetensors").read_bytes()
    tracker = presets.build_video_tracker("tiny", device="cpu")
    assert tracker is presets.build_video_tracker("tiny", device="cpu", dtype="float32")
    assert isinstance(tracker, Sam3VideoTracker) and tracker.name == str(path)
    with pytest.raises(InputError, match="unknown preset"):
        presets.build_video_tracker("huge")
