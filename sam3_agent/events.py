"""The events of a run, in the order ``Agent.run`` yields them: one stream that every front end consumes."""

from __future__ import annotations

from dataclasses import dataclass

from .messages import ToolCall
from .types import ContextRecord, MaskVerdict, Round, Trace


@dataclass(frozen=True)
class RoundStarted:
    """A round begins; ``context`` is what the main request will contain."""

    round_index: int
    context: ContextRecord
    max_rounds: int


@dataclass(frozen=True)
class TokenStreamed:
    """A piece of the main model's output, as generated."""

    round_index: int
    text: str


@dataclass(frozen=True)
class ToolStarted:
    """A parsed tool call is about to run."""

    round_index: int
    call: ToolCall


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
