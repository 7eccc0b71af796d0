"""Tiny random-weight Qwen3.5 / Qwen3.6 checkpoints (dense and MoE) for offline tests and demos.

``build_tiny_qwen3_5`` writes a folder that ``TransformersQwenVLM.from_pretrained`` (and plain
``AutoModelForImageTextToText`` / ``AutoProcessor``) load exactly like a released Qwen3.5 checkpoint. What is real:

- the architecture classes, built from their configuration classes (``Qwen3_5Config`` / ``Qwen3_5MoeConfig``) with
  shrunken sizes and the released layer pattern: 3 Gated DeltaNet (``linear_attention``) layers then 1 gated full
  attention layer (``full_attention_interval`` 4), partial rotary embedding (factor 0.25, as released) with an
  interleaved mrope section that fits the rotary half; the MoE build routes each token to 2 of 4 experts plus a
  shared expert (released: 8 of 256 plus one);
- the chat template (``tiny.templates``, variant ``qwen3_5``: Thinking by default, ``enable_thinking=False``
  closes an empty reasoning block), Qwen's added tokens in Qwen's order (``tiny.qwen.QWEN_ADDED_TOKENS``: the
  Qwen3.5 vocabulary keeps that order from id 248044) and the Qwen3-VL image-processor settings, which Qwen3.5
  shares (16 px patches merged 2 x 2, mean/std 0.5);
- the generation config (``QWEN3_5_GENERATION``: Qwen3.5-27B's and Qwen3.6's ``generation_config.json``).

The weights are random (``checkpoint.redraw_by_fan_in``, with the experts' 3-D weights redrawn the same way), so
the output proves code paths, not accuracy. Nothing is downloaded. Without ``causal_conv1d`` and
``flash-linear-attention`` installed, ``transformers`` runs the linear-attention layers on its reference kernels
(slower, same results).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Literal

from .checkpoint import is_built, redraw_by_fan_in, save_model_and_processor, seeded_model, write_checkpoint
from .qwen import QWEN_ADDED_TOKENS, _build_tokenizer, real_processor, sharpen_query_key_norms

logger = logging.getLogger(__name__)

BUILD_VERSION = "sam3_agent tiny qwen3_5 v2"  # v2: the template renders tools as released
MARKER_FILE = "TINY_BUILD"

Qwen3_5Kind = Literal["qwen3_5", "qwen3_5_moe"]

# Qwen/Qwen3.5-27B and Qwen/Qwen3.6-27B generation_config.json (public copies of both): sampling for Thinking.
# The model cards add presence_penalty 1.5, a serving-engine option transformers does not have (not applied).
QWEN3_5_GENERATION: dict[str, object] = {"do_sample": True, "temperature": 1.0, "top_p": 0.95, "top_k": 20}


def build_tiny_qwen3_5(out_dir: Path, kind: Qwen3_5Kind = "qwen3_5", seed: int = 0) -> Path:
    """Build and save a tiny random-weight Qwen3.5 (``kind="qwen3_5"``) or Qwen3.5-MoE (``"qwen3_5_moe"``) checkpoint.

    Skipped when ``out_dir`` already holds a complete build of this version and these arguments (see
    ``checkpoint.write_checkpoint``: staged, the marker written last).

    Returns:
        ``out_dir`` as a ``Path``.

    Raises:
        ValueError: an unknown ``kind``.
    """
    if kind not in ("qwen3_5", "qwen3_5_moe"):
        raise ValueError(f"unknown tiny Qwen3.5 kind {kind!r}: use 'qwen3_5' or 'qwen3_5_moe'")
    out_dir = Path(out_dir)
    signature = f"{BUILD_VERSION}\nkind={kind}\nseed={seed}\n"
    if is_built(out_dir, MARKER_FILE, signature):
        return out_dir
    tokenizer = _build_tokenizer("qwen3_5")
    processor = real_processor("qwen3_vl", tokenizer)
    model = _build_model(kind, tokenizer, seed)
    write_checkpoint(out_dir, MARKER_FILE, signature, save_model_and_processor(model, processor))
    logger.info("built tiny %s (seed=%d) in %s", kind, seed, out_dir)
    return out_dir


def tiny_config(kind: Qwen3_5Kind, token_ids: dict[str, int], vocab_size: int):
    """The shrunken configuration of ``kind`` (see the module docstring); ``token_ids`` maps Qwen's tokens to ids."""
    # head_dim 32 x partial_rotary_factor 0.25 -> 8 rotary dims -> 4 frequencies = mrope (t, h, w) [2, 1, 1].
    text = dict(
        vocab_size=vocab_size, hidden_size=32, num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1,
        head_dim=32, linear_conv_kernel_dim=4, linear_key_head_dim=8, linear_value_head_dim=8,
        linear_num_key_heads=2, linear_num_value_heads=4, max_position_embeddings=32768,
        layer_types=["linear_attention"] * 3 + ["full_attention"],
        rope_parameters={"rope_type": "default", "rope_theta": 10_000_000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [2, 1, 1], "mrope_interleaved": True},
        pad_token_id=token_ids["<|endoftext|>"], eos_token_id=token_ids["<|im_end|>"],
    )
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=32, patch_size=16,
                  spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=2304)
    ids = dict(image_token_id=token_ids["<|image_pad|>"], video_token_id=token_ids["<|video_pad|>"],
               vision_start_token_id=token_ids["<|vision_start|>"], vision_end_token_id=token_ids["<|vision_end|>"])
    if kind == "qwen3_5":
        from transformers import Qwen3_5Config

        return Qwen3_5Config(text_config=dict(text, intermediate_size=64), vision_config=vision, **ids)
    from transformers import Qwen3_5MoeConfig

    moe = dict(moe_intermediate_size=16, shared_expert_intermediate_size=16, num_experts=4, num_experts_per_tok=2)
    return Qwen3_5MoeConfig(text_config=dict(text, **moe), vision_config=vision, **ids)


def _build_model(kind: Qwen3_5Kind, tokenizer, seed: int):
    import torch
    from transformers import Qwen3_5ForConditionalGeneration, Qwen3_5MoeForConditionalGeneration

    token_ids = {text: tokenizer.convert_tokens_to_ids(text) for text, _ in QWEN_ADDED_TOKENS}
    config = tiny_config(kind, token_ids, len(tokenizer))
    model_cls = Qwen3_5ForConditionalGeneration if kind == "qwen3_5" else Qwen3_5MoeForConditionalGeneration
    model = seeded_model(lambda: model_cls(config), seed)
    generator = torch.Generator().manual_seed(seed)
    redraw_by_fan_in(model, generator)
    _redraw_experts(model, generator)
    sharpen_query_key_norms(model)  # gated attention normalises queries and keys like Qwen3-VL
    generation = model.generation_config
    generation.eos_token_id = [token_ids["<|im_end|>"], token_ids["<|endoftext|>"]]
    generation.pad_token_id = token_ids["<|endoftext|>"]
    generation.bos_token_id = token_ids["<|endoftext|>"]
    for key, value in QWEN3_5_GENERATION.items():
        setattr(generation, key, value)
    return model


def _redraw_experts(model, generator) -> None:
    """Redraw the MoE experts' stacked weights (experts, out, in) with std 1/sqrt(in), as ``redraw_by_fan_in`` does
    for linear layers (they are parameters, not ``nn.Linear`` s)."""
    import torch

    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.ndim == 3 and ".experts." in f".{name}":
                fan_in = int(parameter.shape[-1])
                parameter.copy_(torch.randn(parameter.shape, generator=generator) / math.sqrt(fan_in))
