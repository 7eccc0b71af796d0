"""``export``: the corrected masks of a saved run, ``python -m sam3_agent export TRACE --coco out.json
[--coco-polygons out.json] [--yolo DIR] [--png-dir DIR] [--bundle out.zip]``.

Writes the agent's answer with the hand edits recorded in the trace applied, as COCO JSON (RLE or polygon masks),
YOLO segmentation labels, one PNG per mask and/or a bundle .zip; TRACE is a trace folder, its trace.json, a trace
.zip or a bundle .zip. A video trace (its folder, ``video_trace.json`` or its ``.zip``) goes to ``export_video``:
palette PNGs, YouTube-VIS JSON, an overlay video.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TextIO

from ..errors import EXIT_INPUT, EXIT_OK, InputError, Sam3AgentError


def export_command(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """``export``: the corrected masks of a saved trace or bundle as COCO JSON (RLE or polygons), YOLO labels, PNGs
    and/or a bundle."""
    from ..correct.edits import EditState
    from ..correct.export import coco_document, coco_file_name, write_bundle, write_coco, write_mask_pngs
    from ..correct.polygons import polygon_document
    from ..correct.saved import load_trace
    from ..correct.yolo import write_yolo
    from ..video.saved import is_video_trace
    from .export_video import VIDEO_FLAGS, export_video_command, given

    if is_video_trace(args.trace):
        return export_video_command(args, stdout, stderr)
    refused = given(args, VIDEO_FLAGS)
    if refused:
        stderr.write(f"error: {', '.join(refused)} {'is' if len(refused) == 1 else 'are'} for a video trace, and "
                     f"{args.trace} is not one: for a photo's trace use --coco FILE, --coco-polygons FILE, --yolo DIR, "
                     "--png-dir DIR and/or --bundle FILE\n")
        return EXIT_INPUT
    if not (args.coco or args.coco_polygons or args.yolo or args.png_dir or args.bundle):
        stderr.write("error: nothing to write: give --coco FILE, --coco-polygons FILE, --yolo DIR, --png-dir DIR "
                     "and/or --bundle FILE\n")
        return EXIT_INPUT
    def writing(flag: str, path: str, write: Callable[[], Any]) -> Any:
        try:
            return write()
        except OSError as error:
            raise InputError(f"cannot write {flag} {path}: {error.strerror or error}; choose another path") from None

    try:
        try:
            trace = load_trace(args.trace)
        except OSError as error:
            raise InputError(f"cannot read {args.trace}: {error.strerror or error}") from None
        state = EditState.from_trace(trace)
        items = state.corrected_items()
        width, height = trace.image.size
        written = []
        document = coco_document(items, width, height, file_name=coco_file_name(trace))
        if args.coco:
            written.append(writing("--coco", args.coco, lambda: write_coco(document, args.coco)))
        if args.coco_polygons:
            polygons = polygon_document(document)
            written.append(writing("--coco-polygons", args.coco_polygons,
                                   lambda: write_coco(polygons, args.coco_polygons)))
        if args.yolo:
            photo = trace.image.convert("RGB")
            written.append(writing("--yolo", args.yolo, lambda: write_yolo(document, {1: photo}, args.yolo)))
        if args.png_dir:
            pngs = writing("--png-dir", args.png_dir, lambda: write_mask_pngs(items, args.png_dir))
            written.append(f"{len(pngs)} PNG(s) in {args.png_dir}")
        if args.bundle:
            written.append(writing("--bundle", args.bundle, lambda: write_bundle(trace, args.bundle, state)))
    except Sam3AgentError as error:
        stderr.write(f"error: {error}\n")
        return EXIT_INPUT
    for note in state.notes():
        stdout.write(f"note: {note}\n")
    stdout.write(f"{len(items)} corrected mask(s) ({len(state.applied)} edit(s) on the agent's "
                 f"{len(state.original)}); wrote {', '.join(str(w) for w in written)}\n")
    return EXIT_OK
