"""Tracking on ZeroGPU runs in GPU calls of bounded seconds, a chunk of frames each, with the state between chunks on
the CPU and pickled; chunked output equals unchunked output; each call asks for what its frames need."""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest
from tracker_reference import PROMPTS
from video_frames import clip_frames, one_torch_thread  # noqa: F401 (a fixture)

from sam3_agent.models import gpu_calls, zerogpu
from sam3_agent.models.gpu_calls import GpuVideoTracker, chunk_frames, tracking_seconds
from sam3_agent.sam.video_tracker import Sam3VideoTracker, VideoTracker
from sam3_agent.tiny.tracker_video import build_tiny_sam3_tracker_video

FRAMES = 40
PER_FRAME = gpu_calls.SAM3_TRACK_FRAME_SECONDS + gpu_calls.SAM3_TRACK_OBJECT_SECONDS  # two objects
SEVEN_FRAMES = gpu_calls.CALL_START_SECONDS + 7 * PER_FRAME + 0.01  # a call bound that fits 7 frames of 2 objects

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tracker(tmp_path_factory) -> Sam3VideoTracker:
    folder = build_tiny_sam3_tracker_video(tmp_path_factory.mktemp("tracker_video") / "sam3_tracker_video")
    return Sam3VideoTracker.from_pretrained(str(folder), device="cpu")


@pytest.fixture(scope="module")
def frames():
    return clip_frames(FRAMES)


@pytest.fixture
def calls(monkeypatch):
    """GPU calls as ZeroGPU makes them (arguments and every result pickled across); records each call's frames, the
    seconds it asked for and the state it handed back."""
    record = []

    def pickling_gpu(name, args, kwargs):
        args, kwargs = pickle.loads(pickle.dumps((args, kwargs)))
        call = {"frames": [index for index, _ in args[1]], "seconds": zerogpu.requested_seconds(name, args, kwargs),
                "resumed": args[0] is not None, "state": None}
        record.append(call)
        for item in zerogpu.on_gpu(name, args, kwargs):
            item = pickle.loads(pickle.dumps(item))
            if isinstance(item, tuple) and item[0]:
                call["state"] = item[1]
            yield item

    monkeypatch.setattr(zerogpu, "_decorated", [pickling_gpu])
    return record


def test_the_asks_and_chunk_sizes_follow_the_estimates():
    assert tracking_seconds(100, 1) == pytest.approx(10 + 100 * 0.35)
    assert tracking_seconds(100, 3) == pytest.approx(10 + 100 * (0.35 + 2 * 0.06))
    assert chunk_frames(1, 1280, 720) == 142  # (60 - 10) / 0.35; 720p frames would allow 194 by bytes
    assert chunk_frames(1, 1920, 1080) == 86  # 512 MB of 1080p RGB pixels
    assert chunk_frames(3, 640, 360) == 106  # (60 - 10) / 0.47
    assert chunk_frames(50, 640, 360, call_seconds=10) == 1  # never zero


def test_chunked_tracking_equals_unchunked_with_the_state_on_the_cpu_between_calls(tracker, frames, calls):
    gpu = GpuVideoTracker(tracker, "video", call_seconds=SEVEN_FRAMES)
    assert isinstance(gpu, VideoTracker) and gpu.name == tracker.name
    order = range(3, FRAMES)
    chunked = list(gpu.track(((i, frames[i]) for i in order), PROMPTS, num_frames=FRAMES))
    whole = list(tracker.track(((i, frames[i]) for i in order), PROMPTS, num_frames=FRAMES))
    assert [c["frames"][0] for c in calls] == [3, 10, 17, 24, 31, 38]  # 7 frames a call, the prompt frame first
    assert [len(c["frames"]) for c in calls] == [7, 7, 7, 7, 7, 2]
    assert [c["resumed"] for c in calls] == [False] + [True] * 5
    assert [c["seconds"] for c in calls] == [13, 13, 13, 13, 13, 11]  # 10 s start + 0.41 s a frame, rounded up
    assert all(c["state"] is not None and all(t.device.type == "cpu" for t in c["state"].tensors()) for c in calls)
    assert [t.frame_index for t in chunked] == list(range(4, FRAMES))
    for got, want in zip(chunked, whole):
        assert got.scores == want.scores
        assert all(np.array_equal(got.masks[i], want.masks[i]) for i in want.masks)


def test_a_stop_sends_nothing_more(tracker, frames, calls):
    gpu = GpuVideoTracker(tracker, "video", call_seconds=SEVEN_FRAMES)
    stop = threading.Event()
    tracked = []
    for item in gpu.track(((i, frames[i]) for i in range(FRAMES)), PROMPTS, num_frames=FRAMES, stop=stop):
        tracked.append(item.frame_index)
        if item.frame_index == 8:
            stop.set()
    assert tracked == list(range(1, 9)) and len(calls) == 2
