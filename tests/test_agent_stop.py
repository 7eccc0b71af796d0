"""Stopping or killing a run mid-round keeps the round in flight: its streamed output and its parsed call."""

from __future__ import annotations

import threading

import pytest
from conftest import KnownSegmenter, tool

from sam3_agent.agent.config import AgentConfig
from sam3_agent.agent.loop import Agent
from sam3_agent.events import RoundStarted, TokenStreamed, ToolStarted
from sam3_agent.vlm.scripted import ScriptedVLM

SEGMENT = tool("segment_phrase", "people first", text_prompt="person")


class BlockingSegmenter(KnownSegmenter):
    """Blocks inside ``segment`` until released, like SAM 3 on a big image: lets a test act mid-tool."""

    def __init__(self) -> None:
        super().__init__({"person": [((10, 10, 110, 210), 0.9)]})
        self.entered = threading.Event()
        self.release = threading.Event()

    def segment(self, image, phrase, score_threshold=0.5):
        self.entered.set()
        assert self.release.wait(30)
        return super().segment(image, phrase, score_threshold)


def test_abandoning_during_a_long_segment_keeps_the_round_and_nothing_changes_afterwards(astronaut):
    segmenter = BlockingSegmenter()
    run = Agent(ScriptedVLM([SEGMENT, tool("report_no_mask")]), segmenter, AgentConfig()).start(astronaut, "people")
    driver = threading.Thread(target=lambda: list(run))
    driver.start()
    assert segmenter.entered.wait(30)
    run.abandon("stopped by the user")  # what Stop does when the model call does not end in time
    trace = run.trace
    assert trace.status == "cancelled" and trace.error == "stopped by the user"
    assert len(trace.rounds) == 1
    kept = trace.rounds[0]
    assert (kept.index, kept.call.name, kept.call.parameters, kept.error) == (
        1, "segment_phrase", {"text_prompt": "person"}, "cancelled")
    assert kept.output == SEGMENT and kept.finish_reason == "stop" and kept.result is None
    assert trace.messages[kept.assistant_index].call == kept.call
    messages = len(trace.messages)
    segmenter.release.set()  # the tool ends later: the abandoned run must not change the trace any more
    driver.join(30)
    assert not driver.is_alive()
    assert (trace.status, len(trace.rounds), len(trace.messages)) == ("cancelled", 1, messages)
    assert trace.final_masks is None


def test_stopping_mid_generation_keeps_the_text_streamed_so_far(astronaut):
    words = " ".join(f"word{i}" for i in range(200))
    vlm = ScriptedVLM([f"<think>{words}</think>"])
    run = Agent(vlm, KnownSegmenter({}), AgentConfig()).start(astronaut, "people")
    streamed = []
    for event in run:  # the caller stops iterating, as the CLI does on Ctrl-C
        if isinstance(event, TokenStreamed):
            streamed.append(event.text)
            if len(streamed) == 12:
                break
    run.abandon("stopped by the user (Ctrl-C or SIGTERM)")
    assert len(run.trace.rounds) == 1
    kept = run.trace.rounds[0]
    assert kept.output == "".join(streamed) and kept.finish_reason == "cancelled" and kept.call is None
    assert kept.assistant_index is None and run.trace.status == "cancelled"


def test_an_interrupt_inside_a_tool_keeps_the_round(astronaut):
    class Interrupted(KnownSegmenter):
        def segment(self, image, phrase, score_threshold=0.5):
            raise KeyboardInterrupt  # what a SIGINT/SIGTERM handler raises while SAM 3 runs

    run = Agent(ScriptedVLM([SEGMENT]), Interrupted({}), AgentConfig()).start(astronaut, "people")
    with pytest.raises(KeyboardInterrupt):
        list(run)
    run.abandon("stopped by the user (Ctrl-C or SIGTERM)")
    assert [(r.call.name, r.error) for r in run.trace.rounds] == [("segment_phrase", "cancelled")]


def test_closing_the_event_stream_mid_tool_keeps_the_round(astronaut, segmenter):
    run = Agent(ScriptedVLM([SEGMENT]), segmenter, AgentConfig()).start(astronaut, "people")
    events = iter(run)
    while not isinstance(next(events), ToolStarted):
        pass
    events.close()  # a browser tab closed while the tool was about to run
    assert run.trace.status == "cancelled" and "closed before it finished" in run.trace.error
    assert [(r.call.name, r.error) for r in run.trace.rounds] == [("segment_phrase", "cancelled")]


def test_a_round_that_ended_is_not_recorded_twice(astronaut, segmenter):
    run = Agent(ScriptedVLM([SEGMENT, SEGMENT]), segmenter, AgentConfig()).start(astronaut, "people")
    events = iter(run)
    started = 0
    for event in events:
        started += isinstance(event, RoundStarted)
        if started == 2:
            break
    run.abandon("stopped by the user")
    assert [r.index for r in run.trace.rounds] == [1, 2]
    assert run.trace.rounds[0].error is None and run.trace.rounds[1].error == "cancelled"


def test_stop_in_the_app_during_a_long_segment_keeps_round_1_in_the_downloaded_trace(tmp_path, monkeypatch):
    from conftest import ASSETS

    from sam3_agent.presets import Backends
    from sam3_agent.trace.io import load_trace
    from sam3_agent.ui.run import handlers as handlers_module
    from sam3_agent.ui.run.handlers import Handlers
    from sam3_agent.ui.run.runner import AgentFactory
    from sam3_agent.ui.run.slot import RunSlot
    from sam3_agent.ui.settings import AppSettings

    monkeypatch.setattr(handlers_module, "STOP_GRACE_S", 0.2)
    segmenter = BlockingSegmenter()
    idle = ScriptedVLM([])
    factory = AgentFactory(AppSettings(max_rounds=5), Backends(idle, idle, segmenter, {}),
                           {"main": [SEGMENT, tool("report_no_mask")], "verify": []})
    handlers = Handlers(factory, warn=lambda message: None, root=tmp_path / "app")
    slot = RunSlot()
    pages: list = []
    driver = threading.Thread(target=lambda: pages.extend(handlers.run(str(ASSETS / "coffee.jpg"), "people", 5, 0.5,
                                                                       slot)))
    driver.start()
    assert segmenter.entered.wait(30)
    status, downloads = list(handlers.stop(slot))[-1]  # "Stopping" first, then the final status and files
    assert "Stopped after 1 round" in status
    trace = load_trace(downloads[1])
    assert trace.status == "cancelled" and [(r.call.name, r.error) for r in trace.rounds] == [
        ("segment_phrase", "cancelled")]
    segmenter.release.set()
    driver.join(30)
    assert not driver.is_alive() and len(slot.run.trace.rounds) == 1  # the late tool result changed nothing
