"""Hand corrections of the agent's final masks: edit operations, their replay and undo/redo.

Brush strokes drawn on a scaled view are turned into full-size masks by ``strokes``.

The agent's answer (``Trace.final_masks``) is never changed. A person's corrections are a list of operations
(frozen records with a JSON form, stored in ``Trace.edits``) applied on top of it::

    corrected = replay(agent's masks, ops[:cursor])

Undo and redo move the cursor; a new edit drops the operations after it. Operations carry every mask they add as
COCO RLE (a point-prompt refinement stores its RESULT, not only the clicks or the box), so replay needs no model.
The edits SAM 3's point-prompt model makes (clicks, a box) are in ``prompted``.

Masks are addressed by their *index* in the list of items: the agent's masks first (0..N-1), then each added mask
in turn. Items are never removed: deleting one marks it deleted, so indices stay stable (undo restores it). The UI
shows item ``i`` as mask number ``i + 1``.

Decisions for bad input (what an annotator expects):
- clicks outside the image, and boxes with no area or reaching outside it, raise ``InputError`` (a click off the
  image is a slip); brush strokes running over the edge are clipped with a logged warning, and a stroke with no
  pixel inside the image raises ``InputError``;
- an erase that empties a mask is recorded; the empty mask stays (paint on it again, undo, or delete it) but is left
  out of exports, and ``EditState.notes()`` says so;
- an edit that cannot apply (unknown index, deleted mask, wrong mask size, empty label, a click or box result that
  is empty) raises ``InputError`` and records nothing.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ..edit_ops import (
    AGENT_ORIGIN,
    BoxMask,
    BringInMask,
    BrushStroke,
    ClickMask,
    DeleteMask,
    EditOp,
    MaskRle,
    RelabelMask,
    ToggleMask,
)
from ..errors import InputError, TraceFormatError
from ..mask_set import Masks
from ..types import Trace
from ..verification import final_mask_checks

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------ records


@dataclass(frozen=True, eq=False)
class MaskItem:
    """One mask of the corrected answer.

    Attributes:
        mask: bool (H, W) at the original image resolution (may be empty after erasing).
        label: exported as the COCO category name; default the query.
        score: SAM 3's detection score while the pixels are SAM 3's (agent masks, masks brought in from a round);
            ``None`` once edited by hand and for hand-made masks.
        origin: ``"agent"``, ``"round R mask K"``, ``"clicks"``, ``"box"`` or ``"brush"``.
        on: False when hidden.
        deleted: True when deleted.
        edited: True when its pixels were changed (or made) by hand.
        check: what verification established of an agent mask (``verification.CHECK_STATES``: confirmed, not
            confirmed, not examined); ``None`` for masks the agent did not answer with.
    """

    mask: np.ndarray
    label: str
    score: float | None
    origin: str
    on: bool = True
    deleted: bool = False
    edited: bool = False
    check: str | None = None

    @property
    def is_empty(self) -> bool:
        return not bool(self.mask.any())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MaskItem):
            return NotImplemented
        same = [getattr(self, f.name) == getattr(other, f.name) for f in dataclasses.fields(self) if f.name != "mask"]
        return all(same) and self.mask.shape == other.mask.shape and np.array_equal(self.mask, other.mask)

    __hash__ = None  # type: ignore[assignment]


def items_from_masks(masks: Masks | None, label: str, checks: Sequence[str] | None = None) -> tuple[MaskItem, ...]:
    """The agent's masks as items (label ``label``, their scores, origin ``"agent"``, and ``checks``, one per mask,
    as ``check``); none for ``None``."""
    if masks is None:
        return ()
    states = list(checks) if checks is not None else [None] * len(masks)
    return tuple(
        MaskItem(np.asarray(m, dtype=bool), label, float(s), AGENT_ORIGIN, check=c)
        for m, s, c in zip(masks.masks, masks.scores, states)
    )


def agent_items(trace: Trace, label: str) -> tuple[MaskItem, ...]:
    """``trace``'s final masks as items, each with what verification established of it
    (``verification.final_mask_checks``)."""
    return items_from_masks(trace.final_masks, label, final_mask_checks(trace))


# ------------------------------------------------------------------ applying operations


def live_item(items: Sequence[MaskItem], index: Any) -> MaskItem:
    """Item ``index`` of ``items``, which an edit may change. Raises InputError for an unknown or deleted mask."""
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(items):
        raise InputError(f"there is no mask {index + 1 if isinstance(index, int) else index!r}: "
                         f"choose one of masks 1..{len(items)}")
    item = items[index]
    if item.deleted:
        raise InputError(f"mask {index + 1} was deleted: undo the deletion to edit it again")
    return item


def _sized(rle: MaskRle, height: int, width: int, what: str) -> np.ndarray:
    if (rle.height, rle.width) != (height, width):
        raise InputError(f"the {what} is {rle.width}x{rle.height} pixels but the image is {width}x{height}")
    return rle.to_mask()


def apply_op(items: Sequence[MaskItem], op: EditOp, height: int, width: int, label: str) -> tuple[MaskItem, ...]:
    """The items after one operation (a new tuple; ``items`` is not changed).

    Args:
        items: current items; masks bool (H, W).
        op: the operation.
        height, width: the image size in pixels (every mask in ``op`` must have it).
        label: the label of a mask the operation adds (the query).

    Raises:
        InputError: the operation cannot apply (see the module docstring).
    """
    out = list(items)
    if isinstance(op, ToggleMask):
        out[op.index] = dataclasses.replace(live_item(items, op.index), on=op.on)
    elif isinstance(op, DeleteMask):
        out[op.index] = dataclasses.replace(live_item(items, op.index), deleted=True)
    elif isinstance(op, RelabelMask):
        if not op.label.strip():
            raise InputError("a label cannot be empty: type a name for the mask")
        out[op.index] = dataclasses.replace(live_item(items, op.index), label=op.label.strip())
    elif isinstance(op, BringInMask):
        mask = _sized(op.mask, height, width, f"mask {op.mask_number} of round {op.round_index}")
        out.append(MaskItem(mask, label, op.score, f"round {op.round_index} mask {op.mask_number}"))
    elif isinstance(op, (ClickMask, BoxMask)):
        origin = "clicks" if isinstance(op, ClickMask) else "box"
        mask = _sized(op.mask, height, width, f"mask from the {origin}")
        if op.index is None:
            out.append(MaskItem(mask, label, None, origin, edited=True))
        else:
            out[op.index] = dataclasses.replace(live_item(items, op.index), mask=mask, score=None, edited=True)
    elif isinstance(op, BrushStroke):
        stroke = _sized(op.stroke, height, width, "brush stroke")
        if op.index is None:
            if op.erase:
                raise InputError("select a mask to erase from")
            out.append(MaskItem(stroke, label, None, "brush", edited=True))
        else:
            item = live_item(items, op.index)
            mask = item.mask & ~stroke if op.erase else item.mask | stroke
            out[op.index] = dataclasses.replace(item, mask=mask, score=None, edited=True)
    else:
        raise InputError(f"unknown edit {op!r}")
    return tuple(out)


def replay(
    original: Sequence[MaskItem], ops: Sequence[EditOp], height: int, width: int, label: str
) -> tuple[MaskItem, ...]:
    """Apply ``ops`` in order to ``original``; new masks get ``label``. Raises InputError like :func:`apply_op`."""
    items = tuple(original)
    for op in ops:
        items = apply_op(items, op, height, width, label)
    return items


# ------------------------------------------------------------------ state with undo / redo


@dataclass(frozen=True, eq=False)
class EditState:
    """The agent's masks, the edit history and a cursor: ``items`` = replay(original, ops[:cursor]).

    Immutable: every edit, undo or redo returns a new state, so a UI can keep it in per-user state and a test can
    compare states. ``label`` (the query) is given to every new mask.
    """

    original: tuple[MaskItem, ...]
    height: int
    width: int
    label: str
    ops: tuple[EditOp, ...] = ()
    cursor: int = 0

    @staticmethod
    def from_trace(trace: Trace) -> EditState:
        """The state of a trace: its final masks (none when the run did not finish) with ``trace.edits`` applied.

        Raises:
            TraceFormatError: the recorded edits do not apply to the trace's masks.
        """
        label = trace.query.strip() or "object"
        state = EditState(agent_items(trace, label), trace.image.height, trace.image.width, label,
                          tuple(trace.edits), len(trace.edits))
        try:
            _ = state.items  # replay now, so edits that do not apply fail at load time
        except (InputError, ValueError) as error:
            raise TraceFormatError(f"the edits saved with this trace do not apply to its masks: {error}") from None
        return state

    @cached_property
    def items(self) -> tuple[MaskItem, ...]:
        """Every item after ``ops[:cursor]`` (deleted and hidden ones included), in index order."""
        return replay(self.original, self.ops[: self.cursor], self.height, self.width, self.label)

    @property
    def applied(self) -> tuple[EditOp, ...]:
        """The operations in effect (``ops[:cursor]``); what ``to_trace`` saves."""
        return self.ops[: self.cursor]

    @property
    def can_undo(self) -> bool:
        return self.cursor > 0

    @property
    def can_redo(self) -> bool:
        return self.cursor < len(self.ops)

    def apply(self, op: EditOp) -> EditState:
        """This state plus ``op``; operations after the cursor (the redo history) are dropped.

        Raises:
            InputError: ``op`` cannot apply; nothing is recorded.
        """
        items = apply_op(self.items, op, self.height, self.width, self.label)
        state = dataclasses.replace(self, ops=self.applied + (op,), cursor=self.cursor + 1)
        state.__dict__["items"] = items  # seed the cache: no replay needed
        return state

    def undo(self) -> EditState:
        """One step back (the same state when there is nothing to undo)."""
        return dataclasses.replace(self, cursor=self.cursor - 1) if self.can_undo else self

    def redo(self) -> EditState:
        """One step forward again (the same state when there is nothing to redo)."""
        return dataclasses.replace(self, cursor=self.cursor + 1) if self.can_redo else self

    def corrected_items(self) -> list[MaskItem]:
        """What exports contain: items neither deleted, hidden nor empty, in index order."""
        return [it for it in self.items if not it.deleted and it.on and not it.is_empty]

    def corrected_indices(self) -> list[int]:
        """Indices of :meth:`corrected_items`."""
        return [i for i, it in enumerate(self.items) if not it.deleted and it.on and not it.is_empty]

    def notes(self) -> list[str]:
        """Things to tell the person, e.g. that an erased-empty mask will be left out of exports."""
        return [
            f"mask {i + 1} is empty after erasing: it is left out of exports; paint on it, undo, or delete it"
            for i, it in enumerate(self.items)
            if it.is_empty and not it.deleted
        ]

    def to_trace(self, trace: Trace) -> Trace:
        """A copy of ``trace`` whose ``edits`` are the operations in effect (the redo history is not saved)."""
        return dataclasses.replace(trace, edits=list(self.applied))


# ------------------------------------------------------------------ edits a UI calls


def toggle_mask(state: EditState, index: int) -> EditState:
    """Hide a shown mask or show a hidden one. Raises InputError for an unknown or deleted mask."""
    return state.apply(ToggleMask(index, not live_item(state.items, index).on))


def delete_mask(state: EditState, index: int) -> EditState:
    """Delete a mask. Raises InputError for an unknown or already deleted mask."""
    return state.apply(DeleteMask(index))


def relabel_mask(state: EditState, index: int, label: str) -> EditState:
    """Give a mask a new label (surrounding spaces removed); unchanged state when the label is the same.

    Raises:
        InputError: unknown or deleted mask, empty label.
    """
    if not isinstance(label, str) or not label.strip():
        raise InputError("a label cannot be empty: type a name for the mask")
    if live_item(state.items, index).label == label.strip():
        return state
    return state.apply(RelabelMask(index, label.strip()))


def rounds_with_masks(trace: Trace) -> list[tuple[int, Masks]]:
    """(round index, masks) of every round whose tool left masks, in order: the masks one can bring in."""
    return [
        (r.index, r.result.masks)
        for r in trace.rounds
        if r.result is not None and r.result.masks is not None and len(r.result.masks) > 0
    ]


def bring_in_mask(state: EditState, trace: Trace, round_index: int, mask_number: int) -> EditState:
    """Add mask ``mask_number`` (1-based, as shown in that round) of round ``round_index`` to the answer.

    Raises:
        InputError: no such round or mask, or the same pixels are already a mask of the answer.
    """
    rounds = dict(rounds_with_masks(trace))
    if round_index not in rounds:
        raise InputError(f"round {round_index} left no masks: choose one of rounds {sorted(rounds) or 'none'}")
    masks = rounds[round_index]
    if isinstance(mask_number, bool) or not isinstance(mask_number, int) or not 1 <= mask_number <= len(masks):
        raise InputError(f"round {round_index} showed masks 1..{len(masks)}; there is no mask {mask_number!r}")
    mask = masks.mask(mask_number - 1)  # one mask decoded, not the whole set
    for i, item in enumerate(state.items):
        if not item.deleted and np.array_equal(item.mask, mask):
            hint = "" if item.on else " (hidden: show it instead)"
            raise InputError(f"mask {mask_number} of round {round_index} is already mask {i + 1}{hint}")
    return state.apply(BringInMask(round_index, mask_number, MaskRle.from_mask(mask),
                                   float(masks.scores[mask_number - 1])))


def paint(state: EditState, index: int | None, stroke: np.ndarray) -> EditState:
    """Add the stroke's pixels to mask ``index`` (or make a new mask of them when None).

    Args:
        stroke: bool (H, W) at the image's full resolution (see :func:`stroke_from_view_points`,
            :func:`stroke_from_view_mask`, :func:`stroke_from_editor`).

    Raises:
        InputError: wrong stroke size, empty stroke, unknown or deleted mask.
    """
    return state.apply(BrushStroke(index, _stroke_rle(state, stroke), erase=False))


def erase(state: EditState, index: int, stroke: np.ndarray) -> EditState:
    """Remove the stroke's pixels from mask ``index`` (a mask erased to nothing stays, empty; see ``notes``).

    Raises:
        InputError: no mask selected, wrong stroke size, empty stroke, unknown or deleted mask.
    """
    if index is None:
        raise InputError("select a mask to erase from")
    return state.apply(BrushStroke(index, _stroke_rle(state, stroke), erase=True))


def _stroke_rle(state: EditState, stroke: np.ndarray) -> MaskRle:
    stroke = np.asarray(stroke)
    if stroke.shape != (state.height, state.width):
        raise InputError(
            f"the stroke is {stroke.shape} but the image is {state.height}x{state.width} (H, W): map strokes on a "
            "scaled view to full resolution first (stroke_from_view_mask / stroke_from_view_points)"
        )
    stroke = stroke.astype(bool)
    if not stroke.any():
        raise InputError("the stroke is empty: paint over the image")
    return MaskRle.from_mask(stroke)
