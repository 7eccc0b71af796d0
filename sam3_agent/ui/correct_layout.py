"""The "Correct" tab: the agent's answer next to the corrected one, the mask list, clicks, brush, bring-in, undo/redo,
export and import, wired to ``correct_handlers.CorrectHandlers``.

``build_correct_tab`` returns the components other tabs need ("Correct these masks" in the Run tab and "Correct this
trace" in the Inspect tab load a trace here and bring this tab to the front).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from .correct import CLICK_MODES, CLICK_TOGGLE
from .correct_handlers import EMPTY_MESSAGE, CorrectHandlers, CorrectOutputs
from .html import render_status
from .view import StatusLine

CORRECT_TAB_ID = "correct"
BRUSH_COLOR = ("#ff00ff", 0.6)  # translucent magenta: stands out on photos and mask colours, keeps them visible
IMAGE_HEIGHT = 380  # px, the two answers side by side
EDITOR_HEIGHT = 560  # px, the brush canvas
FILE_HEIGHT = 110  # px, the download and upload boxes

CORRECT_CSS = """
table.correct-masks {font-size: 13px; width: 100%;} table.correct-masks td, table.correct-masks th {padding: 2px 6px;}
table.correct-masks tr.mask-off td {opacity: 0.5; text-decoration: line-through;}
table.correct-masks tr.mask-selected td {background: #fef3c7; color: #111; font-weight: 600;}
"""


@dataclass(frozen=True)
class CorrectView:
    """The Correct tab's components: ``outputs`` in ``CorrectOutputs`` order (what every loader returns)."""

    session: gr.State
    outputs: list[Any]


def build_correct_tab(handlers: CorrectHandlers, tabs: gr.Tabs) -> CorrectView:
    """The tab's components and events (call inside ``tabs``)."""
    with gr.Tab("Correct", id=CORRECT_TAB_ID, elem_id="tab-correct"):
        # only the session's key: the session itself lives in handlers.sessions, bounded in time and memory
        session = gr.State(None, time_to_live=handlers.sessions.ttl_s, delete_callback=handlers.forget)
        status = gr.HTML(render_status(StatusLine("idle", EMPTY_MESSAGE)), elem_id="correct-status")
        with gr.Row(equal_height=False):
            with gr.Column(scale=7, min_width=480):
                with gr.Row():
                    agent_image = gr.Image(label="Agent's answer", format="png", interactive=False,
                                           elem_id="correct-agent-overlay", height=IMAGE_HEIGHT)
                    corrected_image = gr.Image(label="Corrected answer: click on it", format="png", interactive=False,
                                               elem_id="correct-overlay", height=IMAGE_HEIGHT)
                mode = gr.Radio(list(CLICK_MODES), value=CLICK_TOGGLE, label="A click on the corrected answer will",
                                elem_id="click-mode")
                editor = gr.ImageEditor(
                    label="Brush: paint over the image, then add the painted area to the selected mask (or make a new "
                          "mask of it) or remove it from the selected mask",
                    type="numpy", sources=(), transforms=(), layers=False, elem_id="correct-editor",
                    brush=gr.Brush(colors=[BRUSH_COLOR], color_mode="fixed"), height=EDITOR_HEIGHT,
                )
                with gr.Row():
                    paint = gr.Button("Add painted area", elem_id="paint-btn", size="md")
                    erase = gr.Button("Remove painted area from the selected mask", elem_id="erase-btn", size="md")
            with gr.Column(scale=4, min_width=320):
                with gr.Row():
                    undo = gr.Button("Undo", elem_id="undo-btn", interactive=False, size="sm")
                    redo = gr.Button("Redo", elem_id="redo-btn", interactive=False, size="sm")
                shown = gr.CheckboxGroup([], label="Masks in the corrected answer (uncheck to hide)",
                                         elem_id="mask-toggles")
                selected = gr.Dropdown([], label="Selected mask (clicks and brush act on it)", elem_id="selected-mask")
                label = gr.Textbox(label="Label of the selected mask (Enter or 'Set label' to change it)",
                                   elem_id="mask-label")
                with gr.Row():
                    set_label = gr.Button("Set label", elem_id="label-btn", size="sm")
                    delete = gr.Button("Delete the selected mask", variant="stop", elem_id="delete-btn", size="sm")
                table = gr.HTML(elem_id="correct-masks")
                with gr.Accordion("Bring in a mask from any round", open=True, elem_id="bring-in"):
                    with gr.Row():
                        round_pick = gr.Dropdown([], label="Round", elem_id="bring-round", scale=2)
                        number_pick = gr.Dropdown([], label="Mask number", elem_id="bring-number", scale=1)
                    preview = gr.Image(label="That round's masks", format="png", interactive=False,
                                       elem_id="bring-preview", height=240)
                    bring = gr.Button("Bring in this mask", elem_id="bring-btn", size="sm")
                with gr.Accordion("Export and import", open=True, elem_id="correct-export"):
                    with gr.Row():
                        coco = gr.Button("COCO JSON", elem_id="export-coco-btn", size="sm")
                        pngs = gr.Button("PNG masks (.zip)", elem_id="export-png-btn", size="sm")
                        bundle = gr.Button("Bundle (.zip)", elem_id="export-bundle-btn", size="sm")
                        trace = gr.Button("Trace (.zip)", elem_id="export-trace-btn", size="sm")
                    download = gr.File(label="Download", interactive=False, elem_id="correct-download",
                                       height=FILE_HEIGHT)
                    upload = gr.File(label="Import a bundle or trace .zip", file_types=[".zip"], type="filepath",
                                     elem_id="correct-file", height=FILE_HEIGHT)

    outputs = [session, status, agent_image, corrected_image, editor, shown, selected, label, table, undo, redo,
               round_pick, number_pick, preview, tabs]
    if len(outputs) != len(CorrectOutputs._fields):  # a programming error, caught by the first test that builds the page
        raise RuntimeError("the Correct tab's outputs do not match CorrectOutputs")
    # Every Correct-tab event reads and replaces the session's whole edit state: two in flight at once (a quick
    # select then delete) would each start from the same state and the later one would undo the other. One
    # shared queue runs them one at a time, in order; each takes milliseconds (a point click, one model call).
    serial = {"concurrency_id": "correct-edits", "concurrency_limit": 1}
    quiet = {"api_visibility": "private", "show_progress": "hidden", **serial}
    corrected_image.select(handlers.click, inputs=[session, mode], outputs=outputs, **quiet)
    shown.input(handlers.set_shown, inputs=[session, shown], outputs=outputs, **quiet)
    selected.input(handlers.select, inputs=[session, selected], outputs=outputs, **quiet)
    set_label.click(handlers.relabel, inputs=[session, label], outputs=outputs, **quiet)
    label.submit(handlers.relabel, inputs=[session, label], outputs=outputs, **quiet)
    delete.click(handlers.delete, inputs=[session], outputs=outputs, **quiet)
    undo.click(handlers.undo, inputs=[session], outputs=outputs, **quiet)
    redo.click(handlers.redo, inputs=[session], outputs=outputs, **quiet)
    paint.click(handlers.paint, inputs=[session, editor], outputs=outputs, **quiet)
    erase.click(handlers.erase, inputs=[session, editor], outputs=outputs, **quiet)
    bring.click(handlers.bring_in, inputs=[session, round_pick, number_pick], outputs=outputs, **quiet)
    round_pick.input(handlers.pick_round, inputs=[session, round_pick], outputs=[number_pick, preview], **quiet)
    for button, export in ((coco, handlers.export_coco), (pngs, handlers.export_pngs),
                           (bundle, handlers.export_bundle), (trace, handlers.export_trace)):
        button.click(export, inputs=[session], outputs=[status, download], **quiet)
    # the upload box is emptied afterwards (read or refused), ready for the next file
    def upload_file(path: str | None, request: gr.Request) -> tuple[Any, ...]:
        return (*handlers.upload(path, request), None)

    upload.upload(upload_file, inputs=[upload], outputs=[*outputs, upload], api_visibility="private", **serial)
    return CorrectView(session, outputs)
