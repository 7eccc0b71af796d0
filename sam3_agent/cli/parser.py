"""The command line's parser: every subcommand and flag of ``python -m sam3_agent`` (and ``sam3-agent``).

Only ``argparse`` and the light flag modules are imported here, so ``--help`` answers before torch, transformers or
Gradio load (the commands themselves live in ``run``, ``video``, ``export`` and ``datasets`` and import them when they
run).
"""

from __future__ import annotations

import argparse

from ..limits import MAX_QUERY_CHARS
from .datasets import add_dataset_commands
from .flags import add_model_arguments
from .video import add_video_command


def build_parser(prog: str = "python -m sam3_agent") -> argparse.ArgumentParser:
    """The parser of every subcommand; ``prog`` is the command's name as the usage lines show it."""
    parser = argparse.ArgumentParser(prog=prog, description="SAM3 Agent command line")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="answer a query on one image and write the trace and masks")
    run.add_argument("--image", required=True, help="path of the photo (JPEG, PNG, WebP, TIFF...)")
    run.add_argument("--query", required=True, help='what to segment, e.g. "the leftmost child in a blue vest" '
                                                    f'(at most {MAX_QUERY_CHARS} characters)')
    run.add_argument("--out", required=True, help="output folder (created if needed)")
    add_model_arguments(run)
    run.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    export = commands.add_parser(
        "export", help="write the corrected masks of a saved run (COCO, polygons, YOLO, PNGs, bundle; for a video "
                       "trace: palette PNGs, YouTube-VIS JSON, overlay video)",
        description="Write the corrected masks of a saved run. A photo's trace: its hand edits are applied to the "
                    "agent's masks. A video trace already stores the corrected masks (a correction replaces the "
                    "frames it re-propagated; its edits are the history), so they are written as they are.")
    export.add_argument("trace", help="trace folder, trace.json, trace .zip or bundle .zip; or a video trace (its "
                                      "folder, video_trace.json or .zip)")
    export.add_argument("--coco", help="COCO instance-segmentation JSON file to write (RLE masks)")
    export.add_argument("--coco-polygons", metavar="FILE",
                        help="COCO instance-segmentation JSON file to write with polygon masks (holes cut in)")
    export.add_argument("--yolo", metavar="DIR",
                        help="folder for YOLO segmentation labels: data.yaml, images/ and labels/ (Ultralytics layout)")
    export.add_argument("--png-dir", help="folder for one 0/255 PNG per mask (mask_001.png...); for a video trace, one "
                                          "palette PNG per frame (00000.png...; pixel value = object id)")
    export.add_argument("--bundle", help="bundle .zip to write (image, query, agent and corrected masks, trace)")
    export.add_argument("--ytvis", metavar="FILE",
                        help="video trace: YouTube-VIS-style JSON file to write (RLE per frame per object)")
    export.add_argument("--overlay-video", metavar="FILE",
                        help="video trace: H.264 MP4 of the clip with its objects drawn (needs --video)")
    export.add_argument("--video", metavar="CLIP",
                        help="the clip the video trace was made on, for --overlay-video (a trace keeps masks, not "
                             "frames; another clip is refused)")
    export.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    add_video_command(commands)
    add_dataset_commands(commands)  # batch, eval (sam3_agent.datasets)
    return parser
