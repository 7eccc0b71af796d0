"""``export`` on a saved video trace: palette PNGs, YouTube-VIS JSON and an overlay video from the clip it was made on
(another clip refused before anything is written); the corrected masks as stored; photo-only flags refused on a video
trace and video flags on a photo's. The run is on the bundled clip with the tracker double (2 px a frame)."""

from __future__ import annotations

import json

import av
import numpy as np
import pytest
from conftest import KnownSegmenter, people_run, rect_mask, tool, verdict
from PIL import Image
from video_doubles import ShiftTracker

from sam3_agent.agent.loop import Agent
from sam3_agent.cli.main import main
from sam3_agent.package_files import ASSETS_DIR
from sam3_agent.trace.io import save_trace
from sam3_agent.video.clip import open_clip
from sam3_agent.video.corrections import VideoEditor
from sam3_agent.video.export import id_map, ytvis_document
from sam3_agent.video.run import VideoAgent
from sam3_agent.video.saved import save_video_trace
from sam3_agent.vlm.scripted import ScriptedVLM

CLIP = ASSETS_DIR / "bigbuckbunny.mp4"  # 50 frames, 480 x 270
H, W = 270, 480
BUNNY = (100, 100, 160, 150)
FIX = (300, 50, 340, 90)  # a person's mask for the bunny on frame 40


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A video trace of the bundled clip (keyframe 10), corrected by hand on frame 40, saved; (folder, trace)."""
    folder = tmp_path_factory.mktemp("video") / "run"
    agent = Agent(ScriptedVLM([tool("segment_phrase", text_prompt="bunny"),
                               tool("select_masks_and_return", final_answer_masks=[1])]),
                  KnownSegmenter({"bunny": [(BUNNY, 0.9)]}), verifier=ScriptedVLM([verdict("Accept")]))
    tracker = ShiftTracker()
    with open_clip(CLIP) as clip:
        run = VideoAgent(agent, tracker).start(clip, "the bunny", keyframes=[10])
        list(run)
        list(VideoEditor(run.trace, clip, tracker).replace(1, 40, rect_mask(H, W, *FIX)))
    save_video_trace(run.trace, folder)
    return folder, run.trace


def export(*argv: str) -> int:
    return main(["export", *map(str, argv)])


def test_png_dir_and_ytvis_hold_the_corrected_masks(saved, tmp_path, capsys):
    folder, trace = saved
    code = export(folder, "--png-dir", tmp_path / "pngs", "--ytvis", tmp_path / "tracks.json")
    out = capsys.readouterr().out
    assert code == 0
    assert out == (f"1 object(s) over 50 frame(s), 1 correction(s) already in the masks; wrote 50 palette PNG(s) in "
                   f"{tmp_path / 'pngs'}, {tmp_path / 'tracks.json'}\n")
    fixed = np.asarray(Image.open(tmp_path / "pngs/00040.png"))
    assert np.array_equal(fixed, rect_mask(H, W, *FIX).astype(np.uint8))  # the person's mask, not the tracker's
    for frame in (0, 25, 45):
        assert np.array_equal(np.asarray(Image.open(tmp_path / f"pngs/{frame:05d}.png")), id_map(trace.tracks, frame))
    assert json.loads((tmp_path / "tracks.json").read_text()) == ytvis_document(trace)


def test_an_overlay_video_from_the_clip_the_trace_was_made_on(saved, tmp_path, capsys):
    folder, _ = saved
    code = export(folder / "video_trace.json", "--overlay-video", tmp_path / "overlay.mp4", "--video", CLIP)
    assert code == 0, capsys.readouterr().err
    with av.open(str(tmp_path / "overlay.mp4")) as container:
        assert sum(1 for _ in container.decode(video=0)) == 50


def test_another_clip_is_refused_before_anything_is_written(saved, tmp_path, capsys):
    folder, trace = saved
    frames = tmp_path / "frames"  # the same 50 frames, saved as PNG files: the same count and size, other bytes
    frames.mkdir()
    with open_clip(CLIP) as clip:
        for index, image in clip.frames(range(50)):
            image.save(frames / f"{index:03d}.png")
    code = export(folder, "--png-dir", tmp_path / "pngs", "--overlay-video", tmp_path / "o.mp4", "--video", frames)
    err = capsys.readouterr().err
    assert code == 2
    assert err == (f"error: --video {frames} is not the clip this trace was made on (bigbuckbunny.mp4, 50 frames): "
                   f"its contents differ (sha256 {open_clip(frames).info.sha256[:12]}... where the trace's clip has "
                   f"{trace.clip.sha256[:12]}...); give that clip\n")
    assert not (tmp_path / "pngs").exists() and not (tmp_path / "o.mp4").exists()
    short = tmp_path / "short"
    short.mkdir()
    for name in ("000.png", "001.png"):
        (short / name).write_bytes((frames / name).read_bytes())
    assert export(folder, "--overlay-video", tmp_path / "o.mp4", "--video", short) == 2
    assert "it has 2 frames where the trace's has 50" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--coco", "c.json", "--yolo", "y"], "error: --coco, --yolo are for a photo's trace, and {trace} is a video "
                                              "trace: use --png-dir DIR (palette PNGs), --ytvis FILE, --overlay-video "
                                              "FILE --video CLIP\n"),
        (["--bundle", "b.zip"], "error: --bundle is for a photo's trace"),
        ([], "error: nothing to write: give --png-dir DIR (palette PNGs), --ytvis FILE, --overlay-video FILE --video "
             "CLIP\n"),
        (["--overlay-video", "o.mp4"], "error: --overlay-video needs --video CLIP"),
        (["--ytvis", "t.json", "--video", str(CLIP)], "error: --video is only read for --overlay-video FILE"),
    ],
)
def test_flags_that_do_not_apply_to_a_video_trace_are_refused(saved, tmp_path, capsys, monkeypatch, extra, message):
    folder, _ = saved
    monkeypatch.chdir(tmp_path)
    assert export(folder, *extra) == 2
    assert capsys.readouterr().err.startswith(message.format(trace=folder))
    assert list(tmp_path.iterdir()) == []


def test_video_flags_on_a_photos_trace_are_refused(tmp_path, capsys):
    save_trace(people_run(), tmp_path / "photo")
    assert export(tmp_path / "photo", "--ytvis", tmp_path / "t.json", "--coco", tmp_path / "c.json") == 2
    assert capsys.readouterr().err == (f"error: --ytvis is for a video trace, and {tmp_path / 'photo'} is not one: for a "
                                       "photo's trace use --coco FILE, --coco-polygons FILE, --yolo DIR, --png-dir DIR "
                                       "and/or --bundle FILE\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["photo"]


def test_an_unwritable_path_names_the_flag(saved, tmp_path, capsys):
    folder, _ = saved
    (tmp_path / "file").write_text("")
    assert export(folder, "--ytvis", tmp_path / "file" / "t.json") == 2
    assert capsys.readouterr().err.startswith(f"error: cannot write --ytvis {tmp_path / 'file' / 't.json'}: ")
