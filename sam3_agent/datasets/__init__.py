"""Datasets, not single photos: batch runs, evaluation on segmentation benchmarks, and a Ray runner.

This package drives ``agent.Agent`` like any other front end (through its events and traces); the core never
imports it. Modules:

- ``items``: what a batch runs (image path, query, id) read from a JSONL file or a folder of images.
- ``layout``: the output folder of a batch: one folder per item (trace + ``item.json``), ``manifest.json``,
  ``coco.json``, ``summary.json``; the per-item records that make a batch resumable.
- ``runner``: runs items on one machine, several in flight, with a progress bar; Ctrl-C keeps what finished.
- ``coalesce``: lets the items in flight share one local VLM's batches (``generate_batch``).
- ``agents``: a fresh ``Agent`` per item over backends loaded once.
- ``ray_runner``: the same batch on a Ray cluster (one model set per worker).
- ``ground_truth``, ``reasonseg``, ``refcoco``, ``jsonl_gt``: benchmark ground truth in its published formats.
- ``metrics``, ``evaluate``, ``report``: gIoU, cIoU, precision at IoU thresholds, no-target accuracy,
  breakdowns; the HTML/CSV/JSON report.
- ``cli``: the ``batch`` and ``eval`` subcommands of ``python -m sam3_agent``.
- ``bench``: items per minute, several in flight vs one at a time.
"""
