"""The Video tab on the page, its hand-off to the Correct tab and the hidden ``/segment_video`` endpoint, wired to
``ui.video.handlers.VideoHandlers``.

Clip in (a file box: Gradio's video component would decode the upload before a handler could refuse it), the scrubber
(its picture, slider and time) that picks the keyframe, the query, Run and Stop, the example clips; beside them the
status, the tracking bar (and a live region that tells a screen reader of it), the result (overlay video, objects and
their toggles, fixing a frame, downloads), the keyframe's rounds as the Run tab shows a photo's, and their context.
``build_apply_group`` adds "apply to the video" to the Correct tab (``build_correct_tab``'s ``extra``);
``wire_to_correct`` connects them once both tabs exist.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gradio as gr

from ...limits import MAX_ROUNDS_LIMIT
from ...package_files import VIDEO_EXAMPLES_FILE
from ..correct.layout import SHOW_CANVAS_JS, CorrectView
from ..html import LIVE_STATUS_JS, ImageUrls, render_context, render_status
from ..round_clicks import ROUND_CLICKS
from ..run.outputs import LIVE_ROUND_PROPS, LIVE_ROUND_TEMPLATE
from ..settings import AppSettings
from ..view import StatusLine
from ..view_zoom import VIEW_ZOOM
from .clips import CLIP_TYPES, caps_words
from .handlers import VideoHandlers
from .outputs import CONTEXT_PLACEHOLDER, EMPTY, VideoOutputs

logger = logging.getLogger(__name__)

VIDEO_TAB_ID = "video"
AGENT_QUEUE = "agent"  # ui.run.layout's: runs of every tab and the API share the models, one request at a time
EXAMPLE_HEADERS = ("Clip", "Query")
# After Run (and after "Apply to the video", once this tab is in front again): when the status and progress column is
# out of sight (a phone stacks it below the inputs), bring it into view, so the tracking is seen without scrolling.
SHOW_VIDEO_ANSWER = """
() => {
  const started = Date.now();
  const show = () => {
    const column = document.getElementById('video-answer');
    if (!column || !column.offsetParent) {  // the tab is not in front yet: Apply brings it there with its first page
      if (Date.now() - started < 30000) requestAnimationFrame(show);
      return;
    }
    const top = column.getBoundingClientRect().top;
    if (top < 0 || top > window.innerHeight * 0.6) {
      window.scrollTo({top: Math.floor(window.scrollY + top), behavior: 'smooth'});
    }
  };
  show();
}
"""
VIDEO_CSS = """
.video-progress {margin: 4px 0 8px;} .video-bar {height: 12px; border-radius: 6px; background: #e5e7eb;
  overflow: hidden; border: 1px solid #6b7280;}
.video-bar span {display: block; height: 100%; background: #2563eb;}
.video-progress-stopped .video-bar span {background: #b45309;}
.video-progress-text {font-size: 14px; margin-top: 4px;}
.sr-only {position: absolute !important; width: 1px !important; height: 1px !important; padding: 0 !important;
  margin: -1px !important; overflow: hidden !important; clip: rect(0, 0, 0, 0) !important; white-space: nowrap !important;
  border: 0 !important;}
table.video-objects {font-size: 13px; width: 100%; table-layout: fixed; overflow-wrap: anywhere;}
table.video-objects td, table.video-objects th {padding: 2px 4px;} table.video-objects th:nth-child(2) {width: 24%;}
@media (max-width: 600px) {table.video-objects {font-size: 12px;} table.video-objects td, table.video-objects th {padding: 2px;}}
table.video-objects tr.object-off td {opacity: 0.75; text-decoration: line-through;}
.object-swatch {display: inline-block; width: 12px; height: 12px; border-radius: 3px; margin-right: 6px;
  vertical-align: -1px; border: 1px solid #111;}
#video-frame-time {font-size: 14px; margin: -4px 0 4px;}
"""


def load_video_examples(path: Path = VIDEO_EXAMPLES_FILE) -> list[list[str]]:
    """``[[clip path, query], ...]`` from ``assets/video_examples.json`` (empty when missing or unreadable)."""
    try:
        items = json.loads(path.read_text(encoding="utf-8"))
        return [[str(path.parent / item["clip"]), str(item["query"])] for item in items]
    except (OSError, ValueError, KeyError, TypeError) as error:
        logger.warning("no example clips: %s is unreadable (%s)", path, error)
        return []


@dataclass
class ApplyGroup:
    """The Correct tab's "apply to the video" (built there by ``build_apply_group``, shown while its canvas holds a
    frame the Video tab handed over)."""

    group: Any = None
    note: Any = None
    button: Any = None


@dataclass(frozen=True)
class VideoTab:
    """The Video tab's components that the page wires to other tabs."""

    state: gr.State
    outputs: list[Any]  # in VideoOutputs order
    status: gr.HTML
    slider: gr.Slider
    fix_object: gr.Dropdown
    fix_button: gr.Button
    add_button: gr.Button
    stop_button: gr.Button
    downloads_then: list[Any] = field(default_factory=list)  # the download components, for ``downloads``


def build_apply_group(holder: ApplyGroup) -> None:
    """Build the Correct tab's "apply to the video" into ``holder`` (``build_correct_tab``'s ``extra``)."""
    with gr.Group(visible=False, elem_id="video-apply") as group:
        holder.note = gr.Markdown(elem_id="video-apply-note")
        holder.button = gr.Button("Apply to the video and track again from this frame", variant="primary",
                                  elem_id="video-apply-btn")
    holder.group = group


def build_video_tab(handlers: VideoHandlers, settings: AppSettings, ready: bool) -> VideoTab:
    """The tab's components and events (call inside the page's ``gr.Tabs``); Run is off unless ``ready``."""
    with gr.Tab("Video", id=VIDEO_TAB_ID, elem_id="tab-video"):
        state = gr.State(None, time_to_live=handlers.sessions.ttl_s, delete_callback=handlers.sessions.drop)
        with gr.Row(equal_height=False, elem_id="video-row"):
            with gr.Column(scale=5, min_width=300, elem_id="video-inputs"):
                clip = gr.File(label=f"Clip: MP4, MOV, WebM, MKV, AVI or a .zip of frames, {caps_words(handlers.caps)}",
                               file_types=CLIP_TYPES, type="filepath", elem_id="video-file", height=110,
                               elem_classes=["compact-file"])
                frame = gr.Image(label="Frame (the keyframe: the agent reasons on it)", format="jpeg",
                                 interactive=False, elem_id="video-frame", height=300, show_label=True)
                caption = gr.HTML(elem_id="video-frame-time")
                slider = gr.Slider(0, 1, value=0, step=1, label="Frame", interactive=False, elem_id="video-scrubber")
                query = gr.Textbox(label="Query", lines=2, elem_id="video-query",
                                   placeholder="e.g. the rabbit stretching as he comes out of his burrow")
                with gr.Row():
                    run = gr.Button("Run", variant="primary", elem_id="video-run-btn", interactive=ready)
                    stop = gr.Button("Stop", variant="secondary", elem_id="video-stop-btn", interactive=False)
                gpu_note = gr.Markdown(elem_id="video-gpu-note")
                examples = load_video_examples()
                if examples:
                    shown = gr.Examples(examples, inputs=[clip, query], label="Example clips", elem_id="video-examples")
                    shown.dataset.headers = list(EXAMPLE_HEADERS)
                with gr.Accordion("Settings", open=False, elem_id="video-settings"):
                    rounds = gr.Slider(1, MAX_ROUNDS_LIMIT, value=settings.max_rounds, step=1,
                                       label="Round budget on the keyframe", elem_id="video-max-rounds")
                    threshold = gr.Slider(0.0, 1.0, value=settings.score_threshold, step=0.05,
                                          label="SAM 3 score threshold", elem_id="video-score-threshold")
            with gr.Column(scale=6, min_width=360, elem_id="video-answer"):
                idle = EMPTY if ready else "Run is off until the models load."
                status = gr.HTML(render_status(StatusLine("idle", idle)), elem_id="video-status",
                                 js_on_load=LIVE_STATUS_JS)
                progress = gr.HTML(elem_id="video-progress")
                # what a screen reader is told of the progress, at quarters: a live region of its own, not shown
                announce = gr.HTML(elem_id="video-progress-live", elem_classes=["sr-only"], js_on_load=LIVE_STATUS_JS)
                with gr.Group(visible=False, elem_id="video-result") as result:
                    overlay = gr.Video(label="The clip with its objects", interactive=False, elem_id="video-overlay",
                                       height=300)
                    table = gr.HTML(elem_id="video-objects")
                    toggles = gr.CheckboxGroup([], label="Objects drawn on the frame (uncheck to hide)",
                                               elem_id="video-objects-shown")
                    fix_object = gr.Dropdown([], label="Object to fix or remove", elem_id="video-fix-object")
                    with gr.Row(elem_id="video-fix-row"):
                        fix = gr.Button("Fix it on this frame", elem_id="video-fix-btn", size="sm", min_width=120)
                        add = gr.Button("Add an object on this frame", elem_id="video-add-btn", size="sm",
                                        min_width=120)
                    with gr.Row(elem_id="video-edit-row"):
                        remove = gr.Button("Remove it", variant="stop", elem_id="video-remove-btn", size="sm",
                                           min_width=120)
                        undo = gr.Button("Undo the last edit", elem_id="video-undo-btn", size="sm", min_width=120)
                    downloads = gr.File(label="Downloads: palette PNGs (.zip), YouTube-VIS JSON, video trace (.zip), "
                                              "overlay video", file_count="multiple", interactive=False,
                                        elem_id="video-downloads")
                live = gr.HTML(elem_id="video-live-round", js_on_load=ROUND_CLICKS + VIEW_ZOOM,
                               html_template=LIVE_ROUND_TEMPLATE, **dict.fromkeys(LIVE_ROUND_PROPS, ""))
                rounds_html = gr.HTML(elem_id="video-rounds", js_on_load=ROUND_CLICKS + VIEW_ZOOM)
            with gr.Column(scale=3, min_width=260, elem_id="video-context-column"):
                gr.Markdown("## Context sent to the model")
                context = gr.HTML(render_context(None, ImageUrls(), CONTEXT_PLACEHOLDER), elem_id="video-context")
    outputs = [state, status, slider, frame, caption, progress, announce, live, rounds_html, context, result, table,
               toggles, fix_object, overlay, downloads, gpu_note]
    if len(outputs) != len(VideoOutputs._fields):  # a programming error, caught by the first test that builds the page
        raise RuntimeError("the Video tab's outputs do not match VideoOutputs")
    tab = VideoTab(state, outputs, status, slider, fix_object, fix, add, stop, [status, progress, announce, overlay,
                                                                                 downloads])
    _wire(handlers, settings, tab, clip, query, run, rounds, threshold, toggles, remove, undo, frame, caption,
          table, live, rounds_html, context)
    return tab


def _wire(handlers: VideoHandlers, settings: AppSettings, tab: VideoTab, clip: gr.File, query: gr.Textbox,
          run: gr.Button, rounds: gr.Slider, threshold: gr.Slider, toggles: gr.CheckboxGroup, remove: gr.Button,
          undo: gr.Button, frame: gr.Image, caption: gr.HTML, table: gr.HTML, live: gr.HTML, rounds_html: gr.HTML,
          context: gr.HTML) -> None:
    quiet = {"api_visibility": "private", "show_progress": "hidden"}
    state, outputs = tab.state, tab.outputs
    # an upload (or an example picked) is checked at once; each tab's clips side by side, not behind the agent's runs
    clip.change(handlers.open, inputs=[clip, state], outputs=outputs, concurrency_id="video-open",
                concurrency_limit=2, **quiet)
    # the slider's latest position only: a drag sends many
    tab.slider.input(handlers.scrub, inputs=[state, tab.slider], outputs=[frame, caption], trigger_mode="always_last",
                     concurrency_id="video-scrub", concurrency_limit=4, **quiet)
    toggles.input(handlers.show_objects, inputs=[state, toggles], outputs=[frame, table], concurrency_id="video-scrub",
                  concurrency_limit=4, **quiet)
    run.click(None, js=SHOW_VIDEO_ANSWER)
    run.click(handlers.stop_offered, outputs=[tab.stop_button], queue=False, **quiet)
    queued = run.click(handlers.queued, outputs=[tab.status], queue=False, **quiet)
    run_event = queued.then(handlers.run, inputs=[state, query, tab.slider, rounds, threshold], outputs=outputs,
                            concurrency_id=AGENT_QUEUE, concurrency_limit=settings.concurrency, **quiet)
    offered = run_event.then(handlers.downloads, inputs=[state], outputs=tab.downloads_then,
                             concurrency_id="video-export", concurrency_limit=2, **quiet)
    offered.then(handlers.stop_button, inputs=[state], outputs=[tab.stop_button], queue=False, **quiet)
    run_event.then(handlers.stop_button, inputs=[state], outputs=[tab.stop_button], queue=False, **quiet)
    stop_event = tab.stop_button.click(handlers.stop, inputs=[state], outputs=[tab.status], concurrency_limit=None,
                                       **quiet)
    stop_event.then(None, cancels=[run_event])  # a backstop: a run that ignored the stop is cancelled
    stop_event.then(handlers.stop_button, inputs=[state], outputs=[tab.stop_button], queue=False, **quiet)
    for button, edit in ((remove, handlers.remove), (undo, handlers.undo_edit)):
        inputs = [state, tab.fix_object] if edit == handlers.remove else [state]
        edited = button.click(edit, inputs=inputs, outputs=outputs, concurrency_id="video-edit",
                              concurrency_limit=None, **quiet)
        edited.then(handlers.downloads, inputs=[state], outputs=tab.downloads_then, concurrency_id="video-export",
                    concurrency_limit=2, **quiet)
    for shown in (rounds_html, live):
        shown.select(handlers.context, inputs=[state], outputs=[context], concurrency_limit=1,
                     concurrency_id="video-context", trigger_mode="multiple", **quiet)


def wire_to_correct(handlers: VideoHandlers, settings: AppSettings, tab: VideoTab, apply: ApplyGroup,
                    correct: CorrectView, tabs: gr.Tabs) -> None:
    """"Fix it on this frame" / "Add an object on this frame" open the scrubbed frame in the Correct tab; its "Apply to the video" brings
    the mask back, re-propagates it here and brings this tab to the front."""
    quiet = {"api_visibility": "private", "show_progress": "hidden"}
    handed = [*correct.outputs, apply.group, apply.note, tab.status]
    tab.fix_button.click(handlers.fix, inputs=[tab.state, tab.fix_object, tab.slider, correct.session],
                         outputs=handed, **quiet).then(None, js=SHOW_CANVAS_JS)
    tab.add_button.click(handlers.add, inputs=[tab.state, tab.slider, correct.session], outputs=handed,
                         **quiet).then(None, js=SHOW_CANVAS_JS)
    # another trace opened in the Correct tab hides "apply to the video" (it is shown only for the frame handed over)
    correct.session.change(handlers.fix_shown, inputs=[tab.state, correct.session], outputs=[apply.group], **quiet)
    apply.button.click(None, js=SHOW_VIDEO_ANSWER)
    apply.button.click(handlers.stop_offered, outputs=[tab.stop_button], queue=False, **quiet)
    applied = apply.button.click(handlers.apply, inputs=[tab.state, correct.session],
                                 outputs=[*tab.outputs, tabs, apply.group], concurrency_id=AGENT_QUEUE,
                                 concurrency_limit=settings.concurrency, **quiet)
    applied.then(handlers.downloads, inputs=[tab.state], outputs=tab.downloads_then, concurrency_id="video-export",
                 concurrency_limit=2, **quiet)
    applied.then(handlers.stop_button, inputs=[tab.state], outputs=[tab.stop_button], queue=False, **quiet)


def build_segment_video_api(handlers: VideoHandlers, settings: AppSettings) -> None:
    """``/segment_video``: clip file + query + keyframe index -> (YouTube-VIS JSON, video trace .zip, overlay MP4)."""
    with gr.Row(visible=False):
        clip = gr.File(label="clip", type="filepath")
        query = gr.Textbox(label="query")
        keyframe = gr.Number(0, label="keyframe", precision=0)
        ytvis = gr.File(label="tracks_ytvis")
        trace = gr.File(label="video_trace")
        overlay = gr.File(label="overlay_video")
        trigger = gr.Button("segment_video")
    trigger.click(handlers.segment_video, inputs=[clip, query, keyframe], outputs=[ytvis, trace, overlay],
                  api_name="segment_video", concurrency_id=AGENT_QUEUE, concurrency_limit=settings.concurrency)
