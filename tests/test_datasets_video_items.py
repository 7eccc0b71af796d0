"""Video items of a batch: JSONL lines with "video" (keyframe by index or time) beside photos, folders of clips, and
every clip checked within its caps before anything runs, each refusal naming its item."""

from __future__ import annotations

import json
import shutil

import pytest

from sam3_agent.datasets.batch import clip_checks
from sam3_agent.datasets.batch.clip_checks import check_clips
from sam3_agent.datasets.batch.items import BatchItem, VideoItem, derived_id, read_items
from sam3_agent.errors import InputError
from sam3_agent.package_files import ASSETS_DIR
from sam3_agent.video.clip_caps import ClipCaps

CLIP = ASSETS_DIR / "bigbuckbunny.mp4"  # 50 frames, 480 x 270, 25 fps


def jsonl(tmp_path, *lines: dict | str):
    path = tmp_path / "items.jsonl"
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def test_video_lines_and_photo_lines_mix_in_one_file(tmp_path):
    path = jsonl(tmp_path, {"video": "clips/a.mp4", "query": " the bunny ", "id": "bunny", "keyframe": 12},
                 {"image": "photos/b.jpg", "query": "the cup"},
                 {"video": "/abs/frames", "query": "the bird", "keyframe_time": 1.5},
                 {"video": "clips/a.mp4", "query": "the bunny"})
    bunny, cup, bird, first = read_items(path)
    assert bunny == VideoItem("bunny", tmp_path / "clips/a.mp4", "the bunny", "clips/a.mp4", 12, None)
    assert isinstance(cup, BatchItem) and (cup.kind, cup.image_ref) == ("image", "photos/b.jpg")
    assert (bird.kind, str(bird.video), bird.keyframe, bird.keyframe_time) == ("video", "/abs/frames", None, 1.5)
    assert (first.keyframe, first.keyframe_time) == (None, None)  # the first frame


def test_a_video_items_derived_id_names_its_keyframe_only_when_one_is_given(tmp_path):
    plain, at_12, at_time = read_items(jsonl(tmp_path, {"video": "a.mp4", "query": "q"},
                                             {"video": "a.mp4", "query": "q", "keyframe": 12},
                                             {"video": "a.mp4", "query": "q", "keyframe_time": 0.5}))
    assert plain.id == derived_id("a.mp4", "q")  # the photo's rule: the id does not change for lines without one
    assert at_12.id == derived_id("a.mp4", "q", "\nkeyframe=12") and at_time.id == derived_id("a.mp4", "q",
                                                                                              "\nkeyframe_time=0.5")
    assert len({plain.id, at_12.id, at_time.id}) == 3 and plain.id.startswith("a-")


@pytest.mark.parametrize(
    "line, message",
    [
        ({"video": "a.mp4", "image": "a.jpg", "query": "x"}, 'give "image" (a photo) or "video" (a clip), not both'),
        ({"video": " ", "query": "x"}, '"video" must be the path of a clip'),
        ({"video": "a.mp4", "query": "x", "keyframe": 2, "keyframe_time": 1}, "not both"),
        ({"video": "a.mp4", "query": "x", "keyframe": -1}, '"keyframe" must be a frame index'),
        ({"video": "a.mp4", "query": "x", "keyframe": 1.5}, '"keyframe" must be a frame index'),
        ({"video": "a.mp4", "query": "x", "keyframe": True}, '"keyframe" must be a frame index'),
        ({"video": "a.mp4", "query": "x", "keyframe_time": -0.1}, '"keyframe_time" must be a number of seconds'),
        ({"video": "a.mp4", "query": "x", "keyframe_time": "1s"}, '"keyframe_time" must be a number of seconds'),
        ('{"video": "a.mp4", "query": "x", "keyframe_time": NaN}', '"keyframe_time" must be a number of seconds'),
        ({"image": "a.jpg", "query": "x", "keyframe": 3}, '"keyframe" is for a clip: give "video" instead'),
        ({"video": "a.mp4", "query": ""}, "the query is empty"),
    ],
)
def test_bad_video_lines_are_named(tmp_path, line, message):
    with pytest.raises(InputError) as error:
        read_items(jsonl(tmp_path, {"image": "ok.jpg", "query": "fine"}, line))
    assert str(error.value).startswith(f"{tmp_path / 'items.jsonl'}, line 2: ") and message in str(error.value)


def test_a_folder_gives_photos_and_clips_each_its_kind(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    for name in ("b.mp4", "a.jpg", "c.MOV", "notes.txt", "._d.mp4"):
        (folder / name).write_bytes(b"")
    (folder / "frames").mkdir()  # a sub-folder is never an item, even one of frames
    items = read_items(folder, "the dog")
    assert [(i.id, i.kind, i.query) for i in items] == [("a.jpg", "image", "the dog"), ("b.mp4", "video", "the dog"),
                                                       ("c.MOV", "video", "the dog")]
    assert items[1] == VideoItem("b.mp4", folder / "b.mp4", "the dog", "b.mp4")


def test_a_folder_without_photos_or_clips_says_what_it_looked_for(tmp_path):
    with pytest.raises(InputError, match=r"holds no image files .* and no video files \(.mp4, .m4v, .mov"):
        read_items(tmp_path, "x")


def test_clips_are_opened_within_their_caps_and_their_keyframes_found(tmp_path):
    items = read_items(jsonl(tmp_path, {"video": str(CLIP), "query": "q", "id": "by-index", "keyframe": 49},
                             {"video": str(CLIP), "query": "q", "id": "by-time", "keyframe_time": 0.5},
                             {"image": "a.jpg", "query": "q", "id": "photo"}))
    checked = check_clips(items)
    assert sorted(checked) == ["by-index", "by-time"]
    assert checked["by-index"].keyframe == 49 and checked["by-time"].keyframe == 12  # frame 12 shows at 0.48 s
    info = checked["by-time"].info
    assert (info.file_name, info.frame_count, info.width, info.height, info.fps) == ("bigbuckbunny.mp4", 50, 480, 270,
                                                                                     25.0)


def test_a_clip_several_items_share_is_opened_once(tmp_path, monkeypatch):
    opened = []
    real = clip_checks.open_clip
    monkeypatch.setattr(clip_checks, "open_clip", lambda path, caps: opened.append(path) or real(path, caps))
    items = read_items(jsonl(tmp_path, *({"video": str(CLIP), "query": f"query {n}"} for n in range(3))))
    assert len(check_clips(items)) == 3 and opened == [CLIP]


def test_a_clip_over_a_cap_or_a_keyframe_outside_it_is_refused_naming_the_item(tmp_path):
    items = read_items(jsonl(tmp_path, {"video": str(CLIP), "query": "q", "id": "late", "keyframe": 50}))
    with pytest.raises(InputError) as error:
        check_clips(items)
    assert str(error.value) == (f"item 'late' ({CLIP}): keyframe 50 is not in the clip: its frames are numbered 0 to "
                                "49; nothing was run")
    with pytest.raises(InputError, match=r"^item 'late' \(.*bigbuckbunny.mp4\): .*50 frames.* 10") as error:
        check_clips(items, ClipCaps(max_frames=10))


def test_every_refused_clip_is_listed_in_one_message(tmp_path):
    shutil.copy(CLIP, tmp_path / "copy.mp4")
    (tmp_path / "broken.mp4").write_bytes(CLIP.read_bytes()[:2000])
    items = read_items(jsonl(tmp_path, {"video": "missing.mp4", "query": "q", "id": "gone"},
                             {"video": "copy.mp4", "query": "q", "id": "fine"},
                             {"video": "broken.mp4", "query": "q", "id": "cut"},
                             {"video": "copy.mp4", "query": "q", "id": "late", "keyframe_time": 2.0}))
    with pytest.raises(InputError) as error:
        check_clips(items)
    lines = str(error.value).split("\n")
    assert lines[0] == "3 clips were refused; nothing was run: fix them and run again"
    assert [line.split(":")[0] for line in lines[1:]] == ["  item 'gone' (missing.mp4)", "  item 'cut' (broken.mp4)",
                                                          "  item 'late' (copy.mp4)"]
    assert "clip not found: 'missing.mp4'" in lines[1] and "2 s is outside the clip" in lines[3]
