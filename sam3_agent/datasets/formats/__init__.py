"""Benchmark ground truth in its published forms: ReasonSeg (``reasonseg``), RefCOCO/+/g (``refcoco``) and a
simple JSONL format (``jsonl_gt``), read as ``ground_truth.EvalSample`` records whose masks are rasterised on demand;
and video: ReVOS (``revos``), read as ``revos.VideoSample`` records whose per-frame masks are decoded on demand.
"""
