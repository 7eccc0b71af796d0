"""Datasets, not single photos: batch runs, evaluation on segmentation benchmarks, and a Ray runner.

This package drives ``agent.Agent`` like any other front end (through its runs' events and traces); the core never
imports it. Modules:

- ``items``: what a batch runs (image path, query, id) read from a JSONL file or a folder of images.
- ``records``: one item's outcome (``item.json``), written after its trace: what makes a batch resumable.
- ``layout``: the output folder of a batch (one folder per item); ``outputs``: its dataset-level files
  (``manifest.json``, ``coco.json``, ``summary.json``), derived from the records; ``files``: atomic writes.
- ``agents``: a fresh ``Agent`` per item over backends loaded once; ``coalesce``: items in flight sharing one local
  VLM's batches (``generate_batch``).
- ``runner``: a batch on one machine (several items in flight, progress bar, Ctrl-C); ``ray_runner``: on Ray.
- ``ground_truth``, ``reasonseg``, ``refcoco``, ``jsonl_gt``: benchmark ground truth in its published formats.
- ``metrics``, ``evaluate``, ``report``: gIoU, cIoU, precision at IoU thresholds, no-target accuracy and
  breakdowns; the HTML / CSV / JSON report.
- ``cli``: the ``batch`` and ``eval`` subcommands of ``python -m sam3_agent``; ``bench``: items per minute,
  several in flight vs one at a time (``python -m sam3_agent.datasets.bench``).
"""
