"""Saving and loading a video trace: a folder (or one ``.zip``) holding what cannot be derived.

Layout (video schema 1)::

    video_trace.json           kind, schema_version, query, clip (``ClipInfo``), settings, status, error, times,
                               timings, keyframes (frame, folder, mask number -> object id), objects (id, label and
                               every frame's mask: [frame, RLE counts, score, source]), edits, newcomer checks
    keyframes/<frame>/         each keyframe's run, an image trace folder (``trace.io``): it opens on its own too

The clip itself is not stored (it may be large): its identity is (file name, bytes, sha256), so a person can tell
whether a clip they give back is the one; showing, inspecting and exporting need only the masks and the keyframes
(an overlay video needs the clip's frames). Keyframe folders are written first, each as one step (``save_trace``),
then ``video_trace.json`` last, under a temporary name renamed into place: a save killed half-way leaves the last
complete ``video_trace.json``. Loading reads through ``trace.safe_read`` (bounded folder and ``.zip`` reads) and
checks every mask against the clip's frame size before use.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import rle
from ..errors import TraceFormatError
from ..trace.decode import trace_from_json
from ..trace.encode import TRACE_FILE, trace_files
from ..trace.load_limits import COMMAND_LINE_LIMITS, LoadLimits
from ..trace.safe_read import MAX_ZIP_BYTES, FolderFiles, TraceFiles, ZipFiles, read_json, reading, starts_like_zip
from ..trace.writer import write_atomic, write_folder, zip_files
from .clip_info import ClipInfo
from .records import VIDEO_SCHEMA_VERSION, KeyframeRun, NewcomerCheck, VideoEdit, VideoTrace
from .tracks import FIXED_SOURCES, FrameMask, TrackedObject, Tracks

VIDEO_TRACE_FILE = "video_trace.json"
KEYFRAME_DIR = "keyframes"
KIND = "sam3_agent.video_trace"
SOURCES = (*FIXED_SOURCES, "tracker")


def keyframe_folder(frame: int) -> str:
    """The keyframe's folder inside a saved video trace (``keyframes/00012``)."""
    return f"{KEYFRAME_DIR}/{frame:05d}"


# ---------------------------------------------------------------- writing


def video_trace_files(trace: VideoTrace) -> dict[str, bytes]:
    """Every file of a saved video trace (relative path -> bytes, ``video_trace.json`` last)."""
    files: dict[str, bytes] = {}
    for run in trace.keyframes:
        folder = keyframe_folder(run.frame_index)
        files.update({f"{folder}/{name}": data for name, data in trace_files(run.trace).items()})
    files[VIDEO_TRACE_FILE] = json.dumps(video_trace_json(trace), separators=(",", ":")).encode()
    return files


def save_video_trace(trace: VideoTrace, folder: str | Path) -> Path:
    """Write ``trace`` into ``folder`` (created if needed); returns the path of ``video_trace.json``.

    Raises:
        TraceSaveError: a file could not be written (the folder keeps the last complete ``video_trace.json``).
    """
    folder = Path(folder)
    for run in trace.keyframes:
        write_folder(folder / keyframe_folder(run.frame_index), trace_files(run.trace))
    target = folder / VIDEO_TRACE_FILE
    write_atomic(target, json.dumps(video_trace_json(trace), separators=(",", ":")).encode())
    return target


def video_trace_zip_bytes(trace: VideoTrace) -> bytes:
    """The video trace as one ``.zip`` (the folder layout), in memory."""
    return zip_files(video_trace_files(trace))


def video_trace_json(trace: VideoTrace) -> dict[str, Any]:
    """The JSON document ``video_trace.json`` holds (JSON-compatible; masks as RLE text)."""
    tracks = trace.tracks
    return {
        "kind": KIND,
        "schema_version": VIDEO_SCHEMA_VERSION,
        "query": trace.query,
        "clip": trace.clip.to_json(),
        "settings": trace.settings,
        "status": trace.status,
        "error": trace.error,
        "started_at": trace.started_at,
        "finished_at": trace.finished_at,
        "timings": trace.timings,
        "keyframes": [{"frame_index": run.frame_index, "folder": keyframe_folder(run.frame_index),
                       "objects": [list(pair) for pair in run.objects]} for run in trace.keyframes],
        "objects": [_object_json(tracks.objects[i]) for i in tracks.object_ids()],
        "edits": [_edit_json(edit) for edit in trace.edits],
        "checks": [_check_json(check) for check in trace.checks],
    }


def _masks_json(masks: dict[int, FrameMask | None]) -> list[list[Any]]:
    return [[frame, None, None, None] if m is None else [frame, rle.text(m.counts), m.score, m.source]
            for frame, m in sorted(masks.items())]


def _object_json(obj: TrackedObject) -> dict[str, Any]:
    return {"id": obj.object_id, "label": obj.label, "frames": _masks_json(obj.masks)}  # type: ignore[arg-type]


def _edit_json(edit: VideoEdit) -> dict[str, Any]:
    return {
        "kind": edit.kind, "object_id": edit.object_id, "frame_index": edit.frame_index, "prompt": edit.prompt,
        "points": [list(p) for p in edit.points], "labels": list(edit.labels),
        "box": list(edit.box) if edit.box is not None else None,
        "counts": rle.text(edit.counts) if edit.counts is not None else None,
        "spans": [list(s) for s in edit.spans], "tracked": edit.tracked,
        "before": [{"object_id": oid, "frames": _masks_json(frames)} for oid, frames in sorted(edit.before.items())],
        "removed": _object_json(edit.removed) if edit.removed is not None else None,
        "at": edit.at,
    }


def _check_json(check: NewcomerCheck) -> dict[str, Any]:
    return {
        "frame_index": check.frame_index, "phrase": check.phrase, "counts": rle.text(check.counts),
        "score": check.score, "verdict": check.verdict, "verdict_source": check.verdict_source,
        "outputs": list(check.outputs), "outcome": check.outcome, "object_id": check.object_id,
        "seconds": check.seconds,
    }


# ---------------------------------------------------------------- reading


def is_video_trace(path: str | Path) -> bool:
    """Whether ``path`` is a saved video trace: a folder holding ``video_trace.json``, that file, or a ``.zip``
    holding it at its top (a cut-short ``.zip`` is not)."""
    path = Path(path)
    if path.is_dir():
        return (path / VIDEO_TRACE_FILE).is_file()
    if path.name == VIDEO_TRACE_FILE:
        return path.is_file()
    if path.is_file() and starts_like_zip(path):
        try:
            with ZipFiles(path, "the .zip") as files:
                return VIDEO_TRACE_FILE in files.names()
        except TraceFormatError:
            return False
    return False


def load_video_trace(path: str | Path, limits: LoadLimits = COMMAND_LINE_LIMITS,
                     max_bytes: int = MAX_ZIP_BYTES) -> VideoTrace:
    """Load a video trace from its folder, its ``video_trace.json`` or a ``.zip`` of the folder.

    Raises:
        TraceFormatError: missing, not a video trace, malformed, too large or unsafe (the message says which).
    """
    path = Path(path)
    with reading(f"the video trace {str(path)!r}"):
        if path.is_dir() or path.name == VIDEO_TRACE_FILE:
            folder = path if path.is_dir() else path.parent
            if not (folder / VIDEO_TRACE_FILE).is_file():
                raise TraceFormatError(f"{str(folder)!r} holds no {VIDEO_TRACE_FILE}: it is not a saved video trace; "
                                       "give the folder a video run wrote (its --out) or its .zip")
            return video_trace_from_files(FolderFiles(folder, f"the video trace folder {str(folder)!r}"), limits)
        if not path.exists():
            raise TraceFormatError(f"{str(path)!r} does not exist; check the path")
        return load_video_trace_zip(path, max_bytes, limits)


def load_video_trace_zip(data: bytes | str | Path, max_bytes: int = MAX_ZIP_BYTES,
                         limits: LoadLimits = COMMAND_LINE_LIMITS) -> VideoTrace:
    """Load a video trace from a ``.zip`` made by ``video_trace_zip_bytes`` (its bytes or its path).

    Raises:
        TraceFormatError: not a zip, cut short, oversized, unsafe, or not a video trace.
    """
    with reading("the video trace .zip"), ZipFiles(data, "the video trace .zip", max_bytes) as files:
        if VIDEO_TRACE_FILE not in files.names():
            raise TraceFormatError(f"the .zip holds no {VIDEO_TRACE_FILE}: it is not a saved video trace (a photo's "
                                   "trace opens in the image tabs)")
        return video_trace_from_files(files, limits)


def video_trace_from_files(files: TraceFiles, limits: LoadLimits = COMMAND_LINE_LIMITS) -> VideoTrace:
    """The video trace in ``files`` (a folder's or a ``.zip``'s, ``video_trace.json`` at the top).

    Raises:
        TraceFormatError: malformed or unsafe content.
    """
    document = read_json(files, VIDEO_TRACE_FILE, "the video trace")
    if not isinstance(document, dict) or document.get("kind") != KIND:
        raise TraceFormatError(f"{VIDEO_TRACE_FILE} is not a SAM3 Agent video trace (no 'kind': {KIND!r})")
    version = document.get("schema_version")
    if version != VIDEO_SCHEMA_VERSION:
        raise TraceFormatError(f"this video trace has schema version {version!r}; this version of SAM3 Agent reads "
                               f"version {VIDEO_SCHEMA_VERSION}: open it with the version that saved it")
    try:
        return _from_json(document, files, limits)
    except TraceFormatError:
        raise
    except (KeyError, TypeError, ValueError, IndexError) as error:
        raise TraceFormatError(f"{VIDEO_TRACE_FILE} is malformed ({_what(error)}); it was not written by SAM3 Agent "
                               "or was changed by hand") from None


def _what(error: BaseException) -> str:
    if isinstance(error, KeyError):
        return f"the field {error.args[0]!r} is missing"
    return str(error) or "a value has the wrong type"


def _from_json(doc: dict[str, Any], files: TraceFiles, limits: LoadLimits) -> VideoTrace:
    clip = ClipInfo.from_json(doc["clip"])
    tracks = Tracks(clip.frame_count, clip.height, clip.width)
    for entry in doc["objects"]:
        obj = _object_from_json(entry, tracks)
        tracks.restore_object(obj)
    keyframes = []
    for entry in doc["keyframes"]:
        frame = _frame(entry["frame_index"], tracks)
        folder = keyframe_folder(frame)
        read = _prefixed(files, folder)
        image_trace = trace_from_json(read_json(files, f"{folder}/{TRACE_FILE}", "the video trace"), read, limits)
        objects = tuple((int(n), int(o)) for n, o in entry["objects"])
        keyframes.append(KeyframeRun(frame_index=frame, trace=image_trace, objects=objects))
    return VideoTrace(
        query=str(doc["query"]), clip=clip, tracks=tracks, settings=dict(doc["settings"]), keyframes=keyframes,
        edits=[_edit_from_json(e, tracks) for e in doc["edits"]],
        checks=[_check_from_json(c, tracks) for c in doc["checks"]],
        status=_choice(doc["status"], ("running", "done", "no_mask", "max_rounds", "failed", "cancelled"), "status"),
        error=doc["error"], started_at=float(doc["started_at"]),
        finished_at=None if doc["finished_at"] is None else float(doc["finished_at"]),
        timings={str(k): float(v) for k, v in dict(doc["timings"]).items()},
    )


def _prefixed(files: TraceFiles, folder: str) -> Callable[[str], bytes]:
    return lambda name: files.read(f"{folder}/{name}")


def _choice(value: Any, allowed: tuple[str, ...], what: str) -> Any:
    if value not in allowed:
        raise TraceFormatError(f"{VIDEO_TRACE_FILE} has an unknown {what} {value!r} (known: {', '.join(allowed)})")
    return value


def _frame(value: Any, tracks: Tracks) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < tracks.frame_count:
        raise TraceFormatError(f"{VIDEO_TRACE_FILE} names frame {value!r}, outside the clip's "
                               f"{tracks.frame_count} frames")
    return value


def _counts(value: Any, tracks: Tracks, what: str) -> bytes:
    if not isinstance(value, str):
        raise TraceFormatError(f"{VIDEO_TRACE_FILE}: {what} has no RLE counts")
    rle.check_rle({"size": [tracks.height, tracks.width], "counts": value}, tracks.height, tracks.width, what)
    return value.encode("ascii")


def _masks_from_json(rows: Any, tracks: Tracks, what: str) -> dict[int, FrameMask | None]:
    masks: dict[int, FrameMask | None] = {}
    for frame, counts, score, source in rows:
        frame = _frame(frame, tracks)
        if counts is None:
            masks[frame] = None
            continue
        masks[frame] = FrameMask(_counts(counts, tracks, f"{what}, frame {frame}"), float(score),
                                 _choice(source, SOURCES, "mask source"))
    return masks


def _object_from_json(entry: Any, tracks: Tracks) -> TrackedObject:
    object_id = int(entry["id"])
    masks = _masks_from_json(entry["frames"], tracks, f"object {object_id}")
    return TrackedObject(object_id, str(entry["label"]), {f: m for f, m in masks.items() if m is not None})


def _edit_from_json(entry: Any, tracks: Tracks) -> VideoEdit:
    before = {int(b["object_id"]): _masks_from_json(b["frames"], tracks, "an edit's earlier masks")
              for b in entry["before"]}
    return VideoEdit(
        kind=_choice(entry["kind"], ("replace", "add", "remove"), "edit kind"), object_id=int(entry["object_id"]),
        frame_index=None if entry["frame_index"] is None else _frame(entry["frame_index"], tracks),
        prompt=None if entry["prompt"] is None else _choice(entry["prompt"], ("points", "box", "mask"), "prompt"),
        points=tuple((float(x), float(y)) for x, y in entry["points"]),
        labels=tuple(int(v) for v in entry["labels"]),
        box=None if entry["box"] is None else tuple(float(v) for v in entry["box"]),  # type: ignore[arg-type]
        counts=None if entry["counts"] is None else _counts(entry["counts"], tracks, "an edit's mask"),
        spans=tuple((_frame(a, tracks), _frame(b, tracks)) for a, b in entry["spans"]),
        tracked=int(entry["tracked"]), before=before,
        removed=None if entry["removed"] is None else _object_from_json(entry["removed"], tracks),
        at=float(entry["at"]),
    )


def _check_from_json(entry: Any, tracks: Tracks) -> NewcomerCheck:
    return NewcomerCheck(
        frame_index=_frame(entry["frame_index"], tracks), phrase=str(entry["phrase"]),
        counts=_counts(entry["counts"], tracks, "a newcomer check's mask"), score=float(entry["score"]),
        verdict=entry["verdict"], verdict_source=entry["verdict_source"],
        outputs=tuple(str(o) for o in entry["outputs"]),
        outcome=_choice(entry["outcome"], ("accepted", "rejected", "unconfirmed"), "check outcome"),
        object_id=None if entry["object_id"] is None else int(entry["object_id"]), seconds=float(entry["seconds"]),
    )
