"""RefCOCO / RefCOCO+ / RefCOCOg ground truth in the published ``refer`` layout.

A dataset folder (e.g. ``refer/data/refcocog``) holds (facts from the ``refer`` API that ships these datasets):

- ``refs(SPLIT_BY).p``: a pickle of a list of references, each a dict with ``ref_id``, ``ann_id``, ``image_id``,
  ``category_id``, ``split`` (``train``, ``val``, ``testA``, ``testB``, ``test``...) and ``sentences``
  (``[{"sent_id", "sent", "raw", "tokens"}, ...]``); ``SPLIT_BY`` is ``unc`` or ``google`` (RefCOCO),
  ``unc`` (RefCOCO+), ``umd`` or ``google`` (RefCOCOg);
- ``instances.json``: COCO ``images`` (``id``, ``file_name``, ``height``, ``width``), ``annotations`` (``id``,
  ``segmentation`` as polygons or RLE) and ``categories``.

The images are COCO train2014's, by default in ``../images/mscoco/images/train2014`` next to the dataset folder
(the ``refer`` layout). Every sentence of a reference in the chosen split is one sample (id
``ref<ref_id>_sent<sent_id>``, query = the ``sent`` text), broken down by ``category``.

The pickle is read with an unpickler that refuses every class or function reference: the files hold only
lists, dicts, strings and numbers, and a pickle that names anything else is rejected instead of executed.
"""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path
from typing import Any

from ...errors import InputError
from .ground_truth import CocoTruth, EvalSample

_REFS_FILE = re.compile(r"^refs\((?P<split_by>[A-Za-z0-9_-]+)\)\.p$")
DEFAULT_IMAGES = Path("..") / "images" / "mscoco" / "images" / "train2014"


class _PlainDataUnpickler(pickle.Unpickler):
    """Builds only built-in data (list, dict, str, bytes, numbers, tuples): any global is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"the refs file names {module}.{name}; only plain data is accepted")


def load_refs(path: str | Path) -> list[dict[str, Any]]:
    """The references of a ``refs(SPLIT_BY).p`` file (see the module docstring).

    Raises:
        InputError: unreadable, not a pickle of plain data, or not a list of reference dicts.
    """
    path = Path(path)
    try:
        with open(path, "rb") as stream:
            refs = _PlainDataUnpickler(stream, encoding="utf-8", errors="replace").load()
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError) as error:
        raise InputError(f"cannot read {path}: {error}") from None
    if not isinstance(refs, list) or not all(isinstance(r, dict) for r in refs):
        raise InputError(f"{path} does not hold a list of references")
    return refs


def _refs_path(folder: Path, split_by: str | None) -> Path:
    found = {m.group("split_by"): p for p in folder.iterdir() if (m := _REFS_FILE.match(p.name))}
    if split_by is not None:
        if split_by not in found:
            raise InputError(f"{folder} has no refs({split_by}).p; it has: {', '.join(sorted(found)) or 'none'}")
        return found[split_by]
    if len(found) != 1:
        raise InputError(f"{folder} has {len(found)} refs files ({', '.join(sorted(found)) or 'none'}): "
                         "choose one with --split-by")
    return next(iter(found.values()))


def read_refcoco(
    folder: str | Path, split: str = "val", split_by: str | None = None, images: str | Path | None = None
) -> list[EvalSample]:
    """The samples of one split of a RefCOCO/+/g dataset folder, in reference order.

    Args:
        folder: the dataset folder (``refs(*).p`` + ``instances.json``).
        split: the references' ``split`` value to keep (exact match).
        split_by: which ``refs(SPLIT_BY).p``; ``None`` when the folder has exactly one.
        images: the folder of the COCO images (default ``folder/../images/mscoco/images/train2014``).

    Raises:
        InputError: missing or malformed files, no reference in ``split`` (the message lists the splits found),
            a reference naming an unknown annotation or image.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder} is not a folder: give a RefCOCO dataset folder (refs(*).p + instances.json)")
    refs = load_refs(_refs_path(folder, split_by))
    try:
        instances = json.loads((folder / "instances.json").read_text(encoding="utf-8"))
        annotations = {int(a["id"]): a for a in instances["annotations"]}
        image_info = {int(i["id"]): i for i in instances["images"]}
        categories = {int(c["id"]): str(c["name"]) for c in instances["categories"]}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
        raise InputError(f"cannot read {folder / 'instances.json'} as COCO instances: {error}") from None
    image_dir = Path(images) if images is not None else folder / DEFAULT_IMAGES
    chosen = [r for r in refs if r.get("split") == split]
    if not chosen:
        splits = sorted({str(r.get("split")) for r in refs})
        raise InputError(f"no reference has split {split!r}; the splits are: {', '.join(splits)}")
    samples = []
    for ref in chosen:
        try:
            annotation = annotations[int(ref["ann_id"])]
            info = image_info[int(ref["image_id"])]
            truth = CocoTruth(annotation["segmentation"], int(info["height"]), int(info["width"]))
            category = categories.get(int(ref.get("category_id", annotation.get("category_id", 0))), "unknown")
            sentences = list(ref["sentences"])
        except (KeyError, TypeError, ValueError) as error:
            raise InputError(f"reference {ref.get('ref_id')!r} does not match instances.json: {error}") from None
        for sentence in sentences:
            text = str(sentence.get("sent") or sentence.get("raw") or "").strip()
            if not text:
                continue
            samples.append(EvalSample(
                f"ref{ref['ref_id']}_sent{sentence.get('sent_id')}", image_dir / str(info["file_name"]),
                str(info["file_name"]), text, truth, {"category": category},
            ))
    return samples
