"""The ``video`` command end to end on the bundled real clip, with the tiny models and a scripted VLM."""

from __future__ import annotations

import json

import av
import numpy as np
import pytest
from conftest import ASSETS
from PIL import Image
from pycocotools import mask as coco_mask

from sam3_agent.cli import video as video_cli
from sam3_agent.cli.main import main
from sam3_agent.errors import EXIT_INPUT, EXIT_STOPPED
from sam3_agent.video.export import id_map
from sam3_agent.video.saved import load_video_trace

CLIP = str(ASSETS / "bigbuckbunny.mp4")  # 50 frames, 480 x 270, 25 fps
SCRIPT = str(ASSETS / "video_script.json")


def _video(out, *extra):
    return ["video", "--preset", "tiny", "--video", CLIP, "--query", "the rabbit", "--out", str(out),
            "--script", SCRIPT, *extra]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("video") / "out"
    code = main(_video(out, "--keyframe", "20"))
    return code, out


def test_a_run_writes_the_trace_one_png_per_frame_the_ytvis_json_and_the_overlay_video(finished):
    code, out = finished
    assert code == 0
    trace = load_video_trace(out)
    assert trace.status == "done" and trace.clip.frame_count == 50 and trace.clip.file_name == "bigbuckbunny.mp4"
    assert [k.frame_index for k in trace.keyframes] == [20] and trace.tracks.object_ids() == [1]
    assert trace.timings["frames_tracked"] == 49
    pngs = sorted((out / "masks").iterdir())
    assert [p.name for p in pngs] == [f"{f:05d}.png" for f in range(50)]
    for frame in (0, 20, 49):
        assert np.array_equal(np.asarray(Image.open(pngs[frame])), id_map(trace.tracks, frame))
    document = json.loads((out / "tracks_ytvis.json").read_text())
    segmentations = document["annotations"][0]["segmentations"]
    assert len(segmentations) == 50
    for frame, segmentation in enumerate(segmentations):
        expected = trace.tracks.mask(1, frame)
        if segmentation is None:
            assert not expected.any()
        else:
            decoded = coco_mask.decode({"size": segmentation["size"], "counts": segmentation["counts"].encode()})
            assert np.array_equal(decoded.astype(bool), expected), frame
    with av.open(str(out / "overlay.mp4")) as container:
        stream = container.streams.video[0]
        assert stream.codec_context.name == "h264" and (stream.width, stream.height) == (480, 270)
        assert sum(1 for _ in container.decode(stream)) == 50


def test_the_keyframe_run_is_saved_as_an_image_trace_of_its_frame(finished):
    _, out = finished
    trace = load_video_trace(out)
    keyframe = trace.keyframes[0].trace
    assert [r.call.name for r in keyframe.rounds] == ["segment_phrase", "examine_each_mask", "select_masks_and_return"]
    assert keyframe.image.size == (480, 270) and keyframe.image_name == "bigbuckbunny_frame00020.png"
    assert (out / "keyframes" / "00020" / "trace.json").is_file()


def test_the_run_prints_the_rounds_and_the_tracking(tmp_path, capsys):
    assert main(_video(tmp_path / "o", "--keyframe-time", "0.5", "--no-overlay-video")) == 0
    captured = capsys.readouterr()
    assert "Clip: bigbuckbunny.mp4, 50 frames, 480 x 270, 25 fps; keyframe 12" in captured.out
    assert "Keyframe 12 (0.48 s): the agent reasons" in captured.out
    assert 'call: segment_phrase(text_prompt="rabbit")' in captured.out
    assert "Objects: 1 new, none matched on frame 12" in captured.out
    assert "Done: done, 1 object(s), 49 frame(s) tracked" in captured.out
    assert "Tracking" in captured.err and "49/49" in captured.err
    assert not (tmp_path / "o" / "overlay.mp4").exists()


@pytest.mark.parametrize(("extra", "message"), [
    (["--keyframe", "50"], "--keyframe 50 is not in the clip: its frames are numbered 0 to 49"),
    (["--keyframe-time", "2.5"], "2.5 s is outside the clip"),
    (["--max-frames", "10"], "10"),
    (["--detect-every", "0"], "detect_every must be at least 1"),
])
def test_bad_video_inputs_are_refused_before_any_model_loads(tmp_path, capsys, extra, message):
    out = tmp_path / "out"
    assert main(_video(out, *extra)) == EXIT_INPUT
    captured = capsys.readouterr()
    assert message in captured.err and "Loading models" not in captured.out
    assert not out.exists()


def test_a_file_that_is_not_a_clip_is_refused_in_words(tmp_path, capsys):
    text = tmp_path / "notes.mp4"
    text.write_text("not a video")
    argv = _video(tmp_path / "out")
    argv[argv.index(CLIP)] = str(text)
    assert main(argv) == EXIT_INPUT
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "notes.mp4" in err and "Traceback" not in err


def test_ctrl_c_during_tracking_writes_every_frame_tracked(tmp_path, monkeypatch, capsys):
    seen = []
    original = video_cli.TrackingBar.__call__

    def interrupt(self, event):
        original(self, event)
        if type(event).__name__ == "FrameTracked":
            seen.append(event.frame_index)
            if len(seen) == 10:
                raise KeyboardInterrupt

    monkeypatch.setattr(video_cli.TrackingBar, "__call__", interrupt)
    out = tmp_path / "out"
    assert main(_video(out, "--keyframe", "20", "--no-overlay-video")) == EXIT_STOPPED
    trace = load_video_trace(out)
    assert trace.status == "cancelled"
    assert sorted(trace.tracks.objects[1].masks) == sorted([20, *seen])
    assert len(list((out / "masks").iterdir())) == 50
    assert "cancelled" in capsys.readouterr().err
