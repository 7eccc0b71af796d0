"""``eval --format revos``: a reasoning video segmentation benchmark run as a batch of video items and scored by J&F.

``python -m sam3_agent eval --format revos --dataset ReVOS [--split valid] [--protocol revos-visa] --out DIR``: every
expression of the split (``formats.revos.read_revos``, the whole split checked first) runs as a video item
(``scoring.video_batch.video_items``: the video's frame folder as the clip, keyframe 0) into DIR, resumable as any
batch; then each is scored over every frame of its video by ``scoring.video_evaluate`` under the protocol named, and
the report goes into DIR/eval (``scoring.video_report``). Exit statuses as ``eval``'s.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from ..errors import EXIT_INPUT, InputError


def video_eval_command(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """``eval`` on a ReVOS folder (see the module docstring); returns the exit status."""
    from ..datasets.formats.revos import read_revos
    from ..datasets.scoring.video_batch import evaluate_video_batch, video_items
    from ..datasets.scoring.video_evaluate import PROTOCOLS, protocol_named
    from ..datasets.scoring.video_report import VideoProtocolRun, format_video_metrics, write_video_report
    from .batch_steps import exit_status, report_batch, run_batch
    from .flags import clip_caps

    split = args.split or "valid"
    try:
        if args.protocol is not None and args.protocol not in PROTOCOLS:
            raise InputError(f"--protocol {args.protocol} does not apply to revos datasets; use one of: "
                             f"{', '.join(PROTOCOLS)} (default {protocol_named(None).name})")
        protocol = protocol_named(args.protocol)
        if args.limit is not None and args.limit < 1:
            raise InputError(f"--limit must be at least 1, got {args.limit}")
        samples = read_revos(args.dataset, split)
        selected = samples[: args.limit] if args.limit is not None else samples
        items = video_items(selected, args.dataset, caps=clip_caps(args))
    except InputError as error:
        stderr.write(f"error: {error}\n")
        return EXIT_INPUT
    stdout.write(f"{len(selected)} expression(s) from {args.dataset} (revos, protocol {protocol.name}, split "
                 f"{split}), each a clip of its video's frames\n")
    layout, result, status = run_batch(items, args, stdout, stderr)
    if result is None:
        return status  # type: ignore[return-value]
    report_batch(result, args.out, stdout, notes=False)  # the metrics below carry the notes
    scored = evaluate_video_batch(selected, items, layout, protocol.name)
    run = VideoProtocolRun(split=split, dataset_expressions=len(samples), selected=len(selected))
    try:
        page = write_video_report(scored, items, layout, Path(args.out) / "eval",
                                  title=f"SAM3 Agent on {Path(args.dataset).name} (revos {split}, {protocol.name})",
                                  run=run)
    except OSError as error:
        stderr.write(f"error: could not write the report: {error.strerror or error}\n")
        return EXIT_INPUT
    stdout.write(format_video_metrics(scored, run) + "\n")
    if scored.evaluation.unscored:
        stdout.write(f"{len(scored.evaluation.unscored)} expression(s) not scored (see the report)\n")
    stdout.write(f"Wrote {page}\n")
    if result.stopped:
        stderr.write("error: stopped by the user; the report covers the finished expressions; run again to go on\n")
    return exit_status(result)
