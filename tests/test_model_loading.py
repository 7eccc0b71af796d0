"""Loading checks: a checkpoint missing weights is refused with the folder and the keys named; facebook/sam3's layout
(detector, tracker and video memory in one checkpoint) loads into both SAM 3 models with nothing missing."""

from __future__ import annotations

import re

import pytest
import torch
from conftest import photo
from sam3_checkpoints import (
    build_tiny_sam3_video,
    checkpoint_weights,
    copy_without,
    resave_with_doubled_prefix,
)

from sam3_agent.errors import BackendError
from sam3_agent.models import loading as model_loading
from sam3_agent.models.loading import check_loading_info, placement
from sam3_agent.presets import tiny_model_paths, tiny_tracker_path
from sam3_agent.sam.segmenter import Sam3Segmenter
from sam3_agent.sam.tracker import Sam3PointSegmenter
from sam3_agent.vlm.transformers_qwen import TransformersQwenVLM


@pytest.fixture(scope="module")
def video_folder(tmp_path_factory):
    return build_tiny_sam3_video(tmp_path_factory.mktemp("sam3_video") / "sam3")


def test_weights_load_straight_onto_a_cuda_device_with_accelerate_but_not_on_zerogpu(monkeypatch):
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    assert placement("cuda") == {"device_map": "cuda"} and placement("cpu") == {}
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")  # ZeroGPU: through host memory, then .to("cuda") is recorded
    assert placement("cuda") == {}


def test_missing_and_misshapen_weights_are_an_error_naming_the_folder_the_count_and_the_keys():
    info = {"missing_keys": {f"layer.{i}.weight" for i in range(10)},
            "mismatched_keys": {("head.weight", (3, 4), (4, 4))}, "unexpected_keys": {"old.bias"}, "error_msgs": []}
    with pytest.raises(BackendError) as raised:
        check_loading_info("/models/x", "the VLM", info)
    assert str(raised.value) == (
        "cannot use the VLM from /models/x: 10 weights the model needs are missing (layer.0.weight, layer.1.weight, "
        "layer.2.weight, layer.3.weight, layer.4.weight, layer.5.weight, layer.6.weight, layer.7.weight and 2 "
        "more); 1 weight has the wrong shape (head.weight), so they would be random. The checkpoint also holds 1 "
        "weight the model does not use (old.bias). Download the checkpoint again, or pass a folder saved with "
        "save_pretrained from the same model class.")
    check_loading_info("/models/x", "the VLM", {"missing_keys": set(), "unexpected_keys": {"old.bias"}})  # only logged


def test_a_sam3_folder_missing_weights_is_refused_with_the_keys(tmp_path):
    sam3, _ = tiny_model_paths()
    removed = copy_without(sam3, tmp_path / "sam3", "mask_decoder.")
    with pytest.raises(BackendError) as raised:
        Sam3Segmenter.from_pretrained(str(tmp_path / "sam3"), device="cpu")
    message = str(raised.value)
    assert message.startswith(f"cannot use SAM 3 from {tmp_path / 'sam3'}: {len(removed)} weights the model needs "
                              f"are missing ({removed[0]}, {removed[1]}")


def test_a_vlm_folder_missing_weights_is_refused_with_the_keys(tmp_path):
    _, vlm = tiny_model_paths()
    removed = copy_without(vlm, tmp_path / "vlm", "model.language_model.layers.0.mlp.")
    assert len(removed) == 3  # gate, up and down projections
    with pytest.raises(BackendError, match=re.escape(
            f"cannot use the VLM from {tmp_path / 'vlm'}: 3 weights the model needs are missing ({', '.join(removed)})")):
        TransformersQwenVLM.from_pretrained(str(tmp_path / "vlm"), device="cpu")


def test_a_point_model_folder_missing_weights_is_refused_with_the_keys(tmp_path):
    # save_pretrained writes the point model in facebook/sam3's naming (tracker_model.*, tracker_neck.*)
    removed = copy_without(tiny_tracker_path(), tmp_path / "tracker", "tracker_model.prompt_encoder.")
    assert len(removed) == 14
    with pytest.raises(BackendError, match=re.escape(
            f"cannot use SAM 3's point-prompt model from {tmp_path / 'tracker'}: {len(removed)} weights")):
        Sam3PointSegmenter.from_pretrained(str(tmp_path / "tracker"), device="cpu")


def test_facebook_sam3s_layout_leaves_exactly_the_other_models_and_the_video_memorys_weights_unused(video_folder):
    """What is legitimately unused: with the model classes' ignore rules switched off, each model leaves exactly the
    other sub-model's keys and the video-only memory modules; with the rules on (as loaded), none is reported."""
    from transformers import Sam3Model, Sam3TrackerModel

    unused = {}
    for model_class in (Sam3Model, Sam3TrackerModel):
        _, info = model_class.from_pretrained(video_folder, output_loading_info=True)
        assert (info["missing_keys"], info["unexpected_keys"], info["mismatched_keys"]) == (set(), set(), set())
        rules = model_class._keys_to_ignore_on_load_unexpected
        model_class._keys_to_ignore_on_load_unexpected = None
        try:
            _, info = model_class.from_pretrained(video_folder, output_loading_info=True)
        finally:
            model_class._keys_to_ignore_on_load_unexpected = rules
        assert info["missing_keys"] == set()
        unused[model_class.__name__] = info["unexpected_keys"]

    keys = set(checkpoint_weights(video_folder))
    # SAM 3's detector leaves the whole tracker: the point model and the video memory, and the tracker's neck
    assert unused["Sam3Model"] == {k for k in keys if k.startswith(("tracker_model.", "tracker_neck."))}
    # the point model reads the detector's vision backbone (one copy in the checkpoint) and leaves the rest of the
    # detector; of the tracker it leaves the video memory modules (reported under their renamed keys)
    detector = {k for k in unused["Sam3TrackerModel"] if k.startswith("detector_model.")}
    assert detector == {k for k in keys if k.startswith("detector_model.")
                        and not k.startswith("detector_model.vision_encoder.backbone.")}
    assert {k.split(".")[0] for k in unused["Sam3TrackerModel"] - detector} == {
        "mask_downsample", "memory_attention", "memory_encoder", "memory_temporal_positional_encoding",
        "no_memory_positional_encoding", "no_object_pointer", "object_pointer_proj",
        "occlusion_spatial_embedding_parameter", "temporal_positional_encoding_projection_layer"}


def test_both_sam3_models_load_from_facebook_sam3s_layout_with_the_checkpoints_weights(video_folder):
    weights = checkpoint_weights(video_folder)
    detector = Sam3Segmenter.from_pretrained(str(video_folder), device="cpu")
    point = Sam3PointSegmenter.from_pretrained(str(video_folder), device="cpu")
    decoder = point._model.mask_decoder.conv_s0.weight
    assert torch.equal(decoder, weights["tracker_model.mask_decoder.conv_s0.weight"])
    neck = point._model.vision_encoder.neck.fpn_layers[0].proj1.weight
    assert torch.equal(neck, weights["tracker_neck.fpn_layers.0.proj1.weight"])
    assert torch.equal(detector._model.text_projection.weight, weights["detector_model.text_projection.weight"])
    assert point.share_backbone_with(detector)  # one backbone in the checkpoint: the same weights in both
    assert point.segment_points(photo("coffee.jpg"), [(300, 120)], [1]).mask.shape == (400, 600)


def test_a_sam3_checkpoint_resaved_with_a_doubled_tracker_prefix_is_refused_with_the_reason(video_folder, tmp_path):
    resave_with_doubled_prefix(video_folder, tmp_path / "resaved")
    Sam3Segmenter.from_pretrained(str(tmp_path / "resaved"), device="cpu")  # the detector's keys are intact
    with pytest.raises(BackendError) as raised:
        Sam3PointSegmenter.from_pretrained(str(tmp_path / "resaved"), device="cpu")
    message = str(raised.value)
    assert f"cannot use SAM 3's point-prompt model from {tmp_path / 'resaved'}: " in message
    assert "weights the model needs are missing (mask_decoder.conv_s0.bias" in message
    assert "the model does not use (tracker_model.mask_decoder.conv_s0.bias" in message  # one prefix stripped
    assert "writes them as tracker_model.tracker_model.*" in message


def test_the_default_device_is_cuda_only_when_available(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert model_loading.default_device() == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert model_loading.default_device() == "cuda"
