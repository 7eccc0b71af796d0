"""What a batch runs: items of (image path, query, id), read from a JSONL file or a folder of images.

JSONL (one JSON object per line; blank lines are skipped; read by ``jsonl.read_jsonl``, which names every bad line
at once)::

    {"image": "photos/coffee.jpg", "query": "the spoon", "id": "coffee-spoon"}
    {"image": "/data/cat.png", "query": "the cat's left ear"}

``image`` is a path, relative paths resolving against the JSONL file's folder; ``id`` is optional (a string
or an integer). An item without an id gets ``<file stem>-<8 hex digits of sha256(image, query)>``: stable when
lines are reordered or added, which is what makes a rerun skip the items already finished.

A folder: every image file directly inside it (not in sub-folders; extensions ``IMAGE_SUFFIXES``), in name
order, all with the one query given; the id of each is its file name (``coffee.jpg``). Hidden and system files
(``._coffee.jpg`` from a Mac, ``Thumbs.db``...: ``hidden_files``) are skipped and counted in a log line.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import InputError
from ...messages import checked_query
from .hidden_files import is_hidden_file, without_hidden_files
from .jsonl import read_jsonl

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff", ".gif", ".heic", ".heif", ".avif")
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

    def __post_init__(self) -> None:
        if not self.image_ref:
            object.__setattr__(self, "image_ref", str(self.image))


def derived_id(image_ref: str, query: str) -> str:
    """The id of an item given without one: ``<file stem>-<first 8 hex digits of sha256(image_ref, query)>``."""
    digest = hashlib.sha256(f"{image_ref}\n{query}".encode()).hexdigest()[:8]
    stem = _UNSAFE_CHARS.sub("_", Path(image_ref).stem).strip("._-")[:60] or "item"
    return f"{stem}-{digest}"


def read_items(source: str | Path, query: str | None = None) -> list[BatchItem]:
    """The items of a batch from a JSONL file or a folder of images.

    Args:
        source: a ``.jsonl`` file (see the module docstring) or a folder of images.
        query: the query for every image of a folder; must be ``None`` for a JSONL file (each line has its own).

    Returns:
        the items in input order.

    Raises:
        InputError: the source is missing; a JSONL line is not a JSON object, lacks ``image`` or ``query``,
            has an empty or overlong query, or repeats an id (one message names every such line); a folder without
            images, or without ``query``; ``query`` given with a JSONL file.
    """
    path = Path(source)
    if not path.exists():
        raise InputError(f"{path} does not exist: give a .jsonl file of items or a folder of images")
    if path.is_dir():
        if query is None or not query.strip():
            raise InputError(f"{path} is a folder of images: give the query for all of them with --query")
        return _folder_items(path, query.strip())
    if query is not None:
        raise InputError(f"{path} is a JSONL file: each line has its own query, so leave out --query")
    return _jsonl_items(path)


def _folder_items(folder: Path, query: str) -> list[BatchItem]:
    _check_query(query, f"--query for {folder}")
    entries = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES or is_hidden_file(p.name))
    files = [p for p in without_hidden_files(entries, folder) if p.is_file()]
    if not files:
        raise InputError(f"{folder} holds no image files ({', '.join(IMAGE_SUFFIXES)}); choose another folder")
    return [BatchItem(p.name, p, query, p.name) for p in files]


def _jsonl_items(path: Path) -> list[BatchItem]:
    return read_jsonl(path, lambda data, where: item_from_json(data, path.parent, where), '"image" and "query"')


def item_from_json(data: Any, base: Path, where: str) -> BatchItem:
    """One item from a decoded JSONL object; relative image paths resolve against ``base``.

    Raises:
        InputError: not an object, missing or empty ``image``/``query``, an overlong query, a bad ``id``.
    """
    if not isinstance(data, dict):
        raise InputError(f"{where}: expected a JSON object with \"image\" and \"query\"")
    image_ref, query = data.get("image"), data.get("query")
    if not isinstance(image_ref, str) or not image_ref.strip():
        raise InputError(f"{where}: \"image\" must be the path of an image file")
    if not isinstance(query, str):
        raise InputError(f"{where}: \"query\" must be a string saying what to segment")
    query = query.strip()
    _check_query(query, where)
    raw_id = data.get("id")
    if raw_id is None:
        item_id = derived_id(image_ref, query)
    elif isinstance(raw_id, (str, int)) and not isinstance(raw_id, bool) and str(raw_id).strip():
        item_id = str(raw_id).strip()
        if len(item_id) > MAX_ID_CHARS or not item_id.isprintable():
            raise InputError(f"{where}: \"id\" must be printable and at most {MAX_ID_CHARS} characters")
    else:
        raise InputError(f"{where}: \"id\" must be a non-empty string or an integer")
    image = Path(image_ref)
    return BatchItem(item_id, image if image.is_absolute() else base / image, query, image_ref)


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
