"""What the app shows, as plain records: agent events and traces mapped to views (no Gradio, no HTML).

``RunView.apply`` folds the event stream of a live run into the state of the screen (finished
rounds, the round in progress, the context panel (``context_view``), the status line, the final masks);
``trace_round_views`` gives the same views for a saved trace, round by round, and ``timeline_rows`` one line
per round. ``html`` renders them.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from ..agent.parsing import THINK_CLOSE, THINK_OPEN, parse_response
from ..events import Event, MaskVerdictReady, RoundFinished, RoundStarted, RunFinished, TokenStreamed, ToolStarted
from ..mask_set import Masks, to_coco_results
from ..messages import ImagePart, Message, ToolCall
from ..types import MaskVerdict, Round, RunStatus, Trace
from .context_view import ContextPanel, context_panel

STATUS_TITLES: dict[str, str] = {
    "idle": "Ready",
    "running": "Running",
    "done": "Done",
    "no_mask": "No mask",
    "max_rounds": "Round budget exhausted",
    "failed": "Failed",
    "cancelled": "Stopped",
    "stopping": "Stopping",
    "error": "Error",
}

# Tool-call tags as models write them (ours and Qwen's native one), for display only: ``parsing`` reads calls.
_TOOL_TAG = re.compile(r"<\s*/?\s*(?:tool_call|tool)\s*>", re.IGNORECASE)
_PARTIAL_TAG = re.compile(r"<[^<>\s]{0,11}$")


# ------------------------------------------------------------------ records


@dataclass(frozen=True)
class VerdictCard:
    """One mask's verification: its views, the verdict and the verifier's reasoning.

    Attributes:
        mask_number: 1-based number in the rendering that was examined; ``total`` masks in all.
        verdict: ``"accept"`` or ``"reject"``.
        fallback: True when no verdict could be read and the mask was kept.
        reasoning: the verifier's raw output(s), first try first, separated by a rule.
        mask_view / zoom_view: the images the verifier saw.
        seconds: wall time of this verification.
    """

    mask_number: int
    total: int
    verdict: str
    fallback: bool
    reasoning: str
    mask_view: ImagePart
    zoom_view: ImagePart
    seconds: float


@dataclass(frozen=True)
class RoundView:
    """One round as shown: reasoning, tool call, tool reply, overlay, verdict cards, cost.

    Attributes:
        index / max_rounds: "round 3 / 30".
        reasoning: the model's thinking, without its ``<think>`` / tool-call markup.
        streaming: True while the round is in progress (reasoning still growing, shown open).
        call_text: the tool call, e.g. ``segment_phrase(text_prompt="cup")``, or ``None``.
        mistake: the feedback key of a model mistake (e.g. ``"no_tool_call"``), or ``None``; what the model was
            told is ``reply_text``.
        stopped: True when the user stopped the run during this round.
        failure: what failed when a backend fault ended the run in this round, or ``None``.
        reply_text: the text sent back to the model, or ``None`` (run ended / in progress).
        summary: the tool's one-line summary (``"2 mask(s) for 'cup'"``).
        overlay: the numbered overlay the model saw next (after segment_phrase / examine), or ``None``.
        cards: the verdict cards (``examine_each_mask`` only).
        seconds: VLM + tool wall time (``None`` while streaming).
        prompt_tokens / output_tokens: when known.
        finished_at: UNIX time at which the live view received the round's end (``None`` otherwise).
        writing_call: while streaming, the tool call the model is writing (markup removed), else ``""``.
    """

    index: int
    max_rounds: int | None
    reasoning: str
    streaming: bool
    call_text: str | None = None
    mistake: str | None = None
    stopped: bool = False
    failure: str | None = None
    reply_text: str | None = None
    summary: str = ""
    overlay: ImagePart | None = None
    cards: tuple[VerdictCard, ...] = ()
    seconds: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    finished_at: float | None = None
    writing_call: str = ""


@dataclass(frozen=True)
class TimelineRow:
    """One round in the timeline (Inspect tab): what it did and what it cost, at a glance.

    Attributes:
        index: 1-based round number.
        tool: the tool called (``"-"`` when no call could be read).
        outcome: one line: the tool's summary, the mistake, "stopped" or the failure.
        kind: ``"ok"``, ``"mistake"``, ``"stopped"``, ``"failed"`` or ``"answer"`` (the round that ended the run).
        seconds: VLM + tool wall time.
        prompt_tokens / output_tokens: when known.
    """

    index: int
    tool: str
    outcome: str
    kind: str
    seconds: float
    prompt_tokens: int | None
    output_tokens: int | None


@dataclass(frozen=True)
class StatusLine:
    """The status line: ``kind`` is a ``RunStatus``, ``"idle"`` or ``"error"``; ``text`` is shown."""

    kind: str
    text: str


@dataclass(frozen=True)
class FinalMaskRow:
    """One final mask: 1-based number, SAM 3 score, area (pixels) and box ``[x, y, w, h]`` (pixels)."""

    number: int
    score: float
    area: int
    bbox_xywh: tuple[float, float, float, float]


# ------------------------------------------------------------------ mapping functions


def call_text(call: ToolCall) -> str:
    """A readable tool call: ``name(param=json, ...)`` with JSON values (``examine_each_mask()``)."""
    params = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in call.parameters.items())
    return f"{call.name}({params})"


def model_name(model: object) -> str:
    """How the page names a model: a Hub id (``org/name``) or server model name as is, a local folder by its
    own name only (the page never shows the server's file paths)."""
    text = str(model or "unknown")
    if text.startswith(("/", "./", "../", "~", "\\")) or text.count("/") > 1 or ":\\" in text:
        return f"{text.rstrip('/').replace(chr(92), '/').rsplit('/', 1)[-1]} (local folder)"
    return text


def sentence(text: str) -> str:
    """``text`` as a sentence for the page: first letter upper case, ending in a full stop (or ``?``/``!``)."""
    text = text.strip()
    if not text:
        return text
    text = text[0].upper() + text[1:]
    return text if text[-1] in ".?!" else text + "."


def split_output(text: str) -> tuple[str, str]:
    """A model output, finished or still streaming, as (reasoning, tool call being written), markup removed.

    The reasoning is the text before ``</think>`` (or, without it, before the first tool tag) without the
    ``<think>`` tag; the call is what follows the first tool tag, tags removed. Display only: ``parsing``
    decides what the call is.
    """
    close = text.find(THINK_CLOSE)
    if close >= 0:
        reasoning, rest = text[:close], text[close + len(THINK_CLOSE):]
    else:
        reasoning, rest = text, ""
    tag = _TOOL_TAG.search(reasoning) if close < 0 else None
    if tag is not None:
        reasoning, rest = reasoning[:tag.start()], reasoning[tag.start():]
    reasoning = reasoning.replace(THINK_OPEN, "").strip()
    tag = _TOOL_TAG.search(rest)
    if tag is None:
        reasoning = (reasoning + "\n" + rest.strip()).strip() if rest.strip() else reasoning
        return reasoning, ""
    before = rest[:tag.start()].strip()
    if before:
        reasoning = (reasoning + "\n" + before).strip()
    return reasoning, _TOOL_TAG.sub("", rest[tag.start():]).strip()


def verdict_card(verdict: MaskVerdict, total: int) -> VerdictCard:
    """The card of one mask verification."""
    return VerdictCard(
        mask_number=verdict.mask_number,
        total=total,
        verdict=verdict.verdict,
        fallback=verdict.source != "model",  # no usable verdict, or the check failed: kept either way
        reasoning="\n\n---\n\n".join([o.strip() for o in verdict.outputs] + ([verdict.error] if verdict.error else [])),
        mask_view=verdict.mask_view,
        zoom_view=verdict.zoom_view,
        seconds=verdict.seconds,
    )


def round_view(round_record: Round, max_rounds: int | None, finished_at: float | None = None) -> RoundView:
    """The view of a finished round."""
    r = round_record
    thinking = parse_response(r.output, r.finish_reason).thinking if r.output else ""
    if not thinking:
        thinking = split_output(r.output)[0]  # no <think> block: the text before the call, markup removed
    result = r.result
    overlay = None
    reply_text = None
    cards: tuple[VerdictCard, ...] = ()
    if result is not None:
        if result.reply is not None:
            reply_text = result.reply.text
            images = result.reply.images
            overlay = images[-1] if images and r.error is None else None
        cards = tuple(verdict_card(v, len(result.verdicts)) for v in result.verdicts)
    mistake = None
    stopped = r.error == "cancelled"  # the agent's marker for a round the user stopped
    failure = (r.error_detail or "backend failure") if r.error == "backend_error" else None
    if r.error and not stopped and failure is None:
        mistake = r.error  # what the model was told (the detail included) is the reply
        if reply_text is None and r.error_detail:
            reply_text = r.error_detail
    return RoundView(
        index=r.index,
        max_rounds=max_rounds,
        reasoning=thinking,
        streaming=False,
        call_text=call_text(r.call) if r.call is not None else None,
        mistake=mistake,
        stopped=stopped,
        failure=failure,
        reply_text=reply_text,
        summary=result.summary if result is not None else "",
        overlay=overlay,
        cards=cards,
        seconds=r.vlm_seconds + r.tool_seconds,
        prompt_tokens=r.prompt_tokens,
        output_tokens=r.output_tokens,
        finished_at=finished_at,
    )


def timeline_row(round_record: Round, last: bool = False) -> TimelineRow:
    """The timeline row of a finished round; ``last``: it is the trace's final round (an answer if it ended well)."""
    r = round_record
    summary = r.result.summary if r.result is not None else ""
    if r.error == "cancelled":
        kind, outcome = "stopped", "stopped by the user"
    elif r.error == "backend_error":
        kind, outcome = "failed", f"failed: {r.error_detail or 'backend failure'}"
    elif r.error:
        kind, outcome = "mistake", f"mistake: {r.error.replace('_', ' ')}"
    else:
        ends = r.result is not None and r.result.ends_run
        kind, outcome = ("answer" if ends and last else "ok"), summary or "-"
    return TimelineRow(r.index, r.call.name if r.call is not None else "-", outcome, kind,
                       r.vlm_seconds + r.tool_seconds, r.prompt_tokens, r.output_tokens)


def timeline_rows(trace: Trace) -> list[TimelineRow]:
    """One row per round of ``trace``, in order."""
    return [timeline_row(r, i == len(trace.rounds) - 1) for i, r in enumerate(trace.rounds)]


def final_mask_rows(masks: Masks | None) -> list[FinalMaskRow]:
    """One row per final mask, in answer order (empty for no mask or an unfinished run)."""
    if masks is None or len(masks) == 0:
        return []
    return [
        FinalMaskRow(i + 1, round(float(r["score"]), 4), int(r["area"]), tuple(round(float(v), 1) for v in r["bbox"]))
        for i, r in enumerate(to_coco_results(masks))
    ]


def final_status_line(trace: Trace) -> StatusLine:
    """The status line of a finished (or abandoned) run."""
    rounds = len(trace.rounds)
    after = f"after {rounds} round{'s' if rounds != 1 else ''}"
    status = trace.status
    if status == "done":
        count = len(trace.final_masks) if trace.final_masks is not None else 0
        text = f"Done: {count} mask{'s' if count != 1 else ''} selected {after}."
    elif status == "no_mask":
        text = f"No mask: the model reported that nothing matches the query ({after})."
    elif status == "max_rounds":
        text = f"Round budget exhausted: no answer {after}."
    elif status == "failed":
        text = sentence(f"Failed {after}: {trace.error or 'unknown error'}")
    elif status == "cancelled":
        why = trace.error or "stopped by the user"
        reason = "" if why == "stopped by the user" else f": {why}"
        text = f"Stopped {after}{reason}. The trace so far is kept."
    else:
        text = f"Running: {rounds} round(s) so far."
    return StatusLine(status, text)


# ------------------------------------------------------------------ the live run


@dataclass
class LiveRound:
    """The round in progress (mutable while events arrive)."""

    index: int
    max_rounds: int
    text: str = ""
    call: ToolCall | None = None
    cards: list[VerdictCard] = field(default_factory=list)

    def view(self) -> RoundView:
        # a tag still arriving ("<thi") is held back until it is complete, so markup never flashes
        reasoning, writing = split_output(_PARTIAL_TAG.sub("", self.text))
        return RoundView(
            index=self.index,
            max_rounds=self.max_rounds,
            reasoning=reasoning,
            streaming=True,
            call_text=call_text(self.call) if self.call is not None else None,
            cards=tuple(self.cards),
            writing_call=writing if self.call is None else "",
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

    def apply(self, event: Event, messages: Sequence[Message]) -> None:
        """Fold one event in; ``messages`` is the run's conversation so far (``AgentRun.trace.messages``)."""
        if isinstance(event, RoundStarted):
            self.max_rounds = event.max_rounds
            self.live = LiveRound(event.round_index, event.max_rounds)
            self.context = replace(context_panel(messages, event.context, event.round_index), pending=True)
            self.activity = "generating"
        elif isinstance(event, TokenStreamed):
            if self.live is not None and self.live.index == event.round_index:
                self.live.text += event.text
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


# ------------------------------------------------------------------ saved traces


@dataclass(frozen=True)
class InspectedRound:
    """One round of a saved trace: its view and its context panel."""

    round: RoundView
    context: ContextPanel


def trace_round_views(trace: Trace) -> list[InspectedRound]:
    """Every round of a saved trace with the same views as a live run.

    Raises:
        ValueError: when a round's context names messages the trace does not have.
    """
    max_rounds = trace.settings.get("max_rounds")
    budget = int(max_rounds) if isinstance(max_rounds, (int, float)) else None
    return [
        InspectedRound(round_view(r, budget), context_panel(trace.messages, r.context, r.index, r.prompt_tokens))
        for r in trace.rounds
    ]

