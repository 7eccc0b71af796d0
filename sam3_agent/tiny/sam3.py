"""A tiny random-weight SAM 3 (transformers ``Sam3Model``) saved like a real checkpoint, for offline tests.

The architecture and the processor are the real ones; only the sizes are shrunk (hidden size 32, one or two
layers, 112 px input instead of 1008 px) and the CLIP tokenizer is rebuilt from the BPE vocabulary that ships
inside the ``open_clip_torch`` wheel. The folder written by :func:`build_tiny_sam3` loads with
``Sam3Model.from_pretrained`` / ``Sam3Processor.from_pretrained`` exactly as ``facebook/sam3`` does.

Random weights: masks are meaningless. They follow the image content only in the sense that any random
network's output does.
"""

from __future__ import annotations

import gzip
import logging
import math
from pathlib import Path

import torch
from torch import nn

from .checkpoint import (
    is_built,
    json_signature,
    redraw_by_fan_in,
    save_model_and_processor,
    seeded_model,
    write_checkpoint,
)

logger = logging.getLogger(__name__)

BUILD_VERSION = 1
"""Bump when the built model changes; folders with an older marker are rebuilt."""

MARKER_FILE = "sam3_agent_tiny.json"

IMAGE_SIZE = 112
"""Input side in pixels shared by the processor and the model: 8 x 8 patches of 14 px (real model: 1008 = 72 x 14)."""

PATCH_SIZE = 14  # the real ViT's patch size; kept so the tiny model exercises the same patching code
HIDDEN_SIZE = 32  # divisible by 8 (GroupNorm(8, .) in the pixel decoder) and by 2 heads of 16 (axial RoPE needs /4)
TEXT_MAX_TOKENS = 32  # Sam3Processor pads every prompt to 32 tokens; the text model's positions must match
CLIP_VOCAB_SIZE = 49408  # 256 bytes + 256 end-of-word bytes + 48,894 merges + 2 special tokens
CLIP_MERGES = CLIP_VOCAB_SIZE - 512 - 2
NUM_QUERIES = 16  # real model: 200

# Score bias (see build_tiny_sam3), tuned for seed 0: scores sigmoid(logit) * sigmoid(presence) then land in about
# 0.4-0.9 on the photos in assets/, so that 6 to 16 of the 16 queries pass 0.5 for any phrase tried (measured on
# 4 photos x 6 phrases); other seeds shift the scores and may pass fewer.
QUERY_SCORE_OFFSET = 1.0  # added to every query's class logit
PRESENCE_LOGIT_BIAS = 3.0  # presence head output bias: sigmoid(3) ~ 0.95


def _clip_bpe_path() -> Path:
    """The CLIP BPE merges file shipped inside the installed open_clip_torch wheel.

    Raises:
        FileNotFoundError: open_clip_torch is not installed or does not ship the file.
    """
    try:
        import open_clip
    except ImportError as exc:
        raise FileNotFoundError(
            "the tiny SAM 3 tokenizer is built from bpe_simple_vocab_16e6.txt.gz, which ships in the "
            "open_clip_torch wheel; install it with `pip install open_clip_torch`"
        ) from exc
    path = Path(open_clip.__file__).parent / "bpe_simple_vocab_16e6.txt.gz"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; reinstall open_clip_torch")
    return path


def build_clip_tokenizer():
    """A CLIP tokenizer (``transformers.CLIPTokenizer``) with the real 49,408-token vocabulary, built offline.

    The vocabulary is laid out as CLIP's: the 256 byte symbols, the same with ``</w>``, one token per merge in
    merge order, then ``<|startoftext|>`` (49406) and ``<|endoftext|>`` (49407, also padding).
    """
    from transformers import CLIPTokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    lines = gzip.decompress(_clip_bpe_path().read_bytes()).decode("utf-8").split("\n")
    merges = [tuple(line.split()) for line in lines[1 : 1 + CLIP_MERGES]]  # line 0 is a version header
    byte_symbols = list(bytes_to_unicode().values())
    tokens = byte_symbols + [s + "</w>" for s in byte_symbols] + ["".join(m) for m in merges]
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    vocab = {token: index for index, token in enumerate(tokens)}
    if len(vocab) != CLIP_VOCAB_SIZE:
        raise ValueError(f"built a CLIP vocabulary of {len(vocab)} tokens, expected {CLIP_VOCAB_SIZE}")
    return CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=TEXT_MAX_TOKENS)


def tiny_sam3_config():
    """The shrunken ``Sam3Config``: every sub-config of the real model, hidden size 32, 1-2 layers, 112 px."""
    from transformers import (
        CLIPTextConfig,
        Sam3Config,
        Sam3DETRDecoderConfig,
        Sam3DETREncoderConfig,
        Sam3GeometryEncoderConfig,
        Sam3MaskDecoderConfig,
        Sam3VisionConfig,
        Sam3ViTConfig,
    )

    small = dict(hidden_size=HIDDEN_SIZE, num_attention_heads=2, intermediate_size=2 * HIDDEN_SIZE)
    grid = IMAGE_SIZE // PATCH_SIZE
    backbone = Sam3ViTConfig(
        **small,
        num_hidden_layers=2,
        image_size=IMAGE_SIZE,
        patch_size=PATCH_SIZE,
        window_size=grid // 2,  # layer 0 windowed (4 x 4 patches), layer 1 global, like the real mix
        global_attn_indexes=[1],
        pretrain_image_size=IMAGE_SIZE // 2,  # position embeddings tiled 2 x 2, as the real model tiles 24 -> 72
    )
    vision = Sam3VisionConfig(
        backbone_config=backbone,
        fpn_hidden_size=HIDDEN_SIZE,
        backbone_feature_sizes=[[4 * grid, 4 * grid], [2 * grid, 2 * grid], [grid, grid]],
    )
    text = CLIPTextConfig(
        vocab_size=CLIP_VOCAB_SIZE,
        hidden_size=HIDDEN_SIZE,
        intermediate_size=2 * HIDDEN_SIZE,
        projection_dim=HIDDEN_SIZE,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=TEXT_MAX_TOKENS,
        hidden_act="gelu",
        bos_token_id=49406,
        eos_token_id=49407,
        pad_token_id=49407,
    )
    return Sam3Config(
        vision_config=vision,
        text_config=text,
        geometry_encoder_config=Sam3GeometryEncoderConfig(**small, num_layers=1),
        detr_encoder_config=Sam3DETREncoderConfig(**small, num_layers=1),
        detr_decoder_config=Sam3DETRDecoderConfig(**small, num_layers=1, num_queries=NUM_QUERIES),
        mask_decoder_config=Sam3MaskDecoderConfig(hidden_size=HIDDEN_SIZE, num_attention_heads=2),
    )


@torch.no_grad()
def randomize_weights(model: nn.Module, generator: torch.Generator) -> None:
    """Redraw weights with ``checkpoint.redraw_by_fan_in`` (std 1/sqrt(fan_in), embeddings std 1, biases 0, norms
    untouched), then the ViT's position embeddings with std 1.

    Shared by the tiny SAM 3 and the tiny SAM 3 tracker (both have SAM 3's vision backbone).
    """
    redraw_by_fan_in(model, generator)
    positions = model.vision_encoder.backbone.embeddings.position_embeddings
    positions.copy_(torch.randn(positions.shape, generator=generator))


@torch.no_grad()
def bias_scores(model: nn.Module) -> None:
    """Shift the detection scores so that random weights still yield detections above 0.5.

    The class logit of a query is ``query_proj(q) . text_proj(t) / sqrt(d)``; zeroing row 0 of both projections
    and giving it bias ``a`` adds the constant ``a * a / sqrt(d)`` = QUERY_SCORE_OFFSET to every logit. The
    presence head's last bias is set to PRESENCE_LOGIT_BIAS.
    """
    scoring = model.dot_product_scoring
    dim = scoring.query_proj.out_features
    a = math.sqrt(QUERY_SCORE_OFFSET * math.sqrt(dim))
    for projection in (scoring.query_proj, scoring.text_proj):
        projection.weight[0].zero_()
        projection.bias[0] = a
    model.detr_decoder.presence_head.layer3.bias.fill_(PRESENCE_LOGIT_BIAS)


def _signature(seed: int) -> str:
    return json_signature(__name__, BUILD_VERSION, seed)


def tiny_sam3_model(seed: int = 0):
    """The tiny ``Sam3Model`` with the random weights ``build_tiny_sam3`` saves for ``seed`` (eval mode, CPU)."""
    from transformers import Sam3Model

    model = seeded_model(lambda: Sam3Model(tiny_sam3_config()), seed)
    randomize_weights(model, torch.Generator().manual_seed(seed))
    bias_scores(model)
    return model


def build_tiny_sam3(out_dir: Path, seed: int = 0) -> Path:
    """Build (once) a tiny random-weight SAM 3 checkpoint with its processor in ``out_dir``.

    The folder then holds ``config.json``, ``model.safetensors``, ``processor_config.json`` and tokenizer
    files, so ``Sam3Segmenter.from_pretrained(str(out_dir))`` loads it the way it loads ``facebook/sam3``,
    offline. About 1.8 M parameters (1.6 M of them the 49,408 x 32 token embedding); one 112 px forward takes
    milliseconds on a CPU.

    Random weights: masks are meaningless. Weights are drawn with std 1/sqrt(fan_in) from ``seed`` and the score
    head is biased on purpose (QUERY_SCORE_OFFSET, PRESENCE_LOGIT_BIAS) so that scores on real photos fall
    mostly in 0.5-0.9: the agent's code paths see detections above the usual 0.5 threshold, and a few below it.

    Idempotent: a marker file records the build version and seed; when it matches, nothing is rebuilt. Files are
    written to a temporary sibling folder and moved in, the marker last, so a half-written folder is never
    taken for a finished one.

    Args:
        out_dir: folder to write (created if needed).
        seed: seed of the random weights.

    Returns:
        ``out_dir``.

    Raises:
        FileNotFoundError: the CLIP BPE vocabulary (open_clip_torch wheel) is not installed.
    """
    from transformers import Sam3ImageProcessor, Sam3Processor

    out_dir = Path(out_dir)
    if is_built(out_dir, MARKER_FILE, _signature(seed)):
        logger.debug("tiny SAM 3 already built in %s", out_dir)
        return out_dir

    logger.info("building tiny SAM 3 (seed %d) in %s", seed, out_dir)
    model = tiny_sam3_model(seed)
    processor = Sam3Processor(
        image_processor=Sam3ImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}),
        tokenizer=build_clip_tokenizer(),
    )

    write_checkpoint(out_dir, MARKER_FILE, _signature(seed), save_model_and_processor(model, processor))
    return out_dir
