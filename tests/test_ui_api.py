"""The app's API through gradio_client: the app launched in-process on the tiny models with a script."""

from __future__ import annotations

import json
import logging
import os
import socket
from pathlib import Path

import pytest
from conftest import ASSETS

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from gradio_client import Client, handle_file

from sam3_agent.presets import BackendSettings
from sam3_agent.rle import decode_rle
from sam3_agent.trace.io import load_trace
from sam3_agent.ui.layout import create_demo, launch
from sam3_agent.ui.settings import AppSettings

SCRIPT = Path(__file__).resolve().parent / "data" / "ui_script.json"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def app_url():
    """The app on the tiny preset with the test script, two runs at a time (to let sessions overlap)."""
    settings = AppSettings(BackendSettings(preset="tiny", script=str(SCRIPT)), max_rounds=10, concurrency=2,
                           port=free_port())
    demo, handlers = create_demo(settings)
    launch(demo, settings, prevent_thread_lock=True, quiet=True)
    yield f"http://127.0.0.1:{settings.port}/"
    demo.close()
    handlers.close()


def test_segment_returns_coco_masks_at_the_image_size_and_the_trace(app_url):
    client = Client(app_url, verbose=False)
    masks_path, trace_path = client.predict(handle_file(str(ASSETS / "coffee.jpg")), "the cup on the saucer",
                                            api_name="/segment")
    results = json.loads(Path(masks_path).read_text())
    assert len(results) == 1
    masks = decode_rle([r["segmentation"] for r in results])
    assert masks.shape == (1, 400, 600) and masks.any()
    assert results[0]["area"] == int(masks[0].sum())
    trace = load_trace(trace_path)
    assert trace.status == "done" and trace.query == "the cup on the saucer" and trace.image.size == (600, 400)
    assert [r.call.name for r in trace.rounds] == ["segment_phrase", "segment_phrase", "examine_each_mask",
                                                   "select_masks_and_return"]


def test_segment_reports_bad_input_as_an_error(app_url):
    client = Client(app_url, verbose=False)
    with pytest.raises(Exception, match="the query is empty"):
        client.predict(handle_file(str(ASSETS / "coffee.jpg")), "  ", api_name="/segment")


def test_two_clients_at_once_get_their_own_images_queries_and_results(app_url):
    first, second = Client(app_url, verbose=False), Client(app_url, verbose=False)
    job_a = first.submit(handle_file(str(ASSETS / "astronaut.jpg")), "the flag on her shoulder", api_name="/segment")
    job_b = second.submit(handle_file(str(ASSETS / "rocket.jpg")), "the rocket", api_name="/segment")
    (masks_a, trace_a), (masks_b, trace_b) = job_a.result(timeout=120), job_b.result(timeout=120)
    a, b = load_trace(trace_a), load_trace(trace_b)
    assert (a.query, a.image.size) == ("the flag on her shoulder", (512, 512))
    assert (b.query, b.image.size) == ("the rocket", (640, 427))
    assert decode_rle([r["segmentation"] for r in json.loads(Path(masks_a).read_text())]).shape[1:] == (512, 512)
    assert decode_rle([r["segmentation"] for r in json.loads(Path(masks_b).read_text())]).shape[1:] == (427, 640)
    # every image in each trace is the size of its own photo (overlays, mask views)
    assert {m.images[0].image.size for m in a.messages if m.images} == {(512, 512)}
    assert {m.images[0].image.size for m in b.messages if m.images} == {(640, 427)}


def test_the_api_shows_only_the_segment_endpoints(app_url):
    api = Client(app_url, verbose=False).view_api(return_format="dict", print_info=False)
    assert list(api["named_endpoints"]) == ["/segment", "/segment_video"]
    segment = api["named_endpoints"]["/segment"]
    assert [p["parameter_name"] for p in segment["parameters"]] == ["image", "query"]
    assert len(segment["returns"]) == 2


def test_an_uploaded_transparent_png_reaches_the_agent_composited_on_white(app_url, tmp_path):
    from PIL import Image

    rgba = Image.open(ASSETS / "chelsea.jpg").convert("RGBA")
    rgba.putpixel((0, 0), (10, 20, 30, 0))  # one fully transparent pixel
    path = tmp_path / "cat.png"
    rgba.save(path)
    _, trace_path = Client(app_url, verbose=False).predict(handle_file(str(path)), "the cat", api_name="/segment")
    image = load_trace(trace_path).image
    assert image.mode == "RGB" and image.size == (451, 300)
    assert image.getpixel((0, 0)) == (255, 255, 255)


def test_an_iphone_heic_photo_runs_like_any_other(app_url, tmp_path):
    from PIL import Image

    path = tmp_path / "IMG_0001.HEIC"
    Image.open(ASSETS / "coffee.jpg").save(path, "HEIF", quality=90)
    _, trace_path = Client(app_url, verbose=False).predict(handle_file(str(path)), "the cup", api_name="/segment")
    trace = load_trace(trace_path)
    assert trace.image.size == (600, 400) and trace.image_name == "IMG_0001.HEIC" and trace.status == "done"


@pytest.mark.parametrize("name, content, message", [
    ("bomb.png", "huge_png_header", "above the pixel limit of 8,000,000; this app takes photos up to 8 megapixels"),
    ("notes.jpg", b"plain text, not a picture", "'notes.jpg' is not an image"),
])
def test_an_upload_the_app_cannot_read_gets_the_projects_own_message(app_url, tmp_path, name, content, message):
    from test_images import png_header_only

    path = tmp_path / name
    path.write_bytes(png_header_only(9000, 8000) if content == "huge_png_header" else content)
    with pytest.raises(Exception) as caught:
        Client(app_url, verbose=False).predict(handle_file(str(path)), "the cup", api_name="/segment")
    text = str(caught.value)
    assert message in text and "upstream Gradio app has raised an exception" not in text
    assert "/tmp" not in text and "gradio" not in text.lower()  # no server paths


@pytest.mark.parametrize("name, query, message", [
    ("notes.jpg", "the cup", "'notes.jpg' is not an image"),
    ("coffee.jpg", "  ", "the query is empty"),
])
def test_bad_input_on_segment_is_one_warning_line_in_the_servers_log_without_a_traceback(app_url, tmp_path, capfd,
                                                                                      caplog, name, query, message):
    path = tmp_path / name
    path.write_bytes((ASSETS / "coffee.jpg").read_bytes() if name == "coffee.jpg" else b"plain text, not a picture")
    capfd.readouterr()
    with caplog.at_level(logging.WARNING, logger="sam3_agent"), pytest.raises(Exception, match=message):
        Client(app_url, verbose=False).predict(handle_file(str(path)), query, api_name="/segment")
    server_log = capfd.readouterr().err
    assert "Traceback" not in server_log and "gradio.exceptions.Error" not in server_log
    refusals = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "sam3_agent.ui.refusals"]
    assert len(refusals) == 1 and refusals[0][0] == "WARNING"
    assert refusals[0][1].startswith("/segment refused: ") and message in refusals[0][1]


def test_models_that_failed_to_load_are_a_server_fault_on_segment_and_keep_their_traceback(tmp_path):
    import gradio as gr

    from sam3_agent.ui.run import api
    from sam3_agent.ui.run.runner import AgentFactory

    factory = AgentFactory(AppSettings(), None, load_error="SAM 3 weights not found at /models/sam3")
    with pytest.raises(gr.Error, match="SAM 3 weights not found") as caught:
        next(api.segment(factory, tmp_path, str(ASSETS / "coffee.jpg"), "the cup"))
    assert caught.value.print_exception is True  # Gradio prints its traceback


@pytest.fixture(scope="module")
def slow_app():
    """One run at a time (the only slot), a scripted reply streamed slowly (about 20 s), and every run recorded."""
    from sam3_agent.agent.loop import Agent

    runs = []
    original = Agent.start

    def recording(self, *args, **kwargs):
        runs.append(original(self, *args, **kwargs))
        return runs[-1]

    Agent.start = recording
    settings = AppSettings(BackendSettings(preset="tiny", script=str(SCRIPT)), max_rounds=10, concurrency=1,
                           script_piece_delay=0.05, port=free_port())
    demo, handlers = create_demo(settings)
    launch(demo, settings, prevent_thread_lock=True, quiet=True)
    try:
        yield f"http://127.0.0.1:{settings.port}/", runs
    finally:
        Agent.start = original
        demo.close()
        handlers.close()


def test_a_cancelled_api_job_stops_its_run_and_frees_the_slot(slow_app):
    import time

    url, runs = slow_app
    client = Client(url, verbose=False)
    job = client.submit(handle_file(str(ASSETS / "coffee.jpg")), "the cup on the saucer", api_name="/segment")
    deadline = time.monotonic() + 120
    while not runs and time.monotonic() < deadline:  # the run has started (it holds the only slot)
        time.sleep(0.1)
    time.sleep(2)
    assert runs and runs[0].trace.status == "running"
    job.cancel()
    cancelled = time.monotonic()
    # The next job only gets the slot once the first run let go of it; its bad query then fails at once.
    with pytest.raises(Exception, match="the query is empty"):
        Client(url, verbose=False).predict(handle_file(str(ASSETS / "coffee.jpg")), " ", api_name="/segment")
    trace = runs[0].trace
    while trace.status == "running" and time.monotonic() - cancelled < 120:  # what is waited for is the status
        time.sleep(0.1)
    # stopped in round 1, in the middle of its reply (kept as the round in flight), not run to the end
    assert trace.status == "cancelled" and len(trace.rounds) == 1 and trace.rounds[0].finish_reason == "cancelled"
