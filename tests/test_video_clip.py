"""The bundled real clip through ``open_clip``: its exact facts, its frames (checked against a sequential PyAV decode
and against OpenCV, an independent reader), times, the API's edges, and its record's JSON."""

from __future__ import annotations

import hashlib
import json
import threading

import cv2
import numpy as np
import pytest
from video_clip_files import REAL_CLIP, decoded_in_order

from sam3_agent.errors import InputError, TraceFormatError
from sam3_agent.video.clip import DEFAULT_CLIP_CAPS, ClipCaps, ClipInfo, open_clip

# The excerpt's facts (sam3_agent/assets/LICENSE.md says how it was made)
FRAMES, WIDTH, HEIGHT, FPS = 50, 480, 270, 25.0
FILE_BYTES = 99_343
SHA256 = "a3b861e9db77880ba79f010df4c085f72b10fca4a21c66567c8e4073f4eaf291"


@pytest.fixture(scope="module")
def reference() -> list[np.ndarray]:
    return decoded_in_order(REAL_CLIP)


def test_the_bundled_excerpt_has_its_exact_facts():
    with open_clip(REAL_CLIP) as clip:
        info = clip.info
    assert (info.file_name, info.file_bytes, info.sha256, info.kind) == ("bigbuckbunny.mp4", FILE_BYTES, SHA256,
                                                                        "video")
    assert (info.frame_count, info.width, info.height, info.fps, info.rotation) == (FRAMES, WIDTH, HEIGHT, FPS, 0)
    assert len(info.timestamps) == FRAMES
    assert [info.timestamps[i] for i in (0, 1, 2, 25, 49)] == [0.0, 0.04, 0.08, 1.0, 1.96]
    assert info.duration == pytest.approx(2.0)


def test_the_sha256_is_the_files_own():
    assert hashlib.sha256(REAL_CLIP.read_bytes()).hexdigest() == SHA256


def test_every_frame_in_order_is_the_sequential_decode(reference):
    with open_clip(REAL_CLIP) as clip:
        got = [(i, np.asarray(image)) for i, image in clip.frames(range(FRAMES))]
        assert clip._source.seeks == 1  # the rewind to frame 0 at opening; the walk itself never seeks
    assert [i for i, _ in got] == list(range(FRAMES))
    assert all(image.shape == (HEIGHT, WIDTH, 3) and np.array_equal(image, reference[i]) for i, image in got)


def test_frames_read_at_random_and_backward_are_the_sequential_decode(reference):
    with open_clip(REAL_CLIP, cache_frames=4) as clip:
        for i in (37, 3, 49, 24, 25, 26, 0, 48, 12):
            assert np.array_equal(np.asarray(clip.frame(i)), reference[i]), i
        backward = list(clip.frames(range(49, -1, -1)))
    assert [i for i, _ in backward] == list(range(49, -1, -1))
    assert all(np.array_equal(np.asarray(image), reference[i]) for i, image in backward)


def test_frame_numbers_agree_with_opencv():
    """OpenCV (its own FFmpeg build and colour conversion) sees the same frame at each number: each of our frames is
    closer to OpenCV's frame of that number than to its neighbours'."""
    capture = cv2.VideoCapture(str(REAL_CLIP))
    theirs = []
    while True:
        ok, bgr = capture.read()
        if not ok:
            break
        theirs.append(bgr[..., ::-1].astype(np.int16))
    capture.release()
    assert len(theirs) == FRAMES
    with open_clip(REAL_CLIP) as clip:
        for i in (1, 10, 26, 40, 48):
            ours = np.asarray(clip.frame(i)).astype(np.int16)
            distance = {j: float(np.abs(ours - theirs[j]).mean()) for j in (i - 1, i, i + 1)}
            assert min(distance, key=distance.get) == i and distance[i] < 2.0, distance


def test_a_scrubber_and_a_walk_in_two_threads_each_get_their_frames(reference):
    """The app shows a scrubbed frame while tracking walks the clip: both share one decoder, which a lock guards."""
    walked: list[tuple[int, bool]] = []
    scrubbed: list[tuple[int, bool]] = []
    with open_clip(REAL_CLIP, cache_frames=2) as clip:
        def walk():
            walked.extend((i, np.array_equal(np.asarray(image), reference[i])) for i, image in clip.frames(range(50)))

        def scrub():
            for i in (40, 5, 33, 12, 49, 20, 1, 27) * 3:
                scrubbed.append((i, np.array_equal(np.asarray(clip.frame(i)), reference[i])))

        threads = [threading.Thread(target=walk), threading.Thread(target=scrub)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert walked == [(i, True) for i in range(50)]
    assert scrubbed == [(i, True) for i in (40, 5, 33, 12, 49, 20, 1, 27) * 3]


def test_index_at_gives_the_frame_shown_at_a_time():
    with open_clip(REAL_CLIP) as clip:
        assert [clip.index_at(t) for t in (0, 0.0399, 0.04, 0.05, 1.0, 1.96, 1.999)] == [0, 0, 1, 1, 25, 49, 49]


@pytest.mark.parametrize("seconds", [2.0, 7.5, -0.5])
def test_index_at_refuses_a_time_outside_the_clip(seconds):
    with open_clip(REAL_CLIP) as clip, pytest.raises(InputError) as caught:
        clip.index_at(seconds)
    assert str(caught.value) == (f"{seconds:g} s is outside the clip, which runs from 0 to 2 s (50 frames); pick a "
                                 "time in that range")


def test_index_at_refuses_a_time_that_is_not_a_number():
    with open_clip(REAL_CLIP) as clip, pytest.raises(InputError, match="must be a number of seconds, got nan"):
        clip.index_at(float("nan"))


@pytest.mark.parametrize("index", [50, -1])
def test_a_frame_outside_the_clip_is_refused(index):
    with open_clip(REAL_CLIP) as clip, pytest.raises(InputError) as caught:
        clip.frame(index)
    assert str(caught.value) == (f"frame {index} is outside 'bigbuckbunny.mp4', whose frames are numbered 0 to 49; "
                                 "pick one in that range")


def test_frames_refuses_a_step_other_than_one_and_an_end_outside_before_reading():
    with open_clip(REAL_CLIP) as clip:
        with pytest.raises(InputError, match="a range of step 1 or -1"):
            clip.frames(range(0, 10, 2))
        with pytest.raises(InputError, match="frame 50 is outside"):
            clip.frames(range(45, 51))
        assert list(clip.frames(range(3, 3))) == []
        assert clip.decoded == 0  # frame 0 came with the opening; nothing else was read


def test_a_closed_clip_says_so_and_a_with_block_closes_it():
    with open_clip(REAL_CLIP) as clip:
        clip.frame(5)
    with pytest.raises(RuntimeError, match="the clip was closed; open it again"):
        clip.frame(5)
    clip.close()  # again: nothing happens


def test_the_cache_serves_a_frame_again_without_decoding():
    with open_clip(REAL_CLIP) as clip:
        first = clip.frame(30)
        assert clip.frame(30) is first and clip.decoded == 1


def test_a_given_name_replaces_the_file_name():
    with open_clip(REAL_CLIP, name="upload.mp4") as clip:
        assert clip.info.file_name == "upload.mp4"
    with pytest.raises(InputError, match="^'upload.mp4' declares 50 frames"):
        open_clip(REAL_CLIP, ClipCaps(max_frames=10), name="upload.mp4")


def test_clip_info_round_trips_through_json():
    with open_clip(REAL_CLIP) as clip:
        info = clip.info
    again = ClipInfo.from_json(json.loads(json.dumps(info.to_json())))
    assert again == info and again.index_at(1.0) == 25


@pytest.mark.parametrize(("change", "words"), [
    ({"timestamps": [0.0, 0.04]}, "there is not one timestamp per frame"),
    ({"rotation": 45}, "rotation is not 0, 90, 180 or 270"),
    ({"kind": "film"}, "kind is not one of video, frames"),
    ({"frame_count": 0}, "frame_count is not a positive whole number"),
])
def test_a_malformed_clip_record_is_refused_in_words(change, words):
    with open_clip(REAL_CLIP) as clip:
        data = {**clip.info.to_json(), **change}
    with pytest.raises(TraceFormatError) as caught:
        ClipInfo.from_json(data)
    assert str(caught.value) == f"the clip's record is malformed: {words}"


def test_a_clip_record_without_a_field_is_refused():
    with pytest.raises(TraceFormatError, match="the clip's record lacks sha256, timestamps"):
        ClipInfo.from_json({"file_name": None, "file_bytes": 1, "kind": "video", "frame_count": 1, "width": 8,
                            "height": 8, "fps": None, "rotation": 0})


def test_the_default_caps_are_the_documented_ones():
    assert DEFAULT_CLIP_CAPS == ClipCaps(max_frames=3000, max_seconds=600.0, max_pixels=3840 * 2160,
                                         max_file_bytes=2 * 1024**3)
