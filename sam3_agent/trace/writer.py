"""Writing a trace folder as one step, and saving a running trace after every round off the hot path.

``write_folder`` writes every file under a temporary name and renames it into place, ``trace.json`` last, then
removes the files the new ``trace.json`` does not name: a save killed at any point (or stopped by a full disk)
leaves the folder's previous complete trace. File names under ``images/`` and ``masks/`` carry a hash of their
content (``trace.encode``), so a file already in place is never written twice.

``TraceWriter`` is what a front end holds while a run goes on: ``submit(trace)`` after every round takes a
snapshot (list copies, no encoding) and a background thread encodes and writes it, so a process killed
mid-run loses at most the rounds after the last completed write (normally only the round in flight).
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import threading
import uuid
import zipfile
from pathlib import Path

from ..errors import TraceSaveError, what_went_wrong
from ..types import Trace
from .encode import IMAGE_DIR, MASK_DIR, TRACE_FILE, TraceEncoder

logger = logging.getLogger(__name__)

_TEMP_MARK = ".tmp-"


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary name beside ``path`` and rename it into place (never a half-written file).

    Raises:
        OSError: the file could not be written (the temporary file is removed).
    """
    temp = path.with_name(f".{path.name}{_TEMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        temp.write_bytes(data)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def write_folder(folder: Path, files: dict[str, bytes], present: set[str] | None = None) -> Path:
    """Write a trace's ``files`` (relative path -> bytes, from ``trace.encode``) into ``folder`` as one step.

    Args:
        folder: created if needed; any trace in it is replaced.
        files: must include ``trace.json``.
        present: paths known to be in place already (a writer's earlier saves); they are not written again.

    Returns:
        The path of ``trace.json``.

    Raises:
        TraceSaveError: a file could not be written; the folder keeps its previous complete trace, if any.
    """
    present = present if present is not None else set()
    try:
        for sub in (IMAGE_DIR, MASK_DIR):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        for relative, data in files.items():
            if relative == TRACE_FILE or relative in present:
                continue
            target = folder / relative
            if not (target.is_file() and target.stat().st_size == len(data)):  # content-named: same size, same file
                write_atomic(target, data)
            present.add(relative)
        write_atomic(folder / TRACE_FILE, files[TRACE_FILE])
    except OSError as error:
        raise TraceSaveError(
            f"could not save the trace in {folder}: {error.strerror or error}; free some space or choose another "
            "folder (the folder still holds its previous trace, if any)"
        ) from None
    leftovers = list(folder.glob(f".{TRACE_FILE}{_TEMP_MARK}*"))  # from a save that was killed
    for sub in (IMAGE_DIR, MASK_DIR):  # what the new trace.json does not name: an older trace's files
        leftovers += [p for p in (folder / sub).iterdir() if f"{sub}/{p.name}" not in files]
    for path in leftovers:
        present.discard(f"{path.parent.name}/{path.name}")
        try:
            path.unlink()
        except OSError as error:
            logger.warning("could not remove %s left by an earlier trace: %s", path, error)
    return folder / TRACE_FILE


def zip_files(files: dict[str, bytes], prefix: str = "") -> bytes:
    """A ``.zip`` of a trace's ``files`` (under ``prefix``), in memory; images are stored as they are (a JPEG or a
    PNG does not shrink when deflated again)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for relative, data in files.items():
            method = zipfile.ZIP_STORED if relative.startswith(f"{IMAGE_DIR}/") else zipfile.ZIP_DEFLATED
            archive.writestr(prefix + relative, data, compress_type=method)
    return buffer.getvalue()


def snapshot(trace: Trace) -> Trace:
    """A copy of ``trace`` that the run's further rounds do not change (its lists copied; records are immutable)."""
    return dataclasses.replace(trace, settings=dict(trace.settings), messages=list(trace.messages),
                               rounds=list(trace.rounds), edits=list(trace.edits))


class TraceWriter:
    """Saves a running trace into ``folder`` after every round, on a background thread.

    ``submit`` is cheap and never raises for disk problems; ``flush`` waits for the newest snapshot to be on
    disk and raises ``TraceSaveError`` when its save failed. When several snapshots wait, only the newest is
    written (each one holds everything the earlier ones did).

    Args:
        folder: the trace folder (created; a trace already there is replaced by the first save).
        background: False writes in ``submit`` itself (tests, or a front end with nothing else to do).
    """

    def __init__(self, folder: str | Path, background: bool = True) -> None:
        self.folder = Path(folder)
        self.background = background
        self._encoder = TraceEncoder()
        self._present: set[str] = set()
        self._files: dict[str, bytes] | None = None
        self._pending: Trace | None = None
        self._busy = False
        self._error: TraceSaveError | None = None
        self._closed = False
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def submit(self, trace: Trace) -> None:
        """Save ``trace`` as it is now (later, on the writer's thread)."""
        copy = snapshot(trace)
        if not self.background:
            self._write(copy)
            return
        with self._cond:
            if self._closed:
                raise RuntimeError("this TraceWriter is closed")
            self._pending = copy
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="trace-writer", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def _write(self, trace: Trace) -> None:
        try:
            files = self._encoder.files(trace)
            write_folder(self.folder, files, self._present)
        except TraceSaveError as error:
            logger.error("%s", error)
            self._error = error
        except Exception as error:  # an encoding bug must not kill the run; flush() reports it
            logger.exception("the trace could not be encoded")
            self._error = TraceSaveError(f"the trace could not be saved: {what_went_wrong(error)}")
        else:
            self._files = files
            self._error = None

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._closed:
                    self._cond.wait()
                if self._pending is None:
                    return
                trace, self._pending = self._pending, None
                self._busy = True
            try:
                self._write(trace)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def flush(self) -> Path:
        """Wait until the newest snapshot is written; returns the path of ``trace.json``.

        Raises:
            TraceSaveError: the newest save failed, or nothing was ever saved.
        """
        with self._cond:
            while self._pending is not None or self._busy:
                self._cond.wait()
        if self._error is not None:
            raise self._error
        if self._files is None:
            raise TraceSaveError(f"no trace was saved in {self.folder}")
        return self.folder / TRACE_FILE

    def files(self) -> dict[str, bytes]:
        """The files of the newest saved snapshot (after ``flush``)."""
        self.flush()
        return dict(self._files or {})

    def close(self, wait: bool = True) -> Path | None:
        """Stop the thread once what was submitted is written.

        Args:
            wait: True waits like ``flush`` (and raises ``TraceSaveError`` like it); False returns at once (the
                thread finishes the pending write by itself) and returns ``None``.
        """
        try:
            return self.flush() if wait else None
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
