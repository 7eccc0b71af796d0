"""The round being run: what is known of it so far, and the ``Round`` record built from that, by keyword.

Kept so that stopping, abandoning or a fault mid-round still records the round with what it had produced (the
streamed output, the parsed call); every ``Round`` of the loop is built here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..messages import Generation, ToolCall
from ..types import ContextRecord, Round
from .output_parts import reasoning_of


@dataclass
class RoundInFlight:
    """What is known of the round being run.

    Attributes:
        index: 1-based round number; ``context``: what its request contained.
        started: ``time.perf_counter()`` when the generation began (seconds).
        text: the output streamed so far.
        reasoning_hint: the VLM opens the reasoning outside its text (known before the stream ends; the
            ``Generation`` says for sure).
        generation: the finished generation, once the stream ended.
        vlm_seconds: wall time of the generation, once it ended.
        call / stored_text: the parsed call and the assistant text stored for it, once the tool is about to run.
        reasoning: the reasoning as the agent read it, once the output was parsed.
        tool_started: ``time.perf_counter()`` when the tool began.
    """

    index: int
    context: ContextRecord
    started: float
    text: str = ""
    reasoning_hint: bool = False
    generation: Generation | None = None
    vlm_seconds: float | None = None
    call: ToolCall | None = None
    stored_text: str = ""
    reasoning: str | None = None
    tool_started: float | None = None

    @property
    def starts_in_reasoning(self) -> bool:
        """Whether the output begins inside the reasoning (the generation's word once it ended)."""
        return self.generation.starts_in_reasoning if self.generation is not None else self.reasoning_hint

    def record(self, **fields: Any) -> Round:
        """The ``Round`` as the flight stands; ``fields`` (``Round``'s field names) replace or add to what it knows.

        Defaults: the generation's output, finish reason and token counts (the streamed text, ``"cancelled"`` and
        ``None`` before it ended), the parsed call, no error, result or messages, the VLM time so far and the tool
        time so far (0 before the tool began); the reasoning read from the output when it was not parsed.
        """
        now = time.perf_counter()
        generation = self.generation
        values: dict[str, Any] = {
            "index": self.index,
            "context": self.context,
            "output": generation.text if generation is not None else self.text,
            "finish_reason": generation.finish_reason if generation is not None else "cancelled",
            "call": self.call,
            "error": None,
            "error_detail": None,
            "result": None,
            "assistant_index": None,
            "reply_index": None,
            "prompt_tokens": generation.prompt_tokens if generation is not None else None,
            "output_tokens": generation.output_tokens if generation is not None else None,
            "vlm_seconds": self.vlm_seconds if self.vlm_seconds is not None else now - self.started,
            "tool_seconds": now - self.tool_started if self.tool_started is not None else 0.0,
        }
        values.update(fields)
        if "reasoning" not in values:
            values["reasoning"] = self.reasoning if self.reasoning is not None else reasoning_of(
                values["output"], values["finish_reason"], self.starts_in_reasoning)
        return Round(**values)
