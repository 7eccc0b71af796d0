"""Benchmark ground truth in its published forms: ReasonSeg, RefCOCO/+/g, and a simple JSONL format, as
``ground_truth.Sample`` records rasterised on demand.
"""
