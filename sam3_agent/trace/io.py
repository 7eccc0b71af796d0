"""Saving and loading a self-contained trace: a folder (or one ``.zip``) that stores what cannot be derived.

Layout (schema version 2)::

    trace.json               schema_version, renderer_version, query, settings, status, messages, rounds,
                             references to the files below, edits
    images/photo-<h>.<ext>   the photo: the file exactly as the user gave it when it decodes to the run's
                             image (a JPEG stays a JPEG), else a lossless PNG
    masks/<h>.json           one file per mask set: size, phrase, scores, boxes and each mask's COCO RLE;
                             a set that only picks masks of an earlier set names that set and the indices
    images/<name>-<h>.png    only images that cannot be rendered again (e.g. from a version-1 trace)

``<h>`` is a hash of the file's content, so a file name never changes meaning: a save into a folder that
holds an older trace writes its new files beside the old ones (under temporary names, renamed into place),
replaces ``trace.json`` last, then removes what the new ``trace.json`` does not name. A save killed half-way
leaves the older trace whole.

Views (numbered overlays, single-mask and zoom views) are stored as recipes (``imaging.views.MaskView``: which
mask set, which mask) and rendered again, identically, when an image is read after loading; traces record
``imaging.views.RENDERER_VERSION``. Version-1 traces (every image a PNG, masks inline) load through ``schema_v1``;
saving them again writes version 2 and keeps their images as stored files.

Hand corrections (``Trace.edits``) are stored under ``"edits"`` in their JSON form (``edits.op_to_json``).
Image and file names are checked against strict patterns on load, so a hand-edited file cannot point outside
its folder. Every load reads through ``trace.safe_read`` (bounded folder and ``.zip`` reads, images checked on their
header, every mask set checked against the photo's size before use), whatever the schema version.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import TraceFormatError
from ..types import Trace
from .decode import read_mask_set, trace_from_json
from .encode import IMAGE_DIR, MASK_DIR, TRACE_FILE, TraceEncoder, trace_files
from .file_kind import BUNDLE_ZIP, ZIP, path_kind, zip_kind
from .load_limits import COMMAND_LINE_LIMITS, LoadLimits
from .safe_read import MAX_ZIP_BYTES, FolderFiles, ZipFiles, read_json, reading, regular_file
from .writer import TraceWriter, write_folder, zip_files

__all__ = [
    "IMAGE_DIR", "MASK_DIR", "MAX_ZIP_BYTES", "TRACE_FILE", "LoadLimits", "TraceEncoder", "TraceWriter", "load_trace",
    "load_trace_zip", "read_mask_set", "save_trace", "trace_files", "trace_from_json", "trace_from_zip_files",
    "trace_to_zip_bytes", "zip_files",
]


def trace_to_zip_bytes(trace: Trace) -> bytes:
    """The trace as one ``.zip`` (the folder layout of ``save_trace``), in memory.

    Raises:
        ValueError: two different images share a name, or a name is not a safe file stem.
    """
    return zip_files(trace_files(trace))


def save_trace(trace: Trace, folder: str | Path) -> Path:
    """Write the trace into ``folder`` (created if needed), replacing any trace there as one step; returns the
    path of ``trace.json``.

    Raises:
        TraceSaveError: the files could not be written (the folder keeps the previous complete trace, if any).
        ValueError: two different images share a name, or a name is not a safe file stem.
    """
    return write_folder(Path(folder), trace_files(trace))


def load_trace(path: str | Path, limits: LoadLimits = COMMAND_LINE_LIMITS) -> Trace:
    """Load a trace (not a bundle) from a folder, its ``trace.json``, or a ``.zip`` made by ``trace_to_zip_bytes``,
    within ``limits`` (``trace.load_limits``: the photo's pixel cap and what the load may hold; by default what the
    command line makes). The public ``sam3_agent.load_trace`` (``correct.saved``) also reads bundles.

    Raises:
        TraceFormatError: the file is missing, not a trace (``file_kind``), malformed, too large or unsafe
            (``trace.safe_read``).
    """
    with reading(f"the trace {str(path)!r}"):
        kind, path = path_kind(path)
        path = regular_file(path, "the trace")
        if kind == ZIP:
            return load_trace_zip(path, limits=limits)
        files = FolderFiles(path.parent, f"the trace folder {str(path.parent)!r}")
        return trace_from_json(read_json(files, path.name, "the trace folder"), files.read, limits)


def load_trace_zip(data: bytes | str | Path, max_bytes: int = MAX_ZIP_BYTES, limits: LoadLimits = COMMAND_LINE_LIMITS) -> Trace:
    """Load a trace from a ``.zip`` made by ``trace_to_zip_bytes`` (its bytes or its path), within ``limits``. A bundle
    is refused here: ``sam3_agent.load_trace_zip`` (``correct.saved``) reads both.

    Raises:
        TraceFormatError: empty, oversized (compressed or uncompressed), not a zip or cut short, unsafe, a bundle, or
            not a trace.
    """
    with reading("the trace .zip"), ZipFiles(data, "the trace .zip", max_bytes) as files:
        if zip_kind(files) == BUNDLE_ZIP:
            raise TraceFormatError("the .zip is a bundle, not a trace: load it with sam3_agent.load_trace_zip, "
                                   "which reads both")
        return trace_from_zip_files(files, limits)


def trace_from_zip_files(files: ZipFiles, limits: LoadLimits = COMMAND_LINE_LIMITS) -> Trace:
    """The trace in an opened trace ``.zip`` (``trace.json`` at its top), within ``limits``.

    Raises:
        TraceFormatError: no ``trace.json``, or a malformed, too large or unsafe trace.
    """
    try:
        document = read_json(files, TRACE_FILE, "the .zip")
    except KeyError:
        raise TraceFormatError(f"the .zip has no {TRACE_FILE}: it is not a trace saved by SAM3 Agent") from None
    return trace_from_json(document, files.read, limits)
