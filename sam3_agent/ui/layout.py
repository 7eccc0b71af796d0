"""The Gradio page: components, their wiring to ``handlers``, the stylesheet, and launching.

Three tabs: "Run" (image + query in; the status and answer first, then the rounds as they stream; the
context panel of any round; stop; downloads), "Inspect a trace" (a saved trace or bundle .zip stepped
through round by round from a timeline, with the same views, no model needed) and "Correct" (hand
corrections of the final masks and their export; ``ui.correct.layout``). Above the tabs, one note says when the
models are missing (Run is then off) or random / scripted.
A hidden endpoint ``/segment`` serves ``gradio_client`` (image path + query -> COCO masks + trace).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import gradio as gr

from ..limits import MAX_ROUNDS_LIMIT
from ..models.zerogpu import POINT_GPU_SECONDS, gpu, run_duration
from .correct.layout import CORRECT_CSS, build_correct_tab
from .html import ImageUrls, render_context, render_status
from .inspect.handlers import INSPECT_CONTEXT_PLACEHOLDER, INSPECT_EMPTY, InspectHandlers
from .review.layout import REVIEW_CSS, build_review_bar, build_review_tab
from .run.handlers import Handlers
from .run.runner import AgentFactory
from .run.slot import RunSlot
from .run.start import photo_limit
from .run.uploads import image_upload
from .settings import AppSettings
from .startup import demo_note, first_start_message, needed_models
from .view import StatusLine

logger = logging.getLogger(__name__)

ASSETS = Path(__file__).resolve().parents[2] / "assets"
EXAMPLES_FILE = ASSETS / "examples.json"
MAX_UPLOAD = "200mb"  # a trace .zip may hold up to trace_io.MAX_ZIP_BYTES
AGENT_QUEUE = "agent"  # runs and API calls share one queue: the models serve one request at a time
# Gradio's cache (uploads, served images and downloads) is swept every 10 minutes of files older than an hour (a
# download is fetched at once), and emptied when the server stops; without it every upload stays on disk for good.
CACHE_SWEEP = (600, 3600)  # (every s, older than s): Blocks' delete_cache

STYLESHEET = Path(__file__).with_name("page.css")  # the page's own styles (contrast-checked by the browser tests)

# Clicks inside an HTML panel become a "select" event whose index is the round number of the button or row
# clicked (``[data-round]``): "Context sent" buttons on a run's rounds, rows of the Inspect timeline.
ROUND_CLICKS = """
element.addEventListener('click', (event) => {
  const target = event.target.closest('.ctx-open, .timeline [data-round]');
  if (target && element.contains(target)) {
    trigger('select', {index: Number(target.dataset.round), value: target.dataset.round});
  }
});
"""
# After Run: when the status and answer column is out of sight (a phone stacks it below the inputs), bring it
# into view, so what happens after Run is seen without scrolling.
SHOW_ANSWER_COLUMN = """
() => {
  const column = document.getElementById('run-answer');
  if (!column) return;
  const top = column.getBoundingClientRect().top;
  if (top < 0 || top > window.innerHeight * 0.6) column.scrollIntoView({behavior: 'smooth', block: 'start'});
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


def run_gpu_seconds(image: Any, query: Any, max_rounds: Any, *rest: Any, **options: Any) -> int:
    """ZeroGPU duration of ``Handlers.run`` (called with its arguments): ``zerogpu.run_duration`` of its budget."""
    return run_duration(max_rounds)


def _notice(handlers: Handlers, settings: AppSettings) -> str | None:
    """The note above the tabs: the first-start message when the models could not be loaded (the only place
    that says so; Run stays off), the demo note when they are random or scripted, else nothing."""
    factory = handlers.factory
    if factory.load_error:
        return first_start_message(needed_models(settings), factory.load_error)
    return demo_note(settings)


def build_demo(handlers: Handlers, settings: AppSettings) -> gr.Blocks:
    """The page, wired to ``handlers``. Queue and launch it with ``launch``."""
    info = handlers.factory.model_info()
    ready = handlers.factory.load_error is None
    with gr.Blocks(title="SAM3 Agent", analytics_enabled=False, delete_cache=CACHE_SWEEP) as demo:
        slot = gr.State(RunSlot(), delete_callback=lambda value: value.cleanup() if value else None)
        ticket = gr.Number(0, visible=False, precision=0)  # the newest Run press (handlers.queued)
        gr.Markdown(
            "## SAM3 Agent\nA vision-language model reasons in rounds and calls SAM 3 to segment what your "
            "query points at. Press Run: the status and the answer come first, then every round as it happens, "
            "and the context the model was sent."
        )
        notice = _notice(handlers, settings)
        if notice:
            gr.HTML(notice, elem_id="model-notice")
        review_bar = build_review_bar()  # the review queue's bar: hidden until a batch is opened for review
        with gr.Tabs(elem_id="tabs") as tabs, gr.Tab("Run", id="run", elem_id="tab-run"), \
                gr.Row(equal_height=False, elem_id="run-row"):
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
                    stop_button = gr.Button("Stop", variant="stop", elem_id="stop-btn")
                examples = load_examples()
                if examples:
                    gr.Examples(examples, inputs=[image, query], label="Examples", examples_per_page=8,
                                elem_id="run-examples")
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
            # The status, then the answer once there is one, then the round in progress and the finished
            # rounds, newest first: what a user waits for is at the top of this column.
            with gr.Column(scale=6, min_width=360, elem_id="run-answer"):
                idle = "Add an image and a query, then press Run." if ready else "Run is off until the models load."
                status = gr.HTML(render_status(StatusLine("idle", idle)), elem_id="status")
                with gr.Group(visible=False, elem_id="answer") as answer:
                    final_image = gr.Image(label="Final masks", format="png", interactive=False,
                                           elem_id="final-overlay", height=300)
                    final_masks = gr.HTML(elem_id="final-masks")
                    downloads = gr.File(label="Downloads: final masks (COCO JSON) and trace (.zip)",
                                        file_count="multiple", interactive=False, elem_id="downloads")
                    correct_run = gr.Button("Correct these masks", elem_id="correct-run-btn")
                live = gr.HTML(elem_id="live-round", js_on_load=ROUND_CLICKS)
                rounds = gr.HTML(elem_id="rounds", js_on_load=ROUND_CLICKS)
            with gr.Column(scale=3, min_width=260, elem_id="run-context"):
                gr.Markdown("#### Context sent to the model")
                context = gr.HTML(render_context(None, ImageUrls()), elem_id="context-panel")

        run_outputs = [status, rounds, live, context, final_image, final_masks, downloads, answer]
        run_button.click(None, js=SHOW_ANSWER_COLUMN)
        # The first step answers at once (outside the queue), so a user waiting for the model sees why; it
        # numbers the press, so a later Run replaces an earlier one and Stop can withdraw one still queued.
        queued = run_button.click(handlers.queued, inputs=[slot], outputs=[status, ticket], queue=False,
                                  show_progress="hidden", api_visibility="private")
        run_event = queued.then(
            gpu(handlers.run, run_gpu_seconds), inputs=[image, query, max_rounds, threshold, slot, ticket],
            outputs=run_outputs,
            concurrency_id=AGENT_QUEUE, concurrency_limit=settings.concurrency, show_progress="hidden",
            api_visibility="private", trigger_mode="multiple",
        )
        # The trace .zip is written while the answer is already shown; offered by its own event, outside the
        # agent's queue, so the next run never waits for it.
        run_event.then(handlers.trace_download_page, inputs=[slot], outputs=[status, downloads],
                       concurrency_limit=None, show_progress="hidden", api_visibility="private")
        stop_event = stop_button.click(
            handlers.stop, inputs=[slot], outputs=[status, downloads], concurrency_limit=None,
            show_progress="hidden", api_visibility="private",
        )
        # Backstop: a run that ignored the stop flag is cancelled once Stop has done its part.
        stop_event.then(None, cancels=[run_event])
        for panel in (rounds, live):
            panel.select(handlers.run_context, inputs=[slot], outputs=[context], api_visibility="private",
                         show_progress="hidden", concurrency_limit=None)
        demo.unload(handlers.unload)

        with tabs:
            inspected, correct_inspected = _inspect_tab(handlers.inspect)
            correct = build_correct_tab(handlers.correct, tabs)
            build_review_tab(handlers.correct, handlers.root, correct, review_bar, settings.review_root)
        correct_run.click(handlers.correct.from_run, inputs=[slot, correct.session], outputs=correct.outputs,
                          api_visibility="private", show_progress="hidden")
        correct_inspected.click(handlers.correct.from_inspected, inputs=[inspected, correct.session],
                                outputs=correct.outputs, api_visibility="private", show_progress="hidden")
        _api(handlers, settings)
    return demo


def _inspect_tab(handlers: InspectHandlers) -> tuple[gr.State, gr.Button]:
    """The Inspect tab; returns its trace state and its "Correct this trace" button (wired by ``build_demo``)."""
    with gr.Tab("Inspect a trace", id="inspect", elem_id="tab-inspect"):
        state = gr.State(None)
        with gr.Row(equal_height=False):
            with gr.Column(scale=4, min_width=300):
                trace_file = gr.File(label="Trace or bundle .zip (from a run's or the Correct tab's downloads)",
                                     file_types=[".zip"], type="filepath", elem_id="trace-file")
                message = gr.HTML(render_status(StatusLine("idle", INSPECT_EMPTY)), elem_id="inspect-status")
                final_image = gr.Image(label="Final masks", format="png", interactive=False,
                                       elem_id="inspect-final-overlay", height=300)
                final_masks = gr.HTML(elem_id="inspect-final-masks")
                correct_button = gr.Button("Correct this trace", elem_id="correct-inspect-btn")
            with gr.Column(scale=6, min_width=360):
                with gr.Group(visible=False, elem_id="round-nav") as navigation:
                    timeline = gr.HTML(elem_id="timeline", js_on_load=ROUND_CLICKS)
                    with gr.Row():
                        previous = gr.Button("Previous round", elem_id="prev-round", size="sm")
                        number = gr.Number(1, precision=0, label="Round", elem_id="round-number", min_width=80)
                        following = gr.Button("Next round", elem_id="next-round", size="sm")
                round_html = gr.HTML(elem_id="inspect-round")
            with gr.Column(scale=3, min_width=260, elem_id="inspect-context-column"):
                gr.Markdown("#### Context sent to the model")
                context = gr.HTML(render_context(None, ImageUrls(), INSPECT_CONTEXT_PLACEHOLDER),
                                  elem_id="inspect-context")
        shown = [round_html, context, timeline]
        quiet = {"api_visibility": "private", "show_progress": "hidden"}
        trace_file.change(
            handlers.load_trace, inputs=[trace_file],
            outputs=[state, message, number, navigation, final_image, final_masks], api_visibility="private",
        ).then(handlers.show_round, inputs=[state, number], outputs=shown, **quiet)
        number.change(handlers.show_round, inputs=[state, number], outputs=shown, **quiet)
        previous.click(lambda s, n: handlers.step_round(s, n, -1), inputs=[state, number], outputs=number, **quiet)
        following.click(lambda s, n: handlers.step_round(s, n, 1), inputs=[state, number], outputs=number, **quiet)
        timeline.select(handlers.pick_round, outputs=number, **quiet)
    return state, correct_button


def _api(handlers: Handlers, settings: AppSettings) -> None:
    """``/segment``: image file + query -> (final masks COCO JSON file, trace .zip file)."""
    with gr.Row(visible=False):
        image = image_upload(image_mode=None, label="image")
        query = gr.Textbox(label="query")
        masks = gr.File(label="final_masks")
        trace = gr.File(label="trace")
        trigger = gr.Button("segment")
    seconds = run_duration(settings.max_rounds)
    trigger.click(gpu(handlers.segment, seconds), inputs=[image, query], outputs=[masks, trace], api_name="segment",
                  concurrency_id=AGENT_QUEUE, concurrency_limit=settings.concurrency)


def use_private_cache() -> Path:
    """Give this process a Gradio cache folder of its own (a new folder inside ``GRADIO_TEMP_DIR`` or the system's
    ``gradio`` temp folder) and return it; call before building the page. Removing it at exit then removes every
    upload and result this process cached, which Gradio's own shutdown sweep does not reliably do
    when its server thread outlives the process."""
    base = Path(os.environ.get("GRADIO_TEMP_DIR") or Path(tempfile.gettempdir()) / "gradio")
    base.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="sam3_agent_", dir=base))
    os.environ["GRADIO_TEMP_DIR"] = str(folder)
    return folder


def create_demo(settings: AppSettings) -> tuple[gr.Blocks, Handlers]:
    """Load the models (once) and build the page; returns the page and its handlers."""
    # on ZeroGPU only the point model's call takes a GPU (the Correct session stays in this process)
    handlers = Handlers(AgentFactory.load(settings), gpu=lambda function: gpu(function, POINT_GPU_SECONDS))
    return build_demo(handlers, settings), handlers


def launch(demo: gr.Blocks, settings: AppSettings, **overrides: Any) -> Any:
    """Queue (``settings.concurrency`` runs at once) and launch the page; ``overrides`` go to ``launch``."""
    options: dict[str, Any] = {
        "server_name": settings.host,
        "server_port": settings.port,
        "css": STYLESHEET.read_text(encoding="utf-8") + CORRECT_CSS + REVIEW_CSS,
        "allowed_paths": [str(ASSETS)],
        "max_file_size": MAX_UPLOAD,
        "ssr_mode": False,
        "footer_links": ["api"],
    }
    options.update(overrides)
    demo.queue(default_concurrency_limit=settings.concurrency)
    return demo.launch(**options)
