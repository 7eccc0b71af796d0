"""YOLO segmentation labels in Ultralytics' dataset layout, from a COCO instance document of this project.

Layout (a folder, or the same inside a .zip)::

    data.yaml             train: images, val: images, names: {0: label, 1: ...}; no ``path`` key, so a reader
                          takes the folder of data.yaml as the dataset's root
    images/<stem>.png     each photo, lossless (the pixels the masks were made on)
    labels/<stem>.txt     one line per mask: ``class x1 y1 x2 y2 ...``; class: the 0-based position of the mask's
                          category in the document's ``categories``; (x, y) polygon vertices divided by the image's
                          width and height, in [0, 1], six decimals; an image without masks gets an empty file

Each line is one polygon (``polygons.mask_polygon``: the mask's parts and holes joined by cuts, since a line holds
one polygon; see that module for what a reader gets back). ``<stem>`` is the image's ``file_name`` without folders
and suffix (a second image of the same stem gets ``_<image id>`` added), so the labels also pair with the original
photos. The class names follow the COCO categories, which are the masks' labels.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import yaml
from PIL import Image

from ..errors import InputError, TraceFormatError
from ..trace.safe_decode import DecodeBudget, masks_for_image
from .polygons import mask_polygon

DATA_FILE = "data.yaml"
DECIMALS = 6  # 1e-6 of a side: well under a pixel for any photo the app takes
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def yolo_names(document: dict[str, Any]) -> dict[int, str]:
    """Class index -> name: the document's categories in order, from 0."""
    return {index: str(category["name"]) for index, category in enumerate(document.get("categories", []))}


def image_stems(document: dict[str, Any]) -> dict[int, str]:
    """Image id -> the stem its image and label files get (see the module docstring); only letters, digits, ``.``,
    ``_`` and ``-`` are kept, so a name can never leave the folder."""
    stems: dict[int, str] = {}
    for image in document.get("images", []):
        stem = _UNSAFE.sub("_", PurePosixPath(str(image.get("file_name") or "image").replace("\\", "/")).stem)
        stem = stem.strip("._") or "image"
        if stem in stems.values():
            stem = f"{stem}_{int(image['id'])}"
        stems[int(image["id"])] = stem
    return stems


def yolo_labels(document: dict[str, Any], what: str = "the COCO document") -> dict[int, str]:
    """Image id -> the text of its label file (one ``class x1 y1 ...`` line per annotation with pixels).

    Raises:
        InputError: an annotation on an image the document does not list, of an unknown category, or whose RLE is
            malformed or of another size.
    """
    sizes = {int(image["id"]): (int(image["height"]), int(image["width"])) for image in document.get("images", [])}
    classes = {int(category["id"]): index for index, category in enumerate(document.get("categories", []))}
    lines: dict[int, list[str]] = {image_id: [] for image_id in sizes}
    budget = DecodeBudget()
    for number, annotation in enumerate(document.get("annotations", []), start=1):
        image_id, category = int(annotation["image_id"]), int(annotation["category_id"])
        if image_id not in sizes or category not in classes:
            raise InputError(f"annotation {number} of {what} names an image or category it does not list")
        height, width = sizes[image_id]
        try:
            mask = masks_for_image([annotation["segmentation"]], height, width, f"annotation {number} of {what}",
                                   budget)[0]
        except TraceFormatError as error:  # the decoder's message names the annotation and what is wrong
            raise InputError(str(error)) from None
        polygon = mask_polygon(mask)
        if polygon is None:  # no pixel: nothing to outline (exports leave empty masks out already)
            continue
        scaled = polygon / (width, height)
        lines[image_id].append(" ".join([str(classes[category]), *(f"{v:.{DECIMALS}f}" for v in scaled.ravel())]))
    return {image_id: "".join(f"{line}\n" for line in found) for image_id, found in lines.items()}


def data_yaml(document: dict[str, Any]) -> str:
    """The text of data.yaml: ``train`` and ``val`` (both the ``images`` folder) and the class ``names``."""
    return yaml.safe_dump({"train": "images", "val": "images", "nc": len(yolo_names(document)),
                           "names": yolo_names(document)}, sort_keys=False, allow_unicode=True)


def yolo_files(document: dict[str, Any], image_of: Callable[[int], Image.Image]) -> dict[str, bytes]:
    """Every file of the dataset (relative POSIX path -> bytes), in the layout of the module docstring.

    Args:
        document: a COCO instance document (RLE segmentations, as ``export.coco_document`` writes them).
        image_of: the photo of an image id (PIL), saved as PNG.

    Raises:
        InputError: see :func:`yolo_labels`.
    """
    stems = image_stems(document)
    labels = yolo_labels(document)
    files = {DATA_FILE: data_yaml(document).encode("utf-8")}
    for image_id, stem in stems.items():
        buffer = io.BytesIO()
        image_of(image_id).save(buffer, format="PNG", compress_level=1)
        files[f"images/{stem}.png"] = buffer.getvalue()
        files[f"labels/{stem}.txt"] = labels[image_id].encode("utf-8")
    return files


def write_yolo(document: dict[str, Any], images: Mapping[int, Image.Image] | Callable[[int], Image.Image],
               folder: str | Path) -> Path:
    """Write the dataset into ``folder`` (made if needed; files of the same names are replaced); returns the path of
    its data.yaml. ``images``: image id -> photo, or a function giving it.

    Raises:
        InputError: see :func:`yolo_labels`; an image id without a photo.
        OSError: the folder cannot be written.
    """
    folder = Path(folder)
    for relative, data in yolo_files(document, _image_getter(images)).items():
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return folder / DATA_FILE


def yolo_zip_bytes(document: dict[str, Any], images: Mapping[int, Image.Image] | Callable[[int], Image.Image]) -> bytes:
    """The dataset as a .zip (the layout of the module docstring at its top level). Raises like :func:`write_yolo`."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for relative, data in yolo_files(document, _image_getter(images)).items():
            archive.writestr(relative, data)
    return buffer.getvalue()


def _image_getter(images: Mapping[int, Image.Image] | Callable[[int], Image.Image]) -> Callable[[int], Image.Image]:
    if callable(images):
        return images

    def image_of(image_id: int) -> Image.Image:
        if image_id not in images:
            raise InputError(f"no photo was given for image {image_id}")
        return images[image_id]

    return image_of
