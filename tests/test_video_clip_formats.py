"""Video files as people have them, written here with PyAV: each container format (frames found by number, at random
and backward), a variable frame rate kept as timestamps, a sound track ignored, a display matrix applied (checked
against OpenCV, which turns frames by the same matrix), a single frame."""

from __future__ import annotations

import av
import cv2
import numpy as np
import pytest
from video_clip_files import bar_frames, bar_of, decoded_in_order, write_video

from sam3_agent.video.clip import open_clip
from sam3_agent.video.video_file import rotation_of, upright


def _random_order(count: int) -> list[int]:
    return [count - 1, count // 2, 0, count // 3, count - 2, 1, count // 2 + 1]


@pytest.mark.parametrize("suffix", [".mp4", ".mov", ".mkv", ".webm", ".avi"])
def test_each_container_gives_every_frame_by_its_number(tmp_path, suffix):
    path = write_video(tmp_path / f"bars{suffix}", bar_frames(30), options={"g": "8"})  # a keyframe every 8 frames
    with open_clip(path) as clip:
        assert (clip.info.frame_count, clip.info.width, clip.info.height, clip.info.fps) == (30, 128, 48, 25.0)
        assert clip.info.timestamps == tuple(i / 25 for i in range(30))
        assert [bar_of(image) for _, image in clip.frames(range(30))] == list(range(30))
        assert [bar_of(clip.frame(i)) for i in _random_order(30)] == _random_order(30)
        assert [(i, bar_of(image)) for i, image in clip.frames(range(29, -1, -1))] == [(i, i) for i in range(29, -1, -1)]


def test_reordered_frames_in_avi_are_counted_not_read_from_their_guessed_pts(tmp_path):
    """H.264 with B-frames in AVI: the container has no presentation times, and FFmpeg's guesses put decoded frames
    out of order (pts 1, 4, 3, 5...); frames are numbered by their place after the keyframe instead."""
    path = write_video(tmp_path / "reordered.avi", bar_frames(30), codec="libx264", options={"g": "10", "bf": "2"})
    with open_clip(path) as clip:
        assert [bar_of(image) for _, image in clip.frames(range(30))] == list(range(30))
        assert [bar_of(clip.frame(i)) for i in _random_order(30)] == _random_order(30)
        assert [bar_of(image) for _, image in clip.frames(range(29, -1, -1))] == list(range(29, -1, -1))


def test_b_frames_in_mp4_are_found_by_their_pts_after_a_seek(tmp_path):
    path = write_video(tmp_path / "reordered.mp4", bar_frames(40), options={"g": "12", "bf": "3"})
    reference = decoded_in_order(path)
    with open_clip(path, cache_frames=3) as clip:
        for i in [39, 13, 12, 11, 0, 25, 24, 38]:
            assert np.array_equal(np.asarray(clip.frame(i)), reference[i]), i
        assert clip._source.seeks > 1


def test_a_variable_frame_rate_is_kept_as_timestamps(tmp_path):
    pts_ms = [0, 40, 80, 200, 240, 600, 640, 1000]
    path = write_video(tmp_path / "vfr.mp4", bar_frames(len(pts_ms)), pts_ms=pts_ms)
    with open_clip(path) as clip:
        info = clip.info
        assert info.timestamps == tuple(ms / 1000 for ms in pts_ms)
        with av.open(str(path)) as container:  # fps is the nominal rate FFmpeg derives for the stream
            assert info.fps == float(container.streams.video[0].average_rate)
        assert [clip.index_at(t) for t in (0.1, 0.199, 0.2, 0.5, 0.61, 1.0)] == [2, 2, 3, 4, 5, 7]
        assert [bar_of(image) for _, image in clip.frames(range(len(pts_ms)))] == list(range(len(pts_ms)))


@pytest.mark.parametrize("suffix", [".mp4", ".webm"])
def test_a_sound_track_is_ignored(tmp_path, suffix):
    silent = write_video(tmp_path / f"silent{suffix}", bar_frames(20))
    sound = write_video(tmp_path / f"sound{suffix}", bar_frames(20), audio=True)
    with open_clip(silent) as a, open_clip(sound) as b:
        assert (b.info.frame_count, b.info.timestamps, b.info.fps) == (a.info.frame_count, a.info.timestamps, a.info.fps)
        assert [bar_of(image) for _, image in b.frames(range(20))] == list(range(20))


@pytest.mark.parametrize(("matrix_angle", "clockwise"), [(-90, 90), (90, 270), (180, 180), (0, 0)])
def test_the_display_matrix_turns_frames_upright_as_opencv_does(tmp_path, matrix_angle, clockwise):
    frames = bar_frames(6, width=64, height=32)
    for frame in frames:
        frame[:4, :, 2] = 255  # a blue top edge: tells a turn from a mirror
    path = write_video(tmp_path / "turned.mp4", frames, rotation=matrix_angle)
    capture = cv2.VideoCapture(str(path))  # CAP_PROP_ORIENTATION_AUTO is on by default
    assert capture.get(cv2.CAP_PROP_ORIENTATION_META) == clockwise
    theirs = [capture.read()[1][..., ::-1] for _ in range(6)]
    capture.release()
    with open_clip(path) as clip:
        info = clip.info
        assert info.rotation == clockwise
        assert (info.width, info.height) == ((32, 64) if clockwise in (90, 270) else (64, 32))
        for i in (0, 3, 5):
            ours = np.asarray(clip.frame(i)).astype(np.int16)
            assert ours.shape == theirs[i].shape and np.abs(ours - theirs[i]).mean() < 3.0


@pytest.mark.parametrize(("angle", "expected"), [(0, 0), (-90, 90), (90, 270), (-180, 180), (180, 180), (-88, 90)])
def test_rotation_of_reads_the_matrix_angle_clockwise(angle, expected):
    class Frame:  # PyAV's VideoFrame.rotation: the display matrix's counter-clockwise angle in [-180, 180]
        rotation = angle

    assert rotation_of(Frame()) == expected


def test_upright_turns_clockwise():
    from PIL import Image

    image = Image.fromarray(np.array([[[1, 1, 1], [2, 2, 2]]], np.uint8))  # 2 wide, 1 high: 1 left of 2
    assert np.asarray(upright(image, 90))[..., 0].tolist() == [[1], [2]]  # the left end goes to the top
    assert np.asarray(upright(image, 270))[..., 0].tolist() == [[2], [1]]
    assert np.asarray(upright(image, 180))[..., 0].tolist() == [[2, 1]]


def test_a_single_frame_video_is_a_clip_of_one_frame(tmp_path):
    path = write_video(tmp_path / "still.mp4", bar_frames(1))
    with open_clip(path) as clip:
        assert (clip.info.frame_count, clip.info.timestamps) == (1, (0.0,))
        assert [i for i, _ in clip.frames(range(1))] == [0] and clip.index_at(0.02) == 0
