"""Qwen-VL request encoding that preprocesses each distinct image and tokenizes each distinct text once.

The processor's ``apply_chat_template(tokenize=True)`` resizes, normalises and patchifies every
image of every request, and tokenizes the whole prompt again, although a run sends the same raw
image and system prompt in every main request and in every verification request.
``encode_messages`` produces the same ``input_ids`` and patches (a test checks it) from the chat
template's text, a small LRU of preprocessed images keyed by content digest and pixel bounds, and
a small LRU of the text pieces' token ids.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import torch
from PIL import Image

from ..images import image_digest
from ..messages import Message, chat_messages

logger = logging.getLogger(__name__)

DEFAULT_IMAGE_CACHE_ENTRIES = 16
DEFAULT_IMAGE_CACHE_BYTES = 256 * 1024**2  # a 1024x1024 image is ~4k patches x 1536 floats = 25 MB
DEFAULT_TEXT_CACHE_ENTRIES = 64  # a run's distinct text pieces (system prompt, query, turns between images)
DEFAULT_TEXT_CACHE_CHARS = 1_000_000


class PreprocessedImages:
    """LRU of image-processor outputs ``(pixel_values (P, D), image_grid_thw (1, 3))`` per (digest, pixel bounds).

    Bounded by entries and bytes (``pixel_values`` storage); thread-safe.

    Raises:
        ValueError: a negative bound.
    """

    def __init__(self, max_entries: int = DEFAULT_IMAGE_CACHE_ENTRIES, max_bytes: int = DEFAULT_IMAGE_CACHE_BYTES):
        if max_entries < 0 or max_bytes < 0:
            raise ValueError(f"image cache bounds must be >= 0, got {max_entries} entries, {max_bytes} bytes")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[str, tuple[int, int]], tuple[torch.Tensor, torch.Tensor, int]] = OrderedDict()
        self._nbytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(
        self, processor: Any, image: Image.Image, size: dict[str, int], digest: str | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(pixel_values, image_grid_thw)`` of ``image`` under the pixel bounds ``size``, computed once.

        ``digest``: the image's ``image_digest`` when the caller already has it.
        """
        key = (digest or image_digest(image), (int(size["shortest_edge"]), int(size["longest_edge"])))
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
                self.hits += 1
                return item[0], item[1]
            self.misses += 1
        out = processor.image_processor(images=[image], size=dict(size), return_tensors="pt")
        pixels, grid = out["pixel_values"], out["image_grid_thw"]
        nbytes = pixels.numel() * pixels.element_size()
        with self._lock:
            if self.max_entries > 0 and nbytes <= self.max_bytes and key not in self._items:
                self._items[key] = (pixels, grid, nbytes)
                self._nbytes += nbytes
                while len(self._items) > self.max_entries or self._nbytes > self.max_bytes:
                    _, (_, _, dropped) = self._items.popitem(last=False)
                    self._nbytes -= dropped
        return pixels, grid

    def clear(self) -> None:
        """Drop every entry."""
        with self._lock:
            self._items.clear()
            self._nbytes = 0

    def info(self) -> tuple[int, int]:
        """``(entries, bytes)`` held now."""
        with self._lock:
            return len(self._items), self._nbytes


class TextIds:
    """LRU of token ids per text piece (a chat's text between images), thread-safe.

    Within a run every request repeats the same pieces (the system prompt, the query, earlier turns), so
    each is tokenized once. Bounded by entries and by the characters held.
    """

    def __init__(self, max_entries: int = DEFAULT_TEXT_CACHE_ENTRIES, max_chars: int = DEFAULT_TEXT_CACHE_CHARS):
        self.max_entries = max_entries
        self.max_chars = max_chars
        self._items: OrderedDict[str, list[int]] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def get(self, tokenizer: Any, text: str) -> list[int]:
        """``tokenizer``'s ids of ``text`` (no special tokens added), computed once per text."""
        with self._lock:
            ids = self._items.get(text)
            if ids is not None:
                self._items.move_to_end(text)
                return ids
        ids = list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []
        with self._lock:
            if len(text) <= self.max_chars and text not in self._items:
                self._items[text] = ids
                self._chars += len(text)
                while len(self._items) > self.max_entries or self._chars > self.max_chars:
                    dropped, _ = self._items.popitem(last=False)
                    self._chars -= len(dropped)
        return ids

    def clear(self) -> None:
        """Drop every entry."""
        with self._lock:
            self._items.clear()
            self._chars = 0


def takes_pixel_bounds(image_processor: Any) -> bool:
    """True for a Qwen-VL-style image processor: one that resizes each image to a pixel count between the bounds of
    its ``size`` (``shortest_edge`` / ``longest_edge``, in pixels, not edge lengths) and merges patches into image
    tokens (``merge_size``): Qwen2-VL, Qwen2.5-VL, Qwen3-VL and Qwen3.5 processors. Other processors (Gemma 3's,
    LLaVA's...) resize to a size of their own; the engine then leaves their ``size`` alone."""
    size = getattr(image_processor, "size", None)
    longest = size.get("longest_edge") if isinstance(size, dict) else getattr(size, "longest_edge", None)
    return getattr(image_processor, "merge_size", None) is not None and longest is not None


def encode_messages(
    processor: Any, chat: list[dict[str, Any]], images: Sequence[Image.Image], size: dict[str, int],
    cache: PreprocessedImages, digests: Sequence[str] | None = None, texts: TextIds | None = None,
    template_kwargs: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Tokenize a chat (``to_chat`` form) with its images preprocessed through ``cache``.

    The rendered chat is cut at its image placeholders; each text piece is tokenized on its own (through
    ``texts`` when given) and each image contributes its run of image-token ids. The pieces end and begin
    with Qwen's ``<|vision_start|>`` / ``<|vision_end|>`` special tokens, where the tokenizer splits
    anyway, so the ids equal tokenizing the whole text (a test checks it against the processor).

    ``digests``: the images' ``image_digest`` s when the caller already has them; ``template_kwargs``: more
    ``apply_chat_template`` arguments (``tools``).

    Returns:
        ``input_ids`` int64 (1, T) with each image's placeholder expanded to its tokens,
        ``attention_mask`` (1, T), ``mm_token_type_ids`` int32 (1, T) (1 on image tokens), and, with
        images, ``image_pixels`` (a tuple of per-image patches (P_i, D), not concatenated: the processor's
        ``pixel_values`` is their concatenation) and ``image_grid_thw`` int64 (I, 3); on the CPU. ``None``
        when the rendered text's placeholders do not match ``images`` (the caller then uses the processor).
    """
    text = processor.apply_chat_template(chat, add_generation_prompt=True, tokenize=False, **(template_kwargs or {}))
    pieces = text.split(processor.image_token)
    if len(pieces) - 1 != len(images):
        logger.debug("found %d image placeholders for %d images", len(pieces) - 1, len(images))
        return None
    texts = texts if texts is not None else TextIds(max_entries=0, max_chars=0)
    tokenizer = processor.tokenizer
    merge = int(processor.image_processor.merge_size) ** 2
    image_id = int(processor.image_token_id)
    pixels: list[torch.Tensor] = []
    grids: list[torch.Tensor] = []
    ids = list(texts.get(tokenizer, pieces[0]))
    keys = list(digests) if digests is not None else [None] * len(images)
    for image, digest, rest in zip(images, keys, pieces[1:]):
        pixel_values, grid = cache.get(processor, image, size, digest)
        pixels.append(pixel_values)
        grids.append(grid)
        ids.extend([image_id] * (int(grid.prod()) // merge))
        ids.extend(texts.get(tokenizer, rest))
    input_ids = torch.tensor([ids], dtype=torch.long)
    result: dict[str, Any] = {
        "input_ids": input_ids,
        "attention_mask": torch.ones_like(input_ids),
        "mm_token_type_ids": (input_ids == image_id).to(torch.int32),
    }
    if images:
        result["image_pixels"] = tuple(pixels)
        result["image_grid_thw"] = torch.cat(grids)
    return result


def to_chat(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages in the processor's chat format: images as ``{"type": "image", "image": PIL}`` items
    (see ``base.chat_messages``)."""
    return chat_messages(messages, lambda image: {"type": "image", "image": image})
