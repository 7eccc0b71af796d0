"""One SAM 3 vision backbone for the detector and the trackers built on it (point model, video tracker).

SAM 3's checkpoint stores its vision backbone once; transformers loads that same backbone into ``Sam3Model`` (the
detector), ``Sam3TrackerModel`` (the point model) and ``Sam3TrackerVideoModel`` (the video tracker), each with its
own neck on top. :func:`share_backbone` puts a :class:`SharedBackbone` in place of a tracker's own backbone when both
hold the same weights and their processors prepare the same pixels: the backbone is then held once in memory and an
image (or video frame) encoded by one model is not encoded again by the other (the detector's feature cache,
``Sam3Segmenter.backbone_output``, keyed by the image's pixels). transformers has no hook for this (its
``Sam3VideoModel`` shares the backbone only inside its own text-prompted loop), so the module swap is written here.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from PIL import Image

from .segmenter import Sam3Segmenter

logger = logging.getLogger(__name__)


class SharedBackbone(torch.nn.Module):
    """Stands in for a tracker's vision backbone: inside ``given(image)`` it returns the detector's cached backbone
    output for that image (``Sam3Segmenter.backbone_output``, encoding it there when missing); otherwise it runs the
    detector's backbone.

    The rest of the tracker's vision encoder (its own neck and projections) runs unchanged on top.
    """

    def __init__(self, source: Sam3Segmenter) -> None:
        super().__init__()
        self.source = source
        self.inner = source.backbone  # registered as a submodule: the same parameters, held once
        self._image: Image.Image | None = None

    @contextlib.contextmanager
    def given(self, image: Image.Image) -> Iterator[None]:
        """Within this block the backbone's output is the detector's encoding of ``image`` (the caller holds the
        tracker's lock: one image at a time)."""
        self._image = image
        try:
            yield
        finally:
            self._image = None

    def forward(self, pixel_values: torch.Tensor, **kwargs: Any) -> Any:
        if self._image is None:
            return self.inner(pixel_values, **kwargs)
        from transformers.modeling_outputs import BaseModelOutput

        return BaseModelOutput(last_hidden_state=self.source.backbone_output(self._image))


def share_backbone(vision_encoder: torch.nn.Module, processor: Any, segmenter: Sam3Segmenter,
                   what: str) -> SharedBackbone | None:
    """Replace ``vision_encoder.backbone`` by a :class:`SharedBackbone` over ``segmenter``'s when they are the same.

    Shared only when both backbones hold equal weights (same names, shapes, dtypes, device and values) and both
    processors turn a probe image into equal pixels; the tracker's own backbone is then dropped (for
    ``facebook/sam3`` about 450 M weights).

    Args:
        vision_encoder: the tracker's ``Sam3VisionModel`` (``model.vision_encoder``).
        processor: the tracker's processor (called as ``processor(images=..., return_tensors="pt")``).
        segmenter: the detector whose backbone and feature cache to use.
        what: the tracker's name in the log line, e.g. ``"SAM 3's point model"``.

    Returns:
        the new backbone module, or ``None`` when the two differ (nothing changes; the reason is logged).
    """
    reason = backbone_mismatch(vision_encoder.backbone, segmenter.backbone)
    reason = reason or processor_mismatch(processor, segmenter.processor)
    if reason:
        logger.info("%s keeps its own vision backbone: %s", what, reason)
        return None
    shared = SharedBackbone(segmenter)
    vision_encoder.backbone = shared
    logger.info("%s now shares the detector's vision backbone and image encodings", what)
    return shared


def backbone_mismatch(own: torch.nn.Module, other: torch.nn.Module) -> str | None:
    """Why two vision backbones are not interchangeable, or None when they hold the same weights."""
    if type(own) is not type(other):
        return f"different backbone classes ({type(own).__name__} / {type(other).__name__})"
    mine, theirs = dict(own.named_parameters()), dict(other.named_parameters())
    if mine.keys() != theirs.keys():
        return "different backbone parameters"
    with torch.no_grad():
        for name, tensor in mine.items():
            peer = theirs[name]
            if tensor.shape != peer.shape or tensor.dtype != peer.dtype or tensor.device != peer.device:
                return f"{name} differs in shape, dtype or device"
            if not torch.equal(tensor, peer):
                return f"different weights ({name})"
    return None


def processor_mismatch(own: Any, other: Any) -> str | None:
    """Why two processors would feed the backbones different pixels (checked on a seeded 64 x 48 probe image)."""
    probe = Image.fromarray(np.random.default_rng(0).integers(0, 256, (48, 64, 3), dtype=np.uint8))
    mine = own(images=probe, return_tensors="pt")["pixel_values"]
    theirs = other(images=probe, return_tensors="pt")["pixel_values"]
    if mine.shape != theirs.shape or not torch.equal(mine, theirs):
        return "the processors prepare images differently"
    return None
