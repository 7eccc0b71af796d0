"""Verification in groups for ``examine_each_mask`` with ``in_groups``: several masks checked in one VLM call.

The masks to check (every mask, or the ones named) are taken ``VERIFY_GROUP_SIZE`` at a time in their order. Each
group is one isolated call: the verification system prompt, the raw image and the query, then one view of the
photo with only the group's masks drawn and numbered with their own numbers (``verify_views.render_group_view``,
the photo's tokens once per group instead of about 500 tokens per mask), and the question naming them. The answer
gives one line per mask, read by ``verdicts.parse_group_verdicts``: a mask without exactly one clear verdict is
asked about once more in the same conversation (only those masks), and is kept unconfirmed (verdict
``"unconfirmed"``, ``source="fallback"``) if the second answer is no clearer, as the per-mask path does. A backend
fault keeps the group's masks unconfirmed with ``source="error"``. Groups are independent: a backend that supports
batches answers ``batch_size`` groups at once.
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
from ..limits import VERIFY_GROUP_SIZE
from ..mask_set import Masks
from ..messages import Generation, ImagePart, Message, TextPart
from ..types import MaskVerdict
from ..vlm.base import VLM, generate_each, supports_batches
from .prompts import Prompts, token_limit_text
from .verdicts import parse_group_verdicts
from .verify import RunCancelled, checked_generation

logger = logging.getLogger(__name__)


def mask_groups(numbers: Sequence[int], size: int = VERIFY_GROUP_SIZE) -> list[tuple[int, ...]]:
    """``numbers`` cut, in order, into groups of ``size`` (the last one shorter).

    Raises:
        ValueError: ``size`` below 1.
    """
    if size < 1:
        raise ValueError(f"a group holds at least one mask, got size {size}")
    return [tuple(numbers[start : start + size]) for start in range(0, len(numbers), size)]


def numbers_text(numbers: Sequence[int]) -> str:
    """``"3, 4 and 9"``: mask numbers as a sentence lists them."""
    words = [str(n) for n in numbers]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def group_messages(prompts: Prompts, image: Image.Image, query: str, view: ImagePart,
                   numbers: Sequence[int]) -> list[Message]:
    """The isolated conversation that verifies one group: the system prompt, then one user message holding the raw
    image, the query (with what the next image is), the group's view and the question naming its masks. Everything
    before the group's view is the same for every group of a round (a shared prefix, as in the per-mask calls)."""
    return [
        Message("system", (TextPart(prompts.verify_system),)),
        Message(
            "user",
            (
                ImagePart(image, "raw"),
                TextPart(prompts.format("verify_group_user", query=query)),
                view,
                TextPart(prompts.format("verify_group_candidates", numbers=numbers_text(numbers),
                                        example=numbers[0])),
            ),
        ),
    ]


def group_retry_messages(prompts: Prompts, conversation: list[Message], first: Generation,
                         unclear: Sequence[int], truncated: bool) -> list[Message]:
    """The conversation asking again about the masks of ``unclear`` only: the first try, its output, and the request
    (``verify_group_truncated`` with the token budget when the first try ran out inside its reasoning)."""
    if truncated:
        request = prompts.format("verify_group_truncated", limit=token_limit_text(first.output_tokens),
                                 numbers=numbers_text(unclear), example=unclear[0])
    else:
        request = prompts.format("verify_group_retry", numbers=numbers_text(unclear), example=unclear[0])
    return conversation + [
        Message("assistant", (TextPart(first.text),)),
        Message("user", (TextPart(request),)),
    ]


def _read(generation: Generation, numbers: Sequence[int]) -> dict[int, tuple[str | None, str | None]]:
    return parse_group_verdicts(generation.text, numbers, generation.finish_reason, generation.starts_in_reasoning)


def verify_in_groups(
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
    group_size: int = VERIFY_GROUP_SIZE,
    bounds: PixelBounds = DEFAULT_BOUNDS,
) -> Generator[Event, None, list[MaskVerdict]]:
    """Verify every mask (or the masks ``numbers``, ascending) in groups of ``group_size``; yields a
    ``MaskVerdictReady`` per mask (in mask order, when its batch of groups completes) and returns the verdicts.

    Each verdict's ``mask_view`` is its group's view (one ``ImagePart`` shared by the group), ``zoom_view`` is
    ``None``, ``group`` the group's numbers, ``outputs`` the group call's outputs, and ``seconds`` an equal share of
    its batch's wall time. ``bounds``: the verifier's pixel bounds (the group views are drawn at the size its
    processor uses).

    Raises:
        RunCancelled: when ``stop`` is set.
        ValueError: ``batch_size`` or ``group_size`` below 1.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if batch_size == 1 or not supports_batches(vlm):
        batch_size = 1
    todo = list(numbers) if numbers is not None else list(range(1, len(masks) + 1))
    groups = mask_groups(todo, group_size)
    verdicts: list[MaskVerdict] = []
    for start in range(0, len(groups), batch_size):
        if stop is not None and stop.is_set():
            raise RunCancelled()
        for result in _verify_batch(vlm, prompts, image, query, masks, round_index, groups[start:start + batch_size],
                                    max_new_tokens, stop, bounds):
            verdicts.append(result)
            yield MaskVerdictReady(round_index, result, len(masks))
    return verdicts


def _view(image: Image.Image, masks: Masks, round_index: int, group: tuple[int, ...], bounds: PixelBounds) -> ImagePart:
    """The group's view as a derived part (the trace keeps its recipe)."""
    recipe = MaskView("group", image, masks, bounds=bounds, indices=tuple(n - 1 for n in group))
    return view_part(f"round{round_index}_group{group[0]}", recipe)


def _verify_batch(
    vlm: VLM, prompts: Prompts, image: Image.Image, query: str, masks: Masks, round_index: int,
    groups: list[tuple[int, ...]], max_new_tokens: int | None, stop: threading.Event | None, bounds: PixelBounds,
) -> list[MaskVerdict]:
    started = time.perf_counter()
    views = [_view(image, masks, round_index, g, bounds) for g in groups]
    conversations = [group_messages(prompts, image, query, v, g) for g, v in zip(groups, views)]
    try:
        firsts = [checked_generation(g) for g in generate_each(vlm, conversations, max_new_tokens=max_new_tokens, stop=stop)]
        outputs: list[list[Generation]] = [[g] for g in firsts]
        readings = [_read(g, group) for g, group in zip(firsts, groups)]
        again = [(i, [n for n in group if readings[i][n][0] is None]) for i, group in enumerate(groups)]
        again = [(i, unclear) for i, unclear in again if unclear]
        if again:
            retries = [group_retry_messages(prompts, conversations[i], firsts[i], unclear,
                                            any(readings[i][n][1] == "truncated" for n in unclear))
                       for i, unclear in again]
            seconds = generate_each(vlm, retries, max_new_tokens=max_new_tokens, stop=stop)
            for (i, unclear), second in zip(again, seconds):
                outputs[i].append(checked_generation(second))
                readings[i].update(_read(second, unclear))
    except BackendError as fault:
        if len(groups) > 1:  # find the group(s) that fail: one by one, each failure recorded on its own
            logger.warning("a batch of %d group verifications failed (%s); verifying them one by one", len(groups), fault)
            return [v for g in groups for v in _verify_batch(vlm, prompts, image, query, masks, round_index, [g],
                                                             max_new_tokens, stop, bounds)]
        logger.warning("verification of masks %s failed: %s", numbers_text(groups[0]), fault)
        share = (time.perf_counter() - started) / len(groups[0])
        return [MaskVerdict(mask_number=n, verdict="unconfirmed", source="error", outputs=(), mask_view=views[0],
                            zoom_view=None, seconds=share, error=str(fault), group=groups[0]) for n in groups[0]]
    share = (time.perf_counter() - started) / sum(len(g) for g in groups)
    records = []
    for group, view, output, reading in zip(groups, views, outputs, readings):
        texts = tuple(g.text for g in output)
        for n in group:
            verdict = reading[n][0]
            records.append(MaskVerdict(
                mask_number=n,
                verdict=verdict if verdict is not None else "unconfirmed",  # type: ignore[arg-type]
                source="model" if verdict is not None else "fallback",
                outputs=texts,
                mask_view=view,
                zoom_view=None,
                prompt_tokens=output[-1].prompt_tokens,
                seconds=share,
                group=group,
            ))
    return records
