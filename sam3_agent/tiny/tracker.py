"""A tiny random-weight SAM 3 point-prompt model (transformers ``Sam3TrackerModel``) for offline tests.

The architecture and the processor are the real ones (``Sam3TrackerModel`` with SAM 3's ViT + FPN vision encoder,
the SAM 2-style prompt encoder and mask decoder, ``Sam3TrackerProcessor`` over ``Sam3ImageProcessor``); only the sizes
are shrunk to those of :mod:`sam3_agent.tiny.sam3` (hidden size 32, two ViT layers, 112 px input instead of 1008 px).
The folder written by :func:`build_tiny_sam3_tracker` loads with ``Sam3TrackerModel.from_pretrained`` /
``Sam3TrackerProcessor.from_pretrained`` exactly as ``facebook/sam3`` does.

Random weights: masks are meaningless. See :func:`build_tiny_sam3_tracker` for the bias that keeps them non-empty.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from torch import nn

from .checkpoint import is_built, json_signature, save_model_and_processor, seeded_model, write_checkpoint
from .sam3 import HIDDEN_SIZE, IMAGE_SIZE, PATCH_SIZE, randomize_weights, tiny_sam3_model

logger = logging.getLogger(__name__)

BUILD_VERSION = 2  # 2: the vision backbone is the tiny SAM 3's, as in facebook/sam3
"""Bump when the built model changes; folders with an older marker are rebuilt."""

MARKER_FILE = "sam3_agent_tiny_tracker.json"

MASK_LOGIT_OFFSET = 0.3
"""Constant added to every mask logit of the tiny model (see :func:`build_tiny_sam3_tracker`).

Without it a click of seed 0 covered 2-90 % of the image (some clicks on rocket.jpg got about 1 %); with +0.3 every
one-click mask on the photos in ``assets/`` covers 29-93 % of the image (measured for seed 0, build version 2: 4
photos x a 3 x 3 grid of clicks). Larger offsets fill whole images; smaller ones leave near-empty masks."""


def tiny_sam3_tracker_config():
    """The shrunken ``Sam3TrackerConfig``: SAM 3's vision encoder as in ``tiny.sam3``, prompt encoder and mask
    decoder at hidden size 32, 112 px input (8 x 8 patches of 14 px; FPN maps of 32, 16 and 8 px)."""
    from transformers import Sam3TrackerConfig, Sam3VisionConfig, Sam3ViTConfig
    from transformers.models.sam3_tracker.configuration_sam3_tracker import (
        Sam3TrackerMaskDecoderConfig,
        Sam3TrackerPromptEncoderConfig,
    )

    grid = IMAGE_SIZE // PATCH_SIZE
    backbone = Sam3ViTConfig(
        hidden_size=HIDDEN_SIZE,
        num_attention_heads=2,
        intermediate_size=2 * HIDDEN_SIZE,
        num_hidden_layers=2,
        image_size=IMAGE_SIZE,
        patch_size=PATCH_SIZE,
        window_size=grid // 2,
        global_attn_indexes=[1],
        pretrain_image_size=IMAGE_SIZE // 2,
    )
    vision = Sam3VisionConfig(
        backbone_config=backbone,
        fpn_hidden_size=HIDDEN_SIZE,
        backbone_feature_sizes=[[4 * grid, 4 * grid], [2 * grid, 2 * grid], [grid, grid]],
    )
    return Sam3TrackerConfig(
        vision_config=vision,
        prompt_encoder_config=Sam3TrackerPromptEncoderConfig(
            hidden_size=HIDDEN_SIZE, image_size=IMAGE_SIZE, patch_size=PATCH_SIZE
        ),
        mask_decoder_config=Sam3TrackerMaskDecoderConfig(
            hidden_size=HIDDEN_SIZE, mlp_dim=2 * HIDDEN_SIZE, num_attention_heads=2, iou_head_hidden_dim=HIDDEN_SIZE
        ),
    )


@torch.no_grad()
def bias_masks(model: nn.Module, offset: float = MASK_LOGIT_OFFSET) -> None:
    """Add ``offset`` (default MASK_LOGIT_OFFSET) to every mask logit of a SAM 2-style mask decoder (the point
    model's, and the video tracker's of ``tiny.tracker_video``).

    A mask logit is ``hyper(token) . upscaled(pixel)`` over hidden/8 channels. Channel 0 of the upscaled embedding is
    made the constant ``gelu(1)`` (its weights in ``upscale_conv2`` and ``conv_s0`` zeroed, ``upscale_conv2`` bias 1)
    and the last layer of every hypernetwork MLP outputs the constant ``offset / gelu(1)`` in channel 0.
    """
    decoder = model.mask_decoder
    decoder.upscale_conv2.weight[:, 0].zero_()
    decoder.upscale_conv2.bias[0] = 1.0
    decoder.conv_s0.weight[0].zero_()
    decoder.conv_s0.bias[0] = 0.0
    gelu_one = float(nn.functional.gelu(torch.tensor(1.0)))
    for mlp in decoder.output_hypernetworks_mlps:
        mlp.proj_out.weight[0].zero_()
        mlp.proj_out.bias[0] = offset / gelu_one


def _signature(seed: int) -> str:
    return json_signature(__name__, BUILD_VERSION, seed)


def build_tiny_sam3_tracker(out_dir: Path, seed: int = 0) -> Path:
    """Build (once) a tiny random-weight SAM 3 point-prompt checkpoint with its processor in ``out_dir``.

    The folder then holds ``config.json``, ``model.safetensors`` and ``processor_config.json``, so
    ``Sam3PointSegmenter.from_pretrained(str(out_dir))`` loads it the way it loads ``facebook/sam3``, offline.
    About 125 k parameters; one click on a cached image takes a few milliseconds on a CPU.

    Random weights, drawn with std 1/sqrt(fan_in) from ``seed``; masks are meaningless. As in ``facebook/sam3``,
    whose one vision backbone serves the detector and the point model, the backbone weights are those of the tiny
    SAM 3 of the same seed (``tiny.sam3.tiny_sam3_model``), so ``Sam3PointSegmenter.share_backbone_with`` applies.
    Bias set on purpose: every mask logit is raised by MASK_LOGIT_OFFSET so that a click always yields a non-empty
    mask on a real photo.

    Idempotent: a marker file records the build version and seed; when it matches, nothing is rebuilt. Files are
    written to a temporary sibling folder and moved in, the marker last.

    Args:
        out_dir: folder to write (created if needed).
        seed: seed of the random weights.

    Returns:
        ``out_dir``.
    """
    from transformers import Sam3ImageProcessor, Sam3TrackerModel, Sam3TrackerProcessor

    out_dir = Path(out_dir)
    if is_built(out_dir, MARKER_FILE, _signature(seed)):
        logger.debug("tiny SAM 3 tracker already built in %s", out_dir)
        return out_dir

    logger.info("building tiny SAM 3 tracker (seed %d) in %s", seed, out_dir)
    model = seeded_model(lambda: Sam3TrackerModel(tiny_sam3_tracker_config()), seed)
    randomize_weights(model, torch.Generator().manual_seed(seed))
    bias_masks(model)
    model.vision_encoder.backbone.load_state_dict(tiny_sam3_model(seed).vision_encoder.backbone.state_dict())
    grid = IMAGE_SIZE // PATCH_SIZE
    processor = Sam3TrackerProcessor(
        image_processor=Sam3ImageProcessor(
            size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}, mask_size={"height": 4 * grid, "width": 4 * grid}
        )
    )

    write_checkpoint(out_dir, MARKER_FILE, _signature(seed), save_model_and_processor(model, processor))
    return out_dir
