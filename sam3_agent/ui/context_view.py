"""The context panel as a plain record: the messages behind one round's request, which were sent, which dropped and
why (no Gradio, no HTML). ``html.render_context`` renders it.

The reasons come from the context policy itself (``ContextRecord.reasons``, filled by ``context.build_context``);
this module only words them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..agent.context import BEFORE_LATEST_SEGMENT, MASKS_GONE, OLD_MISTAKE, OVER_IMAGE_CAP, build_context
from ..limits import MAX_MAIN_IMAGES_WITH_TILES
from ..messages import ImagePart, Message
from ..types import ContextRecord

EXCERPT_CHARS = 240  # text shown per message in the context panel; the full text is in the trace

# How the context panel words the policy's reasons (``ContextRecord.reasons``); an unknown key is shown as is.
REASON_TEXTS: dict[str, str] = {
    BEFORE_LATEST_SEGMENT: "before the latest segment_phrase: its masks no longer exist",
    OLD_MISTAKE: "an old mistake: the model was told and moved on",
    MASKS_GONE: ("its overlay shows masks that no longer exist: only the raw image and the current masks' overlay "
                 "are sent (with the overlay's tiles, for a dense set, when they are switched on)"),
    OVER_IMAGE_CAP: "sent as text: the request would have held more images than its cap (a bug, in the log)",
}
REASON_NOT_RECORDED = "reason not recorded in this trace"


@dataclass(frozen=True)
class ContextEntry:
    """One message of the main conversation as the context panel shows it.

    Attributes:
        index: position in ``Trace.messages``.
        role: ``"system"``, ``"user"`` or ``"assistant"``.
        excerpt: the message text, whitespace collapsed, cut to ``EXCERPT_CHARS``.
        images: the message's images (thumbnails in the panel).
        dropped: left out of this round's request by the context policy (shown greyed out).
        images_as_text: sent, but with its images replaced by a text placeholder.
        reason: why it was dropped or its images sent as text (``REASON_TEXTS``), else ``None``.
        text: the whole message text (the excerpt expands to it).
    """

    index: int
    role: str
    excerpt: str
    images: tuple[ImagePart, ...]
    dropped: bool
    images_as_text: bool
    reason: str | None = None
    text: str = ""


@dataclass(frozen=True)
class ContextPanel:
    """The conversation behind one round's request.

    Attributes:
        round_index: 1-based round number.
        entries: every message that existed when the request was built, in order.
        note: the tried-phrases note added to message 1, or ``None``.
        image_count: images in the request (at most ``agent.context.MAX_CONTEXT_IMAGES``).
        prompt_tokens: tokens in the request; ``None`` until the round ends or when unknown.
        pending: True while the round runs (its token count comes with its end).
    """

    round_index: int
    entries: tuple[ContextEntry, ...]
    note: str | None
    image_count: int
    prompt_tokens: int | None
    pending: bool = False

    @property
    def sent_count(self) -> int:
        return sum(1 for e in self.entries if not e.dropped)

    @property
    def dropped_indices(self) -> tuple[int, ...]:
        return tuple(e.index for e in self.entries if e.dropped)


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``text`` with whitespace collapsed, cut to ``limit`` characters (ending in "...")."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def context_reasons(messages: Sequence[Message], record: ContextRecord) -> dict[int, str]:
    """Message index -> reason key for the dropped and text-only messages of ``record``.

    A record saved without reasons (an older trace) gets them from the context policy applied again to the
    conversation as it was then; when that no longer gives the recorded kept/dropped sets (the policy has
    changed since), no reason is claimed (empty).
    """
    if record.reasons is not None:
        return dict(record.reasons)
    count = max((*record.kept, *record.dropped), default=-1) + 1
    try:
        # the widest cap: a conversation holds tiles only when its run sent them, so this repeats either setting
        _, again = build_context(messages[:count], lambda _key, **_fields: "", MAX_MAIN_IMAGES_WITH_TILES)
    except ValueError:
        return {}
    same = (again.kept, again.dropped, again.images_as_text) == (record.kept, record.dropped, record.images_as_text)
    return dict(again.reasons or ()) if same else {}


def reason_text(key: str | None) -> str:
    """The words for a reason key (``REASON_TEXTS``; an unknown key as itself, a missing one as not recorded)."""
    if key is None:
        return REASON_NOT_RECORDED
    return REASON_TEXTS.get(key, key.replace("_", " "))


def context_panel(
    messages: Sequence[Message], record: ContextRecord, round_index: int, prompt_tokens: int | None = None
) -> ContextPanel:
    """The context panel of one round from the conversation and the round's ``ContextRecord``.

    Only the messages that existed when the request was built are listed (``kept`` and ``dropped``
    together cover exactly those).

    Raises:
        ValueError: when the record names a message the conversation does not have.
    """
    indices = set(record.kept) | set(record.dropped)
    count = max(indices) + 1 if indices else 0
    if count > len(messages):
        raise ValueError(
            f"round {round_index}'s context names message {count - 1}, but the conversation has {len(messages)}"
        )
    dropped, as_text = set(record.dropped), set(record.images_as_text)
    reasons: Mapping[int, str] = context_reasons(messages, record)
    entries = tuple(
        ContextEntry(i, m.role, excerpt(m.text), tuple(m.images), i in dropped, i in as_text,
                     reason_text(reasons.get(i)) if i in dropped or i in as_text else None, m.text)
        for i, m in enumerate(messages[:count])
    )
    return ContextPanel(round_index, entries, record.note, record.image_count, prompt_tokens)
