"""What tracking a clip asks of ZeroGPU, said before Run so that a visitor without an account knows whether it fits.

On ZeroGPU the tracker runs in GPU calls of bounded seconds, one per chunk of frames (``models.gpu_calls.
GpuVideoTracker``), each asking for its own frames' estimate (``gpu_calls.tracking_seconds``); a run tracks forward
from the keyframe to the end and backward to the start, each direction in its own calls, the keyframe read by both.
``tracking_ask`` adds those calls up as the tracker will make them, for the keyframe that asks most.

No Gradio here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...models.zerogpu import DURATION_FACTOR, on_zero_gpu
from ...video.clip_info import ClipInfo

# ZeroGPU's daily GPU time per visitor (Hugging Face's ZeroGPU docs, 2026: FACTS.md), smallest first
DAILY_QUOTAS = (("a visitor who is not logged in (2 min)", 120), ("a free Hugging Face account (5 min)", 300),
                ("a PRO account (40 min)", 2400))


@dataclass(frozen=True)
class TrackingAsk:
    """GPU seconds a run's tracking asks for in all (``seconds``), in ``calls`` calls of at most ``largest`` s."""

    seconds: float
    calls: int
    largest: float


def _span_ask(frames: int, objects: int, width: int, height: int) -> tuple[float, int, float]:
    """(seconds, calls, largest call) of one direction reading ``frames`` frames (the keyframe first)."""
    from ...models.gpu_calls import chunk_frames, tracking_seconds

    if frames <= 1:
        return 0.0, 0, 0.0
    size = chunk_frames(objects, width, height)
    calls = math.ceil(frames / size)
    asks = [tracking_seconds(min(size, frames - i * size), objects) for i in range(calls)]
    return sum(asks), calls, max(asks)


def tracking_ask(info: ClipInfo, objects: int = 1) -> TrackingAsk:
    """What tracking ``objects`` objects through the clip asks for, at the keyframe that asks most."""
    worst = TrackingAsk(0.0, 0, 0.0)
    count = info.frame_count
    for keyframe in range(count):
        forward = _span_ask(count - keyframe, objects, info.width, info.height)
        backward = _span_ask(keyframe + 1, objects, info.width, info.height)
        seconds = forward[0] + backward[0]
        if seconds > worst.seconds:
            worst = TrackingAsk(seconds, forward[1] + backward[1], max(forward[2], backward[2]))
    return worst


def gpu_words(info: ClipInfo) -> str:
    """The note a ZeroGPU Space's visitor reads once a clip is uploaded."""
    one, two = tracking_ask(info, 1), tracking_ask(info, 2)
    more = two.seconds - one.seconds
    if one.calls == 0:
        return ("This clip has one frame: after the agent's run on it there is nothing to track, so it asks for no "
                "GPU time beyond that run's model calls.")
    seconds = math.ceil(one.seconds)
    counted = math.ceil(one.seconds * DURATION_FACTOR)  # what ZeroGPU holds against the quota
    fits = next((who for who, quota in DAILY_QUOTAS if counted <= quota), None)
    verdict = (f"That fits the daily GPU time of {fits}." if fits is not None else
               "That is more than any account's daily GPU time: trim the clip, or run the app on your own GPU.")
    return (f"On this Space, tracking this clip ({info.frame_count} frames) asks ZeroGPU for about {seconds} s of GPU "
            f"for one object, in {one.calls} call{'s' if one.calls != 1 else ''} of at most {math.ceil(one.largest)} s "
            f"(each further object adds about {math.ceil(more)} s), counted as {counted} s against the daily quota, "
            f"after the agent's run on the keyframe, whose model calls each ask for their own few seconds. {verdict}")


def gpu_note(info: ClipInfo) -> str:
    """``gpu_words`` on a ZeroGPU Space, else ``""`` (no GPU quota to tell of)."""
    return gpu_words(info) if on_zero_gpu() else ""
