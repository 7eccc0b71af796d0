"""The Run panel's component values (``RunOutputs``) for each moment of a run, and the status texts they show.

Built from the run's screen (``ui.run_view.RunView``) rendered by ``ui.html``; ``layout`` binds the components in
``RunOutputs`` order.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

import gradio as gr

from ...types import Trace
from ..html import NO_ROUND, ImageUrls, RoundHtml, RunPage, render_context, render_final_masks, render_status
from ..run_view import RunView
from ..view import StatusLine, final_mask_rows, final_status_line
from .runner import Answer

logger = logging.getLogger(__name__)

WITHDRAWN = "Stopped before it started: the run was still waiting in the queue."
STOPPING = "Stopping: the model finishes its current step, then the trace so far is kept."
REPLACING = "Stopping the current run: the new one starts as soon as it has ended."
QUEUED = "Queued: waiting for the model (it serves one run at a time)."
# The live round's component puts its pieces together in the browser (``RoundHtml``): its value is the
# reasoning, the other pieces are props, so each streamed update carries only what changed (Gradio diffs
# every output of a generator against its previous value: a grown string is sent as an append).
# (Prop names must not be attributes of gr.HTML: Gradio reads an update's keys off the component; ``end`` is one.)
LIVE_ROUND_TEMPLATE = "${round_top}${value}${round_middle}${round_cards}${round_end}"
LIVE_ROUND_PROPS = ("round_top", "round_middle", "round_cards", "round_end")


class RunOutputs(NamedTuple):
    """Values of the run panel's components, in the order ``layout`` binds them."""

    status: str
    rounds: str
    live: dict[str, Any]  # an update of the live round's value and props (``live_update``)
    context: str
    final_image: str | None
    final_masks: str
    downloads: list[str] | None
    answer: Any  # the answer group: shown once the run has ended


def unchanged() -> RunOutputs:
    """Every component left as it is (a Run press that a later one superseded)."""
    return RunOutputs(*([gr.skip()] * len(RunOutputs._fields)))


def live_update(parts: RoundHtml) -> dict[str, Any]:
    """The live round's component value (the escaped reasoning) and props (its other pieces)."""
    return gr.update(value=parts.reasoning, round_top=parts.top, round_middle=parts.middle, round_cards=parts.cards,
                     round_end=parts.end)


def live_round_html(update: dict[str, Any]) -> str:
    """The HTML the browser shows for a ``live_update`` (``LIVE_ROUND_TEMPLATE`` filled in)."""
    return (update["round_top"] + update["value"] + update["round_middle"] + update["round_cards"]
            + update["round_end"])


def not_started(line: StatusLine) -> RunOutputs:
    """The page of a run that did not start: only the status line says why; the rest is cleared."""
    return RunOutputs(render_status(line), "", live_update(NO_ROUND), render_context(None, ImageUrls()), None,
                      "", None, gr.update(visible=False))


def run_outputs(view: RunView, page: RunPage, stopping: StatusLine | None = None,
                answer: Answer | None = None) -> RunOutputs:
    """The page for ``view``; ``stopping``: the status while a stopped run has not ended yet; ``answer``:
    the finished run's files (``runner.write_answer``), shown at once."""
    live = view.live.view() if view.live is not None else None
    ended = view.trace is not None
    line = stopping if stopping is not None and not ended else view.status_line()
    return RunOutputs(
        status=render_status(line),
        rounds=page.rounds_html(view.rounds),
        live=live_update(page.live_parts(live)),
        context=page.context_html(view.context),
        final_image=str(answer.overlay) if answer is not None and answer.overlay is not None else None,
        final_masks=render_final_masks(final_mask_rows(view.trace)) if ended else "",
        downloads=[str(answer.masks)] if answer is not None else None,
        answer=gr.update(visible=ended),
    )


def save_failed_status(trace: Trace, error: OSError) -> str:
    """The status line of a run whose download files could not be written (in view: no pop-up as well)."""
    line = final_status_line(trace)
    message = (f"{line.text} Its files could not be saved on the server ({error.strerror or 'write failed'}), "
               "so there is nothing to download; try again later.")
    logger.error("could not write a run's files: %s", error)
    return render_status(StatusLine("error", message))
