"""Per-mask verification for ``examine_each_mask``: one isolated VLM call per mask.

Each call has its own system prompt and three images: the raw image, the image with only that
mask drawn, and a zoomed view (the region around the mask's box, plain and with the mask drawn).
These calls never enter the main conversation.

The calls are independent, so a backend that supports batches (``vlm.base.BatchVLM``) answers
``batch_size`` of them at once; other backends, and ``batch_size=1``, verify one mask at a time.
Greedy backends give the same verdicts either way.
"""

from __future__ import annotations

import threading
import time
from typing import Generator, Sequence

from PIL import Image

from .parsing import parse_verdict
from .prompts import Prompts
from .render import MaskView, render_mask_views
from .types import Event, Generation, ImagePart, Masks, MaskVerdict, MaskVerdictReady, Message, TextPart
from .vlm.base import VLM, generate, generate_each, supports_batches

DEFAULT_VERIFY_BATCH_SIZE = 8  # masks verified per batch; the tool's usual 1-10 masks take one or two batches


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


def retry_messages(prompts: Prompts, conversation: list[Message], first_output: str) -> list[Message]:
    """The conversation of a second try: the first try, its output, and the request for a verdict."""
    return conversation + [
        Message("assistant", (TextPart(first_output),)),
        Message("user", (TextPart(prompts.format("verify_retry")),)),
    ]


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
    batch_size: int = 1,
) -> Generator[Event, None, list[MaskVerdict]]:
    """Verify every mask in order; yields a ``MaskVerdictReady`` per mask and returns all verdicts.

    A response without a usable verdict (missing, or both words) gets one correction in the same
    isolated conversation; if the second response is unusable too, the mask is kept (a rejection
    would lose it for good, while the main model still decides what to select) and the verdict is
    marked ``source="fallback"``.

    With ``batch_size`` > 1 and a backend that supports batches, masks are verified
    ``batch_size`` at a time (their corrections batched too) and the events of a batch are
    yielded, in mask order, when it completes; each verdict's ``seconds`` is then an equal share of
    its batch's wall time. Otherwise masks are verified one by one (first try, then its
    correction), exactly as with ``batch_size=1``.

    Args:
        masks: the current masks, bool (N, H, W) at the image's resolution; numbered 1..N.
        batch_size: most masks per batch (>= 1).

    Raises:
        RunCancelled: when ``stop`` is set.
        BackendError: when the VLM backend fails.
        ValueError: ``batch_size`` below 1.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if batch_size == 1 or not supports_batches(vlm):
        batch_size = 1
    verdicts: list[MaskVerdict] = []
    for start in range(0, len(masks), batch_size):
        if stop is not None and stop.is_set():
            raise RunCancelled()
        numbers = list(range(start + 1, min(start + batch_size, len(masks)) + 1))
        if batch_size == 1:
            batch = [_verify_one(vlm, prompts, image, query, masks, round_index, numbers[0], max_new_tokens, stop)]
        else:
            batch = _verify_batch(vlm, prompts, image, query, masks, round_index, numbers, max_new_tokens, stop)
        for result in batch:
            verdicts.append(result)
            yield MaskVerdictReady(round_index, result, len(masks))
    return verdicts


def _views(image: Image.Image, masks: Masks, round_index: int, number: int) -> tuple[ImagePart, ImagePart]:
    """The mask view and zoom view of mask ``number``, as derived parts: the trace keeps their recipes, and
    their pixels live only while something reads them (``types.RENDERED_VIEWS``)."""
    index = number - 1
    mask_pixels, zoom_pixels = render_mask_views(image, masks, index)
    return (
        ImagePart(mask_pixels, f"round{round_index}_mask{number}_view", MaskView("mask", image, masks, index)),
        ImagePart(zoom_pixels, f"round{round_index}_mask{number}_zoom", MaskView("zoom", image, masks, index)),
    )


def _verdict(
    number: int, outputs: Sequence[Generation], views: tuple[ImagePart, ImagePart], seconds: float
) -> MaskVerdict:
    """The record of one mask from its first (and maybe second) generation."""
    verdict, _error = parse_verdict(outputs[-1].text)
    return MaskVerdict(
        mask_number=number,
        verdict=verdict if verdict is not None else "accept",
        source="model" if verdict is not None else "fallback",
        outputs=tuple(g.text for g in outputs),
        mask_view=views[0],
        zoom_view=views[1],
        prompt_tokens=outputs[-1].prompt_tokens,
        seconds=seconds,
    )


def _verify_one(
    vlm: VLM, prompts: Prompts, image: Image.Image, query: str, masks: Masks, round_index: int, number: int,
    max_new_tokens: int | None, stop: threading.Event | None,
) -> MaskVerdict:
    started = time.perf_counter()
    views = _views(image, masks, round_index, number)
    conversation = verification_messages(prompts, image, query, views[0], views[1], number)
    first = _checked(generate(vlm, conversation, max_new_tokens=max_new_tokens, stop=stop))
    outputs = [first]
    if parse_verdict(first.text)[0] is None:
        retry = retry_messages(prompts, conversation, first.text)
        outputs.append(_checked(generate(vlm, retry, max_new_tokens=max_new_tokens, stop=stop)))
    return _verdict(number, outputs, views, time.perf_counter() - started)


def _verify_batch(
    vlm: VLM, prompts: Prompts, image: Image.Image, query: str, masks: Masks, round_index: int, numbers: list[int],
    max_new_tokens: int | None, stop: threading.Event | None,
) -> list[MaskVerdict]:
    started = time.perf_counter()
    views = [_views(image, masks, round_index, n) for n in numbers]
    conversations = [verification_messages(prompts, image, query, v[0], v[1], n) for n, v in zip(numbers, views)]
    firsts = generate_each(vlm, conversations, max_new_tokens=max_new_tokens, stop=stop)
    outputs: list[list[Generation]] = [[_checked(g)] for g in firsts]
    unusable = [i for i, g in enumerate(firsts) if parse_verdict(g.text)[0] is None]
    if unusable:
        retries = [retry_messages(prompts, conversations[i], firsts[i].text) for i in unusable]
        for i, second in zip(unusable, generate_each(vlm, retries, max_new_tokens=max_new_tokens, stop=stop)):
            outputs[i].append(_checked(second))
    share = (time.perf_counter() - started) / len(numbers)
    return [_verdict(n, o, v, share) for n, o, v in zip(numbers, outputs, views)]
