"""A batch output opened for review: its items in order, each item's review state, and one COCO file of the
corrected dataset.

Just over 400 lines, kept whole: the queue's reading of the manifest and its one COCO file share the safety checks
below; splitting them would pass those checks between modules.

The queue is read from the batch's ``manifest.json`` (``outputs``) whenever it is opened, so a batch resumed meanwhile
shows its new items, and every state is read from the items' ``review.json`` (``review``): those files are the only
record of a review, so two people on one folder, a page reload and an app restart all see the same states.

The manifest is checked before any path in it is used (the folder may come from an uploaded .zip): an item's folder
must be ``items/<name>`` with a safe name and stay inside the batch folder once symlinks are resolved; its trace, when
it has one, is ``<folder>/trace.json``. Items without a trace (not run yet, or failed before their run started) are
listed apart (``skipped``): there is nothing to review; so are video items (a clip's tracks are not reviewed here, and
the batch's ``coco.json``, whose ids the export keeps, holds photos only).

The export (``coco``) is one COCO instance file for the whole batch, with the ids of the batch's own ``coco.json``:
an item the agent answered keeps its image id and ``file_name`` there (``outputs.coco_ids``), and its query keeps its
category id; other reviewed items (the agent ran out of rounds, failed or was stopped, and the reviewer drew the masks)
get image ids after the batch's, in input order, and labels other than the queries get category ids after the
queries'. Accepted and corrected items contribute their corrected masks (an accepted item without masks is a
confirmed "nothing here": its image is listed with no annotation). Items not reviewed are left out (image and masks),
because an image listed without annotations would claim that nothing is there; ``include_unreviewed`` adds them with
the agent's masks instead. Each image entry says its ``item_id`` and ``review`` state; ``info`` lists what was left out.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from ...correct.edits import EditState
from ...correct.export import coco_document
from ...edit_ops import EditOp
from ...errors import InputError, TraceFormatError
from ...trace.io import TRACE_FILE, load_trace
from ...types import Trace
from ..batch.files import write_json_atomic
from ..batch.layout import ITEMS_DIR, MANIFEST_FILE
from ..batch.outputs import MANIFEST_FORMAT, MANIFEST_VERSION, PENDING, coco_ids
from .decisions import (
    ACCEPTED,
    CORRECTED,
    NO_RECORD,
    NOT_REVIEWED,
    STATE_NAMES,
    ReviewRead,
    ReviewRecord,
    read_review,
    save_review,
    trace_digest,
)

logger = logging.getLogger(__name__)

_FOLDER = re.compile(rf"^{ITEMS_DIR}/[A-Za-z0-9][A-Za-z0-9._-]{{0,99}}$")  # as ``items.folder_names`` makes them
STATUSES = ("done", "no_mask", "max_rounds", "failed", "cancelled", PENDING)
MAX_MANIFEST_BYTES = 64 * 1024 * 1024  # about 200,000 items


@dataclass(frozen=True)
class QueueItem:
    """One item of the batch that has a trace.

    Attributes:
        id: the item's id. image: its image as the batch input gave it (the COCO ``file_name``). query: its query.
        status: the agent's outcome (``done``, ``no_mask``, ``max_rounds``, ``failed``, ``cancelled``).
        reason: why it did not finish with an answer, or ``None``.
        folder: the item's folder (absolute, symlinks resolved).
    """

    id: str
    image: str
    query: str
    status: str
    reason: str | None
    folder: Path

    @property
    def trace_file(self) -> Path:
        return self.folder / TRACE_FILE


@dataclass(frozen=True)
class SkippedItem:
    """An item listed in the manifest that cannot be reviewed: ``status`` is ``pending`` or ``failed`` (no trace), or
    it is a video item (``image`` is then its clip as the input gave it, ``reason`` says so)."""

    id: str
    image: str
    query: str
    status: str
    reason: str | None


@dataclass(frozen=True)
class ItemReview:
    """An item and what its ``review.json`` holds (``read``), as the queue's table shows it."""

    item: QueueItem
    read: ReviewRead

    @property
    def state(self) -> str:
        """``accepted``, ``corrected`` or ``not_reviewed`` (also for an unreadable review)."""
        return self.read.record.state if self.read.record is not None else NOT_REVIEWED

    @property
    def edits(self) -> int:
        return len(self.read.record.edits) if self.read.record is not None else 0


@dataclass(frozen=True)
class Progress:
    """How many of ``total`` items are accepted and corrected."""

    total: int
    accepted: int
    corrected: int

    @property
    def reviewed(self) -> int:
        return self.accepted + self.corrected

    @property
    def sentence(self) -> str:
        """E.g. "2 of 3 reviewed (1 accepted, 1 corrected)"."""
        return f"{self.reviewed} of {self.total} reviewed ({self.accepted} accepted, {self.corrected} corrected)"


@dataclass(frozen=True, eq=False)
class OpenedItem:
    """An item loaded for correcting.

    Attributes:
        position: its place in the queue (0-based). item: the item.
        trace: its trace, ``edits`` replaced by those of its review (none when it has no usable review).
        state: its review state as loaded.
        revision: the revision a save must expect (``review.NO_RECORD`` without a review).
        trace_sha256: the digest of its trace file (what a saved review refers to).
        note: why a saved review was not applied (stale or unreadable), else ``None``.
    """

    position: int
    item: QueueItem
    trace: Trace
    state: str
    revision: int
    trace_sha256: str
    note: str | None = None


def _text(entry: dict[str, Any], key: str, number: int, optional: bool = False) -> str | None:
    value = entry.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise InputError(f"{MANIFEST_FILE}: item {number} has no text {key!r}; the batch output is damaged: run the "
                         "batch command on it again")
    return value


VIDEO_NOT_REVIEWED = ("a video item: the review queue takes photos; its masks are in its folder (palette PNGs, "
                      "tracks_ytvis.json)")


class ReviewQueue:
    """The reviewable items of one batch output folder, in input order (``items``), and those that are not
    (``skipped``). Open one with :meth:`open`."""

    def __init__(self, folder: Path, items: tuple[QueueItem, ...], skipped: tuple[SkippedItem, ...],
                 notes: tuple[str, ...], entries: tuple[tuple[str, str, str], ...]) -> None:
        self.folder = folder
        self.items = items
        self.skipped = skipped
        self.notes = notes
        self._entries = entries  # (id, query, status) of every manifest item: what the batch's COCO ids derive from

    @classmethod
    def open(cls, folder: str | Path) -> ReviewQueue:
        """Read and check ``folder/manifest.json``.

        Raises:
            InputError: no manifest, not a batch manifest, a malformed entry, two items with one id, or an item folder
                outside the batch folder; the message says which and what to do.
        """
        root = Path(folder).resolve()
        path = root / MANIFEST_FILE
        if not path.is_file():
            raise InputError(f"there is no {MANIFEST_FILE} in {root.name}: open the output folder of "
                             "`python -m sam3_agent batch` (the folder given as --out)")
        try:
            if path.stat().st_size > MAX_MANIFEST_BYTES:
                raise ValueError(f"it is larger than {MAX_MANIFEST_BYTES // 2**20} MB")
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as error:
            raise InputError(f"{MANIFEST_FILE} of {root.name} cannot be read: {error}") from None
        if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT or not isinstance(data.get("items"), list):
            raise InputError(f"{MANIFEST_FILE} in {root.name} is not the manifest of a SAM3 Agent batch")
        if data.get("version") != MANIFEST_VERSION:
            raise InputError(f"{MANIFEST_FILE} has version {data.get('version')!r}; this app reads version "
                             f"{MANIFEST_VERSION}")
        items, skipped, entries = [], [], []
        seen: set[str] = set()
        for number, entry in enumerate(data["items"], start=1):
            if not isinstance(entry, dict):
                raise InputError(f"{MANIFEST_FILE}: item {number} is not an object; the batch output is damaged")
            video = entry.get("kind") == "video"  # photos only (see the module docstring)
            item_id, image, query = (_text(entry, key, number) for key in ("id", "video" if video else "image", "query"))
            folder_text, trace = _text(entry, "folder", number), _text(entry, "trace", number, optional=True)
            status, reason = _text(entry, "status", number), _text(entry, "reason", number, optional=True)
            if item_id in seen:
                raise InputError(f"{MANIFEST_FILE}: two items have the id {item_id!r}; the batch output is damaged")
            seen.add(item_id)
            if video:
                skipped.append(SkippedItem(item_id, image, query, status, VIDEO_NOT_REVIEWED))  # type: ignore[arg-type]
                continue
            if status not in STATUSES or not _FOLDER.match(folder_text or ""):
                raise InputError(f"{MANIFEST_FILE}: item {number} ({item_id!r}) has an unknown status or a folder "
                                 "outside items/; the batch output is damaged")
            entries.append((item_id, query, status))
            if trace is None:
                skipped.append(SkippedItem(item_id, image, query, status, reason))
                continue
            if trace != f"{folder_text}/{TRACE_FILE}":
                raise InputError(f"{MANIFEST_FILE}: the trace of item {item_id!r} is not in its folder; the batch "
                                 "output is damaged")
            item_folder = (root / folder_text).resolve()
            if not item_folder.is_relative_to(root):
                raise InputError(f"the folder of item {item_id!r} leads outside the batch folder (a link?): "
                                 "copy the batch output without links and open it again")
            items.append(QueueItem(item_id, image, query, status, reason, item_folder))
        notes = tuple(str(note) for note in data.get("notes") or () if isinstance(note, str))
        return cls(root, tuple(items), tuple(skipped), notes, tuple(entries))

    # ------------------------------------------------------------------ states

    def position_of(self, item_id: str) -> int:
        """The queue position of the item with ``item_id``.

        Raises:
            InputError: the batch has no such item with a trace any more.
        """
        for position, item in enumerate(self.items):
            if item.id == item_id:
                return position
        raise InputError(f"item {item_id!r} is no longer in this batch's review queue: open the batch again")

    def item(self, position: Any) -> QueueItem:
        """The item at ``position`` (0-based). Raises InputError when there is none."""
        if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position < len(self.items):
            raise InputError(f"there is no item {position!r} in this queue: choose 1 to {len(self.items)}")
        return self.items[position]

    def reviews(self) -> list[ItemReview]:
        """Every item with what its ``review.json`` holds, in queue order (read now: other people's saves show)."""
        return [ItemReview(item, read_review(item.folder)) for item in self.items]

    def progress(self, reviews: list[ItemReview] | None = None) -> Progress:
        reviews = self.reviews() if reviews is None else reviews
        states = [r.state for r in reviews]
        return Progress(len(states), states.count(ACCEPTED), states.count(CORRECTED))

    def check_writable(self) -> None:
        """Raise ``InputError`` when reviews cannot be saved here (a read-only folder), before anyone reviews."""
        probe = self.folder / ITEMS_DIR / ".review-write-test.json"
        try:
            write_json_atomic(probe, {})
            probe.unlink()
        except OSError as error:
            raise InputError(f"reviews cannot be saved in {self.folder.name}: {error.strerror or error}; copy the "
                             "batch output to a folder this app may write to") from None

    # ------------------------------------------------------------------ one item

    def open_item(self, position: int) -> OpenedItem:
        """Load the item at ``position`` with its saved review applied.

        A review of an earlier run of the item (another trace digest) or an unreadable ``review.json`` is not
        applied: the item opens as not reviewed and ``note`` says why (saving sets the old file aside).

        Raises:
            InputError: no such position.
            TraceFormatError: the trace is missing or malformed.
        """
        item = self.item(position)
        try:
            digest = trace_digest(item.trace_file)
        except OSError as error:
            raise TraceFormatError(f"the trace of item {item.id!r} cannot be read: {error.strerror or error}") from None
        trace = load_trace(item.trace_file)
        read = read_review(item.folder)
        record = read.record
        if read.problem is not None:
            return OpenedItem(position, item, dataclasses.replace(trace, edits=[]), NOT_REVIEWED, read.revision, digest,
                              f"its saved review was not applied: {read.problem} (it is kept aside when you save)")
        if record is None:
            return OpenedItem(position, item, dataclasses.replace(trace, edits=[]), NOT_REVIEWED, NO_RECORD, digest)
        if record.trace_sha256 != digest:
            return OpenedItem(position, item, dataclasses.replace(trace, edits=[]), NOT_REVIEWED, record.revision,
                              digest, "its saved review was made on an earlier run of this item and was not applied "
                                      "(it is kept aside when you save)")
        edited = dataclasses.replace(trace, edits=list(record.edits))
        try:
            EditState.from_trace(edited)
        except TraceFormatError as error:
            return OpenedItem(position, item, dataclasses.replace(trace, edits=[]), NOT_REVIEWED, record.revision,
                              digest, f"its saved review was not applied: {error}")
        return OpenedItem(position, item, edited, record.state, record.revision, digest)

    def save(self, opened: OpenedItem, state: str, edits: tuple[EditOp, ...],
             expected_revision: int | None) -> ReviewRecord:
        """Save the review of an opened item (``review.save_review``): ``state`` with the edit operations in effect.

        Raises:
            ReviewConflict: someone else saved since ``expected_revision`` (nothing written).
            OSError: the folder cannot be written.
        """
        return save_review(opened.item.folder, opened.item.id, state, edits, opened.trace_sha256, expected_revision)

    # ------------------------------------------------------------------ export

    def image_ids(self) -> dict[str, int]:
        """The image id of every reviewable item: the batch ``coco.json``'s for the items the agent answered, then
        the next ids for the others, in queue order."""
        image_ids, _ = coco_ids(list(self._entries))
        last = max(image_ids.values(), default=0)
        for item in self.items:
            if item.id not in image_ids:
                last += 1
                image_ids[item.id] = last
        return image_ids

    def coco(self, include_unreviewed: bool = False,
             on_image: Callable[[int, Image.Image], None] | None = None) -> dict[str, Any]:
        """The COCO instance document of the reviewed dataset (see the module docstring); loads with
        ``pycocotools.coco.COCO``. ``on_image(image_id, photo)`` is called for each image it lists (the YOLO export
        saves the photos with it, one at a time).

        Raises:
            TraceFormatError: the trace of an exported item is missing or malformed.
        """
        image_ids = self.image_ids()
        _, categories = coco_ids(list(self._entries))
        images: list[dict[str, Any]] = []
        annotations: list[dict[str, Any]] = []
        counts = {ACCEPTED: 0, CORRECTED: 0, NOT_REVIEWED: 0}
        left_out: list[str] = []
        for position, review in enumerate(self.reviews()):
            if review.read.record is None and not include_unreviewed:  # saves loading a trace that is left out
                counts[NOT_REVIEWED] += 1
                left_out.append(review.item.id)
                continue
            opened = self.open_item(position)
            counts[opened.state] += 1
            if opened.state == NOT_REVIEWED and not include_unreviewed:
                left_out.append(opened.item.id)
                continue
            width, height = opened.trace.image.size
            if on_image is not None:
                on_image(image_ids[opened.item.id], opened.trace.image)
            state = EditState.from_trace(opened.trace)  # not reviewed: no edits, the agent's masks
            document = coco_document(state.corrected_items(), width, height, file_name=opened.item.image,
                                     image_id=image_ids[opened.item.id])
            names = {c["id"]: c["name"] for c in document["categories"]}
            images.append({**document["images"][0], "item_id": opened.item.id, "review": opened.state})
            for annotation in document["annotations"]:
                category = categories.setdefault(names[annotation["category_id"]], len(categories) + 1)
                annotations.append({**annotation, "id": len(annotations) + 1, "category_id": category})
        info = {
            "description": f"SAM3 Agent batch {self.folder.name}, reviewed",
            "reviews": {STATE_NAMES[k]: v for k, v in counts.items()},
            "not_reviewed": "included with the agent's masks" if include_unreviewed else "left out",
            "left_out": left_out,
            "not_reviewable": [s.id for s in self.skipped],
            "notes": list(self.notes),
        }
        return {
            "info": info,
            "images": images,
            "categories": [{"id": cid, "name": name} for name, cid in categories.items()],
            "annotations": annotations,
        }


def coco_summary(document: dict[str, Any]) -> str:
    """One sentence about an export of :meth:`ReviewQueue.coco`, e.g. "2 images, 3 masks; 1 item not reviewed was
    left out"."""
    info = document.get("info", {})
    images, masks = len(document["images"]), len(document["annotations"])
    left = len(info.get("left_out", []))
    text = f"{images} image{'s' if images != 1 else ''}, {masks} mask{'s' if masks != 1 else ''}"
    if left:
        text += f"; {left} item{'s' if left != 1 else ''} not reviewed {'was' if left == 1 else 'were'} left out"
    return text

