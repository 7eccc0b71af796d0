"""Every way a video file can be wrong gets its own message, in words a person can act on, never a traceback; caps
are checked on what the file declares before any packet is read or frame decoded."""

from __future__ import annotations

import os
from pathlib import Path

import av
import numpy as np
import pytest
from video_clip_files import REAL_CLIP, bar_frames, write_video

from sam3_agent.errors import InputError
from sam3_agent.package_files import ASSETS_DIR
from sam3_agent.video import clip as clip_module
from sam3_agent.video.clip import ClipCaps, open_clip
from sam3_agent.video.video_file import VideoDecoder


def refusal(source, caps: ClipCaps | None = None, **options) -> str:
    with pytest.raises(InputError) as caught:
        open_clip(source, caps or ClipCaps(), **options)
    return str(caught.value)


@pytest.fixture
def no_decoding(monkeypatch):
    """Opening fails the test if it reads a packet or decodes a frame (the declared caps come first)."""
    def boom(*args, **kwargs):
        raise AssertionError("a packet was read or a frame decoded before the caps were checked")

    monkeypatch.setattr(clip_module, "index_packets", boom)
    monkeypatch.setattr(VideoDecoder, "first_frame", boom)


def test_a_missing_file(tmp_path):
    assert refusal(tmp_path / "gone.mp4") == "clip not found: 'gone.mp4'; check the path"


def test_a_url():
    assert refusal("https://example.com/clip.mp4") == (
        "'clip.mp4' is a URL; clips are read from files only: download it first and give its path")


def test_a_pipe(tmp_path):
    os.mkfifo(tmp_path / "live.mp4")
    assert refusal(tmp_path / "live.mp4") == (
        "'live.mp4' is not a regular file (a pipe, socket or device); save the clip to a file")


def test_an_empty_file(tmp_path):
    (tmp_path / "empty.mp4").write_bytes(b"")
    assert refusal(tmp_path / "empty.mp4") == "'empty.mp4' is empty (0 bytes); copy or export the clip again"


def test_a_text_file(tmp_path):
    (tmp_path / "notes.txt").write_text("hello, this is not a video\n")
    assert refusal(tmp_path / "notes.txt") == (
        "'notes.txt' is not a video this app reads; give an MP4, MOV, WebM, MKV or AVI file")


def test_a_photo():
    assert refusal(ASSETS_DIR / "coffee.jpg") == (
        "'coffee.jpg' is a photo (JPEG), not a video: give it as an image, or give the frames of a clip as a folder "
        "or a .zip of images")


@pytest.mark.parametrize("script", [
    "ffconcat version 1.0\nfile {target}\n",  # FFmpeg's concat demuxer would read another file
    "#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:2,\nfile://{target}\n#EXT-X-ENDLIST\n",  # a playlist, likewise
])
def test_a_script_that_names_other_files_is_not_followed(tmp_path, script):
    (tmp_path / "playlist.mp4").write_text(script.format(target=REAL_CLIP))
    assert refusal(tmp_path / "playlist.mp4") == (
        "'playlist.mp4' is not a video this app reads; give an MP4, MOV, WebM, MKV or AVI file")


def test_the_real_clip_cut_in_half_is_cut_short(tmp_path):
    data = REAL_CLIP.read_bytes()
    (tmp_path / "half.mp4").write_bytes(data[: len(data) // 2])  # +faststart: the frame list is whole, data is not
    assert refusal(tmp_path / "half.mp4") == (
        "'half.mp4' is cut short (e.g. a download or copy that stopped early): it declares 50 frames but only 23 are "
        "in the file; copy or download it again")


def test_an_mp4_whose_end_is_missing(tmp_path):
    whole = write_video(tmp_path / "whole.mp4", bar_frames(30))  # no faststart: the frame list is at the end
    (tmp_path / "cut.mp4").write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    assert refusal(tmp_path / "cut.mp4") == (
        "'cut.mp4' begins as a video but cannot be read: it is damaged or incomplete (e.g. a download or copy cut "
        "short, or an MP4 recording that was never finished); copy or export it again")


def test_an_mkv_cut_short_is_told_by_its_declared_length(tmp_path):
    whole = write_video(tmp_path / "whole.mkv", bar_frames(60))
    (tmp_path / "cut.mkv").write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    message = refusal(tmp_path / "cut.mkv")
    assert message.startswith("'cut.mkv' is cut short (e.g. a download or copy that stopped early): it declares "
                              "2.4 s but holds only ")
    assert message.endswith("; copy or download it again")


def test_a_clip_with_no_frames(tmp_path):
    with av.open(str(tmp_path / "none.avi"), "w") as out:  # AVI keeps a video stream without frames
        stream = out.add_stream("mpeg4", rate=25)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        out.start_encoding()
    assert refusal(tmp_path / "none.avi") == (
        "'none.avi' holds no video frames (its video stream is empty); give a clip with frames")


def test_sound_without_pictures(tmp_path):
    with av.open(str(tmp_path / "song.m4a"), "w", format="mp4") as out:
        sound = out.add_stream("aac", rate=48000)
        for _ in range(10):
            chunk = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="flt", layout="mono")
            chunk.sample_rate = 48000
            out.mux(sound.encode(chunk))
        out.mux(sound.encode())
    assert refusal(tmp_path / "song.m4a") == (
        "'song.m4a' has no video stream (only sound or other data); give a clip with pictures")


def test_damaged_data_inside_is_told_at_the_frame_it_breaks(tmp_path):
    path = write_video(tmp_path / "frames.mov", bar_frames(10), codec="png", pix_fmt="rgb24")  # no concealment
    with av.open(str(path)) as container:
        where = [(packet.pos, packet.size) for packet in container.demux(video=0) if packet.size]
    data = bytearray(path.read_bytes())
    start, size = where[5]
    data[start + 20: start + size - 20] = bytes(size - 40)
    Path(tmp_path / "broken.mov").write_bytes(data)
    with open_clip(tmp_path / "broken.mov") as clip:
        assert clip.frame(4).size == (128, 48)
        with pytest.raises(InputError) as caught:
            clip.frame(5)
    assert str(caught.value) == ("'broken.mov' is damaged near frame 5: its data cannot be decoded (Invalid data "
                                 "found when processing input); export or re-encode the clip and try again")


def test_frames_declared_over_the_cap_before_anything_is_decoded(no_decoding):
    assert refusal(REAL_CLIP, ClipCaps(max_frames=10)) == (
        "'bigbuckbunny.mp4' declares 50 frames, more than the 10 a clip may have here; trim it to the part you need "
        "or keep fewer frames per second")


def test_a_length_declared_over_the_cap_before_anything_is_decoded(no_decoding):
    assert refusal(REAL_CLIP, ClipCaps(max_seconds=1.5)) == (
        "'bigbuckbunny.mp4' declares a length of 2.0 s, longer than the 1.5 s a clip may last here; trim it to the "
        "part you need")


def test_frames_declared_larger_than_the_cap_before_anything_is_decoded(no_decoding):
    assert refusal(REAL_CLIP, ClipCaps(max_pixels=480 * 270 - 1)) == (
        "'bigbuckbunny.mp4' declares frames of 480x270 = 129,600 pixels, above the 129,599 per frame accepted here; "
        "downscale it")


def test_a_file_over_the_byte_cap_before_it_is_opened(no_decoding, monkeypatch):
    monkeypatch.setattr(clip_module, "open_container", lambda *a: pytest.fail("the file was opened"))
    assert refusal(REAL_CLIP, ClipCaps(max_file_bytes=50_000)) == (
        "'bigbuckbunny.mp4' is 97 KB, larger than the 49 KB accepted here; trim it or save it with stronger "
        "compression")


def test_frames_counted_over_the_cap_when_none_are_declared(tmp_path, monkeypatch):
    """Matroska declares no frame count: the demux pass counts packets and stops at the first over the cap, before
    any frame is decoded."""
    path = write_video(tmp_path / "long.mkv", bar_frames(60))
    monkeypatch.setattr(VideoDecoder, "first_frame", lambda self: pytest.fail("a frame was decoded"))
    assert refusal(path, ClipCaps(max_frames=10)) == (
        "'long.mkv' has more than 10 frames, the most a clip may have here; trim it to the part you need or keep "
        "fewer frames per second")


def test_a_frame_rate_is_not_taken_for_a_video():
    assert refusal(REAL_CLIP, frame_rate=25) == (
        "'bigbuckbunny.mp4' is a video, which has its own timestamps: frame_rate is only for frames given as images")


@pytest.mark.parametrize(("caps", "words"), [
    ({"max_frames": 0}, "the clip cap max_frames must be a positive whole number, got 0"),
    ({"max_pixels": 1.5}, "the clip cap max_pixels must be a positive whole number, got 1.5"),
    ({"max_seconds": float("inf")}, "the clip cap max_seconds must be a positive number of seconds, got inf"),
])
def test_caps_that_are_not_positive_numbers_are_refused(caps, words):
    with pytest.raises(InputError) as caught:
        ClipCaps(**caps)
    assert str(caught.value) == words
