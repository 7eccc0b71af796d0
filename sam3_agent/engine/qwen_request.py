"""One tokenized Qwen-VL request as the cached decoder reads it: ids, image spans and digests, 3-D positions.

``encode_request`` describes a processor output (or ``qwen_inputs.encode_messages``' output) as an
``EncodedRequest``: the token ids with each image's span and content digest (what ``kv_prefix`` matches
prefixes on), each image's patches, and the mrope positions of every token from the model's own
``get_rope_index`` (see ``qwen_decode``'s docstring for why positions are not indices).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from PIL import Image

from ..images import image_digest
from .kv_prefix import ImageSpan, TokenSequence

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EncodedRequest:
    """One tokenized request.

    Attributes:
        input_ids: int64 (1, T) on the model's device, each image expanded to its tokens.
        image_pixels: per image, float (P_i, C * temporal_patch * patch * patch) patches (views, not copies:
            only the images a forward pass needs are concatenated).
        image_grid_thw: int64 (I, 3) (t, h, w) patch grid per image, or ``None``.
        tokens: the ids on the CPU with each image's token span and content digest.
        positions: int64 (3, T) mrope positions (t, h, w) of every token.
        delta: a token at index ``t >= T`` (generated) has position ``t + delta`` on all three axes.
        system_length: tokens of the system turn the request starts with (0: none known).
    """

    input_ids: torch.Tensor
    image_pixels: tuple[torch.Tensor, ...]
    image_grid_thw: torch.Tensor | None
    tokens: TokenSequence
    positions: torch.Tensor
    delta: int
    system_length: int = 0

    def __len__(self) -> int:
        return int(self.input_ids.shape[1])


def encode_request(
    model: Any, inputs: Any, images: Sequence[Image.Image], image_token_id: int, system_length: int = 0,
    digests: Sequence[str] | None = None,
) -> EncodedRequest:
    """Describe a processor output (``input_ids``, ``pixel_values``, ``image_grid_thw``, ``mm_token_type_ids``).

    Args:
        model: the ``...ForConditionalGeneration`` model (its ``model.get_rope_index`` gives positions).
        inputs: the processor's ``BatchFeature`` for one request (or ``qwen_inputs.encode_messages``' output,
            with per-image ``image_pixels`` instead of ``pixel_values``), on the model's device.
        images: the request's images in the order they appear (their digests key the cache).
        image_token_id: the id of the image placeholder token.
        system_length: tokens of the leading system turn, or 0.
        digests: the images' ``image_digest`` s when the caller already has them.

    When the image placeholders found do not match ``images`` one to one, the images get unique
    digests: the request then shares nothing beyond its first image.
    """
    input_ids = inputs["input_ids"]
    ids = input_ids[0].detach().to("cpu", torch.int64)
    grid = inputs.get("image_grid_thw")
    is_image = ids == image_token_id
    starts = torch.nonzero(is_image & ~torch.cat([torch.tensor([False]), is_image[:-1]])).flatten().tolist()
    ends = torch.nonzero(is_image & ~torch.cat([is_image[1:], torch.tensor([False])])).flatten().tolist()
    counts = [] if grid is None else [int(n) for n in grid.prod(-1).tolist()]
    if len(starts) == len(images) == len(counts):
        digests = list(digests) if digests is not None else [image_digest(image) for image in images]
    else:
        logger.warning(
            "found %d image placeholders for %d images: prefix reuse stops at the first image", len(starts), len(images)
        )
        digests = [f"unmatched-{uuid.uuid4().hex}" for _ in starts]
    spans = tuple(ImageSpan(s, e + 1, d) for s, e, d in zip(starts, ends, digests))
    image_pixels = inputs.get("image_pixels")
    if image_pixels is None:  # the processor's output: all images' patches in one tensor
        pixel_values, image_pixels, offset = inputs.get("pixel_values"), [], 0
        if pixel_values is not None:
            for count in counts:
                image_pixels.append(pixel_values[offset : offset + count])
                offset += count
    mm_types = inputs.get("mm_token_type_ids")
    if mm_types is None:
        mm_types = is_image.to(input_ids.device, torch.int32)[None]
    positions, deltas = model.model.get_rope_index(
        input_ids, mm_token_type_ids=mm_types, image_grid_thw=grid, attention_mask=None
    )
    return EncodedRequest(
        input_ids=input_ids,
        image_pixels=tuple(image_pixels),
        image_grid_thw=grid,
        tokens=TokenSequence(ids, spans),
        positions=positions[:, 0, :],
        delta=int(deltas.flatten()[0]),
        system_length=system_length,
    )
