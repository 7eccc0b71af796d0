"""Ground truth in each benchmark's published format: ReasonSeg JSON, RefCOCO refs pickle + instances, JSONL RLE."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from sam3_agent.datasets.formats.ground_truth import Polygon, PolygonTruth
from sam3_agent.datasets.formats.jsonl_gt import read_jsonl_gt
from sam3_agent.datasets.formats.reasonseg import read_reasonseg
from sam3_agent.datasets.formats.refcoco import load_refs, read_refcoco
from sam3_agent.errors import InputError
from sam3_agent.package_files import ASSETS_DIR

FIXTURES = Path(__file__).resolve().parent / "data" / "datasets"
ASSETS = ASSETS_DIR  # the photos the package ships


# ---------------------------------------------------------------- ReasonSeg


def test_reasonseg_fixture_samples():
    samples = read_reasonseg(FIXTURES / "reasonseg", images=ASSETS)
    assert [(s.id, s.query, s.attributes["query_type"]) for s in samples] == [
        ("astronaut_1", "the flag", "short"),
        ("astronaut_2", "the stars and stripes behind the astronaut", "short"),
        ("chelsea", "the dog lying next to the cat", "short"),
        ("coffee", "the cup that holds the espresso", "short"),
        ("rocket", "something that shows the launch has not happened yet", "long"),
    ]
    assert samples[0].image == ASSETS / "astronaut.jpg"


def test_reasonseg_rectangle_includes_its_outline():
    coffee = {s.id: s for s in read_reasonseg(FIXTURES / "reasonseg", images=ASSETS)}["coffee"]
    target, ignore = coffee.truth.masks(400, 600)
    # vertices x 175..410, y 20..300 filled with the outline: 236 x 281 pixels; the "flag" shape is skipped
    ys, xs = np.nonzero(target)
    assert (target.sum(), xs.min(), xs.max(), ys.min(), ys.max()) == (236 * 281, 175, 410, 20, 300)
    assert not ignore.any()


def test_reasonseg_l_shape_by_hand():
    flag = read_reasonseg(FIXTURES / "reasonseg", images=ASSETS)[0]
    target, _ = flag.truth.masks(512, 512)
    # rows 0..199: x 0..60 (61 px); rows 200..330: x 0..90 (91 px)
    assert target.sum() == 200 * 61 + 131 * 91
    assert target[199, 60] and not target[199, 61] and target[200, 90] and not target[331, 0]


def test_reasonseg_ignore_region_wins_where_it_lies_over_the_smaller_target():
    rocket = read_reasonseg(FIXTURES / "reasonseg", images=ASSETS)[-1]
    target, ignore = rocket.truth.masks(427, 640)
    # target x 305..340, y 125..400 (36 x 276 = 9936) is larger than the ignore region x 260..380, y 380..426
    # (121 x 47 = 5687), so it is drawn first and the ignore region covers its rows 380..400
    assert ignore.sum() == 121 * 47
    assert target.sum() == 36 * 255
    assert not (target & ignore).any()


def test_reasonseg_smaller_target_inside_ignore_is_kept():
    outer = Polygon(((0, 0), (9, 0), (9, 9), (0, 9)), ignore=True)
    truth = PolygonTruth((outer, Polygon(((2, 2), (4, 2), (4, 4), (2, 4)))))
    target, ignore = truth.masks(10, 10)
    assert target.sum() == 9 and ignore.sum() == 100 - 9


def test_reasonseg_reads_cp1252_files_and_a_single_text(tmp_path):
    (tmp_path / "a.json").write_bytes(json.dumps({"text": "caf\u00e9 table", "is_sentence": True, "shapes": []},
                                                 ensure_ascii=False).encode("cp1252"))
    (sample,) = read_reasonseg(tmp_path)
    assert (sample.id, sample.query, sample.attributes) == ("a", "café table", {"query_type": "long"})
    assert sample.image == tmp_path / "a.jpg"


@pytest.mark.parametrize(
    "document, message",
    [
        ({"shapes": []}, '"text" must be a query'),
        ({"text": ["x"], "shapes": [{"label": "target", "points": [[0, 0], [1, 1]]}]}, "shape 1 has 2 point"),
        ({"text": ["x"], "shapes": [{"label": "target", "points": "nope"}]}, "pairs"),
        ({"text": ["x"], "shapes": {}}, '"shapes" must be a list'),
    ],
)
def test_reasonseg_errors_name_the_file_and_shape(tmp_path, document, message):
    (tmp_path / "bad.json").write_text(json.dumps(document))
    with pytest.raises(InputError, match=message) as error:
        read_reasonseg(tmp_path)
    assert "bad.json" in str(error.value)


def test_reasonseg_folder_without_json(tmp_path):
    with pytest.raises(InputError, match="no .json annotation files"):
        read_reasonseg(tmp_path)


# ---------------------------------------------------------------- RefCOCO


def test_refcoco_pickle_is_plain_data():
    refs = load_refs(FIXTURES / "refcoco" / "refs(unc).p")
    assert [(r["ref_id"], r["ann_id"], r["split"], [s["sent_id"] for s in r["sentences"]]) for r in refs] == [
        (1, 10, "val", [100, 101]), (2, 11, "val", [102]), (3, 10, "testA", [103]),
    ]


def test_refcoco_val_split_samples_and_masks():
    samples = read_refcoco(FIXTURES / "refcoco", split="val", images=ASSETS)
    assert [(s.id, s.query, s.image.name, s.attributes) for s in samples] == [
        ("ref1_sent100", "the cup of coffee", "coffee.jpg", {"category": "cup"}),
        ("ref1_sent101", "white cup on a saucer", "coffee.jpg", {"category": "cup"}),
        ("ref2_sent102", "the rocket on the pad", "rocket.jpg", {"category": "airplane"}),
    ]
    cup, _ = samples[0].truth.masks(400, 600)
    ys, xs = np.nonzero(cup)  # pycocotools' polygon rasterisation: x 175..409, y 20..299
    assert (cup.sum(), xs.min(), xs.max(), ys.min(), ys.max()) == (235 * 280, 175, 409, 20, 299)
    rocket, ignore = samples[2].truth.masks(427, 640)
    assert rocket.sum() == 36 * 275 and rocket[125, 305] and rocket[399, 340] and not ignore.any()


def test_refcoco_split_choice_and_errors(tmp_path):
    assert [s.id for s in read_refcoco(FIXTURES / "refcoco", split="testA", images=ASSETS)] == ["ref3_sent103"]
    with pytest.raises(InputError, match="splits are: testA, val"):
        read_refcoco(FIXTURES / "refcoco", split="test", images=ASSETS)
    with pytest.raises(InputError, match=r"no refs\(google\).p; it has: unc"):
        read_refcoco(FIXTURES / "refcoco", split_by="google")


def test_refcoco_default_images_follow_the_refer_layout():
    sample = read_refcoco(FIXTURES / "refcoco")[0]
    assert sample.image == FIXTURES / "refcoco" / ".." / "images" / "mscoco" / "images" / "train2014" / "coffee.jpg"


def test_refcoco_annotation_for_another_image_size_is_refused():
    sample = read_refcoco(FIXTURES / "refcoco", images=ASSETS)[0]
    with pytest.raises(InputError, match="600x400 image but the image is 300x200"):
        sample.truth.masks(200, 300)


class _Boom:
    def __reduce__(self):
        import os

        return (os.system, ("echo pwned > /dev/null",))


def test_refcoco_pickle_naming_a_function_is_refused_not_run(tmp_path):
    (tmp_path / "refs(unc).p").write_bytes(pickle.dumps([{"ref_id": 1, "x": _Boom()}]))
    with pytest.raises(InputError, match="only plain data is accepted"):
        load_refs(tmp_path / "refs(unc).p")


# ---------------------------------------------------------------- JSONL with RLE


def test_jsonl_fixture_samples_and_masks():
    samples = read_jsonl_gt(FIXTURES / "gt.jsonl")
    assert [(s.id, s.query, s.image.resolve(), s.attributes) for s in samples] == [
        ("cup", "the cup", ASSETS / "coffee.jpg", {"kind": "object"}),
        ("no-spoon", "the spoon", ASSETS / "chelsea.jpg", {"kind": "absent"}),
        ("rocket", "the rocket", ASSETS / "rocket.jpg", {"kind": "object"}),
    ]
    cup, _ = samples[0].truth.masks(400, 600)
    assert cup.sum() == 235 * 280 and cup[20, 175] and cup[299, 409] and not cup[300, 409]
    nothing, _ = samples[1].truth.masks(300, 451)
    assert not nothing.any()
    rocket, ignore = samples[2].truth.masks(427, 640)
    assert (rocket.sum(), ignore.sum(), (rocket & ignore).sum()) == (36 * 275, 121 * 47, 36 * 20)


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"image": "a.jpg", "query": "x", "mask": {"size": [2, 2], "counts": "zz"}}', "not valid COCO RLE"),
        ('{"image": "a.jpg", "query": "x", "mask": 3}', "must be an RLE"),
        ('{"image": "a.jpg", "query": "x", "mask": {"size": [2, 2], "counts": [4]}, '
         '"ignore": {"size": [3, 3], "counts": [9]}}', "different sizes"),
        ('{"image": "a.jpg", "query": "x", "mask": null, "attributes": {"k": 1}}', "object of strings"),
        ('{"image": "a.jpg"}', '"query" must be a string'),
        ("not json", "not valid JSON"),
    ],
)
def test_jsonl_errors_name_the_line(tmp_path, line, message):
    path = tmp_path / "gt.jsonl"
    path.write_text('{"image": "ok.jpg", "query": "fine", "mask": null}\n' + line + "\n")
    with pytest.raises(InputError, match=message) as error:
        read_jsonl_gt(path)
    assert "line 2" in str(error.value)


def test_jsonl_ground_truth_of_another_size_is_refused():
    with pytest.raises(InputError, match="600x400 but the image is 640x427"):
        read_jsonl_gt(FIXTURES / "gt.jsonl")[0].truth.masks(427, 640)


def test_jsonl_ground_truth_names_every_bad_line_at_once(tmp_path):
    path = tmp_path / "gt.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join([
        '{"image": "a.jpg", "query": "x", "mask": 3}',
        '{"image": "b.jpg", "query": "y", "mask": null}',
        '{"image": "c.jpg", "query": "z", "mask": null, "attributes": {"k": 1}}',
    ]).encode())
    with pytest.raises(InputError) as error:
        read_jsonl_gt(path)
    assert str(error.value) == (f"{path} has 2 bad lines; nothing was run: fix them and run again\n"
                                '  line 1: "mask" must be an RLE, a list of RLEs or null\n'
                                '  line 3: "attributes" must be an object of strings')


def test_reasonseg_folder_copied_from_a_mac_skips_appledouble_files(tmp_path, caplog):
    (tmp_path / "a.json").write_text(json.dumps({"text": "the cup", "shapes": []}))
    (tmp_path / "._a.json").write_bytes(b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        ")  # AppleDouble header
    (tmp_path / "Thumbs.db").write_bytes(b"\xd0\xcf")
    with caplog.at_level("WARNING", logger="sam3_agent.datasets.batch.hidden_files"):
        samples = read_reasonseg(tmp_path)
    assert [(s.id, s.query) for s in samples] == [("a", "the cup")]
    assert caplog.messages == [f"skipped 1 hidden or system file(s) in {tmp_path} (._a.json): not part of the dataset"]


def test_reasonseg_reads_labelmes_declared_upright_size(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"text": "x", "shapes": [], "imageHeight": 40, "imageWidth": 20}))
    (tmp_path / "b.json").write_text(json.dumps({"text": "y", "shapes": [], "imageHeight": "40"}))
    a, b = read_reasonseg(tmp_path)
    assert (a.truth.declared_size, a.truth.frame, b.truth.declared_size) == ((40, 20), "upright", None)
