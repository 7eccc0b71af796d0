"""The Gradio page: the tabs (each built by its folder's ``layout``), their hand-offs, the stylesheet, and launching.

Five tabs: "Run" (``ui.run.layout``: image + query in, the rounds as they stream, the answer and its downloads),
"Video" (``ui.video.layout``: a clip, its keyframe's rounds, the tracks as they grow, a frame fixed in the Correct tab,
the exports), "Inspect a trace" (``ui.inspect.layout``: a saved trace or bundle .zip stepped through round by round, no model
needed), "Correct" (``ui.correct.layout``: hand corrections of the final masks and their export) and "Review a batch"
(``ui.review.layout``, with its bar above the tabs). Above the tabs, one note says when the models are missing (Run
is then off) or random / scripted. Hidden endpoints serve ``gradio_client``: ``/segment`` (image path + query -> COCO
masks + trace) and ``/segment_video`` (clip + query + keyframe -> YouTube-VIS JSON + video trace + overlay video).
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import gradio as gr

from ..package_files import ASSETS_DIR
from .correct.layout import CORRECT_CSS, SHOW_CANVAS_JS, CorrectView, build_correct_tab
from .inspect.layout import InspectTab, build_inspect_tab
from .review.layout import REVIEW_CSS, build_review_bar, build_review_tab
from .run.handlers import Handlers
from .run.layout import build_run_tab, build_segment_api
from .run.runner import AgentFactory
from .run.slot import RunSlot
from .session_order import order_by_session
from .settings import AppSettings
from .startup import demo_note, first_start_message, needed_models
from .video.layout import (
    VIDEO_CSS,
    ApplyGroup,
    build_apply_group,
    build_segment_video_api,
    build_video_tab,
    wire_to_correct,
)

logger = logging.getLogger(__name__)

MAX_UPLOAD = "200mb"  # a trace .zip may hold up to trace.safe_read.MAX_ZIP_BYTES
# Gradio's cache (uploads, served images and downloads) is swept every 10 minutes of files older than an hour (a
# download is fetched at once), and emptied when the server stops; without it every upload stays on disk for good.
CACHE_SWEEP = (600, 3600)  # (every s, older than s): Blocks' delete_cache

STYLESHEET = Path(__file__).with_name("page.css")  # the page's own styles (contrast-checked by the browser tests)


def _notice(handlers: Handlers, settings: AppSettings) -> str | None:
    """The note above the tabs: the first-start message when the models could not be loaded (the only place
    that says so; Run stays off), the demo note when they are random or scripted, else nothing."""
    factory = handlers.factory
    if factory.load_error:
        return first_start_message(needed_models(settings), factory.load_error)
    return demo_note(settings)


def build_demo(handlers: Handlers, settings: AppSettings) -> gr.Blocks:
    """The page, wired to ``handlers``. Queue and launch it with ``launch``."""
    with gr.Blocks(title="SAM3 Agent", analytics_enabled=False, delete_cache=CACHE_SWEEP) as demo:
        slot = gr.State(RunSlot(), delete_callback=lambda value: value.cleanup() if value else None)
        ticket = gr.Number(0, visible=False, precision=0)  # the newest Run press (handlers.queued)
        _header(handlers, settings)
        review_bar = build_review_bar()  # the review queue's bar: hidden until a batch is opened for review
        # on a phone the tab labels wrap onto a second row (Gradio's default hides the last ones behind a menu)
        with gr.Tabs(elem_id="tabs", overflow_behavior="wrap") as tabs:
            correct_run = build_run_tab(handlers, settings, slot, ticket)
            demo.unload(handlers.unload)
            video = build_video_tab(handlers.video, settings, handlers.factory.load_error is None)
            inspected = build_inspect_tab(handlers.inspect)
            apply = ApplyGroup()
            correct = build_correct_tab(handlers.correct, tabs, extra=lambda: build_apply_group(apply))
            build_review_tab(handlers.correct, handlers.root, correct, review_bar, settings.review_root)
        _hand_to_correct(handlers, slot, correct_run, inspected, correct)
        wire_to_correct(handlers.video, settings, video, apply, correct, tabs)
        build_segment_api(handlers, settings)
        build_segment_video_api(handlers.video, settings)
    order_by_session(demo)  # the Correct and Review events: each session's in order, sessions side by side
    return demo


def _header(handlers: Handlers, settings: AppSettings) -> None:
    """The page's title and introduction, and the note about the models when there is one (``_notice``)."""
    gr.Markdown(
        "# SAM3 Agent\nA vision-language model reasons in rounds and calls SAM 3 to segment what your "
        "query points at. Press Run: the status and the answer come first, then every round as it happens, "
        "and the context the model was sent."
    )
    notice = _notice(handlers, settings)
    if notice:
        gr.HTML(notice, elem_id="model-notice")


def _hand_to_correct(handlers: Handlers, slot: gr.State, correct_run: gr.Button, inspected: InspectTab,
                     correct: CorrectView) -> None:
    """"Correct these masks" (Run tab) and "Correct this trace" (Inspect tab) load their trace in the Correct tab."""
    correct_run.click(handlers.correct.from_run, inputs=[slot, correct.session], outputs=correct.outputs,
                      api_visibility="private", show_progress="hidden").then(None, js=SHOW_CANVAS_JS)
    inspected.correct_button.click(handlers.correct_inspected, inputs=[inspected.state, correct.session],
                                   outputs=correct.outputs, api_visibility="private",
                                   show_progress="hidden").then(None, js=SHOW_CANVAS_JS)


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
    # on ZeroGPU every model call is a GPU call of its own (AgentFactory.calls_on_gpu); the runs stay in this process
    handlers = Handlers(AgentFactory.load(settings))
    return build_demo(handlers, settings), handlers


def launch(demo: gr.Blocks, settings: AppSettings, **overrides: Any) -> Any:
    """Queue (``settings.concurrency`` runs at once) and launch the page; ``overrides`` go to ``launch``."""
    options: dict[str, Any] = {
        "server_name": settings.host,
        "server_port": settings.port,
        "css": STYLESHEET.read_text(encoding="utf-8") + CORRECT_CSS + REVIEW_CSS + VIDEO_CSS,
        "allowed_paths": [str(ASSETS_DIR)],
        "max_file_size": MAX_UPLOAD,
        "ssr_mode": False,
        "footer_links": ["api"],
    }
    options.update(overrides)
    demo.queue(default_concurrency_limit=settings.concurrency)
    return demo.launch(**options)
