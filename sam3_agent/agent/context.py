"""The context policy: which messages of the main conversation go into the next VLM request.

``build_context`` is a pure function of the conversation so far. It never edits the stored
messages; it returns the messages to send and a ``ContextRecord`` saying which were kept, which
dropped, and which had their images replaced by text (the UI greys out the dropped ones).

Policy:
- always keep message 0 (system prompt) and message 1 (raw image + query);
- keep everything from the latest assistant message whose ``segment_phrase`` call ran (it replaced
  the masks, so the masks shown before it no longer exist) to the end; drop what lies between;
- drop every mistake exchange (an assistant message whose call could not run, and the feedback
  after it) except the latest one when it ends the conversation: once the model has been told or
  has moved on, old mistakes only fill the context, and without this rule a model that keeps
  failing before its first ``segment_phrase`` would grow the context every round;
- when phrases were tried before that message, append a note to message 1 that lists them;
- at most two images, as in the reference agent: the raw image of message 1 and the numbered overlay in the reply
  to the latest call that replaced the masks (``segment_phrase`` or ``examine_each_mask`` that ran). A dense set
  keeps within that: its overlay is drawn larger (``imaging.enlarged``). Only with the opt-in
  ``AgentConfig.dense_tiles`` does that reply also hold the overlay's four tiles (``imaging.tiles``; they come and
  go with their overlay), and the cap is then ``limits.MAX_MAIN_IMAGES_WITH_TILES`` (1 + 1 + 4). When that reply
  has no image (no mask found, every mask rejected), no overlay is current: masks that no longer exist are never
  shown as if they did. Every other image becomes a text placeholder, one per run of images next to each other (an
  overlay and its tiles are one placeholder).

The cap is an invariant checked on the messages a request holds once they are built (``_within_cap``): a code path
that would send more images is a bug, which the check logs as an error and repairs (the newest images beyond the
cap, except the photo, are sent as text, reason ``OVER_IMAGE_CAP``), so a user's run never sends more than the cap
and never stops for it; tests/test_image_cap.py pins it over random histories.

The record names the rule behind each dropped message and each image turned into text (``REASONS``), so
the UI can say why without knowing the policy.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from ..limits import MAX_MAIN_IMAGES
from ..messages import ImagePart, Message, Part, TextPart
from ..types import ContextRecord
from .tool_specs import TOOL_SPECS

logger = logging.getLogger(__name__)

MAX_CONTEXT_IMAGES = MAX_MAIN_IMAGES  # raw image + latest overlay: the default cap of every main request

# Why a message was left out of a request or had its images turned into text (``ContextRecord.reasons``).
BEFORE_LATEST_SEGMENT = "before_latest_segment"  # lies before the latest segment_phrase call: its masks are gone
OLD_MISTAKE = "old_mistake"  # a mistake exchange the model has been told about and moved past
MASKS_GONE = "masks_gone"  # kept as text: its image shows masks that no longer exist (not the current overlay)
OVER_IMAGE_CAP = "over_image_cap"  # kept as text: the request would hold more images than its cap (a bug, logged)
REASONS = (BEFORE_LATEST_SEGMENT, OLD_MISTAKE, MASKS_GONE, OVER_IMAGE_CAP)


def tried_phrases(messages: Sequence[Message], before: int | None = None) -> list[str]:
    """Phrases of the ``segment_phrase`` calls that ran, in first-use order, optionally only before an index.

    Args:
        messages: the main conversation.
        before: only look at messages with a smaller index (``None``: all).
    """
    seen: list[str] = []
    end = len(messages) if before is None else before
    for message in messages[:end]:
        if message.starts_masks and message.call is not None:
            phrase = str(message.call.parameters.get("text_prompt", "")).strip()
            if phrase and phrase.lower() not in (p.lower() for p in seen):
                seen.append(phrase)
    return seen


def _latest_segment_index(messages: Sequence[Message]) -> int | None:
    for index in range(len(messages) - 1, 1, -1):
        message = messages[index]
        if message.role == "assistant" and message.starts_masks:
            return index
    return None


def _current_masks_reply(messages: Sequence[Message]) -> int | None:
    """Index of the reply to the latest call that ran and replaced the masks, or ``None``: its image (if any) is
    the only one showing masks that still exist."""
    for index in range(len(messages) - 1, 1, -1):
        message = messages[index]
        call = message.call
        if message.role != "assistant" or message.mistake or call is None:
            continue
        spec = TOOL_SPECS.get(call.name)
        if spec is not None and spec.replaces_masks:
            reply = index + 1
            return reply if reply < len(messages) and messages[reply].role == "user" else None
    return None


def _without_old_mistakes(messages: Sequence[Message], kept: list[int]) -> list[int]:
    """``kept`` minus the mistake exchanges, except one that ends the conversation."""
    last = len(messages) - 1
    drop: set[int] = set()
    for index in kept[2:]:
        message = messages[index]
        if message.role != "assistant" or not message.mistake:
            continue
        reply = index + 1 if index < last and messages[index + 1].role == "user" else None
        end = reply if reply is not None else index
        if end == last:
            continue  # the latest mistake: the model must see what it did and the feedback
        drop.add(index)
        if reply is not None:
            drop.add(reply)
    return [i for i in kept if i not in drop]


def build_context(
    messages: Sequence[Message],
    format_text: Callable[..., str],
    max_images: int = MAX_CONTEXT_IMAGES,
) -> tuple[list[Message], ContextRecord]:
    """Apply the context policy to the conversation so far.

    Args:
        messages: the full main conversation (``Trace.messages``): message 0 is the system prompt,
            message 1 the user's image and query.
        format_text: ``Prompts.format``; used for the keys ``tried_phrases_note`` (field
            ``phrases``) and ``image_omitted``.
        max_images: the most images the request may hold (``AgentConfig.max_main_images``: 2, or 6 with the
            opt-in tiles), at least 1.

    Returns:
        The messages to send (copies where changed), never more than ``max_images`` images, and the record of
        what was kept and dropped.

    Raises:
        ValueError: when the conversation does not start with a system and a user message, or ``max_images``
            is below 1.
    """
    if len(messages) < 2 or messages[0].role != "system" or messages[1].role != "user":
        raise ValueError("a main conversation starts with a system message and a user message")
    if max_images < 1:
        raise ValueError(f"a main request holds at least the photo: max_images must be at least 1, got {max_images}")

    boundary = _latest_segment_index(messages)
    from_boundary = [0, 1, *range(boundary, len(messages))] if boundary is not None else list(range(len(messages)))
    after_boundary = set(from_boundary)
    kept = _without_old_mistakes(messages, from_boundary)
    kept_set = set(kept)
    dropped = tuple(i for i in range(len(messages)) if i not in kept_set)

    phrases = tried_phrases(messages, before=boundary) if boundary is not None else []
    note = format_text("tried_phrases_note", phrases=", ".join(f'"{p}"' for p in phrases)) if phrases else None
    shown = _images_shown(messages, kept_set, max_images)
    placeholder = format_text("image_omitted")
    sent: list[Message] = []
    images_as_text: list[int] = []
    for index in kept:
        message, replaced = _as_sent(messages[index], index, shown, placeholder, note if index == 1 else None)
        sent.append(message)
        if replaced:
            images_as_text.append(index)
    sent, over_cap = _within_cap(sent, kept, max_images, placeholder)

    reasons = {i: BEFORE_LATEST_SEGMENT if i not in after_boundary else OLD_MISTAKE for i in dropped}
    reasons.update((i, MASKS_GONE) for i in images_as_text)
    reasons.update((i, OVER_IMAGE_CAP) for i in over_cap)
    record = ContextRecord(
        kept=tuple(kept),
        dropped=dropped,
        images_as_text=tuple(sorted({*images_as_text, *over_cap})),
        note=note,
        image_count=sum(len(m.images) for m in sent),
        reasons=tuple(sorted(reasons.items())),
    )
    return sent, record


def _within_cap(sent: list[Message], kept: Sequence[int], max_images: int,
                placeholder: str) -> tuple[list[Message], list[int]]:
    """The invariant on a built request: at most ``max_images`` images. ``sent`` itself when it holds; otherwise (a
    bug: the policy above never lets it happen) the error is logged and the request repaired: the photo (the first
    image of message 1) and the newest other images up to the cap stay, the rest become ``placeholder``. Returns
    the messages and the conversation indices of those whose images were turned into text here."""
    places = [(i, k) for i, message in enumerate(sent) for k, part in enumerate(message.parts)
              if isinstance(part, ImagePart)]
    if len(places) <= max_images:
        return sent, []
    photo = places[:1] if places[0][0] == 1 else []  # sent[1] is message 1: the photo and the query
    others = places[len(photo):]
    room = max_images - len(photo)
    keep = set(photo) | set(others[len(others) - room:] if room > 0 else [])
    logger.error("context policy bug: a main request held %d images, more than its cap of %d; %d were sent as text",
                 len(places), max_images, len(places) - len(keep))
    repaired, changed = list(sent), []
    for i in sorted({i for i, _ in places}):
        shown = {(i, k) for (j, k) in keep if j == i}
        message, replaced = _as_sent(sent[i], i, shown, placeholder, None)
        if replaced:
            repaired[i] = message
            changed.append(kept[i])
    return repaired, changed


def _images_shown(messages: Sequence[Message], kept: set[int], max_images: int) -> set[tuple[int, int]]:
    """The (message index, part index) of every image the request shows, at most ``max_images``: the raw
    image (the first image of message 1), then the first images of the reply showing the current masks (its
    overlay, then, with the opt-in tiles, the overlay's tiles)."""
    raw = next((i for i, part in enumerate(messages[1].parts) if isinstance(part, ImagePart)), None)
    shown = {(1, raw)} if raw is not None else set()
    current = _current_masks_reply(messages)
    if current is not None and current in kept:
        overlays = [(current, i) for i, part in enumerate(messages[current].parts) if isinstance(part, ImagePart)]
        shown.update(overlays[: max_images - len(shown)])  # one place is the raw image's
    return shown


def _as_sent(
    message: Message, index: int, shown: set[tuple[int, int]], placeholder: str, note: str | None
) -> tuple[Message, bool]:
    """``message`` as the request holds it: images not in ``shown`` replaced by ``placeholder`` (one for a run of
    such images next to each other: an overlay and its tiles), ``note`` appended; the message itself when nothing
    changed. Also says whether an image was replaced."""
    parts: list[Part] = []
    replaced = after_placeholder = False
    for part_index, part in enumerate(message.parts):
        if isinstance(part, ImagePart) and (index, part_index) not in shown:
            if not after_placeholder:
                parts.append(TextPart(placeholder))
            replaced = after_placeholder = True
        else:
            parts.append(part)
            after_placeholder = False
    if note is not None:
        parts.append(TextPart(note))
    if not replaced and note is None:
        return message, False
    return Message(message.role, tuple(parts), message.call, message.starts_masks, message.mistake), replaced
