"""ReVOS in its released layout (``tests/revos_layout.py`` writes one from the bundled photos): the samples, their
frames in order, the per-frame targets (union of the objects, None where none is there), and a clear refusal of
each kind of broken download."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from revos_layout import HEIGHT, WIDTH, object_mask, rle, write_revos

from sam3_agent.datasets.formats.revos import read_revos
from sam3_agent.errors import InputError
from sam3_agent.package_files import ASSETS_DIR


@pytest.fixture
def revos(tmp_path: Path) -> Path:
    return write_revos(tmp_path)


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data), encoding="utf-8")


def test_every_expression_of_the_valid_split_is_a_sample_in_file_order(revos):
    samples = read_revos(revos)
    assert [(s.id, s.video, s.expression_id, s.expression, s.type_id, s.anno_ids, s.obj_ids) for s in samples] == [
        ("astronaut-pan_0", "astronaut-pan", "0", "the flag", 0, ("1",), (0,)),
        ("astronaut-pan_1", "astronaut-pan", "1", "what would tell you which country sent the astronaut?", 1,
         ("1", "2"), (0, 1)),
        ("astronaut-pan_2", "astronaut-pan", "2", "the dog", 2, (), ()),
        ("demo/coffee-pan_0", "demo/coffee-pan", "0", "the cup", 0, ("3",), (0,)),  # spaces collapsed
        ("demo/coffee-pan_1", "demo/coffee-pan", "1", "what holds the drink?", 1, ("3",), (0,)),
    ]
    assert [s.attributes for s in samples] == [{"type": "referring"}, {"type": "reasoning"}, {"type": "type 2"},
                                               {"type": "referring"}, {"type": "reasoning"}]


def test_frames_are_the_listed_files_in_order(revos):
    flag, *_, cup = read_revos(revos)
    assert flag.frames == tuple(revos / "JPEGImages" / "astronaut-pan" / f"0000{k}.jpg" for k in range(3))
    assert flag.frame_names == ("00000", "00001", "00002")
    assert cup.frames == tuple(revos / "JPEGImages" / "demo" / "coffee-pan" / f"0000{k}.jpg" for k in range(2))
    with Image.open(flag.frames[2]) as frame:
        assert frame.size == (WIDTH, HEIGHT)
    assert (flag.truth.height, flag.truth.width) == (HEIGHT, WIDTH)


def test_the_fixture_frames_are_the_bundled_photos(revos):
    # real content: the first astronaut frame is the photo's top-left 160 x 120 (saved as JPEG: within a few levels)
    with Image.open(read_revos(revos)[0].frames[0]) as frame, Image.open(ASSETS_DIR / "astronaut.jpg") as photo:
        ours = np.asarray(frame.convert("RGB"), dtype=np.int16)
        theirs = np.asarray(photo.convert("RGB").crop((0, 0, WIDTH, HEIGHT)), dtype=np.int16)
    assert np.abs(ours - theirs).mean() < 4


def test_the_target_is_the_object_on_each_frame(revos):
    flag = read_revos(revos)[0]
    for k in range(3):
        mask = flag.truth.mask(k)
        assert mask.dtype == bool and mask.shape == (HEIGHT, WIDTH)
        ys, xs = np.nonzero(mask)
        # photo rows 10..59, cols 20..69, the window 8 px further right on each frame
        assert (mask.sum(), ys.min(), ys.max(), xs.min(), xs.max()) == (2500, 10, 59, 20 - 8 * k, 69 - 8 * k)


def test_the_target_of_several_objects_is_their_union_and_none_where_no_object_is(revos):
    samples = {s.id: s for s in read_revos(revos)}
    both = samples["astronaut-pan_1"]
    assert np.array_equal(both.truth.mask(0), object_mask(1, 0))  # object 2 is absent (null) on frame 0
    assert both.truth.mask(1).sum() == 2500 + 1200
    assert np.array_equal(both.truth.mask(2), object_mask(1, 2) | object_mask(2, 2))
    nothing = samples["astronaut-pan_2"]
    assert [nothing.truth.mask(k) for k in range(3)] == [None, None, None]
    assert (nothing.truth.height, nothing.truth.width) == (HEIGHT, WIDTH)  # from the first frame's header


def test_objects_named_by_several_expressions_are_kept_once(revos):
    samples = {s.id: s for s in read_revos(revos)}
    assert samples["demo/coffee-pan_0"].truth.objects[0] is samples["demo/coffee-pan_1"].truth.objects[0]


def test_only_the_split_s_objects_are_read(revos):
    # anno 9 (train only) has a broken RLE: the valid split reads without it, the train split names it
    assert len(read_revos(revos, "valid")) == 5
    with pytest.raises(InputError, match=r"mask_dict.json, anno_id 9 \(video 'astronaut-pan'\), frame 1 \(00001\)"):
        read_revos(revos, "train")


# ---------------------------------------------------------------- a broken download


def test_a_missing_folder_or_unknown_split_is_refused(tmp_path, revos):
    with pytest.raises(InputError, match="is not a folder: give the ReVOS folder"):
        read_revos(tmp_path / "nowhere")
    with pytest.raises(InputError, match="ReVOS has no split 'test'; use one of: valid, train, train_sub"):
        read_revos(revos, "test")


def test_a_missing_expressions_file_names_those_found(revos):
    (revos / "meta_expressions_valid_.json").unlink()
    with pytest.raises(InputError, match=r"meta_expressions_valid_.json is missing: .*found: "
                                         r"meta_expressions_train_.json"):
        read_revos(revos)


def test_a_missing_or_truncated_mask_dict_is_refused(revos):
    path = revos / "mask_dict.json"
    path.write_text(path.read_text(encoding="utf-8")[:-10], encoding="utf-8")
    with pytest.raises(InputError, match="mask_dict.json could not be read as JSON .*is the download complete"):
        read_revos(revos)
    path.unlink()
    with pytest.raises(InputError, match="mask_dict.json is missing: the ground-truth masks"):
        read_revos(revos)


def test_missing_frames_are_listed(revos):
    (revos / "JPEGImages" / "astronaut-pan" / "00001.jpg").unlink()
    (revos / "JPEGImages" / "astronaut-pan" / "00002.jpg").unlink()
    with pytest.raises(InputError, match="astronaut-pan lacks 2 of the 3 frames the expressions file lists: "
                                         "00001.jpg, 00002.jpg"):
        read_revos(revos)


def test_a_missing_video_folder_is_named(revos):
    for frame in (revos / "JPEGImages" / "demo" / "coffee-pan").iterdir():
        frame.unlink()
    (revos / "JPEGImages" / "demo" / "coffee-pan").rmdir()
    with pytest.raises(InputError, match="coffee-pan is missing: the frames of video 'demo/coffee-pan'"):
        read_revos(revos)


def test_an_anno_id_missing_from_the_mask_dict_is_named(revos):
    edit_json(revos / "mask_dict.json", lambda d: d.pop("2"))
    with pytest.raises(InputError, match="video 'astronaut-pan', expression '1' names anno_id 2, which "
                                         "mask_dict.json lacks"):
        read_revos(revos)


def test_an_object_with_the_wrong_number_of_frames_is_refused(revos):
    edit_json(revos / "mask_dict.json", lambda d: d["3"].append(None))
    with pytest.raises(InputError, match=r"anno_id 3 \(video 'demo/coffee-pan'\) has 3 frame entries but the video "
                                         r"has 2 frames"):
        read_revos(revos)


def test_an_rle_of_another_size_is_refused(revos):
    def swap(d):
        d["1"][2] = rle(np.zeros((WIDTH, HEIGHT), dtype=bool))  # transposed
    edit_json(revos / "mask_dict.json", swap)
    with pytest.raises(InputError, match=r"anno_id 1 \(video 'astronaut-pan'\), frame 2 \(00002\): size \[160, 120\] "
                                         r"differs from the expected \[120, 160\]"):
        read_revos(revos)


def test_a_malformed_rle_is_refused(revos):
    def corrupt(d):
        d["3"][0]["counts"] = "not RLE at all ~~~"
    edit_json(revos / "mask_dict.json", corrupt)
    with pytest.raises(InputError, match=r"anno_id 3 \(video 'demo/coffee-pan'\), frame 0 \(00000\): 'counts' has a "
                                         "character outside the COCO RLE alphabet"):
        read_revos(revos)


def test_a_video_name_that_leaves_the_frames_folder_is_refused(revos):
    def escape(d):
        d["videos"]["../../etc"] = d["videos"].pop("astronaut-pan")
    edit_json(revos / "meta_expressions_valid_.json", escape)
    with pytest.raises(InputError, match=r"the video name '../../etc' is not a name inside JPEGImages/"):
        read_revos(revos)


def test_a_malformed_expression_is_named(revos):
    def no_text(d):
        d["videos"]["demo/coffee-pan"]["expressions"]["1"]["exp"] = "  "
    edit_json(revos / "meta_expressions_valid_.json", no_text)
    with pytest.raises(InputError, match=r"video 'demo/coffee-pan', expression '1' needs an \"exp\" text"):
        read_revos(revos)


def test_a_malformed_type_or_object_list_is_named(revos):
    meta = revos / "meta_expressions_valid_.json"
    edit_json(meta, lambda d: d["videos"]["astronaut-pan"]["expressions"]["0"].update(type_id="reasoning"))
    with pytest.raises(InputError, match=r"expression '0': \"type_id\" must be an integer"):
        read_revos(revos)
    edit_json(meta, lambda d: d["videos"]["astronaut-pan"]["expressions"]["0"].update(type_id=0, anno_id=7))
    with pytest.raises(InputError, match=r"expression '0': \"anno_id\" must be a list of ids"):
        read_revos(revos)


def test_an_object_of_another_video_is_refused(revos):
    edit_json(revos / "meta_expressions_valid_.json",
              lambda d: d["videos"]["demo/coffee-pan"]["expressions"]["0"].update(anno_id=[1]))
    with pytest.raises(InputError, match="names anno_id 1, an object of video 'astronaut-pan'"):
        read_revos(revos)
