"""The video benchmark: each case measures what it says (encoder passes counted exactly), the table and the goals
read the measurements, and the command runs small as shipped."""

from __future__ import annotations

import io

import pytest
from video_frames import clip_path, one_torch_thread  # noqa: F401 (a fixture)

from sam3_agent.bench.video import goals, main, table
from sam3_agent.bench.video_run import measure_case

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize(("mode", "recipe", "passes_per_frame"), [
    ("keyframe", "plain", 1), ("keyframe", "ours", 1), ("keyframe", "own", 1),
    ("newcomer", "plain", 2),  # Sam3VideoModel and Sam3TrackerVideoModel each encode every frame
    ("newcomer", "ours", 1),  # the detector and the tracker share each frame's one encoding
])
def test_each_case_tracks_every_frame_with_its_encoder_passes(mode, recipe, passes_per_frame):
    result = measure_case(mode, recipe, 6, clip_path(), 160, 90)
    assert (result["mode"], result["recipe"], result["frames"]) == (mode, recipe, 6)
    assert result["backbone_passes"] == 6 * passes_per_frame
    assert result["seconds"] > 0 and result["frames_per_second"] > 0
    assert result["peak_rss_mb"] >= result["baseline_rss_mb"] > 0


def result(mode, recipe, frames, fps, peak):
    return {"mode": mode, "recipe": recipe, "frames": frames, "seconds": frames / fps, "frames_per_second": fps,
            "peak_rss_mb": peak, "baseline_rss_mb": 800.0, "backbone_passes": frames * (2 if recipe == "plain" and
                                                                                       mode == "newcomer" else 1)}


def test_the_table_and_the_goals_read_the_measurements():
    results = [result("keyframe", "plain", 300, 30.0, 950.0), result("keyframe", "ours", 300, 31.0, 900.0),
               result("keyframe", "plain", 3000, 20.0, 2500.0), result("keyframe", "ours", 3000, 29.0, 945.0),
               result("newcomer", "plain", 300, 10.0, 1000.0), result("newcomer", "ours", 300, 19.0, 900.0),
               result("newcomer", "plain", 3000, 9.0, 4000.0), result("newcomer", "ours", 3000, 17.0, 991.0)]
    lines = table(results)
    assert len(lines) == 1 + len(results) and lines[0].split()[:3] == ["mode", "recipe", "frames"]
    assert lines[4].split() == ["keyframe", "ours", "(backbone", "shared)", "3000", "29.0", "945.0", "145.0", "1.00"]
    assert lines[7].split()[-1] == "2.00"
    assert goals(results) == [
        "memory flat, ours, keyframe: peak RSS at 3000 frames 945 MB vs 900 MB at 300 (+5.0%; goal within 10%): yes",
        "  (plain recipe, keyframe: +163.2% from 300 to 3000 frames)",
        "frames/s, ours / plain, keyframe, 3000 frames: 1.45x (goal >= 1x): yes",
        "memory flat, ours, newcomer: peak RSS at 3000 frames 991 MB vs 900 MB at 300 (+10.1%; goal within 10%): NO",
        "  (plain recipe, newcomer: +300.0% from 300 to 3000 frames)",
        "frames/s, ours / plain, newcomer, 3000 frames: 1.89x (goal >= 2x): NO",
    ]


@pytest.mark.slow
def test_the_command_runs_small_and_prints_its_table_and_goals():
    out = io.StringIO()
    assert main(["--frames", "6,12", "--modes", "keyframe", "--size", "160x90", "--clip", str(clip_path())],
                out=out) == 0
    printed = out.getvalue().splitlines()
    header = printed.index(next(line for line in printed if line.startswith("mode ")))
    rows = printed[header + 1: header + 7]
    assert [row.split()[0] for row in rows] == ["keyframe"] * 6
    assert [row.split()[-5] for row in rows] == ["6", "6", "6", "12", "12", "12"]  # frames column
    flat = next(line for line in printed if line.startswith("memory flat, ours, keyframe"))
    assert flat.endswith(": yes")
    assert any(line.startswith("frames/s, ours / plain, keyframe, 12 frames") for line in printed)
