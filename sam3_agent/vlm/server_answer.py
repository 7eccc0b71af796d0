"""What one call to a server has received, put together: text, reasoning, tool calls, the finish reason.

The text has the form the agent's parser reads: reasoning that came apart (``delta.reasoning_content`` or
``delta.reasoning``) then ``</think>`` where the answer begins, then the content, then each call a server's tool
parser took out of the text (``delta.tool_calls``: vLLM ``--enable-auto-tool-choice --tool-call-parser hermes``,
Ollama) written back as ``<tool>{"name": ..., "parameters": ...}</tool>``. The arguments go in as the model wrote
them, so a call whose arguments are not JSON reaches the parser, which tells the model what was wrong.

Finish reasons: ``stop`` and the other names servers give a normal end (``tool_calls``, ``eos_token``...) end the
answer as ``"stop"``; ``length`` (and ``max_tokens``) as ``"length"``; any other (``abort`` when the engine is
scaled down or paused, ``error``, ``content_filter``) is a server fault, not the model's reply: ``fault`` words it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import BackendError
from ..messages import Generation
from .sse_answer import Delta

THINK_END = "</think>"
NORMAL_ENDS = frozenset({"stop", "tool_calls", "function_call", "eos", "eos_token", "stop_sequence", "end_turn"})
LENGTH_ENDS = frozenset({"length", "max_tokens"})
# What a fault's finish reason means, for the message (others: a reason this client does not know).
FAULT_MEANINGS = {
    "abort": "the engine aborted the request (it may have been scaled down, paused, restarted or preempted)",
    "error": "the engine reported an error while generating",
    "content_filter": "a content filter on the server or a proxy cut the answer off",
}


@dataclass
class _Call:
    name: str = ""
    arguments: str = ""


@dataclass
class AnswerSoFar:
    """What one call has received: its text pieces, calls, finish reason, usage report, whether it reasoned, was
    stopped, or streamed any text to the caller."""

    pieces: list[str] = field(default_factory=list)
    calls: dict[int, _Call] = field(default_factory=dict)
    finish: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    in_reasoning: bool = False
    reasoned: bool = False
    cancelled: bool = False

    def add(self, delta: Delta) -> str:
        """Record ``delta``; returns its text piece: reasoning, then ``</think>`` where the answer begins, then
        content (calls are kept until the end, ``calls_text``)."""
        self.usage = delta.usage or self.usage
        piece = ""
        if delta.reasoning:
            piece, self.in_reasoning, self.reasoned = delta.reasoning, True, True
        if delta.content:
            piece += (THINK_END if self.in_reasoning else "") + delta.content
            self.in_reasoning = False
        if piece:
            self.pieces.append(piece)
        for call_piece in delta.calls:
            call = self.calls.setdefault(call_piece.index, _Call())
            call.name += call_piece.name
            call.arguments += call_piece.arguments
        self.finish = delta.finish_reason or self.finish
        return piece

    def calls_text(self) -> str:
        """The calls received, written as the agent's parser reads them (closing the reasoning first), recorded as
        the answer's last piece; ``""`` when none came."""
        if not self.calls or self.cancelled:
            return ""
        written = []
        for _, call in sorted(self.calls.items()):
            arguments = call.arguments.strip() or "{}"
            written.append(f'<tool>{{"name": {json.dumps(call.name, ensure_ascii=False)}, "parameters": '
                           f"{arguments}}}</tool>")
        text = (THINK_END if self.in_reasoning else "") + ("\n" if self.pieces else "") + "\n".join(written)
        self.in_reasoning = False
        self.calls = {}
        self.pieces.append(text)
        return text

    def fault(self, where: str) -> str | None:
        """The message for an answer that ended with a fault's finish reason (``None``: a normal end)."""
        if self.cancelled or self.finish is None or self.finish in NORMAL_ENDS | LENGTH_ENDS:
            return None
        meaning = FAULT_MEANINGS.get(self.finish, "a finish reason that is neither a normal end nor the token limit")
        return (f"{where} ended its answer with finish reason {self.finish!r}: {meaning}; "
                f"{sum(map(len, self.pieces))} characters had arrived. Check the server's log")

    def generation(self, where: str) -> Generation:
        """The call's ``Generation``.

        Raises:
            BackendError: the answer ended without a finish reason (the reader always sends one or an error).
        """
        prompt_tokens = self.usage.get("prompt_tokens")
        output_tokens = self.usage.get("completion_tokens")
        text = "".join(self.pieces)
        if self.cancelled:
            return Generation(text, "cancelled", prompt_tokens, output_tokens, self.reasoned)
        if self.finish is None:  # the reader always ends with a finish reason or an error; guard anyway
            raise BackendError(f"{where} ended the answer without a finish reason: check the server log")
        finish = "length" if self.finish in LENGTH_ENDS else "stop"
        return Generation(text, finish, prompt_tokens, output_tokens, self.reasoned)
