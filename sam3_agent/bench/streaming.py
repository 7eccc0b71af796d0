"""Bytes the Run tab streams to the browser while a long reasoning is written: ``python -m sam3_agent.bench.streaming``.

A scripted run (a Thinking model's reasoning of ``--tokens`` words, then ``segment_phrase``; a short round that
selects) is folded event by event into the app's ``RunView`` and turned into the Run panel's values by the app's
own output function (``ui.run.outputs.run_outputs``), one update per ``--tokens-per-update`` tokens as the
handler's throttle sends them (``STREAM_INTERVAL_S``) and one per other event. Each update goes through Gradio's
own postprocessing (the Run panel's real components) and its diff of a generator's outputs (``gradio.utils.diff``,
as ``Blocks.handle_streaming_diffs`` does): the bytes counted are the JSON of what each update sends. "before"
resends the live round as one HTML string (the app until this benchmark); "after" is the app as it is. The
last update of a run (Gradio sends every output in full once) is counted apart.

Prints, per round and mode: updates, bytes sent, the text shown (reasoning and call, in characters), their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import gradio as gr
from gradio import utils as gradio_utils
from PIL import Image

from ..agent.config import AgentConfig
from ..agent.loop import Agent
from ..events import Event, RoundFinished, RoundStarted, RunFinished, TokenStreamed
from ..ui.html import RunPage
from ..ui.run.layout import _answer_columns
from ..ui.run.outputs import RunOutputs, live_round_html, run_outputs
from ..ui.run_view import RunView
from ..vlm.scripted import ScriptedVLM
from .sam_outputs import PostProcessedSegmenter
from .scene import QUERY, photo_file

DEFAULT_TOKENS = 8000  # a long Thinking-model reasoning (issue 24: 8k tokens sent 30-44 MB)
# A Thinking 8B model on one GPU decodes ~80 tokens/s; the handler sends token updates at most every 0.05 s.
DEFAULT_TOKENS_PER_UPDATE = 4
WORDS = ("the", "mask", "left", "child", "blue", "vest", "maybe", "second", "phrase", "&", "<b>", "check")


def reasoning_text(tokens: int) -> str:
    """``tokens`` words of scripted reasoning (each a streamed piece; some need escaping in HTML)."""
    return " ".join(f"{WORDS[i % len(WORDS)]}{i}" for i in range(tokens))


def scripted_events(tokens: int) -> Iterator[Event]:
    """The events of a two-round run whose first round reasons ``tokens`` words."""
    first = {"name": "segment_phrase", "parameters": {"text_prompt": "child"}}
    last = {"name": "select_masks_and_return", "parameters": {"final_answer_masks": [1]}}
    vlm = ScriptedVLM([f"<think>{reasoning_text(tokens)}</think>\n<tool>{json.dumps(first)}</tool>",
                       f"<think>mask 1 is the child</think>\n<tool>{json.dumps(last)}</tool>"])
    agent = Agent(vlm, PostProcessedSegmenter(2), AgentConfig(max_rounds=3))
    image = Image.open(io.BytesIO(photo_file(640, 480))).convert("RGB")
    yield from agent.start(image, QUERY)


@dataclass
class RoundBytes:
    """What one round sent (JSON of Gradio's diffs): while its text streamed (``streamed``, over ``updates``
    token updates), at its other events (``events``: its start, tool, verdicts and end, with their images), and
    the text it shows (characters of reasoning and call)."""

    index: int
    updates: int = 0
    streamed: int = 0
    events: int = 0
    text: int = 0

    @property
    def ratio(self) -> float:
        """Bytes streamed per character of text shown."""
        return self.streamed / max(self.text, 1)


class GradioWire:
    """Gradio's postprocessing and streaming diff over the Run panel's real components."""

    def __init__(self) -> None:
        with gr.Blocks() as self.blocks:
            panel = _answer_columns(ready=True)
            trigger = gr.Button()
            trigger.click(lambda: None, outputs=panel.outputs)
        self.block_fn = self.blocks.fns[max(self.blocks.fns)]
        self.previous: list[Any] | None = None

    def send(self, outputs: Sequence[Any]) -> int:
        """Bytes of the JSON an update of ``outputs`` sends (the first in full, later ones as diffs)."""
        data = asyncio.run(self.blocks.postprocess_data(self.block_fn, list(outputs), None))
        sent = data if self.previous is None else [gradio_utils.diff(old, new)
                                                   for old, new in zip(self.previous, data, strict=True)]
        self.previous = data
        return len(json.dumps(sent).encode("utf-8"))

    def final(self) -> int:
        """Bytes of a run's last message: every output in full."""
        return len(json.dumps(self.previous).encode("utf-8"))


def as_before(outputs: RunOutputs) -> RunOutputs:
    """The same page as the app sent it before: the live round as one HTML string."""
    return outputs._replace(live=live_round_html(outputs.live))


def measure(events: Sequence[Event], tokens_per_update: int, before: bool) -> tuple[list[RoundBytes], int]:
    """Per-round bytes of one mode over ``events``, and the bytes of the run's last (full) message."""
    view, page, wire = RunView(3), RunPage(), GradioWire()
    rounds: list[RoundBytes] = []
    pending = 0
    for event in events:
        view.apply(event)
        if isinstance(event, RoundStarted):
            rounds.append(RoundBytes(event.round_index))
        if isinstance(event, RunFinished):
            break
        pending += 1
        if isinstance(event, TokenStreamed) and pending < tokens_per_update:
            continue
        pending = 0
        outputs = run_outputs(view, page)
        sent = wire.send(as_before(outputs) if before else outputs)
        if isinstance(event, TokenStreamed):
            rounds[-1].updates += 1
            rounds[-1].streamed += sent
        elif rounds:
            rounds[-1].events += sent
        if isinstance(event, RoundFinished):
            rounds[-1].text = len(event.round.reasoning or "") + len(view.rounds[-1].call_text or "")
    return rounds, wire.final()


def format_rows(mode: str, rounds: Sequence[RoundBytes], final: int) -> list[str]:
    rows = [f"{mode:<6} round {r.index}: {r.text:>7,} characters shown; streamed {r.streamed:>11,} bytes in "
            f"{r.updates:>4} updates ({r.ratio:,.1f}x the text); its other events {r.events:>9,} bytes"
            for r in rounds]
    rows.append(f"{mode:<6} last message (every output in full, once): {final:,} bytes")
    return rows


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    parser = argparse.ArgumentParser(prog="python -m sam3_agent.bench.streaming", description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=DEFAULT_TOKENS, help="words of reasoning in round 1")
    parser.add_argument("--tokens-per-update", type=int, default=DEFAULT_TOKENS_PER_UPDATE,
                        help="streamed tokens per token update (the handler's throttle at the model's speed)")
    args = parser.parse_args(argv)
    events = list(scripted_events(args.tokens))
    for mode in ("before", "after"):
        rounds, final = measure(events, args.tokens_per_update, before=mode == "before")
        print("\n".join(format_rows(mode, rounds, final)), file=out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
