"""A clip's objects as the files people load elsewhere: palette PNGs (DAVIS), a YouTube-VIS JSON, an overlay video.

- **Palette PNGs** (DAVIS convention): one 8-bit PNG per frame, ``00000.png`` on, pixel value = object id (0 =
  background), the palette giving each id the colour it has in the overlay. Where two objects overlap, the smaller
  one (fewer pixels on that frame) is drawn on top, so it is not hidden.
- **YouTube-VIS JSON**: the dataset layout of YouTube-VIS (``videos``, ``annotations``, ``categories``), one
  annotation per object with a COCO RLE (``{"size": [H, W], "counts": str}``, as ``pycocotools.mask.decode`` reads
  it) or ``null`` for every frame, its ``areas``, ``bboxes`` (xywh pixels) and the object's mean ``score``.
- **Overlay video**: H.264 in an MP4 (yuv420p, the index at the front), which browsers play; each frame drawn with
  its objects filled, outlined and numbered by id, at the clip's timestamps (a variable frame rate stays so).

PIL writes the PNGs and PyAV (FFmpeg) encodes the video; what remains here is the layout of each format.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from .. import rle
from ..imaging.draw import DrawStyle, mask_colors
from ..imaging.overlay import draw_numbered
from ..imaging.regions import MaskRegions
from ..mask_set import Masks
from ..trace.writer import write_atomic
from .records import VideoTrace
from .tracks import MAX_OBJECTS, FrameMask, Tracks

OBJECT_COLORS = mask_colors(MAX_OBJECTS)  # object id k has colour OBJECT_COLORS[k - 1], in every view and export
VIDEO_TIME_BASE = Fraction(1, 1000)  # millisecond presentation times: the clip's timestamps kept to the ms
VIDEO_CRF = 23  # x264's default quality
PNG_DIR = "masks"


def palette() -> list[int]:
    """The 768-value palette of the PNGs: index 0 black, index k the colour of object k."""
    return [0, 0, 0, *OBJECT_COLORS.reshape(-1).tolist()]


def id_map(tracks: Tracks, frame: int) -> np.ndarray:
    """uint8 (H, W): the object id at each pixel of ``frame`` (0: none); the smaller of two overlapping objects wins."""
    out = np.zeros((tracks.height, tracks.width), dtype=np.uint8)
    present = tracks.masks_on(frame)
    areas = {oid: int(rle.areas([m.counts], tracks.height, tracks.width)[0]) for oid, m in present.items()}
    for object_id in sorted(present, key=lambda oid: (-areas[oid], oid)):  # largest first: smaller ones on top
        out[rle.decode_one(present[object_id].counts, tracks.height, tracks.width)] = object_id
    return out


def palette_png(tracks: Tracks, frame: int) -> Image.Image:
    """The palette image (mode ``"P"``) of ``frame``."""
    image = Image.fromarray(id_map(tracks, frame), mode="P")
    image.putpalette(palette())
    return image


def _png_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=False)
    return buffer.getvalue()


def png_name(frame: int) -> str:
    return f"{frame:05d}.png"


def write_palette_pngs(tracks: Tracks, folder: str | Path) -> list[Path]:
    """One palette PNG per frame into ``folder`` (created), each written whole (temporary name, renamed).

    Raises:
        OSError: a file could not be written.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for frame in range(tracks.frame_count):
        path = folder / png_name(frame)
        write_atomic(path, _png_bytes(palette_png(tracks, frame)))
        paths.append(path)
    return paths


def palette_zip_bytes(tracks: Tracks) -> bytes:
    """The palette PNGs as one ``.zip`` (``masks/00000.png`` ...), in memory (PNGs are stored, not deflated)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for frame in range(tracks.frame_count):
            archive.writestr(f"{PNG_DIR}/{png_name(frame)}", _png_bytes(palette_png(tracks, frame)))
    return buffer.getvalue()


def ytvis_document(trace: VideoTrace, video_id: int = 1) -> dict[str, Any]:
    """The YouTube-VIS-style document of the trace's objects (JSON-compatible).

    ``videos[0]`` names the frames as the palette PNGs are named (``<clip stem>/00000.png``...), with the clip's
    size and length; each object is one annotation of category 1 (the query).
    """
    tracks, clip = trace.tracks, trace.clip
    stem = Path(clip.file_name).stem if clip.file_name else "clip"
    annotations = []
    for row in tracks.summary():
        segmentations: list[Any] = []
        areas: list[Any] = []
        boxes: list[Any] = []
        for frame in range(tracks.frame_count):
            mask = tracks.present(row.object_id, frame)  # an empty mask is no mask, as in the PNGs
            if mask is None:
                segmentations.append(None)
                areas.append(None)
                boxes.append(None)
                continue
            segmentations.append({"size": [tracks.height, tracks.width], "counts": rle.text(mask.counts)})
            areas.append(int(rle.areas([mask.counts], tracks.height, tracks.width)[0]))
            x1, y1, x2, y2 = (float(v) for v in rle.tight_boxes([mask.counts], tracks.height, tracks.width)[0])
            boxes.append([x1, y1, x2 - x1, y2 - y1])
        annotations.append({
            "id": row.object_id, "video_id": video_id, "category_id": 1, "iscrowd": 0, "score": row.mean_score,
            "label": row.label, "segmentations": segmentations, "areas": areas, "bboxes": boxes,
        })
    return {
        "info": {"description": "SAM3 Agent tracks", "query": trace.query},
        "videos": [{"id": video_id, "width": tracks.width, "height": tracks.height, "length": tracks.frame_count,
                    "file_names": [f"{stem}/{png_name(f)}" for f in range(tracks.frame_count)],
                    "timestamps": list(clip.timestamps)}],
        "categories": [{"id": 1, "name": trace.query}],
        "annotations": annotations,
    }


def write_ytvis(trace: VideoTrace, path: str | Path) -> Path:
    """Write ``ytvis_document(trace)`` to ``path`` as one step; returns the path."""
    path = Path(path)
    write_atomic(path, json.dumps(ytvis_document(trace), separators=(",", ":")).encode())
    return path


def draw_objects(image: Image.Image, masks: dict[int, FrameMask]) -> Image.Image:
    """``image`` with each object of ``masks`` (id -> ``FrameMask``, at the image's size) filled, outlined and
    numbered by its id, in its colour."""
    out = np.array(image.convert("RGB"), dtype=np.uint8)
    if not masks:
        return Image.fromarray(out)
    height, width = out.shape[:2]
    ids = sorted(masks)
    held = Masks.from_rle([masks[i].counts for i in ids], np.ones(len(ids), np.float32), np.zeros((len(ids), 4)),
                          size=(height, width))
    style = DrawStyle.for_size(width, height)
    draw_numbered(out, MaskRegions(held, height, width, style.contour_width + 1), ids, style,
                  colors=OBJECT_COLORS[np.asarray(ids) - 1])
    return Image.fromarray(out)


def write_overlay_video(trace: VideoTrace, clip: Any, path: str | Path,
                        on_frame: Callable[[int], None] | None = None) -> Path:
    """Encode the clip with its objects drawn (``draw_objects``) as an H.264 MP4 at ``path``, one video frame per
    clip frame at the clip's timestamps; written to a temporary name and renamed when complete.

    Args:
        clip: the ``video.clip.Clip`` the trace was made on (its frames are read in order, one at a time).
        on_frame: called with each frame index once it is encoded (progress).

    Raises:
        InputError: the clip's frames cannot be read.
        OSError: the file cannot be written.
    """
    import av

    path = Path(path)
    tracks, info = trace.tracks, trace.clip
    width, height = tracks.width + tracks.width % 2, tracks.height + tracks.height % 2  # yuv420p needs even sides
    temporary = path.with_name(f".{path.name}.partial")
    rate = Fraction(info.fps).limit_denominator(1001) if info.fps else Fraction(25)
    try:
        with av.open(str(temporary), mode="w", format="mp4", options={"movflags": "+faststart"}) as container:
            stream = container.add_stream("libx264", rate=rate)
            stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
            stream.time_base = VIDEO_TIME_BASE
            stream.options = {"crf": str(VIDEO_CRF), "preset": "veryfast"}
            last_pts = -1
            for index, image in clip.frames(range(tracks.frame_count)):
                drawn = draw_objects(image, tracks.masks_on(index))
                if drawn.size != (width, height):
                    padded = Image.new("RGB", (width, height))
                    padded.paste(drawn)
                    drawn = padded
                frame = av.VideoFrame.from_image(drawn)
                pts = int(round(info.timestamps[index] / VIDEO_TIME_BASE)) if index < len(info.timestamps) else 0
                frame.pts = max(pts, last_pts + 1)  # strictly increasing, as the muxer requires
                frame.time_base = VIDEO_TIME_BASE
                last_pts = frame.pts
                container.mux(stream.encode(frame))
                if on_frame is not None:
                    on_frame(index)
            container.mux(stream.encode(None))
        temporary.replace(path)
    finally:
        temporary.unlink(missing_ok=True)
    return path
