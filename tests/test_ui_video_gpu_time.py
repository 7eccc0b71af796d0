"""What the Video tab tells a ZeroGPU Space's visitor a clip asks for, before Run: the tracker's own GPU calls added
up (``models.gpu_calls``: one call per chunk of frames, each asking for its frames), what ZeroGPU counts of it (x1.5 on
the half card) and whose daily time that fits."""

from __future__ import annotations

from sam3_agent.ui.video.gpu_time import gpu_note, gpu_words, tracking_ask
from sam3_agent.video.clip_info import ClipInfo


def _clip(seconds: float, width: int = 1920, height: int = 1080, fps: float = 25.0) -> ClipInfo:
    count = max(1, round(seconds * fps))
    return ClipInfo(file_name="c.mp4", file_bytes=1, sha256=None, kind="video", frame_count=count, width=width,
                    height=height, fps=fps, timestamps=tuple(i / fps for i in range(count)), rotation=0)


def test_a_10_s_1080p_clip_asks_for_its_calls_and_fits_a_free_account():
    ask = tracking_ask(_clip(10))
    assert (round(ask.seconds, 2), ask.calls, round(ask.largest, 2)) == (127.85, 4, 40.1)
    assert gpu_words(_clip(10)) == (
        "On this Space, tracking this clip (250 frames) asks ZeroGPU for about 128 s of GPU for one object, in 4 calls "
        "of at most 41 s (each further object adds about 16 s), counted as 192 s against the daily quota, after the "
        "agent's run on the keyframe, whose model calls each ask for their own few seconds. That fits the daily GPU "
        "time of a free Hugging Face account (5 min).")


def test_a_60_s_1080p_clip_needs_a_pro_account():
    ask = tracking_ask(_clip(60))
    assert (round(ask.seconds, 2), ask.calls) == (715.35, 19)
    assert gpu_words(_clip(60)).endswith("That fits the daily GPU time of a PRO account (40 min).")


def test_the_bundled_clip_fits_a_visitor_without_an_account():
    assert gpu_words(_clip(2, 480, 270)).endswith(
        "That fits the daily GPU time of a visitor who is not logged in (2 min).")


def test_a_clip_beyond_every_quota_is_told_so():
    assert gpu_words(_clip(150)).endswith(
        "That is more than any account's daily GPU time: trim the clip, or run the app on your own GPU.")


def test_a_single_frame_asks_for_no_tracking_and_no_note_off_zerogpu():
    assert gpu_words(_clip(0.04)).startswith("This clip has one frame")
    assert gpu_note(_clip(10)) == ""  # not on a ZeroGPU Space
