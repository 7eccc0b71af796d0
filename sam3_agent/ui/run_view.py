"""The screen of a live run as plain records: ``RunView`` folds the agent's events into finished rounds, the round
in progress, the context panel, the status line and the final masks (no Gradio, no HTML; ``html`` renders them).

Every event carries what it changes (the conversation snapshot, the reasoning streamed so far), so the view needs
neither the run's state nor a parser.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..events import Event, MaskVerdictReady, RoundFinished, RoundStarted, RunFinished, TokenStreamed, ToolStarted
from ..mask_set import Masks
from ..messages import ToolCall
from ..types import RunStatus, Trace
from .context_view import ContextPanel, context_panel
from .view import RoundView, StatusLine, VerdictCard, call_text, final_status_line, round_view, verdict_card


@dataclass
class LiveRound:
    """The round in progress (mutable while events arrive)."""

    index: int
    max_rounds: int
    reasoning: str = ""  # as the latest ``TokenStreamed`` says (markup removed by the agent)
    writing_call: str = ""
    call: ToolCall | None = None
    cards: list[VerdictCard] = field(default_factory=list)

    def view(self) -> RoundView:
        """The round in progress as its card shows it (the call being written until the parsed call starts)."""
        return RoundView(
            index=self.index,
            max_rounds=self.max_rounds,
            reasoning=self.reasoning,
            streaming=True,
            call_text=call_text(self.call) if self.call is not None else None,
            cards=tuple(self.cards),
            writing_call=self.writing_call if self.call is None else "",
        )


class RunView:
    """The screen of one live run, updated event by event.

    Args:
        max_rounds: the run's round budget (shown before the first round starts).
        clock: UNIX time source stamped on finished rounds (for measuring display latency).

    Attributes:
        rounds: finished rounds in order; ``live``: the round in progress or ``None``.
        context: the context panel of the latest round; ``status``/``error``/``final_masks`` as in
            the trace once it ends; ``activity``: what the run is doing now (for the status line).
        version: incremented on every change of ``rounds`` (lets renderers cache their HTML).
    """

    def __init__(self, max_rounds: int, clock: Callable[[], float] = time.time) -> None:
        self.max_rounds = max_rounds
        self.clock = clock
        self.rounds: list[RoundView] = []
        self.live: LiveRound | None = None
        self.context: ContextPanel | None = None
        self.status: RunStatus = "running"
        self.error: str | None = None
        self.final_masks: Masks | None = None
        self.activity = "starting"
        self.trace: Trace | None = None

    def apply(self, event: Event) -> None:
        """Fold one event in (each event carries what it changes on the screen)."""
        if isinstance(event, RoundStarted):
            self.max_rounds = event.max_rounds
            self.live = LiveRound(event.round_index, event.max_rounds)
            self.context = replace(context_panel(event.messages, event.context, event.round_index), pending=True)
            self.activity = "generating"
        elif isinstance(event, TokenStreamed):
            if self.live is not None and self.live.index == event.round_index:
                self.live.reasoning, self.live.writing_call = event.reasoning, event.writing_call
        elif isinstance(event, ToolStarted):
            if self.live is not None:
                self.live.call = event.call
            self.activity = f"running {event.call.name}"
        elif isinstance(event, MaskVerdictReady):
            if self.live is not None:
                self.live.cards.append(verdict_card(event.verdict, event.total))
            self.activity = f"examined mask {event.verdict.mask_number} of {event.total}"
        elif isinstance(event, RoundFinished):
            finished = event.round
            self.rounds.append(round_view(finished, self.max_rounds, self.clock()))
            self.live = None
            if self.context is not None and self.context.round_index == finished.index:
                self.context = replace(self.context, prompt_tokens=finished.prompt_tokens, pending=False)
            self.activity = "round finished"
        elif isinstance(event, RunFinished):
            self.finish_from(event.trace)

    def finish_from(self, trace: Trace) -> None:
        """End the view from the run's trace (on ``RunFinished``, or for an abandoned run).

        Rounds the trace holds without a ``RoundFinished`` event (the round a backend fault ended)
        are added.
        """
        for missing in trace.rounds[len(self.rounds):]:
            self.rounds.append(round_view(missing, self.max_rounds, self.clock()))
        self.live = None
        if self.context is not None and self.context.pending:  # the round a fault or a stop ended
            ended = next((r for r in trace.rounds if r.index == self.context.round_index), None)
            tokens = ended.prompt_tokens if ended is not None else None
            self.context = replace(self.context, prompt_tokens=tokens, pending=False)
        self.trace = trace
        self.status = trace.status
        self.error = trace.error
        self.final_masks = trace.final_masks
        self.activity = "finished"

    def status_line(self) -> StatusLine:
        """"Running: round 3 / 30, generating" while running; the final status afterwards."""
        if self.status != "running" and self.trace is not None:
            return final_status_line(self.trace)
        current = self.live.index if self.live is not None else len(self.rounds)
        if current == 0:
            return StatusLine("running", f"Running: starting (budget {self.max_rounds} rounds)")
        return StatusLine("running", f"Running: round {current} / {self.max_rounds}, {self.activity}")
