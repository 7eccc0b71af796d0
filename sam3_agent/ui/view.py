"""What the app shows of rounds and traces, as plain records (no Gradio, no HTML).

``round_view`` maps a finished round to what its card shows, from the round alone (the reasoning as the agent read
it: nothing here parses model text); ``trace_round_views`` gives those views for a saved trace with each round's
context panel (``context_view``), ``timeline_rows`` one line per round, ``final_status_line`` and
``final_mask_rows`` the outcome. ``run_view`` folds a live run's events into the same records; ``html`` renders
them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..mask_set import to_coco_results
from ..messages import ImagePart, ToolCall
from ..types import MaskVerdict, Round, Trace
from ..verification import final_mask_checks
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

# ------------------------------------------------------------------ records


@dataclass(frozen=True)
class VerdictCard:
    """One mask's verification: its views, the verdict and the verifier's reasoning.

    Attributes:
        mask_number: 1-based number in the rendering that was examined; ``total`` masks in all.
        verdict: ``"accept"``, ``"reject"`` or ``"unconfirmed"`` (kept without a usable answer: not confirmed).
        fallback: True when the mask was kept without a usable answer (no clear verdict, or the check failed).
        failed: True when the check itself failed (a backend fault; ``fallback`` is True too).
        reasoning: the verifier's raw output(s), first try first, separated by a rule.
        mask_view / zoom_view: the images the verifier saw (``zoom_view`` ``None`` for a mask verified in a group,
            whose ``mask_view`` is the group's view).
        seconds: wall time of this verification.
        group: the numbers of the masks verified together with this one (``()``: alone).
    """

    mask_number: int
    total: int
    verdict: str
    fallback: bool
    failed: bool
    reasoning: str
    mask_view: ImagePart
    zoom_view: ImagePart | None
    seconds: float
    group: tuple[int, ...] = ()


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
        tiles: the overlay's tiles the model saw with it (a dense set: ``imaging.tiles``), else ``()``.
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
    tiles: tuple[ImagePart, ...] = ()
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
    """One final mask: 1-based number, SAM 3 score, area (pixels), box ``[x, y, w, h]`` (pixels) and what verification
    established (``verification.CHECK_STATES``; ``None``: not known)."""

    number: int
    score: float
    area: int
    bbox_xywh: tuple[float, float, float, float]
    check: str | None = None


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


def verdict_card(verdict: MaskVerdict, total: int) -> VerdictCard:
    """The card of one mask verification."""
    return VerdictCard(
        mask_number=verdict.mask_number,
        total=total,
        verdict=verdict.verdict,
        fallback=verdict.source != "model",  # no usable verdict, or the check failed: kept, not confirmed
        failed=verdict.source == "error",
        reasoning="\n\n---\n\n".join([o.strip() for o in verdict.outputs] + ([verdict.error] if verdict.error else [])),
        mask_view=verdict.mask_view,
        zoom_view=verdict.zoom_view,
        seconds=verdict.seconds,
        group=verdict.group,
    )


def round_view(round_record: Round, max_rounds: int | None, finished_at: float | None = None) -> RoundView:
    """The view of a finished round, from the round alone; ``finished_at``: UNIX time the live view received it."""
    r = round_record
    result = r.result
    overlay = None
    tiles: tuple[ImagePart, ...] = ()
    reply_text = None
    cards: tuple[VerdictCard, ...] = ()
    if result is not None:
        if result.reply is not None:
            reply_text = result.reply.text
            images = result.reply.images  # the tools attach the overlay first, then its tiles (a dense set)
            if images and r.error is None:
                overlay, tiles = images[0], tuple(images[1:])
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
        reasoning=r.reasoning,
        streaming=False,
        call_text=call_text(r.call) if r.call is not None else None,
        mistake=mistake,
        stopped=stopped,
        failure=failure,
        reply_text=reply_text,
        summary=result.summary if result is not None else "",
        overlay=overlay,
        tiles=tiles,
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


def final_mask_rows(trace: Trace | None) -> list[FinalMaskRow]:
    """One row per final mask of ``trace``, in answer order, with what verification established of it (empty for no
    mask or an unfinished run)."""
    masks = trace.final_masks if trace is not None else None
    if trace is None or masks is None or len(masks) == 0:
        return []
    checks = final_mask_checks(trace)
    return [
        FinalMaskRow(i + 1, round(float(r["score"]), 4), int(r["area"]), tuple(round(float(v), 1) for v in r["bbox"]),
                     r["verification"])
        for i, r in enumerate(to_coco_results(masks, checks=checks))
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

