"""Handlers of the review queue: a batch output (``python -m sam3_agent batch``) stepped through item by item, each
item corrected in the Correct tab and its decision saved beside its trace (``datasets.review``).

Each action returns a ``ReviewOutputs``: the queue's own components, then the Correct tab's (``CorrectOutputs``), since
opening an item loads its trace there (``CorrectHandlers.load``, the same path "Correct this trace" takes). The page's
``gr.State`` holds a small ``ReviewSlot`` (where the queue is and which item is open), never a trace.

What is saved, and when (a reload or an app restart finds it, since ``review.json`` is the only record):
- Accept saves the item with the edits in effect in the Correct tab: ``accepted`` without edits, ``corrected`` with
  some; then the next item opens.
- Next / Previous save the item first when its edits differ from the saved ones (``corrected``, or ``not reviewed``
  when every edit was undone on an item never accepted), so a correction is never lost by moving on.
- When someone else saved a review of the item meanwhile, nothing is written: the status line says who saved what;
  Accept again saves yours over theirs, Next / Previous leave yours unsaved.
"""

from __future__ import annotations

import dataclasses
import html
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import gradio as gr

from ...datasets.review.decisions import (
    ACCEPTED,
    CORRECTED,
    NOT_REVIEWED,
    STATE_NAMES,
    ReviewConflict,
    read_review,
    save_review,
)
from ...datasets.review.exports import COCO_RLE, export_reviewed
from ...datasets.review.queue import ItemReview, ReviewQueue, coco_summary
from ...datasets.review.sources import MAX_ZIP_UNPACKED, folder_under_root, prune_store, unpack_batch_zip
from ...edit_ops import op_to_json
from ...errors import InputError, TraceFormatError
from ..correct.handlers import CorrectHandlers, CorrectOutputs
from ..html import render_status
from ..view import StatusLine

logger = logging.getLogger(__name__)

TABLE_ROWS = 200  # rows of the queue table shown around the current item (a batch may have thousands)
UPLOADS_DIR = ".uploads"  # under the review root: uploaded batches, kept across restarts (hidden from the folder list)
TEMPORARY_STORE_BYTES = MAX_ZIP_UNPACKED  # without a review root, uploads are unpacked in the app's temporary folder
EMPTY = "Open a batch output (a folder under the review folder, or a .zip of one) to review it item by item."


@dataclass(frozen=True)
class ReviewSlot:
    """What the page keeps about its queue.

    Attributes:
        folder: the batch output folder (absolute).
        position: the open item's place in the queue (0-based).
        item: the open item's id (checked against the manifest on every action).
        revision: the revision of its ``review.json`` when it was opened (``review.NO_RECORD`` without one).
        trace_sha256: the digest of its trace (what a saved review refers to).
        correct_key: the Correct tab session that shows it.
        conflict: someone else's save was reported: Accept overwrites it, Next / Previous leave without saving.
    """

    folder: str
    position: int
    item: str
    revision: int
    trace_sha256: str
    correct_key: str | None
    conflict: bool = False


class ReviewOutputs(NamedTuple):
    """Values of the queue's components, then of the Correct tab's (``correct``, a ``CorrectOutputs``)."""

    slot: Any
    bar: Any
    position: Any
    status: Any
    table: Any
    download: Any
    correct: CorrectOutputs


def _line(kind: str, text: str) -> str:
    return render_status(StatusLine(kind, text[0].upper() + text[1:]))


def render_table(reviews: list[ItemReview], current: int | None) -> str:
    """The queue as a table (number, item, query, the agent's outcome, review state); the current row is marked
    ``review-current``; at most ``TABLE_ROWS`` rows, around the current one."""
    start = max(0, min((current or 0) - TABLE_ROWS // 2, len(reviews) - TABLE_ROWS))
    rows = []
    for position in range(start, min(len(reviews), start + TABLE_ROWS)):
        review = reviews[position]
        mark = ' class="review-current"' if position == current else ""
        rows.append(
            f'<tr{mark} data-state="{review.state}"><td>{position + 1}</td><td>{html.escape(review.item.id)}</td>'
            f"<td>{html.escape(review.item.query)}</td><td>{html.escape(review.item.status)}</td>"
            f"<td>{STATE_NAMES[review.state]}</td></tr>")
    return ('<table class="review-queue"><thead><tr><th>#</th><th>Item</th><th>Query</th><th>Agent</th>'
            f'<th>Review</th></tr></thead><tbody>{"".join(rows)}</tbody></table>')


class ReviewHandlers:
    """The review queue's actions.

    Args:
        correct: the Correct tab's handlers (items open there; their sessions hold the edits).
        root: the app's folder for per-session files (temporary: removed when the app stops).
        review_root: where batch folders may be opened by path (``None``: only uploads). Uploaded .zip batches are
            unpacked under ``review_root/.uploads``, so their reviews survive a restart; without a review root, under
            ``root/review``, bounded to ``TEMPORARY_STORE_BYTES`` (least recently opened removed first), and the
            person is told to export before the app stops.
    """

    def __init__(self, correct: CorrectHandlers, root: Path, review_root: Path | None = None) -> None:
        self.correct = correct
        self.review_root = review_root
        self.store = review_root / UPLOADS_DIR if review_root is not None else root / "review"

    # ------------------------------------------------------------------ opening

    def open_folder(self, text: str | None, correct_key: Any = None, request: gr.Request | None = None) -> ReviewOutputs:
        """Open the batch folder ``text`` (relative to the review root) at its first item not reviewed."""
        try:
            queue = ReviewQueue.open(folder_under_root(self.review_root, text))
        except InputError as error:
            return self._refused(str(error))
        return self._start(queue, correct_key, request)

    def open_zip(self, path: str | None, correct_key: Any = None, request: gr.Request | None = None) -> ReviewOutputs:
        """Open an uploaded .zip of a batch output (unpacked once; the same .zip again reopens its reviews)."""
        if not path:
            return self._refused("no file: upload a .zip of a batch output folder")
        try:
            folder, _reopened = unpack_batch_zip(path, self.store)
            queue = ReviewQueue.open(folder)
        except InputError as error:
            return self._refused(str(error))
        if self.review_root is not None:
            return self._start(queue, correct_key, request)
        prune_store(self.store, TEMPORARY_STORE_BYTES, keep=folder)
        return self._start(queue, correct_key, request, "this app has no review folder, so the reviews of an upload "
                           "last only while it runs: export the reviewed dataset before it stops")

    def _start(self, queue: ReviewQueue, correct_key: Any, request: Any, said: str = "") -> ReviewOutputs:
        try:
            queue.check_writable()
        except InputError as error:
            return self._refused(str(error))
        if not queue.items:
            return self._refused(f"this batch has no item with a trace to review ({len(queue.skipped)} failed or "
                                 "not run yet): run the batch command on it again")
        reviews = queue.reviews()
        first = next((i for i, r in enumerate(reviews) if r.state == NOT_REVIEWED), 0)
        return self._show(queue, first, correct_key, request, said)

    # ------------------------------------------------------------------ moving

    def step(self, slot: Any, correct_key: Any, delta: int, request: gr.Request | None = None) -> ReviewOutputs:
        """Save the open item when its edits changed, then open the item ``delta`` places away (clamped)."""
        queue, refusal = self._queue(slot)
        if queue is None:
            return refusal
        saved, refusal = self._save_changes(queue, slot, correct_key)
        if refusal is not None:
            return refusal
        target = min(max(queue.position_of(slot.item) + delta, 0), len(queue.items) - 1)
        return self._show(queue, target, correct_key, request, saved)

    def accept(self, slot: Any, correct_key: Any, request: gr.Request | None = None) -> ReviewOutputs:
        """Save the open item as reviewed (``accepted``, or ``corrected`` with edits) and open the next one."""
        queue, refusal = self._queue(slot)
        if queue is None:
            return refusal
        position = queue.position_of(slot.item)
        if correct_key != slot.correct_key:
            return self._refused(f"the Correct tab now shows another trace, not item {slot.item}: press Next or "
                                 "Previous to open a queue item there again")
        try:
            edits = tuple(self.correct.session(correct_key).state.applied)
        except InputError:  # the correction session closed (time-to-live, memory): open the item again
            return self._show(queue, position, correct_key, request, f"the correction session of item {slot.item} "
                              "had closed, so it was opened again with its saved review: check it and press Accept")
        state = CORRECTED if edits else ACCEPTED
        try:
            record = save_review(queue.items[position].folder, slot.item, state, edits, slot.trace_sha256,
                                 None if slot.conflict else slot.revision)
        except ReviewConflict as error:
            return self._conflict(queue, slot, error)
        except OSError as error:
            return self._refused(f"the review could not be saved: {error.strerror or error}")
        said = f"saved item {slot.item}: {record.described}"
        if position + 1 >= len(queue.items):
            return self._show(queue, position, correct_key, request, f"{said}; that was the last item")
        return self._show(queue, position + 1, correct_key, request, said)

    # ------------------------------------------------------------------ export

    def export(self, slot: Any, include_unreviewed: Any = False, form: Any = COCO_RLE) -> tuple[Any, Any]:
        """(status line, file): the reviewed dataset in the batch folder, in format ``form`` (``datasets.review.exports``:
        ``reviewed_coco.json``, ``reviewed_coco_polygons.json`` or ``reviewed_yolo.zip``); items not reviewed are left
        out, or with ``include_unreviewed`` added with the agent's masks."""
        queue, _ = self._queue(slot)
        if queue is None:
            return _line("error", EMPTY), gr.skip()
        try:
            path, document = export_reviewed(queue, form or COCO_RLE, bool(include_unreviewed))
        except (TraceFormatError, InputError) as error:
            return _line("error", f"export failed: {error}"), gr.skip()
        except OSError as error:
            return _line("error", f"export failed: {error.strerror or error}"), gr.skip()
        return _line("done", f"exported {path.name}: {coco_summary(document)}."), str(path)

    # ------------------------------------------------------------------ internals

    def _queue(self, slot: Any) -> tuple[ReviewQueue | None, ReviewOutputs | None]:
        if not isinstance(slot, ReviewSlot):
            return None, self._refused(EMPTY.rstrip("."))
        try:
            queue = ReviewQueue.open(slot.folder)
            queue.position_of(slot.item)
        except InputError as error:
            return None, self._refused(str(error))
        return queue, None

    def _save_changes(self, queue: ReviewQueue, slot: ReviewSlot, correct_key: Any) -> tuple[str, Any]:
        """Save the open item's edits when they differ from its saved ones; returns (what was done, refusal)."""
        if slot.conflict or correct_key != slot.correct_key:
            return "", None  # the Correct tab shows something else, or the person chose to leave their edits
        try:
            edits = tuple(self.correct.session(correct_key).state.applied)
        except InputError:
            return "", None  # the session expired: its edits are gone already; the saved review stands
        folder = queue.items[queue.position_of(slot.item)].folder
        saved = read_review(folder).record
        before = saved.edits if saved is not None and saved.trace_sha256 == slot.trace_sha256 else ()
        if [op_to_json(op) for op in edits] == [op_to_json(op) for op in before]:
            return "", None
        state = CORRECTED if edits else (ACCEPTED if saved is not None and saved.state == ACCEPTED else NOT_REVIEWED)
        try:
            record = save_review(folder, slot.item, state, edits, slot.trace_sha256, slot.revision)
        except ReviewConflict as error:
            return "", self._conflict(queue, slot, error)
        except OSError as error:
            return "", self._refused(f"your edits could not be saved: {error.strerror or error}")
        return f"saved item {slot.item}: {record.described}", None

    def _conflict(self, queue: ReviewQueue, slot: ReviewSlot, error: ReviewConflict) -> ReviewOutputs:
        skip = gr.skip()
        text = (f"{error}. Nothing was saved: press Accept to save yours over it, or Next / Previous to leave yours "
                "and keep theirs")
        reviews = queue.reviews()
        position = queue.position_of(slot.item)
        return ReviewOutputs(dataclasses.replace(slot, conflict=True), skip, skip, _line("error", text),
                             render_table(reviews, position), skip, CorrectOutputs(*([skip] * len(CorrectOutputs._fields))))

    def _show(self, queue: ReviewQueue, position: int, correct_key: Any, request: Any, said: str) -> ReviewOutputs:
        """Open the item at ``position`` in the Correct tab and show the queue around it."""
        try:
            opened = queue.open_item(position)
        except (InputError, TraceFormatError) as error:
            return self._refused(f"item {queue.items[position].id} cannot be opened: {error}")
        loaded = self.correct.load(opened.trace, switch_tab=True, previous=correct_key,
                                   owner=getattr(request, "session_hash", None) if request is not None else None)
        key = loaded.session if isinstance(loaded.session, str) else None
        slot = ReviewSlot(str(queue.folder), position, opened.item.id, opened.revision, opened.trace_sha256, key)
        reviews = queue.reviews()
        progress = queue.progress(reviews)
        item = opened.item
        reason = f" ({item.reason})" if item.reason else ""
        position_text = (f"Item {position + 1} of {len(queue.items)}: {item.id}, “{item.query}” · agent: "
                         f"{item.status}{reason} · review: {STATE_NAMES[opened.state]} · {progress.sentence}")
        notes = [said] if said else []
        if opened.note:
            notes.append(opened.note)
        if queue.skipped:
            notes.append(f"{len(queue.skipped)} item(s) without a trace are not in the queue")
        status = _line("done", "; ".join(notes) + ".") if notes else _line("idle", "Reviewing.")
        return ReviewOutputs(slot, gr.update(visible=True), _position_html(position_text), status,
                             render_table(reviews, position), gr.skip(), loaded)

    def _refused(self, message: str) -> ReviewOutputs:
        skip = gr.skip()
        return ReviewOutputs(skip, skip, skip, _line("error", f"{message}. Nothing was changed."), skip, skip,
                             CorrectOutputs(*([skip] * len(CorrectOutputs._fields))))


def _position_html(text: str) -> str:
    return f'<div class="review-position">{html.escape(text)}</div>'
