"""Evaluation protocols: which samples a benchmark's published numbers score, and those numbers.

A dataset can be scored several ways, and only the way the published numbers were made gives comparable
figures. Each protocol here says which queries become samples and which metric is its headline; the pixel rules
are the same in all (``metrics``: ignore pixels left out of intersection and union, an empty prediction on an
empty target counts IoU 1, gIoU the mean of per-sample IoU, cIoU summed intersection over summed union):

- ``reasonseg-lisa`` (ReasonSeg's default): LISA's ReasonSeg validation, the protocol of LISA's and the SAM 3
  paper's agent tables: **only the first query of each image** is scored (LISA's loader keeps ``text[0]`` of each
  image's JSON), one sample per image; headline gIoU (and cIoU).
- ``refcoco`` (RefCOCO/+/g's default): every sentence of every reference in the split is a sample, as is
  standard for referring segmentation (LAVT, LISA, the SAM 3 paper); headline cIoU.
- ``all-queries`` (any format; JSONL's default): every query of every image is a sample. On ReasonSeg it scores
  more samples than the published protocol (every phrasing of each image), so its numbers are not comparable
  with the published ones.

``PUBLISHED`` holds the SAM 3 paper's agent figures (SAM 3 Agent with each VLM) for the protocol and split they
were measured on; the report prints them beside this run's, marking the row of the model that ran.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ...errors import InputError
from ..formats.ground_truth import EvalSample
from .metrics import Metrics


@dataclass(frozen=True)
class EvalProtocol:
    """How a benchmark's samples are chosen and summed up.

    Attributes:
        name: as ``eval --protocol`` takes it.
        formats: the dataset formats it applies to.
        first_query_per_image: only the first sample of each image is scored (in dataset order).
        headline: ``"gIoU"`` or ``"cIoU"``: the metric its published numbers report.
        comparable: its numbers can be set beside published ones.
        description: one sentence for the report.
    """

    name: str
    formats: tuple[str, ...]
    first_query_per_image: bool
    headline: str
    comparable: bool
    description: str

    def select(self, samples: Sequence[EvalSample]) -> list[EvalSample]:
        """The samples this protocol scores, in dataset order."""
        if not self.first_query_per_image:
            return list(samples)
        seen: set[str] = set()
        chosen = []
        for sample in samples:
            if str(sample.image) not in seen:
                seen.add(str(sample.image))
                chosen.append(sample)
        return chosen


PROTOCOLS = {p.name: p for p in (
    EvalProtocol("reasonseg-lisa", ("reasonseg",), True, "gIoU", True,
                 "LISA's ReasonSeg evaluation, as in LISA's and the SAM 3 paper's agent tables: the first query of "
                 "each image only; ignore pixels excluded; gIoU = mean per-image IoU (empty on empty counts 1), "
                 "cIoU = summed intersection / summed union"),
    EvalProtocol("refcoco", ("refcoco",), False, "cIoU", True,
                 "RefCOCO/+/g as is standard: every sentence of every reference in the split; headline cIoU = "
                 "summed intersection / summed union"),
    EvalProtocol("all-queries", ("reasonseg", "refcoco", "jsonl"), False, "gIoU", False,
                 "every query of every image (not the published protocol: not comparable with published numbers)"),
)}
DEFAULT_PROTOCOL = {"reasonseg": "reasonseg-lisa", "refcoco": "refcoco", "jsonl": "all-queries"}

PUBLISHED_SOURCE = "SAM 3 paper, agent tables (SAM 3 Agent with each VLM)"
# (protocol, split) -> (metric, {model: value in %}); values as the SAM 3 paper prints them.
PUBLISHED: dict[tuple[str, str], tuple[str, dict[str, float]]] = {
    ("reasonseg-lisa", "val"): ("gIoU", {"Qwen2.5-VL 7B": 62.2, "Qwen2.5-VL 72B": 74.6, "Qwen3-VL 8B Thinking": 68.5,
                                         "Qwen3-VL 235B Thinking": 76.6, "Gemini 2.5 Pro": 77.0}),
    ("reasonseg-lisa", "test"): ("gIoU", {"Qwen2.5-VL 7B": 63.0, "Qwen2.5-VL 72B": 70.8, "Qwen3-VL 8B Thinking": 70.2,
                                          "Qwen3-VL 235B Thinking": 73.7, "Gemini 2.5 Pro": 74.0}),
}
# A model id (Hub id, folder or server model name) -> the paper's name for it.
_PAPER_MODELS = (
    (re.compile(r"qwen2\.5-vl-7b", re.IGNORECASE), "Qwen2.5-VL 7B"),
    (re.compile(r"qwen2\.5-vl-72b", re.IGNORECASE), "Qwen2.5-VL 72B"),
    (re.compile(r"qwen3-vl-8b-thinking", re.IGNORECASE), "Qwen3-VL 8B Thinking"),
    (re.compile(r"qwen3-vl-235b(-a22b)?-thinking", re.IGNORECASE), "Qwen3-VL 235B Thinking"),
    (re.compile(r"gemini-2\.5-pro", re.IGNORECASE), "Gemini 2.5 Pro"),
)


def protocol_for(dataset_format: str, name: str | None) -> EvalProtocol:
    """The protocol ``name`` (``None``: the format's default) checked against the dataset's format.

    Raises:
        InputError: an unknown protocol, or one that does not apply to this format (the message lists those that do).
    """
    name = name or DEFAULT_PROTOCOL[dataset_format]
    usable = [p for p, protocol in PROTOCOLS.items() if dataset_format in protocol.formats]
    if name not in PROTOCOLS or dataset_format not in PROTOCOLS[name].formats:
        raise InputError(f"--protocol {name} does not apply to {dataset_format} datasets; use one of: "
                         f"{', '.join(usable)} (default {DEFAULT_PROTOCOL[dataset_format]})")
    return PROTOCOLS[name]


def paper_model(model_id: str) -> str | None:
    """The SAM 3 paper's name for the VLM ``model_id`` (e.g. ``Qwen/Qwen2.5-VL-7B-Instruct`` -> ``Qwen2.5-VL 7B``),
    or ``None`` when the paper has no such model."""
    return next((paper for pattern, paper in _PAPER_MODELS if pattern.search(model_id)), None)


@dataclass(frozen=True)
class ProtocolRun:
    """What the report says about how its numbers were made.

    Attributes:
        protocol: the protocol scored.
        split: the dataset's split (``None`` when it cannot be told).
        dataset_queries: samples the dataset holds before the protocol's selection.
        selected: samples the protocol selects (before ``--limit``).
        models: the VLMs that answered (their ids, from the batch records).
    """

    protocol: EvalProtocol
    split: str | None
    dataset_queries: int
    selected: int
    models: tuple[str, ...] = ()

    def published(self) -> tuple[str, dict[str, float]] | None:
        """``(metric, {model: value in %})`` published for this protocol and split, or ``None``."""
        return PUBLISHED.get((self.protocol.name, self.split or "")) if self.protocol.comparable else None

    def lines(self, metrics: Metrics) -> list[str]:
        """The protocol, split and sample counts, and the published numbers beside this run's (printed text)."""
        p = self.protocol
        lines = [f"protocol {p.name}: {p.description}",
                 f"split {self.split or 'unknown'}: {metrics.samples} sample(s) scored of {self.selected} the "
                 f"protocol selects from {self.dataset_queries} in the dataset"]
        published = self.published()
        ours = metrics.giou if p.headline == "gIoU" else metrics.ciou
        ours_text = "n/a" if ours is None else f"{100 * ours:.1f}"
        if published is None:
            why = ("this protocol is not the published one" if not p.comparable else
                   f"none recorded for {p.name} on split {self.split or 'unknown'}")
            return [*lines, f"published numbers: {why}; this run {p.headline} {ours_text}"]
        metric, numbers = published
        matched = {paper_model(m) for m in self.models} - {None}
        rows = ", ".join(f"{model} {value:.1f}{' (this model)' if model in matched else ''}"
                         for model, value in numbers.items())
        lines.append(f"published ({PUBLISHED_SOURCE}), {metric} on {self.split}: {rows}")
        models = ", ".join(self.models) or "unknown"
        lines.append(f"this run ({models}): {metric} {ours_text}" + "".join(
            f"; {model} published {numbers[model]:.1f}, difference {100 * ours - numbers[model]:+.1f}"
            for model in sorted(matched) if ours is not None and model in numbers))
        return lines

    def to_json(self, metrics: Metrics) -> dict[str, object]:
        """What ``metrics.json`` holds about the protocol (``lines`` as data)."""
        published = self.published()
        return {
            "name": self.protocol.name, "description": self.protocol.description, "split": self.split,
            "headline": self.protocol.headline, "comparable": self.protocol.comparable,
            "samples_scored": metrics.samples, "samples_selected": self.selected,
            "dataset_queries": self.dataset_queries, "models": list(self.models),
            "published": None if published is None else {
                "source": PUBLISHED_SOURCE, "metric": published[0], "values_percent": published[1],
                "this_model": sorted({paper_model(m) for m in self.models} - {None}),
            },
        }
