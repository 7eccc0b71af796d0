"""SAM 3's video tracker behind one Protocol: mask prompts on one frame -> each object's mask on the frames after it.

``Sam3VideoTracker`` wraps transformers' ``Sam3TrackerVideoModel`` / ``Sam3TrackerVideoProcessor`` (the
``tracker_model.*`` weights of ``facebook/sam3``). transformers' own recipe (``init_video_session(video=...)``, then
``propagate_in_video_iterator``) needs the whole clip preprocessed into the session (about 12 MB a frame at 1008 px in
float32) and keeps every tracked frame's outputs, so its memory grows with the clip. Here the model is driven one
frame at a time through the same public calls (``add_inputs_to_inference_session``, ``model(inference_session=...,
frame_idx=...)``): each frame's vision features are computed here and put into the session's feature cache (which the
model reads before it looks for a stored frame), so no frame is ever stored in the session, and after each frame the
outputs outside the model's memory window are dropped (``video_memory.trim_outputs``). The masks are exactly those
of transformers' recipe on the same frames (a test compares them), in memory flat in the clip's length.

One vision encoder: :meth:`Sam3VideoTracker.share_backbone_with` makes the tracker use the detector's backbone and
its per-image cache (``shared_backbone``), so a frame the detector segmented is not encoded again, and vice versa.

Resumable: :meth:`Sam3VideoTracker.track_chunk` tracks a bounded chunk of frames and hands back a
``video_memory.TrackingState`` on the CPU (picklable) to go on from, for ZeroGPU's GPU calls of bounded seconds.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from PIL import Image

from ..errors import BackendError, InputError, is_out_of_memory
from ..models.loading import default_device, load_checked
from ..shared import SharedObject
from .segmenter import DEFAULT_SAM3_MODEL, Sam3Segmenter, _looks_like_local_path, sam3_dtype
from .shared_backbone import SharedBackbone, share_backbone
from .tracker import MASK_LOGIT_THRESHOLD, tracker_load_failure_message
from .video_memory import COND, NON_COND, TrackingState, memory_window, trim_outputs

logger = logging.getLogger(__name__)

WHAT = "SAM 3's video tracker"
VIDEO_TRACKER_WEIGHTS_HINT = (
    "Use the facebook/sam3 checkpoint as downloaded (a sam3_video checkpoint: its tracker_model.* and tracker_neck.* "
    "weights are the video tracker's), or a folder saved from Sam3TrackerVideoModel; a copy re-saved from Sam3Model "
    "or Sam3TrackerModel lacks the tracker's memory weights."
)


@dataclass(frozen=True, eq=False)
class TrackedFrame:
    """Every object's mask on one tracked frame.

    Attributes:
        frame_index: 0-based index of the frame in the clip.
        masks: object id -> bool (H, W) at the frame's resolution (all False when the object is gone).
        scores: object id -> the tracker's object score, sigmoid(object_score_logit) in [0, 1] (above 0.5: present).
    """

    frame_index: int
    masks: dict[int, np.ndarray]
    scores: dict[int, float]


@runtime_checkable
class VideoTracker(Protocol):
    """Anything that carries objects given as masks on one frame through the frames after it."""

    name: str

    def track(self, frames: Iterable[tuple[int, Image.Image]], prompts: Mapping[int, np.ndarray], *,
              num_frames: int, reverse: bool = False, stop: threading.Event | None = None) -> Iterator[TrackedFrame]:
        """The first item of ``frames`` is the prompt frame: every object of ``prompts`` (id -> bool (H, W) mask at
        that frame's size, non-empty) is given to the tracker as a mask prompt there. The following items are
        consecutive frame indices in the direction asked (k+1, k+2, ... or k-1, k-2, ...). Yields one TrackedFrame
        per frame AFTER the prompt frame, in order, as each is computed; returns when ``frames`` ends or ``stop`` is
        set (after the frame in progress). ``num_frames`` is the clip's frame count."""
        ...


class _NoStoredFrames:
    """Stands in for the session's ``processed_frames``: it says the clip's frame count and holds no frame (every
    frame's features are in the session's cache before the model asks for that frame)."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, frame_index: int) -> torch.Tensor:
        raise BackendError(f"{WHAT} asked for frame {frame_index}, whose features were not prepared (a bug)")


class Sam3VideoTracker(SharedObject):
    """SAM 3's mask-prompt video tracker (transformers ``Sam3TrackerVideoModel``), memory flat in the clip's length.

    Life cycle: build once with :meth:`from_pretrained` (optionally :meth:`share_backbone_with` the detector), then
    call :meth:`track` for each prompt frame and direction. Each call has its own state; a lock serialises the
    model's work frame by frame, so calls from several users interleave.

    Attributes:
        name: the model id or folder it was loaded from.
    """

    def __init__(self, model: Any, processor: Any, *, name: str = DEFAULT_SAM3_MODEL) -> None:
        """Wrap a loaded ``Sam3TrackerVideoModel`` (eval mode, on its device) and its ``Sam3TrackerVideoProcessor``."""
        self.name = name
        self._model = model
        self._processor = processor
        self._lock = threading.Lock()
        self._shared: SharedBackbone | None = None
        self._input_size = int(processor.image_processor.size["height"])  # square model input, pixels

    @classmethod
    def from_pretrained(cls, model_id: str = DEFAULT_SAM3_MODEL, *, device: str | None = None,
                        dtype: str | None = None) -> Sam3VideoTracker:
        """Load the video tracker and its processor from a Hugging Face id or a local folder.

        ``facebook/sam3`` is a ``sam3_video`` checkpoint: transformers renames its ``tracker_model.*``,
        ``tracker_neck.*`` and the detector's vision backbone into ``Sam3TrackerVideoModel`` and ignores the
        detector's other weights. A checkpoint that still lacks any of the tracker's weights is refused with the
        missing keys named (``models.loading.check_loading_info``).

        Args:
            model_id: Hub id (default ``facebook/sam3``, gated) or a folder written by ``save_pretrained``.
            device: torch device string; ``None`` picks ``"cuda"`` when available, else ``"cpu"``.
            dtype: ``"float32"`` (default) or ``"bfloat16"`` (``segmenter.sam3_dtype``); use the detector's dtype so
                the two can share their vision backbone.

        Raises:
            BackendError: the weights or processor cannot be loaded, or weights are missing; the message names
                ``model_id`` and the fix.
            InputError: an unknown ``dtype``.
        """
        from transformers import Sam3TrackerVideoModel, Sam3TrackerVideoProcessor

        torch_dtype = sam3_dtype(dtype)
        local = _looks_like_local_path(model_id)
        if local and not Path(model_id).expanduser().is_dir():
            raise BackendError(tracker_load_failure_message(model_id, FileNotFoundError(f"no folder at {model_id}"),
                                                            WHAT))
        source = str(Path(model_id).expanduser()) if local else model_id
        device = device or default_device()
        logger.info("loading SAM 3 video tracker from %s on %s (%s)", model_id, device, torch_dtype)
        try:
            processor = Sam3TrackerVideoProcessor.from_pretrained(source)
            model = load_checked(Sam3TrackerVideoModel, source, model_id, WHAT, device, torch_dtype,
                                 hint=VIDEO_TRACKER_WEIGHTS_HINT)
        except BackendError:
            raise
        except Exception as exc:  # missing, gated, corrupt or bad device: one clear error
            raise BackendError(tracker_load_failure_message(model_id, exc, WHAT)) from exc
        return cls(model, processor, name=model_id)

    @property
    def device(self) -> torch.device:
        """The device the model runs on."""
        return next(self._model.parameters()).device

    def share_backbone_with(self, segmenter: Sam3Segmenter) -> bool:
        """Use ``segmenter``'s vision backbone and its per-image cache from now on, when they are the same
        (``shared_backbone.share_backbone``: equal weights, equal pixels from both processors). Then a frame the
        detector encoded (same pixels) is not encoded again, a frame encoded here is cached for the detector, and the
        tracker's own backbone is dropped. Masks are unchanged (a test checks them bit for bit). Idempotent.

        Returns:
            True when shared with ``segmenter`` (now or before), False when the two differ or the tracker already
            shares another segmenter's backbone (nothing changes; the reason is logged).
        """
        with self._lock:
            if self._shared is not None:
                if self._shared.source is not segmenter:
                    logger.info("%s already shares the backbone of %s; not switching", WHAT, self._shared.source.name)
                return self._shared.source is segmenter
            self._shared = share_backbone(self._model.vision_encoder, self._processor, segmenter, WHAT)
            return self._shared is not None

    # ------------------------------------------------------------------ tracking

    def track(self, frames: Iterable[tuple[int, Image.Image]], prompts: Mapping[int, np.ndarray], *,
              num_frames: int, reverse: bool = False, stop: threading.Event | None = None) -> Iterator[TrackedFrame]:
        """Track the objects of ``prompts`` from the first frame of ``frames`` on (``VideoTracker.track``).

        Args:
            frames: ``(frame index, PIL image)`` pairs, pulled one at a time: the prompt frame, then consecutive
                indices in the direction asked; every frame has the prompt frame's size (any mode; RGB is used).
            prompts: object id (positive int) -> bool (H, W) mask at the prompt frame's size, non-empty.
            num_frames: the clip's frame count (the model's object pointers depend on it).
            reverse: track towards lower frame indices.
            stop: when set, returns after the frame in progress.

        Yields:
            one :class:`TrackedFrame` per frame after the prompt frame, in order.

        Raises:
            InputError: no frames, bad prompts, a frame out of order, out of the clip or of another size.
            BackendError: out of memory while running the model.
        """
        if stop is not None and stop.is_set():
            return
        items = iter(frames)
        first = next(items, None)
        if first is None:
            raise InputError("no frames to track: the first frame given must be the prompt frame")
        state = self.start(first, prompts, num_frames=num_frames, reverse=reverse)
        yield from self.resume(state, items, stop=stop)

    def start(self, prompt_frame: tuple[int, Image.Image], prompts: Mapping[int, np.ndarray], *, num_frames: int,
              reverse: bool = False) -> TrackingState:
        """Give the objects of ``prompts`` to the tracker on ``prompt_frame``; returns the state to :meth:`resume`.

        Raises:
            InputError: bad prompts or frame (see :meth:`track`).
            BackendError: out of memory while running the model.
        """
        if isinstance(num_frames, bool) or not isinstance(num_frames, int) or num_frames < 1:
            raise InputError(f"num_frames is the clip's frame count, a whole number of at least 1; got {num_frames!r}")
        index, image = _checked_frame(prompt_frame, num_frames, None)
        ids, masks = _checked_prompts(prompts, image.height, image.width)
        state = TrackingState(object_ids=ids, num_frames=num_frames, reverse=bool(reverse), height=image.height,
                              width=image.width, last_frame=index,
                              outputs={i: {COND: {}, NON_COND: {}} for i in range(len(ids))})

        def prompt() -> None:
            session = self._session(state)
            self._prepare_features(session, index, image)
            self._processor.add_inputs_to_inference_session(session, frame_idx=index, obj_ids=list(ids),
                                                            input_masks=masks)
            self._model(inference_session=session, frame_idx=index)
            trim_outputs(state.outputs, index, state.reverse, memory_window(self._model.config, num_frames))

        self._run_locked(prompt, index, image)
        return state

    def resume(self, state: TrackingState, frames: Iterable[tuple[int, Image.Image]], *,
               stop: threading.Event | None = None) -> Iterator[TrackedFrame]:
        """Track ``frames`` (the next frames after ``state.last_frame``, consecutive) from ``state``, which is
        updated as each frame is tracked (its tensors are moved to the model's device first).

        Raises:
            InputError: a frame out of order, out of the clip or of another size.
            BackendError: out of memory while running the model.
        """
        state.move_to(self.device)
        session = self._session(state)
        window = memory_window(self._model.config, state.num_frames)
        items = iter(frames)
        while stop is None or not stop.is_set():  # checked before the next frame is pulled (decoded)
            item = next(items, None)
            if item is None:
                return
            index, image = _checked_frame(item, state.num_frames, state)

            def step(index: int = index, image: Image.Image = image) -> TrackedFrame:
                self._prepare_features(session, index, image)
                output = self._model(inference_session=session, frame_idx=index, reverse=state.reverse)
                state.last_frame = index
                trim_outputs(state.outputs, index, state.reverse, window)
                for tracked in session.frames_tracked_per_obj.values():
                    tracked.clear()  # read only when a prompt is added to a tracked frame; none is here
                return self._tracked_frame(output, index, state)

            yield self._run_locked(step, index, image)

    def track_chunk(self, state: TrackingState | None, frames: Sequence[tuple[int, Image.Image]],
                    prompts: Mapping[int, np.ndarray] | None = None, *, num_frames: int | None = None,
                    reverse: bool = False) -> Iterator[TrackedFrame | TrackingState]:
        """One bounded piece of a tracking run, for a GPU call of its own: yields each :class:`TrackedFrame`, then
        (last) the :class:`TrackingState` to go on from, its tensors on the CPU (picklable).

        Args:
            state: where the previous chunk stopped, or ``None``: then ``frames[0]`` is the prompt frame, and
                ``prompts``, ``num_frames`` and ``reverse`` are as in :meth:`track`.
            frames: the chunk's ``(frame index, PIL image)`` pairs.

        Raises:
            InputError / BackendError: as :meth:`track`.
        """
        items = iter(frames)
        if state is None:
            first = next(items, None)
            if first is None:
                raise InputError("no frames to track: the first frame given must be the prompt frame")
            state = self.start(first, prompts or {}, num_frames=num_frames or 0, reverse=reverse)
        yield from self.resume(state, items)
        yield state.move_to("cpu")

    # ------------------------------------------------------------------ internals

    def _session(self, state: TrackingState) -> Any:
        """A transformers session over ``state``'s outputs (the same dicts: the model's writes update the state),
        storing no frame and caching one frame's features."""
        device = self.device
        session = self._processor.init_video_session(
            video=None, inference_device=device, inference_state_device=device, video_storage_device=device,
            max_vision_features_cache_size=1, dtype=self._model.dtype,
        )
        session.processed_frames = _NoStoredFrames(state.num_frames)
        session.video_height, session.video_width = state.height, state.width
        for object_id in state.object_ids:
            session.obj_id_to_idx(object_id)
        session.output_dict_per_obj = state.outputs
        return session

    def _prepare_features(self, session: Any, index: int, image: Image.Image) -> None:
        """Put the frame's vision features into the session's cache, where the model reads them first."""
        if self._shared is None:
            pixel_values = self._processor(images=image, return_tensors="pt")["pixel_values"]
            pixel_values = pixel_values.to(self.device, dtype=self._model.dtype)
            features = self._model.get_image_features(pixel_values, return_dict=True)
        else:  # the detector's cache gives the backbone output; only the input's shape is read from the pixels
            shape = torch.empty((1, 3, self._input_size, self._input_size), device=self.device, dtype=self._model.dtype)
            with self._shared.given(image):
                features = self._model.get_image_features(shape, return_dict=True)
        session.cache.cache_vision_features(index, {"vision_feats": features.fpn_hidden_states,
                                                    "vision_pos_embeds": features.fpn_position_encoding})

    def _tracked_frame(self, output: Any, index: int, state: TrackingState) -> TrackedFrame:
        logits = output.pred_masks.float()  # (objects, 1, h, w) mask logits
        masks = self._processor.post_process_masks([logits], [[state.height, state.width]],
                                                   mask_threshold=MASK_LOGIT_THRESHOLD)[0]
        masks = masks.reshape(len(state.object_ids), state.height, state.width).cpu().numpy()
        scores = torch.sigmoid(output.object_score_logits.float()).reshape(-1).cpu().tolist()
        ids = [int(i) for i in output.object_ids]
        return TrackedFrame(frame_index=index, masks={i: masks[n] for n, i in enumerate(ids)},
                            scores={i: float(scores[n]) for n, i in enumerate(ids)})

    def _run_locked(self, run: Any, index: int, image: Image.Image) -> Any:
        """``run()`` under the lock and ``torch.inference_mode``; out of memory becomes a ``BackendError``."""
        with self._lock:
            try:
                with torch.inference_mode():
                    return run()
            except Exception as exc:
                if not is_out_of_memory(exc):
                    raise
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                raise BackendError(
                    f"{WHAT} ({self.name}) ran out of memory on frame {index} ({image.width}x{image.height}) on "
                    f"{self.device}: track fewer objects at once, free memory, or run it on the CPU."
                ) from exc


def _checked_frame(item: Any, num_frames: int, state: TrackingState | None) -> tuple[int, Image.Image]:
    """``(index, RGB image)`` from a frame item, checked against the clip and (after the prompt frame) the run."""
    if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], Image.Image)):
        raise InputError("each frame must be a (frame index, PIL image) pair")
    index, image = item
    if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < num_frames:
        raise InputError(f"frame index {index!r} is outside the clip's {num_frames} frames (0 to {num_frames - 1})")
    if state is not None:
        if index != state.next_frame:
            raise InputError(f"frame {index} came after frame {state.last_frame}: the tracker takes consecutive "
                             f"frames, {'backward' if state.reverse else 'forward'} (frame {state.next_frame} next)")
        if image.size != (state.width, state.height):
            raise InputError(f"frame {index} is {image.width}x{image.height}, the prompt frame {state.width}x"
                             f"{state.height}: every frame of a clip must have one size")
    return int(index), image if image.mode == "RGB" else image.convert("RGB")


def _checked_prompts(prompts: Mapping[int, np.ndarray], height: int,
                     width: int) -> tuple[tuple[int, ...], list[np.ndarray]]:
    """The prompts' object ids (ascending) and their masks, checked: positive ids, bool (H, W) masks, none empty."""
    if not isinstance(prompts, Mapping) or not prompts:
        raise InputError("give at least one object to track: prompts maps object ids to masks on the prompt frame")
    for object_id, mask in prompts.items():
        if isinstance(object_id, bool) or not isinstance(object_id, (int, np.integer)) or object_id < 1:
            raise InputError(f"object ids are whole numbers of at least 1 (0 is the background); got {object_id!r}")
        if not isinstance(mask, np.ndarray) or mask.dtype != bool or mask.shape != (height, width):
            kind = f"{mask.dtype} {mask.shape}" if isinstance(mask, np.ndarray) else type(mask).__name__
            raise InputError(f"the mask of object {object_id} must be a bool array of the prompt frame's size "
                             f"({height}, {width}); got {kind}")
        if not mask.any():
            raise InputError(f"the mask of object {object_id} is empty: give it at least one pixel on the prompt frame")
    ids = tuple(sorted(int(i) for i in prompts))
    return ids, [prompts[i] for i in ids]
