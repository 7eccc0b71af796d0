"""The Gradio page: components, their wiring to ``handlers``, the stylesheet, and launching.

Three tabs: "Run" (image + query in, rounds streamed, context panel, stop, downloads), "Inspect a
trace" (a saved trace or bundle .zip stepped through round by round with the same views, no model
needed) and "Correct" (hand corrections of the final masks and their export; ``correct_layout``).
A hidden endpoint ``/segment`` serves ``gradio_client`` (image path + query -> COCO masks + trace).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gradio as gr

from .correct_layout import CORRECT_CSS, build_correct_tab
from .handlers import Handlers, RunSlot
from .html import ImageUrls, render_context, render_status
from .runner import AgentFactory
from .settings import MAX_ROUNDS_LIMIT, AppSettings
from .view import StatusLine

logger = logging.getLogger(__name__)

ASSETS = Path(__file__).resolve().parents[2] / "assets"
EXAMPLES_FILE = ASSETS / "examples.json"
MAX_UPLOAD = "200mb"  # a trace .zip may hold up to trace_io.MAX_ZIP_BYTES
GPU_SECONDS = 300  # spaces.GPU duration of one run (ZeroGPU Spaces)
AGENT_QUEUE = "agent"  # runs and API calls share one queue: the models serve one request at a time

CSS = """
.status {padding: 8px 12px; border-radius: 6px; font-size: 15px; font-weight: 600; color: #111;}
.status-idle {background: #f3f4f6;} .status-running {background: #dbeafe;} .status-done {background: #dcfce7;}
.status-no_mask {background: #e5e7eb;} .status-max_rounds {background: #fef3c7;}
.status-failed, .status-error {background: #fee2e2;} .status-cancelled {background: #fde68a;}
.round {border: 1px solid var(--border-color-primary); border-radius: 8px; padding: 8px 10px; margin: 0 0 10px 0;}
.round-live {border: 2px solid var(--color-accent);}
.round-head small {color: var(--body-text-color-subdued); margin-left: 6px;}
.round pre {white-space: pre-wrap; word-break: break-word; max-height: 320px; overflow: auto; font-size: 12.5px;
  margin: 4px 0;}
.round summary {cursor: pointer; font-weight: 600; margin-top: 4px;}
.tool-call {margin: 6px 0;} .tool-call code {font-size: 13px;}
.tool-summary {margin: 4px 0; font-style: italic;}
.mistake {margin: 6px 0; padding: 4px 8px; border-left: 3px solid #d97706; background: #fffbeb; color: #111;}
.round-stopped, .round-failed {margin: 6px 0; padding: 4px 8px; border-left: 3px solid #dc2626; background: #fef2f2;
  color: #111;}
img.overlay {display: block; max-width: 100%; max-height: 440px; margin: 6px 0; border-radius: 4px;}
.cards {display: flex; flex-wrap: wrap; gap: 8px; margin: 6px 0;}
.verdict-card {width: 290px; border: 2px solid; border-radius: 6px; padding: 6px; font-size: 13px;}
.verdict-accept {border-color: #16a34a;} .verdict-reject {border-color: #dc2626;}
.verdict-accept .verdict {color: #16a34a;} .verdict-reject .verdict {color: #dc2626;}
.card-views {display: flex; gap: 4px; margin: 4px 0;} .card-views img {width: 50%; object-fit: contain;}
.ctx-head {font-size: 13px; margin-bottom: 6px;}
.ctx-msg {border-left: 3px solid var(--color-accent); padding: 4px 6px; margin: 4px 0; font-size: 12px;
  overflow-wrap: anywhere;}
.ctx-assistant {border-left-color: #7c3aed;} .ctx-system {border-left-color: #6b7280;}
.ctx-meta {font-weight: 600; margin-bottom: 2px;}
.ctx-tag {font-weight: 400; font-size: 11px; padding: 0 4px; margin-left: 4px; border-radius: 3px; background: #e5e7eb;
  color: #111;}
.ctx-dropped {opacity: 0.42; filter: grayscale(1); background: repeating-linear-gradient(45deg, transparent 0 6px,
  rgba(128,128,128,.12) 6px 12px);}
.ctx-image-text img.ctx-thumb {opacity: 0.35; outline: 2px dashed #9ca3af;}
img.ctx-thumb {height: 64px; margin: 2px 4px 2px 0; border-radius: 3px;}
.ctx-note {background: #fef3c7; color: #111; border-left: 3px solid #f59e0b; padding: 4px 6px; margin: 4px 0;
  font-size: 12px;}
table.final-masks {font-size: 13px; width: 100%;} table.final-masks td, table.final-masks th {padding: 2px 6px;}
"""


def load_examples(path: Path = EXAMPLES_FILE) -> list[list[str]]:
    """``[[image path, query], ...]`` from ``assets/examples.json`` (empty when missing or unreadable)."""
    try:
        items = json.loads(path.read_text(encoding="utf-8"))
        return [[str(path.parent / item["image"]), str(item["query"])] for item in items]
    except (OSError, ValueError, KeyError, TypeError) as error:
        logger.warning("no examples: %s is unreadable (%s)", path, error)
        return []


def gpu(function: Callable[..., Any]) -> Callable[..., Any]:
    """``spaces.GPU(function)`` on Hugging Face Spaces (when ``spaces`` imports), else ``function``."""
    try:
        import spaces  # type: ignore[import-not-found]
    except ImportError:
        return function
    return spaces.GPU(duration=GPU_SECONDS)(function)


def build_demo(handlers: Handlers, settings: AppSettings) -> gr.Blocks:
    """The page, wired to ``handlers``. Queue and launch it with ``launch``."""
    info = handlers.factory.model_info()
    with gr.Blocks(title="SAM3 Agent", analytics_enabled=False) as demo:
        slot = gr.State(RunSlot(), delete_callback=lambda value: value.cleanup() if value else None)
        gr.Markdown(
            "## SAM3 Agent\nA vision-language model reasons in rounds and calls SAM 3 to segment what your "
            "query points at. Every round streams below; the right column shows what the model was sent."
        )
        if handlers.factory.load_error:
            gr.HTML(render_status(StatusLine("error", f"The models could not be loaded: {handlers.factory.load_error}")),
                    elem_id="load-error")
        with gr.Tabs(elem_id="tabs") as tabs, gr.Tab("Run", id="run", elem_id="tab-run"), gr.Row(equal_height=False):
            with gr.Column(scale=4, min_width=300):
                # image_mode=None: the uploaded file reaches images.load_image untouched (EXIF,
                # transparency and 16-bit images are normalised there, the same way as in the CLI)
                image = gr.Image(type="filepath", image_mode=None, sources=["upload", "clipboard"],
                                 label="Image", elem_id="input-image", height=300)
                query = gr.Textbox(label="Query", lines=2, elem_id="query",
                                   placeholder="e.g. the leftmost child wearing a blue vest")
                with gr.Row():
                    run_button = gr.Button("Run", variant="primary", elem_id="run-btn")
                    stop_button = gr.Button("Stop", variant="stop", elem_id="stop-btn")
                examples = load_examples()
                if examples:
                    gr.Examples(examples, inputs=[image, query], label="Examples", examples_per_page=8)
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
                final_image = gr.Image(label="Final masks", format="png", interactive=False,
                                       elem_id="final-overlay", height=300)
                final_masks = gr.HTML(elem_id="final-masks")
                downloads = gr.File(label="Downloads: final masks (COCO JSON) and trace (.zip)",
                                    file_count="multiple", interactive=False, elem_id="downloads")
                correct_run = gr.Button("Correct these masks", elem_id="correct-run-btn")
            with gr.Column(scale=6, min_width=360):
                status = gr.HTML(render_status(StatusLine("idle", "Add an image and a query, then press Run.")),
                                 elem_id="status")
                rounds = gr.HTML(elem_id="rounds")
                live = gr.HTML(elem_id="live-round")
            with gr.Column(scale=3, min_width=260):
                gr.Markdown("#### Context sent to the model")
                context = gr.HTML(render_context(None, ImageUrls()), elem_id="context-panel", max_height=900)

        run_outputs = [status, rounds, live, context, final_image, final_masks, downloads]
        # The first step answers at once (outside the queue), so a user waiting for the model sees why.
        queued = run_button.click(handlers.queued, outputs=[status], queue=False, show_progress="hidden",
                                  api_visibility="private")
        run_event = queued.then(
            gpu(handlers.run), inputs=[image, query, max_rounds, threshold, slot], outputs=run_outputs,
            concurrency_id=AGENT_QUEUE, concurrency_limit=settings.concurrency, show_progress="hidden",
            api_visibility="private",
        )
        # The trace .zip is written while the answer is already shown; offered by its own event, outside the
        # agent's queue, so the next run never waits for it.
        run_event.then(handlers.trace_download, inputs=[slot], outputs=[downloads], concurrency_limit=None,
                       show_progress="hidden", api_visibility="private")
        stop_event = stop_button.click(
            handlers.stop, inputs=[slot], outputs=[status, downloads], concurrency_limit=None,
            show_progress="hidden", api_visibility="private",
        )
        # Backstop: a run that ignored the stop flag is cancelled once Stop has done its part.
        stop_event.then(None, cancels=[run_event])
        demo.unload(handlers.unload)

        with tabs:
            inspected, correct_inspected = _inspect_tab(handlers)
            correct = build_correct_tab(handlers.correct, tabs, gpu)
        correct_run.click(handlers.correct.from_run, inputs=[slot], outputs=correct.outputs,
                          api_visibility="private", show_progress="hidden")
        correct_inspected.click(handlers.correct.from_inspected, inputs=[inspected], outputs=correct.outputs,
                                api_visibility="private", show_progress="hidden")
        _api(handlers, settings)
    return demo


def _inspect_tab(handlers: Handlers) -> tuple[gr.State, gr.Button]:
    """The Inspect tab; returns its trace state and its "Correct this trace" button (wired by ``build_demo``)."""
    with gr.Tab("Inspect a trace", id="inspect", elem_id="tab-inspect"):
        state = gr.State(None)
        with gr.Row(equal_height=False):
            with gr.Column(scale=4, min_width=300):
                trace_file = gr.File(label="Trace or bundle .zip (from a run's or the Correct tab's downloads)",
                                     file_types=[".zip"], type="filepath", elem_id="trace-file")
                message = gr.HTML(render_status(StatusLine("idle", "Upload a trace .zip saved by this app.")),
                                  elem_id="inspect-status")
                final_image = gr.Image(label="Final masks", format="png", interactive=False,
                                       elem_id="inspect-final-overlay", height=300)
                final_masks = gr.HTML(elem_id="inspect-final-masks")
                correct_button = gr.Button("Correct this trace", elem_id="correct-inspect-btn")
            with gr.Column(scale=6, min_width=360):
                with gr.Row():
                    previous = gr.Button("Previous round", elem_id="prev-round", size="sm")
                    number = gr.Slider(1, 2, value=1, step=1, label="Round", elem_id="round-slider")
                    following = gr.Button("Next round", elem_id="next-round", size="sm")
                round_html = gr.HTML(elem_id="inspect-round")
            with gr.Column(scale=3, min_width=260):
                gr.Markdown("#### Context sent to the model")
                context = gr.HTML(render_context(None, ImageUrls()), elem_id="inspect-context", max_height=900)
        shown = [round_html, context]
        trace_file.change(
            handlers.load_trace, inputs=[trace_file], outputs=[state, message, number, final_image, final_masks],
            api_visibility="private",
        ).then(handlers.show_round, inputs=[state, number], outputs=shown, api_visibility="private")
        number.change(handlers.show_round, inputs=[state, number], outputs=shown, api_visibility="private",
                      show_progress="hidden")
        previous.click(lambda s, n: handlers.step_round(s, n, -1), inputs=[state, number], outputs=number,
                       api_visibility="private", show_progress="hidden")
        following.click(lambda s, n: handlers.step_round(s, n, 1), inputs=[state, number], outputs=number,
                        api_visibility="private", show_progress="hidden")
    return state, correct_button


def _api(handlers: Handlers, settings: AppSettings) -> None:
    """``/segment``: image file + query -> (final masks COCO JSON file, trace .zip file)."""
    with gr.Row(visible=False):
        image = gr.Image(type="filepath", image_mode=None, label="image")
        query = gr.Textbox(label="query")
        masks = gr.File(label="final_masks")
        trace = gr.File(label="trace")
        trigger = gr.Button("segment")
    trigger.click(gpu(handlers.segment), inputs=[image, query], outputs=[masks, trace], api_name="segment",
                  concurrency_id=AGENT_QUEUE, concurrency_limit=settings.concurrency)


def create_demo(settings: AppSettings) -> tuple[gr.Blocks, Handlers]:
    """Load the models (once) and build the page; returns the page and its handlers."""
    handlers = Handlers(AgentFactory.load(settings))
    return build_demo(handlers, settings), handlers


def launch(demo: gr.Blocks, settings: AppSettings, **overrides: Any) -> Any:
    """Queue (``settings.concurrency`` runs at once) and launch the page; ``overrides`` go to ``launch``."""
    options: dict[str, Any] = {
        "server_name": settings.host,
        "server_port": settings.port,
        "css": CSS + CORRECT_CSS,
        "allowed_paths": [str(ASSETS)],
        "max_file_size": MAX_UPLOAD,
        "ssr_mode": False,
        "footer_links": ["api"],
    }
    options.update(overrides)
    demo.queue(default_concurrency_limit=settings.concurrency)
    return demo.launch(**options)
