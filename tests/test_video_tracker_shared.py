"""One vision encoder for the detector and the video tracker: a frame is encoded once for both, masks unchanged; the
image path does not load the video tracker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tracker_reference import PROMPTS
from video_frames import clip_frames, one_torch_thread  # noqa: F401 (a fixture)

from sam3_agent.sam.segmenter import Sam3Segmenter
from sam3_agent.sam.video_tracker import Sam3VideoTracker
from sam3_agent.tiny.sam3 import build_tiny_sam3
from sam3_agent.tiny.tracker_video import build_tiny_sam3_tracker_video

ROOT = Path(__file__).resolve().parents[1]
KEYFRAME, TRACKED = 4, 12

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("shared")
    return build_tiny_sam3(root / "sam3"), build_tiny_sam3_tracker_video(root / "sam3_tracker_video")


@pytest.fixture(scope="module")
def frames():
    return clip_frames(KEYFRAME + TRACKED + 1)


def forward_calls(module: torch.nn.Module) -> list[int]:
    calls: list[int] = []
    module.register_forward_hook(lambda *args: calls.append(1))
    return calls


def run(tracker, frames):
    order = range(KEYFRAME, KEYFRAME + TRACKED + 1)
    return list(tracker.track(((i, frames[i]) for i in order), PROMPTS, num_frames=len(frames)))


def test_a_frame_the_detector_encoded_is_not_encoded_again_by_the_tracker_and_vice_versa(folders, frames):
    sam3_folder, tracker_folder = folders
    segmenter = Sam3Segmenter.from_pretrained(str(sam3_folder), device="cpu")
    reference = Sam3VideoTracker.from_pretrained(str(tracker_folder), device="cpu")  # keeps its own backbone
    shared = Sam3VideoTracker.from_pretrained(str(tracker_folder), device="cpu")
    assert shared.share_backbone_with(segmenter) is True  # the tiny builds share one backbone, as facebook/sam3
    assert shared.share_backbone_with(segmenter) is True  # idempotent
    assert shared._model.vision_encoder.backbone.inner is segmenter.backbone  # one backbone module in memory
    encodes = forward_calls(segmenter.backbone)
    own_encodes = forward_calls(reference._model.vision_encoder.backbone)

    segmenter.segment(frames[KEYFRAME], "bunny")  # the agent on the keyframe
    assert len(encodes) == 1
    ours = run(shared, frames)
    assert len(encodes) == 1 + TRACKED  # the keyframe's encoding reused, each later frame encoded once
    segmenter.segment(frames[KEYFRAME + TRACKED], "bunny")  # the detector on a frame the tracker encoded
    assert len(encodes) == 1 + TRACKED and segmenter.encode_count == 1 + TRACKED

    expected = run(reference, frames)
    assert len(own_encodes) == 1 + TRACKED  # unshared: the tracker encodes the keyframe itself too
    assert [t.frame_index for t in ours] == [t.frame_index for t in expected]
    for got, want in zip(ours, expected):
        assert got.scores == want.scores
        assert all(np.array_equal(got.masks[i], want.masks[i]) for i in want.masks)


def test_a_different_backbone_is_not_shared(folders, frames):
    sam3_folder, tracker_folder = folders
    segmenter = Sam3Segmenter.from_pretrained(str(sam3_folder), device="cpu")
    tracker = Sam3VideoTracker.from_pretrained(str(tracker_folder), device="cpu")
    backbone = tracker._model.vision_encoder.backbone
    with torch.no_grad():
        next(backbone.parameters()).add_(1e-3)  # one weight off: not the same backbone any more
    assert tracker.share_backbone_with(segmenter) is False
    assert tracker._model.vision_encoder.backbone is backbone
    run(tracker, frames)
    assert segmenter.encode_count == 0


def test_the_image_path_does_not_load_the_video_tracker():
    code = (
        "import sys\n"
        "import sam3_agent, sam3_agent.presets, sam3_agent.sam.tracker, sam3_agent.models.gpu_calls\n"
        "import sam3_agent.cli, sam3_agent.agent.loop\n"
        "print(sorted(m for m in sys.modules if 'video_tracker' in m or 'sam3_tracker_video' in m\n"
        "             or 'tracker_video' in m or m.endswith('video_memory')))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
