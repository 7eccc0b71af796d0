"""Which frame a sample's ground truth is in, and turning it into the frame the answer is in.

A photo with an EXIF orientation has two frames: *stored* (the pixel rows as the file holds them) and *upright* (after
the turn or mirror the tag asks for). The agent always works on the upright photo (``images.load_image`` applies the
tag), so its answers, and the sizes in its records, are upright. Each format's annotations are in one frame:

- ReasonSeg: upright. It was annotated in LabelMe, which applies the EXIF orientation when it opens a photo, and
  LISA's loader reads photos with ``cv2.imread``, which applies it too; ``imageHeight``/``imageWidth``, when a file
  has them, are the upright size.
- RefCOCO/+/g (COCO ``instances.json``): stored. COCO's ``height``/``width`` and polygons describe the pixels as the
  file stores them (COCO's tools read photos without applying the tag).
- the JSONL format: upright, as every mask this product writes (the RLE ``size`` is the upright [H, W]).

When the tag changes nothing (absent, or 1) the frames are one. Otherwise the declared size decides where it can: a
size that is the stored one and not the upright one (a quarter turn of a photo that is not square) puts the
annotations in the stored frame, one that is the upright size and not the stored one puts them upright, whatever the
format says (a note says so when that is not the format's convention). Where sizes cannot tell (a square photo, a
half turn, a mirror, no declared size) the format's convention is followed and the sample carries a note saying so.
Stored-frame ground truth is turned upright with Pillow's own ``ImageOps.exif_transpose``, the call that turned the
photo, so answer and truth are always scored in one frame.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

from ...errors import InputError
from ..formats.ground_truth import STORED, UPRIGHT, EvalSample, GroundTruth

ORIENTATION_TAG = 0x0112  # EXIF "Orientation"
QUARTER_TURNS = (5, 6, 7, 8)  # orientations that swap width and height
_WHAT = {2: "mirrored left to right", 3: "turned half a turn", 4: "mirrored top to bottom",
         5: "mirrored and turned a quarter", 6: "turned a quarter clockwise", 7: "mirrored and turned a quarter",
         8: "turned a quarter counter-clockwise"}


@dataclass(frozen=True)
class PhotoFrame:
    """A photo's EXIF orientation (1..8) and its size as stored, ``(height, width)`` in pixels."""

    orientation: int
    stored: tuple[int, int]

    @property
    def upright(self) -> tuple[int, int]:
        """``(height, width)`` once the orientation is applied."""
        height, width = self.stored
        return (width, height) if self.orientation in QUARTER_TURNS else (height, width)


def photo_frame(path: Path) -> PhotoFrame | None:
    """The photo's orientation and stored size from its header (no pixels decoded), or ``None`` when it cannot be
    read now (the run's record then decides alone, as without an orientation)."""
    try:
        with Image.open(path) as photo:
            orientation = photo.getexif().get(ORIENTATION_TAG, 1)
            size = (photo.height, photo.width)
    except (OSError, ValueError, SyntaxError):  # Pillow's errors for unreadable headers and EXIF blocks
        return None
    return PhotoFrame(orientation if orientation in range(1, 9) else 1, size)


def to_upright(mask: np.ndarray, orientation: int) -> np.ndarray:
    """A bool (H, W) mask in the stored frame, turned as ``ImageOps.exif_transpose`` turns the photo."""
    picture = Image.fromarray(mask.astype(np.uint8) * 255)
    picture.getexif()[ORIENTATION_TAG] = orientation
    return np.asarray(ImageOps.exif_transpose(picture)) > 0


def annotation_frame(truth: GroundTruth, frame: PhotoFrame) -> tuple[str, str | None]:
    """The frame ``truth`` is in on this photo (``STORED`` or ``UPRIGHT``) and a note when that was not read from the
    sizes or differs from the format's convention (see the module docstring)."""
    what = f"the photo is {_WHAT[frame.orientation]} by its EXIF orientation {frame.orientation}"
    declared, convention = truth.declared_size, truth.frame
    if declared is not None and frame.stored != frame.upright and declared in (frame.stored, frame.upright):
        found = STORED if declared == frame.stored else UPRIGHT
        height, width = declared
        note = None if found == convention else (
            f"{what}; the ground truth is {width}x{height}, the photo's {found} size, though this format's annotations "
            f"are {convention}: scored in the {found} frame")
        return found, note
    if declared is not None and declared not in (frame.stored, frame.upright):
        return convention, None  # a plain size mismatch: ``truth.masks`` says so
    return convention, (f"{what} and its size cannot tell which frame the ground truth is in: scored as in the "
                        f"{convention} frame, this format's convention")


def upright_truth(sample: EvalSample, height: int, width: int) -> tuple[np.ndarray, np.ndarray, str | None]:
    """``(target, ignore, note)``: the sample's regions as bool (H, W) masks in the frame of an upright answer of
    ``height`` x ``width``, and the frame note (``None`` when there is nothing to say).

    Raises:
        InputError: the ground truth does not fit the photo, or the photo changed since the run (another size).
    """
    frame = photo_frame(sample.image)
    if frame is None or frame.orientation == 1:
        target, ignore = sample.truth.masks(height, width)
        return target, ignore, None
    if frame.upright != (height, width):
        raise InputError(f"the photo is {frame.upright[1]}x{frame.upright[0]} upright now but its run saw "
                         f"{width}x{height}: it changed since; run the sample again")
    found, note = annotation_frame(sample.truth, frame)
    if found == UPRIGHT:
        target, ignore = sample.truth.masks(height, width)
        return target, ignore, note
    target, ignore = sample.truth.masks(*frame.stored)
    return to_upright(target, frame.orientation), to_upright(ignore, frame.orientation), note
