"""The ``batch`` and ``eval`` subcommands of ``python -m sam3_agent`` (registered by ``sam3_agent.cli.parser``).

``batch --input ITEMS --out DIR``: ITEMS is a JSONL file of items (photos and clips) or a folder of images and video
files with ``--query`` (``items``); every clip is opened within its caps before any model loads (``clip_checks``);
writes the batch layout (``layout``) with a progress bar; a rerun skips finished items, and loads no model when every
item is finished. A clip runs as ``video`` runs it (``video_runner``; ``--newcomers``, ``--overlay-video``).

``eval --dataset PATH --format reasonseg|refcoco|jsonl|revos --out DIR [--protocol NAME]``: reads the benchmark's ground
truth, keeps the samples the protocol scores (``scoring.protocols``: by default the published one, e.g. the first
query of each ReasonSeg image), runs them as a batch into DIR (resumable the same way), scores them and writes the
report into DIR/eval (``report``); prints the protocol, split and sample counts, the published numbers beside this
run's, and the headline metrics. ``--format revos`` runs each expression as a video item and scores J&F
(``eval_video``).

Exit status: 0 every item finished (an answer, "no mask" or an exhausted round budget); 3 some items failed
(their reasons are in summary.json; a rerun retries them) or a backend could not be loaded; 2 bad input or an
output folder that cannot be written; 130 stopped (Ctrl-C / SIGTERM: what finished is kept).

Heavy modules (torch, transformers, Ray, matplotlib) are imported only when a command runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, TextIO

from ..errors import EXIT_INPUT
from ..limits import MAX_QUERY_CHARS
from .batch_steps import DEFAULT_WORST, exit_status, report_batch, run_batch

DATASET_COMMANDS = ("batch", "eval")
FORMATS = ("reasonseg", "refcoco", "jsonl", "revos")
IMAGE_PROTOCOL_NAMES = ("reasonseg-lisa", "refcoco", "all-queries")  # scoring.protocols.PROTOCOLS
VIDEO_PROTOCOL_NAMES = ("revos-visa", "all-expressions")  # scoring.video_evaluate.PROTOCOLS (a test keeps them one)
PROTOCOL_NAMES = IMAGE_PROTOCOL_NAMES + VIDEO_PROTOCOL_NAMES
REASONSEG_SPLITS = ("train", "val", "test")  # ReasonSeg's split folders


def _add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    from .flags import add_model_arguments, add_video_arguments  # the same flags as `run` and `video`

    add_model_arguments(parser.add_argument_group("models (as for `run`)"),
                        image_limit_help="record input images with more pixels than this as failed, and refuse clips whose "
                                       "frames have more")
    scale = parser.add_argument_group("throughput")
    scale.add_argument("--concurrency", type=int, default=1,
                       help="items in flight at once (per Ray worker with --ray); they share the local model's "
                            "batches, or send concurrent requests to --vlm-server (default 1)")
    scale.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                       help="run on a Ray cluster: ADDRESS to join one (e.g. ray://head:10001 or auto); "
                            "without it, RAY_ADDRESS or a new local Ray")
    scale.add_argument("--ray-workers", type=int,
                       help="Ray workers, one model set each (default: the cluster's GPUs, or 1 without GPUs)")
    clips = parser.add_argument_group("video items (as for `video`)")
    add_video_arguments(clips)
    clips.add_argument("--overlay-video", action="store_true",
                       help="also write each video item's overlay.mp4 (slow: every frame decoded, drawn and encoded)")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")


def add_dataset_commands(commands: Any) -> None:
    """Register ``batch`` and ``eval`` on the CLI's subparsers (``argparse`` ``add_subparsers`` result)."""
    batch = commands.add_parser("batch", help="run the agent over many images; resumable (see docs/datasets.md)")
    batch.add_argument("--input", required=True,
                       help="JSONL file of items ({\"image\", \"query\", \"id\"} or {\"video\", \"query\", "
                            "\"keyframe\"} per line) or a folder of images and video files")
    batch.add_argument("--query", help=f"the query for every file (with a folder; at most {MAX_QUERY_CHARS} "
                                       "characters, as every item's)")
    batch.add_argument("--out", required=True, help="output folder; a rerun into it skips finished items")
    _add_backend_arguments(batch)
    evaluate = commands.add_parser("eval", help="evaluate on a segmentation benchmark (gIoU, cIoU, precision...; "
                                                "J&F on a video benchmark)")
    evaluate.add_argument("--dataset", required=True,
                          help="reasonseg: a split folder (NAME.json + NAME.jpg); refcoco: a dataset folder "
                               "(refs(*).p + instances.json); jsonl: a JSONL file with RLE ground truth; revos: the "
                               "ReVOS folder (JPEGImages/, mask_dict.json, meta_expressions_<split>_.json)")
    evaluate.add_argument("--format", required=True, choices=FORMATS, help="the dataset's format")
    evaluate.add_argument("--out", required=True, help="output folder: the batch, and the report in OUT/eval")
    evaluate.add_argument("--protocol", choices=PROTOCOL_NAMES,
                          help="which samples are scored: reasonseg-lisa (ReasonSeg's default: the first query of "
                               "each image, as LISA and the SAM 3 paper score it), refcoco (RefCOCO's default: every "
                               "sentence, cIoU), all-queries (every query; not comparable with published numbers); "
                               "revos: revos-visa (default: VISA's tools/eval_revos.py, referring and reasoning "
                               "averaged apart) or all-expressions (MeViS's arithmetic)")
    evaluate.add_argument("--split", help="refcoco: which split to evaluate (default val); reasonseg: the split's "
                                          "name for the report (default: the folder's name when it is train, val "
                                          "or test); revos: valid (default), train or train_sub")
    evaluate.add_argument("--split-by", help="refcoco: which refs(SPLIT_BY).p (needed when there are several)")
    evaluate.add_argument("--images", help="folder of the images: refcoco: COCO train2014 (default "
                                           "../images/mscoco/images/train2014 beside the dataset folder); reasonseg: "
                                           "when not beside the JSON files")
    evaluate.add_argument("--limit", type=int, help="evaluate only the first N samples")
    evaluate.add_argument("--worst", type=int, default=DEFAULT_WORST,
                          help=f"worst cases shown with overlays in the report (default {DEFAULT_WORST})")
    _add_backend_arguments(evaluate)


def _split(args: argparse.Namespace) -> str | None:
    """The split the report names: ``--split``; refcoco's default val; a ReasonSeg folder named as a split."""
    if args.split is not None or args.format == "jsonl":
        return args.split
    if args.format == "refcoco":
        return "val"
    name = Path(args.dataset).name
    return name if name in REASONSEG_SPLITS else None


def read_samples(args: argparse.Namespace) -> tuple[list, Any]:
    """The evaluation samples the ``eval`` flags name, chosen by the protocol, and the ``ProtocolRun`` facts
    (protocol, split, counts) the report states.

    Raises:
        InputError: unreadable or malformed ground truth, a protocol that does not apply, or a bad ``--limit``.
    """
    from ..datasets.formats.jsonl_gt import read_jsonl_gt
    from ..datasets.formats.reasonseg import read_reasonseg
    from ..datasets.formats.refcoco import read_refcoco
    from ..datasets.scoring.protocols import ProtocolRun, protocol_for
    from ..errors import InputError

    protocol = protocol_for(args.format, args.protocol)
    split = _split(args)
    if args.limit is not None and args.limit < 1:
        raise InputError(f"--limit must be at least 1, got {args.limit}")
    if args.format == "reasonseg":
        samples = read_reasonseg(args.dataset, images=args.images)
    elif args.format == "refcoco":
        samples = read_refcoco(args.dataset, split=split or "val", split_by=args.split_by, images=args.images)
    else:
        samples = read_jsonl_gt(args.dataset)
    selected = protocol.select(samples)
    run = ProtocolRun(protocol, split, dataset_queries=len(samples), selected=len(selected))
    return selected[: args.limit] if args.limit is not None else selected, run


def batch_command(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """``batch``: run the items of ``--input`` into ``--out``."""
    from ..datasets.batch.items import read_items
    from ..errors import InputError

    try:
        items = read_items(args.input, args.query)
    except InputError as error:
        stderr.write(f"error: {error}\n")
        return EXIT_INPUT
    _layout, result, status = run_batch(items, args, stdout, stderr)
    if result is None:
        return status  # type: ignore[return-value]
    report_batch(result, args.out, stdout)
    if result.stopped:
        stderr.write("error: stopped by the user; run the same command again to go on\n")
    return exit_status(result)


def eval_command(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """``eval``: run a benchmark's samples as a batch into ``--out`` and write the report into ``--out``/eval."""
    from dataclasses import replace

    from ..datasets.scoring.evaluate import evaluate
    from ..datasets.scoring.report import format_metrics, write_report
    from ..errors import InputError

    if args.format == "revos":
        from .eval_video import video_eval_command

        return video_eval_command(args, stdout, stderr)
    try:
        samples, protocol = read_samples(args)
        if args.worst < 0:
            raise InputError(f"--worst must be 0 or more, got {args.worst}")
    except InputError as error:
        stderr.write(f"error: {error}\n")
        return EXIT_INPUT
    stdout.write(f"{len(samples)} sample(s) from {args.dataset} ({args.format}, protocol {protocol.protocol.name}, "
                 f"split {protocol.split or 'unknown'})\n")
    layout, result, status = run_batch([s.item() for s in samples], args, stdout, stderr)
    if result is None:
        return status  # type: ignore[return-value]
    report_batch(result, args.out, stdout, notes=False)  # the metrics below carry the notes
    evaluation = evaluate(samples, layout)
    protocol = replace(protocol, models=tuple(evaluation.models))
    try:
        page = write_report(evaluation, samples, layout, Path(args.out) / "eval",
                            title=f"SAM3 Agent on {Path(args.dataset).name} ({args.format}, {protocol.protocol.name})",
                            worst=args.worst, protocol=protocol)
    except OSError as error:
        stderr.write(f"error: could not write the report: {error.strerror or error}\n")
        return EXIT_INPUT
    stdout.write("\n".join(protocol.lines(evaluation.metrics)) + "\n")
    stdout.write(format_metrics(evaluation.metrics, evaluation.notes) + "\n")
    if evaluation.deviations:
        stdout.write("deviations from the reference agent (docs/reference.md):\n"
                     + "".join(f"  {line}\n" for line in evaluation.deviations))
    if evaluation.unscored:
        stdout.write(f"{len(evaluation.unscored)} sample(s) not scored (see the report)\n")
    stdout.write(f"Wrote {page}\n")
    if result.stopped:
        stderr.write("error: stopped by the user; the report covers the finished samples; run again to go on\n")
    return exit_status(result)


def dataset_command(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """Run the ``batch`` or ``eval`` command that ``args`` names; returns the exit status."""
    return batch_command(args, stdout, stderr) if args.command == "batch" else eval_command(args, stdout, stderr)
