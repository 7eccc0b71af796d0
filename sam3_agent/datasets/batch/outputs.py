"""The dataset-level files of a batch, derived from the item records: manifest, COCO, summary.

``manifest.json`` (what a review queue opens)::

    format "sam3_agent.batch", version 1, notes [what the models were, e.g. random weights]
    items [{id, kind ("image"), image, query, folder ("items/<name>"), trace ("items/<name>/trace.json" or null),
            status (a trace status, or "pending" when not run yet), reason}]     in input order
    a video item: {id, kind "video", video (the clip as the input gave it), query, keyframe (the frame index the
            agent reasoned on, null until run), folder, trace ("items/<name>/video_trace.json" or null), status,
            reason, objects, frames_tracked (null until run)}

``coco.json``: one COCO instance-segmentation file for every photo item the agent answered (``done`` / ``no_mask``;
a clip's objects are in its own folder's palette PNGs and YouTube-VIS JSON, not here):
``images`` [{id (1-based, input order), file_name (the image path as the input gave it), width, height}],
``categories`` one per distinct query (name = the query), ``annotations`` [{id, image_id, category_id,
segmentation (RLE, counts as str), bbox (xywh, pixels), area, iscrowd 0, score}]. It loads with
``pycocotools.coco.COCO``.

``summary.json``: item counts by status and by kind (image, video), rounds (total, mean, max, histogram; a video
item's are its keyframe runs'), mistakes by kind, time, frames tracked over the video items, the items that did not
finish with an answer (id, status, reason), and with a VLM server ``server``: how often it
answered 429 (too many requests) in this invocation and the fewest requests then let through at once (a note says
so too).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from .files import write_json_atomic
from .items import Item, VideoItem
from .layout import COCO_FILE, MANIFEST_FILE, SUMMARY_FILE, BatchLayout
from .records import ANSWERED, ItemRecord

MANIFEST_FORMAT = "sam3_agent.batch"
MANIFEST_VERSION = 1
PENDING = "pending"


def model_notes(records: Sequence[ItemRecord]) -> list[str]:
    """Sentences saying what the models behind ``records`` were, when that makes their output meaningless as a
    result: random weights (the ``tiny`` preset) or a scripted VLM (replayed replies). Empty for real models."""
    notes = []
    presets = {r.models.get("preset") for r in records}
    vlms = sorted({r.models.get(key, "") for r in records for key in ("vlm", "verifier")} - {""})
    if "tiny" in presets:
        notes.append("The models had random weights (tiny preset): their masks and text mean nothing; "
                     "these numbers test the code, they are not results.")
    scripted = [name for name in vlms if name.startswith("scripted")]
    if scripted:
        notes.append(f"The VLM was scripted ({', '.join(scripted)}): its replies were replayed, not generated, "
                     "so the scores say nothing about a model.")
    return notes


def manifest(layout: BatchLayout, items: Sequence[Item], records: Mapping[str, ItemRecord]) -> dict[str, Any]:
    """The manifest document (see the module docstring)."""
    entries = []
    for item in items:
        record = records.get(item.id)
        folder = layout.relative_folder(item)
        entry = {"id": item.id, "kind": item.kind}
        if isinstance(item, VideoItem):
            entry.update(video=item.video_ref, query=item.query,
                         keyframe=record.keyframe if record is not None else None)
        else:
            entry.update(image=item.image_ref, query=item.query)
        entry.update({
            "folder": folder,
            "trace": f"{folder}/{record.trace}" if record is not None and record.trace else None,
            "status": record.status if record is not None else PENDING,
            "reason": record.reason if record is not None else None,
        })
        if isinstance(item, VideoItem):
            entry.update(objects=record.objects if record is not None else None,
                         frames_tracked=record.frames_tracked if record is not None else None)
        entries.append(entry)
    return {
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "notes": model_notes(list(records.values())),
        "items": entries,
    }


def coco_ids(entries: Sequence[tuple[str, str, str]]) -> tuple[dict[str, int], dict[str, int]]:
    """The image and category ids of the batch's COCO file, from ``(item id, query, status)`` in input order.

    Returns:
        ``(image id by item id, category id by query)``: the items the agent answered (``ANSWERED``) get image ids
        1, 2, ... in input order; each distinct query among them a category id, in order of first use. (A review
        queue's export uses the same ids, ``datasets.review.queue``.)
    """
    images: dict[str, int] = {}
    categories: dict[str, int] = {}
    for item_id, query, status in entries:
        if status in ANSWERED:
            images[item_id] = len(images) + 1
            categories.setdefault(query, len(categories) + 1)
    return images, categories


def coco_dataset(items: Sequence[Item], records: Mapping[str, ItemRecord]) -> dict[str, Any]:
    """The batch's COCO instance file (see the module docstring)."""
    # an answered record always has its image size (it comes from the trace)
    image_ids, categories = coco_ids([(item.id, item.query, records[item.id].status) for item in items
                                      if item.id in records and records[item.id].width is not None
                                      and records[item.id].kind == "image"])
    images, annotations = [], []
    for item in items:
        record = records.get(item.id)
        if record is None or item.id not in image_ids:
            continue
        image_id = image_ids[item.id]
        images.append({"id": image_id, "file_name": item.image_ref, "width": record.width, "height": record.height})
        category = categories[item.query]
        for result in record.masks:
            annotations.append({
                "id": len(annotations) + 1,
                "image_id": image_id,
                "category_id": category,
                "segmentation": result["segmentation"],
                "bbox": result["bbox"],
                "area": result["area"],
                "iscrowd": 0,
                "score": result["score"],
            })
    return {
        "info": {"description": "SAM3 Agent batch", "notes": model_notes(list(records.values()))},
        "images": images,
        "categories": [{"id": cid, "name": name} for name, cid in categories.items()],
        "annotations": annotations,
    }


def batch_summary(items: Sequence[Item], records: Mapping[str, ItemRecord]) -> dict[str, Any]:
    """The batch's summary (see the module docstring); ``rounds.mean`` and ``seconds.mean`` are over the items
    that have a record (0 when none has)."""
    done = [records[item.id] for item in items if item.id in records]
    statuses = Counter(r.status for r in done)
    statuses[PENDING] = len(items) - len(done)
    rounds = [r.rounds for r in done]
    mistakes: Counter[str] = Counter()
    for r in done:
        mistakes.update(r.mistakes)
    seconds = sum(r.seconds for r in done)
    kinds = Counter(item.kind for item in items)
    return {
        "items": len(items),
        "statuses": {k: v for k, v in sorted(statuses.items()) if v},
        "kinds": dict(sorted(kinds.items())),
        "rounds": {
            "total": sum(rounds),
            "mean": round(sum(rounds) / len(rounds), 3) if rounds else 0,
            "max": max(rounds, default=0),
            "histogram": {str(k): v for k, v in sorted(Counter(rounds).items())},
        },
        "mistakes": dict(sorted(mistakes.items())),
        "seconds": {"total": round(seconds, 3), "mean": round(seconds / len(done), 3) if done else 0},
        "frames_tracked": sum(r.frames_tracked or 0 for r in done if r.kind == "video"),
        "unanswered": [{"id": r.id, "status": r.status, "reason": r.reason} for r in done if r.status not in ANSWERED],
        "notes": model_notes(done),
    }


def server_note(server: Mapping[str, Any]) -> str | None:
    """The summary's sentence about a server that answered 429 (``None`` when it never did)."""
    if not server.get("rate_limited"):
        return None
    return (f"The VLM server answered 429 (too many requests) {server['rate_limited']} time(s): requests were held "
            f"back, at most {server['lowest_concurrency']} at once at the lowest, and retried; start the server with "
            "more concurrent requests (or lower --concurrency) to go faster.")


def write_dataset_files(
    layout: BatchLayout, items: Sequence[Item], records: Mapping[str, ItemRecord],
    server: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``coco.json``, ``summary.json`` and ``manifest.json`` (each atomically, manifest last); returns the
    summary. ``server``: what the VLM server's request gate saw (``server_gate.GateReport.as_record``), if any.

    Raises:
        OSError: the output folder cannot be written.
    """
    summary = batch_summary(items, records)
    if server is not None:
        summary["server"] = dict(server)
        note = server_note(server)
        summary["notes"] += [note] if note else []
    write_json_atomic(layout.out / COCO_FILE, coco_dataset(items, records), indent=None)
    write_json_atomic(layout.out / SUMMARY_FILE, summary)
    write_json_atomic(layout.out / MANIFEST_FILE, manifest(layout, items, records))
    return summary
