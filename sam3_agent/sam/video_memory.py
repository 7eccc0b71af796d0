"""What SAM 3's video tracker must remember between frames, and nothing more: the memory window and its state.

transformers' ``Sam3TrackerVideoInferenceSession`` keeps every tracked frame's outputs for every object
(``output_dict_per_obj[obj]["non_cond_frame_outputs"]``: memory features, object pointer, low- and high-resolution
mask logits), so a long clip runs out of memory (transformers #44617; sam3 #481: 3,000 frames on an 80 GB card).
The model reads far less. In transformers 5.24, tracking frame ``t`` forward (backward: mirror the offsets) reads:

- the memory features (``maskmem_features``, ``maskmem_pos_enc``) of the non-conditioning frames ``t - 1 ...
  t - (num_maskmem - 1)`` (``_gather_memory_frame_outputs``);
- the object pointers of the non-conditioning frames ``t - 1 ... t - (P - 1)``, ``P = min(num_frames,
  max_object_pointers_in_encoder)`` on a session that knows its frame count (``_get_object_pointers``);
- every conditioning (prompt) frame's memory features and object pointer.

Neither the mask logits of a tracked frame nor anything older is read again. :func:`trim_outputs` drops what lies
outside that window after each frame, so the state holds at most ``max(num_maskmem - 1, P - 1)`` tracked frames per
object whatever the clip's length (for ``facebook/sam3``: 6 frames of memory features and 15 object pointers).
:class:`TrackingState` is that trimmed state with what is needed to go on from it, movable to the CPU and picklable,
so tracking can continue in another GPU call (``models.gpu_calls.GpuVideoTracker``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

COND = "cond_frame_outputs"  # transformers' keys of a session's per-object outputs
NON_COND = "non_cond_frame_outputs"
MEMORY_KEYS = ("maskmem_features", "maskmem_pos_enc")
POINTER_KEY = "object_pointer"
UNREAD_KEYS = ("high_res_masks", "pred_masks", "object_score_logits")  # read only while the frame is computed


@dataclass(frozen=True)
class MemoryWindow:
    """How many tracked (non-conditioning) frames before the next one it reads.

    Attributes:
        memory_frames: frames whose memory features it reads (``num_maskmem - 1``).
        pointer_frames: frames whose object pointers it reads (``min(num_frames, max_object_pointers_in_encoder)
            - 1``).
    """

    memory_frames: int
    pointer_frames: int

    @property
    def frames(self) -> int:
        """The most tracked frames per object the state holds."""
        return max(self.memory_frames, self.pointer_frames, 0)


def memory_window(config: Any, num_frames: int) -> MemoryWindow:
    """The memory window of a ``Sam3TrackerVideoConfig`` on a clip of ``num_frames`` frames (module docstring)."""
    pointers = min(int(num_frames), int(config.max_object_pointers_in_encoder))
    return MemoryWindow(memory_frames=int(config.num_maskmem) - 1, pointer_frames=pointers - 1)


def trim_outputs(outputs: dict[int, dict[str, dict[int, dict[str, Any]]]], last_frame: int, reverse: bool,
                 window: MemoryWindow) -> None:
    """Drop, in place, every output the tracker will not read after ``last_frame`` (the frame just tracked).

    Args:
        outputs: a session's ``output_dict_per_obj``: object index -> ``{"cond_frame_outputs": {frame: outputs},
            "non_cond_frame_outputs": {frame: outputs}}``.
        last_frame: index of the frame just tracked.
        reverse: tracking towards lower frame indices.
        window: what the next frame reads (:func:`memory_window`).
    """
    for per_object in outputs.values():
        for kept in per_object[COND].values():
            kept.pop("high_res_masks", None)
        tracked = per_object[NON_COND]
        for frame in list(tracked):
            behind = frame - last_frame if reverse else last_frame - frame  # 0: the frame just tracked
            if behind < 0 or behind >= window.frames:
                del tracked[frame]
                continue
            kept = tracked[frame]
            for key in UNREAD_KEYS:
                kept.pop(key, None)
            if behind >= window.memory_frames:
                for key in MEMORY_KEYS:
                    kept.pop(key, None)
            if behind >= window.pointer_frames:
                kept.pop(POINTER_KEY, None)


@dataclass
class TrackingState:
    """Where a tracking run stands: enough to track the next frame, in this process or in another one.

    Attributes:
        object_ids: the tracked objects' ids, in the tracker's object order.
        num_frames: the clip's frame count.
        reverse: tracking towards lower frame indices.
        height / width: the clip's frame size in pixels (masks come back at this size).
        last_frame: index of the last frame tracked (the prompt frame at first); the next frame must be
            ``last_frame + 1`` (``- 1`` in reverse).
        outputs: the trimmed per-object outputs (``output_dict_per_obj`` of transformers' session), tensors on
            the model's device while tracking, on the CPU after :meth:`move_to` ``("cpu")``.
    """

    object_ids: tuple[int, ...]
    num_frames: int
    reverse: bool
    height: int
    width: int
    last_frame: int
    outputs: dict[int, dict[str, dict[int, dict[str, Any]]]] = field(repr=False)

    @property
    def next_frame(self) -> int:
        """The index the next frame must have."""
        return self.last_frame - 1 if self.reverse else self.last_frame + 1

    @property
    def done(self) -> bool:
        """True when the run reached the clip's first (reverse) or last frame."""
        return not 0 <= self.next_frame < self.num_frames

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor the state holds."""
        return [value for per_object in self.outputs.values() for frames in per_object.values()
                for kept in frames.values() for value in kept.values() if isinstance(value, torch.Tensor)]

    def nbytes(self) -> int:
        """Bytes of tensor storage the state holds."""
        return sum(t.numel() * t.element_size() for t in self.tensors())

    def move_to(self, device: str | torch.device) -> TrackingState:
        """Move every tensor to ``device`` in place (the bfloat16 memory features stay bfloat16); returns self."""
        for per_object in self.outputs.values():
            for frames in per_object.values():
                for kept in frames.values():
                    for key, value in kept.items():
                        if isinstance(value, torch.Tensor):
                            kept[key] = value.to(device)
        return self
