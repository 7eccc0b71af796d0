"""``batch`` with clips and ``eval --format revos`` end to end on the tiny models (SAM 3's real tiny video tracker, a
scripted VLM), and the same video item on a local Ray cluster giving the local result."""

from __future__ import annotations

import json

import av
import numpy as np
import pytest
import torch
from dataset_fixtures import ASSETS
from pycocotools import mask as coco_mask
from revos_layout import write_revos

from sam3_agent.agent.config import AgentConfig
from sam3_agent.cli.main import main
from sam3_agent.datasets.batch.agents import BatchAgents
from sam3_agent.datasets.batch.items import read_items
from sam3_agent.datasets.batch.layout import BatchLayout
from sam3_agent.datasets.batch.ray_runner import run_batch_on_ray
from sam3_agent.datasets.batch.runner import run_batch
from sam3_agent.datasets.batch.video_runner import VideoOptions
from sam3_agent.presets import BackendSettings
from sam3_agent.video.saved import load_video_trace

CLIP = ASSETS / "bigbuckbunny.mp4"  # 50 frames, 480 x 270
SCRIPT = ASSETS / "example_script.json"  # segment, examine, select mask 1
TINY = ("--preset", "tiny", "--script", str(SCRIPT), "--no-progress")


def write_items(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_a_batch_with_a_clip_writes_its_files_and_a_rerun_loads_nothing(tmp_path, capsys):
    items = write_items(tmp_path / "items.jsonl", [
        {"id": "bunny", "video": str(CLIP), "query": "the bunny", "keyframe": 10},
        {"id": "cup", "image": str(ASSETS / "coffee.jpg"), "query": "the cup"}])
    out = tmp_path / "out"
    code = main(["batch", "--input", str(items), "--out", str(out), "--overlay-video", *TINY])
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr
    assert "Batch: 2 item(s): done 2; ran 2" in stdout
    folder = out / "items/bunny"
    trace = load_video_trace(folder)
    assert (trace.status, trace.keyframes[0].frame_index, trace.timings["frames_tracked"]) == ("done", 10, 49)
    assert len(list((folder / "masks").glob("*.png"))) == 50
    (annotation, *others) = json.loads((folder / "tracks_ytvis.json").read_text())["annotations"]
    for frame in (0, 10, 49):
        mask = trace.tracks.mask(annotation["id"], frame)
        rle = annotation["segmentations"][frame]
        assert np.array_equal(coco_mask.decode(rle).astype(bool) if rle else np.zeros_like(mask), mask), frame
    with av.open(str(folder / "overlay.mp4")) as container:
        assert sum(1 for _ in container.decode(video=0)) == 50
    record = json.loads((folder / "item.json").read_text())
    assert (record["kind"], record["frames"], record["frames_tracked"], record["models"]["tracker"]) == (
        "video", 50, 49, trace.settings["tracker"])
    code = main(["batch", "--input", str(items), "--out", str(out), *TINY])
    assert code == 0 and "Nothing to run: all 2 item(s)" in capsys.readouterr().out


def test_a_clip_over_a_cap_refuses_the_batch_before_any_model_loads(tmp_path, capsys):
    items = write_items(tmp_path / "items.jsonl", [{"id": "long", "video": str(CLIP), "query": "the bunny"}])
    code = main(["batch", "--input", str(items), "--out", str(tmp_path / "out"), "--max-frames", "10", *TINY])
    stdout, stderr = capsys.readouterr()
    assert code == 2 and stderr.startswith(f"error: item 'long' ({CLIP}): ") and "nothing was run" in stderr
    assert "Loading models" not in stdout and not (tmp_path / "out").exists()


def test_eval_on_a_revos_layout_runs_every_expression_and_writes_the_report(tmp_path, capsys):
    root = write_revos(tmp_path)
    out = tmp_path / "out"
    code = main(["eval", "--format", "revos", "--dataset", str(root), "--out", str(out), *TINY])
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr
    assert stdout.startswith(f"5 expression(s) from {root} (revos, protocol revos-visa, split valid)")
    assert "Batch: 5 item(s): done 5" in stdout and "note: The models had random weights" in stdout
    metrics = json.loads((out / "eval/metrics.json").read_text())
    assert metrics["protocol"]["name"] == "revos-visa" and len(metrics["expressions"]) == 5
    assert metrics["overall"]["expressions"] == 4 and metrics["unscored"] == []
    assert [e["frames"] for e in metrics["expressions"]] == [3, 3, 3, 2, 2]
    assert f"overall: J {100 * metrics['overall']['J']:.1f}" in stdout
    assert (out / "eval/report.html").is_file() and (out / "eval/expressions.csv").is_file()


@pytest.mark.slow
def test_a_video_item_on_a_local_ray_gives_the_local_result(tmp_path):
    items = read_items(write_items(tmp_path / "items.jsonl", [
        {"id": "bunny", "video": str(CLIP), "query": "the bunny", "keyframe": 10},
        {"id": "cup", "image": str(ASSETS / "coffee.jpg"), "query": "the cup"}]))
    settings = BackendSettings(preset="tiny", script=str(SCRIPT), device="cpu")
    config = AgentConfig()
    local = BatchLayout(tmp_path / "local", items)
    local.prepare()
    agents = BatchAgents.load(settings, config, video=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in a Ray worker given one CPU (OMP_NUM_THREADS=1): the same sums in the same order
    try:
        run_batch(items, local, agents)
    finally:
        torch.set_num_threads(threads)
    ray_layout = BatchLayout(tmp_path / "ray", items)
    result = run_batch_on_ray(items, ray_layout, settings, config, workers=1, init_options={"num_cpus": 2},
                              video=VideoOptions(overlay_video=True))
    assert result.summary["statuses"] == {"done": 2}
    here, there = load_video_trace(tmp_path / "local/items/bunny"), load_video_trace(tmp_path / "ray/items/bunny")
    assert there.clip == here.clip  # the worker's copy of the clip has the driver's identity
    assert here.tracks.object_ids() == there.tracks.object_ids() == [1]
    assert all(here.tracks.masks_on(f) == there.tracks.masks_on(f) for f in range(50))
    assert (tmp_path / "ray/items/bunny/overlay.mp4").is_file()  # drawn by the driver from its copy
