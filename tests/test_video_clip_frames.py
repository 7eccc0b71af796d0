"""A clip given as image files: a folder, or a ``.zip`` as the app's visitors upload one. The frames are the real
clip's own (PNG, lossless), so each frame read is compared with the video's frame exactly; then every way a folder
or a ``.zip`` can be wrong, each with its message."""

from __future__ import annotations

import hashlib
import io
import stat
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from video_clip_files import REAL_CLIP, decoded_in_order

from sam3_agent.errors import InputError
from sam3_agent.package_files import ASSETS_DIR
from sam3_agent.video import frame_folder
from sam3_agent.video.clip import ClipCaps, open_clip
from sam3_agent.video.frame_folder import ZipFrames, natural_key

COUNT = 12  # frame1.png ... frame12.png: "frame2" must come before "frame10"


@pytest.fixture(scope="module")
def reference() -> list[np.ndarray]:
    return decoded_in_order(REAL_CLIP)[:COUNT]


@pytest.fixture(scope="module")
def folder(tmp_path_factory, reference) -> Path:
    path = tmp_path_factory.mktemp("clip") / "bunny"
    path.mkdir()
    for i, array in enumerate(reference):
        Image.fromarray(array).save(path / f"frame{i + 1}.png")
    return path


def _zip(path: Path, members: dict[str, bytes], **options) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data, **options)
    return path


def _frames_of(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir(), key=lambda p: natural_key(p.name))}


def refusal(source, caps: ClipCaps | None = None, **options) -> str:
    with pytest.raises(InputError) as caught:
        open_clip(source, caps or ClipCaps(), **options)
    return str(caught.value)


def test_natural_order_counts_digits_as_numbers():
    names = ["frame10.png", "Frame2.png", "frame1.png", "frame02.png", "a.png", "a1.png"]
    assert sorted(names, key=natural_key) == ["a.png", "a1.png", "frame1.png", "Frame2.png", "frame02.png",
                                              "frame10.png"]


def test_a_folder_of_frames_is_read_in_natural_order(folder, reference):
    order = [f"frame{i + 1}.png" for i in range(COUNT)]
    expected_hash = hashlib.sha256(b"".join((folder / name).read_bytes() for name in order)).hexdigest()
    with open_clip(folder) as clip:
        info = clip.info
        assert (info.kind, info.file_name, info.frame_count, info.width, info.height) == ("frames", "bunny", COUNT,
                                                                                          480, 270)
        assert (info.fps, info.rotation, info.timestamps) == (None, 0, tuple(float(i) for i in range(COUNT)))
        assert info.file_bytes == sum((folder / name).stat().st_size for name in order)
        assert info.sha256 == expected_hash
        assert all(np.array_equal(np.asarray(image), reference[i]) for i, image in clip.frames(range(COUNT)))
        assert [i for i, _ in clip.frames(range(COUNT - 1, -1, -1))] == list(range(COUNT - 1, -1, -1))
        assert np.array_equal(np.asarray(clip.frame(9)), reference[9])


def test_a_zip_of_the_folder_is_the_same_clip(folder, reference, tmp_path):
    path = _zip(tmp_path / "bunny.zip", _frames_of(folder))
    with open_clip(folder) as from_folder, open_clip(path) as clip:
        assert clip.info.sha256 == from_folder.info.sha256
        assert (clip.info.file_name, clip.info.file_bytes) == ("bunny.zip", path.stat().st_size)
        assert all(np.array_equal(np.asarray(image), reference[i]) for i, image in clip.frames(range(COUNT)))


def test_a_zip_made_on_a_mac_keeps_only_its_frames(folder, reference, tmp_path):
    members = {f"bunny/{name}": data for name, data in _frames_of(folder).items()}
    members |= {"__MACOSX/bunny/._frame1.png": b"\0\5\26\7", "bunny/.DS_Store": b"\0", "bunny/notes.txt": b"hi",
                "bunny/": b""}
    with open_clip(_zip(tmp_path / "upload.zip", members)) as clip:
        assert clip.info.frame_count == COUNT
        assert np.array_equal(np.asarray(clip.frame(COUNT - 1)), reference[COUNT - 1])


def test_a_frame_rate_gives_frames_their_times(folder):
    with open_clip(folder, frame_rate=5) as clip:
        assert clip.info.fps == 5.0 and clip.info.timestamps[:3] == (0.0, 0.2, 0.4)
        assert clip.index_at(0.5) == 2


def test_exif_orientation_turns_each_frame_upright(tmp_path):
    photo = Image.open(ASSETS_DIR / "coffee.jpg").convert("RGB").resize((64, 48))
    exif = Image.Exif()
    exif[0x0112] = 6  # "turn 90 degrees clockwise to show"
    for i in range(3):
        photo.save(tmp_path / f"{i}.jpg", exif=exif.tobytes())
    with open_clip(tmp_path) as clip:
        assert (clip.info.width, clip.info.height) == (48, 64)
        assert clip.frame(2).size == (48, 64)


def test_one_image_is_a_clip_of_one_frame(folder, tmp_path):
    with open_clip(_zip(tmp_path / "one.zip", {"frame1.png": (folder / "frame1.png").read_bytes()})) as clip:
        assert clip.info.frame_count == 1 and clip.frame(0).size == (480, 270)


def test_frames_of_mixed_sizes_are_refused_before_any_is_decoded(folder, tmp_path, monkeypatch):
    members = _frames_of(folder)
    small = io.BytesIO()
    Image.open(folder / "frame7.png").resize((240, 135)).save(small, format="PNG")
    members["frame7.png"] = small.getvalue()
    monkeypatch.setattr(frame_folder, "load_image", lambda *a, **k: pytest.fail("a frame was decoded"))
    assert refusal(_zip(tmp_path / "mixed.zip", members)) == (
        "the frames of 'mixed.zip' differ in size: 'frame7.png' is 240x135 but the first frame 'frame1.png' is "
        "480x270; every frame of a clip must have one size, so resize them alike")


def test_a_file_named_as_an_image_that_is_not_one(folder, tmp_path):
    members = _frames_of(folder) | {"frame3.png": b"this is text, not a picture"}
    assert refusal(_zip(tmp_path / "odd.zip", members)) == (
        "frame 'frame3.png' of 'odd.zip' is not an image this app reads; frames must be JPEG, PNG, WebP, BMP, TIFF, "
        "AVIF or HEIC files")


def test_a_folder_without_images(tmp_path):
    (tmp_path / "notes.txt").write_text("no frames here")
    assert refusal(tmp_path) == (
        f"'{tmp_path.name}' holds no frames: no JPEG, PNG, WebP, BMP, TIFF, AVIF or HEIC files were found in it; "
        "give a folder or .zip of a clip's frames")


@pytest.mark.parametrize("name", ["../evil.png", "/etc/evil.png", "frames\\evil.png", "frames/./evil.png",
                                  "C:/evil.png"])
def test_a_zip_member_that_points_outside_refuses_the_whole_zip(folder, tmp_path, name):
    members = _frames_of(folder) | {name: (folder / "frame1.png").read_bytes()}
    assert refusal(_zip(tmp_path / "trick.zip", members)) == (
        f"'trick.zip' holds a file named {name!r}, which points outside its folder; it may be damaged or hostile, "
        "so nothing in it was read: zip the frames again")


def test_a_zip_member_that_is_a_link(folder, tmp_path):
    path = _zip(tmp_path / "link.zip", _frames_of(folder))
    with zipfile.ZipFile(path, "a") as archive:
        info = zipfile.ZipInfo("frame13.png")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(info, "/etc/passwd")
    assert refusal(path) == ("'link.zip' holds a link ('frame13.png') where a frame should be; zip the image files "
                             "themselves")


def test_an_encrypted_zip_member(folder, tmp_path):
    path = _zip(tmp_path / "locked.zip", _frames_of(folder))
    data = bytearray(path.read_bytes())
    # set the "encrypted" flag of the first member in the central directory (offset 8 of its record)
    record = data.find(b"PK\x01\x02")
    data[record + 8] |= 0x1
    (tmp_path / "locked.zip").write_bytes(data)
    assert refusal(tmp_path / "locked.zip") == (
        "'locked.zip' holds an encrypted file ('frame1.png'); zip the frames without a password")


def test_a_zip_holding_a_name_twice(folder, tmp_path):
    path = _zip(tmp_path / "twice.zip", _frames_of(folder))
    with pytest.warns(UserWarning), zipfile.ZipFile(path, "a") as archive:
        archive.writestr("frame1.png", (folder / "frame2.png").read_bytes())
    assert refusal(path) == "'twice.zip' holds 'frame1.png' twice; zip the frames again, each once"


def test_a_zip_with_frames_in_two_folders(folder, tmp_path):
    members = {f"left/{n}": d for n, d in _frames_of(folder).items()}
    members |= {f"right/{n}": d for n, d in _frames_of(folder).items()}
    assert refusal(_zip(tmp_path / "two.zip", members)) == (
        "'two.zip' holds frames in several folders (left/, right/); a clip's frames lie in one folder: zip one "
        "clip at a time")


def test_a_zip_bomb_is_refused_by_its_declared_size_before_any_inflating(tmp_path, monkeypatch):
    path = _zip(tmp_path / "bomb.zip", {"frame1.png": bytes(20 * 1024 * 1024)})  # 20 MB of zeros: 20 KB zipped
    assert path.stat().st_size < 100_000
    monkeypatch.setattr(ZipFrames, "read", lambda *a: pytest.fail("a member was inflated"))
    assert refusal(path, ClipCaps(max_file_bytes=5 * 1024 * 1024)) == (
        "the frames in 'bomb.zip' would take 20 MB once unpacked, more than the 5.0 MB accepted here; give fewer "
        "or smaller frames")


def test_a_member_that_inflates_past_its_declared_size(folder, tmp_path):
    data = (folder / "frame1.png").read_bytes()
    path = _zip(tmp_path / "liar.zip", {"frame1.png": data})
    raw = bytearray(path.read_bytes())
    central = raw.find(b"PK\x01\x02")
    raw[central + 24: central + 28] = (100).to_bytes(4, "little")  # the central record says 100 bytes
    path.write_bytes(raw)
    assert refusal(path) == ("'frame1.png' in 'liar.zip' is damaged (its compressed data is corrupt or cut short); "
                             "zip the frames again")


def test_too_many_frames_are_refused_before_any_is_read(folder, tmp_path, monkeypatch):
    path = _zip(tmp_path / "many.zip", _frames_of(folder))
    monkeypatch.setattr(ZipFrames, "read", lambda *a: pytest.fail("a member was read"))
    assert refusal(path, ClipCaps(max_frames=5)) == (
        "'many.zip' has 12 frames, more than the 5 a clip may have here; trim it to the part you need or keep fewer "
        "frames per second")


def test_too_long_at_its_frame_rate(folder):
    assert refusal(folder, ClipCaps(max_seconds=1.0), frame_rate=6) == (
        "'bunny' lasts 2.0 s, longer than the 1.0 s a clip may last here; trim it to the part you need")


def test_frames_larger_than_the_pixel_cap(folder):
    assert refusal(folder, ClipCaps(max_pixels=100_000)) == (
        "frame 'frame1.png' of 'bunny' is 480x270 = 129,600 pixels, above the 100,000 per frame accepted here; "
        "downscale it")


def test_frames_over_the_byte_cap_together(folder):
    total = sum(p.stat().st_size for p in folder.iterdir())
    message = refusal(folder, ClipCaps(max_file_bytes=total - 1))
    assert message.startswith("the frames in 'bunny' take ") and "together, more than the" in message


def test_a_zip_cut_short(folder, tmp_path):
    whole = _zip(tmp_path / "whole.zip", _frames_of(folder)).read_bytes()
    (tmp_path / "cut.zip").write_bytes(whole[: len(whole) // 2])
    assert refusal(tmp_path / "cut.zip") == (
        "'cut.zip' is damaged or incomplete (e.g. a download cut short): it begins as a .zip but its list of files "
        "cannot be read; zip the frames again")


def test_a_zip_without_images(tmp_path):
    assert refusal(_zip(tmp_path / "notes.zip", {"readme.txt": b"hello"})) == (
        "'notes.zip' holds no frames: no JPEG, PNG, WebP, BMP, TIFF, AVIF or HEIC files were found in it; give a "
        "folder or .zip of a clip's frames")
