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

Views (numbered overlays, single-mask and zoom views) are stored as recipes (``render.MaskView``: which
mask set, which mask) and rendered again, identically, when an image is read after loading; traces record
``render.RENDERER_VERSION``. Version-1 traces (every image a PNG, masks inline) load through ``trace_v1``;
saving them again writes version 2 and keeps their images as stored files.

Hand corrections (``Trace.edits``) are stored under ``"edits"`` in their JSON form (``edits.op_to_json``).
Image and file names are checked against strict patterns on load, so a hand-edited file cannot point outside
its folder.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

from .errors import TraceFormatError
from .trace_decode import read_mask_set, trace_from_json
from .trace_encode import IMAGE_DIR, MASK_DIR, TRACE_FILE, TraceEncoder, trace_files
from .trace_writer import TraceWriter, write_folder, zip_files
from .types import Trace

__all__ = [
    "IMAGE_DIR", "MASK_DIR", "MAX_ZIP_BYTES", "MAX_ZIP_MEMBERS", "TRACE_FILE", "TraceEncoder", "TraceWriter",
    "load_trace", "load_trace_zip", "open_zip", "read_mask_set", "save_trace", "trace_files", "trace_from_json",
    "trace_to_zip_bytes", "zip_files",
]

MAX_ZIP_BYTES = 200 * 1024 * 1024  # a trace of 30 rounds with 1000 px images is a few tens of MB
MAX_ZIP_MEMBERS = 5000


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


def load_trace(path: str | Path) -> Trace:
    """Load a trace from a folder, its ``trace.json``, or a ``.zip`` made by ``trace_to_zip_bytes``.

    Raises:
        TraceFormatError: the file is missing, not a trace, malformed, or too large.
    """
    path = Path(path)
    if path.is_dir():
        path = path / TRACE_FILE
    if not path.exists():
        raise TraceFormatError(f"no trace at {path}")
    if path.suffix.lower() == ".zip":
        if path.stat().st_size > MAX_ZIP_BYTES:
            raise TraceFormatError(f"{path} is larger than {MAX_ZIP_BYTES // (1024 * 1024)} MB")
        return load_trace_zip(path.read_bytes())
    folder = path.parent
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise TraceFormatError(f"{path} is not a readable trace JSON file: {error}") from None
    return trace_from_json(document, lambda relative: (folder / relative).read_bytes())


def open_zip(data: bytes, max_bytes: int, what: str) -> zipfile.ZipFile:
    """Open the bytes of a ``.zip`` we wrote, refusing empty, oversized or zip-bomb files.

    Args:
        what: how the file is named in messages, e.g. ``"trace"`` or ``"bundle"``.

    Raises:
        TraceFormatError: empty, larger than ``max_bytes`` (packed or unpacked), too many members, not a zip.
    """
    if not data:
        raise TraceFormatError(f"the {what} file is empty")
    if len(data) > max_bytes:
        raise TraceFormatError(f"the {what} file is larger than {max_bytes // (1024 * 1024)} MB")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise TraceFormatError(f"the file is not a .zip {what} (saved by SAM3 Agent)") from None
    members = archive.infolist()
    if len(members) > MAX_ZIP_MEMBERS or sum(m.file_size for m in members) > max_bytes:
        archive.close()
        raise TraceFormatError(f"the {what} .zip is too large once unpacked")
    return archive


def load_trace_zip(data: bytes, max_bytes: int = MAX_ZIP_BYTES) -> Trace:
    """Load a trace from the bytes of a ``.zip`` made by ``trace_to_zip_bytes``.

    Raises:
        TraceFormatError: empty, oversized (compressed or uncompressed), not a zip, or not a trace.
    """
    with open_zip(data, max_bytes, "trace") as archive:
        names = {m.filename for m in archive.infolist()}
        if TRACE_FILE not in names:
            raise TraceFormatError(f"the .zip has no {TRACE_FILE}: it is not a trace saved by SAM3 Agent")
        try:
            document = json.loads(archive.read(TRACE_FILE).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise TraceFormatError(f"{TRACE_FILE} in the .zip is not valid JSON: {error}") from None
        return trace_from_json(document, archive.read)
