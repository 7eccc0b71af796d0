"""What one trace load may cost, checked on the photo's header and the declared mask counts before anything is decoded.

A trace .zip of a few kilobytes can declare a 13000x13000 photo (a blank 1-bit PNG: 20 KB on disk, 676 MB once
Pillow holds it as RGB) or hundreds of full-size masks. ``LoadLimits`` says what a loader accepts:

- ``max_photo_pixels``: the stored photo's pixel cap. The library and the command line read what the command line
  can make (``encode.MAX_PHOTO_PIXELS``); the app passes its own run limit (it cannot make a larger photo).
- ``max_held_bytes``: the session budget. ``held_estimate`` counts what the load will hold from the photo's header
  and the mask counts the trace declares (``mask_count``), and ``check_held`` refuses it above the budget before the
  photo is decoded. ``None`` (the command line) checks nothing beyond ``safe_decode.DecodeBudget``.

The estimate counts what a session keeps, not the passing peak of drawing views (about 20 bytes a pixel, measured on
a 4 MP trace in Inspect: bounded by the photo cap).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import TraceFormatError
from .encode import MAX_PHOTO_PIXELS

PHOTO_BYTES_PER_PIXEL = 4  # Pillow holds an RGB photo in 4 bytes a pixel (ui.memory_size.image_bytes)
MASK_BYTES_PER_PIXEL = 1  # the Correct tab holds each mask of the answer as a bool (H, W) array
MIB = 1024**2


@dataclass(frozen=True)
class LoadLimits:
    """The bounds of one load (see the module docstring).

    Attributes:
        max_photo_pixels: largest stored photo (width * height) accepted.
        max_held_bytes: most bytes the loaded trace may hold (``held_estimate``); ``None``: not checked.
        advice: what a refusal tells the person to do instead (e.g. use the command line).
    """

    max_photo_pixels: int = MAX_PHOTO_PIXELS
    max_held_bytes: int | None = None
    advice: str = ""


COMMAND_LINE_LIMITS = LoadLimits()  # the library's and the command line's: what the command line can make


def held_estimate(width: int, height: int, masks: int, file_bytes: int = 0) -> int:
    """Bytes a load of a ``width`` x ``height`` photo with ``masks`` full-size masks will hold: the photo as RGB,
    each mask as bool, and the photo's file (kept to be saved again unchanged)."""
    return width * height * (PHOTO_BYTES_PER_PIXEL + MASK_BYTES_PER_PIXEL * masks) + file_bytes


def check_photo_pixels(width: int, height: int, limits: LoadLimits) -> None:
    """Refuse a stored photo above ``limits.max_photo_pixels`` (from its header: nothing decoded yet).

    Raises:
        TraceFormatError: the message gives both sizes and ``limits.advice``.
    """
    if width * height > limits.max_photo_pixels:
        raise TraceFormatError(
            f"its photo is {width}x{height} pixels ({width * height / 1e6:.1f} MP), more than the "
            f"{limits.max_photo_pixels / 1e6:.1f} MP a trace may have here{_advice(limits)}"
        )


def check_held(width: int, height: int, masks: int, file_bytes: int, limits: LoadLimits) -> None:
    """Refuse a load whose ``held_estimate`` is above ``limits.max_held_bytes`` (nothing decoded yet).

    Raises:
        TraceFormatError: the message says the estimate, what it is made of, the budget and ``limits.advice``.
    """
    if limits.max_held_bytes is None:
        return
    estimate = held_estimate(width, height, masks, file_bytes)
    if estimate > limits.max_held_bytes:
        raise TraceFormatError(
            f"it would hold about {estimate / MIB:,.0f} MB once loaded (a {width}x{height} photo and {masks} "
            f"full-size mask{'s' if masks != 1 else ''}), more than the {limits.max_held_bytes / MIB:,.0f} MB one "
            f"session may use{_advice(limits)}"
        )


def _advice(limits: LoadLimits) -> str:
    return f": {limits.advice}" if limits.advice else ""


def mask_count(record: Any) -> int:
    """How many masks a stored mask-set record declares (its ``rle`` list, or the ``indices`` it picks from another
    set); 0 for anything malformed (the record's own checks refuse it when it is read)."""
    if not isinstance(record, dict):
        return 0
    listed = record.get("indices", record.get("rle"))
    return len(listed) if isinstance(listed, list) else 0


def added_masks(edits: Any) -> int:
    """How many edits can add a full-size mask to the answer (every edit but relabel, toggle and delete)."""
    if not isinstance(edits, list):
        return 0
    return sum(1 for op in edits if isinstance(op, dict) and op.get("op") not in ("relabel", "toggle", "delete"))
