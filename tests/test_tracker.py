"""SAM 3's point-prompt backend on the tiny random-weight model: shapes, the embedding cache, load errors."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import photo

from sam3_agent import presets
from sam3_agent.correct.edits import EditState
from sam3_agent.correct.prompted import refine_with_points
from sam3_agent.errors import BackendError, InputError
from sam3_agent.mask_set import Masks
from sam3_agent.sam.tracker import PointSegmenter, Sam3PointSegmenter
from sam3_agent.tiny.tracker import MARKER_FILE, build_tiny_sam3_tracker
from sam3_agent.types import Trace


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return build_tiny_sam3_tracker(tmp_path_factory.mktemp("tracker") / "sam3_tracker")


@pytest.fixture
def tracker(tiny_folder) -> Sam3PointSegmenter:
    return Sam3PointSegmenter.from_pretrained(str(tiny_folder), device="cpu")


def test_a_positive_click_gives_a_boolean_mask_at_the_original_size(tracker):
    coffee = photo("coffee.jpg")  # 600 x 400
    result = tracker.segment_points(coffee, [(60, 40)], [1])
    assert isinstance(tracker, PointSegmenter)
    assert result.mask.dtype == bool and result.mask.shape == (400, 600)
    assert 0 < int(result.mask.sum()) < 400 * 600  # random weights, biased to be non-empty (see tiny/tracker.py)
    assert 0.0 <= result.score <= 1.0


def test_clicks_on_the_same_image_encode_it_once(tracker):
    coffee = photo("coffee.jpg")
    first = tracker.segment_points(coffee, [(60, 40)], [1])
    again = tracker.segment_points(coffee, [(60, 40)], [1])
    both = tracker.segment_points(coffee, [(60, 40), (500, 300)], [1, 0])
    assert tracker.encode_count == 1
    assert np.array_equal(first.mask, again.mask)
    assert both.mask.shape == (400, 600)
    tracker.segment_points(photo("chelsea.jpg"), [(100, 100)], [1])
    assert tracker.encode_count == 2


def test_clicks_outside_the_image_are_refused(tracker):
    with pytest.raises(InputError, match=r"click \(600, 10\) lies outside the 600x400 image"):
        tracker.segment_points(photo("coffee.jpg"), [(600, 10)], [1])
    with pytest.raises(InputError, match="one label"):
        tracker.segment_points(photo("coffee.jpg"), [(6, 10)], [1, 0])
    assert tracker.encode_count == 0


def test_a_missing_model_folder_is_a_backend_error_naming_it(tmp_path):
    missing = tmp_path / "no_such_tracker"
    with pytest.raises(BackendError, match=f"from the folder '{missing}'"):
        Sam3PointSegmenter.from_pretrained(str(missing))


def test_the_tiny_builder_is_idempotent(tiny_folder):
    weights = tiny_folder / "model.safetensors"
    before = weights.stat().st_mtime_ns
    assert build_tiny_sam3_tracker(tiny_folder) == tiny_folder
    assert weights.stat().st_mtime_ns == before and (tiny_folder / MARKER_FILE).is_file()


def test_the_tiny_preset_gives_a_point_segmenter(tmp_path, monkeypatch, tiny_folder):
    monkeypatch.setenv("SAM3_AGENT_CACHE", str(tmp_path))
    path = presets.tiny_tracker_path()
    assert path == tmp_path / "tiny" / "sam3_tracker"
    assert (path / "model.safetensors").read_bytes() == (tiny_folder / "model.safetensors").read_bytes()
    segmenter = presets.build_point_segmenter("tiny", device="cpu")
    assert segmenter.name == str(path)
    assert segmenter.segment_points(photo("coffee.jpg"), [(60, 40)], [1]).mask.shape == (400, 600)


def test_a_refinement_with_the_model_replays_without_it(tracker):
    coffee = photo("coffee.jpg")
    agent_mask = np.zeros((1, 400, 600), dtype=bool)
    agent_mask[0, 10:50, 20:90] = True
    trace = Trace(query="the spoon", image=coffee, status="done",
                  final_masks=Masks(agent_mask, np.array([0.8], np.float32), np.array([[20, 10, 90, 50]], np.float32)))
    state = refine_with_points(EditState.from_trace(trace), 0, coffee, [(60, 40)], [1], tracker)
    expected = tracker.segment_points(coffee, [(60, 40)], [1]).mask
    assert np.array_equal(state.items[0].mask, expected)
    assert np.array_equal(EditState.from_trace(state.to_trace(trace)).items[0].mask, expected)


# ---------------------------------------------------------------- one backbone for detector and point model


@pytest.fixture(scope="module")
def sam3_folder(tmp_path_factory):
    from sam3_agent.tiny.sam3 import build_tiny_sam3

    return build_tiny_sam3(tmp_path_factory.mktemp("sam3") / "sam3")


def test_the_tiny_point_model_shares_the_detectors_backbone_and_masks_stay_the_same(tiny_folder, sam3_folder):
    from sam3_agent.sam.segmenter import Sam3Segmenter

    segmenter = Sam3Segmenter.from_pretrained(str(sam3_folder), device="cpu")
    reference = Sam3PointSegmenter.from_pretrained(str(tiny_folder), device="cpu")  # keeps its own backbone
    shared = Sam3PointSegmenter.from_pretrained(str(tiny_folder), device="cpu")
    assert shared.share_backbone_with(segmenter) is True  # the same backbone weights, as in facebook/sam3
    assert shared.share_backbone_with(segmenter) is True  # idempotent
    # one backbone module in memory, the detector's
    own = list(shared._model.parameters())
    assert all(any(p is q for q in own) for p in segmenter.backbone.parameters())
    coffee = photo("coffee.jpg")
    segmenter.segment(coffee, "cup")
    for points, labels in (([(60, 40)], [1]), ([(300, 200), (500, 300)], [1, 0])):
        expected, got = reference.segment_points(coffee, points, labels), shared.segment_points(coffee, points, labels)
        assert np.array_equal(got.mask, expected.mask) and got.score == expected.score
    assert segmenter.encode_count == 1  # the point model reused the agent's encoding of the photo
    chelsea = photo("chelsea.jpg")  # first seen by the point model: encoded once, then the detector reuses it
    assert np.array_equal(shared.segment_points(chelsea, [(100, 100)], [1]).mask,
                          reference.segment_points(chelsea, [(100, 100)], [1]).mask)
    segmenter.segment(chelsea, "cat")
    assert segmenter.encode_count == 2


def test_a_different_backbone_is_not_shared(tracker, sam3_folder):
    import torch

    from sam3_agent.sam.segmenter import Sam3Segmenter

    segmenter = Sam3Segmenter.from_pretrained(str(sam3_folder), device="cpu")
    backbone = tracker._model.vision_encoder.backbone
    with torch.no_grad():
        next(backbone.parameters()).add_(1e-3)  # one weight off: not the same backbone any more
    assert tracker.share_backbone_with(segmenter) is False
    assert tracker._model.vision_encoder.backbone is backbone
    tracker.segment_points(photo("coffee.jpg"), [(60, 40)], [1])
    assert tracker.encode_count == 1 and segmenter.encode_count == 0
