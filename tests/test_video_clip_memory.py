"""Memory: frames are decoded as they are asked for and a walk over a clip, forward or backward, never holds more
decoded frames than the cache's bounds (counted by weak references to every frame a decoder makes); with the bound
planted away (a cache that never evicts) the same count grows with the clip, so the check can fail."""

from __future__ import annotations

import weakref

import pytest
from video_clip_files import REAL_CLIP, bar_cycle, bar_frames, bar_of, write_video

from sam3_agent.video import video_file
from sam3_agent.video.clip import open_clip
from sam3_agent.video.frame_cache import FrameCache

LONG = 300  # frames of the long clip


@pytest.fixture(scope="module")
def long_clip(tmp_path_factory):
    path = tmp_path_factory.mktemp("memory") / "long.mp4"
    return write_video(path, bar_frames(LONG, width=160, height=48), options={"g": "30", "preset": "ultrafast"})


class Alive:
    """How many of the frame images a video decoder handed out are still alive (a finalizer counts each down)."""

    def __init__(self) -> None:
        self.count = 0

    def track(self, image) -> None:
        self.count += 1
        weakref.finalize(image, self._gone)

    def _gone(self) -> None:
        self.count -= 1

    def __len__(self) -> int:
        return self.count


@pytest.fixture
def made(monkeypatch) -> Alive:
    alive = Alive()
    turn = video_file.upright

    def tracked(image, rotation):
        image = turn(image, rotation)
        alive.track(image)
        return image

    monkeypatch.setattr(video_file, "upright", tracked)
    return alive


def _peak_alive(clip, indices, alive) -> tuple[int, list[int]]:
    peak, seen = 0, []
    for index, image in clip.frames(indices):
        seen.append(bar_of(image) if clip.info.file_name == "long.mp4" else index)
        peak = max(peak, len(alive))
        assert clip._cache.bytes <= clip._cache.max_bytes
    return peak, seen


@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_a_walk_holds_no_more_frames_than_the_cache(long_clip, made, direction):
    indices = range(LONG) if direction == "forward" else range(LONG - 1, -1, -1)
    with open_clip(long_clip, cache_frames=8) as clip:
        peak, seen = _peak_alive(clip, indices, made)
    assert seen == [i % bar_cycle(160) for i in indices]
    assert peak == 8  # the cache full, never more


def test_the_byte_bound_holds_when_it_is_the_tighter_one(long_clip, made):
    frame_bytes = 160 * 48 * 3
    with open_clip(long_clip, cache_frames=100, cache_bytes=5 * frame_bytes) as clip:
        peak, _ = _peak_alive(clip, range(LONG - 1, -1, -1), made)
    assert peak == 5


def test_the_count_sees_a_cache_that_never_evicts(long_clip, made, monkeypatch):
    """The planted bug: with eviction gone, the frames alive grow with the walk, and the bound above would fail."""
    monkeypatch.setattr(FrameCache, "_evict", lambda self: None)
    with open_clip(long_clip, cache_frames=8) as clip:
        peak, _ = _peak_alive(clip, range(LONG), made)
    assert peak == LONG


def test_the_real_clip_walked_both_ways_stays_within_the_cache(made):
    with open_clip(REAL_CLIP, cache_frames=4) as clip:
        assert _peak_alive(clip, range(50), made)[0] == 4
        assert _peak_alive(clip, range(49, -1, -1), made)[0] == 4


def test_forward_is_one_sequential_decode_and_backward_decodes_each_frame_once(long_clip):
    with open_clip(long_clip, cache_frames=8) as clip:
        for _ in clip.frames(range(LONG)):
            pass
        assert (clip.decoded, clip._source.seeks) == (LONG - 1, 1)  # frame 0 came with the opening's rewind
    with open_clip(long_clip, cache_frames=8) as clip:
        for _ in clip.frames(range(LONG - 1, -1, -1)):
            pass
        assert clip.decoded == LONG  # each frame once, in chunks of 8 (and frame 0 again: the opening's copy left)
        assert clip._source.seeks <= 1 + LONG // 8 + 1  # at most one seek per chunk


def test_frames_are_decoded_only_as_the_iterator_is_pulled(long_clip):
    with open_clip(long_clip, cache_frames=8) as clip:
        forward = clip.frames(range(1, LONG))
        backward = clip.frames(range(LONG - 1, 0, -1))
        assert clip.decoded == 0
        next(forward)
        assert clip.decoded == 1
        next(backward)
        assert clip.decoded == 1 + 8  # one chunk that fits the cache
