"""A ReVOS layout run as a batch of video items and scored by J&F: exact values with the tracker double, the report's
files, and the refusals ``eval --format revos`` makes before any model loads.

The fixture layout (``revos_layout``): ``astronaut-pan`` (3 frames) pans right, so its objects move 8 px left a frame;
``demo/coffee-pan`` (2 frames) pans down, its object moves 8 px up a frame. The agent answers each expression with the
keyframe's true box or with "no mask"; the tracker double carries a mask by a fixed step, so the astronaut's
expressions run with one moving 8 px left and the coffee's with one moving 8 px up (the coffee's fail on the first
pass and run again, as a rerun of a batch does). Every tracked frame is then exact or empty: J and F are 1 or 0 on
every frame, and each mean is known by hand.
"""

from __future__ import annotations

import csv
import json

import pytest
from dataset_fixtures import KnownAgents
from revos_layout import write_revos
from video_doubles import ShiftTracker

from sam3_agent.cli.main import main
from sam3_agent.datasets.batch.layout import BatchLayout
from sam3_agent.datasets.batch.runner import run_batch
from sam3_agent.datasets.formats.revos import read_revos
from sam3_agent.datasets.scoring.video_batch import evaluate_video_batch, video_items
from sam3_agent.datasets.scoring.video_report import VideoProtocolRun, format_video_metrics, write_video_report
from sam3_agent.errors import InputError

FLAG, COUNTRY, DOG = "the flag", "what would tell you which country sent the astronaut?", "the dog"
CUP, DRINK = "the cup", "what holds the drink?"
ASTRONAUT = {FLAG: "flag", COUNTRY: None, DOG: None}  # the flag boxed; the two others answered "no mask"
COFFEE = {CUP: "cup", DRINK: "cup"}
BOXES = {"flag": [((20, 10, 70, 60), 0.9)], "cup": [((30, 40, 90, 80), 0.9)]}  # anno 1 and anno 3 on frame 0


@pytest.fixture
def revos(tmp_path):
    return write_revos(tmp_path)


def run_fixture(root, out, **options):
    """Run every expression of the fixture as described in the module docstring; returns (samples, items, layout)."""
    samples = read_revos(root)
    items = video_items(samples, root)
    layout = BatchLayout(out, items)
    layout.prepare()
    first = KnownAgents({**ASTRONAUT, **COFFEE}, BOXES, failing=["cup"])
    first.tracker = ShiftTracker(dx=-8, dy=0)
    run_batch(items, layout, first)
    second = KnownAgents({**ASTRONAUT, **COFFEE}, BOXES)
    second.tracker = ShiftTracker(dx=0, dy=-8)
    result = run_batch(items, layout, second)
    assert (result.ran, result.skipped) == (2, 3)  # the coffee expressions failed the first time
    return samples, items, layout


def test_each_expression_runs_as_a_clip_of_its_videos_frames(revos):
    items = video_items(read_revos(revos), revos)
    assert [(i.id, i.video, i.video_ref, i.query, i.keyframe) for i in items[2:4]] == [
        ("astronaut-pan_2", revos / "JPEGImages/astronaut-pan", "JPEGImages/astronaut-pan", DOG, 0),
        ("demo/coffee-pan_0", revos / "JPEGImages/demo/coffee-pan", "JPEGImages/demo/coffee-pan", CUP, 0)]


def test_j_and_f_of_every_expression_and_protocol_are_exact(revos, tmp_path):
    samples, items, layout = run_fixture(revos, tmp_path / "out")
    scored = evaluate_video_batch(samples, items, layout)
    evaluation = scored.evaluation
    assert [(s.id, s.j, s.f, len(s.frames)) for s in evaluation.scores] == [
        ("astronaut-pan_0", 1.0, 1.0, 3),  # the flag, exact on every frame
        ("astronaut-pan_1", 0.0, 0.0, 3),  # "no mask" where the flag (and later the patch) is
        ("astronaut-pan_2", 1.0, 1.0, 3),  # "no mask" where there is nothing: empty on empty
        ("demo/coffee-pan_0", 1.0, 1.0, 2),
        ("demo/coffee-pan_1", 1.0, 1.0, 2)]
    assert evaluation.protocol.name == "revos-visa" and evaluation.unscored == []
    referring, reasoning = evaluation.subsets["referring"], evaluation.subsets["reasoning"]
    assert (referring.expressions, referring.j, referring.f) == (2, 1.0, 1.0)  # type 0: the flag, the cup
    assert (reasoning.expressions, reasoning.j, reasoning.f) == (2, 0.5, 0.5)  # type 1: the country (0), the drink (1)
    assert (evaluation.overall.expressions, evaluation.overall.j_and_f) == (4, 0.75)  # type 2 in neither
    every = evaluate_video_batch(samples, items, layout, "all-expressions").evaluation
    assert (every.overall.expressions, every.overall.j, every.overall.f, every.subsets) == (5, 0.8, 0.8, {})


def test_a_failed_run_counts_as_nothing_predicted_and_one_not_run_is_listed(revos, tmp_path):
    samples = read_revos(revos)
    items = video_items(samples, revos)
    layout = BatchLayout(tmp_path / "out", items[:3])
    layout.prepare()
    agents = KnownAgents(ASTRONAUT, BOXES, failing=["flag"])
    agents.tracker = ShiftTracker(dx=-8)
    run_batch(items[:3], layout, agents)
    scored = evaluate_video_batch(samples, items, BatchLayout(tmp_path / "out", items), "all-expressions")
    assert [(s.id, s.j, s.f) for s in scored.evaluation.scores] == [
        ("astronaut-pan_0", 0.0, 0.0), ("astronaut-pan_1", 0.0, 0.0), ("astronaut-pan_2", 1.0, 1.0)]
    assert [(u.id, u.reason) for u in scored.evaluation.unscored] == [
        ("demo/coffee-pan_0", "not run yet (run the evaluation again to finish the batch)"),
        ("demo/coffee-pan_1", "not run yet (run the evaluation again to finish the batch)")]
    assert scored.records["astronaut-pan_0"].status == "failed"


def test_the_report_states_the_protocol_and_every_expressions_j_and_f(revos, tmp_path):
    samples, items, layout = run_fixture(revos, tmp_path / "out")
    scored = evaluate_video_batch(samples, items, layout)
    run = VideoProtocolRun(split="valid", dataset_expressions=5, selected=5)
    page = write_video_report(scored, items, layout, tmp_path / "out/eval", title="fixture", run=run)
    metrics = json.loads((tmp_path / "out/eval/metrics.json").read_text())
    assert metrics["protocol"]["name"] == "revos-visa" and metrics["protocol"]["split"] == "valid"
    assert metrics["overall"] == {"expressions": 4, "J": 0.75, "F": 0.75, "J&F": 0.75}
    assert metrics["expressions"][1]["per_frame"] == {"J": [0.0, 0.0, 0.0], "F": [0.0, 0.0, 0.0]}
    assert metrics["expressions"][3]["objects"] == 1 and metrics["expressions"][3]["frames_tracked"] == 1
    rows = list(csv.DictReader((tmp_path / "out/eval/expressions.csv").open()))
    assert [(r["id"], r["type"], r["J&F"], r["status"]) for r in rows] == [
        ("astronaut-pan_0", "referring", "1.000000", "done"), ("astronaut-pan_1", "reasoning", "0.000000", "no_mask"),
        ("astronaut-pan_2", "type 2", "1.000000", "no_mask"), ("demo/coffee-pan_0", "referring", "1.000000", "done"),
        ("demo/coffee-pan_1", "reasoning", "1.000000", "done")]
    text = page.read_text()
    assert "revos-visa" in text and "github.com/cilinyan/VISA tools/eval_revos.py" in text and "scripted" in text
    assert text.index("astronaut-pan_1") < text.index("astronaut-pan_0")  # lowest J&F first
    printed = format_video_metrics(scored, run).split("\n")
    assert printed[-3:] == ["overall: J 75.0, F 75.0, J&F 75.0 over 4 expression(s)",
                            "referring: J 100.0, F 100.0, J&F 100.0 over 2 expression(s)",
                            "reasoning: J 50.0, F 50.0, J&F 50.0 over 2 expression(s)"]


def test_a_frame_folder_holding_frames_the_expressions_do_not_list_is_refused(revos):
    (revos / "JPEGImages/astronaut-pan/00003.jpg").write_bytes((revos / "JPEGImages/astronaut-pan/00000.jpg")
                                                               .read_bytes())
    with pytest.raises(InputError) as error:
        video_items(read_revos(revos), revos)
    assert str(error.value).split("\n")[1] == (f"  video 'astronaut-pan': {revos / 'JPEGImages/astronaut-pan'} also "
                                               "holds 1 frame file(s) the expressions file does not list (00003.jpg)")


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--protocol", "reasonseg-lisa"], "error: --protocol reasonseg-lisa does not apply to revos datasets; use one "
                                           "of: revos-visa, all-expressions (default revos-visa)\n"),
        (["--split", "test"], "error: ReVOS has no split 'test'; use one of: valid, train, train_sub\n"),
        (["--limit", "0"], "error: --limit must be at least 1, got 0\n"),
    ],
)
def test_eval_refuses_bad_revos_flags_before_any_model_loads(revos, tmp_path, capsys, extra, message):
    code = main(["eval", "--format", "revos", "--dataset", str(revos), "--out", str(tmp_path / "out"), "--preset",
                 "tiny", *extra])
    out, err = capsys.readouterr()
    assert (code, err) == (2, message) and "Loading models" not in out and not (tmp_path / "out").exists()


def test_a_video_protocol_on_a_photo_dataset_is_refused(tmp_path, capsys):
    code = main(["eval", "--format", "jsonl", "--dataset", str(tmp_path / "gt.jsonl"), "--out", str(tmp_path / "o"),
                 "--protocol", "revos-visa", "--preset", "tiny"])
    assert code == 2 and "--protocol revos-visa does not apply to jsonl datasets" in capsys.readouterr().err
