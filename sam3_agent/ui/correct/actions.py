"""What a person does to a Correct session: start it, select, show or hide, click, draw a box, brush, relabel, delete,
bring in, undo and redo, and the view style.

No Gradio here. Every action takes a ``CorrectSession`` and returns a new one (or raises ``InputError`` with a
message for the person and changes nothing). Clicks, boxes and strokes arrive in view pixels (``geometry``); every
edit happens at full resolution. Tools: ``tools``.
"""

from __future__ import annotations

import dataclasses
import math
import uuid
from collections.abc import Iterable
from typing import Any

from PIL import Image

from ...correct import edits
from ...correct.edits import EditState
from ...correct.prompted import refine_with_points, segment_box
from ...correct.strokes import stroke_from_view_points
from ...edit_ops import BoxMask, ClickMask, RelabelMask, ToggleMask
from ...errors import InputError
from ...types import Trace
from .geometry import VIEW_MAX_SIDE, ViewGeometry
from .session import CorrectSession, label_list
from .tools import CLICK_TOOLS, TOOL_POSITIVE, TOOL_SELECT, TOOL_TOGGLE, TOOLS

# canvas.js adds a point per view pixel dragged: 20,000 is a drag across the whole view back and forth ten times
MAX_STROKE_POINTS = 20_000


def start_session(trace: Trace, max_side: int = VIEW_MAX_SIDE, previous: CorrectSession | None = None) -> CorrectSession:
    """A session on ``trace`` with its saved edits applied (cursor at the end) and nothing selected.

    ``previous`` (the session this browser tab had) hands on its view style and its label list.

    Raises:
        InputError: the run is still going.
        TraceFormatError: the saved edits do not apply to the trace's masks.
    """
    if trace.status == "running":
        raise InputError("the run is still going: wait for it to end (or press Stop), then correct its masks")
    state = EditState.from_trace(trace)
    geometry = ViewGeometry.for_size(trace.image.width, trace.image.height, max_side)
    image = trace.image.convert("RGB")
    view = image.resize((geometry.view_width, geometry.view_height), Image.Resampling.LANCZOS) \
        if geometry.scaled else image
    session = CorrectSession(trace, state, geometry, view, None, uuid.uuid4().hex)
    if previous is not None:
        session = dataclasses.replace(session, opacity=previous.opacity, outline=previous.outline,
                                      labels=previous.labels)
    return dataclasses.replace(session, labels=label_list(session))


def set_style(session: CorrectSession, opacity: Any, outline: Any) -> CorrectSession:
    """Draw the masks with fill ``opacity`` (0..1) or as outlines only; no edit is recorded.

    Raises:
        InputError: an opacity that is not a number in [0, 1].
    """
    try:
        value = float(opacity)
    except (TypeError, ValueError):
        raise InputError(f"the mask opacity must be a number from 0 to 1, got {opacity!r}") from None
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise InputError(f"the mask opacity must be from 0 to 1, got {opacity!r}")
    return dataclasses.replace(session, opacity=value, outline=bool(outline))


# ------------------------------------------------------------------ selection and lookup


def live_index(session: CorrectSession, index: int | None) -> int | None:
    """``index`` when it names a mask that exists and is not deleted; ``None`` for ``None`` or a negative index.

    Raises:
        InputError: no such mask, or a deleted one.
    """
    if index is None or (isinstance(index, (int, float)) and index < 0):
        return None
    items = session.state.items
    if isinstance(index, bool) or not isinstance(index, (int, float)) or int(index) != index \
            or not 0 <= index < len(items):
        raise InputError(f"there is no mask {index!r}: choose one of the listed masks")
    if items[int(index)].deleted:
        raise InputError(f"mask {int(index) + 1} was deleted: undo the deletion to edit it again")
    return int(index)


def select(session: CorrectSession, index: int | None) -> CorrectSession:
    """Select mask ``index`` (``None`` or -1: nothing, so clicks and strokes make a new mask)."""
    return dataclasses.replace(session, selected=live_index(session, index))


def mask_at(session: CorrectSession, x: float, y: float, include_hidden: bool = False) -> int | None:
    """The index of the mask drawn on top at full-resolution position (x, y), or ``None``.

    Masks are drawn in index order, so the highest shown index containing the pixel wins; with
    ``include_hidden``, hidden masks are looked at after the shown ones (so a hidden mask can be clicked back on).
    """
    col = min(int(x), session.geometry.width - 1)
    row = min(int(y), session.geometry.height - 1)
    hits = [i for i, it in enumerate(session.state.items) if not it.deleted and it.mask[row, col]]
    shown = [i for i in hits if session.state.items[i].on]
    if shown:
        return shown[-1]
    hidden = [i for i in hits if not session.state.items[i].on]
    return hidden[-1] if include_hidden and hidden else None


Prompt = tuple[tuple[float, float, float, float] | None, tuple[tuple[float, float], ...], tuple[int, ...]]


def pending_prompt(session: CorrectSession) -> Prompt:
    """(box, points, labels) the next point click builds on: those of the latest pixel-changing edit when it was a
    click or box edit that made or refined the selected mask, else none (``(None, (), ())``). Relabelling and
    showing/hiding masks change no pixels, so they do not break the chain (label a clicked mask, then click off the
    object: the earlier clicks still count). Box: (x1, y1, x2, y2); points (x, y); all full-resolution pixels;
    labels 1 positive / 0 negative.

    Deriving them from the history keeps them right after undo and redo.
    """
    none: Prompt = (None, (), ())
    if session.selected is None:
        return none
    last = next((op for op in reversed(session.state.applied) if not isinstance(op, (RelabelMask, ToggleMask))), None)
    if not isinstance(last, (ClickMask, BoxMask)):
        return none
    made_it = last.index is None and session.selected == len(session.state.items) - 1  # relabel/toggle add no mask
    if last.index == session.selected or made_it:
        return (last.box if isinstance(last, BoxMask) else None), last.points, last.labels
    return none


# ------------------------------------------------------------------ edits


def _after(session: CorrectSession, state: EditState, selected: int | None) -> CorrectSession:
    return dataclasses.replace(session, state=state, selected=selected)


def _valid_selection(state: EditState, selected: int | None) -> int | None:
    if selected is None or selected >= len(state.items) or state.items[selected].deleted:
        return None
    return selected


def toggle(session: CorrectSession, index: int) -> CorrectSession:
    """Hide mask ``index`` when shown, show it when hidden. Raises InputError for an unknown or deleted mask."""
    target = live_index(session, index)
    if target is None:
        raise InputError("choose a mask to show or hide")
    return _after(session, edits.toggle_mask(session.state, target), session.selected)


def set_shown(session: CorrectSession, shown: Iterable[int]) -> CorrectSession:
    """Show exactly the masks in ``shown`` (the list's check boxes); one toggle edit per mask that changes.

    Raises:
        InputError: ``shown`` names a mask that does not exist or was deleted.
    """
    wanted = {live_index(session, int(i)) for i in shown or ()}
    state = session.state
    for i, item in enumerate(state.items):
        if not item.deleted and item.on != (i in wanted):
            state = edits.toggle_mask(state, i)
    return _after(session, state, session.selected)


def click(session: CorrectSession, mode: str, x: Any, y: Any, segmenter: Any = None) -> CorrectSession:
    """A click at view pixel (x, y) on the corrected image with one of ``CLICK_TOOLS``.

    - toggle: the mask under the click is hidden (or a hidden one there shown again);
    - select: the mask under the click is selected (nothing there: the selection is cleared);
    - point on / off: a positive / negative point; SAM 3's point-prompt model (``segmenter``, a
      ``sam.tracker.PointSegmenter``) runs on it plus the selected mask's earlier clicks and box
      (``pending_prompt``), and its mask replaces the selected mask, or becomes a new mask (then selected) when
      nothing is selected.

    Raises:
        InputError: a click outside the image, nothing under a toggle click, an unknown tool, no model for point
            clicks, or what ``prompted.refine_with_points`` refuses (e.g. only negative points, an empty result).
        BackendError: the point-prompt model failed.
    """
    if mode not in CLICK_TOOLS:
        raise InputError(f"the {TOOLS.get(mode, repr(mode))!r} tool does not take clicks: pick one of "
                         f"{', '.join(TOOLS[t] for t in CLICK_TOOLS)}")
    fx, fy = session.geometry.to_image(x, y)
    if mode == TOOL_TOGGLE:
        index = mask_at(session, fx, fy, include_hidden=True)
        if index is None:
            raise InputError("no mask under the click: click on a coloured mask (or use the list of masks)")
        return toggle(session, index)
    if mode == TOOL_SELECT:
        return select(session, mask_at(session, fx, fy))
    if segmenter is None:
        raise InputError("SAM 3's point-prompt model is not available in this app: use the brush instead")
    selected = live_index(session, session.selected)
    box_before, points, labels = pending_prompt(session)
    points = points + ((fx, fy),)
    labels = labels + (1 if mode == TOOL_POSITIVE else 0,)
    if box_before is not None:  # clicks after a box refine what the box gave
        state = segment_box(session.state, selected, session.trace.image, box_before, segmenter, points, labels)
    else:
        state = refine_with_points(session.state, selected, session.trace.image, points, labels, segmenter)
    return _after(session, state, selected if selected is not None else len(state.items) - 1)


def box(session: CorrectSession, x1: Any, y1: Any, x2: Any, y2: Any, segmenter: Any = None) -> CorrectSession:
    """A box dragged (or tapped corner to corner) from view pixel (x1, y1) to (x2, y2), pixel edges, corners in any
    order: mapped to full resolution and clipped to the photo (``ViewGeometry.box_to_image``), then SAM 3's
    point-prompt model (``segmenter``) segments inside it. Its mask replaces the selected mask, or becomes a new mask
    (then selected) when nothing is selected. A box starts afresh: the mask's earlier clicks are not used, and point
    clicks after it refine what it gave (``pending_prompt``).

    Raises:
        InputError: no model in this app; a box wholly outside the photo, or one with no area (a tap, a line), or
            what ``prompted.segment_box`` refuses (an empty result).
        BackendError: the point-prompt model failed.
    """
    corners = session.geometry.box_to_image(x1, y1, x2, y2)
    if segmenter is None:
        raise InputError("SAM 3's point-prompt model is not available in this app: use the brush instead")
    selected = live_index(session, session.selected)
    state = segment_box(session.state, selected, session.trace.image, corners, segmenter)
    return _after(session, state, selected if selected is not None else len(state.items) - 1)


def brush(session: CorrectSession, points: Any, radius: Any, erase: bool) -> CorrectSession:
    """A round brush dragged through view pixels ``points`` ([[x, y], ...]) with ``radius`` (view pixels), applied
    to the selected mask at full resolution (``strokes.stroke_from_view_points``).

    Painting adds the stroke's pixels to the selected mask, or makes a new mask of them (then selected) when
    nothing is selected; erasing removes them from the selected mask.

    Raises:
        InputError: no stroke, nothing selected for erasing, bad points or radius, or a stroke wholly off the image.
    """
    if not points:
        raise InputError("nothing was painted: drag over the image with the brush first")
    view = session.geometry
    # Anyone who reaches the page can send a stroke over HTTP: its cost (a span per segment and row it reaches)
    # is bounded before anything is drawn.
    if not isinstance(points, (list, tuple)) or len(points) > MAX_STROKE_POINTS:
        raise InputError(f"a brush stroke is a list of at most {MAX_STROKE_POINTS:,} points: paint in shorter strokes")
    height, width = session.state.height, session.state.width
    if erase and session.selected is None:
        raise InputError("select a mask to erase from (in the list, or click on it with the Select tool)")
    try:
        size = float(radius)
    except (TypeError, ValueError):
        raise InputError(f"the brush size must be a number of pixels, got {radius!r}") from None
    if not size <= max(view.view_width, view.view_height):  # also refuses NaN
        raise InputError(f"the brush radius ({radius!r} px) is larger than the picture shown "
                         f"({view.view_width}x{view.view_height}): choose a smaller brush")
    stroke = stroke_from_view_points(points, size, session.geometry.view_width / session.geometry.width,
                                     height, width)
    selected = live_index(session, session.selected)
    if erase:
        return _after(session, edits.erase(session.state, selected, stroke), selected)
    state = edits.paint(session.state, selected, stroke)
    return _after(session, state, selected if selected is not None else len(state.items) - 1)


def relabel(session: CorrectSession, label: str) -> CorrectSession:
    """Give the selected mask a new label (added to the reusable label list). Raises InputError when nothing is
    selected or the label is empty."""
    if session.selected is None:
        raise InputError("select a mask first, then type or pick its label")
    renamed = _after(session, edits.relabel_mask(session.state, session.selected, label), session.selected)
    return dataclasses.replace(renamed, labels=label_list(renamed))


def delete_selected(session: CorrectSession) -> CorrectSession:
    """Delete the selected mask (undo brings it back); the selection is cleared. Raises InputError when none."""
    if session.selected is None:
        raise InputError("select a mask to delete first")
    return _after(session, edits.delete_mask(session.state, session.selected), None)


def bring_in(session: CorrectSession, round_index: Any, mask_number: Any) -> CorrectSession:
    """Add mask ``mask_number`` (1-based, as shown in that round) of round ``round_index``; it becomes selected.

    Raises:
        InputError: no round or mask chosen, no such round or mask, or those pixels are already a mask.
    """
    if round_index is None or mask_number is None:
        raise InputError("choose a round and a mask number to bring in")
    state = edits.bring_in_mask(session.state, session.trace, int(round_index), int(mask_number))
    return _after(session, state, len(state.items) - 1)


def undo(session: CorrectSession) -> CorrectSession:
    """One edit back. Raises InputError when there is nothing to undo."""
    if not session.state.can_undo:
        raise InputError("nothing to undo")
    state = session.state.undo()
    return _after(session, state, _valid_selection(state, session.selected))


def redo(session: CorrectSession) -> CorrectSession:
    """One undone edit forward again. Raises InputError when there is nothing to redo."""
    if not session.state.can_redo:
        raise InputError("nothing to redo")
    state = session.state.redo()
    return _after(session, state, _valid_selection(state, session.selected))
