"""Per-mask verification for ``examine_each_mask``: one isolated VLM call per mask (every mask, or the ones named).

Each call has its own system prompt and three images: the raw image (followed by the query), the whole image
small with only that mask drawn (``verify_views.render_locate_view``), and a close-up (the region around the
mask's box, plain and with the mask drawn: ``render_closeup_view``), then the mask's number; what comes before the
mask's own views is the same for every mask, and the mask's own views are drawn at the size the processor uses
(about 500 tokens together, whatever the photo's size). These calls never enter the main conversation, and no call
sees another mask's views or verdict. (Several masks in one call: ``verify_groups``.)

A mask whose verification call fails for a backend reason (out of memory, a server error, an image
the processor refuses) gets a verdict with ``source="error"``: the mask is kept, the failure is
recorded, and the other masks are still verified. Such a mask, and one whose answers stayed unusable, is never
recorded as accepted: its verdict is ``"unconfirmed"``.

The calls are independent, so a backend that supports batches (``vlm.base.BatchVLM``) answers
``batch_size`` of them at once; other backends, and ``batch_size=1``, verify one mask at a time.
Greedy or seeded backends give the same verdicts either way (the local engine: verified on CPU in float32 by
tests/test_engine_conformance.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Generator, Sequence

from PIL import Image

from ..errors import BackendError
from ..events import Event, MaskVerdictReady
from ..imaging.legibility import DEFAULT_BOUNDS, PixelBounds
from ..imaging.views import MaskView, view_part
from ..mask_set import Masks
from ..messages import Generation, ImagePart, Message, TextPart
from ..types import MaskVerdict
from ..vlm.base import VLM, generate, generate_each, supports_batches
from .prompts import Prompts, token_limit_text
from .verdicts import parse_verdict

logger = logging.getLogger(__name__)



class RunCancelled(Exception):
    """The user stopped the run while a tool was working."""


def verification_messages(
    prompts: Prompts, image: Image.Image, query: str, mask_view: ImagePart, zoom_view: ImagePart, mask_number: int
) -> list[Message]:
    """The isolated conversation that verifies one mask: the system prompt, then one user message holding the raw
    image, the query (with what the next images are), the mask's locate view, its close-up and its number.

    Everything up to the mask view is the same for every mask of one round, so a batch of verifications (or a
    prefix cache) computes it once; only the two views and a short question are each mask's own."""
    return [
        Message("system", (TextPart(prompts.verify_system),)),
        Message(
            "user",
            (
                ImagePart(image, "raw"),
                TextPart(prompts.format("verify_user", query=query)),
                mask_view,
                zoom_view,
                TextPart(prompts.format("verify_candidate", mask_number=mask_number)),
            ),
        ),
    ]


def checked_generation(generation: Generation) -> Generation:
    """``generation``, unless the user stopped the run while it was made.

    Raises:
        RunCancelled: its finish reason is ``"cancelled"``.
    """
    if generation.finish_reason == "cancelled":
        raise RunCancelled()
    return generation


def read_verdict(generation: Generation) -> tuple[str | None, str | None]:
    """``verdicts.parse_verdict`` of a verification call's generation (its finish reason and reasoning flag included)."""
    return parse_verdict(generation.text, generation.finish_reason, generation.starts_in_reasoning)


def retry_messages(prompts: Prompts, conversation: list[Message], first: Generation | str) -> list[Message]:
    """The conversation of a second try: the first try, its output, and the request for a verdict.

    The request is ``verify_truncated`` (with the token budget) when the first try ran out of tokens
    inside its reasoning, else ``verify_retry``.
    """
    first = first if isinstance(first, Generation) else Generation(first)
    if read_verdict(first)[1] == "truncated":
        request = prompts.format("verify_truncated", limit=token_limit_text(first.output_tokens))
    else:
        request = prompts.format("verify_retry")
    return conversation + [
        Message("assistant", (TextPart(first.text),)),
        Message("user", (TextPart(request),)),
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
    numbers: Sequence[int] | None = None,
    bounds: PixelBounds = DEFAULT_BOUNDS,
) -> Generator[Event, None, list[MaskVerdict]]:
    """Verify every mask (or the masks ``numbers``) in order; yields a ``MaskVerdictReady`` per mask verified and
    returns their verdicts.

    A response without a usable verdict (missing, both words, negated, hedged or asked, or cut off
    inside its reasoning; see ``verdicts.parse_verdict``) gets one correction in the same isolated
    conversation; if the second response is unusable too, the mask is kept (a rejection would lose
    it for good, while the main model still decides what to select), not confirmed: its verdict is
    ``"unconfirmed"`` with ``source="fallback"``. A backend fault while verifying one mask gives that mask an
    ``"unconfirmed"`` verdict with ``source="error"`` (kept, with the reason in ``error``); the other masks are still verified (a
    failed batch is verified again mask by mask, to find the one that fails).

    With ``batch_size`` > 1 and a backend that supports batches, masks are verified
    ``batch_size`` at a time (their corrections batched too) and the events of a batch are
    yielded, in mask order, when it completes; each verdict's ``seconds`` is then an equal share of
    its batch's wall time. Otherwise masks are verified one by one (first try, then its
    correction), exactly as with ``batch_size=1``.

    Args:
        masks: the current masks, bool (N, H, W) at the image's resolution; numbered 1..N.
        batch_size: most masks per batch (>= 1).
        numbers: the 1-based numbers of the masks to verify, ascending, each once (``None``: all N); the batches
            are made of these masks alone, and each verdict keeps its mask's number in ``masks``.
        bounds: the verifier's pixel bounds: each mask's views are drawn at the size its processor uses.

    Raises:
        RunCancelled: when ``stop`` is set.
        ValueError: ``batch_size`` below 1.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if batch_size == 1 or not supports_batches(vlm):
        batch_size = 1
    todo = list(numbers) if numbers is not None else list(range(1, len(masks) + 1))
    verdicts: list[MaskVerdict] = []
    for start in range(0, len(todo), batch_size):
        if stop is not None and stop.is_set():
            raise RunCancelled()
        chunk = todo[start:start + batch_size]
        if batch_size == 1:
            batch = [_verify_one(vlm, prompts, image, query, masks, round_index, chunk[0], max_new_tokens, stop,
                                 bounds)]
        else:
            batch = _verify_batch(vlm, prompts, image, query, masks, round_index, chunk, max_new_tokens, stop,
                                  bounds)
        for result in batch:
            verdicts.append(result)
            yield MaskVerdictReady(round_index, result, len(masks))
    return verdicts


def _views(image: Image.Image, masks: Masks, round_index: int, number: int,
           bounds: PixelBounds) -> tuple[ImagePart, ImagePart]:
    """The locate view and close-up of mask ``number``, as derived parts: the trace keeps their recipes, and
    their pixels live only while something reads them (``messages.RENDERED_VIEWS``)."""
    index = number - 1
    return (
        view_part(f"round{round_index}_mask{number}_view", MaskView("locate", image, masks, index, bounds=bounds)),
        view_part(f"round{round_index}_mask{number}_zoom", MaskView("closeup", image, masks, index, bounds=bounds)),
    )


def _verdict(
    number: int, outputs: Sequence[Generation], views: tuple[ImagePart, ImagePart], seconds: float
) -> MaskVerdict:
    """The record of one mask from its first (and maybe second) generation."""
    verdict, _error = read_verdict(outputs[-1])
    return MaskVerdict(
        mask_number=number,
        verdict=verdict if verdict is not None else "unconfirmed",
        source="model" if verdict is not None else "fallback",
        outputs=tuple(g.text for g in outputs),
        mask_view=views[0],
        zoom_view=views[1],
        prompt_tokens=outputs[-1].prompt_tokens,
        seconds=seconds,
    )


def _verify_one(
    vlm: VLM, prompts: Prompts, image: Image.Image, query: str, masks: Masks, round_index: int, number: int,
    max_new_tokens: int | None, stop: threading.Event | None, bounds: PixelBounds,
) -> MaskVerdict:
    started = time.perf_counter()
    views = _views(image, masks, round_index, number, bounds)
    conversation = verification_messages(prompts, image, query, views[0], views[1], number)
    outputs: list[Generation] = []
    try:
        first = checked_generation(generate(vlm, conversation, max_new_tokens=max_new_tokens, stop=stop))
        outputs.append(first)
        if read_verdict(first)[0] is None:
            retry = retry_messages(prompts, conversation, first)
            outputs.append(checked_generation(generate(vlm, retry, max_new_tokens=max_new_tokens, stop=stop)))
    except BackendError as fault:
        logger.warning("verification of mask %d failed: %s", number, fault)
        return _error_verdict(number, outputs, views, time.perf_counter() - started, str(fault))
    return _verdict(number, outputs, views, time.perf_counter() - started)


def _error_verdict(
    number: int, outputs: Sequence[Generation], views: tuple[ImagePart, ImagePart], seconds: float, reason: str
) -> MaskVerdict:
    """The record of a mask whose verification call failed: kept unconfirmed, with the reason."""
    return MaskVerdict(
        mask_number=number,
        verdict="unconfirmed",
        source="error",
        outputs=tuple(g.text for g in outputs),
        mask_view=views[0],
        zoom_view=views[1],
        prompt_tokens=outputs[-1].prompt_tokens if outputs else None,
        seconds=seconds,
        error=reason,
    )


def _verify_batch(
    vlm: VLM, prompts: Prompts, image: Image.Image, query: str, masks: Masks, round_index: int, numbers: list[int],
    max_new_tokens: int | None, stop: threading.Event | None, bounds: PixelBounds,
) -> list[MaskVerdict]:
    started = time.perf_counter()
    views = [_views(image, masks, round_index, n, bounds) for n in numbers]
    conversations = [verification_messages(prompts, image, query, v[0], v[1], n) for n, v in zip(numbers, views)]
    try:
        firsts = generate_each(vlm, conversations, max_new_tokens=max_new_tokens, stop=stop)
        outputs: list[list[Generation]] = [[checked_generation(g)] for g in firsts]
        unusable = [i for i, g in enumerate(firsts) if read_verdict(g)[0] is None]
        if unusable:
            retries = [retry_messages(prompts, conversations[i], firsts[i]) for i in unusable]
            for i, second in zip(unusable, generate_each(vlm, retries, max_new_tokens=max_new_tokens, stop=stop)):
                outputs[i].append(checked_generation(second))
    except BackendError as fault:  # find the mask(s) that fail: one by one, each failure recorded on its own
        if len(numbers) == 1:
            logger.warning("verification of mask %d failed: %s", numbers[0], fault)
            return [_error_verdict(numbers[0], [], views[0], time.perf_counter() - started, str(fault))]
        logger.warning("a batch of %d verifications failed (%s); verifying them one by one", len(numbers), fault)
        return [_verify_one(vlm, prompts, image, query, masks, round_index, n, max_new_tokens, stop, bounds)
                for n in numbers]
    share = (time.perf_counter() - started) / len(numbers)
    return [_verdict(n, o, v, share) for n, o, v in zip(numbers, outputs, views)]
