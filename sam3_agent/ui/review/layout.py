"""The review queue on the page: a "Review a batch" tab (open a batch output, the queue table, the export as COCO or
YOLO) and a bar above the tabs (the current item, progress, Previous / Accept / Next) that shows once a queue is open, so it stays
in sight while the item is corrected in the Correct tab. Wired to ``ui.review.handlers.ReviewHandlers``.

Keyboard: **N** next, **P** previous, **A** accept, while the bar shows and the focus is not in a text field. The keys
are read by a ``gr.HTML`` component's ``js_on_load`` script (Gradio's way to run a component's own script), which
presses the bar's buttons, so a key does exactly what its button does (and nothing while the button is off).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from ...datasets.review.exports import COCO_RLE, FORMATS
from ...datasets.review.sources import find_batches
from ..correct.handlers import CorrectHandlers
from ..correct.layout import CorrectView
from ..html import LIVE_STATUS_JS, render_status
from ..session_order import EDIT_CONCURRENCY, EDIT_QUEUE
from ..view import StatusLine
from .handlers import EMPTY, ReviewHandlers

REVIEW_TAB_ID = "review"
REVIEW_CSS = """
#review-bar {border: 2px solid #2563eb; border-radius: 8px; padding: 4px 8px;}
.review-position {font-weight: 600; padding: 4px 0;}
table.review-queue {font-size: 13px; width: 100%;} table.review-queue td, table.review-queue th {padding: 2px 6px;}
table.review-queue tr.review-current td {background: #dbeafe; color: #111; font-weight: 600;}
"""
# N / P / A press the bar's buttons (ignored in text fields, with modifier keys, or while the bar is hidden)
REVIEW_KEYS = """
const keys = {n: '#review-next', p: '#review-prev', a: '#review-accept'};
function onReviewKey(event) {
  const bar = document.getElementById('review-bar');
  if (!bar || bar.offsetParent === null || event.ctrlKey || event.altKey || event.metaKey) return;
  const target = event.target;
  if (target && (target.isContentEditable || ['INPUT', 'TEXTAREA', 'SELECT'].includes(target.tagName))) return;
  const selector = keys[event.key.toLowerCase()];
  const button = selector && document.querySelector(selector);
  if (!button || button.disabled) return;
  event.preventDefault();
  button.click();
}
if (window.__sam3ReviewKeys) document.removeEventListener('keydown', window.__sam3ReviewKeys);
window.__sam3ReviewKeys = onReviewKey;
document.addEventListener('keydown', onReviewKey);
"""


@dataclass(frozen=True)
class ReviewBar:
    """The bar's components (made by ``build_review_bar`` above the tabs, wired by ``build_review_tab``)."""

    group: gr.Group
    position: gr.HTML
    previous: gr.Button
    accept: gr.Button
    following: gr.Button


def build_review_bar() -> ReviewBar:
    """The bar above the tabs (hidden until a queue opens)."""
    with gr.Group(visible=False, elem_id="review-bar") as group:
        position = gr.HTML(elem_id="review-position", js_on_load=REVIEW_KEYS)
        with gr.Row():
            previous = gr.Button("Previous (P)", elem_id="review-prev", size="sm")
            accept = gr.Button("Accept (A)", elem_id="review-accept", variant="primary", size="sm")
            following = gr.Button("Next (N)", elem_id="review-next", size="sm")
    return ReviewBar(group, position, previous, accept, following)


def build_review_tab(correct: CorrectHandlers, root: Path, correct_view: CorrectView, bar: ReviewBar,
                     review_root: Path | None = None) -> ReviewHandlers:
    """The "Review a batch" tab (call inside ``tabs``) and the bar's events; returns its handlers. ``review_root``:
    where batch folders may be opened by path (``AppSettings.review_root``: ``--review-root`` or
    ``SAM3_AGENT_REVIEW_ROOT``; ``None``: .zip uploads only)."""
    handlers = ReviewHandlers(correct, root, review_root)
    with gr.Tab("Review a batch", id=REVIEW_TAB_ID, elem_id="tab-review"):
        slot = gr.State(None)
        status = gr.HTML(render_status(StatusLine("idle", EMPTY)), elem_id="review-status", js_on_load=LIVE_STATUS_JS)
        with gr.Row(equal_height=False):
            with gr.Column(scale=4, min_width=300):
                where = ("a folder under the review folder" if review_root is not None else
                         "no review folder was set (--review-root), so upload a .zip")
                found = find_batches(review_root)
                folder = gr.Dropdown(found, value=found[0] if found else None, label=f"Batch output folder ({where})",
                                     allow_custom_value=True, elem_id="review-folder",
                                     interactive=review_root is not None)
                open_button = gr.Button("Open this batch", elem_id="review-open-btn", variant="primary",
                                        interactive=review_root is not None)
                upload = gr.File(label="Or upload a .zip of a batch output folder", file_types=[".zip"],
                                 type="filepath", elem_id="review-zip", height=110,
                                 elem_classes=["compact-file"])
                unreviewed = gr.Checkbox(False, label="Include items not reviewed, with the agent's masks",
                                         elem_id="review-include-unreviewed")
                form = gr.Radio([(label, key) for key, label in FORMATS.items()], value=COCO_RLE,
                                label="Export format", elem_id="review-export-format")
                export = gr.Button("Export the reviewed dataset", elem_id="review-export-btn")
                download = gr.File(label="Download", interactive=False, elem_id="review-download", height=110,
                                   elem_classes=["compact-file"])
            with gr.Column(scale=6, min_width=360):
                table = gr.HTML(elem_id="review-table")

    outputs = [slot, bar.group, bar.position, status, table, download, *correct_view.outputs]
    # the Correct tab's queue, in session order (ui.session_order): a save never runs while an edit of the same
    # session is in flight, and other sessions' are not held behind it
    quiet = {"api_visibility": "private", "show_progress": "hidden", "concurrency_id": EDIT_QUEUE,
             "concurrency_limit": EDIT_CONCURRENCY}
    session = correct_view.session

    def flat(result: Any) -> tuple[Any, ...]:
        return (*result[:-1], *result[-1])  # the queue's values, then the Correct tab's

    def open_folder(text: str | None, key: Any, request: gr.Request) -> tuple[Any, ...]:
        return flat(handlers.open_folder(text, key, request))

    def open_zip(path: str | None, key: Any, request: gr.Request) -> tuple[Any, ...]:
        return (*flat(handlers.open_zip(path, key, request)), None)  # the upload box empties, ready for another

    def previous(current: Any, key: Any, request: gr.Request) -> tuple[Any, ...]:
        return flat(handlers.step(current, key, -1, request))

    def following(current: Any, key: Any, request: gr.Request) -> tuple[Any, ...]:
        return flat(handlers.step(current, key, 1, request))

    def accept(current: Any, key: Any, request: gr.Request) -> tuple[Any, ...]:
        return flat(handlers.accept(current, key, request))

    open_button.click(open_folder, inputs=[folder, session], outputs=outputs, **quiet)
    upload.upload(open_zip, inputs=[upload, session], outputs=[*outputs, upload], **quiet)
    # Quick Previous / Next presses all count, in order (Gradio's default drops a press while one is pending): each
    # step reads the queue position its predecessor left, since a gr.State is read when the event runs. A second
    # Accept while one is saving is dropped on purpose: it would accept the next item before it was ever shown.
    steps = {**quiet, "trigger_mode": "multiple"}
    bar.previous.click(previous, inputs=[slot, session], outputs=outputs, **steps)
    bar.following.click(following, inputs=[slot, session], outputs=outputs, **steps)
    bar.accept.click(accept, inputs=[slot, session], outputs=outputs, **quiet)
    export.click(handlers.export, inputs=[slot, unreviewed, form], outputs=[status, download], **quiet)
    return handlers
