"""Tiny checkpoints with ``facebook/sam3``'s key layout, and folders with weights taken out, for loading tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from sam3_agent.presets import tiny_model_paths

WEIGHTS = "model.safetensors"


def _tiny_video_model(seed: int):
    """A ``Sam3VideoModel`` with the tiny SAM 3 detector and a tracker of the tiny point model's sizes."""
    from transformers import Sam3TrackerVideoConfig, Sam3VideoConfig, Sam3VideoModel

    from sam3_agent.tiny.sam3 import IMAGE_SIZE, tiny_sam3_config
    from sam3_agent.tiny.tracker import tiny_sam3_tracker_config

    tracker = tiny_sam3_tracker_config()
    video_tracker = Sam3TrackerVideoConfig(
        vision_config=tracker.vision_config, prompt_encoder_config=tracker.prompt_encoder_config,
        mask_decoder_config=tracker.mask_decoder_config, memory_attention_hidden_size=32,
        memory_encoder_hidden_size=32, memory_encoder_output_channels=16, mask_downsampler_embed_dim=32,
        memory_fuser_embed_dim=32, memory_attention_num_layers=1, memory_fuser_intermediate_dim=64,
        memory_attention_feed_forward_hidden_size=64, memory_attention_num_attention_heads=1,
    )
    video_tracker.image_size = IMAGE_SIZE  # also sets the feature map sizes (the default is 1008 px)
    config = Sam3VideoConfig(detector_config=tiny_sam3_config().to_dict(), tracker_config=video_tracker.to_dict())
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Sam3VideoModel(config).eval()


def build_tiny_sam3_video(folder: Path, seed: int = 0) -> Path:
    """A tiny ``sam3_video`` checkpoint laid out as ``facebook/sam3`` on the Hub: ``detector_model.*`` (SAM 3),
    ``tracker_model.*`` (the point model and the video memory modules) and ``tracker_neck.*`` in one
    ``model.safetensors``, with the tiny SAM 3's processor files. Written key by key (``save_pretrained`` of
    transformers 5.24 would write ``tracker_model.tracker_model.*``, see :func:`resave_with_doubled_prefix`)."""
    folder.mkdir(parents=True, exist_ok=True)
    model = _tiny_video_model(seed)
    model.config.save_pretrained(folder)
    weights: dict[str, torch.Tensor] = {}
    storages: set[int] = set()
    for key, tensor in model.state_dict().items():
        tensor = tensor.contiguous()
        if tensor.untyped_storage().data_ptr() in storages:  # safetensors refuses shared storage
            tensor = tensor.clone()
        storages.add(tensor.untyped_storage().data_ptr())
        weights[key] = tensor
    save_file(weights, str(folder / WEIGHTS), metadata={"format": "pt"})
    sam3, _ = tiny_model_paths()
    for name in ("processor_config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(sam3 / name, folder / name)
    return folder


def checkpoint_weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / WEIGHTS))


def copy_without(source: Path, target: Path, drop: str) -> list[str]:
    """Copy the checkpoint folder ``source`` to ``target`` without the weights whose key starts with ``drop``;
    returns the keys left out."""
    shutil.copytree(source, target)
    weights = checkpoint_weights(source)
    removed = sorted(key for key in weights if key.startswith(drop))
    save_file({k: v for k, v in weights.items() if k not in removed}, str(target / WEIGHTS), metadata={"format": "pt"})
    return removed


def resave_with_doubled_prefix(source: Path, target: Path) -> None:
    """What ``Sam3VideoModel.from_pretrained(source).save_pretrained(target)`` writes with transformers 5.24: every
    tracker weight under ``tracker_model.tracker_model.*``."""
    shutil.copytree(source, target)
    weights = checkpoint_weights(source)
    renamed = {("tracker_model." + k if k.startswith("tracker_model.") else k): v for k, v in weights.items()}
    save_file(renamed, str(target / WEIGHTS), metadata={"format": "pt"})
