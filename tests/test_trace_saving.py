"""Saving traces: the photo as given, views rendered again identically, saves that never mix two runs, and the
trace written round by round off the hot path."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import ASSETS, KnownSegmenter, tool, verdict
from PIL import Image

import sam3_agent.trace.writer as trace_writer
from sam3_agent.agent.loop import Agent
from sam3_agent.errors import TraceSaveError
from sam3_agent.events import RoundFinished
from sam3_agent.images import image_digest, load_image
from sam3_agent.trace.io import TraceWriter, load_trace, save_trace, trace_files
from sam3_agent.vlm.scripted import ScriptedVLM

COFFEE = ASSETS / "coffee.jpg"
DETECTIONS = {"cup": [((100, 100, 300, 250), 0.85), ((320, 60, 420, 200), 0.7)], "mug": [((90, 110, 310, 240), 0.9)]}


class RecordingVLM(ScriptedVLM):
    """A scripted VLM that keeps the digest of every image it is sent, when it is sent."""

    def __init__(self, responses, name="recording"):
        super().__init__(responses, name)
        self.sent: dict[str, str] = {}

    def stream(self, messages, **kwargs):
        for message in messages:
            for part in message.images:
                self.sent.setdefault(part.name, image_digest(part.image))
        yield from super().stream(messages, **kwargs)


def run_on_coffee(image_file: bytes | None = None):
    vlm = RecordingVLM([tool("segment_phrase", text_prompt="cup"), tool("segment_phrase", text_prompt="mug"),
                        tool("segment_phrase", text_prompt="cup and saucer"), tool("examine_each_mask"),
                        tool("select_masks_and_return", final_answer_masks=[1])])
    verifier = RecordingVLM([verdict("Accept"), verdict("Accept")], "recording-verifier")
    segmenter = KnownSegmenter({**DETECTIONS, "cup and saucer": DETECTIONS["cup"]})
    agent = Agent(vlm, segmenter, verifier=verifier)
    run = agent.start(load_image(COFFEE), "the cup", image_name="coffee.jpg", image_file=image_file)
    for _ in run:
        pass
    return run.trace, {**vlm.sent, **verifier.sent}


def test_a_reopened_trace_renders_exactly_the_views_the_models_were_sent(tmp_path):
    trace, sent = run_on_coffee(COFFEE.read_bytes())
    assert trace.status == "done"
    save_trace(trace, tmp_path)
    loaded = load_trace(tmp_path)
    parts = {p.name: p for m in loaded.messages for p in m.images}
    for r in loaded.rounds:
        for v in r.result.verdicts if r.result is not None else ():
            parts[v.mask_view.name], parts[v.zoom_view.name] = v.mask_view, v.zoom_view
    assert sorted(sent) == sorted(["raw", "round1_overlay", "round2_overlay", "round3_overlay", "round4_overlay",
                                   "round4_mask1_view", "round4_mask1_zoom", "round4_mask2_view", "round4_mask2_zoom"])
    for name, digest in sent.items():
        assert parts[name].view is not None or name == "raw"
        assert image_digest(parts[name].image) == digest, name


def test_the_photo_is_stored_as_the_file_given_when_it_decodes_to_the_image(tmp_path):
    trace, _ = run_on_coffee(COFFEE.read_bytes())
    files = trace_files(trace)
    photo = json.loads(files["trace.json"])["photo"]["file"]
    assert photo.endswith(".jpg") and files[photo] == COFFEE.read_bytes()
    assert load_trace(save_trace(trace, tmp_path)).image_file == COFFEE.read_bytes()


def test_a_file_that_does_not_decode_to_the_image_is_replaced_by_a_lossless_copy(caplog):
    caplog.set_level(logging.INFO, logger="sam3_agent.trace.encode")
    other = io.BytesIO()
    Image.open(ASSETS / "rocket.jpg").save(other, format="JPEG")
    trace, _ = run_on_coffee(other.getvalue())
    files = trace_files(trace)
    photo = json.loads(files["trace.json"])["photo"]["file"]
    assert photo.endswith(".png")
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(files[photo]))), np.asarray(trace.image))
    assert "decodes to other pixels" in caplog.text


@pytest.mark.parametrize("killed_at", ["masks/", "trace.json"])
def test_a_save_that_fails_half_way_leaves_the_previous_trace_whole(tmp_path, monkeypatch, killed_at):
    first, _ = run_on_coffee(COFFEE.read_bytes())
    save_trace(first, tmp_path)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    second = Agent(ScriptedVLM([tool("segment_phrase", text_prompt="mug"), tool("report_no_mask")]),
                   KnownSegmenter(DETECTIONS)).run(load_image(ASSETS / "chelsea.jpg"), "a cat")
    real_replace = os.replace

    def killed(source, target):
        if killed_at in str(Path(target).relative_to(tmp_path)):
            raise KeyboardInterrupt  # the process is stopped just before this file lands
        real_replace(source, target)

    monkeypatch.setattr(trace_writer.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        save_trace(second, tmp_path)
    assert load_trace(tmp_path) == first  # the old trace.json only names the old files, all still there
    monkeypatch.setattr(trace_writer.os, "replace", real_replace)
    save_trace(second, tmp_path)
    assert load_trace(tmp_path) == second
    assert not [p for p in tmp_path.rglob("*") if ".tmp-" in p.name]  # leftovers of the killed save are gone
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) != before


def test_a_full_disk_is_one_clear_error_and_the_old_trace_stays(tmp_path, monkeypatch):
    first, _ = run_on_coffee(COFFEE.read_bytes())
    save_trace(first, tmp_path)
    second = Agent(ScriptedVLM([tool("segment_phrase", text_prompt="mug"), tool("report_no_mask")]),
                   KnownSegmenter(DETECTIONS)).run(load_image(ASSETS / "chelsea.jpg"), "a cat")

    def full(self, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", full)
    with pytest.raises(TraceSaveError, match="No space left on device; free some space or choose another folder"):
        save_trace(second, tmp_path)
    monkeypatch.undo()
    assert load_trace(tmp_path) == first


def test_the_writer_saves_each_round_in_the_background_and_reports_a_failed_save(tmp_path):
    vlm = ScriptedVLM([tool("segment_phrase", text_prompt="cup"), tool("examine_each_mask"),
                       tool("select_masks_and_return", final_answer_masks=[2])])
    run = Agent(vlm, KnownSegmenter(DETECTIONS), verifier=ScriptedVLM([verdict("Accept")] * 2)).start(
        load_image(COFFEE), "the cup")
    writer = TraceWriter(tmp_path / "run")
    saved_rounds = []
    for event in run:
        if isinstance(event, RoundFinished):
            writer.submit(run.trace)
            writer.flush()
            saved_rounds.append(len(load_trace(tmp_path / "run").rounds))
    writer.submit(run.trace)
    assert load_trace(writer.close()) == run.trace and saved_rounds == [1, 2, 3]
    blocked = TraceWriter(tmp_path / "run" / "trace.json" / "inside")  # a folder under a file: cannot be made
    blocked.submit(run.trace)
    with pytest.raises(TraceSaveError, match="could not save the trace"):
        blocked.flush()
    blocked.close(wait=False)


SLOW_RUN = """
import sys, time
sys.path[:0] = [{root!r}, {tests!r}]
from conftest import KnownSegmenter, tool
from sam3_agent.agent.loop import Agent
from sam3_agent.images import load_image
from sam3_agent.trace.io import TraceWriter
from sam3_agent.events import RoundFinished
from sam3_agent.vlm.scripted import ScriptedVLM
phrases = ["cup", "mug", "saucer", "spoon", "table", "plate", "coffee", "drink"]
vlm = ScriptedVLM([tool("segment_phrase", " ".join(["w"] * 40), text_prompt=p) for p in phrases], piece_delay=0.05)
run = Agent(vlm, KnownSegmenter({{p: [((100, 100, 300, 250), 0.9)] for p in phrases}})).start(
    load_image({photo!r}), "the cup")
writer = TraceWriter({out!r})
for event in run:
    if isinstance(event, RoundFinished):
        writer.submit(run.trace)
"""


def test_a_run_killed_with_sigkill_keeps_its_finished_rounds(tmp_path):
    out = tmp_path / "run"
    script = SLOW_RUN.format(root=str(Path(__file__).resolve().parents[1]), tests=str(Path(__file__).parent),
                             photo=str(COFFEE), out=str(out))
    process = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        rounds = 0
        while rounds < 2 and time.monotonic() < deadline and process.poll() is None:
            try:
                rounds = len(json.loads((out / "trace.json").read_text())["rounds"])
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        assert rounds >= 2, process.stderr.read().decode() if process.poll() is not None else "no round saved"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    trace = load_trace(out)  # whole and loadable: every save replaced trace.json in one step
    assert trace.status == "running" and len(trace.rounds) >= 2
    assert [r.call.parameters["text_prompt"] for r in trace.rounds][:2] == ["cup", "mug"]
