"""The hand-edit operations a trace stores (``Trace.edits``): frozen records with a JSON form.

Their replay (what the corrected masks are) lives in ``correct.edits``; these records are on the ground floor
because a trace holds them and the trace code must not import the correction package.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from .errors import TraceFormatError, describe
from .rle import check_rle, decode_rle, encode_rle

AGENT_ORIGIN = "agent"


@dataclass(frozen=True)
class MaskRle:
    """One mask as COCO compressed RLE.

    Attributes:
        height, width: mask size in pixels.
        counts: COCO compressed RLE counts (ASCII text), as ``pycocotools`` writes them.
    """

    height: int
    width: int
    counts: str

    @staticmethod
    def from_mask(mask: np.ndarray) -> MaskRle:
        """Encode a bool (H, W) mask."""
        rle = encode_rle(np.asarray(mask, dtype=bool)[None])[0]
        return MaskRle(int(rle["size"][0]), int(rle["size"][1]), rle["counts"])

    def to_mask(self) -> np.ndarray:
        """Decode to bool (H, W). Raises ValueError on malformed counts."""
        return decode_rle([self.to_json()])[0]

    def to_json(self) -> dict[str, Any]:
        return {"size": [self.height, self.width], "counts": self.counts}

    @staticmethod
    def from_json(data: Any) -> MaskRle:
        """Read ``{"size": [H, W], "counts": str}``; raises TraceFormatError when malformed or undecodable.

        The runs are checked now (without decoding) rather than at replay; the loader checks the size against the
        image (``safe_decode.check_edit_masks``)."""
        try:
            height, width = (int(v) for v in data["size"])
        except (KeyError, TypeError, ValueError):
            raise TraceFormatError("an edit holds a malformed RLE mask: it has no size [height, width]") from None
        check_rle(data, height, width, "an edit's RLE mask")
        return MaskRle(height, width, data["counts"])


@dataclass(frozen=True)
class ToggleMask:
    """Show (``on``) or hide a mask; a hidden mask stays in the list but is left out of exports."""

    index: int
    on: bool
    kind: ClassVar[str] = "toggle"

    def describe(self) -> str:
        return f"{'show' if self.on else 'hide'} mask {self.index + 1}"


@dataclass(frozen=True)
class BringInMask:
    """Add mask ``mask_number`` (1-based) shown in round ``round_index`` (1-based), e.g. one verification rejected."""

    round_index: int
    mask_number: int
    mask: MaskRle
    score: float
    kind: ClassVar[str] = "bring_in"

    def describe(self) -> str:
        return f"bring in mask {self.mask_number} of round {self.round_index}"


@dataclass(frozen=True)
class ClickMask:
    """The mask SAM 3's point-prompt model returned for clicks: replaces mask ``index``, or is added when None.

    Attributes:
        index: the mask refined, or ``None`` for a new mask.
        points: (x, y) clicks in original-image pixels; labels: 1 positive / 0 negative.
        mask: the model's result (stored, so replay needs no model).
        score: the model's predicted IoU of that mask (informative only; hand-made masks carry no score).
    """

    index: int | None
    points: tuple[tuple[float, float], ...]
    labels: tuple[int, ...]
    mask: MaskRle
    score: float
    kind: ClassVar[str] = "clicks"

    def describe(self) -> str:
        target = "new mask" if self.index is None else f"mask {self.index + 1}"
        return f"{len(self.points)} click(s) -> {target}"


@dataclass(frozen=True)
class BoxMask:
    """The mask SAM 3's point-prompt model returned for a box (and the clicks added after it, if any): replaces mask
    ``index``, or is added when None.

    Attributes:
        index: the mask refined, or ``None`` for a new mask.
        box: (x1, y1, x2, y2) in original-image pixels on pixel edges (the box covers [x1, x2) x [y1, y2)),
            x1 < x2 and y1 < y2, inside the image.
        points: (x, y) clicks made after the box on the same mask, in original-image pixels; labels: 1 positive /
            0 negative (both empty for the box alone).
        mask: the model's result (stored, so replay needs no model).
        score: the model's predicted IoU of that mask (informative only).
    """

    index: int | None
    box: tuple[float, float, float, float]
    mask: MaskRle
    score: float
    points: tuple[tuple[float, float], ...] = ()
    labels: tuple[int, ...] = ()
    kind: ClassVar[str] = "box"

    def describe(self) -> str:
        target = "new mask" if self.index is None else f"mask {self.index + 1}"
        clicks = f" + {len(self.points)} click(s)" if self.points else ""
        return f"box{clicks} -> {target}"


@dataclass(frozen=True)
class BrushStroke:
    """Paint (add pixels) or erase (remove pixels) with a full-resolution stroke; paint with ``index`` None adds a
    new mask made of the stroke."""

    index: int | None
    stroke: MaskRle
    erase: bool = False
    kind: ClassVar[str] = "brush"

    def describe(self) -> str:
        if self.index is None:
            return "paint a new mask"
        return f"{'erase from' if self.erase else 'paint on'} mask {self.index + 1}"


@dataclass(frozen=True)
class DeleteMask:
    """Delete a mask (undo brings it back; its index is not reused)."""

    index: int
    kind: ClassVar[str] = "delete"

    def describe(self) -> str:
        return f"delete mask {self.index + 1}"


@dataclass(frozen=True)
class RelabelMask:
    """Change a mask's label (the COCO category it is exported under; default: the query)."""

    index: int
    label: str
    kind: ClassVar[str] = "relabel"

    def describe(self) -> str:
        return f"label mask {self.index + 1} {self.label!r}"


EditOp = ToggleMask | BringInMask | ClickMask | BoxMask | BrushStroke | DeleteMask | RelabelMask


_OP_TYPES: dict[str, type] = {
    t.kind: t for t in (ToggleMask, BringInMask, ClickMask, BoxMask, BrushStroke, DeleteMask, RelabelMask)
}


def _box_from_json(value: Any) -> tuple[float, float, float, float]:
    """Four finite numbers x1 < x2, y1 < y2 (the box's place in the image is checked by the replay's mask size)."""
    x1, y1, x2, y2 = (float(v) for v in value)
    if not all(math.isfinite(v) for v in (x1, y1, x2, y2)) or x2 <= x1 or y2 <= y1:
        raise ValueError(f"box {list(value)!r} is not (x1, y1, x2, y2) with x1 < x2 and y1 < y2")
    return x1, y1, x2, y2


def op_to_json(op: EditOp) -> dict[str, Any]:
    """The JSON form of an operation: ``{"op": kind, ...params}``, masks as ``{"size": [H, W], "counts": str}``."""
    out: dict[str, Any] = {"op": op.kind}
    for f in dataclasses.fields(op):
        value = getattr(op, f.name)
        if isinstance(value, MaskRle):
            value = value.to_json()
        elif isinstance(value, tuple):
            value = [list(v) if isinstance(v, tuple) else v for v in value]
        out[f.name] = value
    return out


def op_from_json(data: Any) -> EditOp:
    """Rebuild an operation from :func:`op_to_json` output.

    Raises:
        TraceFormatError: not an object, unknown ``op``, missing or ill-typed fields, malformed masks.
    """
    if not isinstance(data, dict) or data.get("op") not in _OP_TYPES:
        kind = data.get("op") if isinstance(data, dict) else type(data).__name__
        raise TraceFormatError(f"unknown edit {kind!r}: expected one of {sorted(_OP_TYPES)}")
    cls = _OP_TYPES[data["op"]]
    try:
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name not in data:
                if f.default is not dataclasses.MISSING:
                    continue
                raise KeyError(f.name)
            values[f.name] = data[f.name]
        for name in ("index", "round_index", "mask_number"):
            if name in values and values[name] is not None:
                if isinstance(values[name], bool) or not isinstance(values[name], int):
                    raise TypeError(f"{name} must be an integer")
        for name in ("mask", "stroke"):
            if name in values:
                values[name] = MaskRle.from_json(values[name])
        if "points" in values:
            values["points"] = tuple((float(x), float(y)) for x, y in values["points"])
        if "labels" in values:
            values["labels"] = tuple(int(v) for v in values["labels"])
        if len(values.get("points", ())) != len(values.get("labels", ())):
            raise ValueError("it has a different number of points and labels")
        if "box" in values:
            values["box"] = _box_from_json(values["box"])
        for name in ("on", "erase"):
            if name in values and not isinstance(values[name], bool):
                raise TypeError(f"{name} must be true or false")
        if "score" in values:
            values["score"] = float(values["score"])
        if "label" in values and not isinstance(values["label"], str):
            raise TypeError("label must be a string")
        return cls(**values)
    except TraceFormatError:
        raise
    except (KeyError, TypeError, ValueError) as error:
        raise TraceFormatError(f"edit {data['op']!r} is malformed: {describe(error)}") from None
