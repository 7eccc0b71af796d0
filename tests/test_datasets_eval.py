"""Evaluation end to end on the fixture datasets: known answers give the hand-computed metrics exactly."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from dataset_fixtures import ASSETS, FIXTURES, KnownAgents
from PIL import Image

from sam3_agent.datasets.batch.layout import BatchLayout
from sam3_agent.datasets.batch.runner import run_batch
from sam3_agent.datasets.formats.jsonl_gt import read_jsonl_gt
from sam3_agent.datasets.formats.reasonseg import read_reasonseg
from sam3_agent.datasets.formats.refcoco import read_refcoco
from sam3_agent.datasets.scoring.evaluate import evaluate
from sam3_agent.datasets.scoring.report import format_metrics, write_report

REPO = Path(__file__).resolve().parent.parent
# What the scripted agent answers (a KnownSegmenter rectangle, xyxy with x1/y1 exclusive, or no mask).
DETECTIONS = {"cup": [((200, 40, 420, 310), 0.9)], "rocket": [((300, 100, 345, 420), 0.9)],
              "flag": [((0, 0, 95, 340), 0.9)], "stars": [((100, 0, 200, 100), 0.9)],
              "spoon": [((10, 10, 30, 30), 0.9)]}
REASONSEG_ANSWERS = {"the flag": "flag", "the stars and stripes behind the astronaut": "stars",
                     "the dog lying next to the cat": None, "the cup that holds the espresso": "cup",
                     "something that shows the launch has not happened yet": "rocket"}


def run_eval(samples, phrases, out):
    items = [s.item() for s in samples]
    layout = BatchLayout(out, items)
    layout.prepare()
    run_batch(items, layout, KnownAgents(phrases, DETECTIONS))
    return layout, evaluate(samples, layout)


def ious(evaluation) -> dict[str, tuple[int, int]]:
    return {s.id: (s.intersection, s.union) for s in evaluation.scores}


def test_reasonseg_fixture_gives_the_hand_computed_metrics(tmp_path):
    samples = read_reasonseg(FIXTURES / "reasonseg", images=ASSETS)
    _, evaluation = run_eval(samples, REASONSEG_ANSWERS, tmp_path / "out")
    assert ious(evaluation) == {
        # flag: the L-shape (24,121 px) lies inside the predicted 95 x 340 rectangle (32,300 px)
        "astronaut_1": (24121, 32300),
        # stars: a 100 x 100 rectangle right of the flag: no overlap, union 24,121 + 10,000
        "astronaut_2": (0, 34121),
        # no dog, no mask: nothing to find, nothing found
        "chelsea": (0, 0),
        # cup: target x 175..410 / y 20..300 (236 x 281 = 66,316), prediction x 200..419 / y 40..309
        # (220 x 270 = 59,400), both x 200..410 / y 40..300 (211 x 261 = 55,071)
        "coffee": (55071, 66316 + 59400 - 55071),
        # rocket: target rows 125..379 outside the ignored pad (36 x 255 = 9,180), all inside the prediction,
        # whose 45 x 320 = 14,400 px lose 45 x 40 = 1,800 to the pad
        "rocket": (9180, 14400 - 1800),
    }
    m = evaluation.metrics
    iou = [24121 / 32300, 0.0, 1.0, 55071 / 70645, 9180 / 12600]
    assert m.giou == pytest.approx(sum(iou) / 5, abs=1e-12)
    assert m.ciou == pytest.approx((24121 + 55071 + 9180) / (32300 + 34121 + 70645 + 12600), abs=1e-12)
    assert m.precision == {0.5: 0.75, 0.6: 0.75, 0.7: 0.75, 0.8: 0.0, 0.9: 0.0}
    assert (m.no_target_samples, m.no_target_accuracy, m.target_samples, m.empty_on_target) == (1, 1.0, 4, 0)
    assert evaluation.breakdowns["query_type"]["long"].giou == pytest.approx(9180 / 12600)
    assert format_metrics(m).splitlines()[:2] == [
        f"samples 5: gIoU {sum(iou) / 5:.4f}, cIoU {88372 / 149666:.4f}",
        "precision@IoU (samples with a target): 0.5 0.7500, 0.6 0.7500, 0.7 0.7500, 0.8 0.0000, 0.9 0.0000",
    ]
    assert format_metrics(m).splitlines()[:1] == ["samples 5: gIoU 0.6510, cIoU 0.5905"]


def test_refcoco_fixture_gives_the_hand_computed_metrics(tmp_path):
    samples = read_refcoco(FIXTURES / "refcoco", split="val", images=ASSETS)
    phrases = {"the cup of coffee": "cup", "white cup on a saucer": "cup", "the rocket on the pad": "rocket"}
    _, evaluation = run_eval(samples, phrases, tmp_path / "out")
    # cup: COCO polygon pixels x 175..409 / y 20..299 (235 x 280 = 65,800); prediction 59,400 px; both
    # x 200..409 / y 40..299 (210 x 260 = 54,600). rocket: the RLE's 36 x 275 = 9,900 px inside the 14,400 px
    # prediction.
    assert ious(evaluation) == {"ref1_sent100": (54600, 70600), "ref1_sent101": (54600, 70600),
                                "ref2_sent102": (9900, 14400)}
    m = evaluation.metrics
    assert m.giou == pytest.approx((2 * 54600 / 70600 + 9900 / 14400) / 3, abs=1e-12)
    assert m.ciou == pytest.approx((2 * 54600 + 9900) / (2 * 70600 + 14400), abs=1e-12)
    assert m.precision == pytest.approx({0.5: 1.0, 0.6: 1.0, 0.7: 2 / 3, 0.8: 0.0, 0.9: 0.0})
    assert {k: g.samples for k, g in evaluation.breakdowns["category"].items()} == {"cup": 2, "airplane": 1}


def test_jsonl_fixture_gives_the_hand_computed_metrics(tmp_path):
    samples = read_jsonl_gt(FIXTURES / "gt.jsonl")
    phrases = {"the cup": "cup", "the spoon": "spoon", "the rocket": "rocket"}
    _, evaluation = run_eval(samples, phrases, tmp_path / "out")
    assert ious(evaluation) == {"cup": (54600, 70600), "no-spoon": (0, 400), "rocket": (9180, 12600)}
    m = evaluation.metrics
    assert m.giou == pytest.approx((54600 / 70600 + 0 + 9180 / 12600) / 3, abs=1e-12)
    assert m.ciou == pytest.approx((54600 + 9180) / (70600 + 400 + 12600), abs=1e-12)
    assert (m.no_target_samples, m.no_target_accuracy) == (1, 0.0)  # a mask where there is nothing to find
    assert m.precision == {0.5: 1.0, 0.6: 1.0, 0.7: 1.0, 0.8: 0.0, 0.9: 0.0}
    assert {k: g.samples for k, g in evaluation.breakdowns["kind"].items()} == {"object": 2, "absent": 1}


def test_report_files_numbers_and_worst_case_overlays(tmp_path):
    samples = read_reasonseg(FIXTURES / "reasonseg", images=ASSETS)
    layout, evaluation = run_eval(samples, REASONSEG_ANSWERS, tmp_path / "out")
    page = write_report(evaluation, samples, layout, tmp_path / "out" / "eval", worst=2)
    report = tmp_path / "out" / "eval"
    html = page.read_text()
    assert "The VLM was scripted" in html  # the report says the answers were replayed, not generated
    assert "astronaut_2" in html and 'href="../items/astronaut_2/trace.json"' in html
    metrics = json.loads((report / "metrics.json").read_text())
    assert metrics["metrics"]["gIoU"] == pytest.approx(evaluation.metrics.giou)
    assert metrics["metrics"]["precision"]["0.7"] == 0.75
    assert metrics["breakdowns"]["status"]["no_mask"]["samples"] == 1
    rows = list(csv.DictReader(io.StringIO((report / "samples.csv").read_text())))
    assert [(r["id"], r["intersection"], r["union"], r["status"]) for r in rows][:2] == [
        ("astronaut_1", "24121", "32300", "done"), ("astronaut_2", "0", "34121", "done")]
    for plot in ("plots/iou_histogram.png", "plots/iou_vs_rounds.png"):
        assert Image.open(report / plot).size[0] > 100
    # worst case 1 is astronaut_2 (IoU 0): the flag is target only (green), the prediction only red
    worst = np.asarray(Image.open(report / "worst/001.png").convert("RGB")).astype(int)
    photo = np.asarray(Image.open(ASSETS / "astronaut.jpg").convert("RGB").resize((480, 480))).astype(int)
    assert worst.shape == (480, 480, 3)

    def shift(y: int, x: int, towards: int, away: int) -> int:  # how much the fill moved one channel past another
        return (worst[y, x, towards] - worst[y, x, away]) - (photo[y, x, towards] - photo[y, x, away])

    assert shift(100, 10, towards=1, away=0) > 30  # (x 10, y 100) lies in the flag: greener
    assert shift(40, 140, towards=0, away=1) > 30  # (x 140, y 40) lies in the prediction: redder
    assert abs(shift(300, 300, towards=0, away=1)) <= 3  # elsewhere: the photo itself (up to resampling)
    assert not (report / "worst/003.png").exists()


def test_a_sample_whose_image_cannot_be_read_is_listed_not_scored(tmp_path):
    samples = read_jsonl_gt(FIXTURES / "gt.jsonl")
    broken = samples[0].__class__(samples[0].id, tmp_path / "gone.jpg", "gone.jpg", samples[0].query, samples[0].truth)
    _, evaluation = run_eval([broken] + samples[1:], {"the cup": "cup", "the spoon": "spoon", "the rocket": "rocket"},
                             tmp_path / "out")
    assert [s.id for s in evaluation.scores] == ["no-spoon", "rocket"]
    assert [(u.id, "image file not found" in u.reason) for u in evaluation.unscored] == [("cup", True)]


def test_eval_cli_on_the_tiny_models_says_the_numbers_mean_nothing(tmp_path):
    env = {"PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "sam3_agent", "eval", "--dataset", str(FIXTURES / "reasonseg"), "--format",
         "reasonseg", "--images", str(ASSETS), "--out", str(tmp_path / "out"), "--preset", "tiny", "--script",
         str(ASSETS / "example_script.json"), "--no-progress", "--worst", "2"],
        capture_output=True, text=True, timeout=600, env={**__import__("os").environ, **env}, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    # the default protocol is LISA's: the first query of each of the 4 images (astronaut's second is left out)
    assert "4 sample(s) from" in out and "protocol reasonseg-lisa, split unknown)" in out
    assert "split unknown: 4 sample(s) scored of 4 the protocol selects from 5 in the dataset" in out
    assert "published numbers: none recorded for reasonseg-lisa on split unknown" in out
    assert "note: The models had random weights" in out
    assert "note: The VLM was scripted" in out and "samples 4: gIoU " in out
    metrics = json.loads((tmp_path / "out/eval/metrics.json").read_text())
    rows = list(csv.DictReader(io.StringIO((tmp_path / "out/eval/samples.csv").read_text())))
    assert metrics["metrics"]["samples"] == len(rows) == 4 and metrics["protocol"]["name"] == "reasonseg-lisa"
    assert metrics["metrics"]["gIoU"] == pytest.approx(sum(float(r["iou"]) for r in rows) / 4, abs=1e-5)
    assert "random weights" in (tmp_path / "out/eval/report.html").read_text()
