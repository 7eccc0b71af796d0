"""``python -m sam3_agent batch`` / ``eval`` end to end on the tiny models with a scripted VLM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dataset_fixtures import ASSETS, PHOTOS, QUERIES, KnownAgents, segment_and_select_script, twenty_items

from sam3_agent.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parent.parent  # the checkout

BACKEND_FLAGS = ("--preset", "--vlm-model", "--vlm-server", "--vlm-server-model", "--script", "--sam3-model",
                 "--tiny-vlm", "--device", "--max-rounds", "--score-threshold", "--min-pixels", "--max-pixels",
                 "--max-new-tokens", "--max-image-pixels", "--verify-batch-size", "--no-prefix-cache", "--verbose")


@pytest.fixture(scope="module")
def script_file(tmp_path_factory) -> Path:
    return segment_and_select_script(tmp_path_factory.mktemp("script"))


def subparser(name: str):
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command")
    return commands.choices[name]


def options(parser) -> dict[str, tuple]:
    return {flag: (a.dest, a.default, a.choices, a.type) for a in parser._actions for flag in a.option_strings}


def test_batch_and_eval_take_the_same_model_flags_as_run():
    run = options(subparser("run"))
    for name in ("batch", "eval"):
        theirs = options(subparser(name))
        assert {flag: theirs[flag] for flag in BACKEND_FLAGS} == {flag: run[flag] for flag in BACKEND_FLAGS}


def test_a_20_item_batch_interrupted_by_ctrl_c_resumes_without_loss(tmp_path, script_file, capsys):
    items, out = twenty_items(tmp_path), tmp_path / "out"
    argv = ["batch", "--preset", "tiny", "--script", str(script_file), "--input", str(items), "--out", str(out),
            "--no-progress"]
    process = subprocess.Popen([sys.executable, "-m", "sam3_agent", *argv], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while len(list(out.glob("items/*/item.json"))) < 3 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # waiting for the third item's record, as a user watching the folder would
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "stopped by the user; run the same command again to go on" in stderr
    manifest = json.loads((out / "manifest.json").read_text())
    finished = {e["id"] for e in manifest["items"] if e["status"] == "done"}
    assert 3 <= len(finished) < 20
    assert {e["status"] for e in manifest["items"]} <= {"done", "cancelled", "pending"}
    kept = {p: p.read_bytes() for p in out.glob("items/*/item.json") if p.parent.name in finished}

    code = main(argv)
    stdout = capsys.readouterr().out
    assert code == 0
    assert f"ran {20 - len(finished)}, skipped {len(finished)} already finished" in stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["statuses"] == {"done": 20} and summary["rounds"]["total"] == 40
    assert {p: p.read_bytes() for p in kept} == kept  # nothing finished before Ctrl-C ran again
    coco = json.loads((out / "coco.json").read_text())
    assert len(coco["images"]) == 20 and len(coco["annotations"]) == 20
    assert [c["name"] for c in coco["categories"]] == list(QUERIES)


def test_a_rerun_with_every_item_finished_loads_no_model(tmp_path, capsys, monkeypatch):
    from sam3_agent.datasets.batch.agents import BatchAgents
    from sam3_agent.datasets.batch.items import read_items
    from sam3_agent.datasets.batch.layout import BatchLayout
    from sam3_agent.datasets.batch.runner import run_batch

    path = tmp_path / "items.jsonl"
    path.write_text(f'{{"image": "{ASSETS / "coffee.jpg"}", "query": "the cup"}}\n'
                    f'{{"image": "{ASSETS / "chelsea.jpg"}", "query": "the dog"}}\n')
    items, out = read_items(path), tmp_path / "out"
    layout = BatchLayout(out, items)
    layout.prepare()
    first = run_batch(items, layout, KnownAgents({"the cup": "cup", "the dog": None},
                                                 {"cup": [((200, 40, 420, 310), 0.9)]}))
    assert (first.ran, first.summary["statuses"]) == (2, {"done": 1, "no_mask": 1})
    (out / "summary.json").unlink()

    def no_loading(*args, **kwargs):
        raise AssertionError("the models were loaded for a batch with nothing left to run")

    monkeypatch.setattr(BatchAgents, "load", no_loading)
    code = main(["batch", "--preset", "tiny", "--input", str(path), "--out", str(out), "--no-progress"])
    stdout, stderr = capsys.readouterr()
    assert (code, stderr) == (0, "")
    assert f"Nothing to run: all 2 item(s) in {out} are already finished, so no model is loaded.\n" in stdout
    assert "Loading models" not in stdout and "ran 0, skipped 2 already finished" in stdout
    assert json.loads((out / "summary.json").read_text())["statuses"] == {"done": 1, "no_mask": 1}  # rewritten


def test_a_folder_of_images_with_one_query(tmp_path, script_file, capsys):
    photos = tmp_path / "photos"
    photos.mkdir()
    for name in PHOTOS[:2]:
        (photos / name).symlink_to(ASSETS / name)
    (photos / "broken.png").write_bytes(b"not a png")
    code = main(["batch", "--preset", "tiny", "--script", str(script_file), "--input", str(photos), "--query",
                 "the main object", "--out", str(tmp_path / "out"), "--no-progress", "--concurrency", "2"])
    stdout, stderr = capsys.readouterr()
    assert code == 3  # an item failed: its reason is in summary.json, a rerun retries it
    assert "Batch: 3 item(s): done 2, failed 1; ran 3" in stdout
    summary = json.loads((tmp_path / "out/summary.json").read_text())
    assert [u["id"] for u in summary["unanswered"]] == ["broken.png"]
    assert "not an image" in summary["unanswered"][0]["reason"] or "cannot" in summary["unanswered"][0]["reason"]
    manifest = json.loads((tmp_path / "out/manifest.json").read_text())
    assert [(e["id"], e["folder"]) for e in manifest["items"]] == [
        ("astronaut.jpg", "items/astronaut.jpg"), ("broken.png", "items/broken.png"),
        ("coffee.jpg", "items/coffee.jpg")]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--concurrency", "0"], "--concurrency must be at least 1"),
        (["--max-rounds", "0"], "max_rounds must be between 1 and 100"),
        (["--query", "x"], "leave out --query"),
    ],
)
def test_bad_batch_input_is_exit_2_before_any_model_loads(tmp_path, script_file, capsys, extra, message):
    items = twenty_items(tmp_path)
    code = main(["batch", "--preset", "tiny", "--script", str(script_file), "--input", str(items), "--out",
                 str(tmp_path / "out"), *extra])
    stdout, stderr = capsys.readouterr()
    assert code == 2 and message in stderr and "Loading models" not in stdout


def test_unwritable_out_is_exit_2(tmp_path, script_file, capsys):
    (tmp_path / "file").write_text("")
    code = main(["batch", "--input", str(twenty_items(tmp_path)), "--out", str(tmp_path / "file" / "out"),
                 "--preset", "tiny", "--script", str(script_file)])
    assert code == 2 and "cannot write to the output folder" in capsys.readouterr().err


def test_eval_with_unreadable_ground_truth_is_exit_2(tmp_path, capsys):
    (tmp_path / "gt.jsonl").write_text('{"image": "a.jpg", "query": "x", "mask": 5}\n')
    code = main(["eval", "--dataset", str(tmp_path / "gt.jsonl"), "--format", "jsonl", "--out", str(tmp_path / "o"),
                 "--preset", "tiny"])
    err = capsys.readouterr().err
    assert code == 2 and "line 1" in err and "must be an RLE" in err


def test_help_lists_the_dataset_commands():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "sam3_agent", "--help"], capture_output=True, text=True, env=env,
                            timeout=120)
    assert "batch" in result.stdout and "eval" in result.stdout
