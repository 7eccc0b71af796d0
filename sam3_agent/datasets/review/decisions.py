"""A reviewer's decision on one batch item: ``items/<name>/review.json``, written beside the item's trace.

Why a small record beside the trace rather than the trace rewritten with its edits: the trace stays exactly what the
batch wrote, so ``item.json``, ``coco.json``, ``summary.json``, ``eval`` and a resumed batch never take hand edits for
model output; and the record is small (edit operations carry their masks as RLE), so it is rewritten whole after
every change, atomically (a temporary name, then a rename: ``files.write_json_atomic``). A page reload or an app
restart therefore finds every decision and every correction. The trace with its edits is derived (the trace, with
``edits`` replaced by the record's).

Layout (JSON object)::

    format "sam3_agent.review", version 1
    item          the item's id (as in the manifest)
    state         "accepted" | "corrected" | "not_reviewed" (a record whose edits were all undone)
    edits         the edit operations in effect (``edits.op_to_json``), applied on top of the trace's final masks
    revision      1, 2, ...: every save raises it; a save expecting another revision is refused (``ReviewConflict``)
    trace_sha256  SHA-256 of the ``trace.json`` the edits apply to: a review of an earlier run of the item is stale
    saved_at      UTC time of the save, ISO 8601

Two people on one folder: each save holds an exclusive lock (``fcntl.flock`` on ``.review.lock`` in the item's
folder, which also works between processes on one machine), re-reads the record and writes only when its revision is
the one the saver last saw; otherwise nobody's work is overwritten and the saver is told who saved what, when. A
record that is unreadable, or stale, is never overwritten either: it is renamed ``review.set-aside-<time>.json``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ...edit_ops import EditOp, op_from_json, op_to_json
from ...errors import TraceFormatError, what_went_wrong
from ..batch.files import write_json_atomic

try:  # POSIX; elsewhere saves are serialised within one process only
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

REVIEW_FILE = "review.json"
LOCK_FILE = ".review.lock"
REVIEW_FORMAT = "sam3_agent.review"
REVIEW_VERSION = 1
NOT_REVIEWED = "not_reviewed"
CORRECTED = "corrected"
ACCEPTED = "accepted"
STATES = (NOT_REVIEWED, CORRECTED, ACCEPTED)
STATE_NAMES = {NOT_REVIEWED: "not reviewed", CORRECTED: "corrected", ACCEPTED: "accepted"}
MAX_REVIEW_BYTES = 256 * 1024**2  # a review.json larger than this is reported unreadable (its edits carry RLE masks)
NO_RECORD = 0  # the revision of an item nobody has reviewed
UNREADABLE = -1  # the revision of an item whose review.json cannot be read


@dataclass(frozen=True)
class ReviewRecord:
    """One item's review (see the module docstring for the fields)."""

    item: str
    state: str
    edits: tuple[EditOp, ...]
    revision: int
    trace_sha256: str
    saved_at: str

    def to_json(self) -> dict[str, Any]:
        return {"format": REVIEW_FORMAT, "version": REVIEW_VERSION, "item": self.item, "state": self.state,
                "edits": [op_to_json(op) for op in self.edits], "revision": self.revision,
                "trace_sha256": self.trace_sha256, "saved_at": self.saved_at}

    @property
    def described(self) -> str:
        """E.g. "accepted with 2 edits, saved 2025-01-31 14:02 UTC"."""
        count = len(self.edits)
        edits = f" with {count} edit{'s' if count != 1 else ''}" if count else ""
        return f"{STATE_NAMES.get(self.state, self.state)}{edits}, saved {self.saved_at.replace('T', ' ')[:16]} UTC"


@dataclass(frozen=True)
class ReviewRead:
    """What ``review.json`` of an item holds: a record, nothing (``record`` None, ``problem`` None), or an unreadable
    file (``problem`` says why)."""

    record: ReviewRecord | None
    problem: str | None = None

    @property
    def revision(self) -> int:
        """The record's revision; ``NO_RECORD`` (0) without one, ``UNREADABLE`` (-1) for an unreadable file."""
        if self.problem is not None:
            return UNREADABLE
        return self.record.revision if self.record is not None else NO_RECORD


class ReviewConflict(Exception):
    """Someone else saved a review of the item since the saver last read it; ``current`` is what they saved (``None``:
    their file is unreadable or was removed). Nothing was written."""

    def __init__(self, current: ReviewRead) -> None:
        self.current = current
        record = current.record
        if record is not None:
            what = f"someone else saved a review of this item since you opened it ({record.described})"
        else:
            what = "the saved review of this item changed since you opened it"
        super().__init__(what)


def trace_digest(trace_file: Path) -> str:
    """SHA-256 (hex) of a ``trace.json``: what a review's edits were made on.

    Raises:
        OSError: the file cannot be read.
    """
    digest = hashlib.sha256()
    with open(trace_file, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_review(folder: Path) -> ReviewRead:
    """The review in an item's ``folder`` (``REVIEW_FILE``); never raises: an unreadable file is reported."""
    path = Path(folder) / REVIEW_FILE
    try:
        if path.stat().st_size > MAX_REVIEW_BYTES:
            return ReviewRead(None, f"{REVIEW_FILE} is larger than {MAX_REVIEW_BYTES // 2**20} MB")
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return ReviewRead(None)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        return ReviewRead(None, f"{REVIEW_FILE} cannot be read ({error})")
    try:
        if not isinstance(data, dict) or data.get("format") != REVIEW_FORMAT:
            raise ValueError("it is not a SAM3 Agent review")
        if data.get("version") != REVIEW_VERSION:
            raise ValueError(f"version {data.get('version')!r} is not supported (this app reads {REVIEW_VERSION})")
        state, revision = data["state"], data["revision"]
        if state not in STATES:
            raise ValueError(f"unknown state {state!r}")
        if isinstance(revision, bool) or not isinstance(revision, int) or revision < 1:
            raise ValueError(f"bad revision {revision!r}")
        if not isinstance(data["edits"], list):
            raise ValueError("'edits' is not a list")
        record = ReviewRecord(str(data["item"]), state, tuple(op_from_json(op) for op in data["edits"]), revision,
                              str(data["trace_sha256"]), str(data["saved_at"]))
    except (TraceFormatError, KeyError, TypeError, ValueError) as error:
        return ReviewRead(None, f"{REVIEW_FILE} is malformed: {what_went_wrong(error)}")
    return ReviewRead(record)


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Hold the item's review lock (exclusive, blocking; released on exit, also when the process dies)."""
    with open(folder / LOCK_FILE, "a+b") as handle:
        if fcntl is not None:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def set_aside(folder: Path, why: str) -> None:
    """Rename the ``review.json`` of an item's ``folder`` to ``review.set-aside-<UTC time>.json`` (an unreadable or
    stale review, or one of a run about to be replaced): never overwrite or delete someone's work. Nothing happens
    when there is none.

    Raises:
        OSError: the folder cannot be written.
    """
    if not (folder / REVIEW_FILE).exists():
        return
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    target = folder / f"review.set-aside-{stamp}.json"
    os.replace(folder / REVIEW_FILE, target)
    logger.warning("%s: %s; kept as %s", folder / REVIEW_FILE, why, target.name)


def save_review(folder: Path, item: str, state: str, edits: Sequence[EditOp], trace_sha256: str,
                expected_revision: int | None) -> ReviewRecord:
    """Write the item's review (atomically) when nobody saved another since revision ``expected_revision``.

    Args:
        folder: the item's folder (holding its ``trace.json``).
        item: the item's id.
        state: one of ``STATES``.
        edits: the edit operations in effect.
        trace_sha256: ``trace_digest`` of the trace the edits were made on.
        expected_revision: the revision the saver last read (``NO_RECORD``, ``UNREADABLE`` or a record's), or
            ``None`` to save over whatever is there ("keep mine").

    Returns:
        the record written (its revision one above the one it replaces).

    Raises:
        ReviewConflict: the record on disk has another revision (nothing written).
        ValueError: an unknown state.
        OSError: the folder cannot be written.
    """
    if state not in STATES:
        raise ValueError(f"unknown review state {state!r}: use one of {', '.join(STATES)}")
    folder = Path(folder)
    with _locked(folder):
        current = read_review(folder)
        if expected_revision is not None and current.revision != expected_revision:
            raise ReviewConflict(current)
        if current.problem is not None:
            set_aside(folder, current.problem)
        elif current.record is not None and current.record.trace_sha256 != trace_sha256:
            set_aside(folder, "its edits were made on an earlier run of this item")
        record = ReviewRecord(item, state, tuple(edits), max(current.revision, NO_RECORD) + 1, trace_sha256,
                              datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"))
        write_json_atomic(folder / REVIEW_FILE, record.to_json())
    return record
