"""Video items in a batch: each runs the video agent on the real bundled clip (a scripted VLM over known rectangles,
a tracker double moving each mask 2 px right a frame) and its folder gets what ``video --out`` writes; records and
the manifest say kind, objects and frames tracked; resumable as photos are; the review queue lists clips apart."""

from __future__ import annotations

import json
import shutil
import signal

import av
import numpy as np
import pytest
from conftest import rect_mask
from dataset_fixtures import ASSETS, KnownAgents
from PIL import Image
from pycocotools import mask as coco_mask
from video_doubles import TRACKED_SCORE, ShiftTracker, shifted

from sam3_agent.datasets.batch.items import read_items
from sam3_agent.datasets.batch.layout import BatchLayout
from sam3_agent.datasets.batch.records import STOP_REASON
from sam3_agent.datasets.batch.runner import run_batch
from sam3_agent.datasets.batch.video_runner import VideoOptions
from sam3_agent.datasets.review.queue import VIDEO_NOT_REVIEWED, ReviewQueue
from sam3_agent.video.run import VideoConfig
from sam3_agent.video.saved import load_video_trace

CLIP = ASSETS / "bigbuckbunny.mp4"  # 50 frames, 480 x 270
H, W = 270, 480
BUNNY = (100, 100, 160, 150)  # the bunny's box on the keyframe, xyxy
PHRASES = {"the bunny": "bunny", "the cup": "cup", "nothing here": None}
DETECTIONS = {"bunny": [(BUNNY, 0.9)], "cup": [((200, 40, 420, 310), 0.9)]}


def bunny_on(frame: int, keyframe: int = 10) -> np.ndarray:
    """The bunny's mask on ``frame`` as the tracker double carries it: the keyframe's box moved 2 px a frame."""
    return shifted(rect_mask(H, W, *BUNNY), 2 * (frame - keyframe), 0)


def write_items(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.fixture
def items(tmp_path):
    return read_items(write_items(tmp_path / "items.jsonl", [
        {"id": "bunny", "video": str(CLIP), "query": "the bunny", "keyframe": 10},
        {"id": "cup", "image": str(ASSETS / "coffee.jpg"), "query": "the cup"},
        {"id": "empty", "video": str(CLIP), "query": "nothing here", "keyframe_time": 1.0}]))


def agents(**kwargs) -> KnownAgents:
    known = KnownAgents(PHRASES, DETECTIONS, **kwargs)
    known.tracker = ShiftTracker()
    return known


def batch(items, out, source, **kwargs):
    layout = BatchLayout(out, items)
    layout.prepare()
    return layout, run_batch(items, layout, source, **kwargs)


def test_a_video_items_folder_holds_what_the_video_command_writes(items, tmp_path):
    _, result = batch(items, tmp_path / "out", agents())
    folder = tmp_path / "out/items/bunny"
    assert sorted(p.name for p in folder.iterdir()) == ["item.json", "keyframes", "masks", "tracks_ytvis.json",
                                                        "video_trace.json"]  # no overlay.mp4 unless asked
    pngs = sorted(p.name for p in (folder / "masks").iterdir())
    assert pngs == [f"{f:05d}.png" for f in range(50)]
    trace = load_video_trace(folder)
    ytvis = json.loads((folder / "tracks_ytvis.json").read_text())
    (annotation,) = ytvis["annotations"]
    for frame in (0, 10, 33, 49):
        expected = bunny_on(frame)
        assert np.array_equal(trace.tracks.mask(1, frame), expected), frame
        assert np.array_equal(np.asarray(Image.open(folder / "masks" / f"{frame:05d}.png")), expected.astype(np.uint8))
        assert np.array_equal(coco_mask.decode(annotation["segmentations"][frame]).astype(bool), expected)
    assert trace.keyframes[0].frame_index == 10 and trace.tracks.objects[1].masks[11].score == TRACKED_SCORE


def test_records_and_the_manifest_say_kind_objects_and_frames_tracked(items, tmp_path):
    _, result = batch(items, tmp_path / "out", agents())
    record = json.loads((tmp_path / "out/items/bunny/item.json").read_text())
    record.pop("seconds")
    assert record == {
        "format": "sam3_agent.batch_item", "version": 1, "id": "bunny", "image": None, "query": "the bunny",
        "status": "done", "reason": None, "rounds": 2, "mistakes": {}, "width": 480, "height": 270,
        "trace": "video_trace.json", "masks": [],
        "models": {"vlm": "scripted", "verifier": "scripted", "segmenter": "known-segmenter", "preset": "test",
                   "tracker": "shift-tracker"},
        "kind": "video", "video": str(CLIP), "keyframe": 10, "keyframe_time": None, "frames": 50, "objects": 1,
        "frames_tracked": 49,
        "deviations": ["own_prompts", "context_rules", "reply_repairs", "verdict_grammar", "verifier_views",
                       "no_mask_cap", "selection_checks", "round_budget"]}
    photo = json.loads((tmp_path / "out/items/cup/item.json").read_text())
    assert "kind" not in photo and photo["image"] == str(ASSETS / "coffee.jpg")  # a photo's record as before
    manifest = json.loads((tmp_path / "out/manifest.json").read_text())
    assert manifest["items"] == [
        {"id": "bunny", "kind": "video", "video": str(CLIP), "query": "the bunny", "keyframe": 10,
         "folder": "items/bunny", "trace": "items/bunny/video_trace.json", "status": "done", "reason": None,
         "objects": 1, "frames_tracked": 49},
        {"id": "cup", "kind": "image", "image": str(ASSETS / "coffee.jpg"), "query": "the cup", "folder": "items/cup",
         "trace": "items/cup/trace.json", "status": "done", "reason": None},
        {"id": "empty", "kind": "video", "video": str(CLIP), "query": "nothing here", "keyframe": 25,
         "folder": "items/empty", "trace": "items/empty/video_trace.json", "status": "no_mask", "reason": None,
         "objects": 0, "frames_tracked": 0}]
    summary = result.summary
    assert (summary["statuses"], summary["kinds"], summary["frames_tracked"]) == (
        {"done": 2, "no_mask": 1}, {"image": 1, "video": 2}, 49)
    coco = json.loads((tmp_path / "out/coco.json").read_text())
    assert [i["file_name"] for i in coco["images"]] == [str(ASSETS / "coffee.jpg")]  # photos only


def test_the_newcomer_mode_passes_through_to_every_clip(items, tmp_path):
    known = agents()
    known.tracker = ShiftTracker(dx=0)  # the bunny stays where the detector finds it: never a newcomer
    options = VideoOptions(config=VideoConfig(newcomers=True, detect_every=5, max_newcomer_checks=3))
    batch(items[:1], tmp_path / "out", known, video=options)
    trace = load_video_trace(tmp_path / "out/items/bunny")
    assert (trace.settings["newcomers"], trace.settings["detect_every"], trace.settings["max_newcomer_checks"]) == (
        True, 5, 3)
    # the keyframe run's phrase once, then the detector on the tracked frames 0, 5, 15, ..., 45 (10 is the keyframe)
    assert known.segmenter.calls == ["bunny"] * 10 and trace.checks == []  # its one candidate is the bunny itself


def test_the_overlay_video_is_written_only_when_asked(items, tmp_path):
    batch(items[:1], tmp_path / "out", agents(), video=VideoOptions(overlay_video=True))
    with av.open(str(tmp_path / "out/items/bunny/overlay.mp4")) as container:
        assert sum(1 for _ in container.decode(video=0)) == 50


def test_a_rerun_skips_finished_video_items_and_runs_a_changed_keyframe_again(items, tmp_path):
    first = agents()
    batch(items, tmp_path / "out", first)
    kept = (tmp_path / "out/items/bunny/item.json").read_bytes()
    again = agents()
    _, result = batch(items, tmp_path / "out", again)
    assert (result.ran, result.skipped, again.created, again.tracker.calls) == (0, 3, 0, [])
    assert (tmp_path / "out/items/bunny/item.json").read_bytes() == kept
    moved = read_items(write_items(tmp_path / "moved.jsonl", [
        {"id": "bunny", "video": str(CLIP), "query": "the bunny", "keyframe": 20}]))
    later = agents()
    _, result = batch(moved, tmp_path / "out", later)
    assert (result.ran, later.tracker.calls) == (1, [(20, (1,), False, 29), (20, (1,), True, 20)])
    assert np.array_equal(load_video_trace(tmp_path / "out/items/bunny").tracks.mask(1, 0), bunny_on(0, 20))


def test_an_item_whose_record_never_got_written_runs_again(items, tmp_path):
    batch(items, tmp_path / "out", agents())
    (tmp_path / "out/items/bunny/item.json").unlink()  # killed after its files, before its record
    again = agents()
    _, result = batch(items, tmp_path / "out", again)
    assert (result.ran, result.skipped, len(again.tracker.calls)) == (1, 2, 2)
    assert json.loads((tmp_path / "out/items/bunny/item.json").read_text())["status"] == "done"


@pytest.fixture
def python_ctrl_c():
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_during_a_video_item_writes_it_cancelled_and_a_rerun_finishes_it(items, tmp_path, python_ctrl_c):
    _, result = batch(items, tmp_path / "out", agents(interrupt_at=1))  # Ctrl-C as the clip's agent starts
    assert result.stopped and result.ran == 1
    record = json.loads((tmp_path / "out/items/bunny/item.json").read_text())
    assert (record["kind"], record["status"], record["reason"]) == ("video", "cancelled", STOP_REASON)
    trace = load_video_trace(tmp_path / "out/items/bunny")
    assert (trace.status, trace.error) == ("cancelled", STOP_REASON)
    _, result = batch(items, tmp_path / "out", agents())
    assert (result.ran, result.skipped, result.summary["statuses"]) == (3, 0, {"done": 2, "no_mask": 1})
    assert np.array_equal(load_video_trace(tmp_path / "out/items/bunny").tracks.mask(1, 49), bunny_on(49))


def test_a_clip_gone_before_its_turn_fails_that_item_alone(tmp_path):
    shutil.copy(CLIP, tmp_path / "clip.mp4")
    items = read_items(write_items(tmp_path / "items.jsonl", [
        {"id": "gone", "video": "clip.mp4", "query": "the bunny"},
        {"id": "cup", "image": str(ASSETS / "coffee.jpg"), "query": "the cup"}]))
    (tmp_path / "clip.mp4").unlink()
    _, result = batch(items, tmp_path / "out", agents(), concurrency=2)
    assert result.summary["statuses"] == {"done": 1, "failed": 1}
    record = json.loads((tmp_path / "out/items/gone/item.json").read_text())
    assert (record["kind"], record["status"], record["trace"]) == ("video", "failed", None)
    assert record["reason"] == "clip not found: 'clip.mp4'; check the path"


def test_the_review_queue_lists_video_items_apart_and_keeps_the_batchs_coco_ids(items, tmp_path):
    batch(items, tmp_path / "out", agents())
    queue = ReviewQueue.open(tmp_path / "out")
    assert [item.id for item in queue.items] == ["cup"]
    assert [(s.id, s.image, s.status, s.reason) for s in queue.skipped] == [
        ("bunny", str(CLIP), "done", VIDEO_NOT_REVIEWED), ("empty", str(CLIP), "no_mask", VIDEO_NOT_REVIEWED)]
    batch_coco = json.loads((tmp_path / "out/coco.json").read_text())
    assert queue.image_ids() == {"cup": batch_coco["images"][0]["id"]} == {"cup": 1}
