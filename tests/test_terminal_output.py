"""Model text printed by the command line is safe for a terminal: control characters and escape sequences are shown,
not obeyed; the trace keeps the raw text."""

from __future__ import annotations

import io
import unicodedata

from conftest import KnownSegmenter, photo, tool

from sam3_agent.agent.config import AgentConfig
from sam3_agent.agent.loop import Agent
from sam3_agent.cli.run import EventPrinter
from sam3_agent.datasets.batch.items import BatchItem
from sam3_agent.datasets.batch.layout import BatchLayout
from sam3_agent.datasets.batch.records import failure_record
from sam3_agent.datasets.batch.runner import BatchProgress
from sam3_agent.messages import terminal_safe
from sam3_agent.vlm.scripted import ScriptedVLM

CLEAR_SCREEN = "\x1b[2J"
RETITLE = "\x1b]0;owned\x07"  # OSC: sets the terminal window's title
RAW = "\x00\x02\x04"  # what the tiny Qwen3.5 wrote


def unsafe_characters(text: str) -> list[str]:
    """The characters of ``text`` a terminal acts on: controls other than newline and tab, bidi overrides."""
    return [c for c in text if c not in "\n\t" and (unicodedata.category(c) == "Cc" or "\u202a" <= c <= "\u202e")]


def test_terminal_safe_shows_controls_as_escapes_and_keeps_everything_else():
    text = f"a{RAW}b{CLEAR_SCREEN}\x9b1m\u202ecba\r\x7f\n\tü 😀 日本"
    assert terminal_safe(text) == "a\\x00\\x02\\x04b\\x1b[2J\\x9b1m\\u202ecba\\x0d\\x7f\n\tü 😀 日本"
    assert terminal_safe("the cup on the left") == "the cup on the left"


def test_the_cli_prints_model_text_escaped_and_the_trace_keeps_it_raw():
    # raw controls inside a JSON string: not valid JSON, so a mistake whose excerpt is printed
    bad_json = (f'<think>look{RAW}{RETITLE}</think>\n'
                f'<tool>{{"name": "segment_phrase", "parameters": {{"text_prompt": "cup{CLEAR_SCREEN}"}}}}</tool>')
    escaped_phrase = tool("segment_phrase", f"again{CLEAR_SCREEN}", text_prompt="cup\u202e")
    vlm = ScriptedVLM([bad_json, escaped_phrase, tool("report_no_mask", f"none{RAW}")])
    agent = Agent(vlm, KnownSegmenter({}), AgentConfig(max_rounds=5))
    run = agent.start(photo("coffee.jpg"), "the cup")
    stream = io.StringIO()
    printer = EventPrinter(stream)
    for event in run:
        printer(event)
    printed = stream.getvalue()
    assert unsafe_characters(printed) == []
    assert "  reasoning: look\\x00\\x02\\x04\\x1b]0;owned\\x07\n" in printed  # the mistake's round, shown
    assert "  reasoning: again\\x1b[2J\n" in printed
    assert '  call: segment_phrase(text_prompt="cup\\u202e")\n' in printed
    assert "  reasoning: none\\x00\\x02\\x04\n" in printed
    rounds = run.trace.rounds
    assert [r.output for r in rounds] == [bad_json, escaped_phrase, tool("report_no_mask", f"none{RAW}")]
    assert rounds[1].call.parameters == {"text_prompt": "cup\u202e"}


def test_a_batch_failure_line_quoting_a_server_is_printed_escaped(tmp_path):
    item = BatchItem("cup", tmp_path / "coffee.jpg", "the cup")
    stream = io.StringIO()
    progress = BatchProgress(BatchLayout(tmp_path / "out", [item]), [item], stream)
    progress.finished(item, failure_record(item, f"the server answered {CLEAR_SCREEN}", 0.1))
    assert "cup: failed: the server answered \\x1b[2J\n" in stream.getvalue()
    assert "\x1b" not in stream.getvalue()
