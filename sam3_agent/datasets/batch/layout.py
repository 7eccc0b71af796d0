"""The output folder of a batch, and writing one finished item into it.

Layout::

    OUT/manifest.json                 every item: id, image, query, folder, trace path, status, reason
    OUT/coco.json                     one COCO instance file for the whole batch (``outputs.coco_dataset``)
    OUT/summary.json                  statuses, rounds, mistakes by kind, time (``outputs.batch_summary``)
    OUT/items/<folder>/trace.json     the item's trace (+ images/*.png), written by ``trace.io.save_trace``
    OUT/items/<folder>/item.json      the item's record (``records``), written last: the item is then finished

A video item's folder holds what ``video --out`` writes (``video.outputs``): ``video_trace.json`` and
``keyframes/``, ``masks/00000.png``... (palette PNGs), ``tracks_ytvis.json`` and, when asked for, ``overlay.mp4``;
then its ``item.json``.

The dataset-level files are derived from the records and rewritten (atomically) at the end of every batch run,
also a stopped one; the records and traces are what a rerun resumes from.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...errors import InputError
from ...trace.io import TRACE_FILE, save_trace
from ...types import Trace
from ...video.outputs import OVERLAY_FILE, TRACE_NAME, write_video_outputs
from ...video.records import VideoTrace
from ..review.decisions import REVIEW_FILE, set_aside
from .files import remove_leftovers, write_json_atomic
from .items import BatchItem, Item, VideoItem, folder_names
from .records import RECORD_FILE, ItemRecord, failure_record, read_record, record_from_trace, record_from_video_trace

logger = logging.getLogger(__name__)

ITEMS_DIR = "items"
MANIFEST_FILE = "manifest.json"
COCO_FILE = "coco.json"
SUMMARY_FILE = "summary.json"
WRITE_TEST_FILE = ".write-test.json"


class BatchLayout:
    """Paths of one batch output folder for a given list of items.

    Args:
        out: the output folder.
        items: the batch's items (their ids name their folders, see ``items.folder_names``).

    Raises:
        InputError: two items share an id.
    """

    def __init__(self, out: str | Path, items: Sequence[Item]) -> None:
        self.out = Path(out)
        ids = [item.id for item in items]
        if len(set(ids)) != len(ids):
            raise InputError("two items share an id: give every item its own id")
        self._folders = folder_names(ids)

    def prepare(self) -> None:
        """Create the output folder, check that files can be written there (before any model loads) and remove the
        temporary files an earlier, killed run of the batch left (``files.remove_leftovers``: only those of the
        files a batch writes: the dataset files here, the records and reviews in the item folders).

        Raises:
            InputError: the path is a file, lies under a file, or is not writable.
        """
        try:
            (self.out / ITEMS_DIR).mkdir(parents=True, exist_ok=True)
            write_json_atomic(self.out / WRITE_TEST_FILE, {})
            (self.out / WRITE_TEST_FILE).unlink()
        except OSError as error:
            raise InputError(
                f"cannot write to the output folder {self.out}: {error.strerror or error}; choose another --out"
            ) from None
        removed = remove_leftovers(self.out, (MANIFEST_FILE, COCO_FILE, SUMMARY_FILE, WRITE_TEST_FILE))
        with os.scandir(self.out / ITEMS_DIR) as entries:
            folders = [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
        for folder in folders:
            removed += remove_leftovers(folder, (RECORD_FILE, REVIEW_FILE))
        if removed:
            logger.info("removed %d temporary file(s) left by an earlier run that was stopped mid-write", removed)

    def relative_folder(self, item: Item) -> str:
        """The item's folder relative to the output folder, with ``/`` separators (``items/<name>``)."""
        return f"{ITEMS_DIR}/{self._folders[item.id]}"

    def folder(self, item: Item) -> Path:
        """The item's folder."""
        return self.out / ITEMS_DIR / self._folders[item.id]

    def record_path(self, item: Item) -> Path:
        return self.folder(item) / RECORD_FILE

    def read_record(self, item: Item) -> ItemRecord | None:
        """The item's record when one exists and describes this item as it is now (same image and query)."""
        record = read_record(self.record_path(item))
        if record is not None and not record.matches(item):
            logger.info("item %s changed since its last run: it runs again", item.id)
            return None
        return record

    def read_records(self, items: Sequence[Item]) -> dict[str, ItemRecord]:
        """The current records of ``items`` by id (items never run, or changed since, are absent)."""
        records = {}
        for item in items:
            record = self.read_record(item)
            if record is not None:
                records[item.id] = record
        return records

    def begin_item(self, item: Item) -> None:
        """Forget the item's earlier record before it runs again, so a crash mid-write cannot leave an old
        record beside a new, half-written trace; a review of the earlier run is set aside (kept, renamed: its
        edits were made on masks the new run replaces; ``review.set_aside``)."""
        self.record_path(item).unlink(missing_ok=True)
        if isinstance(item, VideoItem):  # an overlay of an earlier run would outlive a rerun that writes none
            (self.folder(item) / OVERLAY_FILE).unlink(missing_ok=True)
            return
        set_aside(self.folder(item), "the item runs again; this review was of its earlier run")

    def write_item(self, item: BatchItem, trace: Trace | None, seconds: float, reason: str | None = None) -> ItemRecord:
        """Save the item's trace (``trace.io.save_trace``) and then its record; returns the record.

        Args:
            item: the item.
            trace: its run's trace (any status), or ``None`` when the run could not start.
            seconds: wall time of the item.
            reason: why the run could not start (only with ``trace=None``).

        Raises:
            OSError: the output folder cannot be written (the batch stops: every later item would fail too).
        """
        folder = self.folder(item)
        folder.mkdir(parents=True, exist_ok=True)
        if trace is None:
            record = failure_record(item, reason or "the run could not start", seconds)
        else:
            try:
                save_trace(trace, folder)
                record = record_from_trace(item, trace, seconds, TRACE_FILE)
            except (ValueError, TypeError) as error:  # a trace that cannot be encoded: a bug, not a full disk
                logger.exception("the trace of item %s could not be saved", item.id)
                record = failure_record(item, f"its trace could not be saved: {error}", seconds)
        write_json_atomic(self.record_path(item), record.to_json())
        return record

    def write_video_item(self, item: VideoItem, trace: VideoTrace | None, clip: Any, seconds: float,
                         reason: str | None = None, overlay_video: bool = False) -> ItemRecord:
        """Write a video item's outputs (``video.outputs.write_video_outputs``) and then its record; returns the
        record.

        Args:
            item: the video item.
            trace: its run's video trace (any status), or ``None`` when the run could not start.
            clip: the open clip the run was made on, for the overlay video (``None``: no overlay).
            seconds: wall time of the item.
            reason: why the run could not start (only with ``trace=None``).
            overlay_video: also write ``overlay.mp4``.

        Raises:
            OSError: the output folder cannot be written (the batch stops: every later item would fail too).
        """
        folder = self.folder(item)
        folder.mkdir(parents=True, exist_ok=True)
        if trace is None:
            record = failure_record(item, reason or "the run could not start", seconds)
        else:
            try:
                write_video_outputs(trace, clip, folder, overlay_video)
                record = record_from_video_trace(item, trace, seconds, TRACE_NAME)
            except InputError as error:  # the clip's frames could not be read again for the overlay video
                record = failure_record(item, f"its overlay video could not be written: {error}", seconds)
            except (ValueError, TypeError) as error:  # a trace that cannot be encoded: a bug, not a full disk
                logger.exception("the video trace of item %s could not be saved", item.id)
                record = failure_record(item, f"its trace could not be saved: {error}", seconds)
        write_json_atomic(self.record_path(item), record.to_json())
        return record
