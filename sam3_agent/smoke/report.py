"""The smoke command's results: one record per check, timed and with its peak GPU memory, as JSON and as text."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

MIB = 1024**2


@dataclass
class CheckResult:
    """One check.

    Attributes:
        name: short id (``"sam3_precision"``...).
        passed: True / False, or ``None`` when not judged (random tiny weights prove code paths, not answers).
        summary: one line for people.
        details: the measurements (JSON-serialisable).
        seconds: wall time.
        peak_gpu_mib: the most GPU memory allocated by tensors during the check (``None`` on the CPU).
    """

    name: str
    passed: bool | None = None
    summary: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    peak_gpu_mib: float | None = None


@contextmanager
def measured(result: CheckResult) -> Iterator[CheckResult]:
    """Time ``result``'s check and record its peak GPU memory (``torch.cuda.max_memory_allocated`` since the start);
    an exception fails the check with its message instead of stopping the smoke run."""
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    try:
        yield result
    except Exception as error:  # a failed check is reported, the others still run
        result.passed = False
        result.summary = f"failed: {str(error).strip() or type(error).__name__}"
        result.details["error"] = str(error)
    finally:
        result.seconds = round(time.perf_counter() - started, 2)
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
            result.peak_gpu_mib = round(torch.cuda.max_memory_allocated() / MIB, 1)


@dataclass
class SmokeReport:
    """Everything the smoke run found: the environment and every check, in order."""

    environment: dict[str, Any]
    checks: list[CheckResult] = field(default_factory=list)

    @property
    def failed(self) -> list[CheckResult]:
        return [check for check in self.checks if check.passed is False]

    def to_json(self) -> str:
        return json.dumps({"environment": self.environment, "checks": [asdict(c) for c in self.checks],
                           "passed": not self.failed}, indent=1, default=str)

    def write(self, path: Path) -> None:
        """Write the JSON to ``path`` (through a temporary name, renamed into place)."""
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(self.to_json(), encoding="utf-8")
        temporary.replace(path)

    def summary(self) -> str:
        """The readable summary: the environment, then one line per check."""
        env = self.environment
        lines = [f"SAM3 Agent smoke run: {env.get('device_name', env.get('device'))}, torch {env.get('torch')}, "
                 f"transformers {env.get('transformers')}, gradio {env.get('gradio')}",
                 f"{'check':<20} {'result':<10} {'seconds':>8} {'peak GPU MiB':>13}  summary"]
        for check in self.checks:
            verdict = {True: "PASS", False: "FAIL", None: "not judged"}[check.passed]
            peak = "-" if check.peak_gpu_mib is None else f"{check.peak_gpu_mib:,.0f}"
            lines.append(f"{check.name:<20} {verdict:<10} {check.seconds:>8.1f} {peak:>13}  {check.summary}")
        failed = self.failed
        lines.append(f"{len(self.checks) - len(failed)} of {len(self.checks)} checks without failure"
                     + (f"; failed: {', '.join(c.name for c in failed)}" if failed else ""))
        return "\n".join(lines)
