"""SAM 3 behind one Protocol: text phrase + image -> instance masks.

``Sam3Segmenter`` wraps transformers' ``Sam3Model``/``Sam3Processor``. The image encoder dominates the cost
(full size on a CPU: about 63 s per image against about 7 s per phrase), so each image is encoded once and its
vision features are reused for every phrase, from a small LRU cache keyed by the image content and bounded both
in entries and in bytes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from PIL import Image

from ..errors import BackendError, InputError
from ..images import image_digest
from ..limits import DEFAULT_SCORE_THRESHOLD
from ..mask_set import Masks
from ..models.loading import default_device, load_checked
from .feature_cache import CachedImageModel, FeatureCache, tensors_nbytes

logger = logging.getLogger(__name__)

DEFAULT_SAM3_MODEL = "facebook/sam3"
MASK_THRESHOLD = 0.5  # probability cut for mask pixels; transformers' post-processing default
DEFAULT_FEATURE_CACHE_SIZE = 4  # images whose features are kept
# Bytes of cached features: full-size SAM 3 keeps ~220 MB per image in float32 (FPN maps at 288, 144 and 72 px
# with 256 channels, plus their position encodings), so 1 GiB holds the default 4 images on a CPU.
DEFAULT_FEATURE_CACHE_BYTES = 1024**3
UPSAMPLE_CHUNK_BYTES = 256 * 1024**2  # float32 full-size masks upsampled at once on the device (5 at 12 MP)


@runtime_checkable
class Segmenter(Protocol):
    """Anything that turns (image, noun phrase) into instance masks."""

    name: str

    def segment(self, image: Image.Image, phrase: str, score_threshold: float) -> Masks:
        """Masks of every instance of ``phrase`` in ``image`` scoring at least ``score_threshold``."""
        ...


def _looks_like_local_path(model_id: str) -> bool:
    """True for ids that can only be folders (a Hub id is ``name`` or ``owner/name``)."""
    return (
        Path(model_id).is_absolute()
        or model_id.startswith((".", "~"))
        or model_id.count("/") > 1
        or "\\" in model_id
        or Path(model_id).exists()
    )


def load_failure_message(model_id: str, error: BaseException | None = None) -> str:
    """The text of the ``BackendError`` raised when SAM 3 cannot be loaded from ``model_id``.

    Names the model id and how to fix the problem: for a local folder, what it must contain; for a Hub id, that
    ``facebook/sam3`` is gated (accept the licence, log in) and that offline the weights must already be cached.
    """
    cause = f" ({str(error).strip() or 'no details'})" if error is not None else ""
    if _looks_like_local_path(model_id):
        return (
            f"Could not load SAM 3 from the folder '{model_id}'{cause}. The folder must exist and hold a "
            "transformers SAM 3 checkpoint saved with save_pretrained (config.json, model.safetensors and the "
            "processor/tokenizer files). Check the path, or pass a Hugging Face model id such as "
            f"'{DEFAULT_SAM3_MODEL}'."
        )
    gated = ""
    if model_id.lower().startswith(DEFAULT_SAM3_MODEL):
        gated = (
            f" '{model_id}' is a gated repository on the Hugging Face Hub: accept its licence on "
            f"https://huggingface.co/{model_id}, then run `hf auth login` (or set HF_TOKEN) with that account."
        )
    return (
        f"Could not load SAM 3 model '{model_id}'{cause}.{gated} Alternatively pass a local folder that holds the "
        "weights. When offline (no network, or HF_HUB_OFFLINE=1), the weights must already be in the local "
        "Hugging Face cache: download them once on a connected machine, or copy the folder over."
    )


def sam3_dtype(name: str | None) -> torch.dtype:
    """The torch dtype SAM 3 runs in: ``"float32"`` (default: the precision of SAM 3's official usage; the scores
    and masks that decide what the agent sees come from it) or ``"bfloat16"`` (half the memory; the smoke command,
    ``python -m sam3_agent.smoke``, measures how far its scores and masks move from float32).

    Raises:
        InputError: any other name.
    """
    if name in (None, "float32"):
        return torch.float32
    if name == "bfloat16":
        return torch.bfloat16
    raise InputError(f"SAM 3 runs in float32 or bfloat16, not {name!r}")


class Sam3Segmenter(CachedImageModel):
    """SAM 3 (transformers ``Sam3Model``) with a per-image feature cache; shared safely by several users.

    Life cycle: build once with :meth:`from_pretrained`, then call :meth:`segment` with any image and phrase.
    The first phrase on an image runs the image encoder; later phrases on the same image (same pixels) reuse its
    features as long as the image is among the ``feature_cache_size`` most recently used and the cached
    features of those images fit in ``feature_cache_bytes`` (least recently used images are dropped first; an
    image whose features alone exceed the byte bound is not cached). A lock serialises model calls, so
    concurrent users never see each other's state (only identical pixels share features).

    Attributes:
        name: the model id or folder it was loaded from.
    """

    def __init__(
        self,
        model: Any,
        processor: Any,
        *,
        name: str = DEFAULT_SAM3_MODEL,
        feature_cache_size: int = DEFAULT_FEATURE_CACHE_SIZE,
        feature_cache_bytes: int = DEFAULT_FEATURE_CACHE_BYTES,
    ) -> None:
        """Wrap an already loaded ``Sam3Model`` (in eval mode, on its device) and its ``Sam3Processor``.

        Raises:
            ValueError: ``feature_cache_size`` or ``feature_cache_bytes`` is negative.
        """
        self._cache = FeatureCache(feature_cache_size, feature_cache_bytes, features_nbytes, "SAM 3 feature")
        self.name = name
        self._model = model
        self._processor = processor
        self._lock = threading.Lock()
        self._max_text_tokens = int(model.config.text_config.max_position_embeddings)

    @classmethod
    def from_pretrained(
        cls,
        model_id: str = DEFAULT_SAM3_MODEL,
        *,
        device: str | None = None,
        feature_cache_size: int = DEFAULT_FEATURE_CACHE_SIZE,
        feature_cache_bytes: int = DEFAULT_FEATURE_CACHE_BYTES,
        dtype: str | None = None,
    ) -> Sam3Segmenter:
        """Load SAM 3 weights and processor from a Hugging Face id or a local folder.

        The weights go straight onto the device (``models.loading.load_checked``); a checkpoint that lacks any of
        ``Sam3Model``'s weights is refused (a ``facebook/sam3`` checkpoint also holds the tracker's and the video
        memory's weights: those are legitimately unused here).

        Args:
            model_id: Hub id (default ``facebook/sam3``, gated) or folder written by ``save_pretrained``.
            device: torch device string; ``None`` picks ``"cuda"`` when available, else ``"cpu"``.
            feature_cache_size: how many images' vision features to keep (LRU); 0 disables the cache.
            feature_cache_bytes: most bytes of cached features (tensor storage on the model's device).
            dtype: ``"float32"`` (default) or ``"bfloat16"`` (see :func:`sam3_dtype`).

        Raises:
            BackendError: the weights or processor cannot be loaded, weights are missing from the checkpoint, or
                the device cannot take them; the message names ``model_id`` and the fix (see
                :func:`load_failure_message`, ``models.loading.check_loading_info``).
            InputError: an unknown ``dtype``.
            ValueError: ``feature_cache_size`` or ``feature_cache_bytes`` is negative.
        """
        from transformers import Sam3Model, Sam3Processor

        FeatureCache(feature_cache_size, feature_cache_bytes, features_nbytes)  # check the bounds before loading
        torch_dtype = sam3_dtype(dtype)
        if _looks_like_local_path(model_id) and not Path(model_id).expanduser().is_dir():
            # Do not let transformers take a mistyped path for a Hub id and go to the network.
            raise BackendError(load_failure_message(model_id, FileNotFoundError(f"no folder at {model_id}")))
        source = str(Path(model_id).expanduser()) if _looks_like_local_path(model_id) else model_id
        device = device or default_device()
        logger.info("loading SAM 3 from %s on %s (%s)", model_id, device, torch_dtype)
        try:
            processor = Sam3Processor.from_pretrained(source)
            model = load_checked(Sam3Model, source, model_id, "SAM 3", device, torch_dtype)
        except BackendError:
            raise
        except Exception as exc:  # any loading failure (missing, gated, corrupt, bad device) becomes one error
            raise BackendError(load_failure_message(model_id, exc)) from exc
        return cls(
            model, processor, name=model_id, feature_cache_size=feature_cache_size,
            feature_cache_bytes=feature_cache_bytes,
        )

    def segment(self, image: Image.Image, phrase: str, score_threshold: float = DEFAULT_SCORE_THRESHOLD) -> Masks:
        """Segment every instance of ``phrase`` in ``image``.

        Args:
            image: PIL image (converted to RGB if needed), any size.
            phrase: a short noun phrase; prompts longer than the text encoder's 32 tokens are truncated.
            score_threshold: detections scoring below it are dropped; score = sigmoid(class logit) *
                sigmoid(presence logit), in [0, 1].

        Returns:
            ``Masks`` with masks bool (N, H, W) at the image's original resolution, scores float32 (N,),
            boxes float32 (N, 4) xyxy in pixels clipped to the image, in SAM 3's query order (not sorted, no
            overlap removal), and ``phrase`` as given.

        Raises:
            ValueError: empty phrase, threshold outside [0, 1], or ``image`` not a PIL image.
            BackendError: out of memory while running the model.
        """
        if not isinstance(phrase, str) or not phrase.strip():
            raise ValueError("phrase must be a non-empty noun phrase, e.g. 'red car'")
        if not 0.0 <= float(score_threshold) <= 1.0:
            raise ValueError(f"score_threshold must be in [0, 1], got {score_threshold}")
        if not isinstance(image, Image.Image):
            raise ValueError(f"image must be a PIL image, got {type(image).__name__}")
        if image.mode != "RGB":
            image = image.convert("RGB")
        key = image_digest(image)
        return self._run_locked(lambda: self._segment_locked(image, key, phrase, float(score_threshold)),
                                f"SAM 3 ({self.name})", image.size, "run SAM 3 on the CPU")

    def phrase_cut(self, phrase: str) -> tuple[str, int] | None:
        """What SAM 3's text encoder reads of a phrase longer than it takes (``segment`` truncates it).

        Returns:
            ``(the phrase as read, the token limit)`` when ``phrase`` has more tokens than the encoder's
            ``max_position_embeddings`` (32 for facebook/sam3, start and end tokens included); ``None``
            when the whole phrase is read. The text as read is the tokenizer's decoding, lower-cased by
            CLIP's tokenizer.
        """
        tokenizer = self._processor.tokenizer
        if len(tokenizer(phrase)["input_ids"]) <= self._max_text_tokens:
            return None
        kept = tokenizer(phrase, truncation=True, max_length=self._max_text_tokens)["input_ids"]
        return tokenizer.decode(kept, skip_special_tokens=True).strip(), self._max_text_tokens

    def backbone_output(self, image: Image.Image) -> torch.Tensor:
        """The vision backbone's output for ``image``, from the feature cache (encoding it when missing).

        Returns:
            float (1, (S / patch) ** 2, hidden) on the model's device, S the processor's square input size
            (1008 px for ``facebook/sam3``: 72 x 72 tokens of 1024).
        """
        if image.mode != "RGB":
            image = image.convert("RGB")
        key = image_digest(image)
        return self._run_locked(lambda: self._vision_features(image, key).last_hidden_state,
                                f"SAM 3 ({self.name})", image.size, "run SAM 3 on the CPU")

    @property
    def backbone(self) -> torch.nn.Module:
        """The vision backbone module (``Sam3Model.vision_encoder.backbone``)."""
        return self._model.vision_encoder.backbone

    @property
    def processor(self) -> Any:
        """The ``Sam3Processor``."""
        return self._processor

    # ------------------------------------------------------------------ internals (call with the lock held)

    def _vision_features(self, image: Image.Image, key: str) -> Any:
        return self._cache.get_or_compute(key, lambda: self._encode(image))

    def _encode(self, image: Image.Image) -> Any:
        pixel_values = self._processor(images=image, return_tensors="pt")["pixel_values"]
        pixel_values = pixel_values.to(self.device, dtype=self._model.dtype)
        encoded = self._model.get_vision_features(pixel_values=pixel_values)
        # Keep what the detector reads (the FPN maps and their position encodings) and the backbone's output,
        # which SAM 3's point-prompt model reads too (``tracker.Sam3PointSegmenter.share_backbone_with``).
        return type(encoded)(
            last_hidden_state=encoded.last_hidden_state,
            fpn_hidden_states=encoded.fpn_hidden_states,
            fpn_position_encoding=encoded.fpn_position_encoding,
        )

    def _segment_locked(self, image: Image.Image, key: str, phrase: str, score_threshold: float) -> Masks:
        features = self._vision_features(image, key)
        text = self._processor.tokenizer(
            [phrase],
            padding="max_length",
            max_length=self._max_text_tokens,
            truncation=True,
            return_tensors="pt",
        )
        outputs = self._model(
            vision_embeds=features,
            input_ids=text["input_ids"].to(self.device),
            attention_mask=text["attention_mask"].to(self.device),
        )
        return instance_masks(outputs, image.height, image.width, score_threshold, phrase)


def instance_masks(outputs: Any, height: int, width: int, score_threshold: float, phrase: str,
                   chunk_bytes: int = UPSAMPLE_CHUNK_BYTES) -> Masks:
    """SAM 3's detections of one image as ``Masks`` at the image's resolution.

    The same result as transformers' ``Sam3Processor.post_process_instance_segmentation`` with ``target_sizes``
    (score = sigmoid(class logit) * sigmoid(presence logit); mask = bilinear upsampling of sigmoid(mask logits),
    ``align_corners=False``, > ``MASK_THRESHOLD``; boxes = normalised xyxy times the image size), computed here
    because the library upsamples every kept mask at once on the model's device in float32 and binarises it to
    int64: 13 bytes per pixel per mask, about 156 MB per mask at 12 MP, several GB for a crowded photo. Here the
    masks are upsampled a few at a time (at most ``chunk_bytes`` of float32 on the device) and each chunk is
    encoded as RLE as it comes (``Masks`` holds RLE), so the full-size masks never exist together: the extra
    memory is one chunk (its float32 and its bool copy on the CPU) and the RLE, whatever the number of masks
    (a whole (N, H, W) bool array would be 3.2 GB at 16 MP with 200 masks).

    Args:
        outputs: ``Sam3Model`` output for one image: ``pred_logits`` (1, Q), ``presence_logits`` (1, 1) or None,
            ``pred_boxes`` (1, Q, 4) normalised xyxy, ``pred_masks`` (1, Q, h, w) logits.
        height / width: the image's size in pixels.
        score_threshold: detections scoring at least this are kept.
        phrase: recorded on the result.
        chunk_bytes: most bytes of float32 upsampled masks on the device at once (at least one mask).

    Returns:
        ``Masks`` of N masks (H, W), scores float32 (N,), boxes float32 (N, 4) xyxy pixels clipped to the image, in
        query order.
    """
    scores = outputs.pred_logits[0].float().sigmoid()
    if outputs.presence_logits is not None:
        scores = scores * outputs.presence_logits[0].float().sigmoid()
    keep = scores >= score_threshold
    scale = torch.tensor([width, height, width, height], dtype=torch.float32, device=scores.device)
    boxes = (outputs.pred_boxes[0][keep].float() * scale).cpu().numpy().astype(np.float32).reshape(-1, 4)
    boxes[:, 0::2] = boxes[:, 0::2].clip(0, width)
    boxes[:, 1::2] = boxes[:, 1::2].clip(0, height)
    step = max(1, chunk_bytes // (4 * height * width))
    masks = upsampled_masks(outputs.pred_masks[0][keep], height, width, step)
    return Masks(masks, scores[keep].cpu().numpy().astype(np.float32), boxes, phrase, size=(height, width))


def upsampled_masks(logits: torch.Tensor, height: int, width: int, step: int) -> Iterator[np.ndarray]:
    """Each mask of ``logits`` (float (N, h, w) mask logits, any device) as bool (H, W) on the CPU, upsampled
    ``step`` masks at a time (bilinear on the probabilities, ``align_corners=False``, > ``MASK_THRESHOLD``); only
    the current chunk is held."""
    for start in range(0, len(logits), step):
        probabilities = logits[start : start + step].float().sigmoid().unsqueeze(0)
        upsampled = torch.nn.functional.interpolate(probabilities, size=(height, width), mode="bilinear",
                                                    align_corners=False)[0]
        del probabilities
        chunk = (upsampled > MASK_THRESHOLD).cpu().numpy()
        del upsampled
        yield from chunk
        del chunk


def features_nbytes(features: Any) -> int:
    """Bytes of tensor storage in cached vision features (backbone output, FPN maps and position encodings)."""
    backbone = [features.last_hidden_state] if getattr(features, "last_hidden_state", None) is not None else []
    return tensors_nbytes([*backbone, *(features.fpn_hidden_states or ()), *(features.fpn_position_encoding or ())])
