"""The command line when stopped or failing at the end: a finished run is never lost to a signal, the round in
flight is kept, and a failed save is reported as a save failure (exit 5), not as bad input."""

from __future__ import annotations

import errno
import json
import os
import signal

import pytest
from conftest import ASSETS, KnownSegmenter, tool

from sam3_agent.cli import run as cli
from sam3_agent.cli import signals as cli_signals
from sam3_agent.cli.main import main
from sam3_agent.errors import EXIT_SAVE, EXIT_STOPPED
from sam3_agent.presets import Backends
from sam3_agent.trace import writer as trace_writer
from sam3_agent.trace.io import load_trace
from sam3_agent.vlm.scripted import ScriptedVLM

COFFEE = str(ASSETS / "coffee.jpg")
SCRIPT = [tool("segment_phrase", "cups", text_prompt="cup"), tool("select_masks_and_return", final_answer_masks=[1])]


@pytest.fixture
def scripted_backends(monkeypatch):
    """The CLI's models replaced by a scripted VLM and a segmenter with one known cup (no model loads)."""
    def build(settings, segmenter=None):
        vlm = ScriptedVLM(list(SCRIPT))
        return Backends(vlm, vlm, segmenter or KnownSegmenter({"cup": [((100, 100, 300, 250), 0.9)]}), {})

    monkeypatch.setattr(cli, "build_backends", build)
    return build


def run(tmp_path, capsys) -> tuple[int, str, str]:
    code = main(["run", "--image", COFFEE, "--query", "the cup", "--out", str(tmp_path / "out")])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_sigterm_while_the_outputs_are_written_waits_until_they_are_complete(tmp_path, capsys, scripted_backends,
                                                                              monkeypatch):
    class SignalledWriter(cli.TraceWriter):
        def close(self, wait=True):
            os.kill(os.getpid(), signal.SIGTERM)  # delivered at once, as the run's final save is waited for
            return super().close(wait)

    monkeypatch.setattr(cli, "TraceWriter", SignalledWriter)
    code, stdout, stderr = run(tmp_path, capsys)
    assert code == 0, stderr
    assert "note: SIGTERM arrived while the outputs were written; they were completed first" in stderr
    assert "never started" not in stderr and "before the run started" not in stderr
    out = tmp_path / "out"
    assert load_trace(out).status == "done"
    assert len(json.loads((out / "final_masks.json").read_text())) == 1 and (out / "final_overlay.png").exists()
    assert signal.getsignal(signal.SIGTERM) is not cli_signals._STOP  # main restores the previous handlers


def test_a_failed_save_exits_5_and_says_what_was_lost(tmp_path, capsys, scripted_backends, monkeypatch):
    def disk_full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(trace_writer, "write_atomic", disk_full)  # every save of the run, the last one too
    code, _, stderr = run(tmp_path, capsys)
    assert code == EXIT_SAVE == 5
    assert stderr.count("\n") == 1
    assert "the run ended (done after 2 round(s)) but its outputs could not be written to" in stderr
    assert "No space left on device" in stderr and "bad input" not in stderr


def test_an_interrupt_during_a_tool_keeps_that_round_in_the_written_trace(tmp_path, capsys, scripted_backends,
                                                                           monkeypatch):
    class Interrupted(KnownSegmenter):
        def segment(self, image, phrase, score_threshold=0.5):
            raise KeyboardInterrupt  # what the SIGINT/SIGTERM handler raises while SAM 3 runs

    monkeypatch.setattr(cli, "build_backends", lambda settings: scripted_backends(settings, Interrupted({})))
    code, _, stderr = run(tmp_path, capsys)
    assert code == EXIT_STOPPED
    trace = load_trace(tmp_path / "out")
    assert trace.status == "cancelled"
    assert [(r.call.name, r.call.parameters, r.error) for r in trace.rounds] == [
        ("segment_phrase", {"text_prompt": "cup"}, "cancelled")]
