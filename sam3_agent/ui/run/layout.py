"""The Run tab on the page and the hidden ``/segment`` endpoint, wired to ``ui.run.handlers.Handlers``.

Image + query in; the status and answer first, then the rounds as they stream; the context panel of any round;
stop; downloads. ``build_run_tab`` returns its "Correct these masks" button (the page wires it to the Correct tab);
``build_segment_api`` serves ``gradio_client`` (image path + query -> COCO masks + trace).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from ...limits import MAX_ROUNDS_LIMIT
from ...models.zerogpu import on_zero_gpu
from ...package_files import EXAMPLES_FILE
from ..html import LIVE_STATUS_JS, ImageUrls, render_context, render_status
from ..round_clicks import ROUND_CLICKS
from ..settings import AppSettings
from ..view import StatusLine
from ..view_zoom import VIEW_ZOOM
from .handlers import Handlers
from .inline_image import send_inline
from .outputs import LIVE_ROUND_PROPS, LIVE_ROUND_TEMPLATE
from .runner import ModelInfo
from .start import photo_limit, space_note
from .uploads import image_upload

logger = logging.getLogger(__name__)

EXAMPLE_HEADERS = ("Image", "Query")  # the examples table's column headers
AGENT_QUEUE = "agent"  # runs and API calls share one queue: the models serve one request at a time
# After Run: when the status and answer column is out of sight (a phone stacks it below the inputs), bring it
# into view, so what happens after Run is seen without scrolling.
SHOW_ANSWER_COLUMN = """
() => {
  const column = document.getElementById('run-answer');
  if (!column) return;
  const top = column.getBoundingClientRect().top;
  // to a whole pixel at or above the column's top: scrollIntoView can stop a fraction below it (half the status cut)
  if (top < 0 || top > window.innerHeight * 0.6) {
    window.scrollTo({top: Math.floor(window.scrollY + top), behavior: 'smooth'});
  }
}
"""


def load_examples(path: Path = EXAMPLES_FILE) -> list[list[str]]:
    """``[[image path, query], ...]`` from ``assets/examples.json`` (empty when missing or unreadable)."""
    try:
        items = json.loads(path.read_text(encoding="utf-8"))
        return [[str(path.parent / item["image"]), str(item["query"])] for item in items]
    except (OSError, ValueError, KeyError, TypeError) as error:
        logger.warning("no examples: %s is unreadable (%s)", path, error)
        return []


@dataclass(frozen=True)
class RunInputs:
    """The inputs column: the photo, the query, Run and Stop, this run's budget and threshold."""

    image: gr.Image
    query: gr.Textbox
    run_button: gr.Button
    stop_button: gr.Button
    max_rounds: gr.Slider
    threshold: gr.Slider


@dataclass(frozen=True)
class RunPanel:
    """The status and answer column and the context column."""

    status: gr.HTML
    answer: gr.Group
    final_image: gr.Image
    final_masks: gr.HTML
    downloads: gr.File
    correct_run: gr.Button
    live: gr.HTML
    rounds: gr.HTML
    context: gr.HTML

    @property
    def outputs(self) -> list[Any]:
        """The components ``Handlers.run`` updates, in ``RunOutputs`` order."""
        return [self.status, self.rounds, self.live, self.context, self.final_image, self.final_masks,
                self.downloads, self.answer]


def build_run_tab(handlers: Handlers, settings: AppSettings, slot: gr.State, ticket: gr.Number) -> gr.Button:
    """The tab's components and events (call inside the page's ``gr.Tabs``); ``slot``: the session's ``RunSlot``,
    ``ticket``: the newest Run press (``Handlers.queued``). Returns the "Correct these masks" button."""
    ready = handlers.factory.load_error is None
    with gr.Tab("Run", id="run", elem_id="tab-run"), gr.Row(equal_height=False, elem_id="run-row"):
        inputs = _inputs_column(settings, handlers.factory.model_info(), ready)
        panel = _answer_columns(ready)
    _wire_run_tab(handlers, settings, slot, ticket, inputs, panel)
    return panel.correct_run


def _inputs_column(settings: AppSettings, info: ModelInfo, ready: bool) -> RunInputs:
    """The photo, the query, Run / Stop, the examples and the settings accordion (Run is off until the models load)."""
    with gr.Column(scale=4, min_width=300, elem_id="run-inputs"):
        # image_upload: the uploaded file reaches images.load_image undecoded (HEIC, EXIF, transparency,
        # 16-bit images and size limits are handled there, with the project's own messages)
        image = image_upload(image_mode=None, sources=["upload", "clipboard"],
                             label=f"Image (JPEG, PNG, WebP, HEIC, AVIF; up to "
                                   f"{photo_limit(settings.max_image_pixels)})",
                             elem_id="input-image", height=260)
        query = gr.Textbox(label="Query", lines=2, elem_id="query",
                           placeholder="e.g. the leftmost child wearing a blue vest")
        with gr.Row():
            run_button = gr.Button("Run", variant="primary", elem_id="run-btn", interactive=ready)
            # grey and disabled until a Run press: there is nothing to stop (``Handlers.stop_button``)
            stop_button = gr.Button("Stop", variant="secondary", elem_id="stop-btn", interactive=False)
        if on_zero_gpu():
            gr.Markdown(space_note(settings.max_rounds, settings.max_image_pixels), elem_id="space-gpu-note")
        examples = load_examples()
        if examples:
            shown = gr.Examples(examples, inputs=[image, query], label="Examples", examples_per_page=8,
                                elem_id="run-examples")
            # Short column headers: by default they are the inputs' labels, and the image's is the whole upload
            # label, which made the table wider than its column (it scrolled sideways, taking the thumbnails
            # out of view when a query was picked). ``headers`` is the table's own setting (gr.Dataset).
            shown.dataset.headers = list(EXAMPLE_HEADERS)
        with gr.Accordion("Settings", open=False, elem_id="settings"):
            max_rounds = gr.Slider(1, MAX_ROUNDS_LIMIT, value=settings.max_rounds, step=1,
                                   label="Round budget", elem_id="max-rounds")
            threshold = gr.Slider(0.0, 1.0, value=settings.score_threshold, step=0.05,
                                  label="SAM 3 score threshold", elem_id="score-threshold")
            gr.Textbox(info.vlm, label="VLM (set at launch)", interactive=False)
            gr.Textbox(info.sam3, label="SAM 3 model (set at launch)", interactive=False)
            with gr.Row():
                gr.Textbox(info.min_pixels, label="Image min pixels (launch)", interactive=False)
                gr.Textbox(info.max_pixels, label="Image max pixels (launch)", interactive=False)
    return RunInputs(image, query, run_button, stop_button, max_rounds, threshold)


def _answer_columns(ready: bool) -> RunPanel:
    """The status, then the answer once there is one, then the round in progress and the finished rounds, newest
    first (what a user waits for is at the top of this column); beside it the context panel."""
    with gr.Column(scale=6, min_width=360, elem_id="run-answer"):
        idle = "Add an image and a query, then press Run." if ready else "Run is off until the models load."
        status = gr.HTML(render_status(StatusLine("idle", idle)), elem_id="status", js_on_load=LIVE_STATUS_JS)
        with gr.Group(visible=False, elem_id="answer") as answer:
            final_image = send_inline(gr.Image(label="Final masks", format="png", interactive=False,
                                               elem_id="final-overlay", height=300))
            final_masks = gr.HTML(elem_id="final-masks")
            downloads = gr.File(label="Downloads: final masks (COCO JSON) and trace (.zip)",
                                file_count="multiple", interactive=False, elem_id="downloads")
            correct_run = gr.Button("Correct these masks", elem_id="correct-run-btn")
        live = gr.HTML(elem_id="live-round", js_on_load=ROUND_CLICKS + VIEW_ZOOM, html_template=LIVE_ROUND_TEMPLATE,
                       **dict.fromkeys(LIVE_ROUND_PROPS, ""))
        rounds = gr.HTML(elem_id="rounds", js_on_load=ROUND_CLICKS + VIEW_ZOOM)
    with gr.Column(scale=3, min_width=260, elem_id="run-context"):
        gr.Markdown("## Context sent to the model")
        context = gr.HTML(render_context(None, ImageUrls()), elem_id="context-panel")
    return RunPanel(status, answer, final_image, final_masks, downloads, correct_run, live, rounds, context)


def _wire_run_tab(handlers: Handlers, settings: AppSettings, slot: gr.State, ticket: gr.Number, inputs: RunInputs,
                  panel: RunPanel) -> None:
    """Run (answered at once, then queued), the trace download after it, Stop, and the rounds' "Context sent"."""
    status, downloads = panel.status, panel.downloads
    # a photo the app does not take is refused as soon as it is uploaded
    inputs.image.upload(handlers.uploaded, inputs=[inputs.image], outputs=[status, inputs.image], queue=False,
                        show_progress="hidden", api_visibility="private")
    inputs.run_button.click(None, js=SHOW_ANSWER_COLUMN)
    inputs.run_button.click(handlers.stop_offered, outputs=[inputs.stop_button], queue=False, show_progress="hidden",
                            api_visibility="private")
    # The first step answers at once (outside the queue), so a user waiting for the model sees why; it
    # numbers the press, so a later Run replaces an earlier one and Stop can withdraw one still queued.
    queued = inputs.run_button.click(handlers.queued, inputs=[slot], outputs=[status, ticket], queue=False,
                                     show_progress="hidden", api_visibility="private")
    run_event = queued.then(
        handlers.run,
        inputs=[inputs.image, inputs.query, inputs.max_rounds, inputs.threshold, slot, ticket],
        outputs=panel.outputs,
        concurrency_id=AGENT_QUEUE, concurrency_limit=settings.concurrency, show_progress="hidden",
        api_visibility="private", trigger_mode="multiple",
    )
    # The trace .zip is written while the answer is already shown; offered by its own event, outside the
    # agent's queue, so the next run never waits for it.
    offered = run_event.then(handlers.trace_download_page, inputs=[slot], outputs=[status, downloads],
                             concurrency_limit=None, show_progress="hidden", api_visibility="private")
    stop_event = inputs.stop_button.click(
        handlers.stop, inputs=[slot], outputs=[status, downloads], concurrency_limit=None,
        show_progress="hidden", api_visibility="private",
    )
    # Backstop: a run that ignored the stop flag is cancelled once Stop has done its part.
    stop_event.then(None, cancels=[run_event])
    # Stop is offered again as the session's state now calls for it (a later press may still wait)
    for ended in (offered, stop_event):
        ended.then(handlers.stop_button, inputs=[slot], outputs=[inputs.stop_button], queue=False,
                   show_progress="hidden", api_visibility="private")
    # A second "Context sent" click while the first is on its way opens the second's round: every click is sent
    # ("multiple"; Gradio's default drops it, and its "always_last" replays the first click's data, seen in 6.31)
    # and one at a time, in the order they came, so the last click's round is the one left open (each takes
    # milliseconds: it draws a context panel from what the run holds).
    for shown in (panel.rounds, panel.live):
        shown.select(handlers.run_context, inputs=[slot], outputs=[panel.context], api_visibility="private",
                     show_progress="hidden", concurrency_limit=1, concurrency_id="run-context",
                     trigger_mode="multiple")


def build_segment_api(handlers: Handlers, settings: AppSettings) -> None:
    """``/segment``: image file + query -> (final masks COCO JSON file, trace .zip file), in hidden components."""
    with gr.Row(visible=False):
        image = image_upload(image_mode=None, label="image")
        query = gr.Textbox(label="query")
        masks = gr.File(label="final_masks")
        trace = gr.File(label="trace")
        trigger = gr.Button("segment")
    trigger.click(handlers.segment, inputs=[image, query], outputs=[masks, trace], api_name="segment",
                  concurrency_id=AGENT_QUEUE, concurrency_limit=settings.concurrency)
