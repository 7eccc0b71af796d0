"""The app's handlers called as plain functions: streaming a run, stop, closed tabs, errors, sessions, traces."""

from __future__ import annotations

import io
import json
import threading
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import ASSETS, KnownSegmenter, tool, verdict
from PIL import Image

from sam3_agent.presets import Backends
from sam3_agent.rle import decode_rle
from sam3_agent.trace.io import load_trace, load_trace_zip
from sam3_agent.ui.run import handlers as handlers_module
from sam3_agent.ui.run import runner as runner_module
from sam3_agent.ui.run.handlers import Handlers
from sam3_agent.ui.run.outputs import live_round_html
from sam3_agent.ui.run.runner import AgentFactory
from sam3_agent.ui.run.slot import RunSlot
from sam3_agent.ui.settings import AppSettings
from sam3_agent.vlm.scripted import ScriptedVLM

SEGMENTER = {
    "person": [((10, 10, 110, 210), 0.7), ((200, 50, 300, 250), 0.9)],
    "cup": [((100, 100, 300, 250), 0.85)],
    "child": [((20, 20, 120, 220), 0.8), ((300, 300, 400, 400), 0.55)],
}
SCRIPT = {
    "main": [
        tool("segment_phrase", "people first", text_prompt="person"),
        tool("segment_phrase", "now children", text_prompt="child"),
        tool("examine_each_mask", "check them"),
        tool("select_masks_and_return", "the first", final_answer_masks=[1]),
    ],
    "verify": [verdict("Accept"), verdict("Reject")],
}
SLOW_WORDS = 400


def make_handlers(tmp_path: Path, script=SCRIPT, delay: float = 0.0, load_error: str | None = None,
                  messages: list[str] | None = None) -> Handlers:
    settings = AppSettings(max_rounds=10, script_piece_delay=delay)
    idle = ScriptedVLM([])
    backends = None if load_error else Backends(idle, idle, KnownSegmenter(SEGMENTER), {"vlm_model": "scripted"})
    factory = AgentFactory(settings, backends, script, load_error)
    sink = messages if messages is not None else []
    return Handlers(factory, warn=sink.append, root=tmp_path / "app")


def status_text(html: str) -> str:
    """The words of a status line's HTML."""
    from html import unescape

    return unescape(html.split(">", 1)[1].rsplit("</div>", 1)[0])


def run_to_end(handlers: Handlers, image: str, query: str, slot: RunSlot | None = None):
    return list(handlers.run(image, query, 10, 0.5, slot if slot is not None else RunSlot()))


def finished_downloads(handlers: Handlers, image: str, query: str, slot: RunSlot | None = None):
    """A run to its end, then the downloads its trace_download event offers: (outputs, [masks, trace.zip])."""
    slot = slot if slot is not None else RunSlot()
    outputs = run_to_end(handlers, image, query, slot)
    return outputs, handlers.trace_download(slot)


ASTRONAUT = str(ASSETS / "astronaut.jpg")
COFFEE = str(ASSETS / "coffee.jpg")


def test_a_run_streams_rounds_and_ends_with_downloads(tmp_path):
    handlers = make_handlers(tmp_path)
    outputs, downloads = finished_downloads(handlers, ASTRONAUT, "the child on the left")
    first, last = outputs[0], outputs[-1]
    assert first.status == ('<div class="status status-running" data-status="running" title="Running">'
                            "Running: starting (budget 10 rounds)</div>")
    assert first.downloads is None and first.final_image is None
    assert "Done: 1 mask selected after 4 rounds." in last.status
    assert last.rounds.count('<section class="round"') == 4 and live_round_html(last.live) == ""
    # The answer comes with the run's last update; the trace .zip follows by its own event.
    assert last.final_image is not None and Image.open(last.final_image).size == (512, 512)
    assert [Path(p).name for p in last.downloads] == ["final_masks.json"]
    assert [Path(p).name for p in downloads] == ["final_masks.json", "trace.zip"]
    # rounds appear one by one, each update extends the previous one
    counts = [o.rounds.count('<section class="round"') for o in outputs]
    assert counts == sorted(counts) and set(counts) == {0, 1, 2, 3, 4}
    # the live round carries the streaming reasoning while a round runs
    assert any('class="round round-live" data-round="1"' in live_round_html(o.live) for o in outputs)


def test_downloads_hold_coco_masks_and_the_trace(tmp_path):
    _, downloads = finished_downloads(make_handlers(tmp_path), ASTRONAUT, "the child on the left")
    masks_path, zip_path = (Path(p) for p in downloads)
    results = json.loads(masks_path.read_text())
    assert len(results) == 1 and results[0]["bbox"] == [20.0, 20.0, 100.0, 200.0]
    assert decode_rle([results[0]["segmentation"]]).shape == (1, 512, 512)
    trace = load_trace(zip_path)
    assert trace.status == "done" and trace.query == "the child on the left" and len(trace.rounds) == 4
    assert trace.image_name == "astronaut.jpg"  # the uploaded file's name, for COCO exports
    assert trace.image_file == Path(ASTRONAUT).read_bytes()  # the upload as given, not a re-encoded copy


def test_every_run_replays_the_script_from_the_start(tmp_path):
    handlers = make_handlers(tmp_path)
    slot = RunSlot()
    first, first_files = finished_downloads(handlers, ASTRONAUT, "the child", slot)
    second, second_files = finished_downloads(handlers, ASTRONAUT, "the child", slot)
    assert "Done: 1 mask selected" in first[-1].status and "Done: 1 mask selected" in second[-1].status
    # each run writes its own folder: the first run's files are still there
    assert Path(first_files[1]).parent.name == "run1" and Path(second_files[1]).parent.name == "run2"
    assert Path(first_files[1]).exists()


def wait_for(condition, timeout: float = 10.0) -> bool:
    """Poll ``condition`` until it holds (what a user would wait for: a file written), up to ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def saved_rounds(folder: Path) -> int:
    try:
        return len(json.loads((folder / "trace.json").read_text())["rounds"])
    except (OSError, ValueError):
        return -1


def test_the_answer_is_shown_before_the_trace_zip_is_written(tmp_path, monkeypatch):
    release = threading.Event()
    real_zip = runner_module.zip_files

    def slow_zip(files, prefix=""):
        release.wait(30)
        return real_zip(files, prefix)

    monkeypatch.setattr(runner_module, "zip_files", slow_zip)
    handlers = make_handlers(tmp_path)
    slot = RunSlot()
    last = run_to_end(handlers, ASTRONAUT, "the child on the left", slot)[-1]  # the run's event is over
    assert "Done: 1 mask selected" in last.status and '<tr data-mask="1">' in last.final_masks
    assert Image.open(last.final_image).size == (512, 512)
    masks_path = Path(last.downloads[0])
    assert json.loads(masks_path.read_text())[0]["bbox"] == [20.0, 20.0, 100.0, 200.0]
    assert not (masks_path.parent / "trace.zip").exists()
    assert handlers.trace_download(slot, timeout=0.05) == {"__type__": "update"}  # still being written
    release.set()
    downloads = handlers.trace_download(slot)
    assert downloads == [str(masks_path), str(masks_path.parent / "trace.zip")]
    assert handlers.trace_download_page(slot) == ({"__type__": "update"}, downloads)  # the status left as it is
    zipped = load_trace(downloads[1])
    assert zipped.status == "done" and len(zipped.rounds) == 4
    assert load_trace(masks_path.parent / "trace") == zipped  # the app's own copy, saved round by round


def test_the_apps_copy_of_the_trace_grows_round_by_round(tmp_path):
    slow = {"main": [tool("segment_phrase", "go", text_prompt="person"),
                     tool("select_masks_and_return", " ".join(["w"] * 200), final_answer_masks=[1])],
            "verify": []}
    handlers = make_handlers(tmp_path, script=slow, delay=0.02)
    slot = RunSlot()
    stream = handlers.run(ASTRONAUT, "a person", 10, 0.5, slot)
    for output in stream:
        if output.rounds.count('<section class="round"') == 1:
            break
    folder = slot.folder / "run1" / "trace"
    assert wait_for(lambda: saved_rounds(folder) == 1)  # round 1 saved while round 2 streams
    assert load_trace(folder).status == "running"
    list(stream)
    assert load_trace(handlers.trace_download(slot)[1]).status == "done"


def test_a_trace_zip_that_cannot_be_written_leaves_the_answer_and_says_so(tmp_path, monkeypatch):
    def full_disk(files, prefix=""):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(runner_module, "zip_files", full_disk)
    warnings: list[str] = []
    handlers = make_handlers(tmp_path, messages=warnings)
    slot = RunSlot()
    last = run_to_end(handlers, ASTRONAUT, "the child on the left", slot)[-1]
    assert "Done: 1 mask selected" in last.status and last.final_image is not None
    assert handlers.trace_download(slot) == {"__type__": "update"}
    status, downloads = handlers.trace_download_page(slot)
    assert 'class="status status-error"' in status and downloads == {"__type__": "update"}  # the masks stay offered
    assert ("Done: 1 mask selected after 4 rounds. Its trace could not be saved on the server (No space left on "
            "device), so only its masks can be downloaded") in status
    assert warnings == []  # the status line, in view, says it: no pop-up as well


@pytest.mark.parametrize(
    ("image", "query", "message"),
    [
        (None, "the cup", "add an image first"),
        (COFFEE, "   ", "the query is empty"),
        (str(ASSETS / "LICENSE.md"), "the cup", "not an image"),
    ],
)
def test_bad_input_shows_an_error_once_in_the_status_line(tmp_path, image, query, message):
    warnings: list[str] = []
    outputs = list(make_handlers(tmp_path, messages=warnings).run(image, query, 10, 0.5, RunSlot()))
    assert len(outputs) == 1
    text = status_text(outputs[0].status)
    assert 'class="status status-error"' in outputs[0].status and message in text.lower()
    assert text[0].isupper() and text.endswith(".")  # said as a sentence
    assert warnings == []  # the status line is in view: no pop-up saying it again


def test_an_upload_the_app_does_not_take_is_refused_at_once_and_emptied(tmp_path):
    sliver = tmp_path / "upload" / "sliver.png"  # Gradio keeps the upload's own name last in its path
    sliver.parent.mkdir()
    Image.new("RGB", (400, 3)).save(sliver)
    handlers = make_handlers(tmp_path)
    status, image = handlers.uploaded(str(sliver))
    assert status_text(status) == ("File 'sliver.png' is 400x3 pixels; each side must be at least 8 pixels. "
                                   "Upload another photo.")
    assert 'class="status status-error"' in status and image is None  # the box is emptied for the next one
    status, image = handlers.uploaded(COFFEE)
    assert status_text(status) == "Photo ready: add a query (if there is none yet), then press Run."
    assert image == {"__type__": "update"}  # no change: the photo stays


@pytest.mark.parametrize("rounds, threshold, message", [
    (float("nan"), 0.5, "must be numbers, got nan and 0.5"),
    (float("inf"), 0.5, "must be numbers, got inf and 0.5"),
    (None, 0.5, "must be numbers, got None and 0.5"),
    (0, 0.5, "max_rounds must be between 1 and 100, got 0"),
    (10, float("nan"), "score_threshold must be a number in [0, 1], got nan"),
])
def test_a_bad_budget_or_threshold_from_a_hand_made_request_is_an_error_not_a_crash(tmp_path, rounds, threshold,
                                                                                     message):
    warnings: list[str] = []
    outputs = list(make_handlers(tmp_path, messages=warnings).run(COFFEE, "the cup", rounds, threshold, RunSlot()))
    assert len(outputs) == 1 and 'class="status status-error"' in outputs[0].status
    assert message[1:] in outputs[0].status and warnings == []


def test_models_that_failed_to_load_are_reported_on_every_run(tmp_path):
    warnings: list[str] = []
    handlers = make_handlers(tmp_path, load_error="SAM 3 weights not found at /models/sam3", messages=warnings)
    outputs = list(handlers.run(COFFEE, "the cup", 10, 0.5, RunSlot()))
    assert "SAM 3 weights not found at /models/sam3." in outputs[0].status
    assert warnings == []


def test_a_backend_failure_mid_run_ends_failed_with_a_message(tmp_path):
    warnings: list[str] = []
    handlers = make_handlers(tmp_path, script={"main": [tool("segment_phrase", text_prompt="boom")], "verify": []},
                             messages=warnings)
    handlers.factory.backends.segmenter.failing.add("boom")
    outputs, downloads = finished_downloads(handlers, COFFEE, "the cup")
    last = outputs[-1]
    assert 'class="status status-failed"' in last.status and "ran out of memory" in last.status
    assert warnings == []
    assert load_trace(downloads[1]).status == "failed"
    assert '<div class="round-failed">Backend failure: SAM 3 model &#x27;known&#x27; ran out of memory' in last.rounds


def slow_script() -> dict:
    words = " ".join(f"w{i}" for i in range(SLOW_WORDS))
    return {"main": [tool("segment_phrase", words, text_prompt="cup")], "verify": []}


def test_stop_ends_a_run_promptly_during_generation_and_keeps_its_trace(tmp_path):
    handlers = make_handlers(tmp_path, script=slow_script(), delay=0.02)  # 400 pieces: 8 s unstopped
    slot = RunSlot()
    outputs = []

    def drive():
        outputs.extend(handlers.run(COFFEE, "the cup", 10, 0.5, slot))

    thread = threading.Thread(target=drive)
    thread.start()
    deadline = time.monotonic() + 120  # generous: what is waited for is the streamed text, not a time
    while not (outputs and "w3 " in outputs[-1].live["value"]) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "w3 " in outputs[-1].live["value"]
    result = list(handlers.stop(slot))
    thread.join(120)
    assert not thread.is_alive()
    # "promptly" is what the trace shows, not a wall time: the run ended by itself within Stop's grace time (Stop
    # offers no files of its own) with the reply cut short (fewer words than the script's)
    # at once "Stopping...", then the run's own final status again (its page, downloads included, is its own)
    assert [(status_text(s), d) for s, d in result] == [
        ("Stopping: the model finishes its current step, then the trace so far is kept.", {"__type__": "update"}),
        ("Stopped after 1 round. The trace so far is kept.", {"__type__": "update"})]
    last = outputs[-1]
    assert 'class="status status-cancelled"' in last.status and "Stopped after 1 round" in last.status
    trace = load_trace(handlers.trace_download(slot)[1])
    assert trace.status == "cancelled" and trace.rounds[0].finish_reason == "cancelled"
    assert 0 < len(trace.rounds[0].output.split()) < SLOW_WORDS
    assert not slot.active
    assert '<div class="round-stopped">Stopped by the user during this round.</div>' in last.rounds
    assert 'class="mistake"' not in last.rounds


def test_stop_between_tool_calls_ends_the_run_during_verification(tmp_path):
    slow_verdict = " ".join(["looking"] * 100) + " <verdict>Accept</verdict>"
    script = {"main": [tool("segment_phrase", "go", text_prompt="person"), tool("examine_each_mask", "check")],
              "verify": [slow_verdict] * 2}
    handlers = make_handlers(tmp_path, script=script, delay=0.01)  # each verification streams for about 1 s
    slot = RunSlot()
    outputs = []
    thread = threading.Thread(target=lambda: outputs.extend(handlers.run(ASTRONAUT, "a person", 10, 0.5, slot)))
    thread.start()
    deadline = time.monotonic() + 120  # generous: what is waited for is the status, not a time
    while not (outputs and "running examine_each_mask" in outputs[-1].status) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "running examine_each_mask" in outputs[-1].status
    stopped = list(handlers.stop(slot))
    thread.join(120)
    assert not thread.is_alive()
    # The run ended by itself within Stop's grace time (it was not abandoned: Stop offers no files of its own) ...
    assert stopped[-1][1] == {"__type__": "update"} and "Stopped after 2 rounds" in stopped[-1][0]
    # ... and during the verification: round 2 (examine_each_mask) is the cancelled one, not round 3
    trace = load_trace(handlers.trace_download(slot)[1])
    assert trace.status == "cancelled" and [r.error for r in trace.rounds] == [None, "cancelled"]
    assert trace.rounds[1].call.name == "examine_each_mask"
    assert "Stopped after 2 rounds" in outputs[-1].status


def test_stop_without_a_run_changes_nothing(tmp_path):
    ((status, downloads),) = make_handlers(tmp_path).stop(RunSlot())
    assert status == downloads == {"__type__": "update"}


def test_stop_abandons_a_run_that_does_not_end_in_time(tmp_path, monkeypatch):
    handlers = make_handlers(tmp_path, script=slow_script())
    monkeypatch.setattr(handlers_module, "STOP_GRACE_S", 0.05)
    slot = RunSlot()
    stream = handlers.run(COFFEE, "the cup", 10, 0.5, slot)
    next(stream)  # started, then nobody drives the generator: as if stuck in a long model call
    stopping, (status, downloads) = handlers.stop(slot)
    assert 'class="status status-stopping"' in stopping[0]  # said at once, before the grace time
    assert 'class="status status-cancelled"' in status and "Stopped after 0 rounds." in status
    assert load_trace(downloads[1]).status == "cancelled"
    stream.close()


def test_closing_the_stream_abandons_the_run(tmp_path):
    handlers = make_handlers(tmp_path, script=slow_script())
    slot = RunSlot()
    stream = handlers.run(COFFEE, "the cup", 10, 0.5, slot)
    for _ in range(5):
        next(stream)
    stream.close()  # what Gradio does when the tab closes or the event is cancelled
    assert slot.run.trace.status == "cancelled"
    assert "closed before it finished" in slot.run.trace.error
    assert not slot.active
    copy = slot.folder / "run1" / "trace"  # the app's own copy gets the final state too
    assert wait_for(lambda: (copy / "trace.json").exists() and load_trace(copy).status == "cancelled")


def test_unload_stops_the_run_of_the_closed_session(tmp_path):
    handlers = make_handlers(tmp_path, script=slow_script(), delay=0.02)

    class Request:
        session_hash = "tab-1"

    slot = RunSlot()
    stream = handlers.run(COFFEE, "the cup", 10, 0.5, slot, Request())
    next(stream)
    next(stream)
    handlers.unload(Request())
    rest = list(stream)
    assert "Stopped after 1 round" in rest[-1].status
    assert slot.run.trace.status == "cancelled"


def test_two_sessions_at_once_never_see_each_others_data(tmp_path):
    handlers = make_handlers(tmp_path, delay=0.002)
    runs = {"a": (ASTRONAUT, "the child on the left"), "b": (COFFEE, "the person by the cup")}
    results: dict[str, list] = {}

    zips: dict[str, str] = {}

    def drive(key):
        image, query = runs[key]
        results[key], downloads = finished_downloads(handlers, image, query)
        zips[key] = downloads[1]

    threads = [threading.Thread(target=drive, args=(k,)) for k in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    traces = {k: load_trace(v) for k, v in zips.items()}
    assert traces["a"].query == "the child on the left" and traces["a"].image.size == (512, 512)
    assert traces["b"].query == "the person by the cup" and traces["b"].image.size == (600, 400)
    assert Path(zips["a"]).parent.parent != Path(zips["b"]).parent.parent
    # no streamed update of one session mentions the other's query
    assert all("person by the cup" not in o.context for o in results["a"])
    assert all("child on the left" not in o.context for o in results["b"])


def test_slot_copies_are_empty_and_independent():
    import copy
    import pickle

    slot = RunSlot()
    slot.runs = 3
    assert copy.deepcopy(slot).runs == 0 and pickle.loads(pickle.dumps(slot)).runs == 0


# ------------------------------------------------------------------ trace inspection


@pytest.fixture(scope="module")
def saved_trace(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("inspect")
    return finished_downloads(make_handlers(tmp), ASTRONAUT, "the child on the left")[1][1]


def test_a_saved_trace_steps_round_by_round_with_the_same_views(tmp_path, saved_trace):
    inspect = make_handlers(tmp_path).inspect
    state, message, number, navigation, final_image, final_masks = inspect.load_trace(saved_trace)
    assert len(inspect.loaded(state).rounds) == 4
    assert "Query: &#x27;the child on the left&#x27;. Done: 1 mask selected after 4 rounds. VLM: scripted." in message
    assert number == 1 and navigation == {"__type__": "update", "visible": True}
    assert final_image["visible"] is True and final_image["value"].size == (512, 512) and '<tr data-mask="1">' in final_masks
    round_html, context_html, timeline, box = inspect.show_round(state, 3)
    assert box == {"__type__": "update"}  # the box already says 3
    assert '<section class="round" data-round="3">' in round_html
    assert '<details class="reasoning" open>' in round_html  # a trace is read: reasoning open
    assert round_html.count('class="verdict-card') == 2
    assert 'class="ctx-msg ctx-assistant ctx-dropped" data-index="2"' in context_html
    assert 'class="ctx-note"' in context_html
    assert timeline.count("<tr class=\"timeline-") == 4 and 'timeline-current" data-round="3"' in timeline


class Clicked:
    """What Gradio hands a select handler (``gr.SelectData``): the clicked row's round number as ``index``."""

    def __init__(self, index):
        self.index = index


def test_a_timeline_click_opens_that_round(tmp_path, saved_trace):
    inspect = make_handlers(tmp_path).inspect
    assert inspect.pick_round(Clicked(3)) == 3
    assert inspect.pick_round(Clicked(None)) == {"__type__": "update"}  # no change


SKIP = {"__type__": "update"}  # gr.skip(): that part of the page is left as it is


@pytest.mark.parametrize(("number", "shown", "message"), [
    (7, 4, "There is no round 7: this trace has rounds 1 to 4. Showing round 4."),
    (0, 1, "There is no round 0: this trace has rounds 1 to 4. Showing round 1."),
    (-3, 1, "There is no round -3: this trace has rounds 1 to 4. Showing round 1."),
])
def test_a_round_number_outside_the_trace_shows_its_nearest_round_and_the_box_says_it(tmp_path, saved_trace, number,
                                                                                      shown, message):
    inspect = make_handlers(tmp_path).inspect
    state = inspect.load_trace(saved_trace)[0]
    inspect.show_round(state, 2)
    round_html, context_html, timeline, box = inspect.show_round(state, number)
    assert box == shown  # the box is put back on the round shown
    note, rest = round_html.split("</div>", 1)
    assert 'class="status status-error"' in note and message in note
    assert f'<section class="round" data-round="{shown}">' in rest
    assert "Context of round" in context_html and f'timeline-current" data-round="{shown}"' in timeline
    # the change of the box to that number that follows leaves the page (and its note) as it is
    assert inspect.show_round(state, shown) == (SKIP, SKIP, SKIP, SKIP)
    assert inspect.settle_number(state, shown) == SKIP


@pytest.mark.parametrize("number", [None, 2.5, float("nan")])
def test_a_box_being_typed_in_changes_nothing_and_leaving_it_empty_puts_the_round_shown_back(tmp_path, saved_trace,
                                                                                             number):
    inspect = make_handlers(tmp_path).inspect
    state = inspect.load_trace(saved_trace)[0]
    inspect.show_round(state, 3)
    assert inspect.show_round(state, number) == (SKIP, SKIP, SKIP, SKIP)  # still round 3, the box as typed
    assert inspect.settle_number(state, number) == 3  # once the user leaves the box


def test_the_empty_inspect_tab_hides_the_round_navigation(tmp_path):
    state, message, number, navigation, final_image, _ = make_handlers(tmp_path).inspect.load_trace(None)
    assert state is None and navigation == {"__type__": "update", "visible": False}
    assert final_image == {"__type__": "update", "value": None, "visible": False}  # no empty "Final masks" frame
    assert "Upload a trace .zip saved by this app" in message


def test_a_one_round_trace_steps_nowhere(tmp_path):
    handlers = make_handlers(tmp_path, script={"main": [tool("report_no_mask", "nothing here")], "verify": []})
    _, downloads = finished_downloads(handlers, COFFEE, "a giraffe")
    state, message, number, navigation, final_image, final_masks = handlers.inspect.load_trace(downloads[1])
    assert len(handlers.inspect.loaded(state).rounds) == 1 and "No mask: the model reported that nothing matches" in message
    assert final_image == {"__type__": "update", "value": None, "visible": False} and "No final masks." in final_masks
    assert "There is no round 2: this trace has round 1. Showing round 1." in handlers.inspect.show_round(state, 2)[0]


def test_a_malformed_trace_file_gives_a_clear_message(tmp_path):
    warnings: list[str] = []
    handlers = make_handlers(tmp_path, messages=warnings)
    junk = tmp_path / "junk.zip"
    junk.write_bytes(b"this is not a zip file")
    state, message, number, navigation, *_ = handlers.inspect.load_trace(str(junk))
    assert state is None and 'class="status status-error"' in message and navigation["visible"] is False
    assert "not a .zip trace" in message and warnings == [
        "Cannot read this trace: the file is not a .zip trace or bundle (saved by SAM3 Agent)."]
    no_trace = tmp_path / "other.zip"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("readme.txt", "hello")
    no_trace.write_bytes(buffer.getvalue())
    state, message, *_ = handlers.inspect.load_trace(str(no_trace))
    assert state is None and "holds no trace.json or bundle.json: it is not a SAM3 Agent trace or bundle" in message


def test_an_oversized_trace_file_is_refused_before_reading(tmp_path):
    from sam3_agent.trace.safe_read import MAX_ZIP_BYTES

    huge = tmp_path / "huge.zip"
    with open(huge, "wb") as handle:  # sparse: takes no disk space, and is never read
        handle.truncate(MAX_ZIP_BYTES + 1)
    state, message, *_ = make_handlers(tmp_path).inspect.load_trace(str(huge))
    assert state is None and "is larger than 200 MB" in message


def segment(handlers: Handlers, image: str, query: str) -> tuple[str, str]:
    """The API's answer: the last value ``/segment`` yields (the ones before are "no change")."""
    return list(handlers.segment(image, query))[-1]


def test_api_segment_returns_coco_masks_and_the_trace(tmp_path):
    masks_path, zip_path = segment(make_handlers(tmp_path), ASTRONAUT, "the child on the left")
    results = json.loads(Path(masks_path).read_text())
    assert decode_rle([r["segmentation"] for r in results]).shape == (1, 512, 512)
    trace = load_trace_zip(Path(zip_path).read_bytes())
    assert trace.query == "the child on the left" and np.asarray(trace.image).shape == (512, 512, 3)


def test_api_segment_raises_a_readable_error_for_bad_input(tmp_path):
    import gradio as gr

    with pytest.raises(gr.Error, match="the query is empty"):
        segment(make_handlers(tmp_path), COFFEE, "")


def test_api_result_folders_older_than_an_hour_are_pruned(tmp_path):
    import os

    handlers = make_handlers(tmp_path)
    old_masks, _ = segment(handlers, ASTRONAUT, "the child on the left")
    old_folder = Path(old_masks).parent
    two_hours_ago = time.time() - 7200
    os.utime(old_folder, (two_hours_ago, two_hours_ago))
    new_masks, _ = segment(handlers, ASTRONAUT, "the child on the left")
    assert not old_folder.exists() and Path(new_masks).exists()


def test_the_queued_status_is_shown_at_once_with_a_ticket_per_press():
    slot = RunSlot()
    assert Handlers.queued(slot) == ('<div class="status status-running" data-status="running" title="Running">'
                                     "Queued: waiting for the model (it serves one run at a time).</div>", 1)
    assert Handlers.queued(slot)[1] == 2 and slot.waiting


def test_a_run_pressed_again_before_it_started_runs_once_with_the_newest_press(tmp_path):
    handlers = make_handlers(tmp_path)
    slot = RunSlot()
    first, second = handlers.queued(slot)[1], handlers.queued(slot)[1]
    superseded = list(handlers.run(ASTRONAUT, "old query", 10, 0.5, slot, None, first))
    assert superseded == [tuple({"__type__": "update"} for _ in superseded[0])]  # changes nothing on the page
    last = list(handlers.run(ASTRONAUT, "new query", 10, 0.5, slot, None, second))[-1]
    assert "Done: 1 mask selected" in last.status and load_trace(handlers.trace_download(slot)[1]).query == "new query"
    assert not slot.waiting


def test_run_during_a_run_stops_it_and_the_new_one_follows(tmp_path):
    handlers = make_handlers(tmp_path, script=slow_script(), delay=0.02)
    slot = RunSlot()
    outputs = []
    first = handlers.queued(slot)[1]
    thread = threading.Thread(target=lambda: outputs.extend(handlers.run(COFFEE, "the cup", 10, 0.5, slot, None,
                                                                         first)))
    thread.start()
    deadline = time.monotonic() + 5
    while not (outputs and "w3 " in outputs[-1].live["value"]) and time.monotonic() < deadline:
        time.sleep(0.01)
    status, second = handlers.queued(slot)  # Run pressed again while the first streams
    assert "Stopping the current run: the new one starts as soon as it has ended." in status
    thread.join(5)
    assert not thread.is_alive() and "Stopped after 1 round" in outputs[-1].status
    assert slot.run.trace.status == "cancelled"
    # until it has ended, the stopped run's page keeps saying what is happening (no "Running" flashing back)
    after = [o.status for o in outputs if "Stopping the current run" in o.status]
    assert after and all("Running" not in o.status for o in outputs[outputs.index(next(
        o for o in outputs if "Stopping the current run" in o.status)):])
    handlers.factory.script = SCRIPT
    last = list(handlers.run(ASTRONAUT, "the child", 10, 0.5, slot, None, second))[-1]
    assert "Done: 1 mask selected" in last.status


def test_stop_withdraws_a_run_still_waiting_in_the_queue(tmp_path):
    handlers = make_handlers(tmp_path)
    slot = RunSlot()
    ticket = handlers.queued(slot)[1]
    ((status, downloads),) = handlers.stop(slot)
    assert 'class="status status-cancelled"' in status
    assert "Stopped before it started: the run was still waiting in the queue." in status
    outputs = list(handlers.run(ASTRONAUT, "the child", 10, 0.5, slot, None, ticket))  # its turn comes
    assert len(outputs) == 1 and "Stopped before it started" in outputs[0].status and slot.run is None
    # a later press runs normally
    last = list(handlers.run(ASTRONAUT, "the child", 10, 0.5, slot, None, handlers.queued(slot)[1]))[-1]
    assert "Done: 1 mask selected" in last.status


def test_stop_is_offered_while_a_press_waits_or_a_run_goes_on_and_not_otherwise(tmp_path):
    def offered(slot):
        button = Handlers.stop_button(slot)
        return button.interactive, button.variant

    handlers = make_handlers(tmp_path)
    slot = RunSlot()
    assert offered(None) == offered(slot) == (False, "secondary")  # a new page: nothing to stop
    ticket = handlers.queued(slot)[1]
    assert offered(slot) == (True, "stop")  # the press waits in the queue
    seen = []
    for _ in handlers.run(ASTRONAUT, "the child", 10, 0.5, slot, None, ticket):
        seen.append(offered(slot))
    assert seen[0] == (True, "stop")  # while it runs
    assert offered(slot) == (False, "secondary")  # it has ended
    handlers.queued(slot)
    list(handlers.stop(slot))  # a press withdrawn by Stop
    assert offered(slot) == (False, "secondary")


def test_any_rounds_context_opens_during_and_after_a_run(tmp_path):
    handlers = make_handlers(tmp_path)
    slot = RunSlot()
    run_to_end(handlers, ASTRONAUT, "the child on the left", slot)
    second = handlers.run_context(slot, Clicked(2))
    assert '<div class="ctx-head" data-round="2"><b>Context of round 2</b> (latest: round 4)' in second
    assert "ctx-dropped" not in second
    latest = handlers.run_context(slot, Clicked(4))
    assert '<b>Context of round 4</b>:' in latest and latest.count('class="ctx-msg') == 8
    assert "Context of round 4" in handlers.run_context(slot, Clicked(99))  # no such round: the latest
    assert "appears here" in handlers.run_context(RunSlot(), Clicked(1))


def test_the_answer_shows_once_the_run_ends(tmp_path):
    outputs = run_to_end(make_handlers(tmp_path), ASTRONAUT, "the child on the left")
    assert [o.answer["visible"] for o in outputs[:-1]] == [False] * (len(outputs) - 1)
    assert outputs[-1].answer == {"__type__": "update", "visible": True}
