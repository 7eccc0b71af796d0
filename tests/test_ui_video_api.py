"""``/segment_video`` through gradio_client: the app launched in-process on the tiny models (SAM 3, its video
tracker) with a scripted VLM; the bundled real clip in, files whose frame counts match the clip out; cancel stops it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import av
import numpy as np
import pytest
from conftest import ASSETS
from test_ui_api import free_port

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from gradio_client import Client, handle_file

from sam3_agent.presets import BackendSettings
from sam3_agent.rle import decode_rle
from sam3_agent.ui.layout import create_demo, launch
from sam3_agent.ui.settings import AppSettings
from sam3_agent.video.run import VideoAgent
from sam3_agent.video.saved import load_video_trace_zip

CLIP = ASSETS / "bigbuckbunny.mp4"  # 50 frames, 480 x 270
SCRIPT = Path(__file__).resolve().parent / "data" / "video_script.json"


def _app(**extra):
    settings = AppSettings(BackendSettings(preset="tiny", script=str(SCRIPT)), max_rounds=10, port=free_port(),
                           **extra)
    demo, handlers = create_demo(settings)
    launch(demo, settings, prevent_thread_lock=True, quiet=True)
    return settings, demo, handlers


@pytest.fixture(scope="module")
def app_url():
    settings, demo, handlers = _app(concurrency=2)
    yield f"http://127.0.0.1:{settings.port}/"
    demo.close()
    handlers.close()


def test_segment_video_answers_with_files_of_every_frame_of_the_clip(app_url):
    client = Client(app_url, verbose=False)
    ytvis_path, trace_path, overlay_path = client.predict(handle_file(str(CLIP)), "the rabbit", 12,
                                                          api_name="/segment_video")
    trace = load_video_trace_zip(trace_path)
    assert trace.status == "done" and trace.query == "the rabbit" and trace.clip.frame_count == 50
    assert [k.frame_index for k in trace.keyframes] == [12] and trace.tracks.object_ids() == [1]
    document = json.loads(Path(ytvis_path).read_text())
    assert document["videos"][0]["length"] == 50
    segmentations = document["annotations"][0]["segmentations"]
    assert len(segmentations) == 50
    frame = next(i for i, s in enumerate(segmentations) if s is not None)
    assert np.array_equal(decode_rle([segmentations[frame]])[0].astype(bool), trace.tracks.mask(1, frame))
    with av.open(str(overlay_path)) as container:
        assert sum(1 for _ in container.decode(video=0)) == 50


def test_segment_video_shows_its_parameters(app_url):
    api = Client(app_url, verbose=False).view_api(return_format="dict", print_info=False)
    endpoint = api["named_endpoints"]["/segment_video"]
    assert len(endpoint["parameters"]) == 3 and len(endpoint["returns"]) == 3


def test_a_keyframe_outside_the_clip_is_refused_in_words(app_url):
    with pytest.raises(Exception, match="frame 50"):
        Client(app_url, verbose=False).predict(handle_file(str(CLIP)), "the rabbit", 50, api_name="/segment_video")


def test_a_cancelled_segment_video_job_stops_its_run(monkeypatch):
    runs = []
    original = VideoAgent.start

    def recording(self, *args, **kwargs):
        runs.append(original(self, *args, **kwargs))
        return runs[-1]

    monkeypatch.setattr(VideoAgent, "start", recording)
    settings, demo, handlers = _app(concurrency=1, script_piece_delay=0.05)  # the keyframe's replies stream slowly
    try:
        client = Client(f"http://127.0.0.1:{settings.port}/", verbose=False)
        job = client.submit(handle_file(str(CLIP)), "the rabbit", 0, api_name="/segment_video")
        deadline = time.monotonic() + 120

        def streaming() -> bool:  # the keyframe's first round is done: the job has yielded (and can be cancelled)
            agent_run = runs[0]._agent_run if runs else None
            return agent_run is not None and len(agent_run.trace.rounds) >= 1

        while not streaming() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert streaming() and runs[0].trace.status == "running"
        job.cancel()
        cancelled = time.monotonic()
        trace = runs[0].trace
        while trace.status == "running" and time.monotonic() - cancelled < 120:  # what is waited for is the status
            time.sleep(0.1)
        assert trace.status == "cancelled"
        assert trace.timings.get("frames_tracked", 0) < 49  # stopped, not run to the end
    finally:
        demo.close()
        handlers.close()
