"""Exports: COCO JSON that pycocotools reads back exactly, PNG masks, bundles that import to an equal state, the CLI."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest
from conftest import people_run, photo, rect_mask
from PIL import Image
from pycocotools.coco import COCO

from sam3_agent import load_trace
from sam3_agent.cli.main import main
from sam3_agent.correct.edits import EditState, bring_in_mask, delete_mask, erase, paint, relabel_mask, toggle_mask
from sam3_agent.correct.export import (
    bundle_bytes,
    coco_document,
    items_from_coco,
    load_bundle,
    write_coco,
    write_mask_pngs,
)
from sam3_agent.correct.strokes import stroke_from_view_mask
from sam3_agent.errors import InputError, TraceFormatError
from sam3_agent.mask_set import Masks
from sam3_agent.trace.io import save_trace, trace_to_zip_bytes
from sam3_agent.types import Trace

H, W = 512, 512


@pytest.fixture
def trace():
    """astronaut.jpg: segment 'person' (3 masks) -> examine rejects mask 3 -> select masks 1 and 2."""
    return people_run()


@pytest.fixture
def edited(trace) -> EditState:
    """Mask 1 erased in a corner, the rejected mask brought in and relabelled, a painted mask hidden."""
    s = EditState.from_trace(trace)
    s = erase(s, 0, rect_mask(H, W, 250, 0, 512, 100))
    s = bring_in_mask(s, trace, 1, 3)
    s = relabel_mask(s, 2, "third person")
    s = paint(s, None, rect_mask(H, W, 0, 300, 40, 340))
    return toggle_mask(s, 3)


def expected_masks() -> list[np.ndarray]:
    first = rect_mask(H, W, 200, 50, 300, 250)
    first[50:100, 250:300] = False
    return [first, rect_mask(H, W, 10, 10, 110, 210), rect_mask(H, W, 350, 300, 450, 500)]


def test_the_coco_file_loads_with_pycocotools_and_decodes_to_the_edited_masks(edited, tmp_path):
    path = write_coco(coco_document(edited.corrected_items(), W, H, file_name="astronaut.jpg"), tmp_path / "c.json")
    coco = COCO(str(path))
    assert coco.loadImgs([1]) == [{"id": 1, "file_name": "astronaut.jpg", "width": 512, "height": 512}]
    assert coco.loadCats(coco.getCatIds()) == [{"id": 1, "name": "the people"}, {"id": 2, "name": "third person"}]
    annotations = coco.loadAnns(coco.getAnnIds(imgIds=[1]))
    assert len(annotations) == 3
    for annotation, mask in zip(annotations, expected_masks()):
        assert np.array_equal(coco.annToMask(annotation).astype(bool), mask)
        assert annotation["area"] == int(mask.sum()) and annotation["iscrowd"] == 0
    assert [a["category_id"] for a in annotations] == [1, 1, 2]
    assert annotations[1]["bbox"] == [10.0, 10.0, 100.0, 200.0]
    assert [a["attributes"] for a in annotations] == [
        {"edited_by_hand": True, "origin": "agent", "verification": "confirmed"},
        {"edited_by_hand": False, "origin": "agent", "verification": "confirmed"},
        {"edited_by_hand": False, "origin": "round 1 mask 3"},
    ]
    # a score only where SAM 3's pixels are unchanged
    assert "score" not in annotations[0]
    assert [annotations[1]["score"], annotations[2]["score"]] == pytest.approx([0.7, 0.6])


def test_empty_masks_are_left_out_of_the_coco_file(trace):
    s = erase(EditState.from_trace(trace), 1, rect_mask(H, W, 0, 0, 512, 512))
    assert [it.is_empty for it in s.items] == [False, True]
    document = coco_document(s.items, W, H)
    assert [a["id"] for a in document["annotations"]] == [1]


def test_one_png_per_mask_full_size_0_or_255(edited, tmp_path):
    paths = write_mask_pngs(edited.corrected_items(), tmp_path / "pngs")
    assert [p.name for p in paths] == ["mask_001.png", "mask_002.png", "mask_003.png"]
    for path, mask in zip(paths, expected_masks()):
        with Image.open(path) as image:
            pixels = np.asarray(image)
        assert image.mode == "L" and pixels.shape == (512, 512)
        assert set(np.unique(pixels)) == {0, 255} and np.array_equal(pixels == 255, mask)


def test_a_bundle_imports_back_to_an_equal_state(edited, trace):
    data = bundle_bytes(trace, edited)
    names = set(zipfile.ZipFile(io.BytesIO(data)).namelist())
    assert {"bundle.json", "image.png", "query.txt", "agent_masks.json", "corrected_masks.json",
            "trace/trace.json"} <= names
    assert {n.split("/")[1] for n in names if n.startswith("trace/")} == {"trace.json", "images", "masks"}
    bundle = load_bundle(data)
    assert bundle.trace == edited.to_trace(trace)
    assert bundle.state.items == edited.items and bundle.state.applied == edited.applied
    assert bundle.state.original == edited.original
    agent = items_from_coco(json.loads(zipfile.ZipFile(io.BytesIO(data)).read("agent_masks.json")), W, H)
    assert [np.array_equal(a.mask, o.mask) for a, o in zip(agent, edited.original)] == [True, True]


def test_a_bundle_of_a_run_without_an_answer_holds_empty_coco_files():
    trace = Trace(query="the moon", image=photo("chelsea.jpg"), status="failed", error="VLM server down")
    bundle = load_bundle(bundle_bytes(trace))
    assert bundle.trace == trace and bundle.state.items == ()
    archive = zipfile.ZipFile(io.BytesIO(bundle_bytes(trace)))
    assert json.loads(archive.read("corrected_masks.json"))["annotations"] == []
    assert archive.read("query.txt") == b"the moon"


def rewrite(data: bytes, name: str, content: bytes) -> bytes:
    """The zip ``data`` with member ``name`` replaced by ``content``."""
    source = zipfile.ZipFile(io.BytesIO(data))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as out:
        for info in source.infolist():
            out.writestr(info.filename, content if info.filename == name else source.read(info.filename))
    return buffer.getvalue()


def test_a_bundle_with_masks_of_another_size_is_refused(edited, trace):
    data = bundle_bytes(trace, edited)
    small = coco_document([], 100, 80)
    with pytest.raises(TraceFormatError, match="corrected_masks.json is for a 100x80 image but the image is 512x512"):
        load_bundle(rewrite(data, "corrected_masks.json", json.dumps(small).encode()))


def test_a_bundle_with_a_malformed_or_tampered_coco_file_is_refused(edited, trace):
    data = bundle_bytes(trace, edited)
    with pytest.raises(TraceFormatError, match="agent_masks.json in the bundle is not valid JSON"):
        load_bundle(rewrite(data, "agent_masks.json", b"{not json"))
    tampered = json.loads(zipfile.ZipFile(io.BytesIO(data)).read("corrected_masks.json"))
    tampered["annotations"].pop()
    with pytest.raises(TraceFormatError, match="does not match the trace in the bundle"):
        load_bundle(rewrite(data, "corrected_masks.json", json.dumps(tampered).encode()))
    with pytest.raises(TraceFormatError, match="not a .zip trace or bundle"):
        load_bundle(b"plain text")


def test_malformed_coco_annotations_say_which_one(edited):
    document = coco_document(edited.corrected_items(), W, H)
    document["annotations"][1]["segmentation"]["counts"] = "bad"
    with pytest.raises(InputError, match="annotation 2 of the COCO file has malformed run lengths"):
        items_from_coco(document, W, H)
    with pytest.raises(InputError, match="not a COCO instance file"):
        items_from_coco({"images": []}, W, H)


def test_a_trace_loads_from_a_folder_a_zip_or_a_bundle(edited, trace, tmp_path):
    with_edits = edited.to_trace(trace)
    save_trace(with_edits, tmp_path / "run")
    (tmp_path / "t.zip").write_bytes(trace_to_zip_bytes(with_edits))
    (tmp_path / "b.zip").write_bytes(bundle_bytes(with_edits))
    for source in ("run", "run/trace.json", "t.zip", "b.zip"):
        assert load_trace(tmp_path / source) == with_edits


def test_a_paint_stroke_on_a_scaled_view_of_a_large_photo_lands_at_full_size(tmp_path):
    big = photo("rocket.jpg").resize((4000, 3000))
    agent_mask = np.zeros((1, 3000, 4000), dtype=bool)
    agent_mask[0, 1000:2000, 1000:1500] = True
    trace = Trace(query="the rocket", image=big, status="done",
                  final_masks=Masks(agent_mask, np.array([0.9], np.float32), np.array([[1000, 1000, 1500, 2000]],
                                                                                    np.float32)))
    view = np.zeros((750, 1000), dtype=bool)  # the UI shows the photo at 1000 x 750
    view[250:300, 375:400] = True
    state = paint(EditState.from_trace(trace), 0, stroke_from_view_mask(view, 3000, 4000))
    expected = agent_mask[0].copy()
    expected[1000:1200, 1500:1600] = True
    assert np.array_equal(state.items[0].mask, expected)
    coco = COCO(str(write_coco(coco_document(state.corrected_items(), 4000, 3000), tmp_path / "big.json")))
    decoded = coco.annToMask(coco.loadAnns([1])[0])
    assert decoded.shape == (3000, 4000) and np.array_equal(decoded.astype(bool), expected)
    with Image.open(write_mask_pngs(state.corrected_items(), tmp_path / "png")[0]) as image:
        assert image.size == (4000, 3000)


# ------------------------------------------------------------------ CLI


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_export_writes_coco_pngs_and_a_bundle(edited, trace, tmp_path, capsys):
    save_trace(delete_mask(edited, 1).to_trace(trace), tmp_path / "run")
    out = tmp_path / "out"
    code, stdout, stderr = run_cli(["export", str(tmp_path / "run"), "--coco", str(out / "masks.json"),
                                    "--png-dir", str(out / "png"), "--bundle", str(out / "bundle.zip")], capsys)
    assert code == 0, stderr
    assert "2 corrected mask(s) (6 edit(s) on the agent's 2)" in stdout
    coco = COCO(str(out / "masks.json"))
    masks = [coco.annToMask(a).astype(bool) for a in coco.loadAnns(coco.getAnnIds())]
    expected = expected_masks()
    assert len(masks) == 2 and np.array_equal(masks[0], expected[0]) and np.array_equal(masks[1], expected[2])
    assert sorted(p.name for p in (out / "png").iterdir()) == ["mask_001.png", "mask_002.png"]
    bundle = load_bundle((out / "bundle.zip").read_bytes())
    assert len(bundle.trace.edits) == 6
    # the bundle is itself a valid input, giving the same COCO file
    code, _, stderr = run_cli(["export", str(out / "bundle.zip"), "--coco", str(out / "again.json")], capsys)
    assert code == 0, stderr
    assert json.loads((out / "again.json").read_text()) == json.loads((out / "masks.json").read_text())


def test_cli_export_of_malformed_input_exits_2_with_one_line(tmp_path, capsys):
    (tmp_path / "trace.json").write_text("{not json")
    code, stdout, stderr = run_cli(["export", str(tmp_path), "--coco", str(tmp_path / "o.json")], capsys)
    assert code == 2 and stderr.count("\n") == 1 and stderr.startswith("error: ")
    assert "trace.json in the trace folder is not valid JSON" in stderr
    assert not (tmp_path / "o.json").exists()
    code, _, stderr = run_cli(["export", str(tmp_path / "missing"), "--coco", str(tmp_path / "o.json")], capsys)
    assert code == 2 and stderr.count("\n") == 1 and "does not exist" in stderr
    code, _, stderr = run_cli(["export", str(tmp_path)], capsys)
    assert code == 2 and "nothing to write" in stderr


@pytest.mark.parametrize("flag", ["--coco", "--coco-polygons", "--yolo", "--png-dir", "--bundle"])
@pytest.mark.parametrize("where", ["under_a_file", "a_directory"])
def test_cli_export_to_an_unwritable_path_names_the_flag_and_path(edited, trace, tmp_path, capsys, flag, where):
    save_trace(edited.to_trace(trace), tmp_path / "run")
    (tmp_path / "plain.txt").write_text("x")
    if where == "under_a_file":
        target = tmp_path / "plain.txt" / "out"
    elif flag in ("--png-dir", "--yolo"):
        target = tmp_path / "plain.txt"  # a file where a folder is wanted
    else:
        target = tmp_path / "run"  # a folder where a file is wanted
    code, _, stderr = run_cli(["export", str(tmp_path / "run"), flag, str(target)], capsys)
    assert code == 2 and stderr.count("\n") == 1
    assert stderr.startswith(f"error: cannot write {flag} {target}: ") and "Errno" not in stderr
