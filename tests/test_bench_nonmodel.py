"""The non-model benchmark's measurements on a small case: its counts and checks are real (the timings are only
printed by ``python -m sam3_agent.bench.nonmodel``)."""

from __future__ import annotations

import numpy as np
import pytest

from sam3_agent.bench.nonmodel_run import measure_app, measure_case
from sam3_agent.bench.scene import DUPLICATE_EVERY, detections


def test_a_small_case_runs_to_the_end_with_every_check_passing():
    result = measure_case(240, 160, 6, repeats=1, profile=True)
    returned = 2 * (6 + len(range(0, 6, DUPLICATE_EVERY)))  # two phrases, each with its near-duplicates
    assert result["status"] == "done" and result["final_masks"] == 6
    assert result["masks_returned"] == returned == result["masks_encoded"]  # each mask encoded once
    assert result["pairs_compared"] > 0 and result["pairs_compared_without_box_overlap"] == 0
    assert result["views_compared"] == 3 + 2 * 6 == result["views_equal"]  # 3 overlays, 2 views per mask
    assert result["zip_bytes"] * 4 < result["schema1_zip_bytes"]
    assert len(result["cpu"]) == 1 and result["top_costs"] and result["peak_extra_mb"] >= 0


def test_the_app_measurement_sees_the_answer_before_the_zip():
    result = measure_app(240, 160, 3, repeats=2)
    assert 0 < result["answer_s"] <= result["event_end_s"] <= result["zip_s"] and result["zip_after_event"]
    assert len(result["answer_s_all"]) == 2 and result["answer_cpu"] > 0


def test_the_scene_has_near_duplicates_the_overlap_filter_removes():
    blobs = detections(300, 200, 10, "object")
    assert len(blobs) == 12 and [b.score for b in blobs[10:]] == [0.55, 0.55]
    assert (blobs[10].cx, blobs[10].cy) == (blobs[0].cx, blobs[0].cy) and blobs[10].grow > 1


def test_the_prefill_goal_reads_the_model_benchmarks_target_line():
    from sam3_agent.bench.checks import Checks
    from sam3_agent.bench.nonmodel import PREFILL, PREFILL_APP

    checks = Checks(same_token_ids=True, same_verdicts=True, same_final_masks=True, encodes=(2, 1),
                    prefill_fraction_cli=0.405, prefill_fraction_app=0.276, verification_speedup=2.0,
                    total_speedup=2.0)
    printed = "\n".join(checks.lines())  # what python -m sam3_agent.bench prints
    match, app = PREFILL.search(printed), PREFILL_APP.search(printed)
    assert match is not None and app is not None
    assert (match.group(1), match.group(2).lower(), app.group(1)) == ("40.5", "no", "27.6")


@pytest.mark.slow
def test_the_benchmark_command_runs_as_shipped_at_a_small_size(capsys):
    from sam3_agent.bench.nonmodel import main

    status = main(["--repeat", "1", "--cases", "240x160/6", "--memory-case", "320", "240", "20", "--app-case", "320",
                   "240", "3", "--skip-model-bench"])
    out = capsys.readouterr().out
    rows = [line.split()[:2] for line in out.splitlines() if line.strip()]
    assert ["240x160/6", "with"] in rows and ["without"] == rows[rows.index(["240x160/6", "with"]) + 1][:1]
    assert ["320x240/20", "with"] in rows  # the memory row: through the post-processing only
    assert "without SAM 3's post-processing as when the target was set" not in out  # 240x160/6 has no CPU target
    assert "app at 320x240/3, best of 3 runs" in out
    assert "peak extra memory <= 2048 MB at 0.1 MP with 20 masks, through SAM 3's post-processing" in out
    assert "  yes  every run ended done with all its masks selected" in out
    assert status in (0, 1)  # the timing goals depend on the machine; the run itself must finish


def test_the_app_step_takes_a_photo_above_the_apps_own_limit():
    from sam3_agent.ui.settings import AppSettings

    limit = AppSettings().max_image_pixels
    width = int(limit**0.5) + 8  # a square photo just over the app's limit
    result = measure_app(width, width, 2, repeats=1)
    assert result["case"] == [width, width, 2] and result["answer_s"] > 0


def test_without_the_post_processing_the_stand_in_hands_over_the_blobs_whole_and_the_run_is_the_same():
    from sam3_agent.bench.sam_outputs import PostProcessedSegmenter
    from sam3_agent.bench.scene import photo_file
    from sam3_agent.images import load_image

    image = load_image(photo_file(240, 160))
    post, plain = PostProcessedSegmenter(6), PostProcessedSegmenter(6, postprocess=False)
    a, b = post.segment(image, "object"), plain.segment(image, "object")
    assert len(a) == len(b) == post.returned == plain.returned == 8  # 6 blobs and two near-duplicates
    assert np.allclose(a.scores, b.scores, atol=1e-6)  # through the sigmoid of a logit, or as given
    assert np.abs(a.boxes - b.boxes).max() < 1e-3  # normalised and scaled back, or as given
    overlap = (a.masks & b.masks).sum(axis=(1, 2)) / (a.masks | b.masks).sum(axis=(1, 2))
    assert overlap.min() > 0.8  # the same blobs, drawn at 288 px and upsampled, or drawn at the photo's size
    result = measure_case(240, 160, 6, repeats=1, profile=False, schema1=False, postprocess=False)
    assert result["status"] == "done" and result["final_masks"] == 6 and result["postprocess"] is False
    assert result["masks_encoded"] == result["masks_returned"] and result["views_equal"] == result["views_compared"]


def test_the_references_stand_in_post_processes_the_same_logits_as_ours(monkeypatch):
    """--postprocess gives the reference's stand-in the same work: the scene's mask logits, upsampled by the steps of
    the reference processor (its data_misc.interpolate, here torch's, which it wraps), within the measured time."""
    import sys
    import types

    import torch

    from sam3_agent.bench.reference_loop import FakeProcessor, answers_for
    from sam3_agent.bench.sam_outputs import PostProcessedSegmenter
    from sam3_agent.bench.scene import photo_file
    from sam3_agent.images import load_image

    data_misc = types.ModuleType("sam3.model.data_misc")
    data_misc.interpolate = torch.nn.functional.interpolate
    monkeypatch.setitem(sys.modules, "sam3.model.data_misc", data_misc)
    monkeypatch.setitem(sys.modules, "sam3.model", types.ModuleType("sam3.model"))
    monkeypatch.setitem(sys.modules, "sam3", types.ModuleType("sam3"))
    answer = FakeProcessor(answers_for(240, 160, 6, postprocess=True)).set_text_prompt({}, "object")
    assert answer["masks"].shape == (8, 1, 160, 240) and answer["masks"].dtype == torch.bool
    ours = PostProcessedSegmenter(6).segment(load_image(photo_file(240, 160)), "object").masks
    differ = (answer["masks"][:, 0].numpy() != ours).sum() / ours.size
    assert differ < 0.002  # logits then sigmoid (the reference) or sigmoid then logits (transformers): edge pixels
    plain = FakeProcessor(answers_for(240, 160, 6)).set_text_prompt({}, "object")
    assert plain["masks"].shape == (8, 1, 160, 240) and "masks_logits_small" not in plain
