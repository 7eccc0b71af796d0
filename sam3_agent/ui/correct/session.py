"""The "Correct" view's session record: one trace, its hand corrections, the selected mask and the view geometry.

No Gradio here. A session is immutable: its actions (``actions``) each return a new one, so a handler can keep the
session in its store and show the message when an action is refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from PIL import Image

from ...correct.edits import EditState
from ...imaging.draw import FILL_ALPHA
from ...types import Trace
from .geometry import ViewGeometry


@dataclass(frozen=True, eq=False)
class CorrectSession:
    """One person's corrections of one trace (kept in ``gr.State``; immutable).

    Attributes:
        trace: the run; its ``edits`` are those saved with it (the session's own edits are in ``state``).
        state: the agent's masks, the edit history and the undo cursor.
        geometry: full and shown sizes of ``trace.image``.
        view: ``trace.image`` at the view size, RGB.
        selected: index of the selected mask (shown as number ``selected + 1``), or ``None``: then clicks and
            brush strokes make a new mask.
        key: names this session's export folder (random; never built from model or user text).
        opacity: how opaque the mask fills are drawn, 0 (none) to 1 (solid).
        outline: masks drawn as outlines only (no fill), to see the photo under them.
        labels: the reusable label list (the query, the labels in use, and those used before in this browser tab).
    """

    trace: Trace
    state: EditState
    geometry: ViewGeometry
    view: Image.Image
    selected: int | None = None
    key: str = ""
    opacity: float = FILL_ALPHA
    outline: bool = False
    labels: tuple[str, ...] = ()


def label_list(session: CorrectSession, extra: Iterable[str] = ()) -> tuple[str, ...]:
    """The reusable labels: the query, the labels of the masks, those used before and ``extra``, each once, in that
    order (case-sensitive: "Cup" and "cup" are two labels)."""
    seen: dict[str, None] = {}
    for label in (session.trace.query, *(it.label for it in session.state.items), *session.labels, *extra):
        text = str(label).strip()
        if text:
            seen.setdefault(text, None)
    return tuple(seen)


def corrected_trace(session: CorrectSession) -> Trace:
    """The trace with the session's edits in effect (what exports save)."""
    return session.state.to_trace(session.trace)
