"""Batch runs: per-item traces and records, dataset COCO / summary / manifest, resuming, Ctrl-C, failures."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from dataset_fixtures import ASSETS, KnownAgents
from pycocotools.coco import COCO

from sam3_agent.datasets.batch import files
from sam3_agent.datasets.batch.items import BatchItem, read_items
from sam3_agent.datasets.batch.layout import BatchLayout
from sam3_agent.datasets.batch.runner import STOP_REASON, run_batch
from sam3_agent.trace.io import load_trace

PHRASES = {"the cup": "cup", "the dog": None, "the flag": "flag", "the saucer": "saucer", "the stars": "flag"}
DETECTIONS = {"cup": [((200, 40, 420, 310), 0.9)], "flag": [((0, 0, 95, 340), 0.8)],
              "saucer": [((80, 60, 480, 380), 0.7)]}


def write_items(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.fixture
def items(tmp_path) -> list[BatchItem]:
    return read_items(write_items(tmp_path / "items.jsonl", [
        {"id": "cup", "image": str(ASSETS / "coffee.jpg"), "query": "the cup"},
        {"id": "dog", "image": str(ASSETS / "chelsea.jpg"), "query": "the dog"},
        {"id": "flag", "image": str(ASSETS / "astronaut.jpg"), "query": "the flag"},
        {"id": "lost", "image": "missing.jpg", "query": "the cup"},
    ]))


def batch(items, out, agents, **kw):
    layout = BatchLayout(out, items)
    layout.prepare()
    return layout, run_batch(items, layout, agents, **kw)


def test_batch_writes_a_trace_and_record_per_item(items, tmp_path):
    layout, result = batch(items, tmp_path / "out", KnownAgents(PHRASES, DETECTIONS))
    assert (result.ran, result.skipped, result.stopped) == (4, 0, False)
    cup = json.loads((tmp_path / "out/items/cup/item.json").read_text())
    keys = ("id", "query", "status", "reason", "rounds", "mistakes", "width", "height", "trace")
    assert {k: cup[k] for k in keys} == {
        "id": "cup", "query": "the cup", "status": "done", "reason": None, "rounds": 2, "mistakes": {},
        "width": 600, "height": 400, "trace": "trace.json"}
    assert [(m["bbox"], m["area"], m["score"]) for m in cup["masks"]] == [([200.0, 40.0, 220.0, 270.0], 59400,
                                                                            pytest.approx(0.9))]
    trace = load_trace(tmp_path / "out/items/cup")
    assert (trace.status, trace.query, trace.image_name, len(trace.final_masks)) == ("done", "the cup", "coffee.jpg", 1)
    # the item's trace keeps its photo as given (the JPEG's own bytes), not a re-encoded copy
    assert trace.image_file == (ASSETS / "coffee.jpg").read_bytes()
    assert [p.suffix for p in (tmp_path / "out/items/cup/images").iterdir()] == [".jpg"]
    dog = json.loads((tmp_path / "out/items/dog/item.json").read_text())
    assert (dog["status"], dog["rounds"], dog["masks"]) == ("no_mask", 1, [])
    lost = json.loads((tmp_path / "out/items/lost/item.json").read_text())
    assert (lost["status"], lost["trace"], lost["width"]) == ("failed", None, None)
    assert "image file not found" in lost["reason"] and "missing.jpg" in lost["reason"]


def test_dataset_coco_file_holds_every_answered_item(items, tmp_path):
    batch(items, tmp_path / "out", KnownAgents(PHRASES, DETECTIONS))
    coco = COCO(str(tmp_path / "out/coco.json"))
    assert [(i["id"], i["file_name"], i["width"], i["height"]) for i in coco.dataset["images"]] == [
        (1, str(ASSETS / "coffee.jpg"), 600, 400), (2, str(ASSETS / "chelsea.jpg"), 451, 300),
        (3, str(ASSETS / "astronaut.jpg"), 512, 512)]
    assert coco.dataset["categories"] == [{"id": 1, "name": "the cup"}, {"id": 2, "name": "the dog"},
                                          {"id": 3, "name": "the flag"}]
    annotations = coco.dataset["annotations"]
    assert [(a["id"], a["image_id"], a["category_id"], a["bbox"], a["area"]) for a in annotations] == [
        (1, 1, 1, [200.0, 40.0, 220.0, 270.0], 59400), (2, 3, 3, [0.0, 0.0, 95.0, 340.0], 32300)]
    assert coco.annToMask(annotations[0]).sum() == 59400


def test_summary_and_manifest(items, tmp_path):
    batch(items, tmp_path / "out", KnownAgents(PHRASES, DETECTIONS))
    summary = json.loads((tmp_path / "out/summary.json").read_text())
    assert summary["items"] == 4
    assert summary["statuses"] == {"done": 2, "failed": 1, "no_mask": 1}
    assert summary["rounds"] == {"total": 5, "mean": 1.25, "max": 2, "histogram": {"0": 1, "1": 1, "2": 2}}
    assert summary["mistakes"] == {}
    assert [u["id"] for u in summary["unanswered"]] == ["lost"]
    assert any("scripted" in note for note in summary["notes"])
    manifest = json.loads((tmp_path / "out/manifest.json").read_text())
    assert manifest["format"] == "sam3_agent.batch"
    assert [(e["id"], e["folder"], e["trace"], e["status"]) for e in manifest["items"]] == [
        ("cup", "items/cup", "items/cup/trace.json", "done"),
        ("dog", "items/dog", "items/dog/trace.json", "no_mask"),
        ("flag", "items/flag", "items/flag/trace.json", "done"),
        ("lost", "items/lost", None, "failed"),
    ]
    for entry in manifest["items"][:3]:  # every trace path opens
        assert load_trace(tmp_path / "out" / entry["trace"]).status == entry["status"]


def test_rerun_skips_finished_items_and_retries_failed_ones(items, tmp_path):
    batch(items, tmp_path / "out", KnownAgents(PHRASES, DETECTIONS))
    before = {i: (tmp_path / f"out/items/{i}/item.json").read_bytes() for i in ("cup", "dog", "flag")}
    again = KnownAgents(PHRASES, DETECTIONS)
    _, result = batch(items, tmp_path / "out", again)
    assert (result.ran, result.skipped) == (1, 3)
    assert again.created == 0  # the failed item failed again before any agent was needed
    assert {i: (tmp_path / f"out/items/{i}/item.json").read_bytes() for i in before} == before


def test_an_item_whose_query_changed_runs_again(items, tmp_path):
    batch(items[:1], tmp_path / "out", KnownAgents(PHRASES, DETECTIONS))
    changed = [BatchItem("cup", items[0].image, "the saucer", items[0].image_ref)]
    agents = KnownAgents(PHRASES, DETECTIONS)
    _, result = batch(changed, tmp_path / "out", agents)
    assert (result.ran, agents.created) == (1, 1)
    record = json.loads((tmp_path / "out/items/cup/item.json").read_text())
    assert (record["query"], record["masks"][0]["bbox"]) == ("the saucer", [80.0, 60.0, 400.0, 320.0])


def test_a_failing_item_is_recorded_and_the_batch_goes_on(items, tmp_path):
    agents = KnownAgents(PHRASES, DETECTIONS, failing=["flag"])
    _, result = batch(items, tmp_path / "out", agents)
    assert result.summary["statuses"] == {"done": 1, "failed": 2, "no_mask": 1}
    flag = json.loads((tmp_path / "out/items/flag/item.json").read_text())
    assert (flag["status"], flag["mistakes"], flag["trace"]) == ("failed", {"backend_error": 1}, "trace.json")
    assert "ran out of memory" in flag["reason"]
    assert load_trace(tmp_path / "out/items/flag").status == "failed"  # the failed run still left its trace


@pytest.fixture
def python_ctrl_c():
    """Ctrl-C handled as a plain Python process handles it (``KeyboardInterrupt`` in the main thread), whatever
    handler an earlier test in this process left behind; the previous handler is restored afterwards."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_cancels_the_item_in_flight_and_a_rerun_finishes_without_loss(tmp_path, python_ctrl_c):
    items = read_items(write_items(tmp_path / "items.jsonl", [
        {"id": f"item{n}", "image": str(ASSETS / "coffee.jpg"), "query": q}
        for n, q in enumerate(["the cup", "the saucer", "the cup", "the saucer", "the cup"], start=1)]))
    interrupted = KnownAgents(PHRASES, DETECTIONS, interrupt_at=3)
    _, result = batch(items, tmp_path / "out", interrupted)
    assert result.stopped and result.ran == 3
    statuses = json.loads((tmp_path / "out/manifest.json").read_text())["items"]
    assert [e["status"] for e in statuses] == ["done", "done", "cancelled", "pending", "pending"]
    cancelled = load_trace(tmp_path / "out/items/item3")
    assert (cancelled.status, cancelled.error) == ("cancelled", STOP_REASON)
    kept = {n: (tmp_path / f"out/items/item{n}/item.json").read_bytes() for n in (1, 2)}
    resumed = KnownAgents(PHRASES, DETECTIONS)
    _, result = batch(items, tmp_path / "out", resumed)
    assert (result.ran, result.skipped, resumed.created, result.stopped) == (3, 2, 3, False)
    assert result.summary["statuses"] == {"done": 5}
    assert {n: (tmp_path / f"out/items/item{n}/item.json").read_bytes() for n in (1, 2)} == kept


def test_several_items_in_flight_give_the_same_records(items, tmp_path):
    one = KnownAgents(PHRASES, DETECTIONS)
    batch(items, tmp_path / "one", one)
    many = KnownAgents(PHRASES, DETECTIONS, piece_delay=0.01)
    _, result = batch(items, tmp_path / "many", many, concurrency=3)
    assert many.most_in_flight == 3
    for item in ("cup", "dog", "flag", "lost"):
        a = json.loads((tmp_path / f"one/items/{item}/item.json").read_text())
        b = json.loads((tmp_path / f"many/items/{item}/item.json").read_text())
        a.pop("seconds"), b.pop("seconds")
        assert a == b
    assert (tmp_path / "one/coco.json").read_bytes() == (tmp_path / "many/coco.json").read_bytes()


def test_progress_bar_shows_counts_and_failures(items, tmp_path):
    import io

    stream = io.StringIO()
    batch(items, tmp_path / "out", KnownAgents(PHRASES, DETECTIONS), progress=stream)
    text = stream.getvalue()
    assert "4/4" in text and "done 2" in text and "failed 1" in text and "no_mask 1" in text
    assert "lost: failed: image file not found" in text


def test_dataset_files_are_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    path = tmp_path / "summary.json"
    files.write_json_atomic(path, {"version": 1})

    def failing_replace(source, target):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError):
        files.write_json_atomic(path, {"version": 2, "big": "x" * 10000})
    assert json.loads(path.read_text()) == {"version": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # no temporary file left behind


def test_concurrency_below_one_is_refused(items, tmp_path):
    from sam3_agent.errors import InputError

    with pytest.raises(InputError, match="concurrency must be at least 1"):
        batch(items, tmp_path / "out", KnownAgents(PHRASES, DETECTIONS), concurrency=0)


def test_an_unexpected_error_in_one_item_is_recorded_and_the_batch_goes_on(items, tmp_path):
    class Flaky(KnownAgents):
        def new_agent(self):
            agent = super().new_agent()
            if self.created == 1:
                raise RuntimeError("the factory broke")
            return agent

    _, result = batch(items, tmp_path / "out", Flaky(PHRASES, DETECTIONS))
    cup = json.loads((tmp_path / "out/items/cup/item.json").read_text())
    assert (cup["status"], cup["reason"]) == ("failed", "internal error (details in the log): the factory broke")
    assert result.summary["statuses"] == {"done": 1, "failed": 2, "no_mask": 1}


KILLED_WRITE = """
import os, sys
from sam3_agent.datasets.batch import files
os.replace = lambda *args: os._exit(9)  # killed between writing the temporary file and renaming it
files.write_json_atomic(sys.argv[1], {"half": "written"})
"""


def killed_write(path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", KILLED_WRITE, str(path)], cwd=Path(__file__).resolve().parent.parent,
                          timeout=60)
    assert done.returncode == 9


@pytest.mark.slow
def test_a_rerun_removes_the_temporary_files_of_writes_killed_midway(items, tmp_path):
    out = tmp_path / "out"
    layout = BatchLayout(out, items)
    layout.prepare()
    killed_write(layout.record_path(items[0]))
    killed_write(out / "summary.json")
    left = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.tmp"))
    assert [p.split(".")[1] for p in left] == ["summary", "item"] and len(left) == 2
    BatchLayout(out, items).prepare()
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == []


def test_a_rerun_removes_only_the_products_own_temporary_names(items, tmp_path):
    out = tmp_path / "out"
    BatchLayout(out, items).prepare()
    cup = out / "items" / "cup"
    cup.mkdir()
    own = [out / ".coco.json.ab_12xyz.tmp", out / ".manifest.json.0123abcd.tmp", cup / ".item.json.zzzzzzzz.tmp",
           cup / ".review.json.a1b2c3d4.tmp"]
    others = [out / ".notes.txt.abcdefgh.tmp", out / ".summary.json.tmp", out / "summary.json.abcdefgh.tmp",
              out / ".summary.json.abcdefghi.tmp", cup / ".trace.json.tmp-12-abcdef01", cup / ".photo.png.abcdefgh.tmp",
              out / "items" / ".item.json.abcdefgh.tmp", out / "mine.json"]
    for path in own + others:
        path.write_text("{}")
    BatchLayout(out, items).prepare()
    assert sorted(p for p in out.rglob("*") if p.is_file()) == sorted(others)
