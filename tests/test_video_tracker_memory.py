"""The video tracker's memory is flat in the clip's length: its state keeps only the model's memory window, and that
window is exactly what the model reads (one frame less changes the output)."""

from __future__ import annotations

import pickle

import pytest
from tracker_reference import PROMPTS, as_tuples, assert_same, transformers_recipe
from video_frames import clip_frames, one_torch_thread  # noqa: F401 (a fixture)

from sam3_agent.sam import video_tracker
from sam3_agent.sam.video_memory import COND, NON_COND, MemoryWindow, memory_window
from sam3_agent.sam.video_tracker import Sam3VideoTracker
from sam3_agent.tiny.tracker_video import build_tiny_sam3_tracker_video

FRAMES = 40

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tracker(tmp_path_factory) -> Sam3VideoTracker:
    folder = build_tiny_sam3_tracker_video(tmp_path_factory.mktemp("tracker_video") / "sam3_tracker_video")
    return Sam3VideoTracker.from_pretrained(str(folder), device="cpu")


@pytest.fixture(scope="module")
def frames():
    return clip_frames(FRAMES)


def tracked_state(tracker, frames, count):
    """The state handed back after tracking frames 1..count-1 from a prompt on frame 0 (``track_chunk``)."""
    *tracked, state = tracker.track_chunk(None, [(i, frames[i]) for i in range(count)], PROMPTS, num_frames=FRAMES)
    assert len(tracked) == count - 1
    return state


def test_the_window_is_facebook_sam3s_memory_sizes(tracker):
    assert memory_window(tracker._model.config, FRAMES) == MemoryWindow(memory_frames=6, pointer_frames=15)
    assert memory_window(tracker._model.config, 5) == MemoryWindow(memory_frames=6, pointer_frames=4)


def test_the_state_keeps_the_prompt_frame_and_only_the_last_window_of_tracked_frames(tracker, frames):
    state = tracked_state(tracker, frames, FRAMES)
    for per_object in state.outputs.values():
        assert list(per_object[COND]) == [0]
        assert sorted(per_object[NON_COND]) == list(range(FRAMES - 15, FRAMES))  # 15 of the 39 tracked frames
        newest = [per_object[NON_COND][f] for f in range(FRAMES - 6, FRAMES)]
        older = [per_object[NON_COND][f] for f in range(FRAMES - 15, FRAMES - 6)]
        assert all(set(kept) == {"maskmem_features", "maskmem_pos_enc", "object_pointer"} for kept in newest)
        assert all(set(kept) == {"object_pointer"} for kept in older)  # only the pointer is read that far back
        assert "high_res_masks" not in per_object[COND][0]


def test_the_state_does_not_grow_with_the_frames_tracked(tracker, frames):
    at_20, at_40 = tracked_state(tracker, frames, 20), tracked_state(tracker, frames, FRAMES)
    assert at_20.nbytes() == at_40.nbytes() > 0
    assert all(t.device.type == "cpu" for t in at_40.tensors())
    assert pickle.loads(pickle.dumps(at_40)).nbytes() == at_40.nbytes()


def test_one_frame_less_of_memory_features_is_a_frame_the_model_reads(tracker, frames, monkeypatch):
    # The trimmed run equals transformers' untrimmed recipe (test_video_tracker); with the memory features of one
    # frame fewer kept, the model asks for the features dropped.
    monkeypatch.setattr(video_tracker, "memory_window", lambda config, num_frames: MemoryWindow(5, 15))
    with pytest.raises(KeyError, match="maskmem_features"):
        list(tracker.track(((i, frames[i]) for i in range(FRAMES)), PROMPTS, num_frames=FRAMES))


def test_one_object_pointer_less_changes_the_output(tracker, frames, monkeypatch):
    # With one frame fewer kept, the model silently does without its pointer: other scores than the recipe's.
    monkeypatch.setattr(video_tracker, "memory_window", lambda config, num_frames: MemoryWindow(6, 14))
    ours = as_tuples(list(tracker.track(((i, frames[i]) for i in range(FRAMES)), PROMPTS, num_frames=FRAMES)))
    with pytest.raises(AssertionError, match="differ on frame 16$"):  # the first frame whose 15th is a tracked one
        assert_same(ours, transformers_recipe(tracker, frames, 0, PROMPTS, reverse=False))
