"""An unexpected fault inside a run (a bug) ends it as ``failed`` with its trace and a message in words."""

from __future__ import annotations

import re

from conftest import KnownSegmenter, tool

from sam3_agent.agent.config import AgentConfig
from sam3_agent.agent.loop import Agent
from sam3_agent.vlm.scripted import ScriptedVLM


def test_a_bug_in_a_tool_fails_the_run_in_words_and_keeps_the_trace(astronaut, caplog):
    class Buggy(KnownSegmenter):
        def segment(self, image, phrase, score_threshold=0.5):
            return {}["no such key"]  # a KeyError: a bug, not a backend fault

    trace = Agent(ScriptedVLM([tool("segment_phrase", text_prompt="person")]), Buggy({}), AgentConfig()).run(
        astronaut, "people")
    assert trace.status == "failed" and trace.error == (
        "an internal error stopped the run (a bug: the log has the details); the trace so far is kept")
    assert not re.search(r"\w*(Error|Exception)\b", trace.error)
    assert "KeyError" in caplog.text  # the details are logged for whoever fixes it
