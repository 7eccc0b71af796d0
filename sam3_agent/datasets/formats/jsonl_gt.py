"""A simple evaluation format: one JSON object per line, ground truth as COCO RLE.

::

    {"id": "cup-1", "image": "photos/coffee.jpg", "query": "the cup", "mask": {"size": [400, 600], "counts": "..."}}
    {"image": "photos/cat.jpg", "query": "the dog", "mask": null}
    {"image": "photos/cat.jpg", "query": "the ears", "mask": [RLE, RLE], "ignore": RLE, "attributes": {"kind": "part"}}

``image``, ``query`` and ``id`` follow the batch items' rules (``items``: relative paths resolve against the file's
folder; a missing id is derived from the image and query). ``mask`` is one RLE, a list of RLEs (one region: their
union), or ``null`` / ``[]`` when the query refers to nothing (a "no target" sample). ``ignore`` (optional, same
forms) is left out of scoring. RLEs are COCO's (``counts`` as a string or a list of run lengths, ``size`` [H, W]);
they are decoded once when the file is read, so a malformed one is reported before anything runs.
``attributes`` (optional, string values) are breakdown keys for the report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import InputError
from ...rle import decode_rle
from ..batch.items import item_from_json
from ..batch.jsonl import read_jsonl
from .ground_truth import EvalSample, RleTruth


def _rles(value: Any, where: str, key: str) -> tuple[dict[str, Any], ...]:
    if value is None:
        return ()
    rles = [value] if isinstance(value, dict) else value
    if not isinstance(rles, list) or not all(isinstance(r, dict) for r in rles):
        raise InputError(f"{where}: \"{key}\" must be an RLE, a list of RLEs or null")
    if rles:
        try:
            decode_rle(rles)
        except ValueError as error:
            raise InputError(f"{where}: \"{key}\" is not valid COCO RLE: {error}") from None
    return tuple(rles)


def read_jsonl_gt(path: str | Path) -> list[EvalSample]:
    """The samples of a JSONL ground-truth file (see the module docstring), in line order.

    Raises:
        InputError: missing file; a line that is not a JSON object, lacks ``image``/``query``, repeats an id, has a
            malformed RLE, RLEs of different sizes, or non-string attributes (the message names the line).
    """
    path = Path(path)

    def parse(data: Any, where: str) -> EvalSample:
        item = item_from_json(data, path.parent, where)
        target, ignore = _rles(data.get("mask"), where, "mask"), _rles(data.get("ignore"), where, "ignore")
        sizes = {tuple(int(v) for v in r["size"]) for r in target + ignore}
        if len(sizes) > 1:
            raise InputError(f"{where}: the RLEs have different sizes {sorted(sizes)}; all must be the image's size")
        height, width = sizes.pop() if sizes else (0, 0)
        attributes = data.get("attributes") or {}
        if not isinstance(attributes, dict) or not all(isinstance(v, str) for v in attributes.values()):
            raise InputError(f"{where}: \"attributes\" must be an object of strings")
        return EvalSample(item.id, item.image, item.image_ref, item.query, RleTruth(target, ignore, height, width),
                          dict(attributes))

    return read_jsonl(path, parse, '"image", "query" and "mask"')
