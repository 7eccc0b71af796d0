"""What the "Correct" view shows of a ``CorrectSession``: mask rows, list choices, status text, overlays, HTML.

No Gradio here. Overlays are drawn at the view size (``geometry.ViewGeometry``) with one colour per mask index
(``imaging.draw.mask_colors``), so a mask keeps its colour and number in both the agent's and the corrected overlay
whatever is hidden or added. Their number is ``index + 1``, the number the list and the exports' ``origin``
use. Mask colours are saturated hues; everything drawn for the person (point markers, the selection rim, the
brush preview) is black and white, so it never looks like a mask.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

import cv2
import numpy as np
from PIL import Image

from ...correct.edits import MaskItem, agent_items, rounds_with_masks
from ...imaging.draw import FILL_ALPHA, DrawStyle, draw_label, mask_colors
from ...imaging.labels import label_boxes
from ...imaging.overlay import render_numbered_overlay
from ...mask_set import Masks
from ...types import Trace
from ...verification import NOT_CONFIRMED
from ..html import image_data_url
from .actions import pending_prompt
from .geometry import ViewGeometry, view_mask
from .session import CorrectSession

NO_SELECTION = -1  # the "nothing selected" value of the selected-mask list
WHITE, BLACK = (255, 255, 255), (0, 0, 0)  # achromatic: never one of the (saturated) mask colours
SELECTED_EDGE = WHITE  # the selected mask gets a white rim outside its coloured border
OUTLINE_EXTRA = 1  # px added to the border in outline mode, where the border is all there is of a mask
CANVAS_EMPTY = "Nothing to correct yet: finish a run and press 'Correct these masks', or import a bundle / trace .zip."
AGENT_ENDINGS = {  # trace status -> how the status line names the agent's own answer
    "no_mask": "the agent found no mask",
    "max_rounds": "the agent ran out of rounds",
    "failed": "the agent failed",
    "cancelled": "the agent was stopped",
}


@dataclass(frozen=True)
class MaskRow:
    """One mask of the corrected answer as the list shows it.

    Attributes:
        number: ``index + 1``.
        label: its COCO category name.
        origin: ``"agent"``, ``"round R mask K"``, ``"clicks"`` or ``"brush"``.
        on: shown (exported) or hidden.
        edited: its pixels were changed or made by hand.
        area: pixels at full resolution (0: erased to nothing, left out of exports).
        score: SAM 3's score while the pixels are SAM 3's, else ``None``.
        selected: it is the selected mask.
    """

    number: int
    label: str
    origin: str
    on: bool
    edited: bool
    area: int
    score: float | None
    selected: bool


def mask_rows(session: CorrectSession) -> list[MaskRow]:
    """One row per mask that is not deleted, in index order."""
    return [
        MaskRow(i + 1, it.label, it.origin, it.on, it.edited, int(it.mask.sum()),
                None if it.score is None else round(float(it.score), 4), i == session.selected)
        for i, it in enumerate(session.state.items) if not it.deleted
    ]


def _choice_text(number: int, item: MaskItem) -> str:
    unconfirmed = ", not confirmed by verification" if item.check == NOT_CONFIRMED else ""
    return f"{number}: {item.label} ({item.origin}{unconfirmed}{', edited' if item.edited else ''})"


def shown_choices(session: CorrectSession) -> tuple[list[tuple[str, int]], list[int]]:
    """The check-box list: ``(text, index)`` per mask not deleted, and the indices of those shown."""
    items = session.state.items
    choices = [(_choice_text(i + 1, it), i) for i, it in enumerate(items) if not it.deleted]
    return choices, [i for i, it in enumerate(items) if not it.deleted and it.on]


def selected_choices(session: CorrectSession) -> tuple[list[tuple[str, int]], int]:
    """The selected-mask list: "none" (``NO_SELECTION``) then ``(text, index)`` per mask not deleted; the value."""
    choices = [("none: clicks and brush make a new mask", NO_SELECTION)]
    choices += [(_choice_text(i + 1, it), i) for i, it in enumerate(session.state.items) if not it.deleted]
    return choices, NO_SELECTION if session.selected is None else session.selected


def round_choices(trace: Trace) -> list[tuple[str, int]]:
    """``(text, round index)`` of every round that left masks, e.g. ``("round 2: 3 masks for 'cup'", 2)``."""
    return [
        (f"round {index}: {len(masks)} mask{'s' if len(masks) != 1 else ''} for {masks.phrase!r}", index)
        for index, masks in rounds_with_masks(trace)
    ]


def later_verdicts(trace: Trace) -> dict[int, dict[int, str]]:
    """Round index -> mask number -> the verdict (``"reject"`` or ``"unconfirmed"``) a later ``examine_each_mask``
    gave that round's mask; accepted masks are not listed.

    A verification examines the masks shown just before it (its verdicts use their numbers), so a verdict marks
    every round that showed those very masks.
    """
    shown: list[tuple[int, Masks]] = []
    marked: dict[int, dict[int, str]] = {}
    for r in trace.rounds:
        verdicts = r.result.verdicts if r.result is not None else ()
        if verdicts and shown:
            examined = shown[-1][1]
            numbers = {v.mask_number: v.verdict for v in verdicts if v.verdict != "accept"}
            for index, masks in shown:
                if masks == examined:
                    marked.setdefault(index, {}).update(numbers)
        if r.result is not None and r.result.masks is not None and len(r.result.masks) > 0:
            shown.append((r.index, r.result.masks))
    return marked


def rejected_numbers(trace: Trace) -> dict[int, set[int]]:
    """Round index -> the mask numbers of that round's masks that a later ``examine_each_mask`` rejected."""
    return {index: {n for n, verdict in numbers.items() if verdict == "reject"}
            for index, numbers in later_verdicts(trace).items()}


VERDICT_MARKS = {"reject": "rejected by verification", "unconfirmed": "kept, not confirmed by verification"}


def mask_number_choices(trace: Trace, round_index: int | None) -> list[tuple[str, int]]:
    """``(text, number)`` per mask (1-based) shown in round ``round_index``, "rejected by verification" and "kept, not
    confirmed by verification" marked; empty when it left none."""
    marked = later_verdicts(trace).get(round_index, {}) if round_index is not None else {}
    for index, masks in rounds_with_masks(trace):
        if index == round_index:
            return [(f"{n} ({VERDICT_MARKS[marked[n]]})" if n in marked else str(n), n)
                    for n in range(1, len(masks) + 1)]
    return []


def status_text(session: CorrectSession) -> str:
    """One line: how many masks the corrected answer has, the last edit, the undo depth, and any notes."""
    state = session.state
    exported = len(state.corrected_indices())
    agent = len(state.original)
    ending = AGENT_ENDINGS.get(session.trace.status, f"the agent chose {agent}")
    parts = [f"Corrected answer: {exported} mask{'s' if exported != 1 else ''} ({ending})."]
    if state.applied:
        parts.append(f"Last edit: {state.applied[-1].describe()}.")
    parts.append(f"{state.cursor} edit{'s' if state.cursor != 1 else ''} in effect"
                 + (f", {len(state.ops) - state.cursor} to redo." if state.can_redo else "."))
    if session.selected is not None:
        parts.append(f"Selected: mask {session.selected + 1}.")
    if session.geometry.scaled:
        g = session.geometry
        parts.append(f"Shown at {g.view_width}x{g.view_height}; edits apply at the full {g.width}x{g.height}.")
    parts.extend(note[0].upper() + note[1:] + "." for note in state.notes())
    return " ".join(parts)


# ------------------------------------------------------------------ drawing


def _inner_border(mask: np.ndarray, width: int) -> np.ndarray:
    kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * width + 1, 2 * width + 1))
    inner = cv2.erode(mask.astype(np.uint8), kernel, borderType=cv2.BORDER_CONSTANT, borderValue=0)
    return mask & (inner == 0)


def _outer_rim(mask: np.ndarray, width: int) -> np.ndarray:
    kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * width + 1, 2 * width + 1))
    return (cv2.dilate(mask.astype(np.uint8), kernel) > 0) & ~mask


def fill(pixels: np.ndarray, color: np.ndarray, opacity: float) -> np.ndarray:
    """``pixels`` (uint8 (..., 3) RGB) blended with ``color`` at ``opacity`` (0: unchanged, 1: the colour), integer
    weights out of 256 as ``imaging.draw.blend_fill`` (which this equals at ``imaging.draw.FILL_ALPHA``)."""
    weight = round(opacity * 256)
    p = pixels.astype(np.uint16)
    c = np.asarray(color, dtype=np.uint16)
    return ((p * (256 - weight) + c * weight + 128) >> 8).astype(np.uint8)


def _marker(out: np.ndarray, center: tuple[int, int], radius: int, positive: bool) -> None:
    """A point marker: "+" in black on a white disc (on the object) or "-" in white on a black disc (off it)."""
    face, ink = (WHITE, BLACK) if positive else (BLACK, WHITE)
    cv2.circle(out, center, radius + 2, ink, -1, cv2.LINE_AA)
    cv2.circle(out, center, radius, face, -1, cv2.LINE_AA)
    arm = max(2, radius * 3 // 5)
    thickness = max(1, radius // 3)
    x, y = center
    cv2.line(out, (x - arm, y), (x + arm, y), ink, thickness, cv2.LINE_AA)
    if positive:
        cv2.line(out, (x, y - arm), (x, y + arm), ink, thickness, cv2.LINE_AA)


def render_items(
    view: Image.Image,
    geometry: ViewGeometry,
    items: Sequence[MaskItem],
    indices: Sequence[int],
    selected: int | None = None,
    clicks: Sequence[tuple[float, float, int]] = (),
    opacity: float = FILL_ALPHA,
    outline: bool = False,
    box: tuple[float, float, float, float] | None = None,
) -> Image.Image:
    """The view image with masks ``indices`` of ``items`` filled, outlined and numbered ``index + 1``.

    Args:
        view: the image at the view size (RGB), ``geometry.view_width`` x ``geometry.view_height``.
        geometry: full and view sizes.
        items: every item (masks bool (H, W) at full resolution); the colour of item i is ``mask_colors(N)[i]``.
        indices: the items to draw, in drawing order (later ones on top).
        selected: an index to mark with a white rim (when drawn).
        clicks: (x, y, label) in full-resolution pixels, drawn as "+" on white (1) or "-" on black (0) markers.
        opacity: fill opacity, 0 to 1 (``imaging.draw.FILL_ALPHA`` by default).
        outline: draw borders only (a little thicker), no fill.
        box: the pending box prompt (x1, y1, x2, y2) in full-resolution pixels, drawn as a white frame edged in
            black (the clicks after it refine what it gave).

    Returns:
        A new RGB image of the view size.
    """
    out = np.array(view.convert("RGB"), dtype=np.uint8)
    style = DrawStyle.for_size(geometry.view_width, geometry.view_height)
    colors = mask_colors(max(len(items), 1))
    drawn = [(i, view_mask(items[i].mask, geometry)) for i in indices]
    drawn = [(i, m) for i, m in drawn if m.any()]
    border = style.contour_width + (OUTLINE_EXTRA if outline else 0)
    for i, m in drawn:
        if not outline:
            out[m] = fill(out[m], colors[i], opacity)
    for i, m in drawn:
        out[_inner_border(m, border)] = colors[i]
        if i == selected:
            out[_outer_rim(m, border + 1)] = SELECTED_EDGE
    if drawn:
        boxes = label_boxes(np.stack([m for _, m in drawn]), [i + 1 for i, _ in drawn])
        for (i, _), label_at in zip(drawn, boxes):
            if label_at is None:
                continue
            draw_label(out, label_at, str(i + 1), colors[i], style)
    if box is not None:
        sx, sy = geometry.view_width / geometry.width, geometry.view_height / geometry.height
        corners = (int(box[0] * sx), int(box[1] * sy)), (max(0, int(box[2] * sx) - 1), max(0, int(box[3] * sy) - 1))
        cv2.rectangle(out, *corners, BLACK, style.contour_width + 2)
        cv2.rectangle(out, *corners, WHITE, max(1, style.contour_width))
    radius = max(5, round(max(geometry.view_width, geometry.view_height) / 110))
    for x, y, label in clicks:
        center = (int(x * geometry.view_width / geometry.width), int(y * geometry.view_height / geometry.height))
        _marker(out, center, radius, label == 1)
    return Image.fromarray(out)


def corrected_overlay(session: CorrectSession) -> Image.Image:
    """The corrected answer at the view size: masks shown and not deleted, the selection, the pending box and
    clicks."""
    items = session.state.items
    indices = [i for i, it in enumerate(items) if it.on and not it.deleted]
    box, points, labels = pending_prompt(session)
    clicks = [(x, y, lab) for (x, y), lab in zip(points, labels)]
    return render_items(session.view, session.geometry, items, indices, session.selected, clicks, session.opacity,
                        session.outline, box)


def agent_overlay(session: CorrectSession) -> Image.Image:
    """The agent's own answer at the view size (numbered and coloured like the corrected one, in the same style)."""
    items = agent_items(session.trace, session.state.label)
    return render_items(session.view, session.geometry, items, range(len(items)), opacity=session.opacity,
                        outline=session.outline)


def render_canvas(overlay: Image.Image | None) -> str:
    """The canvas's HTML: the corrected overlay (view size, a JPEG data URL) in a zoomable viewport with zoom
    buttons, or a line saying there is nothing to correct. ``ui.correct.layout.CANVAS_JS`` drives it."""
    zoom = ('<div class="cv-zoom" aria-label="Zoom"><button type="button" data-zoom="in" title="Zoom in (+)">+</button>'
            '<button type="button" data-zoom="out" title="Zoom out (-)">&minus;</button>'
            '<button type="button" data-zoom="fit" title="Fit (0)">Fit</button><span class="cv-level"></span></div>')
    if overlay is None:
        return f'<div class="cv-viewport cv-none"><div class="cv-empty">{escape(CANVAS_EMPTY)}</div></div>'
    url = image_data_url(overlay, max(overlay.size))
    return (f'<div class="cv-viewport" tabindex="0" role="application" aria-label="Corrected answer: click or paint '
            f'with the chosen tool; wheel or +/- to zoom, drag to pan">'
            f'<div class="cv-stage"><img class="cv-image" src="{url}" width="{overlay.width}" '
            f'height="{overlay.height}" alt="the corrected answer" draggable="false"/>'
            f'<canvas class="cv-strokes" width="{overlay.width}" height="{overlay.height}"></canvas></div>{zoom}</div>')


def round_preview(session: CorrectSession, round_index: int | None) -> Image.Image | None:
    """Round ``round_index``'s masks numbered as that round showed them, at the view size (``None``: no masks)."""
    for index, masks in rounds_with_masks(session.trace):
        if index == round_index:
            shown = np.stack([view_mask(m, session.geometry) for m in masks.masks])
            return render_numbered_overlay(session.view, shown)
    return None


def render_mask_table(rows: Sequence[MaskRow]) -> str:
    """The masks as an HTML table (``table.correct-masks``, one ``tr[data-mask]`` per row, classes ``mask-off`` /
    ``mask-selected``), or a line saying there are none."""
    if not rows:
        return '<div class="correct-masks correct-none">No masks: bring one in, click or paint to make one.</div>'
    body = "".join(
        f'<tr data-mask="{r.number}" class="{"mask-on" if r.on else "mask-off"}'
        f'{" mask-selected" if r.selected else ""}"><td>{r.number}</td><td>{escape(r.label)}</td>'
        f"<td>{'shown' if r.on else 'hidden'}</td><td>{escape(r.origin)}</td><td>{'yes' if r.edited else ''}</td>"
        f"<td>{r.area}</td><td>{'' if r.score is None else f'{r.score:.3f}'}</td></tr>"
        for r in rows
    )
    return (
        '<table class="correct-masks"><thead><tr><th>mask</th><th>label</th><th>state</th><th>origin</th>'
        f"<th>edited</th><th>area (px)</th><th>score</th></tr></thead><tbody>{body}</tbody></table>"
    )
