"""Evaluation protocols: which samples are scored, the published numbers beside a run's, and the report stating
them. Every expected value is computed by hand."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from dataset_fixtures import ASSETS, FIXTURES
from test_datasets_eval import REASONSEG_ANSWERS, run_eval

from sam3_agent.datasets.formats.ground_truth import EvalSample, RleTruth
from sam3_agent.datasets.formats.reasonseg import read_reasonseg
from sam3_agent.datasets.scoring.metrics import Metrics, SampleScore, intersection_union, summarize
from sam3_agent.datasets.scoring.protocols import PROTOCOLS, ProtocolRun, paper_model, protocol_for
from sam3_agent.datasets.scoring.report import write_report
from sam3_agent.errors import InputError
from sam3_agent.rle import encode_rle


def rle_sample(sample_id: str, image: str, target: np.ndarray, ignore: np.ndarray) -> EvalSample:
    truth = RleTruth(tuple(encode_rle(target)) if target.any() else (), tuple(encode_rle(ignore)) if ignore.any()
                     else (), 4, 4)
    return EvalSample(sample_id, Path(image), image, sample_id, truth)


def test_lisa_protocol_scores_only_the_first_query_of_each_image():
    samples = read_reasonseg(FIXTURES / "reasonseg", images=ASSETS)
    lisa, every = PROTOCOLS["reasonseg-lisa"], PROTOCOLS["all-queries"]
    assert [s.id for s in lisa.select(samples)] == ["astronaut_1", "chelsea", "coffee", "rocket"]
    assert [s.query for s in lisa.select(samples)][0] == "the flag"  # text[0] of astronaut.json
    assert [s.id for s in every.select(samples)] == ["astronaut_1", "astronaut_2", "chelsea", "coffee", "rocket"]


def test_lisa_protocol_rules_on_a_4x4_case_by_hand():
    # Image a: target the top-left 2 x 2 (4 px); prediction the top row (4 px); (0, 3) ignored.
    # I = {(0,0), (0,1)} = 2; U = target + (0,2) = 5 (the ignored (0,3) leaves the union): IoU 0.4 (1/3 if counted).
    # Image a's second query is not scored. Image b: nothing to find, nothing found: IoU 1, I = U = 0.
    target, ignore, prediction, empty = (np.zeros((4, 4), bool) for _ in range(4))
    target[:2, :2], ignore[0, 3], prediction[0, :] = True, True, True
    samples = [rle_sample("a_1", "a.jpg", target, ignore), rle_sample("a_2", "a.jpg", empty, empty),
               rle_sample("b", "b.jpg", empty, empty)]
    predictions = {"a_1": prediction, "b": empty}
    scores = []
    for sample in PROTOCOLS["reasonseg-lisa"].select(samples):
        t, i = sample.truth.masks(4, 4)
        inter, union = intersection_union(predictions[sample.id], t, i)
        scores.append(SampleScore(id=sample.id, query=sample.query, intersection=inter, union=union,
                                  target_pixels=int((t & ~i).sum()), predicted_pixels=int(predictions[sample.id].sum()),
                                  status="done"))
    assert [(s.id, s.intersection, s.union, s.iou) for s in scores] == [("a_1", 2, 5, 0.4), ("b", 0, 0, 1.0)]
    metrics = summarize(scores)
    assert metrics.giou == pytest.approx(0.7, abs=1e-12)  # (0.4 + 1) / 2: the mean of per-image IoU
    assert metrics.ciou == pytest.approx(0.4, abs=1e-12)  # (2 + 0) / (5 + 0): summed I over summed U


def test_lisa_protocol_on_the_fixture_gives_the_hand_computed_metrics(tmp_path):
    samples = PROTOCOLS["reasonseg-lisa"].select(read_reasonseg(FIXTURES / "reasonseg", images=ASSETS))
    _, evaluation = run_eval(samples, REASONSEG_ANSWERS, tmp_path / "out")
    iou = [24121 / 32300, 1.0, 55071 / 70645, 9180 / 12600]  # flag, no dog, cup, rocket (test_datasets_eval)
    assert evaluation.metrics.samples == 4
    assert evaluation.metrics.giou == pytest.approx(sum(iou) / 4, abs=1e-12)
    assert evaluation.metrics.ciou == pytest.approx((24121 + 55071 + 9180) / (32300 + 70645 + 12600), abs=1e-12)


def test_each_format_defaults_to_its_published_protocol_and_refuses_one_of_another():
    assert [protocol_for(f, None).name for f in ("reasonseg", "refcoco", "jsonl")] == [
        "reasonseg-lisa", "refcoco", "all-queries"]
    assert protocol_for("reasonseg", "all-queries").name == "all-queries"
    with pytest.raises(InputError, match=r"reasonseg-lisa does not apply to refcoco datasets; use one of: refcoco, "
                                         r"all-queries \(default refcoco\)"):
        protocol_for("refcoco", "reasonseg-lisa")


@pytest.mark.parametrize("model_id, paper", [
    ("Qwen/Qwen2.5-VL-7B-Instruct", "Qwen2.5-VL 7B"), ("/models/qwen2.5-vl-72b-instruct", "Qwen2.5-VL 72B"),
    ("Qwen/Qwen3-VL-8B-Thinking", "Qwen3-VL 8B Thinking"), ("Qwen/Qwen3-VL-235B-A22B-Thinking", "Qwen3-VL 235B Thinking"),
    ("gemini-2.5-pro", "Gemini 2.5 Pro"), ("Qwen/Qwen3-VL-8B-Instruct", None), ("scripted", None)])
def test_model_ids_map_to_the_papers_names(model_id, paper):
    assert paper_model(model_id) == paper


def metrics_of(giou: float, ciou: float, samples: int = 200):
    return Metrics(samples=samples, giou=giou, ciou=ciou, precision={}, target_samples=samples, empty_on_target=0,
                   no_target_samples=0, no_target_accuracy=None, mean_rounds=None, mean_seconds=None)


def test_the_published_numbers_stand_beside_the_runs_with_its_models_row_marked():
    run = ProtocolRun(PROTOCOLS["reasonseg-lisa"], "val", dataset_queries=1000, selected=200,
                      models=("Qwen/Qwen2.5-VL-7B-Instruct",))
    lines = run.lines(metrics_of(0.65, 0.5))
    assert lines[1] == "split val: 200 sample(s) scored of 200 the protocol selects from 1000 in the dataset"
    assert lines[2] == ("published (SAM 3 paper, agent tables (SAM 3 Agent with each VLM)), gIoU on val: "
                        "Qwen2.5-VL 7B 62.2 (this model), Qwen2.5-VL 72B 74.6, Qwen3-VL 8B Thinking 68.5, "
                        "Qwen3-VL 235B Thinking 76.6, Gemini 2.5 Pro 77.0")
    assert lines[3] == ("this run (Qwen/Qwen2.5-VL-7B-Instruct): gIoU 65.0; Qwen2.5-VL 7B published 62.2, "
                        "difference +2.8")
    test = ProtocolRun(PROTOCOLS["reasonseg-lisa"], "test", 779, 779, models=("Qwen/Qwen3-VL-8B-Thinking",))
    assert test.to_json(metrics_of(0.7, 0.6))["published"]["values_percent"]["Qwen3-VL 8B Thinking"] == 70.2


def test_a_protocol_that_is_not_the_published_one_prints_no_published_numbers():
    run = ProtocolRun(PROTOCOLS["all-queries"], "val", 1000, 1000, models=("Qwen/Qwen2.5-VL-7B-Instruct",))
    assert run.lines(metrics_of(0.65, 0.5))[2] == ("published numbers: this protocol is not the published one; "
                                                   "this run gIoU 65.0")
    refcoco = ProtocolRun(PROTOCOLS["refcoco"], "val", 10, 10)
    assert refcoco.lines(metrics_of(0.65, 0.5))[2] == ("published numbers: none recorded for refcoco on split val; "
                                                       "this run cIoU 50.0")


def test_the_report_states_protocol_split_and_counts(tmp_path):
    samples = PROTOCOLS["reasonseg-lisa"].select(read_reasonseg(FIXTURES / "reasonseg", images=ASSETS))
    layout, evaluation = run_eval(samples, REASONSEG_ANSWERS, tmp_path / "out")
    run = ProtocolRun(PROTOCOLS["reasonseg-lisa"], "val", dataset_queries=5, selected=4,
                      models=tuple(evaluation.models))
    page = write_report(evaluation, samples, layout, tmp_path / "out" / "eval", worst=0, protocol=run)
    document = json.loads((tmp_path / "out" / "eval" / "metrics.json").read_text())["protocol"]
    assert {k: document[k] for k in ("name", "split", "samples_scored", "samples_selected", "dataset_queries")} == {
        "name": "reasonseg-lisa", "split": "val", "samples_scored": 4, "samples_selected": 4, "dataset_queries": 5}
    assert document["published"]["values_percent"]["Qwen2.5-VL 7B"] == 62.2
    assert "split val: 4 sample(s) scored of 4 the protocol selects from 5 in the dataset" in page.read_text()


def test_the_eval_flag_offers_every_protocol_and_names_the_split():
    import argparse

    from sam3_agent.cli.datasets import IMAGE_PROTOCOL_NAMES, PROTOCOL_NAMES, VIDEO_PROTOCOL_NAMES, _split
    from sam3_agent.datasets.scoring.video_evaluate import PROTOCOLS as VIDEO_PROTOCOLS

    assert IMAGE_PROTOCOL_NAMES == tuple(PROTOCOLS) and VIDEO_PROTOCOL_NAMES == tuple(VIDEO_PROTOCOLS)
    assert PROTOCOL_NAMES == IMAGE_PROTOCOL_NAMES + VIDEO_PROTOCOL_NAMES

    def split(fmt: str, dataset: str, given: str | None = None) -> str | None:
        return _split(argparse.Namespace(format=fmt, dataset=dataset, split=given))

    assert [split("reasonseg", "ReasonSeg/val"), split("reasonseg", "data/mine"), split("refcoco", "refcocog"),
            split("jsonl", "gt.jsonl"), split("reasonseg", "x", "test")] == ["val", None, "val", None, "test"]
