"""SAM 3's point-prompt model behind one Protocol: clicks and/or a box on an image -> one mask.

``Sam3PointSegmenter`` wraps transformers' ``Sam3TrackerModel`` / ``Sam3TrackerProcessor`` (the same weights as
``facebook/sam3``, promptable with points). As in ``segmenter.py``, the image encoder is the expensive part, so each
image is encoded once and its embeddings are reused for every click, from a small LRU cache keyed by the image's
content (``images.image_digest``). Used by ``correct.prompted`` to correct masks by hand; the prompts are checked by
``prompts``.

SAM 3 has one vision backbone for detection and tracking: its checkpoint stores it once, and transformers loads
that same backbone into ``Sam3Model`` and ``Sam3TrackerModel`` (only the necks differ). ``share_backbone_with``
lets the point model use the detector's backbone module and its cached image encodings (``shared_backbone``), so the
backbone is held once in memory and an image the agent has already encoded costs only the tracker's neck when clicked
on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from PIL import Image

from ..errors import BackendError, InputError
from ..images import image_digest
from ..models.loading import default_device, load_checked
from .feature_cache import CachedImageModel, FeatureCache, tensors_nbytes
from .prompts import Box, check_box, check_clicks
from .segmenter import (
    DEFAULT_FEATURE_CACHE_BYTES,
    DEFAULT_SAM3_MODEL,
    Sam3Segmenter,
    _looks_like_local_path,
    sam3_dtype,
)
from .shared_backbone import SharedBackbone, share_backbone

logger = logging.getLogger(__name__)

TRACKER_WEIGHTS_HINT = (
    "Use the facebook/sam3 checkpoint as downloaded (its tracker_model.* weights are the point model's). A copy "
    "re-saved with transformers' Sam3VideoModel.save_pretrained (5.24) writes them as tracker_model.tracker_model.*, "
    "which no model reads; a copy re-saved from Sam3Model has no point-model weights at all."
)
MASK_LOGIT_THRESHOLD = 0.0  # mask pixels are logits > 0 (probability > 0.5); transformers' post_process_masks default


@dataclass(frozen=True, eq=False)
class PointMask:
    """The mask SAM 3 predicts for a set of clicks and/or a box.

    Attributes:
        mask: bool (H, W) at the original image resolution.
        score: the model's predicted IoU of that mask, in [0, 1].
    """

    mask: np.ndarray
    score: float


@runtime_checkable
class PointSegmenter(Protocol):
    """Anything that turns clicks (and a box, when given) on an image into one mask."""

    name: str

    def segment_points(
        self, image: Image.Image, points: Sequence[tuple[float, float]], labels: Sequence[int], *,
        box: Box | None = None,
    ) -> PointMask:
        """One mask for the object the clicks (and box) point at (see ``Sam3PointSegmenter.segment_points``)."""
        ...


def tracker_load_failure_message(model_id: str, error: BaseException | None = None,
                                 what: str = "SAM 3's point-prompt model") -> str:
    """The text of the ``BackendError`` raised when one of SAM 3's trackers (``what``: the point-prompt model, or the
    video tracker) cannot be loaded from ``model_id``."""
    cause = f" ({str(error).strip() or 'no details'})" if error is not None else ""
    if _looks_like_local_path(model_id):
        return (
            f"Could not load {what} from the folder '{model_id}'{cause}. The folder must exist and "
            "hold a transformers SAM 3 checkpoint saved with save_pretrained (config.json, model.safetensors and "
            "processor_config.json). Check the path, or pass a Hugging Face model id such as "
            f"'{DEFAULT_SAM3_MODEL}'."
        )
    return (
        f"Could not load {what} '{model_id}'{cause}. '{DEFAULT_SAM3_MODEL}' is gated on the "
        "Hugging Face Hub: accept its licence, then run `hf auth login` (or set HF_TOKEN). Offline, the weights must "
        "already be in the local Hugging Face cache, or pass a local folder that holds them."
    )


class Sam3PointSegmenter(CachedImageModel):
    """SAM 3's point-prompt model (transformers ``Sam3TrackerModel``) with a per-image embedding cache.

    Life cycle: build once with :meth:`from_pretrained`, then call :meth:`segment_points` with any image and
    clicks. The first call on an image runs the image encoder; later calls on the same pixels reuse its embeddings
    while the image is among the ``feature_cache_size`` most recently used. A lock serialises model calls.

    Attributes:
        name: the model id or folder it was loaded from.
    """

    def __init__(self, model: Any, processor: Any, *, name: str = DEFAULT_SAM3_MODEL, feature_cache_size: int = 4):
        """Wrap a loaded ``Sam3TrackerModel`` (eval mode, on its device) and its ``Sam3TrackerProcessor``.

        Raises:
            ValueError: ``feature_cache_size`` is negative.
        """
        self._cache = FeatureCache(feature_cache_size, DEFAULT_FEATURE_CACHE_BYTES, tensors_nbytes, "SAM 3 tracker")
        self.name = name
        self._model = model
        self._processor = processor
        self._lock = threading.Lock()
        self._shared: SharedBackbone | None = None

    @classmethod
    def from_pretrained(
        cls, model_id: str = DEFAULT_SAM3_MODEL, *, device: str | None = None, feature_cache_size: int = 4,
        dtype: str | None = None,
    ) -> Sam3PointSegmenter:
        """Load the point-prompt model and its processor from a Hugging Face id or a local folder.

        ``facebook/sam3`` is a ``sam3_video`` checkpoint: transformers renames its ``tracker_model.*``,
        ``tracker_neck.*`` and the detector's vision backbone into ``Sam3TrackerModel`` and ignores the rest (the
        detector's other weights, the video memory). A checkpoint that still lacks any of the point model's weights
        is refused with the missing keys named (``models.loading.check_loading_info``), instead of clicks on random
        weights.

        Args:
            model_id: Hub id (default ``facebook/sam3``, gated) or a folder written by ``save_pretrained``.
            device: torch device string; ``None`` picks ``"cuda"`` when available, else ``"cpu"``.
            feature_cache_size: how many images' embeddings to keep (LRU); 0 disables the cache.
            dtype: ``"float32"`` (default) or ``"bfloat16"`` (``segmenter.sam3_dtype``); use the detector's dtype so
                the two can share their vision backbone.

        Raises:
            BackendError: the weights or processor cannot be loaded, or weights are missing; the message names
                ``model_id`` and the fix.
            InputError: an unknown ``dtype``.
            ValueError: ``feature_cache_size`` is negative.
        """
        from transformers import Sam3TrackerModel, Sam3TrackerProcessor

        if feature_cache_size < 0:
            raise ValueError(f"feature_cache_size must be >= 0 (0 disables the cache), got {feature_cache_size}")
        torch_dtype = sam3_dtype(dtype)
        local = _looks_like_local_path(model_id)
        if local and not Path(model_id).expanduser().is_dir():
            raise BackendError(tracker_load_failure_message(model_id, FileNotFoundError(f"no folder at {model_id}")))
        source = str(Path(model_id).expanduser()) if local else model_id
        device = device or default_device()
        logger.info("loading SAM 3 point-prompt model from %s on %s (%s)", model_id, device, torch_dtype)
        try:
            processor = Sam3TrackerProcessor.from_pretrained(source)
            model = load_checked(Sam3TrackerModel, source, model_id, "SAM 3's point-prompt model", device,
                                 torch_dtype, hint=TRACKER_WEIGHTS_HINT)
        except BackendError:
            raise
        except Exception as exc:  # missing, gated, corrupt or bad device: one clear error
            raise BackendError(tracker_load_failure_message(model_id, exc)) from exc
        return cls(model, processor, name=model_id, feature_cache_size=feature_cache_size)

    def segment_points(
        self, image: Image.Image, points: Sequence[tuple[float, float]], labels: Sequence[int], *,
        box: Box | None = None,
    ) -> PointMask:
        """One mask for the object the clicks point at, or inside ``box``.

        One click alone is ambiguous (a part or the whole?): the model's three candidate masks are computed and the
        one with the highest predicted IoU is returned. With several clicks, or a box, the model's single-mask
        output is used (a box says which whole is meant).

        Args:
            image: PIL image (converted to RGB if needed), any size.
            points: (x, y) clicks in pixels of the original image (x right, y down), inside the image; may be empty
                when a box is given.
            labels: 1 positive / 0 negative, one per click; at least one positive unless a box is given.
            box: (x1, y1, x2, y2) in original-image pixels (pixel edges, inside [0, width] x [0, height], x1 < x2,
                y1 < y2), or None.

        Returns:
            ``PointMask``: mask bool (H, W) at the original resolution (may be empty: the caller decides), score the
            predicted IoU in [0, 1].

        Raises:
            InputError: bad clicks or box (see ``prompts.check_clicks`` / ``prompts.check_box``) or ``image`` not a
                PIL image.
            BackendError: out of memory while running the model.
        """
        if not isinstance(image, Image.Image):
            raise InputError(f"image must be a PIL image, got {type(image).__name__}")
        if image.mode != "RGB":
            image = image.convert("RGB")
        corners = None if box is None else check_box(box, image.width, image.height)
        clicks, click_labels = check_clicks(points, labels, image.width, image.height, with_box=corners is not None)
        key = image_digest(image)
        return self._run_locked(lambda: self._segment_locked(image, key, clicks, click_labels, corners),
                                f"SAM 3's point-prompt model ({self.name})", image.size, "run it on the CPU")

    # ------------------------------------------------------------------ internals (call with the lock held)

    def share_backbone_with(self, segmenter: Sam3Segmenter) -> bool:
        """Use ``segmenter``'s vision backbone and its cached encodings from now on, when they are the same.

        Shared only when both backbones hold equal weights (same names, shapes, dtypes, device and values) and
        both processors turn a probe image into equal pixels; then the point model's own backbone is dropped
        (for ``facebook/sam3`` about 450 M weights) and every image is encoded by the detector's backbone once
        for both models. Masks are unchanged (a test checks them bit for bit). Idempotent.

        Returns:
            True when shared with ``segmenter`` (now or before), False when the two differ or the point model already
            shares another segmenter's backbone (nothing changes; the reason is logged). Once shared, the point
            model keeps that segmenter alive.
        """
        with self._lock:
            if self._shared is not None:
                if self._shared.source is not segmenter:
                    logger.info("SAM 3's point model already shares the backbone of %s; not switching",
                                self._shared.source.name)
                return self._shared.source is segmenter
            shared = share_backbone(self._model.vision_encoder, self._processor, segmenter, "SAM 3's point model")
            if shared is None:
                return False
            self._shared = shared
            self._cache.clear()
            return True

    def _embeddings(self, image: Image.Image, key: str) -> list[torch.Tensor]:
        def encode() -> list[torch.Tensor]:
            pixel_values = self._processor(images=image, return_tensors="pt")["pixel_values"]
            pixel_values = pixel_values.to(self.device, dtype=self._model.dtype)
            if self._shared is None:
                return self._model.get_image_embeddings(pixel_values)
            with self._shared.given(image):
                return self._model.get_image_embeddings(pixel_values)

        return self._cache.get_or_compute(key, encode)

    def _segment_locked(self, image: Image.Image, key: str, clicks: list[list[float]], labels: list[int],
                        box: Box | None) -> PointMask:
        embeddings = self._embeddings(image, key)
        size = [[image.height, image.width]]
        # the processor's nesting: points [image][object][point][xy], labels [image][object][point], boxes
        # [image][object][xyxy]; one object here
        prompts: dict[str, Any] = {}
        if clicks:
            prompts.update(input_points=[[clicks]], input_labels=[[labels]])
        if box is not None:
            prompts.update(input_boxes=[[list(box)]])
        prompt = self._processor(images=None, original_sizes=size, return_tensors="pt", **prompts)
        multimask = len(clicks) == 1 and box is None
        outputs = self._model(
            image_embeddings=embeddings,
            multimask_output=multimask,
            **{name: prompt[name].to(self.device) for name in ("input_points", "input_labels", "input_boxes")
               if name in prompt},
        )
        scores = outputs.iou_scores[0, 0].float().cpu()  # (M,)
        best = int(torch.argmax(scores))
        logits = outputs.pred_masks[:, :, best : best + 1].float().cpu()  # (1, 1, 1, h, w)
        masks = self._processor.post_process_masks(logits, size, mask_threshold=MASK_LOGIT_THRESHOLD)[0]  # (1, 1, H, W)
        mask = masks.reshape(image.height, image.width).numpy().astype(bool)
        return PointMask(mask=mask, score=float(scores[best].clamp(0.0, 1.0)))
