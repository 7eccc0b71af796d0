"""The non-model benchmark's measurements on a small case: its counts and checks are real (the timings are only
printed by ``python -m sam3_agent.bench.nonmodel``)."""

from __future__ import annotations

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
    rows = [line.split()[0] for line in out.splitlines() if line.strip()]
    assert "240x160/6" in rows and "320x240/20" in rows  # the case row and the memory row
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
