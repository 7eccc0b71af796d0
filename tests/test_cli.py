"""The command line end to end on a real photo with the tiny models (and a scripted VLM)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import ASSETS, tool
from PIL import Image

from sam3_agent.cli.main import main
from sam3_agent.errors import EXIT_SAVE
from sam3_agent.imaging.overlay import render_numbered_overlay
from sam3_agent.imaging.postprocess import postprocess_masks
from sam3_agent.presets import tiny_model_paths
from sam3_agent.rle import decode_rle
from sam3_agent.sam.segmenter import Sam3Segmenter
from sam3_agent.trace.io import load_trace

ROOT = Path(__file__).resolve().parent.parent  # the checkout
COFFEE = str(ASSETS / "coffee.jpg")  # 600 x 400


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def script_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("script") / "script.json"
    script = {
        "main": [
            tool("segment_phrase", "The spoon lies on the saucer; SAM 3 knows spoons.", text_prompt="spoon"),
            tool("examine_each_mask", "Several masks; check each."),
            tool("select_masks_and_return", "Mask 1 is the spoon.", final_answer_masks=[1]),
        ],
        "verify": ["<think>ok</think><verdict>Accept</verdict>"] * 16,
    }
    path.write_text(json.dumps(script))
    return path


def test_scripted_run_writes_trace_overlay_and_coco_masks(tmp_path, capsys, script_file):
    out = tmp_path / "out"
    code, stdout, stderr = run_cli(
        ["run", "--preset", "tiny", "--image", COFFEE, "--query", "the spoon", "--out", str(out),
         "--script", str(script_file)],
        capsys,
    )
    assert code == 0, stderr
    assert "Round 1/30" in stdout and 'call: segment_phrase(text_prompt="spoon")' in stdout
    assert "Round 3/30" in stdout and "Finished: done after 3 round(s), 1 final mask(s)" in stdout
    trace = load_trace(out)
    assert trace.status == "done" and [r.call.name for r in trace.rounds] == [
        "segment_phrase", "examine_each_mask", "select_masks_and_return"]
    results = json.loads((out / "final_masks.json").read_text())
    assert len(results) == 1
    assert results[0]["segmentation"]["size"] == [400, 600] and isinstance(results[0]["segmentation"]["counts"], str)
    decoded = decode_rle([r["segmentation"] for r in results])
    assert np.array_equal(decoded, trace.final_masks.masks)
    x, y, w, h = results[0]["bbox"]
    ys, xs = np.nonzero(decoded[0])
    assert (x, y, x + w, y + h) == (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)
    overlay = np.asarray(Image.open(out / "final_overlay.png"))  # lossless: the final masks drawn on the photo
    assert np.array_equal(overlay, np.asarray(render_numbered_overlay(trace.image, trace.final_masks)))
    # The photo is stored as the file it was (a JPEG stays the same JPEG), not re-encoded.
    photo = json.loads((out / "trace.json").read_text())["photo"]["file"]
    assert photo.endswith(".jpg") and (out / photo).read_bytes() == Path(COFFEE).read_bytes()


def test_final_mask_is_the_tiny_sam3_top_mask(tmp_path, capsys, script_file):
    out = tmp_path / "out"
    code, _, _ = run_cli(["run", "--preset", "tiny", "--image", COFFEE, "--query", "the spoon", "--out", str(out),
                          "--script", str(script_file)], capsys)
    assert code == 0
    sam3_dir, _ = tiny_model_paths()
    from sam3_agent.images import load_image

    expected = postprocess_masks(Sam3Segmenter.from_pretrained(str(sam3_dir)).segment(load_image(COFFEE), "spoon", 0.5))
    trace = load_trace(out)
    assert len(expected) >= 1
    assert np.array_equal(trace.final_masks.masks[0], expected.masks[0])
    assert trace.final_masks.scores[0] == pytest.approx(float(expected.scores[0]))


def test_tiny_vlm_run_ends_with_budget_and_still_writes_outputs(tmp_path, capsys):
    out = tmp_path / "out"
    code, stdout, stderr = run_cli(["run", "--preset", "tiny", "--image", COFFEE, "--query", "the cup",
                                    "--out", str(out), "--max-rounds", "2", "--max-new-tokens", "12"], capsys)
    assert code == 4
    assert stderr.strip().splitlines()[-1].startswith("error: max_rounds:")
    assert "random weights" in stdout
    assert load_trace(out).status == "max_rounds"
    assert json.loads((out / "final_masks.json").read_text()) == []
    assert (out / "final_overlay.png").exists()


def test_no_prefix_cache_gives_the_same_rounds_and_is_recorded(tmp_path, capsys):
    rounds = {}
    for flag in ([], ["--no-prefix-cache"]):
        out = tmp_path / ("off" if flag else "on")
        code, _, _ = run_cli(["run", "--preset", "tiny", "--image", COFFEE, "--query", "the cup", "--out", str(out),
                              "--max-rounds", "2", "--max-new-tokens", "12", *flag], capsys)
        assert code == 4
        trace = load_trace(out)
        assert trace.settings["prefix_cache"] is (not flag)
        rounds[bool(flag)] = [r.output for r in trace.rounds]
    # the same text with and without: each request samples from its own seeded generator on either path
    assert len(rounds[False]) == 2 and rounds[True] == rounds[False]


def test_the_input_file_name_is_recorded_and_named_in_coco_exports(tmp_path, capsys, script_file):
    out = tmp_path / "out"
    code, _, stderr = run_cli(["run", "--preset", "tiny", "--image", COFFEE, "--query", "the spoon", "--out", str(out),
                               "--script", str(script_file)], capsys)
    assert code == 0, stderr
    assert load_trace(out).image_name == "coffee.jpg"
    code, _, stderr = run_cli(["export", str(out), "--coco", str(tmp_path / "coco.json")], capsys)
    assert code == 0, stderr
    images = json.loads((tmp_path / "coco.json").read_text())["images"]
    assert images == [{"id": 1, "file_name": "coffee.jpg", "width": 600, "height": 400}]


@pytest.mark.parametrize("rounds", ["0", "101"])
def test_round_budget_outside_1_to_100_is_exit_2_naming_the_bounds(tmp_path, capsys, script_file, rounds):
    code, _, stderr = run_cli(["run", "--preset", "tiny", "--image", COFFEE, "--query", "the spoon",
                               "--out", str(tmp_path / "out"), "--script", str(script_file), "--max-rounds", rounds], capsys)
    assert code == 2
    assert stderr.strip().splitlines() == [f"error: max_rounds must be between 1 and 100, got {rounds}"]


def test_not_an_image_is_exit_2_with_one_line(tmp_path, capsys):
    bad = tmp_path / "notes.txt"
    bad.write_text("hello")
    code, _, stderr = run_cli(["run", "--preset", "tiny", "--image", str(bad), "--query", "x", "--out",
                               str(tmp_path / "o")], capsys)
    assert code == 2
    assert len(stderr.strip().splitlines()) == 1 and "not an image" in stderr.lower()


def test_missing_model_folder_is_exit_3_naming_it(tmp_path, capsys, script_file):
    missing = tmp_path / "no_such_sam3"
    code, _, stderr = run_cli(["run", "--image", COFFEE, "--query", "x", "--out", str(tmp_path / "o"),
                               "--sam3-model", str(missing), "--script", str(script_file)], capsys)
    assert code == 3
    assert "no_such_sam3" in stderr and len(stderr.strip().splitlines()) == 1


def test_malformed_script_is_exit_2(tmp_path, capsys):
    script = tmp_path / "bad.json"
    script.write_text("{not json")
    code, _, stderr = run_cli(["run", "--preset", "tiny", "--image", COFFEE, "--query", "x", "--out",
                               str(tmp_path / "o"), "--script", str(script)], capsys)
    assert code == 2 and "bad.json" in stderr


def test_empty_query_is_exit_2(tmp_path, capsys):
    code, _, stderr = run_cli(["run", "--preset", "tiny", "--image", COFFEE, "--query", "  ", "--out",
                               str(tmp_path / "o")], capsys)
    assert code == 2 and "query is empty" in stderr


@pytest.mark.parametrize("make_out", ["existing_file", "under_a_file"])
def test_unwritable_out_is_exit_2_before_any_model_loads(tmp_path, capsys, script_file, make_out):
    blocker = tmp_path / "afile.txt"
    blocker.write_text("x")
    out = blocker if make_out == "existing_file" else blocker / "sub"
    code, stdout, stderr = run_cli(["run", "--preset", "tiny", "--image", COFFEE, "--query", "the spoon",
                                    "--out", str(out), "--script", str(script_file)], capsys)
    assert code == 2 and "Loading models" not in stdout
    assert stderr.startswith(f"error: cannot write to the output folder {out}") and len(stderr.splitlines()) == 1


def test_script_without_main_responses_is_exit_2(tmp_path, capsys):
    script = tmp_path / "empty.json"
    script.write_text(json.dumps({"main": [], "verify": []}))
    code, _, stderr = run_cli(["run", "--preset", "tiny", "--image", COFFEE, "--query", "x", "--out",
                               str(tmp_path / "o"), "--script", str(script)], capsys)
    assert code == 2 and "no main responses" in stderr


def test_image_over_the_pixel_limit_names_the_flag(tmp_path, capsys):
    code, _, stderr = run_cli(["run", "--preset", "tiny", "--image", COFFEE, "--query", "x", "--out",
                               str(tmp_path / "o"), "--max-image-pixels", "1000"], capsys)
    assert code == 2
    assert "600x400 = 240,000 pixels, above the pixel limit of 1,000" in stderr and "--max-image-pixels" in stderr


def test_photo_too_thin_for_the_model_is_exit_2_before_any_model_loads(tmp_path, capsys):
    from PIL import Image

    strip = tmp_path / "strip.png"
    Image.new("RGB", (4000, 12), (90, 90, 90)).save(strip)
    code, stdout, stderr = run_cli(["run", "--preset", "tiny", "--image", str(strip), "--query", "the line",
                                    "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "Loading models" not in stdout
    assert stderr.startswith("error: the photo is 4000 x 12 pixels") and "crop it" in stderr
    assert len(stderr.splitlines()) == 1


def test_rerun_into_the_same_folder_leaves_no_stale_images(tmp_path, capsys, script_file):
    out = tmp_path / "out"
    assert run_cli(["run", "--preset", "tiny", "--image", COFFEE, "--query", "the spoon", "--out", str(out),
                    "--script", str(script_file)], capsys)[0] == 0
    one_round = tmp_path / "one.json"
    one_round.write_text(json.dumps([tool("report_no_mask")]))
    assert run_cli(["run", "--preset", "tiny", "--image", COFFEE, "--query", "x", "--out", str(out),
                    "--script", str(one_round)], capsys)[0] == 0
    document = json.loads((out / "trace.json").read_text())
    assert [f"images/{p.name}" for p in (out / "images").iterdir()] == [document["photo"]["file"]]
    assert sorted(f"masks/{p.name}" for p in (out / "masks").iterdir()) == sorted(document["mask_files"])


@pytest.mark.slow  # the CLI in a process of its own, to receive a real signal
def test_sigterm_during_a_run_still_writes_a_cancelled_trace(tmp_path):
    import signal
    import subprocess
    import sys

    out = tmp_path / "out"
    process = subprocess.Popen(
        [sys.executable, "-m", "sam3_agent", "run", "--preset", "tiny", "--image", COFFEE, "--query", "the cup",
         "--out", str(out), "--max-rounds", "100", "--max-new-tokens", "12"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    for line in process.stdout:
        if line.startswith("Round 3/"):
            process.send_signal(signal.SIGTERM)
            break
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130
    assert "cancelled: stopped by the user (Ctrl-C or SIGTERM)" in stderr
    trace = load_trace(out)
    assert trace.status == "cancelled" and len(trace.rounds) >= 2


def test_a_full_disk_while_writing_the_overlay_leaves_no_truncated_file(tmp_path, capsys, script_file, monkeypatch):
    import errno

    original = Path.write_bytes

    def disk_fills(self, data):  # the disk fills half-way through the overlay's bytes
        if "final_overlay.png" in self.name:
            original(self, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        return original(self, data)

    monkeypatch.setattr(Path, "write_bytes", disk_fills)
    out = tmp_path / "out"
    code, _, stderr = run_cli(["run", "--preset", "tiny", "--image", COFFEE, "--query", "the spoon", "--out", str(out),
                               "--script", str(script_file)], capsys)
    assert code == EXIT_SAVE and "its outputs could not be written" in stderr and "No space left on device" in stderr
    assert sorted(p.name for p in out.iterdir() if "final" in p.name) == []  # no half-written overlay, no leftovers
