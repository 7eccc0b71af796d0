"""Datasets, not single photos: batch runs, benchmark ground truth, scoring, and the review store.

This package drives ``agent.Agent`` like any other front end (through its runs' events and traces); nothing below
it imports it. Folders: ``batch`` (running a batch, on one machine or on Ray), ``formats`` (ReasonSeg, RefCOCO,
JSONL ground truth), ``scoring`` (metrics, evaluation, the report), ``review`` (reviewers' decisions, the review
queue and where a queue may be opened from). The ``batch`` and ``eval`` subcommands live in ``cli.datasets``; the
throughput benchmark in ``bench.batch``.

May import: the ground floor, the wings, ``presets`` and the public API.
"""
