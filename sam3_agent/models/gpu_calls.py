"""Model calls on ZeroGPU: the backends' calls registered as GPU work (``zerogpu.register``), each asking for the
seconds its own work needs.

``GpuVLM`` (each main request's stream; each verification batch), ``GpuSegmenter`` (each SAM 3 call),
``GpuPointSegmenter`` (each point click) and ``GpuVideoTracker`` (each chunk of tracked frames) stand in for the loaded
backends in the main process: everything but the
model calls is the wrapped object's own (names, image limits, the tokenizer-only ``phrase_cut``...). The models stay
where they were loaded, once per process; a call sends only its inputs (messages, the photo) to the worker.

The durations are **estimates** (no GPU was measured when they were written; the smoke command prints real
timings): Qwen3-VL-8B in bfloat16 and SAM 3 in float32 on ZeroGPU's default slice, half an RTX PRO 6000 Blackwell
(48 GB, about 0.9 TB/s of memory bandwidth and half the card's bfloat16 compute).
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..errors import InputError
from ..limits import DEFAULT_MAX_PIXELS
from ..messages import Generation, ImagePart, Message, TextPart
from .zerogpu import register

# A call may land on a fresh worker: the weights are moved onto the GPU (about 18 GB from host memory) and the two
# system prompts are prefilled there. Asked for on every call, since the main process cannot tell.
CALL_START_SECONDS = 10
DECODE_TOKENS_PER_SECOND = 25  # one row: ~16 GB of weights read per token at ~0.9 TB/s, ~50 % of it reached
BATCH_ROW_SLOWDOWN = 0.1  # each further row of a batch slows a decoding step by ~10 % (memory-bound steps)
PREFILL_TOKENS_PER_SECOND = 2000  # prompt tokens, text and image, well below the slice's compute bound
TEXT_CHARS_PER_TOKEN = 3  # fewer than Qwen's ~4 characters per English token: errs long
IMAGE_PIXELS_PER_TOKEN = 28 * 28  # Qwen2.5-VL's; Qwen3-VL's 32 * 32 gives fewer tokens: errs long
SAM3_IMAGE_SECONDS = 3  # SAM 3's image encoder at 1008 x 1008 in float32 (skipped when the worker has it cached)
SAM3_PROMPT_SECONDS = 2  # its text, detection and mask heads for one phrase, masks upsampled to the photo
SAM3_POINT_SECONDS = 1  # the point model's prompt encoder and mask decoder for one click
FALLBACK_NEW_TOKENS = 1024  # a VLM that does not say its token budget
# Video tracking, per frame (estimates from arithmetic, not measured: FLOPs at half the slice's float32 peak, then
# doubled). The image encoder is ~450 M weights over 5,184 tokens (~4.7 TFLOP a frame, ~0.16 s); each object's
# memory attention (4 layers, 5,184 queries over ~36 k memory tokens, 256 wide) is ~0.8 TFLOP (~0.03 s).
SAM3_TRACK_FRAME_SECONDS = 0.35  # one frame: image encoder, the tracker's neck and the first object
SAM3_TRACK_OBJECT_SECONDS = 0.06  # each further object on that frame
TRACK_CALL_SECONDS = 60  # the most one tracking call asks for (a shorter ask queues sooner; ~140 frames, one object)
TRACK_CALL_FRAME_BYTES = 512 * 1024**2  # most frame pixels (RGB) sent to one call: 86 frames at 1080p, 194 at 720p


def prompt_tokens(messages: Sequence[Message], max_pixels: int = DEFAULT_MAX_PIXELS) -> int:
    """An upper estimate of the tokens of a request: text at ``TEXT_CHARS_PER_TOKEN`` characters a token, each
    image at ``IMAGE_PIXELS_PER_TOKEN`` pixels a token after fitting it to ``max_pixels``."""
    tokens = 0
    for message in messages:
        for part in message.parts:
            if isinstance(part, TextPart):
                tokens += math.ceil(len(part.text) / TEXT_CHARS_PER_TOKEN)
            elif isinstance(part, ImagePart):
                width, height = part.image.size
                tokens += math.ceil(min(width * height, max_pixels) / IMAGE_PIXELS_PER_TOKEN)
    return tokens


def vlm_seconds(prompt: int, new_tokens: int, rows: int = 1) -> float:
    """GPU seconds of one VLM call: start, prefill of ``prompt`` tokens (all rows), ``new_tokens`` decoding steps."""
    slowdown = 1 + BATCH_ROW_SLOWDOWN * (rows - 1)
    return CALL_START_SECONDS + prompt / PREFILL_TOKENS_PER_SECOND + new_tokens / DECODE_TOKENS_PER_SECOND * slowdown


def sam3_seconds() -> float:
    """GPU seconds of one SAM 3 call (start, image encode, one phrase)."""
    return CALL_START_SECONDS + SAM3_IMAGE_SECONDS + SAM3_PROMPT_SECONDS


def point_seconds() -> float:
    """GPU seconds of one point click (start, image encode, the point model's decoder)."""
    return CALL_START_SECONDS + SAM3_IMAGE_SECONDS + SAM3_POINT_SECONDS


def tracking_seconds(frames: int, objects: int) -> float:
    """GPU seconds of one tracking call over ``frames`` frames (the prompt frame counted as one) of ``objects``
    objects: start, then each frame's encoder and tracker (``SAM3_TRACK_*``, estimates)."""
    per_frame = SAM3_TRACK_FRAME_SECONDS + max(0, objects - 1) * SAM3_TRACK_OBJECT_SECONDS
    return CALL_START_SECONDS + frames * per_frame


def chunk_frames(objects: int, width: int, height: int, call_seconds: float = TRACK_CALL_SECONDS) -> int:
    """How many frames one tracking call takes: as many as fit ``call_seconds`` (:func:`tracking_seconds`) and
    ``TRACK_CALL_FRAME_BYTES`` of RGB pixels at ``width`` x ``height``; at least 1."""
    per_frame = SAM3_TRACK_FRAME_SECONDS + max(0, objects - 1) * SAM3_TRACK_OBJECT_SECONDS
    by_time = math.floor((call_seconds - CALL_START_SECONDS) / per_frame + 1e-9)
    by_bytes = TRACK_CALL_FRAME_BYTES // max(1, 3 * width * height)
    return max(1, min(by_time, by_bytes))


def schema_tokens(tools: list[dict[str, Any]] | None) -> int:
    """An upper estimate of the tokens a function schema adds to a request: its JSON at ``TEXT_CHARS_PER_TOKEN``
    characters a token (the template's instructions around it are a few dozen more, within the estimate's margin)."""
    return math.ceil(len(json.dumps(tools, ensure_ascii=False)) / TEXT_CHARS_PER_TOKEN) if tools else 0


def token_budget(vlm: Any) -> int:
    """The VLM's own ``max_new_tokens`` per call (``decoding.max_new_tokens`` or ``max_new_tokens``)."""
    decoding = getattr(vlm, "decoding", None)
    budget = getattr(decoding, "max_new_tokens", None) or getattr(vlm, "max_new_tokens", None)
    return int(budget) if isinstance(budget, int) and budget > 0 else FALLBACK_NEW_TOKENS


class _Proxy:
    """Everything but the model calls is the wrapped backend's own."""

    def __init__(self, wrapped: Any) -> None:
        self.wrapped = wrapped

    def __getattr__(self, name: str) -> Any:
        if name == "wrapped":  # not set yet (while unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.wrapped, name)


class GpuVLM(_Proxy):
    """A local VLM whose requests each run as one GPU call: ``stream`` (a main request, or a verification one by
    one) and, when the VLM batches, ``generate_batch`` (one verification batch).

    ``prepare(vlm)`` runs in the worker before each call (``presets.cache_system_prompts``: computes the system
    prompts' KV caches once per worker process). ``stop`` never travels to the worker: it is watched here between
    streamed pieces, and closing the stream ends the worker's generation.

    ``with_tools`` (the native tool format) gives a view that sends the function schema with each call, by value (a
    few kilobytes of JSON); the worker makes the wrapped VLM's own ``with_tools`` view once per schema and keeps it.
    """

    tools: list[dict[str, Any]] | None = None  # the function schema a ``with_tools`` view sends with each call

    def __init__(self, vlm: Any, key: str, prepare: Callable[[Any], None] = lambda vlm: None) -> None:
        super().__init__(vlm)
        max_pixels = getattr(getattr(vlm, "image_limits", None), "max_pixels", None) or DEFAULT_MAX_PIXELS
        views: dict[str, Any] = {}  # in the worker: the VLM's ``with_tools`` view per schema (JSON text)

        def shown(tools: list[dict[str, Any]] | None) -> Any:
            if not tools:
                return vlm
            key = json.dumps(tools, sort_keys=True)
            if key not in views:
                views.clear()  # one schema per app; a new one replaces it
                views[key] = vlm.with_tools(tools)
            return views[key]

        def stream_on_worker(messages: Sequence[Message], max_new_tokens: int | None = None,
                             tools: list[dict[str, Any]] | None = None) -> Iterator[Any]:
            prepare(vlm)
            stop = threading.Event()
            try:
                yield from shown(tools).stream(messages, max_new_tokens=max_new_tokens, stop=stop)
            finally:
                stop.set()  # closed by the main process: the generation ends

        def stream_seconds(messages: Sequence[Message], max_new_tokens: int | None = None,
                           tools: list[dict[str, Any]] | None = None) -> float:
            prompt = prompt_tokens(messages, max_pixels) + schema_tokens(tools)
            return vlm_seconds(prompt, max_new_tokens or token_budget(vlm))

        self._stream = register(f"{key}.stream", stream_on_worker, stream_seconds, streams=True)
        if callable(getattr(vlm, "generate_batch", None)):
            def batch_on_worker(conversations: Sequence[Sequence[Message]], max_new_tokens: int | None = None,
                                tools: list[dict[str, Any]] | None = None) -> list[Generation]:
                prepare(vlm)
                return shown(tools).generate_batch(conversations, max_new_tokens=max_new_tokens)

            def batch_seconds(conversations: Sequence[Sequence[Message]], max_new_tokens: int | None = None,
                              tools: list[dict[str, Any]] | None = None) -> float:
                prompt = sum(prompt_tokens(c, max_pixels) + schema_tokens(tools) for c in conversations)
                return vlm_seconds(prompt, max_new_tokens or token_budget(vlm), rows=len(conversations))

            self._batch = register(f"{key}.generate_batch", batch_on_worker, batch_seconds)
            self.generate_batch = self._generate_batch  # only a VLM that batches offers it (``supports_batches``)

    def with_tools(self, tools: list[dict[str, Any]]) -> GpuVLM:
        """This VLM sending ``tools`` (the native tool format's function schema) with every GPU call. The wrapped VLM's
        own ``with_tools`` view is made here too, so a VLM that cannot take a schema is refused now and the view says
        how the schema reaches the model (``tool_schema``: rendering a template needs no GPU).

        Raises:
            InputError: the wrapped VLM cannot take a function schema.
        """
        method = getattr(type(self.wrapped), "with_tools", None)
        if method is None:
            name = getattr(self.wrapped, "name", type(self.wrapped).__name__)
            raise InputError(f"the VLM backend {name!r} cannot be given the tools as a function schema: use the "
                             "reference tool format (--tool-format reference)")
        view = copy.copy(self)
        view.tools = list(tools)
        view.tool_schema = getattr(method(self.wrapped, view.tools), "tool_schema", None)
        if "generate_batch" in vars(self):
            view.generate_batch = view._generate_batch
        return view

    def stream(self, messages: Sequence[Message], *, max_new_tokens: int | None = None,
               stop: threading.Event | None = None) -> Iterator[str | Generation]:
        """``VLM.stream`` with the generation on a GPU; a ``stop`` set ends it with ``finish_reason="cancelled"``."""
        if stop is not None and stop.is_set():
            yield Generation("", "cancelled", None, 0)
            return
        pieces: list[str] = []
        remote = self._stream(list(messages), max_new_tokens=max_new_tokens, **self._schema())
        try:
            for item in remote:
                if stop is not None and stop.is_set():
                    yield Generation("".join(pieces), "cancelled", None, len(pieces))
                    return
                if isinstance(item, str):
                    pieces.append(item)
                yield item
        finally:
            remote.close()

    def _generate_batch(self, conversations: Sequence[Sequence[Message]], *, max_new_tokens: int | None = None,
                        stop: threading.Event | None = None) -> list[Generation]:
        """``BatchVLM.generate_batch`` as one GPU call; ``stop`` is looked at before it (a batch is not cut short)."""
        if stop is not None and stop.is_set():
            return [Generation("", "cancelled", None, 0) for _ in conversations]
        return self._batch([list(c) for c in conversations], max_new_tokens=max_new_tokens, **self._schema())

    def _schema(self) -> dict[str, Any]:
        """The schema argument of a call: only a ``with_tools`` view sends one."""
        return {"tools": self.tools} if self.tools else {}

    def prefill_system_prompts(self, texts: Sequence[str]) -> None:
        """Nothing here: each GPU worker computes the system prompts in its first call (``prepare``)."""


class GpuSegmenter(_Proxy):
    """SAM 3 whose ``segment`` calls each run as one GPU call."""

    def __init__(self, segmenter: Any, key: str) -> None:
        super().__init__(segmenter)
        self.segment = register(f"{key}.segment", segmenter.segment, lambda *args, **kwargs: sam3_seconds())


class GpuPointSegmenter(_Proxy):
    """SAM 3's point model whose ``segment_points`` calls (one per click) each run as one GPU call."""

    def __init__(self, point_segmenter: Any, key: str) -> None:
        super().__init__(point_segmenter)
        self.segment_points = register(f"{key}.segment_points", point_segmenter.segment_points,
                                       lambda *args, **kwargs: point_seconds())


class GpuVideoTracker(_Proxy):
    """SAM 3's video tracker whose ``track`` runs as GPU calls of bounded seconds, each a chunk of frames.

    The main process pulls the frames, sends each chunk (at most :func:`chunk_frames` frames: ``call_seconds`` of
    work and ``TRACK_CALL_FRAME_BYTES`` of pixels) with the state the previous chunk handed back, and streams the
    tracked frames back as they come; the state between chunks lives on the CPU and travels pickled
    (``sam.video_memory.TrackingState``: the tracker's memory window, a few MB). Each call asks for what its own
    frames need (:func:`tracking_seconds`). ``stop`` is watched here between frames: the call in progress is closed
    (its generator ends on the worker) and nothing more is sent.
    """

    def __init__(self, tracker: Any, key: str, call_seconds: float = TRACK_CALL_SECONDS) -> None:
        super().__init__(tracker)
        self.call_seconds = call_seconds

        def chunk_on_worker(state: Any, frames: list, prompts: Any, num_frames: int, reverse: bool) -> Iterator[Any]:
            items = tracker.track_chunk(state, frames, prompts, num_frames=num_frames, reverse=reverse)
            for item in items:
                yield (hasattr(item, "outputs"), item)  # (True, state) comes last

        def chunk_seconds(state: Any, frames: list, prompts: Any, num_frames: int, reverse: bool) -> float:
            return tracking_seconds(len(frames), len(prompts) if state is None else len(state.object_ids))

        self._chunk = register(f"{key}.track_chunk", chunk_on_worker, chunk_seconds, streams=True)

    def track(self, frames: Any, prompts: Any, *, num_frames: int, reverse: bool = False,
              stop: threading.Event | None = None) -> Iterator[Any]:
        """``VideoTracker.track`` in GPU calls of bounded seconds (see the class)."""
        items = iter(frames)
        first = next(items, None)
        if first is None:
            raise InputError("no frames to track: the first frame given must be the prompt frame")
        image = first[1] if isinstance(first, tuple) and len(first) == 2 else None  # the worker checks the items
        width, height = getattr(image, "size", (1, 1))
        size = chunk_frames(len(prompts) if hasattr(prompts, "__len__") else 1, width, height, self.call_seconds)
        state, chunk = None, [first, *itertools.islice(items, size - 1)]
        while chunk and not (stop is not None and stop.is_set()):
            remote = self._chunk(state, chunk, prompts if state is None else None, num_frames, reverse)
            try:
                for is_state, item in remote:
                    if is_state:
                        state = item
                    else:
                        yield item
                    if stop is not None and stop.is_set():
                        return
            finally:
                remote.close()
            if state is None or state.done:
                return
            chunk = list(itertools.islice(items, size))
