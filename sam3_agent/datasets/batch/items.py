"""What a batch runs: items of (image path, query, id) and video items of (clip, query, id, keyframe), read from a
JSONL file or a folder.

JSONL (one JSON object per line; blank lines are skipped; read by ``jsonl.read_jsonl``, which names every bad line
at once)::

    {"image": "photos/coffee.jpg", "query": "the spoon", "id": "coffee-spoon"}
    {"image": "/data/cat.png", "query": "the cat's left ear"}
    {"video": "clips/yard.mp4", "query": "every dog that enters the yard", "keyframe": 12}
    {"video": "clips/match.mov", "query": "the player who scores", "keyframe_time": 3.5}

``image`` is a path of a photo, ``video`` one of a clip (a video file, a folder of frames or a ``.zip`` of frames,
as ``video --video`` takes it); relative paths resolve against the JSONL file's folder. A video item may name the
frame the agent reasons on by index (``keyframe``, 0-based) or by time (``keyframe_time``, seconds); the default is
the first frame. ``id`` is optional (a string or an integer). An item without an id gets ``<file stem>-<8 hex digits
of sha256(path, query[, keyframe])>``: stable when lines are reordered or added, which is what makes a rerun skip
the items already finished.

A folder: every image file (``IMAGE_SUFFIXES``) and every video file (``VIDEO_SUFFIXES``) directly inside it (not in
sub-folders), in name order, all with the one query given; the id of each is its file name (``coffee.jpg``), a
clip's keyframe its first frame. Hidden and system files (``._coffee.jpg`` from a Mac, ``Thumbs.db``...:
``hidden_files``) are skipped and counted in a log line.

Reading items opens no clip: ``clip_checks.check_clips`` opens each one within its caps before any model loads.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ...errors import InputError
from ...messages import checked_query
from .hidden_files import is_hidden_file, without_hidden_files
from .jsonl import read_jsonl

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff", ".gif", ".heic", ".heif", ".avif")
# the containers video.video_file lets FFmpeg open (its FORMATS: mp4/mov/m4v, mkv/webm, avi)
VIDEO_SUFFIXES = (".mp4", ".m4v", ".mov", ".webm", ".mkv", ".avi")
MAX_ID_CHARS = 200
_SAFE_FOLDER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class BatchItem:
    """One unit of a batch: one query on one image.

    Attributes:
        id: unique within the batch; names the item's output folder (see :func:`folder_names`).
        image: path of the image file (absolute, or relative to the current folder).
        query: what to segment.
        image_ref: the image path as the input gave it (recorded in COCO ``file_name`` and the manifest).
    """

    id: str
    image: Path
    query: str
    image_ref: str = ""
    kind: ClassVar[str] = "image"

    def __post_init__(self) -> None:
        if not self.image_ref:
            object.__setattr__(self, "image_ref", str(self.image))

    @property
    def ref(self) -> str:
        """The input file as the input gave it (``image_ref``)."""
        return self.image_ref


@dataclass(frozen=True)
class VideoItem:
    """One unit of a batch over a clip: the agent reasons on a keyframe, SAM 3 tracks what it chose (``video.run``).

    Attributes:
        id: unique within the batch; names the item's output folder (see :func:`folder_names`).
        video: path of the clip: a video file, a folder of frames or a ``.zip`` of frames.
        query: what to segment.
        video_ref: the clip's path as the input gave it (recorded in the manifest).
        keyframe: the frame the agent reasons on, 0-based, or ``None``.
        keyframe_time: or the frame shown at this many seconds, or ``None`` (both ``None``: the first frame).
    """

    id: str
    video: Path
    query: str
    video_ref: str = ""
    keyframe: int | None = None
    keyframe_time: float | None = None
    kind: ClassVar[str] = "video"

    def __post_init__(self) -> None:
        if not self.video_ref:
            object.__setattr__(self, "video_ref", str(self.video))

    @property
    def ref(self) -> str:
        """The input file as the input gave it (``video_ref``)."""
        return self.video_ref


Item = BatchItem | VideoItem


def derived_id(ref: str, query: str, extra: str = "") -> str:
    """The id of an item given without one: ``<file stem>-<first 8 hex digits of sha256(ref, query, extra)>``
    (``extra``: a video item's keyframe as given, so one clip with one query on two keyframes is two items)."""
    digest = hashlib.sha256(f"{ref}\n{query}{extra}".encode()).hexdigest()[:8]
    stem = _UNSAFE_CHARS.sub("_", Path(ref).stem).strip("._-")[:60] or "item"
    return f"{stem}-{digest}"


def read_items(source: str | Path, query: str | None = None) -> list[Item]:
    """The items of a batch from a JSONL file or a folder of images and clips.

    Args:
        source: a ``.jsonl`` file (see the module docstring) or a folder of images and/or video files.
        query: the query for every file of a folder; must be ``None`` for a JSONL file (each line has its own).

    Returns:
        the items in input order (``BatchItem`` for a photo, ``VideoItem`` for a clip).

    Raises:
        InputError: the source is missing; a JSONL line is not a JSON object, lacks ``image`` (or ``video``) or
            ``query``, gives both, has an empty or overlong query, a bad keyframe, or repeats an id (one message names
            every such line); a folder without images or clips, or without ``query``; ``query`` given with a JSONL
            file.
    """
    path = Path(source)
    if not path.exists():
        raise InputError(f"{path} does not exist: give a .jsonl file of items or a folder of images or clips")
    if path.is_dir():
        if query is None or not query.strip():
            raise InputError(f"{path} is a folder of images or clips: give the query for all of them with --query")
        return _folder_items(path, query.strip())
    if query is not None:
        raise InputError(f"{path} is a JSONL file: each line has its own query, so leave out --query")
    return _jsonl_items(path)


def _folder_items(folder: Path, query: str) -> list[Item]:
    _check_query(query, f"--query for {folder}")
    suffixes = IMAGE_SUFFIXES + VIDEO_SUFFIXES
    entries = sorted(p for p in folder.iterdir() if p.suffix.lower() in suffixes or is_hidden_file(p.name))
    files = [p for p in without_hidden_files(entries, folder) if p.is_file()]
    if not files:
        raise InputError(f"{folder} holds no image files ({', '.join(IMAGE_SUFFIXES)}) and no video files "
                         f"({', '.join(VIDEO_SUFFIXES)}); choose another folder")
    return [VideoItem(p.name, p, query, p.name) if p.suffix.lower() in VIDEO_SUFFIXES else
            BatchItem(p.name, p, query, p.name) for p in files]


def _jsonl_items(path: Path) -> list[Item]:
    return read_jsonl(path, lambda data, where: item_from_json(data, path.parent, where),
                      '"image" (or "video") and "query"')


def item_from_json(data: Any, base: Path, where: str) -> Item:
    """One item from a decoded JSONL object: a ``VideoItem`` when it has ``video``, else a ``BatchItem``; relative
    paths resolve against ``base``.

    Raises:
        InputError: not an object, missing or empty ``image``/``video``/``query``, both ``image`` and ``video``, an
            overlong query, a bad ``id``, a keyframe on a photo or a bad one (see ``_keyframe``).
    """
    if not isinstance(data, dict):
        raise InputError(f"{where}: expected a JSON object with \"image\" (or \"video\") and \"query\"")
    if "video" in data:
        return _video_item(data, base, where)
    image_ref, query = data.get("image"), data.get("query")
    if not isinstance(image_ref, str) or not image_ref.strip():
        raise InputError(f"{where}: \"image\" must be the path of an image file (or \"video\" that of a clip)")
    for key in ("keyframe", "keyframe_time"):
        if key in data:
            raise InputError(f"{where}: \"{key}\" is for a clip: give \"video\" instead of \"image\", or leave it "
                             "out")
    query = _query(data, where)
    item_id = _item_id(data.get("id"), where, image_ref, query)
    image = Path(image_ref)
    return BatchItem(item_id, image if image.is_absolute() else base / image, query, image_ref)


def _video_item(data: dict[str, Any], base: Path, where: str) -> VideoItem:
    if "image" in data:
        raise InputError(f"{where}: give \"image\" (a photo) or \"video\" (a clip), not both")
    video_ref = data["video"]
    if not isinstance(video_ref, str) or not video_ref.strip():
        raise InputError(f"{where}: \"video\" must be the path of a clip (a video file, a folder or a .zip of "
                         "frames)")
    query = _query(data, where)
    keyframe, keyframe_time = _keyframe(data, where)
    given = "" if keyframe is None and keyframe_time is None else (
        f"\nkeyframe={keyframe}" if keyframe is not None else f"\nkeyframe_time={keyframe_time!r}")
    item_id = _item_id(data.get("id"), where, video_ref, query, given)
    video = Path(video_ref)
    return VideoItem(item_id, video if video.is_absolute() else base / video, query, video_ref, keyframe,
                     keyframe_time)


def _keyframe(data: dict[str, Any], where: str) -> tuple[int | None, float | None]:
    """A video line's ``keyframe`` (a frame index >= 0) or ``keyframe_time`` (seconds >= 0), at most one of them.

    Raises:
        InputError: both given, or a value that is not a whole number (index) or a finite number (time) >= 0.
    """
    keyframe, seconds = data.get("keyframe"), data.get("keyframe_time")
    if keyframe is not None and seconds is not None:
        raise InputError(f"{where}: give \"keyframe\" (a frame index) or \"keyframe_time\" (seconds), not both")
    if keyframe is not None and (isinstance(keyframe, bool) or not isinstance(keyframe, int) or keyframe < 0):
        raise InputError(f"{where}: \"keyframe\" must be a frame index, a whole number from 0, got {keyframe!r:.40}")
    if seconds is not None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) \
                or seconds < 0:
            raise InputError(f"{where}: \"keyframe_time\" must be a number of seconds from 0, got {seconds!r:.40}")
        seconds = float(seconds)
    return keyframe, seconds


def _query(data: dict[str, Any], where: str) -> str:
    query = data.get("query")
    if not isinstance(query, str):
        raise InputError(f"{where}: \"query\" must be a string saying what to segment")
    query = query.strip()
    _check_query(query, where)
    return query


def _item_id(raw_id: Any, where: str, ref: str, query: str, extra: str = "") -> str:
    if raw_id is None:
        item_id = derived_id(ref, query, extra)
    elif isinstance(raw_id, (str, int)) and not isinstance(raw_id, bool) and str(raw_id).strip():
        item_id = str(raw_id).strip()
        if len(item_id) > MAX_ID_CHARS or not item_id.isprintable():
            raise InputError(f"{where}: \"id\" must be printable and at most {MAX_ID_CHARS} characters")
    else:
        raise InputError(f"{where}: \"id\" must be a non-empty string or an integer")
    return item_id


def _check_query(query: str, where: str) -> None:
    """The run's own query check (``messages.checked_query``), made before any model loads and naming the line."""
    try:
        checked_query(query)
    except InputError as error:
        raise InputError(f"{where}: {error}") from None


def folder_names(ids: Iterable[str]) -> dict[str, str]:
    """The output folder name of each id: the id itself when it is a safe name (letters, digits, ``.``, ``_``,
    ``-``; 100 characters at most; starting with a letter or digit) and no other id has the same name
    ignoring case (case-insensitive file systems); else a cleaned prefix of it plus ``-`` and 8 hex digits of
    its sha256. Names are never built from model text, only from the input's ids."""
    ids = list(ids)
    lowered: dict[str, int] = {}
    for item_id in ids:
        lowered[item_id.lower()] = lowered.get(item_id.lower(), 0) + 1
    names = {}
    for item_id in ids:
        if _SAFE_FOLDER.match(item_id) and lowered[item_id.lower()] == 1:
            names[item_id] = item_id
        else:
            prefix = _UNSAFE_CHARS.sub("_", item_id).strip("._-")[:60] or "item"
            names[item_id] = f"{prefix}-{hashlib.sha256(item_id.encode('utf-8')).hexdigest()[:8]}"
    return names
