"""Per-mask verification for ``examine_each_mask``: one isolated VLM call per mask.

Each call has its own system prompt and three images: the raw image, the image with only that
mask drawn, and a zoomed view (the region around the mask's box, plain and with the mask drawn).
These calls never enter the main conversation.
"""

from __future__ import annotations

import threading
import time
from typing import Generator

from PIL import Image

from .parsing import parse_verdict
from .prompts import Prompts
from .render import render_single_mask, render_zoom_view
from .types import Event, Generation, ImagePart, Masks, MaskVerdict, MaskVerdictReady, Message, TextPart
from .vlm.base import VLM, generate


class RunCancelled(Exception):
    """The user stopped the run while a tool was working."""


def verification_messages(
    prompts: Prompts, image: Image.Image, query: str, mask_view: ImagePart, zoom_view: ImagePart, mask_number: int
) -> list[Message]:
    """The isolated conversation that verifies one mask: system prompt, then three images and the query."""
    return [
        Message("system", (TextPart(prompts.verify_system),)),
        Message(
            "user",
            (
                ImagePart(image, "raw"),
                mask_view,
                zoom_view,
                TextPart(prompts.format("verify_user", query=query, mask_number=mask_number)),
            ),
        ),
    ]


def _checked(generation: Generation) -> Generation:
    if generation.finish_reason == "cancelled":
        raise RunCancelled()
    return generation


def verify_masks(
    vlm: VLM,
    prompts: Prompts,
    image: Image.Image,
    query: str,
    masks: Masks,
    round_index: int,
    *,
    max_new_tokens: int | None = None,
    stop: threading.Event | None = None,
) -> Generator[Event, None, list[MaskVerdict]]:
    """Verify every mask in order; yields a ``MaskVerdictReady`` per mask and returns all verdicts.

    A response without a usable verdict (missing, or both words) gets one correction in the same
    isolated conversation; if the second response is unusable too, the mask is kept (a rejection
    would lose it for good, while the main model still decides what to select) and the verdict is
    marked ``source="fallback"``.

    Args:
        masks: the current masks, bool (N, H, W) at the image's resolution; numbered 1..N.

    Raises:
        RunCancelled: when ``stop`` is set.
        BackendError: when the VLM backend fails.
    """
    verdicts: list[MaskVerdict] = []
    for index in range(len(masks)):
        if stop is not None and stop.is_set():
            raise RunCancelled()
        started = time.perf_counter()
        number = index + 1
        mask = masks.masks[index]
        mask_view = ImagePart(render_single_mask(image, mask), f"round{round_index}_mask{number}_view")
        zoom_view = ImagePart(render_zoom_view(image, mask), f"round{round_index}_mask{number}_zoom")
        conversation = verification_messages(prompts, image, query, mask_view, zoom_view, number)
        first = _checked(generate(vlm, conversation, max_new_tokens=max_new_tokens, stop=stop))
        outputs = [first.text]
        verdict, _error = parse_verdict(first.text)
        prompt_tokens = first.prompt_tokens
        if verdict is None:
            retry = conversation + [
                Message("assistant", (TextPart(first.text),)),
                Message("user", (TextPart(prompts.format("verify_retry")),)),
            ]
            second = _checked(generate(vlm, retry, max_new_tokens=max_new_tokens, stop=stop))
            outputs.append(second.text)
            verdict, _error = parse_verdict(second.text)
            prompt_tokens = second.prompt_tokens
        result = MaskVerdict(
            mask_number=number,
            verdict=verdict if verdict is not None else "accept",
            source="model" if verdict is not None else "fallback",
            outputs=tuple(outputs),
            mask_view=mask_view,
            zoom_view=zoom_view,
            prompt_tokens=prompt_tokens,
            seconds=time.perf_counter() - started,
        )
        verdicts.append(result)
        yield MaskVerdictReady(round_index, result, len(masks))
    return verdicts
