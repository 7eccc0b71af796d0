"""The events of a run, in the order ``Agent.run`` yields them: one stream that every front end consumes."""

from __future__ import annotations

from dataclasses import dataclass

from .messages import Message, ToolCall
from .types import ContextRecord, MaskVerdict, Round, Trace


@dataclass(frozen=True)
class RoundStarted:
    """A round begins.

    Attributes:
        context: what the main request will contain (indices into ``messages``).
        messages: the conversation the request is built from (``Trace.messages`` as the round began), a snapshot that
            later rounds do not change: with ``context`` it is all a context panel needs.
    """

    round_index: int
    context: ContextRecord
    max_rounds: int
    messages: tuple[Message, ...]


@dataclass(frozen=True)
class TokenStreamed:
    """A piece of the main model's output, with the output so far as the agent reads it.

    Attributes:
        text: the piece, as generated (the pieces of a round joined are its output so far).
        reasoning: the reasoning streamed so far, markup removed (``agent.output_parts.split_streamed``).
        writing_call: the tool call being written so far, markup removed; ``""`` before a tool tag.
    """

    round_index: int
    text: str
    reasoning: str = ""
    writing_call: str = ""


@dataclass(frozen=True)
class ToolStarted:
    """A parsed tool call is about to run; ``reasoning`` is the reasoning the agent read before it."""

    round_index: int
    call: ToolCall
    reasoning: str = ""


@dataclass(frozen=True)
class MaskVerdictReady:
    """One mask was verified during ``examine_each_mask``."""

    round_index: int
    verdict: MaskVerdict
    total: int


@dataclass(frozen=True)
class RoundFinished:
    """A round ended; ``round`` holds everything about it."""

    round: Round


@dataclass(frozen=True)
class RunFinished:
    """The run ended (any status); ``trace`` is complete."""

    trace: Trace


Event = RoundStarted | TokenStreamed | ToolStarted | MaskVerdictReady | RoundFinished | RunFinished
