"""A frame fixed by hand: handed to the Correct tab as a one-photo trace (the frame, the object's mask as its answer),
and the corrected masks read back to become the object's mask on that frame (or new objects).

The Correct tab's canvas, tools, undo and shortcuts then serve a video frame exactly as they serve a photo: points and
boxes go through SAM 3's point model, the brush paints and erases; nothing of it is written twice.

No Gradio here.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from PIL import Image

from ...mask_set import Masks
from ...types import Trace
from ...video.records import VideoTrace
from ..correct.session import CorrectSession

ADD_LABEL = "new object"  # the Correct tab's label of a mask drawn to add an object


def frame_name(trace: VideoTrace, frame: int) -> str:
    """The frame's name as a photo, as a keyframe run names it (``bigbuckbunny_frame00012.png``)."""
    stem = Path(trace.clip.file_name).stem if trace.clip.file_name else "clip"
    return f"{stem}_frame{frame:05d}.png"


def frame_trace(trace: VideoTrace, image: Image.Image, frame: int, object_id: int | None) -> Trace:
    """The one-photo trace the Correct tab opens: frame ``frame`` (``image``, at the clip's size) with object
    ``object_id``'s mask there as its answer (none when the object is absent there, or to add one: ``None``).

    Raises:
        InputError: no such object or frame.
    """
    tracks = trace.tracks
    tracks.check_frame(frame)
    height, width = tracks.height, tracks.width
    label = ADD_LABEL
    answer = Masks.empty(height, width, label)
    if object_id is not None:
        obj = tracks.get(object_id)
        label = f"object {object_id}"
        mask = tracks.mask(object_id, frame)
        if mask.any():
            present = tracks.present(object_id, frame)
            score = present.score if present is not None else 1.0
            ys, xs = np.nonzero(mask)
            box = np.array([[xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]], dtype=np.float32)
            answer = Masks(mask[None], np.array([score], dtype=np.float32), box, obj.label)
    now = time.time()
    return Trace(query=label, image=image.convert("RGB"), settings={"video_frame": frame}, status="done",
                 final_masks=answer, started_at=now, finished_at=now, image_name=frame_name(trace, frame))


def corrected_masks(session: CorrectSession) -> list[tuple[np.ndarray, str]]:
    """The corrected answer's masks (shown, not deleted, not empty) with their labels, in the Correct tab's order."""
    items = session.state.items
    return [(items[i].mask, items[i].label) for i in session.state.corrected_indices()]


def fixed_mask(session: CorrectSession) -> np.ndarray:
    """bool (H, W) at the frame's size: every corrected mask of the Correct session opened on the frame together, the
    object's new mask there (empty when all were deleted or hidden: the object is then absent on that frame)."""
    union = np.zeros((session.state.height, session.state.width), dtype=bool)
    for mask, _label in corrected_masks(session):
        union |= mask
    return union
