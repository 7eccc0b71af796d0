"""Tiny random-weight SAM 3 video models for offline tests: the mask-prompt tracker and the text-prompted video model.

:func:`build_tiny_sam3_tracker_video` writes a ``Sam3TrackerVideoModel`` checkpoint (the tracker behind
``sam.video_tracker``); :func:`build_tiny_sam3_video` writes a ``Sam3VideoModel`` checkpoint laid out as
``facebook/sam3`` is (``detector_model.*``, ``tracker_model.*``, ``tracker_neck.*``), from which ``Sam3VideoModel``,
``Sam3TrackerVideoModel`` and ``Sam3Model`` all load (the video benchmark's newcomer mode uses it). The architectures
and processors are the real ones; the sizes are shrunk to 112 px input (8 x 8 patches of 14 px) around the ViT of
:mod:`sam3_agent.tiny.sam3` (hidden size 32, two layers), whose weights they reuse, as ``facebook/sam3`` stores one
vision backbone for the detector and the tracker.

The tracker is 128 wide, not 32: its memory cross-attention takes keys 64 wide (fixed in transformers' code), and the
object pointers are split into memory-width pieces only when the tracker is wider than that (at 64 they keep an extra
axis and propagation fails in ``torch.cat``). The text-prompted model's tracker neck is built from the *detector's*
vision config, so its detector's FPN (and with it the DETR encoder, decoder, geometry encoder and mask decoder, which
read the FPN maps) is 128 wide too; its text encoder stays 32 wide (``text_projection`` maps it to 128).

Random weights: masks are meaningless. Biases set on purpose keep them non-empty (see the constants).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from .checkpoint import is_built, json_signature, save_model_and_processor, seeded_model, write_checkpoint
from .sam3 import (
    IMAGE_SIZE,
    PATCH_SIZE,
    bias_scores,
    build_clip_tokenizer,
    randomize_weights,
    tiny_sam3_config,
    tiny_sam3_model,
)
from .tracker import bias_masks, tiny_sam3_tracker_config

logger = logging.getLogger(__name__)

BUILD_VERSION = 1
"""Bump when a built model changes; folders with an older marker are rebuilt."""

TRACKER_MARKER_FILE = "sam3_agent_tiny_tracker_video.json"
VIDEO_MARKER_FILE = "sam3_agent_tiny_video.json"

TRACKER_WIDTH = 128  # above the memory width: see the module docstring
MEMORY_WIDTH = 64  # memory_encoder_output_channels: the width transformers' memory cross-attention takes
LOW_RES_MASK_SIZE = 4 * (IMAGE_SIZE // PATCH_SIZE)  # the tracker's mask logits: 32 x 32 (real model: 288 x 288)

OBJECT_SCORE_LOGIT_BIAS = 1.0
"""Bias of the object-score head's last layer. Without it the tiny tracker's object score logits on the real clip
were -0.11 to -0.03, so every tracked object was "gone" and every mask empty; with +1.0 they are 0.88 to 1.00 (scores
about 0.71-0.73; measured for seed 0 on 60 frames of Big Buck Bunny at 320 x 180, prompts on frames 0, 30, 59)."""

MASK_LOGIT_OFFSET = -1.0
"""Constant added to every mask logit (``tiny.tracker.bias_masks``). With the score bias alone a rectangle prompt's
tracked masks covered 78-83 % of every frame; with -1.0 they cover 50-59 % (same measurement): neither empty nor
whole frames, and different from frame to frame."""


def tiny_sam3_tracker_video_config():
    """The shrunken ``Sam3TrackerVideoConfig``: the tiny SAM 3 ViT with a 128-wide FPN, prompt encoder, mask decoder,
    memory attention (1 layer) and memory encoder, memory 64 wide, 112 px input, ``facebook/sam3``'s memory sizes
    (``num_maskmem`` 7, 16 object pointers)."""
    from transformers import Sam3TrackerVideoConfig
    from transformers.models.sam3_tracker_video.configuration_sam3_tracker_video import (
        Sam3TrackerVideoMaskDecoderConfig,
        Sam3TrackerVideoPromptEncoderConfig,
    )

    vision = tiny_sam3_tracker_config().vision_config
    vision.fpn_hidden_size = TRACKER_WIDTH
    grid = IMAGE_SIZE // PATCH_SIZE
    return Sam3TrackerVideoConfig(
        vision_config=vision,
        prompt_encoder_config=Sam3TrackerVideoPromptEncoderConfig(
            hidden_size=TRACKER_WIDTH, image_size=IMAGE_SIZE, patch_size=PATCH_SIZE
        ),
        mask_decoder_config=Sam3TrackerVideoMaskDecoderConfig(
            hidden_size=TRACKER_WIDTH, mlp_dim=2 * TRACKER_WIDTH, num_attention_heads=2,
            iou_head_hidden_dim=TRACKER_WIDTH,
        ),
        memory_attention_hidden_size=TRACKER_WIDTH,
        memory_attention_num_layers=1,
        memory_attention_feed_forward_hidden_size=2 * TRACKER_WIDTH,
        memory_attention_rope_feat_sizes=[grid, grid],
        memory_encoder_hidden_size=TRACKER_WIDTH,
        memory_encoder_output_channels=MEMORY_WIDTH,
        mask_downsampler_embed_dim=TRACKER_WIDTH,
        memory_fuser_embed_dim=TRACKER_WIDTH,
        memory_fuser_intermediate_dim=2 * TRACKER_WIDTH,
        image_size=IMAGE_SIZE,
    )


def tiny_sam3_tracker_video_model(seed: int = 0):
    """The tiny ``Sam3TrackerVideoModel`` that :func:`build_tiny_sam3_tracker_video` saves for ``seed`` (eval, CPU):
    weights drawn with std 1/sqrt(fan_in), the two biases of this module, the tiny SAM 3's backbone."""
    from transformers import Sam3TrackerVideoModel

    model = seeded_model(lambda: Sam3TrackerVideoModel(tiny_sam3_tracker_video_config()), seed)
    randomize_weights(model, torch.Generator().manual_seed(seed))
    bias_masks(model, MASK_LOGIT_OFFSET)
    with torch.no_grad():
        model.mask_decoder.pred_obj_score_head.proj_out.bias.fill_(OBJECT_SCORE_LOGIT_BIAS)
    model.vision_encoder.backbone.load_state_dict(tiny_sam3_model(seed).vision_encoder.backbone.state_dict())
    return model


def _video_processor():
    """``Sam2VideoVideoProcessor`` at 112 px with SAM 3's mean/std 0.5 (its defaults are ImageNet's), so a clip's
    frames get the very pixels ``Sam3ImageProcessor`` gives each of them (transformers 5.24 has no Sam3-named video
    processor class)."""
    from transformers.models.sam2_video.video_processing_sam2_video import Sam2VideoVideoProcessor

    return Sam2VideoVideoProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}, image_mean=[0.5] * 3,
                                   image_std=[0.5] * 3)


def _image_processor():
    from transformers import Sam3ImageProcessor

    return Sam3ImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
                              mask_size={"height": LOW_RES_MASK_SIZE, "width": LOW_RES_MASK_SIZE})


def build_tiny_sam3_tracker_video(out_dir: Path, seed: int = 0) -> Path:
    """Build (once) a tiny random-weight ``Sam3TrackerVideoModel`` checkpoint with its processor in ``out_dir``.

    The folder then holds ``config.json``, ``model.safetensors`` and ``processor_config.json``, so
    ``Sam3VideoTracker.from_pretrained(str(out_dir))`` loads it the way it loads ``facebook/sam3``, offline. About
    1.9 M parameters; one tracked frame with two objects takes about 10-20 ms on a CPU. Its vision backbone is the
    tiny SAM 3's of the same seed, so ``Sam3VideoTracker.share_backbone_with`` applies.

    Idempotent: a marker file records the build version and seed; when it matches, nothing is rebuilt. Files are
    written to a temporary sibling folder and moved in, the marker last.

    Returns:
        ``out_dir``.
    """
    from transformers import Sam3TrackerVideoProcessor

    out_dir = Path(out_dir)
    signature = json_signature(f"{__name__}.tracker", BUILD_VERSION, seed)
    if is_built(out_dir, TRACKER_MARKER_FILE, signature):
        logger.debug("tiny SAM 3 video tracker already built in %s", out_dir)
        return out_dir
    logger.info("building tiny SAM 3 video tracker (seed %d) in %s", seed, out_dir)
    model = tiny_sam3_tracker_video_model(seed)
    processor = Sam3TrackerVideoProcessor(image_processor=_image_processor(), video_processor=_video_processor())
    write_checkpoint(out_dir, TRACKER_MARKER_FILE, signature, save_model_and_processor(model, processor))
    return out_dir


def tiny_sam3_video_config():
    """The shrunken ``Sam3VideoConfig``: a 128-wide detector around the tiny SAM 3's ViT and CLIP text encoder, and
    the tracker of :func:`tiny_sam3_tracker_video_config` (module docstring: why 128)."""
    from transformers import Sam3VideoConfig

    detector = tiny_sam3_config()
    detector.vision_config.fpn_hidden_size = TRACKER_WIDTH
    for part in (detector.detr_encoder_config, detector.detr_decoder_config, detector.geometry_encoder_config):
        part.hidden_size = TRACKER_WIDTH
        part.intermediate_size = 2 * TRACKER_WIDTH
    detector.mask_decoder_config.hidden_size = TRACKER_WIDTH
    return Sam3VideoConfig(detector_config=detector, tracker_config=tiny_sam3_tracker_video_config(),
                           low_res_mask_size=LOW_RES_MASK_SIZE)


def tiny_sam3_video_model(seed: int = 0):
    """The tiny ``Sam3VideoModel`` that :func:`build_tiny_sam3_video` saves for ``seed`` (eval, CPU): its detector's
    weights drawn with std 1/sqrt(fan_in) and biased as the tiny SAM 3's (``tiny.sam3.bias_scores``), its tracker
    and tracker neck those of :func:`tiny_sam3_tracker_video_model`, its backbone the tiny SAM 3's."""
    from transformers import Sam3VideoModel

    model = seeded_model(lambda: Sam3VideoModel(tiny_sam3_video_config()), seed)
    detector = model.detector_model
    randomize_weights(detector, torch.Generator().manual_seed(seed))
    bias_scores(detector)
    detector.vision_encoder.backbone.load_state_dict(tiny_sam3_model(seed).vision_encoder.backbone.state_dict())
    tracker = tiny_sam3_tracker_video_model(seed)
    own = {k: v for k, v in tracker.state_dict().items() if not k.startswith("vision_encoder.")}
    model.tracker_model.load_state_dict(own)
    model.tracker_neck.load_state_dict(tracker.vision_encoder.neck.state_dict())
    return model


def _save_video_checkpoint(model, processor):
    """A ``save`` for ``checkpoint.write_checkpoint``: ``save_pretrained``, then the tracker's keys renamed from
    ``tracker_model.tracker_model.*`` (how transformers 5.24's ``Sam3VideoModel.save_pretrained`` writes them, which
    its ``Sam3TrackerModel`` cannot read) to ``tracker_model.*``, as ``facebook/sam3`` stores them."""
    from safetensors.torch import load_file, save_file

    def save(staging: Path) -> None:
        save_model_and_processor(model, processor)(staging)
        weights = staging / "model.safetensors"
        tensors = load_file(weights)
        doubled = "tracker_model.tracker_model."
        renamed = {("tracker_model." + k[len(doubled):] if k.startswith(doubled) else k): v for k, v in tensors.items()}
        save_file(renamed, weights, metadata={"format": "pt"})

    return save


def build_tiny_sam3_video(out_dir: Path, seed: int = 0) -> Path:
    """Build (once) a tiny random-weight ``Sam3VideoModel`` checkpoint laid out as ``facebook/sam3`` in ``out_dir``.

    ``Sam3VideoModel`` / ``Sam3VideoProcessor`` (text-prompted detection and tracking), ``Sam3TrackerVideoModel`` /
    ``Sam3TrackerVideoProcessor`` and ``Sam3Model`` / ``Sam3Processor`` load from it offline (about 6.4 M parameters,
    1.6 M of them the CLIP token embedding). Idempotent, written as :func:`build_tiny_sam3_tracker_video` is.

    Raises:
        FileNotFoundError: the CLIP BPE vocabulary (open_clip_torch wheel) is not installed.
    """
    from transformers import Sam3VideoProcessor

    out_dir = Path(out_dir)
    signature = json_signature(f"{__name__}.video", BUILD_VERSION, seed)
    if is_built(out_dir, VIDEO_MARKER_FILE, signature):
        logger.debug("tiny SAM 3 video model already built in %s", out_dir)
        return out_dir
    logger.info("building tiny SAM 3 video model (seed %d) in %s", seed, out_dir)
    processor = Sam3VideoProcessor(image_processor=_image_processor(), video_processor=_video_processor(),
                                   tokenizer=build_clip_tokenizer())
    write_checkpoint(out_dir, VIDEO_MARKER_FILE, signature, _save_video_checkpoint(tiny_sam3_video_model(seed),
                                                                                   processor))
    return out_dir
