"""ReVOS, the reasoning video object segmentation benchmark (VISA, ECCV 2024), in its released layout.

The release (github.com/cilinyan/ReVOS-api; the fields as VISA's ``tools/eval_revos.py`` and its loaders read them):

    ReVOS/
      JPEGImages/<video>/<frame>.jpg     the frames of every train and valid video
      mask_dict.json                     {anno_id: [RLE or null, one entry per frame of its video]} (train and valid)
      mask_dict_foreground.json          every object of each video per frame (VISA's robustness score; not read)
      meta_expressions_train_.json       (and meta_expressions_train_sub_.json)
      meta_expressions_valid_.json       {"videos": {video: {"frames": [frame, ...],
                                                             "expressions": {expression_id: {"exp": text,
                                                                 "obj_id": [int], "anno_id": [int],
                                                                 "type_id": int}}}}}

- ``frames``: frame names without the ``.jpg``, in order; entry k of an anno id's list in ``mask_dict.json`` is
  that object's mask on frame k (VISA's evaluator indexes it so).
- An RLE is COCO compressed RLE ``{"size": [H, W], "counts": str}``; ``null`` where the object is not on the frame.
- ``anno_id``: the objects the expression refers to; its target on a frame is the union of their masks (an empty
  list: the expression refers to nothing in the video).
- ``type_id``: 0 a referring expression, 1 a reasoning one; VISA's evaluator keeps type 2 (it names it "nan") out of
  both averages. It may be missing (``None``).
- A video name may hold a ``/`` (a folder under ``JPEGImages``; VISA's loader tells TAO's videos by the first part).

Each expression is one ``VideoSample``, id ``<video>_<expression_id>`` as VISA's evaluator names its rows. MeViS
(``valid_u/``: ``meta_expressions.json`` + ``mask_dict.json`` + ``JPEGImages/`` in one split folder, no ``type_id``)
stores its masks the same way, so a MeViS reader needs only its file names on top of ``read_mask_dict_samples``.

Everything is checked while reading, so a broken dataset is refused before anything runs: the files exist and
parse, each video's frame files are all there, every anno id a split names is in ``mask_dict.json`` with one entry
per frame, and every RLE is valid COCO RLE of the video's frame size (its first frame's, read from the JPEG header).
``mask_dict.json`` is parsed whole once (ReVOS ships one file for both splits); only the split's anno ids are kept,
as compressed counts, and masks are decoded one frame at a time when scored (``VideoTruth.mask``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError

from ...errors import InputError
from ...rle import decode_all, validated_counts

logger = logging.getLogger(__name__)

SPLITS = {"valid": "meta_expressions_valid_.json", "train": "meta_expressions_train_.json",
          "train_sub": "meta_expressions_train_sub_.json"}
MASK_DICT = "mask_dict.json"
FRAMES_DIR = "JPEGImages"
FRAME_SUFFIX = ".jpg"
TYPE_NAMES = {0: "referring", 1: "reasoning"}  # type_id as VISA's tools/eval_revos.py splits its averages
_LISTED = 5  # names quoted in a message before "and N more"


@dataclass(frozen=True, eq=False)
class VideoTruth:
    """The target of one expression on each frame of its video, as COCO compressed RLE, decoded on demand.

    Attributes:
        objects: per object (anno id), per frame: compressed counts (``bytes``), or ``None`` where it is absent.
        height, width: the frame size in pixels.
    """

    objects: tuple[tuple[bytes | None, ...], ...]
    height: int
    width: int

    def mask(self, frame: int) -> np.ndarray | None:
        """The union of the objects on frame ``frame`` (0-based): bool (H, W), or ``None`` when none is there."""
        present = [counts[frame] for counts in self.objects if counts[frame] is not None]
        if not present:
            return None
        return decode_all(present, self.height, self.width).any(axis=0)


@dataclass(frozen=True, eq=False)
class VideoSample:
    """One expression over one video, with its ground truth.

    Attributes:
        id: ``<video>_<expression_id>``, unique in the split.
        video: the video's name in the dataset (may hold ``/``).
        expression_id: the expression's key in its video (a string of digits in the release).
        expression: the text query.
        frames: the frame files, in order (frame index k is ``frames[k]``).
        truth: the target per frame.
        anno_ids, obj_ids: the objects the expression refers to (empty: none).
        type_id: 0 referring, 1 reasoning, 2 (see the module docstring), ``None`` when the file has none.
    """

    id: str
    video: str
    expression_id: str
    expression: str
    frames: tuple[Path, ...]
    truth: VideoTruth
    anno_ids: tuple[str, ...] = ()
    obj_ids: tuple[int, ...] = ()
    type_id: int | None = None
    attributes: dict[str, str] = field(default_factory=dict)  # breakdown keys, e.g. {"type": "reasoning"}

    @property
    def frame_names(self) -> tuple[str, ...]:
        """The frame names as the dataset lists them (no suffix)."""
        return tuple(path.stem for path in self.frames)


def _listed(names: list[str]) -> str:
    more = f" and {len(names) - _LISTED} more" if len(names) > _LISTED else ""
    return ", ".join(names[:_LISTED]) + more


def _read_json(path: Path, what: str) -> Any:
    if not path.is_file():
        raise InputError(f"{path} is missing: {what}")
    try:
        with open(path, encoding="utf-8") as stream:
            return json.load(stream)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(f"{path} could not be read as JSON ({error}): is the download complete?") from None


def _safe_name(name: Any, what: str, folders: bool = True) -> str:
    """A video name (``folders``: may hold ``/``) or a frame name from the file, refused when it would lead out of
    ``JPEGImages`` (``..``, an absolute path, a backslash) or is empty."""
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"{what} must be a non-empty name, got {name!r:.60}")
    parts = PurePosixPath(name).parts
    if (name.startswith("/") or "\\" in name or any(part in ("..", ".") for part in parts)
            or (not folders and "/" in name)):
        raise InputError(f"{what} {name!r:.80} is not a name inside {FRAMES_DIR}/ (no '..', '.', "
                         f"{'' if folders else '/, '}backslash or absolute path)")
    return name


def _ids(values: Any, what: str) -> list[str]:
    if not isinstance(values, list) or not all(
            isinstance(v, (int, str)) and not isinstance(v, bool) and str(v).strip() for v in values):
        raise InputError(f"{what} must be a list of ids (integers)")
    return [str(v).strip() for v in values]


def _frame_size(path: Path) -> tuple[int, int]:
    try:
        with Image.open(path) as image:  # reads the header only
            width, height = image.size
    except (OSError, UnidentifiedImageError) as error:
        raise InputError(f"{path} is not a readable image ({error})") from None
    return height, width


def _check_frames(root: Path, video: str, names: list[str]) -> tuple[Path, ...]:
    folder = root / FRAMES_DIR / video
    if not folder.is_dir():
        raise InputError(f"{folder} is missing: the frames of video {video!r} (JPEGImages/<video>/<frame>.jpg)")
    present = {p.name for p in folder.iterdir()}
    missing = [n + FRAME_SUFFIX for n in names if n + FRAME_SUFFIX not in present]
    if missing:
        raise InputError(f"{folder} lacks {len(missing)} of the {len(names)} frames the expressions file lists: "
                         f"{_listed(missing)}")
    return tuple(folder / (n + FRAME_SUFFIX) for n in names)


def _object_counts(entries: Any, anno_id: str, video: str, frame_names: list[str],
                   size: tuple[int, int]) -> tuple[bytes | None, ...]:
    """One anno id's masks per frame, checked: one entry per frame, each null or valid RLE of the frame size."""
    where = f"{MASK_DICT}, anno_id {anno_id} (video {video!r})"
    if not isinstance(entries, list) or len(entries) != len(frame_names):
        count = len(entries) if isinstance(entries, list) else "no list of"
        raise InputError(f"{where} has {count} frame entries but the video has {len(frame_names)} frames: is "
                         f"{MASK_DICT} from the same release as the expressions file?")
    per_frame: list[bytes | None] = []
    for k, entry in enumerate(entries):
        if entry is None:
            per_frame.append(None)
            continue
        try:
            (counts,), _ = validated_counts([entry], *size)
        except ValueError as error:
            raise InputError(f"{where}, frame {k} ({frame_names[k]}): {str(error).removeprefix('RLE 0: ')} (the "
                             f"video's frames are {size[1]}x{size[0]}, width x height)") from None
        per_frame.append(counts)
    return tuple(per_frame)


def _object_ids(values: Any, what: str) -> tuple[int, ...]:
    ids = _ids(values, what)
    if not all(v.isdigit() for v in ids):
        raise InputError(f"{what} must be a list of non-negative integers")
    return tuple(int(v) for v in ids)


def read_mask_dict_samples(root: Path, meta: Any, mask_dict: Any, meta_name: str) -> list[VideoSample]:
    """The samples of an expressions file and a ``mask_dict.json`` already parsed (the ReVOS / MeViS form: see the
    module docstring), frames under ``root/JPEGImages``, in file order (videos, then their expressions).

    Raises:
        InputError: see ``read_revos``.
    """
    if not isinstance(meta, dict) or not isinstance(meta.get("videos"), dict):
        raise InputError(f"{meta_name} must be a JSON object with \"videos\": {{video: {{frames, expressions}}}}")
    if not isinstance(mask_dict, Mapping):
        raise InputError(f"{MASK_DICT} must be a JSON object {{anno_id: [RLE or null per frame]}}")
    samples: list[VideoSample] = []
    kept: dict[str, tuple[str, tuple[bytes | None, ...]]] = {}  # anno id -> (its video, its counts per frame)
    for video, entry in meta["videos"].items():
        video = _safe_name(video, f"{meta_name}: the video name")
        where = f"{meta_name}, video {video!r}"
        if not isinstance(entry, dict) or not isinstance(entry.get("expressions"), dict):
            raise InputError(f"{where} needs \"frames\" and \"expressions\"")
        names = entry.get("frames")
        if not isinstance(names, list) or not names:
            raise InputError(f"{where}: \"frames\" must be a non-empty list of frame names")
        names = [_safe_name(n, f"{where}: frame name", folders=False) for n in names]
        frames = _check_frames(root, video, names)
        size = _frame_size(frames[0])
        for expression_id, expression in entry["expressions"].items():
            here = f"{where}, expression {expression_id!r}"
            if not isinstance(expression, dict) or not isinstance(expression.get("exp"), str) \
                    or not expression["exp"].strip():
                raise InputError(f"{here} needs an \"exp\" text")
            anno_ids = _ids(expression.get("anno_id", []), f"{here}: \"anno_id\"")
            obj_ids = _object_ids(expression.get("obj_id", []), f"{here}: \"obj_id\"")
            type_id = expression.get("type_id")
            if type_id is not None and (not isinstance(type_id, int) or isinstance(type_id, bool)):
                raise InputError(f"{here}: \"type_id\" must be an integer")
            for anno_id in anno_ids:
                if anno_id not in kept:
                    if anno_id not in mask_dict:
                        raise InputError(f"{here} names anno_id {anno_id}, which {MASK_DICT} lacks: is it from the "
                                         "same release?")
                    kept[anno_id] = video, _object_counts(mask_dict[anno_id], anno_id, video, names, size)
                elif kept[anno_id][0] != video:
                    raise InputError(f"{here} names anno_id {anno_id}, an object of video {kept[anno_id][0]!r}")
            truth = VideoTruth(tuple(kept[a][1] for a in anno_ids), *size)
            attributes = {"type": TYPE_NAMES.get(type_id, f"type {type_id}")} if type_id is not None else {}
            samples.append(VideoSample(
                id=f"{video}_{expression_id}", video=video, expression_id=str(expression_id),
                expression=" ".join(expression["exp"].split()), frames=frames, truth=truth,
                anno_ids=tuple(anno_ids), obj_ids=obj_ids,
                type_id=type_id, attributes=attributes))
    if not samples:
        raise InputError(f"{meta_name} lists no expression")
    return samples


def read_revos(folder: str | Path, split: str = "valid") -> list[VideoSample]:
    """The samples of one split of a ReVOS download (the folder holding ``JPEGImages/``, ``mask_dict.json`` and
    the ``meta_expressions_*_.json`` files), in file order.

    Args:
        folder: the ReVOS folder.
        split: ``valid`` (the benchmark), ``train`` or ``train_sub``.

    Raises:
        InputError: an unknown split; a missing or unparsable file; a video whose frame folder or frame files are
            missing; an expression without text or naming an anno id that ``mask_dict.json`` lacks; an anno id
            whose entries do not match its video's frames, or an RLE that is malformed or not of the frame size
            (each message names the file, the video, the expression or anno id and the frame).
    """
    folder = Path(folder)
    if split not in SPLITS:
        raise InputError(f"ReVOS has no split {split!r}; use one of: {', '.join(SPLITS)}")
    if not folder.is_dir():
        raise InputError(f"{folder} is not a folder: give the ReVOS folder (JPEGImages/, {MASK_DICT}, "
                         f"{SPLITS[split]})")
    found = sorted(p.name for p in folder.glob("meta_expressions*.json"))
    meta = _read_json(folder / SPLITS[split], f"the {split} split's expressions of a ReVOS folder (found: "
                                              f"{', '.join(found) or 'no meta_expressions*.json'})")
    mask_dict = _read_json(folder / MASK_DICT, "the ground-truth masks of a ReVOS folder")
    samples = read_mask_dict_samples(folder, meta, mask_dict, SPLITS[split])
    logger.info("ReVOS %s: %d expressions over %d videos", split, len(samples), len({s.video for s in samples}))
    return samples
