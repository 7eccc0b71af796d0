"""A saved video trace in the Inspect tab, without a model or the clip: the keyframe's rounds as a photo's, the tracks
scrubber (each frame's objects; a keyframe on its own picture, the other frames on grey) and the objects table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_ui_video_handlers import KEYFRAME, QUERY, finished, make_handlers, opened, rabbit_on, skipped, status_words

from sam3_agent.ui.video.frames import NO_CLIP_GREY
from sam3_agent.video.export import draw_objects
from sam3_agent.video.saved import load_video_trace_zip


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A finished run's video trace .zip, as the Video tab offers it."""
    handlers, _ = make_handlers(tmp_path_factory.mktemp("video"))
    key = opened(handlers.video)
    finished(handlers.video, key)
    files = list(handlers.video.downloads(key))[-1][4]
    path = Path(tmp_path_factory.mktemp("saved")) / "video_trace.zip"
    path.write_bytes(Path(files[2]).read_bytes())
    handlers.close()
    return path


def test_a_video_trace_opens_with_its_keyframes_rounds(tmp_path, saved):
    handlers, _ = make_handlers(tmp_path)
    key, status, number, navigation, overlay, masks = handlers.inspect.load_trace(str(saved))
    assert status_words(status) == (
        f"Video trace of {QUERY!r} on bigbuckbunny.mp4 (50 frames of 480x270). Done: 1 object over 50 frames (keyframe "
        "10, 2 rounds, 49 frames tracked). The rounds below are the agent's on keyframe 10; the tracks scrubber shows "
        "every frame's objects.")
    assert navigation == {"__type__": "update", "visible": True}
    round_html, context, timeline, _ = handlers.inspect.show_round(key, 1)
    assert "segment_phrase" in round_html and "Context of round 1" in context and 'data-round="2"' in timeline


def test_the_tracks_scrubber_draws_each_frames_objects_on_grey_and_the_keyframe_on_its_picture(tmp_path, saved):
    handlers, _ = make_handlers(tmp_path)
    key = handlers.inspect.load_trace(str(saved))[0]
    group, slider, image, caption, table = handlers.inspect.show_tracks(key)
    assert group == {"__type__": "update", "visible": True} and slider["maximum"] == 49
    assert caption == "Frame 0 of 0-49 · 0.00 s (masks only: the clip is not in the trace)"
    pixels = np.asarray(image)
    outside = ~rabbit_on(0)
    assert (pixels[outside] == NO_CLIP_GREY).all()  # no picture where no object is
    assert 'data-object="1"' in table and "<td>0</td><td>49</td><td>50</td>" in table
    image, caption = handlers.inspect.track_frame(key, KEYFRAME)
    assert caption == "Frame 10 of 0-49 · 0.40 s (a keyframe: its own picture)"
    trace = load_video_trace_zip(saved)
    expected = draw_objects(trace.keyframes[0].trace.image, trace.tracks.masks_on(KEYFRAME))
    assert np.array_equal(np.asarray(image), np.asarray(expected))
    assert all(skipped(v) for v in handlers.inspect.track_frame(key, 50))


def test_a_photos_trace_hides_the_tracks(tmp_path):
    from conftest import people_run

    from sam3_agent.trace.io import trace_files, zip_files

    path = tmp_path / "trace.zip"
    path.write_bytes(zip_files(trace_files(people_run())))
    handlers, _ = make_handlers(tmp_path)
    key = handlers.inspect.load_trace(str(path))[0]
    group = handlers.inspect.show_tracks(key)[0]
    assert group == {"__type__": "update", "visible": False}
