"""The "Inspect a trace" tab on the page: a trace or bundle .zip upload, its final masks, a timeline of its rounds
with Previous / Next, the chosen round and the context it sent, and for a video trace its tracks scrubber, wired to
``ui.inspect.handlers.InspectHandlers``.

``build_inspect_tab`` returns what the page wires to the Correct tab ("Correct this trace").
"""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from ..html import LIVE_STATUS_JS, ImageUrls, render_context, render_status
from ..round_clicks import ROUND_CLICKS
from ..view import StatusLine
from ..view_zoom import VIEW_ZOOM
from .handlers import INSPECT_CONTEXT_PLACEHOLDER, INSPECT_EMPTY, InspectHandlers

# Previous / Next step the round box in the browser, at once: each click counts from what the box says, so quick clicks
# add up (a server step counted from the round shown, and Gradio dropped a click while the last was pending). The
# box's change then shows the round (``InspectHandlers.show_round``, only the latest number). From a box being typed in
# (empty, a fraction) the step counts from the round the timeline marks; the result stays within the timeline's rows.


def round_step(delta: int) -> str:
    """The browser script of a Previous (``delta`` -1) or Next (+1) click: the round box's value in, the new one out."""
    return f"""(number) => {{
  const rows = document.querySelectorAll('#timeline tr[data-round]').length;
  if (!rows) return number;
  const current = document.querySelector('#timeline tr.timeline-current');
  const from = Number.isInteger(number) ? number : (current ? Number(current.dataset.round) : 1);
  return Math.min(Math.max(from + ({delta}), 1), rows);
}}"""


@dataclass(frozen=True)
class InspectTab:
    """The Inspect tab's components the page wires to other tabs."""

    state: gr.State  # the key of the trace being inspected (``InspectHandlers.store``)
    correct_button: gr.Button  # "Correct this trace"


def build_inspect_tab(handlers: InspectHandlers) -> InspectTab:
    """The tab's components and events (call inside the page's ``gr.Tabs``)."""
    with gr.Tab("Inspect a trace", id="inspect", elem_id="tab-inspect"):
        state = gr.State(None)
        with gr.Row(equal_height=False):
            with gr.Column(scale=4, min_width=300):
                trace_file = gr.File(label="Trace, bundle or video trace .zip (from the Run, Correct or Video tab's "
                                           "downloads)",
                                     file_types=[".zip"], type="filepath", elem_id="trace-file")
                message = gr.HTML(render_status(StatusLine("idle", INSPECT_EMPTY)), elem_id="inspect-status", js_on_load=LIVE_STATUS_JS)
                final_image = gr.Image(label="Final masks", format="png", interactive=False,
                                       elem_id="inspect-final-overlay", height=300, visible=False)
                final_masks = gr.HTML(elem_id="inspect-final-masks")
                correct_button = gr.Button("Correct this trace", elem_id="correct-inspect-btn")
            with gr.Column(scale=6, min_width=360):
                with gr.Group(visible=False, elem_id="round-nav") as navigation:
                    timeline = gr.HTML(elem_id="timeline", js_on_load=ROUND_CLICKS)
                    with gr.Row():
                        previous = gr.Button("Previous round", elem_id="prev-round", size="sm")
                        number = gr.Number(1, precision=0, label="Round", elem_id="round-number", min_width=80)
                        following = gr.Button("Next round", elem_id="next-round", size="sm")
                round_html = gr.HTML(elem_id="inspect-round", js_on_load=VIEW_ZOOM)
                with gr.Group(visible=False, elem_id="inspect-tracks") as tracks:
                    track_image = gr.Image(label="Tracks (every frame's objects)", format="jpeg", interactive=False,
                                           elem_id="inspect-track-frame", height=280)
                    track_caption = gr.HTML(elem_id="inspect-track-time")
                    track_slider = gr.Slider(0, 1, value=0, step=1, label="Frame", elem_id="inspect-track-scrubber")
                    track_table = gr.HTML(elem_id="inspect-objects")
            with gr.Column(scale=3, min_width=260, elem_id="inspect-context-column"):
                gr.Markdown("## Context sent to the model")
                context = gr.HTML(render_context(None, ImageUrls(), INSPECT_CONTEXT_PLACEHOLDER),
                                  elem_id="inspect-context")
        # the round box always ends on the round shown: show_round puts a number outside the trace back in range
        shown = [round_html, context, timeline, number]
        quiet = {"api_visibility": "private", "show_progress": "hidden"}
        trace_file.change(
            handlers.load_trace, inputs=[trace_file, state],
            outputs=[state, message, number, navigation, final_image, final_masks], api_visibility="private",
        ).then(handlers.show_round, inputs=[state, number], outputs=shown, **quiet).then(
            handlers.show_tracks, inputs=[state],
            outputs=[tracks, track_slider, track_image, track_caption, track_table], **quiet)
        track_slider.input(handlers.track_frame, inputs=[state, track_slider], outputs=[track_image, track_caption],
                           trigger_mode="always_last", **quiet)
        number.change(handlers.show_round, inputs=[state, number], outputs=shown, **quiet)
        number.blur(handlers.settle_number, inputs=[state, number], outputs=number, **quiet)
        previous.click(None, inputs=number, outputs=number, js=round_step(-1), **quiet)
        following.click(None, inputs=number, outputs=number, js=round_step(1), **quiet)
        # A row clicked while the last click's round is on its way shows that row's round: every click is sent, in
        # order (Gradio's default dropped it; its "always_last" replays the first click's row, seen in 6.31).
        timeline.select(handlers.pick_round, outputs=number, trigger_mode="multiple", **quiet)
    return InspectTab(state, correct_button)
