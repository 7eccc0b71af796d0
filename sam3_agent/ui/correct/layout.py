"""The "Correct" tab: one zoomable canvas for clicks and the brush, the mask list, bring-in, undo/redo, export and
import, wired to ``ui.correct.handlers.CorrectHandlers``.

The canvas (``canvas.js`` in a ``gr.HTML``) shows the corrected answer; the tool picker says what a click or a drag
does there; keyboard shortcuts (listed under the canvas) cover the frequent actions. The agent's own answer is one
slider away (``gr.ImageSlider``, in a closed accordion). ``build_correct_tab`` returns the components other tabs need
("Correct these masks" in the Run tab and "Correct this trace" in the Inspect tab load a trace here and bring this tab
to the front).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from ...imaging.draw import FILL_ALPHA
from ..html import LIVE_STATUS_JS, render_status
from ..session_order import EDIT_CONCURRENCY, EDIT_QUEUE
from ..view import StatusLine
from .handlers import EMPTY_MESSAGE, CorrectHandlers, CorrectOutputs
from .tools import TOOL_SELECT, TOOLS
from .view import render_canvas

CORRECT_TAB_ID = "correct"
FILE_HEIGHT = 110  # px, the download and upload boxes
DEFAULT_BRUSH_PX = 16  # brush diameter in the photo's shown pixels
# the canvas script, with the tool order of the picker filled in
CANVAS_JS = Path(__file__).with_name("canvas.js").read_text(encoding="utf-8").replace("__TOOLS__", json.dumps(list(TOOLS)))
# Run after each edit the canvas script sends (canvas.js): its answer has arrived, so the next waiting edit goes.
EDIT_ANSWERED_JS = "() => { if (window.__sam3CanvasAnswered) window.__sam3CanvasAnswered(); }"
# After another tab hands a trace over ("Correct these masks", "Correct this trace"): once this tab shows, bring its
# status, tools and canvas into view if they are not (a phone scrolls down to them; a page left scrolled far down in
# the other tab scrolls back up). Two frames later: the tab is drawn by then.
SHOW_CANVAS_JS = """
() => { requestAnimationFrame(() => requestAnimationFrame(() => {
  const row = document.getElementById('correct-row');
  const canvas = document.querySelector('#correct-canvas .cv-viewport');
  if (!row || !canvas || !row.offsetParent) return;
  const top = row.getBoundingClientRect().top;
  if (top < 0 || canvas.getBoundingClientRect().bottom > window.innerHeight) {
    window.scrollTo({top: Math.max(0, Math.floor(window.scrollY + top - 8))});
  }
})); }
"""
SHORTCUTS = (
    "**Tools**: *Select* a mask or *Show / hide* it by clicking on it; *Point on* / *Point off*: SAM 3's point model "
    "makes a mask from your clicks on (+) and off (-) the object, or refines the selected one; *Paint* adds what you "
    "brush to the selected mask (or makes a new one), *Erase* removes it; *Box*: drag a box (or tap two opposite "
    "corners) and SAM 3's point model segments inside it; point clicks after it refine that mask. With no mask "
    "selected, clicks, boxes and strokes make a new mask.  \n"
    "**Keys** (while this tab shows): **1**-**7** tools (**B** paint, **E** erase) · **Z** / Ctrl+Z undo, **Y** / "
    "Shift+Z redo · **Delete** the selected mask · **Esc** select nothing (or drop a lone box corner) · **O** "
    "outlines on/off · **[** / **]** brush size · **+** / **-** / **0** zoom in, out, fit · arrows or Space + drag "
    "pan. Mouse: the wheel zooms; with a click tool, a drag pans."
)

CORRECT_CSS = """
table.correct-masks {font-size: 13px; width: 100%;} table.correct-masks td, table.correct-masks th {padding: 2px 6px;}
table.correct-masks tr.mask-off td {color: var(--body-text-color); opacity: 0.75; text-decoration: line-through;}
table.correct-masks tr.mask-selected td {background: #fef3c7; color: #111; font-weight: 600;}
/* The canvas and the tool picker above it fit the window at once: ~340 px of the page lie above the canvas at the top
   of the tab (title, note, tab bar, tool picker at 1440 px wide); at least 260 px tall, square at most on a phone. */
.cv-viewport {position: relative; height: max(260px, min(100vh - 340px, 640px, 95vw)); overflow: hidden;
  background: #1f2937; border-radius: 6px; touch-action: none; cursor: crosshair; user-select: none;}
.cv-viewport:focus-visible {outline: 2px solid #2563eb;}
/* the seven tools in one row at 1440 px wide (Gradio's padding wrapped the last one onto a second row, pushing the
   canvas below the window) */
#canvas-tool label {padding-left: 8px; padding-right: 8px;} #canvas-tool .wrap {gap: 6px;}
.cv-stage {position: absolute; left: 0; top: 0; transform-origin: 0 0;}
.cv-stage img, .cv-stage canvas {position: absolute; left: 0; top: 0; max-width: none; image-rendering: auto;}
.cv-stage canvas {pointer-events: none;}
.cv-none {display: flex; align-items: center; justify-content: center; height: 160px; cursor: default;}
.cv-empty {color: #f9fafb; padding: 16px; text-align: center;}
.cv-zoom {position: absolute; right: 8px; top: 8px; display: flex; gap: 4px; align-items: center;
  background: rgba(255,255,255,.92); border-radius: 6px; padding: 3px 6px; color: #111; font-size: 13px;}
.cv-zoom button {border: 1px solid #6b7280; background: #fff; color: #111; border-radius: 4px; padding: 0 8px;
  cursor: pointer; min-width: 28px;}
.cv-level {min-width: 44px; text-align: right;}
.cv-pending {font-weight: 600; margin-right: 4px;}
"""


@dataclass(frozen=True)
class CorrectView:
    """The Correct tab's components: ``outputs`` in ``CorrectOutputs`` order (what every loader returns)."""

    session: gr.State
    outputs: list[Any]


def build_correct_tab(handlers: CorrectHandlers, tabs: gr.Tabs, extra: Callable[[], None] | None = None) -> CorrectView:
    """The tab's components and events (call inside ``tabs``); on ZeroGPU only the point model's call takes a GPU
    (``CorrectHandlers``' ``gpu``). ``extra`` builds what another tab adds under the status line (the Video tab's
    "apply to the video")."""
    with gr.Tab("Correct", id=CORRECT_TAB_ID, elem_id="tab-correct"):
        # only the session's key: the session itself lives in handlers.sessions, bounded in time and memory
        session = gr.State(None, time_to_live=handlers.sessions.ttl_s, delete_callback=handlers.forget)
        status = gr.HTML(render_status(StatusLine("idle", EMPTY_MESSAGE)), elem_id="correct-status", js_on_load=LIVE_STATUS_JS,
                         render=False)  # shown at the top of the side column (_controls_column)
        with gr.Row(equal_height=False, elem_id="correct-row"):
            canvas = _canvas_column()
            controls = _controls_column(status, extra)
    outputs = [session, status, canvas.canvas, canvas.compare, controls.shown, controls.selected, controls.label,
               controls.table, controls.undo, controls.redo, controls.round_pick, controls.number_pick,
               controls.preview, tabs]
    if len(outputs) != len(CorrectOutputs._fields):  # a programming error, caught by the first test that builds the page
        raise RuntimeError("the Correct tab's outputs do not match CorrectOutputs")
    _wire_correct_tab(handlers, session, status, canvas, controls, outputs)
    return CorrectView(session, outputs)


@dataclass(frozen=True)
class _Canvas:
    """The canvas column's components that events use (the tool picker and brush size are read by the script)."""

    opacity: gr.Slider
    outline: gr.Checkbox
    canvas: gr.HTML
    compare: gr.ImageSlider


@dataclass(frozen=True)
class _Controls:
    """The side column: undo / redo, the mask list and label, bring-in, export and import."""

    undo: gr.Button
    redo: gr.Button
    shown: gr.CheckboxGroup
    selected: gr.Dropdown
    label: gr.Dropdown
    set_label: gr.Button
    delete: gr.Button
    table: gr.HTML
    round_pick: gr.Dropdown
    number_pick: gr.Dropdown
    preview: gr.Image
    bring: gr.Button
    exports: tuple[gr.Button, ...]  # COCO (RLE), COCO polygons, YOLO labels, PNG masks, bundle, trace
    download: gr.File
    upload: gr.File


def _canvas_column() -> _Canvas:
    """The tool picker right above the canvas (both in view at once: ``CORRECT_CSS`` sizes the canvas to the window),
    then the brush size and mask style, the shortcuts and the comparison slider."""
    with gr.Column(scale=7, min_width=360, elem_id="correct-canvas-column"):
        gr.Radio([(label, key) for key, label in TOOLS.items()], value=TOOL_SELECT, show_label=False,
                 elem_id="canvas-tool", container=False, interactive=True)  # read by the script
        canvas = gr.HTML(render_canvas(None), elem_id="correct-canvas", js_on_load=CANVAS_JS)
        with gr.Row(elem_id="canvas-style"):
            gr.Slider(2, 120, value=DEFAULT_BRUSH_PX, step=2, label="Brush size (px of the photo)",
                      elem_id="brush-size", min_width=160, interactive=True)  # read by the script
            opacity = gr.Slider(0.0, 1.0, value=FILL_ALPHA, step=0.05, label="Mask opacity",
                                elem_id="mask-opacity", min_width=160)
            outline = gr.Checkbox(False, label="Outlines only (O)", elem_id="outline-mode", min_width=120)
        gr.Markdown(SHORTCUTS, elem_id="correct-shortcuts")
        with gr.Accordion("Compare with the agent's answer", open=False, elem_id="compare-accordion"):
            compare = gr.ImageSlider(label="Agent's answer | corrected answer", format="png",
                                     interactive=False, elem_id="correct-compare")
    return _Canvas(opacity, outline, canvas, compare)


def _controls_column(status: gr.HTML, extra: Callable[[], None] | None = None) -> _Controls:
    """The tab's ``status`` line at the top (beside the canvas: above the row, every line it wrapped onto pushed the
    canvas further below the fold), then undo / redo, the masks (shown, selected, label, delete, table), bring-in from
    any round, export and import."""
    with gr.Column(scale=4, min_width=320, elem_id="correct-controls-column"):
        status.render()
        if extra is not None:
            extra()
        with gr.Row(elem_id="correct-undo-row"):
            undo = gr.Button("Undo (Z)", elem_id="undo-btn", interactive=False, size="sm")
            redo = gr.Button("Redo (Y)", elem_id="redo-btn", interactive=False, size="sm")
        shown = gr.CheckboxGroup([], label="Masks in the corrected answer (uncheck to hide)",
                                 elem_id="mask-toggles")
        selected = gr.Dropdown([], label="Selected mask (clicks and brush act on it)", elem_id="selected-mask")
        label = gr.Dropdown([], label="Label of the selected mask: pick one used before, or type a new one",
                            allow_custom_value=True, elem_id="mask-label")
        with gr.Row():
            set_label = gr.Button("Set label", elem_id="label-btn", size="sm")
            delete = gr.Button("Delete the selected mask (Del)", variant="stop", elem_id="delete-btn",
                               size="sm")
        table = gr.HTML(elem_id="correct-masks")
        with gr.Accordion("Bring in a mask from any round", open=False, elem_id="bring-in"):
            with gr.Row():
                round_pick = gr.Dropdown([], label="Round", elem_id="bring-round", scale=2)
                number_pick = gr.Dropdown([], label="Mask number", elem_id="bring-number", scale=1)
            preview = gr.Image(label="That round's masks", format="png", interactive=False,
                               elem_id="bring-preview", height=240)
            bring = gr.Button("Bring in this mask", elem_id="bring-btn", size="sm")
        with gr.Accordion("Export and import", open=True, elem_id="correct-export"):
            with gr.Row():
                exports = (gr.Button("COCO JSON", elem_id="export-coco-btn", size="sm"),
                           gr.Button("COCO polygons", elem_id="export-polygons-btn", size="sm"),
                           gr.Button("YOLO labels (.zip)", elem_id="export-yolo-btn", size="sm"),
                           gr.Button("PNG masks (.zip)", elem_id="export-png-btn", size="sm"),
                           gr.Button("Bundle (.zip)", elem_id="export-bundle-btn", size="sm"),
                           gr.Button("Trace (.zip)", elem_id="export-trace-btn", size="sm"))
            download = gr.File(label="Download", interactive=False, elem_id="correct-download",
                               height=FILE_HEIGHT, elem_classes=["compact-file"])
            upload = gr.File(label="Import a bundle or trace .zip", file_types=[".zip"], type="filepath",
                             elem_id="correct-file", height=FILE_HEIGHT,
                             elem_classes=["compact-file"])
    return _Controls(undo, redo, shown, selected, label, set_label, delete, table, round_pick, number_pick, preview,
                     bring, exports, download, upload)


def _wire_correct_tab(handlers: CorrectHandlers, session: gr.State, status: gr.HTML, canvas: _Canvas,
                      controls: _Controls, outputs: list[Any]) -> None:
    """Every event of the tab: each reads the session and returns ``outputs`` (exports: the status and the file)."""
    # Every Correct-tab event reads and replaces the session's whole edit state: two of one session in flight at
    # once (a quick select then delete) would each start from the same state and the later one would undo the
    # other. They share one queue with a few slots, and each waits for its own session's earlier events
    # (ui.session_order, applied by ui.layout): other sessions' imports and edits are not queued behind one.
    serial = {"concurrency_id": EDIT_QUEUE, "concurrency_limit": EDIT_CONCURRENCY}
    quiet = {"api_visibility": "private", "show_progress": "hidden", **serial}
    # The edits canvas.js queues: it sends one at a time and the next when this `.then` says the answer came;
    # "multiple" keeps any input that still arrives while one is pending (Gradio's default would drop it).
    queued = {**quiet, "trigger_mode": "multiple"}
    canvas.canvas.select(handlers.canvas, inputs=[session], outputs=outputs, **queued).then(None, js=EDIT_ANSWERED_JS)
    style = [session, canvas.opacity, canvas.outline]
    canvas.opacity.input(handlers.style, inputs=style, outputs=outputs, **quiet)  # a drag: only its latest value
    canvas.outline.input(handlers.style, inputs=style, outputs=outputs, **queued).then(None, js=EDIT_ANSWERED_JS)
    controls.shown.input(handlers.set_shown, inputs=[session, controls.shown], outputs=outputs, **quiet)
    controls.selected.input(handlers.select, inputs=[session, controls.selected], outputs=outputs, **quiet)
    controls.set_label.click(handlers.relabel, inputs=[session, controls.label], outputs=outputs, **quiet)
    controls.label.input(handlers.relabel, inputs=[session, controls.label], outputs=outputs, **quiet)
    for button, edit in ((controls.delete, handlers.delete), (controls.undo, handlers.undo),
                         (controls.redo, handlers.redo)):
        button.click(edit, inputs=[session], outputs=outputs, **queued).then(None, js=EDIT_ANSWERED_JS)
    controls.bring.click(handlers.bring_in, inputs=[session, controls.round_pick, controls.number_pick],
                         outputs=outputs, **quiet)
    controls.round_pick.input(handlers.pick_round, inputs=[session, controls.round_pick],
                              outputs=[controls.number_pick, controls.preview], **quiet)
    exports = (handlers.export_coco, handlers.export_polygons, handlers.export_yolo, handlers.export_pngs,
               handlers.export_bundle, handlers.export_trace)
    for button, export in zip(controls.exports, exports, strict=True):
        button.click(export, inputs=[session], outputs=[status, controls.download], **quiet)

    # the upload box is emptied afterwards (read or refused), ready for the next file
    def upload_file(path: str | None, previous: str | None, request: gr.Request) -> tuple[Any, ...]:
        return (*handlers.upload(path, previous, request), None)

    controls.upload.upload(upload_file, inputs=[controls.upload, session], outputs=[*outputs, controls.upload],
                           api_visibility="private", **serial)
