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
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from ..errors import EXIT_BACKEND, EXIT_INPUT, EXIT_OK, EXIT_STOPPED
from ..limits import MAX_QUERY_CHARS

DATASET_COMMANDS = ("batch", "eval")
FORMATS = ("reasonseg", "refcoco", "jsonl", "revos")
IMAGE_PROTOCOL_NAMES = ("reasonseg-lisa", "refcoco", "all-queries")  # scoring.protocols.PROTOCOLS
VIDEO_PROTOCOL_NAMES = ("revos-visa", "all-expressions")  # scoring.video_evaluate.PROTOCOLS (a test keeps them one)
PROTOCOL_NAMES = IMAGE_PROTOCOL_NAMES + VIDEO_PROTOCOL_NAMES
REASONSEG_SPLITS = ("train", "val", "test")  # ReasonSeg's split folders
DEFAULT_WORST = 8


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


def _prepare_batch(items: Sequence, args: argparse.Namespace) -> tuple[Any, Any, Any, Any]:
    """The backend settings, the agent config, the layout of the output folder and the video options, from the flags
    checked before any model loads, and every clip checked within its caps (``clip_checks``). The folder is checked
    (``trace.out_folder.check_out_folder``) but not made: ``layout.prepare()`` makes it once the models are ready, so
    a refused batch leaves the disk as it was.

    Raises:
        InputError: out-of-range or ignored flags, an unreadable script, an output folder that cannot be written, or
            clips refused (one message names each item).
    """
    from ..datasets.batch.clip_checks import check_clips
    from ..datasets.batch.layout import BatchLayout
    from ..datasets.batch.video_runner import VideoOptions
    from ..errors import InputError
    from ..trace.out_folder import check_out_folder
    from .flags import agent_config, backend_settings, clip_caps, video_config

    settings = backend_settings(args)  # checked: out-of-range or ignored flags are refused before any load
    if args.concurrency < 1:
        raise InputError(f"--concurrency must be at least 1, got {args.concurrency}")
    if args.ray_workers is not None and args.ray_workers < 1:
        raise InputError(f"--ray-workers must be at least 1, got {args.ray_workers}")
    config = agent_config(args)
    video = VideoOptions(config=video_config(args), caps=clip_caps(args), overlay_video=args.overlay_video)
    layout = BatchLayout(args.out, items)
    check_out_folder(args.out)
    check_clips(items, video.caps)
    return settings, config, layout, video


def _run_on_ray(items: Sequence, layout: Any, settings: Any, config: Any, video: Any, args: argparse.Namespace,
                stdout: TextIO, progress: TextIO | None) -> Any:
    """Run the batch on Ray workers, each loading its own models; returns the ``BatchResult``."""
    from ..datasets.batch.ray_runner import run_batch_on_ray

    where = f" at {args.ray}" if args.ray else ""
    stdout.write(f"Starting Ray{where} and loading the models on its workers...\n")
    stdout.flush()
    return run_batch_on_ray(items, layout, settings, config, address=args.ray or None, workers=args.ray_workers,
                            concurrency=args.concurrency, max_image_pixels=args.max_image_pixels, progress=progress,
                            video=video)


def _run_locally(items: Sequence, layout: Any, settings: Any, config: Any, video: Any, args: argparse.Namespace,
                 stdout: TextIO, progress: TextIO | None) -> Any:
    """Load the models here (the video tracker too when there are video items), run the batch over them and close
    them; returns the ``BatchResult``."""
    from ..datasets.batch.agents import BatchAgents
    from ..datasets.batch.items import VideoItem
    from ..datasets.batch.runner import run_batch
    from .flags import with_planned_batch

    stdout.write("Loading models...\n")
    stdout.flush()
    loaded = time.perf_counter()
    agents = BatchAgents.load(settings, config, concurrency=args.concurrency,
                              video=any(isinstance(item, VideoItem) for item in items))
    agents.config = with_planned_batch(config, args, agents.backends.settings)  # smaller on a small GPU
    stdout.write(f"Models ready in {time.perf_counter() - loaded:.1f} s\n")
    stdout.flush()
    try:
        layout.prepare()  # the batch starts: now its folder may be made
        return run_batch(items, layout, agents, concurrency=args.concurrency, max_image_pixels=args.max_image_pixels,
                         progress=progress, video=video)
    finally:
        agents.close()


def _run_batch(
    items: Sequence, args: argparse.Namespace, stdout: TextIO, stderr: TextIO
) -> tuple[Any, Any, int | None]:
    """Check the output folder, load the models (locally or on Ray workers), make the folder and run the batch; when
    every item is finished already, load nothing and only rewrite the dataset files.

    Returns:
        ``(layout, result, None)``, or ``(layout or None, None, exit status)`` when it could not run.
    """
    from ..datasets.batch.runner import BatchProgress, unfinished_items
    from ..errors import BackendError, InputError

    progress = stderr if args.progress else None
    try:
        settings, config, layout, video = _prepare_batch(items, args)
    except InputError as error:
        stderr.write(f"error: {error}\n")
        return None, None, EXIT_INPUT
    if args.preset == "tiny":
        stdout.write("Note: the tiny preset's models have random weights; their masks and text mean nothing.\n")
    run = _run_on_ray if args.ray is not None else _run_locally
    try:
        if not unfinished_items(items, layout.read_records(items)):
            stdout.write(f"Nothing to run: all {len(items)} item(s) in {args.out} are already finished, so no model "
                         "is loaded.\n")
            layout.prepare()  # the folder holds the finished batch: only its leftover temporary files go
            return layout, BatchProgress(layout, items, None).close(stopped=False), None  # dataset files rewritten
        result = run(items, layout, settings, config, video, args, stdout, progress)
    except InputError as error:
        stderr.write(f"error: {error}\n")
        return layout, None, EXIT_INPUT
    except BackendError as error:
        stderr.write(f"error: {error}\n")
        return layout, None, EXIT_BACKEND
    except OSError as error:
        stderr.write(f"error: could not write the outputs to {args.out}: {error.strerror or error}\n")
        return layout, None, EXIT_INPUT
    return layout, result, None


def _report_batch(result: Any, out: str, stdout: TextIO, notes: bool = True) -> None:
    summary = result.summary
    statuses = ", ".join(f"{k} {v}" for k, v in summary["statuses"].items())
    rate = f", {result.items_per_minute:.1f} items/min" if result.ran else ""
    stdout.write(f"Batch: {summary['items']} item(s): {statuses}; ran {result.ran}, skipped {result.skipped} "
                 f"already finished, {result.seconds:.1f} s{rate}\n")
    for note in summary["notes"] if notes else ():
        stdout.write(f"note: {note}\n")
    stdout.write(f"Wrote {Path(out) / 'manifest.json'}, {Path(out) / 'coco.json'}, {Path(out) / 'summary.json'}\n")


def _exit_status(result: Any) -> int:

    if result.stopped:
        return EXIT_STOPPED
    return EXIT_BACKEND if result.summary["statuses"].get("failed") or result.summary["statuses"].get(
        "cancelled") else EXIT_OK


def batch_command(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """``batch``: run the items of ``--input`` into ``--out``."""
    from ..datasets.batch.items import read_items
    from ..errors import InputError

    try:
        items = read_items(args.input, args.query)
    except InputError as error:
        stderr.write(f"error: {error}\n")
        return EXIT_INPUT
    _layout, result, status = _run_batch(items, args, stdout, stderr)
    if result is None:
        return status  # type: ignore[return-value]
    _report_batch(result, args.out, stdout)
    if result.stopped:
        stderr.write("error: stopped by the user; run the same command again to go on\n")
    return _exit_status(result)


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
    layout, result, status = _run_batch([s.item() for s in samples], args, stdout, stderr)
    if result is None:
        return status  # type: ignore[return-value]
    _report_batch(result, args.out, stdout, notes=False)  # the metrics below carry the notes
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
    return _exit_status(result)


def dataset_command(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """Run the ``batch`` or ``eval`` command that ``args`` names; returns the exit status."""
    return batch_command(args, stdout, stderr) if args.command == "batch" else eval_command(args, stdout, stderr)
